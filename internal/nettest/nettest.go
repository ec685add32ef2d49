// Package nettest makes the networks goroce's tests run on: two network
// namespaces joined by a veth pair, or two joined through a third that
// routes between them, with IPv4 and IPv6 addresses, deleted when the test
// ends. It needs root; testenv decides what a missing
// prerequisite means (skip locally, fail in CI).
package nettest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/wire"
)

// Host is one end of a veth pair, alone in its network namespace.
type Host struct {
	NS      netns.NsHandle
	NSName  string // under /run/netns, as `ip netns` shows it
	Ifname  string
	Ifindex int
	MAC     wire.MAC
	IPv4    netip.Addr
	IPv6    netip.Addr
	// Gateway4 and Gateway6 are the default routes' next hops (Routed's
	// ends); invalid on a VethPair.
	Gateway4, Gateway6 netip.Addr
}

// Do runs fn on a locked OS thread inside h's network namespace; sockets
// fn opens stay in that namespace.
func (h *Host) Do(fn func() error) error { return Do(h.NS, fn) }

// Do runs fn on a locked OS thread inside ns.
func Do(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// A fresh goroutine whose thread is discarded afterwards (never
		// unlocked), so no other goroutine ever runs in the namespace.
		runtime.LockOSThread()
		if ns != netns.None() {
			if err := netns.Set(ns); err != nil {
				errc <- fmt.Errorf("setns: %w", err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

var seq atomic.Int32

// Options configure VethPair.
type Options struct {
	MTU int // default 1500
}

// VethPair makes two namespaces joined by a veth pair: side A has
// 198.18.0.1/24 and fd00:198:18::1/64, side B .2 and ::2 (the RFC 2544
// benchmarking range, private to these namespaces). Everything is deleted
// at the end of t.
func VethPair(t testing.TB, o Options) (a, b *Host) {
	t.Helper()
	testenv.Root(t)
	if o.MTU == 0 {
		o.MTU = 1500
	}
	n := seq.Add(1)
	names := [2]string{vethPairName(os.Getpid(), n, "a"), vethPairName(os.Getpid(), n, "b")}
	hosts := [2]*Host{{NSName: names[0], Ifname: "veth0"}, {NSName: names[1], Ifname: "veth1"}}
	hosts[0].IPv4, hosts[1].IPv4 = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	hosts[0].IPv6, hosts[1].IPv6 = netip.MustParseAddr("fd00:198:18::1"), netip.MustParseAddr("fd00:198:18::2")
	makeNamespaces(t, nsSlot{&hosts[0].NS, names[0]}, nsSlot{&hosts[1].NS, names[1]})
	// Create the pair inside A, move veth1 to B, configure both.
	err := hosts[0].Do(func() error {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = "veth0", o.MTU
		v := &netlink.Veth{LinkAttrs: la, PeerName: "veth1", PeerNamespace: netlink.NsFd(int(hosts[1].NS))}
		if err := netlink.LinkAdd(v); err != nil {
			return fmt.Errorf("veth: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		err := h.Do(func() error {
			l, err := configure(h.Ifname, o.MTU, h.IPv4.String()+"/24", h.IPv6.String()+"/64")
			if err != nil {
				return err
			}
			h.Ifindex = l.Attrs().Index
			copy(h.MAC[:], l.Attrs().HardwareAddr)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Both ends up is not yet a link that carries traffic: the kernel's
	// linkwatch work, which runs when it gets to it (a second or more on
	// a loaded machine), attaches the real qdisc in place of noop (which
	// drops every frame: a raw RoCE v1 frame sent before then was lost and
	// its receiver waited until go test's timeout), sets the operstate and
	// makes the link-local address. Wait for all three.
	for _, h := range hosts {
		waitReady(t, h.NS, h.NSName, h.Ifname)
	}
	return hosts[0], hosts[1]
}

// nsSlot is a namespace for makeNamespaces to make: its name, and the
// handle to fill.
type nsSlot struct {
	ns   *netns.NsHandle
	name string
}

// makeNamespaces makes the named network namespaces, deleted when t ends:
// a namespace that cannot be deleted is a failure naming it, as it would
// keep its links and addresses until the host restarts. /run/netns is prepared first as
// iproute2 prepares it (ready), so a later `ip netns add` cannot hide
// these namespaces' mounts.
func makeNamespaces(t testing.TB, list ...nsSlot) {
	t.Helper()
	reapErrs, err := ready()
	if err != nil {
		t.Fatalf("nettest: preparing %s: %v", netnsDir, err)
	}
	for _, err := range reapErrs {
		t.Errorf("nettest: a namespace left by an earlier test process cannot be deleted: %v", err)
	}
	made := make([]bool, len(list)) // NewNamed was called: a file, and maybe a mount, to delete
	err = Do(netns.None(), func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		for i, x := range list {
			made[i] = true
			ns, err := netns.NewNamed(x.name) // also moves this thread into it
			if err != nil {
				return fmt.Errorf("netns %s: %w", x.name, err)
			}
			*x.ns = ns
			if err := netns.Set(orig); err != nil {
				return err
			}
		}
		return nil
	})
	t.Cleanup(func() {
		for i, x := range list {
			if x.ns.IsOpen() {
				x.ns.Close()
			}
			if !made[i] {
				continue
			}
			if err := deleteNamed(x.name); err != nil {
				t.Errorf("nettest: namespace %s is left behind: %v", x.name, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until ifname in ns can carry traffic (notReady).
func waitReady(t testing.TB, ns netns.NsHandle, nsName, ifname string) {
	t.Helper()
	var why string
	err := Do(ns, func() error {
		if !testenv.Poll(testenv.Slow, func() bool { why = notReady(ifname); return why == "" }) {
			return fmt.Errorf("nettest: %s in %s not ready after %v: %s", ifname, nsName, testenv.Slow, why)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// notReady says what ifname (in the calling thread's namespace) lacks to
// carry traffic, or "" when it lacks nothing: operstate UP, a qdisc other
// than noop, and a link-local IPv6 address that is not tentative.
func notReady(ifname string) string {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err.Error()
	}
	if st := l.Attrs().OperState; st != netlink.OperUp {
		return "operstate " + st.String()
	}
	qs, err := netlink.QdiscList(l)
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(qs, func(q netlink.Qdisc) bool { return q.Type() != "noop" }) {
		return "no qdisc but noop"
	}
	as, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(as, func(a netlink.Addr) bool {
		return a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0
	}) {
		return "no link-local address"
	}
	return ""
}

// HardwareAddr returns h's MAC as a net.HardwareAddr.
func (h *Host) HardwareAddr() net.HardwareAddr { return net.HardwareAddr(h.MAC[:]) }

// Iface is one of a router's interfaces.
type Iface struct {
	Ifname  string
	Ifindex int
	MAC     wire.MAC
	IPv4    netip.Addr
	IPv6    netip.Addr
}

// Router is the middle namespace of Routed: an IPv4 and IPv6 router with
// one interface toward each end.
type Router struct {
	NS     netns.NsHandle
	NSName string
	A, B   Iface // toward A, toward B
}

// Do runs fn on a locked OS thread inside the router's namespace.
func (r *Router) Do(fn func() error) error { return Do(r.NS, fn) }

// Routed makes three namespaces, A — R — B, as the router issue describes
// them: A (198.18.1.1/24, fd00:198:1::1/64 on rt-a0) and B (198.18.2.1/24,
// fd00:198:2::1/64 on rt-b0) are on two subnets, each with a default route
// through R (198.18.1.254 and fd00:198:1::fe on rt-r0, 198.18.2.254 and
// fd00:198:2::fe on rt-r1), which forwards IPv4 and IPv6: a packet from A
// to B crosses a real Linux router and arrives with its TTL (hop limit)
// decremented. Everything is deleted at the end of t.
func Routed(t testing.TB, o Options) (a *Host, r *Router, b *Host) {
	t.Helper()
	testenv.Root(t)
	if o.MTU == 0 {
		o.MTU = 1500
	}
	n := seq.Add(1)
	name := func(side string) string { return vethPairName(os.Getpid(), n, side) }
	p := netip.MustParseAddr
	a = &Host{NSName: name("a"), Ifname: "rt-a0", IPv4: p("198.18.1.1"), IPv6: p("fd00:198:1::1"),
		Gateway4: p("198.18.1.254"), Gateway6: p("fd00:198:1::fe")}
	b = &Host{NSName: name("b"), Ifname: "rt-b0", IPv4: p("198.18.2.1"), IPv6: p("fd00:198:2::1"),
		Gateway4: p("198.18.2.254"), Gateway6: p("fd00:198:2::fe")}
	r = &Router{NSName: name("r"),
		A: Iface{Ifname: "rt-r0", IPv4: a.Gateway4, IPv6: a.Gateway6},
		B: Iface{Ifname: "rt-r1", IPv4: b.Gateway4, IPv6: b.Gateway6}}
	makeNamespaces(t, nsSlot{&a.NS, a.NSName}, nsSlot{&r.NS, r.NSName}, nsSlot{&b.NS, b.NSName})
	// The two veth pairs, made in R, one end of each moved to A and B.
	err := r.Do(func() error {
		for _, c := range []struct {
			local, peer string
			ns          netns.NsHandle
		}{{r.A.Ifname, a.Ifname, a.NS}, {r.B.Ifname, b.Ifname, b.NS}} {
			la := netlink.NewLinkAttrs()
			la.Name, la.MTU = c.local, o.MTU
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: c.peer, PeerNamespace: netlink.NsFd(int(c.ns))}); err != nil {
				return fmt.Errorf("veth %s: %w", c.local, err)
			}
		}
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1"), 0); err != nil {
				return err
			}
		}
		for _, i := range []*Iface{&r.A, &r.B} {
			l, err := configure(i.Ifname, o.MTU, i.IPv4.String()+"/24", i.IPv6.String()+"/64")
			if err != nil {
				return err
			}
			i.Ifindex = l.Attrs().Index
			copy(i.MAC[:], l.Attrs().HardwareAddr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Host{a, b} {
		err := h.Do(func() error {
			l, err := configure(h.Ifname, o.MTU, h.IPv4.String()+"/24", h.IPv6.String()+"/64")
			if err != nil {
				return err
			}
			for _, gw := range []netip.Addr{h.Gateway4, h.Gateway6} {
				rt := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice()}
				if err := netlink.RouteAdd(rt); err != nil {
					return fmt.Errorf("default route via %v: %w", gw, err)
				}
			}
			h.Ifindex = l.Attrs().Index
			copy(h.MAC[:], l.Attrs().HardwareAddr)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []struct {
		ns           netns.NsHandle
		name, ifname string
	}{{a.NS, a.NSName, a.Ifname}, {r.NS, r.NSName, r.A.Ifname}, {r.NS, r.NSName, r.B.Ifname}, {b.NS, b.NSName, b.Ifname}} {
		waitReady(t, x.ns, x.name, x.ifname)
	}
	return a, r, b
}

// configure brings lo and ifname up in the calling thread's namespace,
// with the MTU and the addresses (no duplicate address detection), and
// returns the netdev.
func configure(ifname string, mtu int, addrs ...string) (netlink.Link, error) {
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return nil, err
	}
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return nil, err
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return nil, err
	}
	for _, p := range addrs {
		addr, err := netlink.ParseAddr(p)
		if err != nil {
			return nil, err
		}
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(l, addr); err != nil {
			return nil, fmt.Errorf("addr %s: %w", p, err)
		}
	}
	// No DAD for the link-local address either (see VethPair).
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/accept_dad", []byte("0"), 0); err != nil {
		return nil, fmt.Errorf("accept_dad: %w", err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return nil, err
	}
	return netlink.LinkByName(ifname)
}
