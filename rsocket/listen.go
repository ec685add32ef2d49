package rsocket

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/goroce/goroce/rdmacm"
)

// defaultBacklog bounds a listener's connections not yet accepted.
const defaultBacklog = 128

// ListenConfig makes listening rsockets, as rsocket, rbind and rlisten do.
type ListenConfig struct {
	// CM receives the connection requests; a listener on an unspecified
	// address takes them on every device of the CM. Required.
	CM *rdmacm.CM
	// Backlog bounds the connections accepted by the protocol but not yet
	// by Accept (those whose RTU has not come count too); a request beyond
	// it is rejected. 0: 128.
	Backlog int
	// Options are the socket options each accepted connection gets.
	Options
	// Logf, if set, is told of each connection request turned away and
	// why (a bad version, the backlog full, no resources).
	Logf func(format string, args ...any)
}

// Listen listens on address through cm with the default options; see
// ListenConfig.Listen.
func Listen(cm *rdmacm.CM, network, address string) (*Listener, error) {
	lc := ListenConfig{CM: cm}
	return lc.Listen(context.Background(), network, address)
}

// Listener accepts rsocket connections.
type Listener struct {
	cm      *rdmacm.CM
	id      *rdmacm.ID
	ec      *rdmacm.EventChannel
	backlog int
	logf    func(format string, args ...any)
	addr    Addr
	wg      sync.WaitGroup // the request goroutine
	ready   chan *Conn     // established, for Accept
	done    chan struct{}  // closed by Close

	mu      sync.Mutex
	p       params             // guarded by mu: the options of new connections
	closed  bool               // guarded by mu
	pending map[*Conn]struct{} // guarded by mu: REP sent, no RTU yet
	queued  int                // guarded by mu: in ready
}

// Listen listens on address ("host:port"; an empty host or an unspecified
// address listens on every address of every device of the CM, IPv4 and
// IPv6 unless the network is "rsocket4"/"tcp4") as rlisten does: each
// connection request whose connection data is version 1 gets its QP and
// buffers and is accepted at once (the REP carries this side's
// connection data), and Accept returns it once established. A request of
// another version is rejected, as rsocket.c rejects it.
//
// Errors, wrapped in a *net.OpError: Options' EINVAL; an unknown network
// (EAFNOSUPPORT) or a bad address (EINVAL); EADDRINUSE if the port has a
// listener, EADDRNOTAVAIL if no device has the address.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (*Listener, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: "rsocket", Addr: stringAddr(address), Err: err}
	}
	if lc.CM == nil {
		return nil, opErr(fmt.Errorf("rsocket: ListenConfig.CM is nil: the CM receives the connection requests: %w", syscall.EINVAL))
	}
	p, err := lc.Options.resolve()
	if err != nil {
		return nil, opErr(err)
	}
	if lc.Backlog < 0 {
		return nil, opErr(fmt.Errorf("rsocket: ListenConfig.Backlog %d: valid 0 (default %d) or more: %w", lc.Backlog, defaultBacklog, syscall.EINVAL))
	}
	at, err := resolve(ctx, network, address, true)
	if err != nil {
		return nil, opErr(err)
	}
	l := &Listener{cm: lc.CM, p: p, backlog: lc.Backlog, logf: lc.Logf, done: make(chan struct{}), pending: map[*Conn]struct{}{}}
	if l.backlog == 0 {
		l.backlog = defaultBacklog
	}
	l.ready = make(chan *Conn, l.backlog)
	l.ec = lc.CM.CreateEventChannel()
	if l.id, err = lc.CM.CreateID(l.ec, rdmacm.PSTCP); err == nil {
		if err = l.id.BindAddr(at); err == nil {
			err = l.id.Listen(l.backlog)
		}
		if err != nil {
			l.id.Destroy()
		}
	}
	if err != nil {
		l.ec.Close()
		return nil, opErr(err)
	}
	l.addr = Addr{l.id.LocalAddr()}
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

func (l *Listener) log(format string, args ...any) {
	if l.logf != nil {
		l.logf(format, args...)
	}
}

// serve takes the connection requests (rs_accept) until Close.
func (l *Listener) serve() {
	defer l.wg.Done()
	for {
		e, err := l.ec.Get(context.Background())
		if err != nil {
			return
		}
		if e.Type == rdmacm.EventConnectRequest {
			l.request(e)
		}
	}
}

// request answers one CONNECT_REQUEST.
func (l *Listener) request(e rdmacm.Event) {
	id := e.ID
	from := id.RemoteAddr()
	refuse := func(why string, args ...any) {
		l.log("rsocket: refused a connection from %v: "+why, append([]any{from}, args...)...)
		id.Reject(nil)
		id.Destroy()
	}
	d, err := parseConnData(e.PrivateData)
	switch {
	case err != nil:
		refuse("%v", err)
		return
	case d.version != protoVersion:
		refuse("connection data version %d: rsocket's stream protocol is version %d", d.version, protoVersion)
		return
	}
	l.mu.Lock()
	full := l.closed || len(l.pending)+l.queued >= l.backlog
	l.mu.Unlock()
	if full {
		refuse("the listener's backlog of %d connections is full", l.backlog)
		return
	}
	ec := l.cm.CreateEventChannel()
	id.Migrate(ec)
	l.mu.Lock()
	p := l.p
	l.mu.Unlock()
	c, err := newConn(id, p)
	if err == nil {
		err = c.saveConnData(e.PrivateData)
		if err != nil {
			c.freeMemory()
		}
	}
	if err != nil {
		refuse("%v", err)
		ec.Close()
		return
	}
	c.ln = l
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		refuse("the listener is closed")
		ec.Close()
		c.freeMemory()
		return
	}
	l.pending[c] = struct{}{}
	l.mu.Unlock()
	c.watchEvents(ec) // before the REP: ESTABLISHED may come at once
	// rs_accept: the REQ's parameters back, with this side's connection data.
	err = id.Accept(rdmacm.ConnParam{PrivateData: c.connData(), RetryCount: e.Param.RetryCount,
		RNRRetryCount: e.Param.RNRRetryCount, FlowControl: e.Param.FlowControl})
	if err != nil {
		l.log("rsocket: accepting a connection from %v: %v", from, err)
		if l.failed(c, rdmacm.Event{}) {
			c.SetLinger(0)
			c.Close()
		}
	}
}

// established hands c to Accept, if it was pending.
func (l *Listener) established(c *Conn) {
	c.begin()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[c]; !ok || l.closed {
		return // Close has it
	}
	delete(l.pending, c)
	l.queued++
	l.ready <- c // never blocks: pending+queued stays within the backlog
}

// failed forgets c if it was pending (accepted, not yet established) and
// reports whether it did; the caller then destroys it.
func (l *Listener) failed(c *Conn, e rdmacm.Event) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.pending[c]; !ok {
		return false
	}
	delete(l.pending, c)
	if e.Type != 0 || e.Err != nil {
		l.log("rsocket: a connection from %v ended before it was established: %v", c.raddr, e)
	}
	return true
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.AcceptContext(context.Background())
	if err != nil {
		return nil, err
	}
	return c, nil
}

// AcceptContext waits for the next connection until ctx ends.
//
// Errors, wrapped in a *net.OpError: net.ErrClosed after Close;
// ctx.Err().
func (l *Listener) AcceptContext(ctx context.Context) (*Conn, error) {
	select {
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: net.ErrClosed}
	default:
	}
	select {
	case c := <-l.ready:
		l.mu.Lock()
		l.queued--
		l.mu.Unlock()
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: net.ErrClosed}
	case <-ctx.Done():
		return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: ctx.Err()}
	}
}

// SetOptions changes the options of the connections accepted from now on,
// as rsetsockopt on a listening rsocket does for the sockets it accepts
// later (rstream sets another inline size for its bandwidth tests).
//
// Errors: Options' EINVAL.
func (l *Listener) SetOptions(o Options) error {
	p, err := o.resolve()
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.p = p
	l.mu.Unlock()
	return nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.addr }

// AddrPort is Addr as a netip.AddrPort.
func (l *Listener) AddrPort() netip.AddrPort { return l.addr.AddrPort }

// Close stops listening: the connections not yet accepted are closed
// (those established, abortively), and Accept returns net.ErrClosed.
// Connections Accept returned are the caller's.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return &net.OpError{Op: "close", Net: "rsocket", Addr: l.addr, Err: net.ErrClosed}
	}
	l.closed = true
	close(l.done)
	pending := make([]*Conn, 0, len(l.pending))
	for c := range l.pending {
		pending = append(pending, c)
	}
	clear(l.pending)
	l.mu.Unlock()
	err := l.id.Destroy()
	l.ec.Close()
	l.wg.Wait()
	for _, c := range pending {
		c.SetLinger(0)
		c.Close()
	}
	for {
		select {
		case c := <-l.ready:
			c.SetLinger(0)
			c.Close()
			continue
		default:
		}
		break
	}
	return err
}
