package verbs

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// EventType is enum ibv_event_type.
//
//enum:string IBV_EVENT(%d)
type EventType uint8

// Asynchronous events, with ibverbs' values.
const (
	EventCQErr            EventType = 0  // "IBV_EVENT_CQ_ERR"
	EventQPFatal          EventType = 1  // "IBV_EVENT_QP_FATAL"
	EventQPReqErr         EventType = 2  // "IBV_EVENT_QP_REQ_ERR"
	EventQPAccessErr      EventType = 3  // "IBV_EVENT_QP_ACCESS_ERR"
	EventCommEst          EventType = 4  // "IBV_EVENT_COMM_EST"
	EventSQDrained        EventType = 5  // "IBV_EVENT_SQ_DRAINED"
	EventPathMig          EventType = 6  // "IBV_EVENT_PATH_MIG"
	EventPathMigErr       EventType = 7  // "IBV_EVENT_PATH_MIG_ERR"
	EventDeviceFatal      EventType = 8  // "IBV_EVENT_DEVICE_FATAL"
	EventPortActive       EventType = 9  // "IBV_EVENT_PORT_ACTIVE"
	EventPortErr          EventType = 10 // "IBV_EVENT_PORT_ERR"
	EventLIDChange        EventType = 11 // "IBV_EVENT_LID_CHANGE"
	EventPKeyChange       EventType = 12 // "IBV_EVENT_PKEY_CHANGE"
	EventSMChange         EventType = 13 // "IBV_EVENT_SM_CHANGE"
	EventSRQErr           EventType = 14 // "IBV_EVENT_SRQ_ERR"
	EventSRQLimitReached  EventType = 15 // "IBV_EVENT_SRQ_LIMIT_REACHED"
	EventQPLastWQEReached EventType = 16 // "IBV_EVENT_QP_LAST_WQE_REACHED"
	EventClientReregister EventType = 17 // "IBV_EVENT_CLIENT_REREGISTER"
	EventGIDChange        EventType = 18 // "IBV_EVENT_GID_CHANGE"
)

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
