package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Address resolution past the route, and what a long wait is waiting for.
//
// Linux's rdma_resolve_addr does not stop at the route: addr_resolve
// looks the route's next hop up in the neighbour table (dst_fetch_ha) and,
// while it is unresolved, asks for it (neigh_event_send) and tries again on
// each neighbour update until the caller's timeout, then reports
// RDMA_CM_EVENT_ADDR_ERROR with status -ETIMEDOUT (drivers/infiniband/core/
// addr.c, process_one_req; cma.c, addr_handler, which puts the ID back in
// ADDR_BOUND). rping and librdmacm's rdma_create_ep give it 2000 ms. A
// device whose Router also resolves next hops (host.Device) gets the same
// here: ADDR_RESOLVED only once the next hop's MAC is known, else
// ADDR_ERROR -110 whose error names the route and the silent next hop.

// DefaultResolveTimeout is ResolveAddr's timeout when it is given none:
// rping's and rdma_create_ep's 2000 ms.
const DefaultResolveTimeout = 2 * time.Second

// noticeAfter is how long an ID waits for an answer before Options.Logf
// hears what it is waiting for.
const noticeAfter = 2 * time.Second

// A NextHopResolver is a Router that also resolves the link-layer address
// of the next hop toward an address, as rdma_resolve_addr does before
// ADDR_RESOLVED. host.Device is one.
type NextHopResolver interface {
	// ResolveNextHop returns the route's gateway toward dst (invalid when
	// dst is on-link) once the next hop's MAC is known, or why not before
	// ctx ends.
	ResolveNextHop(ctx context.Context, dst netip.Addr) (gateway netip.Addr, err error)
}

// A PathReporter says why packets to an address could not be sent (no
// route, a next hop that does not answer, a RoCE v1 peer behind a router),
// or nil. host.Device is one; the CM adds its answer to what it says about
// an unanswered request.
type PathReporter interface {
	PathError(dst netip.Addr, v wire.Version) error
}

// queryAddr resolves dst's next hop on the ID's device in the background
// and then delivers ADDR_RESOLVED or ADDR_ERROR. Called with cm.mu held,
// after ResolveAddr chose the device and the source.
func (id *ID) queryAddr(nr NextHopResolver, dst netip.Addr, timeout time.Duration) {
	cm := id.cm
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	id.addrQuery = cancel
	cm.queries.Add(1)
	go func() {
		defer cm.queries.Done()
		gw, err := nr.ResolveNextHop(ctx, dst)
		cancel()
		cm.mu.Lock()
		defer cm.mu.Unlock()
		if id.addrQuery == nil || cm.closed || id.state == stDestroyed {
			return // canceled
		}
		id.addrQuery = nil
		if err != nil {
			// addr_handler: the ID goes back to ADDR_BOUND with no
			// destination, and ADDR_ERROR carries the status.
			id.dst = netip.AddrPort{}
			status := -int(syscall.ETIMEDOUT)
			var errno syscall.Errno
			if errors.As(err, &errno) {
				status = -int(errno)
			}
			id.emit(Event{Type: EventAddrError, ID: id, Status: status,
				Err: &verbs.Error{Op: fmt.Sprintf("rdmacm: resolve_addr %v", dst), Err: err}})
			return
		}
		id.gateway = gw
		id.emit(Event{Type: EventAddrResolved, ID: id})
	}()
}

// cancelQuery stops a running address query; no event follows. Called
// with cm.mu held.
func (id *ID) cancelQuery() {
	if id.addrQuery != nil {
		id.addrQuery()
		id.addrQuery = nil
	}
}

// routeType is cma_route_gid_type: a route through a gateway is an IP
// network, which only RoCE v2 crosses, and a port that has RoCE v2 takes
// it whatever default_roce_mode says; otherwise the default. A RoCE v1
// port behind a router cannot reach the peer at all: the error says so.
// Called with cm.mu held.
func (id *ID) routeType(mode verbs.GIDType) (verbs.GIDType, error) {
	if !id.gateway.IsValid() || mode == verbs.GIDTypeRoCEv2 {
		return mode, nil
	}
	if _, ok := id.ag.gidIndex(gidOf(id.src.Addr()), verbs.GIDTypeRoCEv2); ok {
		return verbs.GIDTypeRoCEv2, nil
	}
	if err := id.pathError(verbs.GIDTypeRoCEv1); err != nil {
		return mode, &verbs.Error{Op: "rdmacm: resolve_route", Err: err}
	}
	return mode, &verbs.Error{Op: "rdmacm: resolve_route", Device: id.ag.dev.Name(), Err: syscall.ENETUNREACH,
		Detail: fmt.Sprintf("%v is reached via %v, and %s port 1 has no RoCE v2 GID for %v: RoCE v1 crosses no router",
			id.dst.Addr(), id.gateway, id.ag.dev.Name(), id.src.Addr())}
}

// pathError asks the device's router why packets of RoCE version t to the
// peer could not be sent, if it knows. Called with cm.mu held.
func (id *ID) pathError(t verbs.GIDType) error {
	if id.ag == nil || !id.dst.IsValid() {
		return nil
	}
	pr, ok := id.ag.router.(PathReporter)
	if !ok {
		return nil
	}
	v := wire.RoCEv2
	if t == verbs.GIDTypeRoCEv1 {
		v = wire.RoCEv1
	}
	return pr.PathError(id.dst.Addr(), v)
}

// armNotice starts the timer that tells Options.Logf what the ID waits for
// if its MAD goes unanswered for noticeAfter (a REQ is resent for about a
// minute before UNREACHABLE). Called with cm.mu held, from sendArm.
func (id *ID) armNotice() {
	id.stopNotice()
	if id.cm.opts.Logf == nil {
		return
	}
	sent, msg := time.Now(), id.msg
	// On the CM's timer queue (timers.go), not a timer of its own: a flood
	// of REQs must not leave a runtime timer per ID.
	id.notice = id.cm.after(noticeAfter, func() {
		cm := id.cm
		id.notice = nil
		if id.msg == nil || &id.msg[0] != &msg[0] {
			return
		}
		if s := id.waitingFor(time.Since(sent)); s != "" {
			cm.opts.Logf("%s", s)
		}
	})
}

// stopNotice stops the notice timer. Called with cm.mu held.
func (id *ID) stopNotice() {
	id.cm.stopTimer(id.notice)
	id.notice = nil
}

// waitingFor says what the ID has been waiting for, for how long, and
// until when. Called with cm.mu held.
func (id *ID) waitingFor(d time.Duration) string {
	var what string
	switch {
	case id.state == stReqSent && id.ps == PSUDP || id.state == stReqSent && id.qp != nil && id.qp.Type() == verbs.UD:
		what = fmt.Sprintf("%v to answer the UD service request (SIDR_REQ)", id.dst)
	case id.state == stReqSent:
		what = fmt.Sprintf("%v to answer the connection request (REQ)", id.dst)
	case id.state == stRepSent:
		what = fmt.Sprintf("%v to confirm the connection (RTU for our REP)", id.dst)
	case id.state == stDreqSent:
		what = fmt.Sprintf("%v to answer the disconnect request (DREQ)", id.dst)
	default:
		return ""
	}
	tries := id.cm.opts.MaxRetries + 1
	s := fmt.Sprintf("waiting for %s: %v so far; sent every %v, %d times at most (about %v in all)",
		what, d.Round(100*time.Millisecond), id.rto.Round(100*time.Millisecond), tries,
		(time.Duration(tries) * id.rto).Round(time.Second))
	if id.mraRcvd {
		return s + "; the peer's CM acknowledged it (MRA): its program has not answered yet"
	}
	if err := id.pathError(id.gidType); err != nil {
		return s + ": " + err.Error()
	}
	if id.state == stReqSent {
		s += fmt.Sprintf("; no answer yet: is a server listening at %v, and its device running?", id.dst)
	}
	return s
}
