package rsocket

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/rdmacm"
)

// Dialer connects rsockets, as rsocket, rbind and rconnect do.
type Dialer struct {
	// CM makes the connections; its devices are the ones it may use, and
	// address resolution picks one by route (rdmacm.CM.AddRoutedDevice)
	// or by address family, as rdma_resolve_addr does. Required.
	CM *rdmacm.CM
	// LocalAddr, if valid, is bound first (rbind): its address picks the
	// device and the source address, its port (0: any) the CM port.
	LocalAddr netip.AddrPort
	// Options are the socket options set before connecting.
	Options
}

// Dial connects to address through cm with the default options; see
// Dialer.Dial.
func Dial(ctx context.Context, cm *rdmacm.CM, network, address string) (*Conn, error) {
	d := Dialer{CM: cm}
	return d.Dial(ctx, network, address)
}

// DialContext is Dial returning a net.Conn, for http.Transport.DialContext
// and the like.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := d.Dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Dial connects to address ("host:port"; a host name is looked up with
// the default resolver) on network "rsocket", "rsocket4", "rsocket6" or,
// for programs written for TCP, "tcp", "tcp4", "tcp6". It resolves the
// address and route, makes the QP and buffers, sends the REQ with this
// side's connection data and checks the peer's in the REP, as rconnect
// does. ctx bounds the whole connect.
//
// Errors, wrapped in a *net.OpError: Options' EINVAL; an unknown network
// (EAFNOSUPPORT) or a bad address (EINVAL); rdmacm.CM.Dial's errnos
// (ECONNREFUSED for a REJ, ETIMEDOUT when the peer's CM never answers, the
// route's ENETUNREACH...); a *ProtocolError (EPROTO) for the peer's
// connection data; ctx.Err() if ctx ends first.
func (d *Dialer) Dial(ctx context.Context, network, address string) (*Conn, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "rsocket", Source: addrOrNil(d.LocalAddr), Addr: stringAddr(address), Err: err}
	}
	if d.CM == nil {
		return nil, opErr(fmt.Errorf("rsocket: Dialer.CM is nil: the CM chooses the device and makes the connection: %w", syscall.EINVAL))
	}
	p, err := d.Options.resolve()
	if err != nil {
		return nil, opErr(err)
	}
	dst, err := resolve(ctx, network, address, false)
	if err != nil {
		return nil, opErr(err)
	}
	c, err := connect(ctx, d.CM, d.LocalAddr, dst, p)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rsocket", Source: addrOrNil(d.LocalAddr), Addr: Addr{dst}, Err: err}
	}
	return c, nil
}

func addrOrNil(a netip.AddrPort) net.Addr {
	if !a.IsValid() {
		return nil
	}
	return Addr{a}
}

// stringAddr is an address not yet resolved, for errors.
type stringAddr string

func (stringAddr) Network() string  { return "rsocket" }
func (a stringAddr) String() string { return string(a) }

// family checks network and says which addresses it allows: 4, 6 or 0
// (both).
func family(network string) (int, error) {
	switch network {
	case "rsocket", "tcp":
		return 0, nil
	case "rsocket4", "tcp4":
		return 4, nil
	case "rsocket6", "tcp6":
		return 6, nil
	}
	return 0, fmt.Errorf("rsocket: network %q: rsocket, rsocket4, rsocket6 (or tcp, tcp4, tcp6): %w", network, syscall.EAFNOSUPPORT)
}

// resolve turns address into an IP address and port of network's family.
// passive allows an empty host (every address).
func resolve(ctx context.Context, network, address string, passive bool) (netip.AddrPort, error) {
	fam, err := family(network)
	if err != nil {
		return netip.AddrPort{}, err
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("rsocket: address %q: %v: %w", address, err, syscall.EINVAL)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		if pn, err = lookupPort(ctx, port); err != nil {
			return netip.AddrPort{}, fmt.Errorf("rsocket: address %q: port %q: %v: %w", address, port, err, syscall.EINVAL)
		}
	}
	if host == "" {
		if !passive {
			return netip.AddrPort{}, fmt.Errorf("rsocket: address %q has no host to connect to: %w", address, syscall.EINVAL)
		}
		// Every address: IPv6's unspecified address takes IPv4 too
		// (rdma_cm's listeners are not AFONLY), unless only IPv4 is asked for.
		if fam == 4 {
			return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(pn)), nil
		}
		return netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(pn)), nil
	}
	ips := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		ips = append(ips, a.Unmap())
	} else {
		found, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("rsocket: %w", err)
		}
		for _, a := range found {
			ips = append(ips, a.Unmap())
		}
	}
	for _, a := range ips {
		if fam == 0 || fam == 4 && a.Is4() || fam == 6 && a.Is6() {
			return netip.AddrPortFrom(a, uint16(pn)), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("rsocket: %q has no IPv%d address: %w", host, fam, syscall.EADDRNOTAVAIL)
}

func lookupPort(ctx context.Context, service string) (uint64, error) {
	p, err := net.DefaultResolver.LookupPort(ctx, "tcp", service)
	return uint64(p), err
}

// connect is rconnect: resolution, the QP and buffers, REQ, REP, RTU.
func connect(ctx context.Context, cm *rdmacm.CM, local, dst netip.AddrPort, p params) (*Conn, error) {
	ec := cm.CreateEventChannel()
	id, err := cm.CreateID(ec, rdmacm.PSTCP)
	if err != nil {
		ec.Close()
		return nil, err
	}
	var c *Conn
	stage := "binding"
	err = func() error {
		timeout := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		var src netip.Addr
		if local.IsValid() {
			if err := id.BindAddr(local); err != nil {
				return err
			}
			src = local.Addr()
		}
		stage = "resolving the address"
		if err := id.ResolveAddr(src, dst, timeout); err != nil {
			return err
		}
		if _, err := expect(ctx, ec, rdmacm.EventAddrResolved); err != nil {
			return err
		}
		stage = "resolving the route"
		if err := id.ResolveRoute(timeout); err != nil {
			return err
		}
		if _, err := expect(ctx, ec, rdmacm.EventRouteResolved); err != nil {
			return err
		}
		stage = "creating the QP and buffers"
		if c, err = newConn(id, p); err != nil {
			return err
		}
		stage = "connecting (REQ sent, waiting for the REP)"
		if err := id.Connect(rdmacm.ConnParam{PrivateData: c.connData(), RetryCount: 7, RNRRetryCount: 7, FlowControl: true}); err != nil {
			return err
		}
		e, err := expect(ctx, ec, rdmacm.EventEstablished)
		if err != nil {
			return err
		}
		stage = "reading the peer's connection data"
		return c.saveConnData(e.PrivateData)
	}()
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("rsocket: connecting to %v: gave up %s: %w", dst, stage, err)
		}
		id.Destroy() // and its QP; a connected ID sends the DREQ
		ec.Close()
		if c != nil {
			c.freeMemory()
		}
		return nil, err
	}
	c.watchEvents(ec)
	c.begin()
	return c, nil
}

// expect waits for the next event on ec and checks it is want, with the
// errno librdmacm's synchronous calls give for another (ucma_complete):
// ECONNREFUSED for REJECTED, else the event's status.
func expect(ctx context.Context, ec *rdmacm.EventChannel, want rdmacm.EventType) (rdmacm.Event, error) {
	e, err := ec.Get(ctx)
	if err != nil {
		return e, err
	}
	if e.Type == want {
		return e, nil
	}
	errno := syscall.ECONNREFUSED
	if e.Type != rdmacm.EventRejected && e.Status < 0 {
		errno = syscall.Errno(-e.Status)
	}
	if e.Err != nil {
		if errors.As(e.Err, new(syscall.Errno)) {
			return e, fmt.Errorf("rsocket: %v instead of %v: %w", e.Type, want, e.Err)
		}
		return e, fmt.Errorf("rsocket: %v instead of %v: %w: %w", e.Type, want, e.Err, errno)
	}
	return e, fmt.Errorf("rsocket: %v (status %d) instead of %v: %w", e.Type, e.Status, want, errno)
}
