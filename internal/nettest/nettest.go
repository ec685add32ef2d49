// Package nettest makes the networks goroce's tests run on: two network
// namespaces joined by a veth pair, with IPv4 and IPv6 addresses, deleted
// when the test ends. It needs root; testenv decides what a missing
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
	reapErrs, err := ready()
	if err != nil {
		t.Fatalf("nettest: preparing %s: %v", netnsDir, err)
	}
	for _, err := range reapErrs {
		t.Errorf("nettest: a namespace left by an earlier test process cannot be deleted: %v", err)
	}
	n := seq.Add(1)
	names := [2]string{vethPairName(os.Getpid(), n, "a"), vethPairName(os.Getpid(), n, "b")}
	hosts := [2]*Host{{NSName: names[0], Ifname: "veth0"}, {NSName: names[1], Ifname: "veth1"}}
	hosts[0].IPv4, hosts[1].IPv4 = netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	hosts[0].IPv6, hosts[1].IPv6 = netip.MustParseAddr("fd00:198:18::1"), netip.MustParseAddr("fd00:198:18::2")
	var made [2]bool // NewNamed was called: a file, and maybe a mount, to delete
	err = Do(netns.None(), func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		for i, h := range hosts {
			made[i] = true
			ns, err := netns.NewNamed(h.NSName) // also moves this thread into it
			if err != nil {
				return fmt.Errorf("netns %s: %w", h.NSName, err)
			}
			h.NS = ns
			if err := netns.Set(orig); err != nil {
				return err
			}
		}
		return nil
	})
	t.Cleanup(func() {
		for i, h := range hosts {
			if h.NS.IsOpen() {
				h.NS.Close()
			}
			if !made[i] {
				continue
			}
			// A namespace left behind keeps its veth and addresses until
			// the host restarts: a failure, naming it.
			if err := deleteNamed(h.NSName); err != nil {
				t.Errorf("nettest: namespace %s is left behind: %v", h.NSName, err)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// Create the pair inside A, move veth1 to B, configure both.
	err = hosts[0].Do(func() error {
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
			lo, err := netlink.LinkByName("lo")
			if err == nil {
				err = netlink.LinkSetUp(lo)
			}
			if err != nil {
				return err
			}
			l, err := netlink.LinkByName(h.Ifname)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMTU(l, o.MTU); err != nil {
				return err
			}
			for _, p := range []string{h.IPv4.String() + "/24", h.IPv6.String() + "/64"} {
				addr, err := netlink.ParseAddr(p)
				if err != nil {
					return err
				}
				addr.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, addr); err != nil {
					return fmt.Errorf("addr %s: %w", p, err)
				}
			}
			// No duplicate address detection for the link-local address
			// either (the others are added NODAD): a tentative fe80::
			// address can neither send nor receive for a second or two,
			// and link-local GIDs are used in tests.
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+h.Ifname+"/accept_dad", []byte("0"), 0); err != nil {
				return fmt.Errorf("accept_dad: %w", err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			l, err = netlink.LinkByName(h.Ifname)
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
		var why string
		err := h.Do(func() error {
			if !testenv.Poll(testenv.Slow, func() bool { why = notReady(h.Ifname); return why == "" }) {
				return fmt.Errorf("nettest: %s in %s not ready after %v: %s", h.Ifname, h.NSName, testenv.Slow, why)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return hosts[0], hosts[1]
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
