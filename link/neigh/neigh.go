// Package neigh finds where a RoCE frame goes next out of one netdev, as
// the kernel does for its own packets: the routing table of the netdev's
// network namespace (RTM_GETROUTE) names the next hop — the route's
// gateway, or the destination itself when it is on-link — and the
// neighbour table gives that hop's MAC, asked for when missing (ARP, IPv6
// Neighbor Discovery) and followed as it changes (RTNLGRP_NEIGH). Linux
// rxe does the same through ip_route_output_key and the dst's neighbour
// (rxe_net.c, rxe_find_route), and rdma_cm's rdma_resolve_addr through
// addr_resolve and dst_fetch_ha (drivers/infiniband/core/addr.c).
//
// RoCE v1 (a GRH behind Ethertype 0x8915, IBTA Annex A16) is not IP: no
// router forwards it, so a v1 destination must be on the netdev's own
// Ethernet segment. A v1 destination the routing table reaches through a
// gateway is an error that says so (Linux sends such frames to the
// gateway's MAC, where they vanish).
//
// One Resolver serves a device: its raw link (link/afpacket) asks it for
// each frame's destination MAC, rdma_cm asks it to resolve an address
// within rdma_resolve_addr's timeout, and the transport asks it why a peer
// never answered. All three get the same answers and the same errors.
package neigh

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

const (
	// routeTTL is how long a route lookup is reused: a changed route is
	// followed within it.
	routeTTL = time.Second
	// askEvery spaces our own ARP requests / Neighbor Solicitations for
	// one address.
	askEvery = 100 * time.Millisecond
	// unanswered is how long a resolution may go without an answer before
	// PathError calls it "no ARP reply" (the kernel's retrans_time, the
	// interval of its own probes, is 1 s).
	unanswered = time.Second
	// refreshEvery is how often a neighbour in use is reported to the
	// kernel as used (NTF_USE), so that a STALE entry is confirmed by
	// probes as the kernel's own traffic would have it confirmed, instead
	// of being garbage-collected from under us.
	refreshEvery = 5 * time.Second
	// DefaultTimeout is rdma_resolve_addr's timeout in rping and in
	// librdmacm's rdma_create_ep (2000 ms).
	DefaultTimeout = 2 * time.Second
)

// Hop is how a destination is reached.
type Hop struct {
	Dst     netip.Addr // the destination, unmapped
	Gateway netip.Addr // the route's gateway; invalid when Dst is on-link
	Src     netip.Addr // the route's preferred source address, if it names one
	Local   bool       // Dst is an address of this host (delivered locally)
	MAC     wire.MAC   // the next hop's MAC, once resolved
	// HopLimit is the TTL (hop limit) the kernel gives packets on this
	// route: its hoplimit metric, else the namespace's default
	// (net.ipv4.ip_default_ttl, the netdev's IPv6 hop_limit). 0: keep the
	// packet's own (RoCE v1 to a link-local or multicast GID).
	HopLimit uint8
}

// Next is the address whose MAC frames to Dst carry: the gateway, or Dst.
func (h Hop) Next() netip.Addr {
	if h.Gateway.IsValid() {
		return h.Gateway
	}
	return h.Dst
}

// Reason says why a destination cannot be reached.
type Reason int

const (
	// NoReply: the next hop never answered ARP or Neighbor Discovery.
	NoReply Reason = iota + 1
	// OtherNetdev: the route leaves through another netdev.
	OtherNetdev
	// NoRoute: the routing table has no route (or says unreachable).
	NoRoute
	// V1OffLink: a RoCE v1 destination is behind a router.
	V1OffLink
)

// Error is a destination's unreachability, in terms of the route and the
// next hop. It unwraps to the errno rdma_cm reports for it: ETIMEDOUT for
// NoReply (rdma_resolve_addr's RDMA_CM_EVENT_ADDR_ERROR status -110 when
// the neighbour stays unresolved until the timeout, addr.c's
// process_one_req), EHOSTUNREACH for OtherNetdev, the kernel's errno
// (ENETUNREACH, EHOSTUNREACH) for NoRoute, ENETUNREACH for V1OffLink.
type Error struct {
	Reason  Reason
	Dst     netip.Addr
	Gateway netip.Addr    // the route's gateway; invalid on-link
	Netdev  string        // this resolver's netdev
	Other   string        // OtherNetdev: the netdev the route leaves through
	Waited  time.Duration // NoReply: how long the next hop was asked, if known
	Errno   syscall.Errno
}

func (e *Error) Error() string {
	next := e.Dst
	if e.Gateway.IsValid() {
		next = e.Gateway
	}
	switch e.Reason {
	case NoReply:
		proto := "ARP reply"
		if !next.Is4() {
			proto = "Neighbor Advertisement"
		}
		where := fmt.Sprintf("%v is on-link on %s", e.Dst, e.Netdev)
		if e.Gateway.IsValid() {
			where = fmt.Sprintf("%v is reached via %v on %s", e.Dst, e.Gateway, e.Netdev)
		}
		s := fmt.Sprintf("%s: no %s from %v", where, proto, next)
		if e.Waited > 0 {
			s += fmt.Sprintf(" in %v", e.Waited.Round(100*time.Millisecond))
		}
		return s
	case OtherNetdev:
		return fmt.Sprintf("the route to %v leaves through %s, not %s", e.Dst, e.Other, e.Netdev)
	case NoRoute:
		return fmt.Sprintf("no route to %v in %s's namespace: %v", e.Dst, e.Netdev, e.Errno)
	case V1OffLink:
		return fmt.Sprintf("%v is reached via %v on %s, but RoCE v1 (Ethertype 0x8915) stays on one Ethernet segment: "+
			"no router forwards it; reach %v with RoCE v2 (a RoCE v2 GID, or roce mode -m 2 for RDMA CM)",
			e.Dst, e.Gateway, e.Netdev, e.Dst)
	}
	return fmt.Sprintf("%v: unreachable on %s", e.Dst, e.Netdev)
}

func (e *Error) Unwrap() error { return e.Errno }

// sysctlHops reads a TTL sysctl; 64, Linux's default, if it cannot.
func sysctlHops(path string) uint8 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 64
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > 255 {
		return 64
	}
	return uint8(n)
}

// defaultHops is the hop limit of a route with no hoplimit metric.
func (r *Resolver) defaultHops(dst netip.Addr) uint8 {
	if dst.Is4() {
		return r.ttl4
	}
	return r.hop6
}

// errPending is Lookup's answer while the next hop's MAC is being asked for.
var errPending = errors.New("next hop not resolved yet")

// Config configures a Resolver.
type Config struct {
	Ifindex int
	MAC     wire.MAC // the netdev's; sender of our own ARP requests
}

// Resolver resolves next hops out of one netdev.
type Resolver struct {
	ifindex int
	mac     wire.MAC
	name    string
	ttl4    uint8           // net.ipv4.ip_default_ttl of the namespace
	hop6    uint8           // net.ipv6.conf.NETDEV.hop_limit
	nl      *netlink.Handle // bound to the netdev's network namespace
	done    chan struct{}   // closed by Close: ends the neighbour subscription
	wg      sync.WaitGroup

	mu     sync.Mutex
	send   func(frame []byte) error  // guarded by mu: the raw link's, or nil
	srcs   []netip.Addr              // guarded by mu: our addresses, for ARP/ND sources
	routes map[netip.Addr]routeEntry // guarded by mu: by destination
	neighs map[netip.Addr]*entry     // guarded by mu: by next-hop address
	static map[netip.Addr]wire.MAC   // guarded by mu: Add's entries
	wake   chan struct{}             // guarded by mu: closed when a neighbour resolves
	closed bool                      // guarded by mu
}

type routeEntry struct {
	hop Hop
	err *Error
	at  time.Time
}

// entry is one next hop's neighbour state.
type entry struct {
	mac    wire.MAC
	valid  bool
	kernel bool      // the MAC came from the kernel's table (refreshed with NTF_USE)
	since  time.Time // unresolved: when we started asking
	asked  time.Time // our last request
	used   time.Time // last NTF_USE
	failed bool      // the kernel gave up on it (NUD_FAILED)
}

// New returns a resolver for netdev cfg.Ifindex. It reads the routing and
// neighbour tables of the calling thread's network namespace, which must
// be the netdev's, and follows the neighbour table's changes until Close.
func New(cfg Config) (*Resolver, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	r := &Resolver{ifindex: cfg.Ifindex, mac: cfg.MAC, nl: nl, done: make(chan struct{}),
		routes: map[netip.Addr]routeEntry{}, neighs: map[netip.Addr]*entry{}, wake: make(chan struct{}),
		static: map[netip.Addr]wire.MAC{}}
	r.name = fmt.Sprintf("ifindex %d", cfg.Ifindex)
	if l, err := nl.LinkByIndex(cfg.Ifindex); err == nil {
		r.name = l.Attrs().Name
		if r.mac == (wire.MAC{}) && len(l.Attrs().HardwareAddr) == 6 {
			copy(r.mac[:], l.Attrs().HardwareAddr)
		}
	}
	// The calling thread is in the namespace: /proc/sys/net is its.
	r.ttl4 = sysctlHops("/proc/sys/net/ipv4/ip_default_ttl")
	r.hop6 = sysctlHops("/proc/sys/net/ipv6/conf/" + r.name + "/hop_limit")
	updates := make(chan netlink.NeighUpdate, 64)
	if err := netlink.NeighSubscribeWithOptions(updates, r.done, netlink.NeighSubscribeOptions{}); err != nil {
		nl.Close()
		return nil, fmt.Errorf("netlink neighbour subscription: %w", err)
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for u := range updates { // closed once done closes the socket
			r.update(u)
		}
	}()
	return r, nil
}

// Netdev returns the netdev's name.
func (r *Resolver) Netdev() string { return r.name }

// Close stops following the neighbour table.
func (r *Resolver) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	close(r.wake)
	r.mu.Unlock()
	close(r.done)
	r.wg.Wait()
	r.nl.Close()
}

// SetSender gives the resolver a way to send raw frames on the netdev, for
// ARP requests and Neighbor Solicitations of its own (beside the kernel's):
// they resolve addresses the kernel would not, such as a peer's on a netdev
// without an address of that family.
func (r *Resolver) SetSender(send func(frame []byte) error) {
	r.mu.Lock()
	r.send = send
	r.mu.Unlock()
}

// SetSources sets the local addresses used as the sender of our own ARP
// requests and Neighbor Solicitations.
func (r *Resolver) SetSources(a []netip.Addr) {
	r.mu.Lock()
	r.srcs = append([]netip.Addr(nil), a...)
	r.mu.Unlock()
}

// Add records a neighbour permanently (tests, or a static entry).
func (r *Resolver) Add(ip netip.Addr, mac wire.MAC) {
	r.mu.Lock()
	r.static[ip.Unmap()] = mac
	r.learn(ip.Unmap(), mac, false)
	r.mu.Unlock()
}

// learn records a resolved neighbour and wakes the waiters. Called with mu held.
func (r *Resolver) learn(ip netip.Addr, mac wire.MAC, kernel bool) {
	e := r.neighs[ip]
	if e == nil {
		e = &entry{}
		r.neighs[ip] = e
	}
	if e.valid && e.mac == mac {
		e.kernel = e.kernel || kernel
		return
	}
	*e = entry{mac: mac, valid: true, kernel: kernel, used: time.Now()}
	if !r.closed {
		close(r.wake)
		r.wake = make(chan struct{})
	}
}

// update follows one change of the kernel's neighbour table, as the kernel's
// own users of a neighbour do: a new or changed MAC is used at once, an
// entry the kernel gave up on or deleted is asked for again on next use.
func (r *Resolver) update(u netlink.NeighUpdate) {
	n := u.Neigh
	if n.LinkIndex != r.ifindex {
		return
	}
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return
	}
	ip = ip.Unmap()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.static[ip]; ok {
		return
	}
	e := r.neighs[ip]
	switch {
	case u.Type == unix.RTM_DELNEIGH:
		if e != nil && e.valid {
			delete(r.neighs, ip)
		}
	case n.State&validStates != 0 && len(n.HardwareAddr) == 6:
		r.learn(ip, wire.MAC(n.HardwareAddr), true)
	case n.State&netlink.NUD_FAILED != 0:
		if e == nil {
			return
		}
		if e.valid {
			*e = entry{since: time.Now()}
		}
		e.failed = true
	}
}

const validStates = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Route returns how dst is reached from this netdev (no neighbour
// resolution): a copy of the kernel's answer, reused for routeTTL.
func (r *Resolver) Route(dst netip.Addr) (Hop, error) {
	dst = dst.Unmap()
	now := time.Now()
	r.mu.Lock()
	if e, ok := r.routes[dst]; ok && now.Sub(e.at) < routeTTL {
		r.mu.Unlock()
		if e.err != nil {
			return e.hop, e.err
		}
		return e.hop, nil
	}
	r.mu.Unlock()
	hop, rerr := r.lookupRoute(dst)
	r.mu.Lock()
	if len(r.routes) > 4096 {
		clear(r.routes) // a bound; lookups refill what is in use
	}
	r.routes[dst] = routeEntry{hop: hop, err: rerr, at: now}
	r.mu.Unlock()
	if rerr != nil {
		return hop, rerr
	}
	return hop, nil
}

// lookupRoute asks the kernel (RTM_GETROUTE, `ip route get DST`).
func (r *Resolver) lookupRoute(dst netip.Addr) (Hop, *Error) {
	hop := Hop{Dst: dst, HopLimit: r.defaultHops(dst)}
	if dst.IsMulticast() {
		hop.HopLimit = 0
		return hop, nil
	}
	if dst.Is6() && dst.IsLinkLocalUnicast() {
		// Scoped to the link: the netdev is the interface.
		return hop, nil
	}
	routes, err := r.nl.RouteGet(net.IP(dst.AsSlice()))
	if err != nil || len(routes) == 0 {
		errno := syscall.ENETUNREACH
		var en syscall.Errno
		if errors.As(err, &en) {
			errno = en
		}
		return hop, &Error{Reason: NoRoute, Dst: dst, Netdev: r.name, Errno: errno}
	}
	rt := routes[0]
	if rt.Hoplimit > 0 && rt.Hoplimit < 256 {
		hop.HopLimit = uint8(rt.Hoplimit)
	}
	if s, ok := netip.AddrFromSlice(rt.Src); ok {
		hop.Src = s.Unmap()
	}
	if rt.Type == unix.RTN_LOCAL {
		hop.Local = true
		return hop, nil
	}
	switch rt.Type {
	case unix.RTN_UNREACHABLE, unix.RTN_BLACKHOLE, unix.RTN_PROHIBIT:
		return hop, &Error{Reason: NoRoute, Dst: dst, Netdev: r.name, Errno: syscall.EHOSTUNREACH}
	}
	if rt.LinkIndex != r.ifindex {
		name := fmt.Sprintf("ifindex %d", rt.LinkIndex)
		if l, err := r.nl.LinkByIndex(rt.LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		return hop, &Error{Reason: OtherNetdev, Dst: dst, Netdev: r.name, Other: name, Errno: syscall.EHOSTUNREACH}
	}
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok && !gw.IsUnspecified() {
		hop.Gateway = gw.Unmap()
	} else if v, ok := rt.Via.(*netlink.Via); ok && v != nil {
		// An IPv4 route through an IPv6 next hop (RFC 5549).
		if gw, ok := netip.AddrFromSlice(v.Addr); ok {
			hop.Gateway = gw.Unmap()
		}
	}
	return hop, nil
}

// NextHop returns how a packet of RoCE version v reaches dst, the MAC
// aside: a RoCE v2 packet follows the route; a RoCE v1 frame goes to dst
// on this Ethernet segment, and a dst behind a gateway is a V1OffLink error.
func (r *Resolver) NextHop(dst netip.Addr, v wire.Version) (Hop, error) {
	dst = dst.Unmap()
	if v == wire.RoCEv1 {
		if dst.Is6() && dst.IsLinkLocalUnicast() || dst.IsMulticast() {
			// Linux takes a v1 link-local GID's MAC from the GID and
			// keeps the AH's hop limit (ib_resolve_unicast_gid_dmac).
			return Hop{Dst: dst}, nil
		}
		hop, err := r.Route(dst)
		if err == nil && hop.Gateway.IsValid() {
			return hop, &Error{Reason: V1OffLink, Dst: dst, Gateway: hop.Gateway, Netdev: r.name, Errno: syscall.ENETUNREACH}
		}
		// On-link, or a route elsewhere or none at all: RoCE v1 knows no
		// routes, and a peer on this segment answers ARP whatever the
		// kernel's routes say.
		return Hop{Dst: dst, Local: err == nil && hop.Local, HopLimit: r.defaultHops(dst)}, nil
	}
	return r.Route(dst)
}

// Next is where a frame goes: the next hop's MAC, and the hop limit the
// kernel would give the packet on that route (0: keep the packet's own).
type Next struct {
	MAC      wire.MAC
	HopLimit uint8
}

// Lookup returns where a frame of version v to dst goes, starting a
// resolution when the next hop's MAC is unknown (then the error is a
// pending one, and LookupWait waits for it). It does not block on the
// network.
//
// The hop limit is the route's, not the one the sender put in its address
// handle: Linux replaces an AH's and an RC QP's grh.hop_limit with the
// route's (ib_resolve_unicast_gid_dmac, rdma_addr_find_l2_eth_by_grh), so
// ibv_rc_pingpong's hop_limit 1 leaves rxe as TTL 64 and crosses routers.
func (r *Resolver) Lookup(dst netip.Addr, v wire.Version) (Next, error) {
	hop, err := r.NextHop(dst, v)
	if err != nil {
		return Next{}, err
	}
	m, err := r.lookupMAC(hop)
	return Next{MAC: m, HopLimit: hop.HopLimit}, err
}

// lookupMAC is Lookup's neighbour step.
func (r *Resolver) lookupMAC(hop Hop) (wire.MAC, error) {
	if hop.Local {
		return r.mac, nil
	}
	next := hop.Next()
	if m, ok := r.direct(hop); ok {
		return m, nil
	}
	r.mu.Lock()
	e := r.neighs[next]
	if e != nil && e.valid {
		m, refresh := e.mac, e.kernel && time.Since(e.used) > refreshEvery
		if refresh {
			e.used = time.Now()
		}
		r.mu.Unlock()
		if refresh {
			r.use(next)
		}
		return m, nil
	}
	r.mu.Unlock()
	if m, ok := r.kernel(next); ok {
		r.mu.Lock()
		r.learn(next, m, true)
		r.mu.Unlock()
		return m, nil
	}
	r.request(next)
	return wire.MAC{}, errPending
}

// direct returns the MAC of a next hop that needs no table: a multicast
// group's, or the one a RoCE v1 link-local GID (fe80::/64 built from a MAC
// by EUI-64) was made from.
func (r *Resolver) direct(hop Hop) (wire.MAC, bool) {
	next := hop.Next()
	if next.IsMulticast() {
		return multicastMAC(next), true
	}
	if next == hop.Dst && !next.Is4() {
		if m, ok := eui64MAC(next); ok {
			return m, true
		}
	}
	return wire.MAC{}, false
}

// LookupWait is Lookup that waits up to timeout for a resolution it
// starts, as the kernel queues a packet while ARP runs. A next hop that
// has gone unanswered for a while is not waited for again: its packets
// are dropped at once (the caller counts them) while the resolution goes
// on, so a dead next hop costs a sender no more than one wait.
func (r *Resolver) LookupWait(dst netip.Addr, v wire.Version, timeout time.Duration) (Next, error) {
	return r.LookupWaitContext(context.Background(), dst, v, timeout)
}

// LookupWaitContext is LookupWait that also gives up when ctx ends (with
// ctx's error).
func (r *Resolver) LookupWaitContext(ctx context.Context, dst netip.Addr, v wire.Version, timeout time.Duration) (Next, error) {
	hop, err := r.NextHop(dst, v)
	if err != nil {
		return Next{}, err
	}
	m, err := r.lookupMAC(hop)
	if err != errPending {
		return Next{MAC: m, HopLimit: hop.HopLimit}, err
	}
	next := hop.Next()
	r.mu.Lock()
	var since time.Time
	if e := r.neighs[next]; e != nil {
		since = e.since
	}
	r.mu.Unlock()
	if !since.IsZero() && time.Since(since) > timeout {
		return Next{}, r.noReply(hop, time.Since(since))
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err = r.wait(wctx, hop)
	if err != nil && ctx.Err() != nil {
		return Next{}, ctx.Err()
	}
	return Next{MAC: m, HopLimit: hop.HopLimit}, err
}

// IsPending reports whether err is Lookup's answer while the next hop's
// MAC is being asked for (LookupWait would wait for it).
func IsPending(err error) bool { return err == errPending }

// Resolve is rdma_resolve_addr's neighbour step (addr_resolve_neigh): the
// route to dst as RoCE v2 follows it, and the next hop's MAC, waited for
// until ctx ends. A next hop that never answers is a NoReply error.
func (r *Resolver) Resolve(ctx context.Context, dst netip.Addr) (Hop, error) {
	hop, err := r.NextHop(dst, wire.RoCEv2)
	if err != nil {
		return hop, err
	}
	if hop.Local {
		hop.MAC = r.mac
		return hop, nil
	}
	m, err := r.wait(ctx, hop)
	hop.MAC = m
	return hop, err
}

// wait waits until hop's next hop is resolved or ctx ends.
func (r *Resolver) wait(ctx context.Context, hop Hop) (wire.MAC, error) {
	start := time.Now()
	poll := 200 * time.Microsecond
	for {
		m, err := r.lookupMAC(hop)
		if err != errPending {
			return m, err
		}
		r.mu.Lock()
		wake, closed := r.wake, r.closed
		r.mu.Unlock()
		if closed {
			return wire.MAC{}, net.ErrClosed
		}
		t := time.NewTimer(poll)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return wire.MAC{}, r.noReply(hop, time.Since(start))
			}
			return wire.MAC{}, ctx.Err()
		}
		t.Stop()
		poll = min(2*poll, 50*time.Millisecond) // the kernel's table is read on each pass
	}
}

func (r *Resolver) noReply(hop Hop, waited time.Duration) *Error {
	return &Error{Reason: NoReply, Dst: hop.Dst, Gateway: hop.Gateway, Netdev: r.name, Waited: waited, Errno: syscall.ETIMEDOUT}
}

// PathError says why frames of version v to dst could not be sent, as
// far as this resolver knows: no route, a route through another netdev, a
// RoCE v1 peer behind a router, or a next hop that has not answered for a
// second or that the kernel gave up on. nil when the next hop is resolved,
// or when nothing is known against it.
func (r *Resolver) PathError(dst netip.Addr, v wire.Version) error {
	hop, err := r.NextHop(dst, v)
	if err != nil {
		return err
	}
	if hop.Local {
		return nil
	}
	if _, ok := r.direct(hop); ok {
		return nil
	}
	next := hop.Next()
	r.mu.Lock()
	e := r.neighs[next]
	var since time.Time
	var failed bool
	if e != nil {
		if e.valid {
			r.mu.Unlock()
			return nil
		}
		since, failed = e.since, e.failed
	}
	r.mu.Unlock()
	if !since.IsZero() && (failed || time.Since(since) >= unanswered) {
		return r.noReply(hop, time.Since(since))
	}
	// Not asked by us (a link that leaves resolution to the kernel, such
	// as link/udp): the kernel's entry tells.
	switch st, ok := r.kernelState(next); {
	case !ok:
		return nil
	case st&validStates != 0:
		return nil
	case st&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0:
		return r.noReply(hop, 0)
	}
	return nil
}

// kernel reads the kernel's neighbour table for ip on the netdev.
func (r *Resolver) kernel(ip netip.Addr) (wire.MAC, bool) {
	n, ok := r.kernelEntry(ip)
	if !ok || n.State&validStates == 0 || len(n.HardwareAddr) != 6 {
		return wire.MAC{}, false
	}
	return wire.MAC(n.HardwareAddr), true
}

func (r *Resolver) kernelState(ip netip.Addr) (int, bool) {
	n, ok := r.kernelEntry(ip)
	return n.State, ok
}

func (r *Resolver) kernelEntry(ip netip.Addr) (netlink.Neigh, bool) {
	fam := netlink.FAMILY_V4
	if !ip.Is4() {
		fam = netlink.FAMILY_V6
	}
	neighs, err := r.nl.NeighList(r.ifindex, fam)
	if err != nil {
		return netlink.Neigh{}, false
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip {
			return n, true
		}
	}
	return netlink.Neigh{}, false
}

// use tells the kernel ip is in use (NTF_USE, as if the kernel were
// sending there): it resolves a missing entry and confirms a stale one.
func (r *Resolver) use(ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if !ip.Is4() {
		fam = netlink.FAMILY_V6
	}
	_ = r.nl.NeighSet(&netlink.Neigh{LinkIndex: r.ifindex, Family: fam, IP: ip.AsSlice(),
		State: netlink.NUD_NONE, Flags: unix.NTF_USE})
}

// request starts resolving ip: the kernel is asked (NTF_USE) and, with a
// sender, so is the segment (our own ARP request or Neighbor
// Solicitation), at most once every askEvery.
func (r *Resolver) request(ip netip.Addr) {
	r.mu.Lock()
	e := r.neighs[ip]
	now := time.Now()
	if e == nil {
		e = &entry{since: now}
		r.neighs[ip] = e
		if len(r.neighs) > 4096 {
			r.trim()
		}
	}
	if e.since.IsZero() || now.Sub(e.asked) > 3*unanswered {
		// A new attempt: nobody asked for it lately.
		e.since, e.failed = now, false
	}
	if r.closed || now.Sub(e.asked) < askEvery {
		r.mu.Unlock()
		return
	}
	e.asked = now
	// The source: an address of ip's family, link-local for a link-local ip.
	var src netip.Addr
	for _, s := range r.srcs {
		s = s.Unmap()
		if s.Is4() != ip.Is4() {
			continue
		}
		if !src.IsValid() || !ip.Is4() && s.IsLinkLocalUnicast() == ip.IsLinkLocalUnicast() {
			src = s
		}
	}
	send := r.send
	r.mu.Unlock()
	r.use(ip)
	if send == nil {
		return
	}
	var frame []byte
	if ip.Is4() {
		if !src.IsValid() {
			src = netip.IPv4Unspecified()
		}
		frame = ARPRequest(r.mac, src, ip)
	} else {
		if !src.IsValid() {
			return
		}
		frame = NeighborSolicitation(r.mac, src, ip)
	}
	_ = send(frame)
}

// trim drops unresolved entries (a bound against a sender spraying
// destinations). Called with mu held.
func (r *Resolver) trim() {
	for ip, e := range r.neighs {
		if !e.valid {
			delete(r.neighs, ip)
		}
	}
}

// Observe learns from an ARP packet or Neighbor Advertisement read off the
// netdev and reports whether the frame was ARP or Neighbor Discovery (and
// so not RoCE).
func (r *Resolver) Observe(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case wire.EtherTypeARP:
		a := frame[14:]
		// A reply, or a request: its sender is a neighbour too.
		if len(a) >= 28 && (a[7] == 2 || a[7] == 1) {
			ip := netip.AddrFrom4([4]byte(a[14:18]))
			if !ip.IsUnspecified() {
				r.observed(ip, wire.MAC(a[8:14]))
			}
		}
		return true
	case wire.EtherTypeIPv6:
		if len(frame) < 14+40+24 || frame[14+6] != unix.IPPROTO_ICMPV6 {
			return false
		}
		icmp := frame[14+40:]
		if icmp[0] == 136 { // Neighbor Advertisement: target, then options
			target := netip.AddrFrom16([16]byte(icmp[8:24]))
			for o := icmp[24:]; len(o) >= 8 && o[1] > 0 && int(o[1])*8 <= len(o); o = o[int(o[1])*8:] {
				if o[0] == 2 { // target link-layer address
					r.observed(target, wire.MAC(o[2:8]))
				}
			}
		}
		return icmp[0] == 135 || icmp[0] == 136
	}
	return false
}

// observed records a neighbour seen on the wire, unless the kernel's table
// (which the subscription follows) or a static entry already says otherwise.
func (r *Resolver) observed(ip netip.Addr, mac wire.MAC) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.static[ip]; ok {
		return
	}
	if e := r.neighs[ip]; e != nil && e.valid && e.kernel {
		return
	}
	r.learn(ip, mac, false)
}

// eui64MAC returns the MAC a link-local EUI-64 GID was made from
// (fe80::XXYY:ZZff:feAA:BBCC, universal/local bit flipped), as RoCE v1 GIDs are.
func eui64MAC(g netip.Addr) (wire.MAC, bool) {
	b := g.As16()
	if b[0] != 0xfe || b[1]&0xc0 != 0x80 || b[11] != 0xff || b[12] != 0xfe {
		return wire.MAC{}, false
	}
	return wire.MAC{b[8] ^ 2, b[9], b[10], b[13], b[14], b[15]}, true
}

func multicastMAC(ip netip.Addr) wire.MAC {
	b := ip.As16()
	if ip.Is4() {
		return wire.MAC{0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]}
	}
	return wire.MAC{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// ARPRequest is the ARP request for dst that mac (at src) broadcasts.
func ARPRequest(mac wire.MAC, src, dst netip.Addr) []byte {
	b := make([]byte, 0, 60)
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, mac[:]...)
	b = binary.BigEndian.AppendUint16(b, wire.EtherTypeARP)
	b = append(b, 0, 1, 0x08, 0, 6, 4, 0, 1) // Ethernet, IPv4, request
	b = append(b, mac[:]...)
	s, d := src.As4(), dst.As4()
	b = append(b, s[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, d[:]...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

// NeighborSolicitation is the Neighbor Solicitation for dst (RFC 4861
// §4.3) that mac (at src) sends to dst's solicited-node multicast group.
func NeighborSolicitation(mac wire.MAC, src, dst netip.Addr) []byte {
	d := dst.As16()
	// Solicited-node multicast address ff02::1:ffXX:XXXX.
	snm := [16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: d[13], 14: d[14], 15: d[15]}
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 135, 0, 0, 0, 0, 0, 0, 0) // type NS, code, checksum, reserved
	icmp = append(icmp, d[:]...)
	icmp = append(icmp, 1, 1) // source link-layer address option
	icmp = append(icmp, mac[:]...)
	s := src.As16()
	csum := icmpv6Checksum(s, snm, icmp)
	binary.BigEndian.PutUint16(icmp[2:], csum)
	ip := wire.IPv6Fields{PayloadLen: len(icmp), NextHeader: unix.IPPROTO_ICMPV6, HopLimit: 255,
		Src: src, Dst: netip.AddrFrom16(snm)}
	b := make([]byte, 0, 14+40+len(icmp))
	b = append(b, 0x33, 0x33, snm[12], snm[13], snm[14], snm[15])
	b = append(b, mac[:]...)
	b = binary.BigEndian.AppendUint16(b, wire.EtherTypeIPv6)
	b = ip.Append(b)
	return append(b, icmp...)
}

func icmpv6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[0:], uint32(len(msg)))
	l[7] = unix.IPPROTO_ICMPV6
	add(l[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
