package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
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
func (c *Conn) Close() error {
	c.ID.Disconnect()
	err := c.ID.Destroy()
	c.Events.Close()
	return err
}

// next waits for the next event on ec and checks it is want.
func next(ctx context.Context, ec *EventChannel, want EventType) (Event, error) {
	e, err := ec.Get(ctx)
	if err != nil {
		return e, err
	}
	if e.Type != want {
		if e.Err != nil {
			return e, fmt.Errorf("rdmacm: %v instead of %v: %w", e.Type, want, e.Err)
		}
		return e, fmt.Errorf("rdmacm: %v (status %d) instead of %v: %w", e.Type, e.Status, want, syscall.ECONNREFUSED)
	}
	return e, nil
}

// Dial connects an RC QP to dst in port space TCP: address and route
// resolution, QP creation, REQ/REP/RTU. On error nothing is left behind.
func (cm *CM) Dial(ctx context.Context, dst netip.AddrPort, ep Endpoint) (*Conn, error) {
	ec := cm.CreateEventChannel()
	id, err := cm.CreateID(ec, PSTCP)
	if err != nil {
		return nil, err
	}
	c, err := func() (*Conn, error) {
		timeout := time.Duration(0)
		if d, ok := ctx.Deadline(); ok {
			timeout = time.Until(d)
		}
		if err := id.ResolveAddr(ep.Src, dst, timeout); err != nil {
			return nil, err
		}
		if _, err := next(ctx, ec, EventAddrResolved); err != nil {
			return nil, err
		}
		if err := id.ResolveRoute(timeout); err != nil {
			return nil, err
		}
		if _, err := next(ctx, ec, EventRouteResolved); err != nil {
			return nil, err
		}
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
		e, err := next(ctx, ec, EventEstablished)
		if err != nil {
			return nil, err
		}
		return &Conn{ID: id, QP: qp, PrivateData: e.PrivateData, Events: ec}, nil
	}()
	if err != nil {
		id.Destroy()
		ec.Close()
		return nil, err
	}
	return c, nil
}

// Listener accepts connections on one port of port space TCP.
type Listener struct {
	id *ID
	ec *EventChannel
	ep Endpoint
}

// Listen listens on addr (the unspecified address: every device) and makes
// each accepted connection's QP as ep says.
func (cm *CM) Listen(addr netip.AddrPort, ep Endpoint) (*Listener, error) {
	ec := cm.CreateEventChannel()
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
	return &Listener{id: id, ec: ec, ep: ep}, nil
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// Accept waits for a connection request, creates its QP on the listener's
// PD, calls the Endpoint's Prepare and accepts it, returning once the RTU
// arrives. A request that cannot be served is rejected and Accept waits
// for the next.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	for {
		e, err := l.ec.Get(ctx)
		if err != nil {
			return nil, err
		}
		if e.Type != EventConnectRequest {
			continue
		}
		c := e.ID
		ec := l.id.cm.CreateEventChannel()
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
				return nil, err
			}
		}
		if err == nil {
			err = c.Accept(l.ep.Param)
		}
		if err == nil {
			_, err = next(ctx, ec, EventEstablished)
		}
		if err != nil {
			c.Reject(nil)
			c.Destroy()
			ec.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		return &Conn{ID: c, QP: qp, PrivateData: e.PrivateData, Events: ec}, nil
	}
}

// Close stops listening.
func (l *Listener) Close() error {
	err := l.id.Destroy()
	l.ec.Close()
	return err
}
