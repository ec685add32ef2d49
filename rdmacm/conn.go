package rdmacm

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The high-level layer: Dial and Listen return connected RC QPs, as
// librdmacm's rdma_create_ep/rdma_connect/rdma_get_request do, with each
// connection's events on its own channel.

// Migrate is rdma_migrate_id: the ID's later events go to ec (events
// already queued stay where they are).
func (id *ID) Migrate(ec *EventChannel) {
	id.cm.mu.Lock()
	id.ec = ec
	id.cm.mu.Unlock()
}

// Endpoint says how Dial and Listen make QPs.
type Endpoint struct {
	PD    *verbs.PD        // must be on the device the route picks
	QP    verbs.QPInitAttr // Type RC if zero
	Param ConnParam        // sent in the REQ (Dial) or REP (Listener.Accept)
	Src   netip.Addr       // Dial: source address; zero picks one
	// Prepare, if set, is called with the new QP (in INIT) before the
	// connection is requested (Dial) or accepted (Listener.Accept): post
	// receives here, as a librdmacm program does between rdma_create_qp
	// and rdma_connect/rdma_accept. The peer may SEND as soon as it has
	// the REP or the RTU, before Dial or Accept returns; a receive posted
	// only then can be too late, and the SEND meets an RNR NAK (fatal to
	// a peer whose rnr_retry is 0). An error from Prepare ends Dial, or
	// rejects the request and ends Accept, with that error.
	Prepare func(qp *verbs.QP) error
}

// Conn is a connection made by Dial or Listener.Accept.
type Conn struct {
	ID          *ID
	QP          *verbs.QP
	PrivateData []byte        // what the peer sent in its REQ or REP
	Events      *EventChannel // the connection's later events (DISCONNECTED, ...)
}

// Close disconnects (sending the DREQ, or the DREP if the peer disconnected
// first) and destroys the ID and its QP without waiting for the peer.
//
// Errors: ID.Destroy's (destroying the QP).
func (c *Conn) Close() error {
	c.ID.Disconnect()
	err := c.ID.Destroy()
	c.Events.Close()
	return err
}

// next waits for the next event on ec and checks it is want. Another
// event is an error that wraps an errno as librdmacm's synchronous calls
// return one (ucma_complete): ECONNREFUSED for REJECTED, else the
// negative status's errno (UNREACHABLE: ETIMEDOUT), else ECONNREFUSED.
func next(ctx context.Context, ec *EventChannel, want EventType) (Event, error) {
	e, err := ec.Get(ctx)
	if err != nil {
		return e, err
	}
	if e.Type != want {
		errno := syscall.ECONNREFUSED
		if e.Type != EventRejected && e.Status < 0 {
			errno = syscall.Errno(-e.Status)
		}
		switch {
		case e.Err == nil:
			return e, &verbs.Error{Op: "rdmacm", Detail: fmt.Sprintf("%v (status %d) instead of %v", e.Type, e.Status, want), Err: errno}
		case errors.As(e.Err, new(syscall.Errno)):
			return e, &verbs.Error{Op: "rdmacm", Detail: fmt.Sprintf("%v instead of %v", e.Type, want), Err: e.Err}
		}
		return e, &verbs.Error{Op: "rdmacm", Detail: fmt.Sprintf("%v instead of %v", e.Type, want), Err: withErrno{e.Err, errno}}
	}
	return e, nil
}

// Dial connects an RC QP to dst in port space TCP: address and route
// resolution, QP creation, REQ/REP/RTU. On error nothing is left behind.
//
// The connection leaves from Endpoint.Src if set, else from the device of
// Endpoint.PD, where its QP must be: from the source address that
// device's routes give for dst (a device added with AddRoutedDevice,
// whose Router answers as rdma_resolve_addr asks the kernel), or its
// address of dst's family, or dst itself when the device holds it. So a
// CM that serves both ends of a connection dials from the PD's device,
// not from the one that holds dst.
//
// Errors: EINVAL for a nil Endpoint.PD, or one on a device the CM does
// not serve; the PD's device's route error (ENETUNREACH, ...) or
// EADDRNOTAVAIL when it has no address to reach dst from; ResolveAddr's,
// ResolveRoute's, CreateQP's and Connect's; for an ADDR_ERROR,
// ROUTE_ERROR, UNREACHABLE or CONNECT_ERROR event the errno of its status
// (UNREACHABLE: ETIMEDOUT), for REJECTED ECONNREFUSED, as librdmacm's
// synchronous rdma_connect returns them (ucma_complete); Prepare's error.
// When ctx ends first, ctx.Err() wrapped with the peer and how far the
// connection got (resolving the address or the route, REQ sent n times
// with no REP, REQ acknowledged by an MRA but not accepted): errors.Is
// still matches context.DeadlineExceeded or context.Canceled.
func (cm *CM) Dial(ctx context.Context, dst netip.AddrPort, ep Endpoint) (*Conn, error) {
	if ep.PD == nil {
		return nil, &verbs.Error{Op: fmt.Sprintf("rdmacm: dial %v", dst), Detail: "Endpoint.PD is nil: the connection's QP is made on it", Err: syscall.EINVAL}
	}
	ec := cm.CreateEventChannel()
	id, err := cm.CreateID(ec, PSTCP)
	if err != nil {
		return nil, err
	}
	stage := "choosing the source address"
	c, err := func() (*Conn, error) {
		timeout := time.Duration(0)
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		src := ep.Src
		if !src.IsValid() {
			var err error
			if src, err = cm.dialSource(ep.PD, dst); err != nil {
				return nil, err
			}
		}
		stage = "resolving the address"
		if err := id.ResolveAddr(src, dst, timeout); err != nil {
			return nil, err
		}
		if _, err := next(ctx, ec, EventAddrResolved); err != nil {
			return nil, err
		}
		stage = "resolving the route"
		if err := id.ResolveRoute(timeout); err != nil {
			return nil, err
		}
		if _, err := next(ctx, ec, EventRouteResolved); err != nil {
			return nil, err
		}
		stage = "creating the QP"
		init := ep.QP
		if init.Type == 0 {
			init.Type = verbs.RC
		}
		qp, err := id.CreateQP(ep.PD, init)
		if err != nil {
			return nil, err
		}
		if ep.Prepare != nil {
			if err := ep.Prepare(qp); err != nil {
				return nil, err
			}
		}
		if err := id.Connect(ep.Param); err != nil {
			return nil, err
		}
		stage = "" // id.dialStage says
		e, err := next(ctx, ec, EventEstablished)
		if err != nil {
			return nil, err
		}
		return &Conn{ID: id, QP: qp, PrivateData: e.PrivateData, Events: ec}, nil
	}()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Say whom and what the caller gave up waiting for: a bare
			// "context deadline exceeded" names neither.
			err = &verbs.Error{Op: fmt.Sprintf("rdmacm: dial %v%s", dst, id.dialFrom()), Detail: id.dialStage(stage), Err: err}
		}
		id.Destroy()
		ec.Close()
		return nil, err
	}
	return c, nil
}

// dialFrom says where a Dial's ID leaves from, " from ADDR (DEV)", once
// it knows.
func (id *ID) dialFrom() string {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if id.ag == nil || !id.src.Addr().IsValid() || id.src.Addr().IsUnspecified() {
		return ""
	}
	return fmt.Sprintf(" from %v (%s)", id.src.Addr(), id.ag.dev.Name())
}

// dialStage says how far a Dial got: stage, or once the REQ is sent, what
// came of it.
func (id *ID) dialStage(stage string) string {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	switch id.state {
	case stReqSent:
		sent := "once"
		if id.retries > 0 {
			sent = fmt.Sprintf("%d times", id.retries+1)
		}
		if id.mraRcvd {
			return "REQ sent " + sent + "; the peer's CM acknowledged it (MRA) but its consumer has not accepted it yet"
		}
		return fmt.Sprintf("REQ sent %s, no REP yet (is a server listening at %v?)", sent, id.dst)
	case stRepRcvd, stEstablished:
		return "REP received, completing the connection"
	}
	if stage == "" {
		return fmt.Sprintf("connection ended (state %v)", id.state)
	}
	return stage
}

// dialSource chooses the source address of a Dial without
// Endpoint.Src: one of the PD's device, since the QP is made there.
func (cm *CM) dialSource(pd *verbs.PD, dst netip.AddrPort) (netip.Addr, error) {
	dev := pd.Device()
	d := dst.Addr().Unmap()
	cm.mu.Lock()
	var a *agent
	for _, x := range cm.agents {
		if x.dev == dev {
			a = x
		}
	}
	if a == nil {
		cm.mu.Unlock()
		return netip.Addr{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: dial %v", dst), Device: dev.Name(), Err: syscall.EINVAL,
			Detail: fmt.Sprintf("Endpoint.PD is on device %s, which this CM does not serve (AddDevice or AddRoutedDevice it)", dev.Name())}
	}
	if cm.agentFor(d) == a { // a loopback connection, as ResolveAddr makes it
		cm.mu.Unlock()
		return d, nil
	}
	r, src := a.router, srcOf(a, d)
	cm.mu.Unlock()
	if r != nil { // as rdma_resolve_addr asks the routing table (outside mu: it may ask the kernel)
		s, err := r.RouteTo(d)
		if err != nil {
			return netip.Addr{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: dial %v", dst), Device: dev.Name(), Err: err,
				Detail: fmt.Sprintf("Endpoint.PD's device %s does not reach it (make the PD on the device that does, or set Endpoint.Src)", dev.Name())}
		}
		return s.Unmap(), nil
	}
	if !src.IsValid() {
		return netip.Addr{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: dial %v", dst), Device: dev.Name(), Err: syscall.EADDRNOTAVAIL,
			Detail: fmt.Sprintf("Endpoint.PD's device %s has no address of that family to connect from (roce gids lists them)", dev.Name())}
	}
	return src, nil
}

// Listener accepts connections on one port of port space TCP.
type Listener struct {
	id     *ID
	ec     *EventChannel
	ep     Endpoint
	wake   chan struct{} // a token when ec or a pending connection's channel has news
	closed chan struct{} // closed by Close
	once   sync.Once

	mu      sync.Mutex                     // serializes Accept's work; held while calling into the CM
	pending map[*EventChannel]*pendingConn // guarded by mu: accepted, awaiting the RTU
	peak    int                            // guarded by mu: for shrunk
	order   list.List                      // guarded by mu: the pending connections, oldest first
	done    []*Conn                        // guarded by mu: established, found while making room; returned first

	rmu   sync.Mutex                 // guards ready; taken with the CM's lock held
	ready map[*EventChannel]struct{} // guarded by rmu: channels with news
}

// pendingConn is a connection Accept has accepted (REP sent) whose RTU
// has not come yet.
type pendingConn struct {
	id   *ID
	qp   *verbs.QP
	ec   *EventChannel
	pd   []byte // the REQ's private data
	elem *list.Element
}

// Listen listens on addr (the unspecified address: every device) and makes
// each accepted connection's QP as ep says. Its backlog is
// Options.MaxBacklog (ID.Listen's, 1024 by default).
//
// Errors: EADDRINUSE if the port has a listener; EADDRNOTAVAIL if no
// device has addr; ESHUTDOWN after Close.
func (cm *CM) Listen(addr netip.AddrPort, ep Endpoint) (*Listener, error) {
	l := &Listener{ep: ep, wake: make(chan struct{}, 1), closed: make(chan struct{}),
		pending: map[*EventChannel]*pendingConn{}, ready: map[*EventChannel]struct{}{}}
	ec := cm.CreateEventChannel()
	ec.notify = l.notify
	id, err := cm.CreateID(ec, PSTCP)
	if err == nil {
		if err = id.BindAddr(addr); err == nil {
			err = id.Listen(0)
		}
		if err != nil {
			id.Destroy()
		}
	}
	if err != nil {
		ec.Close()
		return nil, err
	}
	l.id, l.ec = id, ec
	return l, nil
}

// notify records that ec has news and wakes an Accept. Called with the
// CM's lock held.
func (l *Listener) notify(ec *EventChannel) {
	l.rmu.Lock()
	l.ready[ec] = struct{}{}
	l.rmu.Unlock()
	l.poke()
}

func (l *Listener) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// Accept returns the next connection to complete. For each connection
// request it creates the QP on the listener's PD, calls the Endpoint's
// Prepare and accepts (sends the REP) without waiting: the connections
// whose RTU has not come yet wait together, and Accept returns whichever
// is established first, so a peer that never sends its RTU delays no
// one. Such a connection is destroyed when its REP has been sent
// Options.MaxRetries+1 times (cm_rtu_timeouts in CM.Counters), or sooner
// when more than the listener's backlog (Options.MaxBacklog, default 1024)
// wait at once: the oldest is given up for the newest (counted as
// cm_listener_evictions), as FreeBSD's SYN cache drops its oldest entry
// (syncache_insert) rather than every new SYN, so that a flood of requests
// that never complete cannot keep out a peer that does. A request that
// cannot be served (its QP or REP fails, the peer rejects or disconnects
// it) is rejected or destroyed, and Accept goes on.
//
// Requests and pending connections advance only while some goroutine is
// in Accept; until then at most the backlog of requests wait, and more
// are dropped for their senders to retry (ID.Listen).
//
// Errors: ctx.Err() when ctx ends (pending connections stay for the next
// Accept); net.ErrClosed after Close; the error of Endpoint.Prepare, after
// rejecting that request.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		c, err := l.step()
		if c != nil || err != nil {
			return c, err
		}
		select {
		case <-l.wake:
		case <-l.closed:
			return nil, net.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// step does what is ready: it hands out a connection whose ESTABLISHED has
// come, drops those that failed, and starts accepting each new request.
func (l *Listener) step() (*Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		return nil, net.ErrClosed
	default:
	}
	if len(l.done) > 0 {
		c := l.done[0]
		l.done[0] = nil
		if l.done = l.done[1:]; len(l.done) == 0 {
			l.done = nil
		}
		l.poke()
		return c, nil
	}
	l.rmu.Lock()
	ready := make([]*EventChannel, 0, len(l.ready))
	for ec := range l.ready {
		ready = append(ready, ec)
	}
	if len(l.ready) < minShrink {
		clear(l.ready)
	} else {
		l.ready = map[*EventChannel]struct{}{} // let a burst's buckets go
	}
	l.rmu.Unlock()
	for i, ec := range ready {
		p := l.pending[ec]
		if p == nil {
			continue // the listener's own, or handed out or dropped already
		}
		if c, _ := l.advance(p); c != nil {
			// Keep what is left for the next Accept.
			l.rmu.Lock()
			for _, r := range ready[i+1:] {
				l.ready[r] = struct{}{}
			}
			l.rmu.Unlock()
			l.poke()
			return c, nil
		}
	}
	for {
		e, ok, err := l.ec.tryGet()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		if e.Type != EventConnectRequest || e.ID == l.id {
			continue
		}
		if err := l.start(e); err != nil {
			return nil, err
		}
	}
}

// advance reads a pending connection's events: ESTABLISHED hands it out
// (c), an end (UNREACHABLE for want of an RTU, REJECTED, DISCONNECTED,
// device removal) destroys it; either way it is no longer pending (gone).
// Called with l.mu held.
func (l *Listener) advance(p *pendingConn) (c *Conn, gone bool) {
	for {
		e, ok, _ := p.ec.tryGet()
		if !ok {
			return nil, false
		}
		switch e.Type {
		case EventEstablished:
			l.forget(p)
			p.ec.setNotify(nil) // its later events are the Conn's
			return &Conn{ID: p.id, QP: p.qp, PrivateData: p.pd, Events: p.ec}, true
		case EventUnreachable, EventRejected, EventDisconnected, EventConnectError, EventDeviceRemoval:
			l.drop(p)
			return nil, true
		}
	}
}

// start accepts request e: a QP, Prepare, the REP. Only Prepare's error
// ends Accept; any other failure rejects the request. Called with l.mu
// held.
func (l *Listener) start(e Event) error {
	c := e.ID
	ec := l.id.cm.CreateEventChannel()
	ec.notify = l.notify
	c.Migrate(ec)
	init := l.ep.QP
	if init.Type == 0 {
		init.Type = verbs.RC
	}
	qp, err := c.CreateQP(l.ep.PD, init)
	if err == nil && l.ep.Prepare != nil {
		if err := l.ep.Prepare(qp); err != nil {
			c.Reject(nil)
			c.Destroy()
			ec.Close()
			return err
		}
	}
	if err != nil {
		c.Reject(nil)
		c.Destroy()
		ec.Close()
		return nil
	}
	for max := l.id.backlogOf(); l.order.Len() >= max; {
		oldest := l.order.Front().Value.(*pendingConn)
		// Its RTU may have come since the last look: then it is the
		// next connection to hand out, not one to give up.
		c, gone := l.advance(oldest)
		if c != nil {
			l.done = append(l.done, c)
		}
		if gone {
			continue
		}
		oldest.id.countEviction()
		l.drop(oldest)
	}
	p := &pendingConn{id: c, qp: qp, ec: ec, pd: e.PrivateData}
	p.elem = l.order.PushBack(p)
	l.pending[ec] = p // before the REP: its RTU may come at once
	if err := c.Accept(l.ep.Param); err != nil {
		c.Reject(nil)
		l.drop(p)
	}
	return nil
}

// forget removes p from the pending connections. Called with l.mu held.
func (l *Listener) forget(p *pendingConn) {
	delete(l.pending, p.ec)
	l.pending = shrunk(l.pending, &l.peak)
	l.order.Remove(p.elem)
}

// drop gives up pending connection p. Called with l.mu held.
func (l *Listener) drop(p *pendingConn) {
	l.forget(p)
	p.id.Destroy()
	p.ec.Close()
}

// Close stops listening: the listening ID, the requests not yet accepted
// (rejected) and the connections still waiting for their RTU are
// destroyed, and any Accept returns net.ErrClosed. Connections Accept has
// returned are the caller's.
//
// Errors: ID.Destroy's, of the listening ID (nil: it has no QP).
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	err := l.id.Destroy()
	l.ec.Close()
	l.mu.Lock()
	for l.order.Len() > 0 {
		l.drop(l.order.Front().Value.(*pendingConn))
	}
	for _, c := range l.done { // established, but never returned
		c.Close()
	}
	l.done = nil
	l.mu.Unlock()
	return err
}

// withErrno is a cause that carries no errno (an event's error, a
// context's end) together with the errno the operation returns for it:
// errors.Is matches both.
type withErrno struct {
	err   error
	errno syscall.Errno
}

func (w withErrno) Error() string   { return w.err.Error() + ": " + w.errno.Error() }
func (w withErrno) Unwrap() []error { return []error{w.err, w.errno} }
