package rdmacm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/wire/mad"
)

// EventType is enum rdma_cm_event_type, with librdmacm's values.
type EventType int

// Event types.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
	"CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
	"DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE",
	"TIMEWAIT_EXIT",
}

// String returns the name rdma_event_str gives, such as
// "RDMA_CM_EVENT_CONNECT_REQUEST".
func (t EventType) String() string {
	if t >= 0 && int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return fmt.Sprintf("RDMA_CM_EVENT(%d)", int(t))
}

// PortSpace is an rdma_cm port space (enum rdma_port_space, low byte).
type PortSpace = mad.PortSpace

// Port spaces.
const (
	PSTCP = mad.PortSpaceTCP // RC connections
	PSUDP = mad.PortSpaceUDP // UD, resolved with SIDR
	PSIB  = mad.PortSpaceIB  // RC or UD
)

// ConnParam is struct rdma_conn_param.
type ConnParam struct {
	// PrivateData goes in the REQ (at most 56 bytes: the IP CM header takes
	// 36 of the REQ's 92), REP (196) or, for Reject, REJ (148). In events
	// it is the peer's whole private-data field after any IP CM header.
	PrivateData        []byte
	ResponderResources uint8 // RDMA READ/atomic requests this side accepts
	InitiatorDepth     uint8 // RDMA READ/atomic requests this side issues
	RetryCount         uint8 // transport retries, 0-7 (Connect only)
	RNRRetryCount      uint8 // RNR NAK retries, 0-7, 7 = infinite
	// FlowControl is rdma_conn_param.flow_control: the End-to-End Flow
	// Control bit of the REQ (Connect) or REP (Accept), which the kernel's
	// cma.c copies from it (IBA Vol 1 §12.7.26: whether this side's
	// receive queue generates end-to-end credits). librdmacm's rsockets
	// set it; rping does not. goroce's responder sends no AETH credits
	// either way ("credits: invalid"), as rxe.
	FlowControl bool
	// QPNum, in events, is the peer's QP number. For Connect or Accept on
	// an ID without a QP it is this side's, of a QP the caller drives
	// itself (rdma_conn_param.qp_num; see InitQPAttr and Establish).
	QPNum uint32
}

// Event is struct rdma_cm_event.
type Event struct {
	Type EventType
	ID   *ID // the CM ID the event is for; a new ID for CONNECT_REQUEST
	// Listen is the listening ID a CONNECT_REQUEST arrived on.
	Listen *ID
	// Status is librdmacm's status: 0, a negative errno (UNREACHABLE:
	// -ETIMEDOUT) or, for REJECTED, the positive IB CM reject reason.
	Status int
	// Err says what went wrong in words, nil on success (ADDR_CHANGE: which
	// address left which device).
	Err         error
	PrivateData []byte // the peer's private data (REQ, REP, REJ, DREQ, DREP, SIDR_REQ, SIDR_REP); owned by the receiver
	// Param is the peer's side of the connection: from its REQ
	// (CONNECT_REQUEST) or REP (CONNECT_RESPONSE, ESTABLISHED), with READ
	// depths seen from this side (the peer's initiator depth is this
	// side's responder resources) and the peer's QP number.
	Param ConnParam
	// UD is a MULTICAST_JOIN's rdma_ud_param: the group's QPN (0xFFFFFF),
	// Q_Key and AH; Group is the IP group joined (MULTICAST_JOIN, _ERROR).
	UD    UDParam
	Group netip.Addr
}

func (e Event) String() string {
	s := e.Type.String()
	if e.Status != 0 {
		s += fmt.Sprintf(" status %d", e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// EventChannel is struct rdma_event_channel: the queue the events of its CM
// IDs arrive on. Its queue never blocks the CM on a slow consumer; what a
// peer can put in it is bounded by the listeners' backlogs (ID.Listen) and
// by the IDs the consumer keeps.
type EventChannel struct {
	ready chan struct{} // one token while q may be non-empty

	mu     sync.Mutex
	q      []Event // guarded by mu
	closed bool    // guarded by mu
	// notify, if set, is called after each event is queued (with the
	// CM's lock held, not mu): Listener.Accept learns which of its
	// channels has news. Guarded by mu.
	notify func(*EventChannel)
}

func newEventChannel() *EventChannel { return &EventChannel{ready: make(chan struct{}, 1)} }

// push queues e and reports whether it did (not after Close); it never
// blocks.
func (ec *EventChannel) push(e Event) bool {
	ec.mu.Lock()
	if ec.closed {
		ec.mu.Unlock()
		return false
	}
	ec.q = append(ec.q, e)
	notify := ec.notify
	ec.mu.Unlock()
	select {
	case ec.ready <- struct{}{}:
	default:
	}
	if notify != nil {
		notify(ec)
	}
	return true
}

// setNotify sets the function told of each queued event (nil: none).
func (ec *EventChannel) setNotify(f func(*EventChannel)) {
	ec.mu.Lock()
	ec.notify = f
	ec.mu.Unlock()
}

// Get waits for the next event, like rdma_get_cm_event (events need no
// acknowledgement). Reading a CONNECT_REQUEST frees its place in the
// listener's backlog, as ucma_get_event does. After Close it returns
// net.ErrClosed; if ctx ends first, ctx.Err().
func (ec *EventChannel) Get(ctx context.Context) (Event, error) {
	for {
		e, ok, err := ec.tryGet()
		if err != nil || ok {
			return e, err
		}
		select {
		case <-ec.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// tryGet returns the next event if one is queued (ok), or net.ErrClosed.
func (ec *EventChannel) tryGet() (e Event, ok bool, err error) {
	ec.mu.Lock()
	if ec.closed {
		ec.mu.Unlock()
		return Event{}, false, net.ErrClosed
	}
	if len(ec.q) == 0 {
		ec.mu.Unlock()
		return Event{}, false, nil
	}
	e = ec.q[0]
	ec.q[0] = Event{}
	ec.q = ec.q[1:]
	more := len(ec.q) > 0
	if !more {
		ec.q = nil // let a burst's array go
	}
	ec.mu.Unlock()
	if e.Type == EventConnectRequest && e.Listen != nil {
		e.Listen.queued.Add(-1)
	}
	if more {
		select {
		case ec.ready <- struct{}{}:
		default:
		}
	}
	return e, true, nil
}

// takeRequests removes the CONNECT_REQUESTs listener l has queued and
// returns them, freeing their places in its backlog. Called with the
// CM's lock held.
func (ec *EventChannel) takeRequests(l *ID) []Event {
	ec.mu.Lock()
	defer ec.mu.Unlock()
	var out []Event
	kept := ec.q[:0]
	for _, e := range ec.q {
		if e.Type == EventConnectRequest && e.Listen == l {
			out = append(out, e)
			l.queued.Add(-1)
			continue
		}
		kept = append(kept, e)
	}
	clear(ec.q[len(kept):])
	ec.q = kept
	if len(ec.q) == 0 {
		ec.q = nil
	}
	return out
}

// Close discards queued events and makes Get fail, like
// rdma_destroy_event_channel. The ID of each discarded CONNECT_REQUEST,
// which no one has seen, is destroyed (its REQ rejected) and its place in
// the listener's backlog freed, as ucma does for requests not yet
// delivered to user space (ucma_cleanup_ctx_events).
func (ec *EventChannel) Close() {
	ec.mu.Lock()
	q := ec.q
	ec.closed, ec.q, ec.notify = true, nil, nil
	ec.mu.Unlock()
	select {
	case ec.ready <- struct{}{}:
	default:
	}
	for _, e := range q {
		if e.Type == EventConnectRequest && e.Listen != nil {
			e.Listen.queued.Add(-1)
			e.ID.Destroy()
		}
	}
}
