package verbs

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// EventType is enum ibv_event_type.
type EventType uint8

// Asynchronous events, with ibverbs' values.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
)

var eventNames = [...]string{
	"IBV_EVENT_CQ_ERR", "IBV_EVENT_QP_FATAL", "IBV_EVENT_QP_REQ_ERR", "IBV_EVENT_QP_ACCESS_ERR",
	"IBV_EVENT_COMM_EST", "IBV_EVENT_SQ_DRAINED", "IBV_EVENT_PATH_MIG", "IBV_EVENT_PATH_MIG_ERR",
	"IBV_EVENT_DEVICE_FATAL", "IBV_EVENT_PORT_ACTIVE", "IBV_EVENT_PORT_ERR", "IBV_EVENT_LID_CHANGE",
	"IBV_EVENT_PKEY_CHANGE", "IBV_EVENT_SM_CHANGE", "IBV_EVENT_SRQ_ERR", "IBV_EVENT_SRQ_LIMIT_REACHED",
	"IBV_EVENT_QP_LAST_WQE_REACHED", "IBV_EVENT_CLIENT_REREGISTER", "IBV_EVENT_GID_CHANGE",
}

func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("IBV_EVENT(%d)", uint8(t))
}

// AsyncEvent is an asynchronous event, struct ibv_async_event.
type AsyncEvent struct {
	Type   EventType
	QPNum  uint32 // QP events
	Port   int    // port events
	Detail string // why, in words
}

func (e AsyncEvent) String() string {
	s := e.Type.String()
	if e.QPNum != 0 {
		s += fmt.Sprintf(" qp %#x", e.QPNum)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// eventQueue is a FIFO of at most maxAsyncEvents events. Events are rare
// (a QP's errors end it, so each QP reports a handful at most), and the
// kernel's queue for ibv_get_async_event has no bound; but a bound costs
// nothing legitimate, and without one every event a peer can cause (there
// used to be one per bad UC packet) is memory it can make the device hold.
// An event that does not fit is dropped and counted (async_events_dropped);
// the last queued event's Detail says that what follows it was dropped, so
// the reader learns it where the loss is.
type eventQueue struct {
	mu      sync.Mutex
	q       []AsyncEvent // guarded by mu
	closed  bool         // guarded by mu
	full    bool         // guarded by mu: events have been dropped since the queue last had room
	notify  chan struct{}
	dropped *atomic.Uint64 // the port's async_events_dropped
}

func (e *eventQueue) init(dropped *atomic.Uint64) {
	e.notify = make(chan struct{}, 1)
	e.dropped = dropped
}

func (e *eventQueue) post(ev AsyncEvent) {
	e.mu.Lock()
	switch {
	case e.closed:
	case len(e.q) >= maxAsyncEvents:
		e.dropped.Add(1)
		if !e.full {
			e.full = true
			last := &e.q[len(e.q)-1]
			last.Detail += fmt.Sprintf(" [the async event queue is full (%d unread events): the events after this one are dropped and counted in async_events_dropped]", maxAsyncEvents)
		}
	default:
		e.full = false
		e.q = append(e.q, ev)
	}
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// len returns how many events are queued.
func (e *eventQueue) len() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.q)
}

func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *eventQueue) get(ctx context.Context) (AsyncEvent, error) {
	for {
		e.mu.Lock()
		if len(e.q) > 0 {
			ev := e.q[0]
			e.q[0] = AsyncEvent{}
			e.q = e.q[1:]
			if len(e.q) == 0 {
				e.q = nil // let the backing array go
			}
			more := len(e.q) > 0
			e.mu.Unlock()
			if more {
				select {
				case e.notify <- struct{}{}:
				default:
				}
			}
			return ev, nil
		}
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return AsyncEvent{}, net.ErrClosed
		}
		select {
		case <-e.notify:
		case <-ctx.Done():
			return AsyncEvent{}, ctx.Err()
		}
	}
}
