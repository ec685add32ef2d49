package afpacket

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/neigh"
	"github.com/goroce/goroce/wire"
)

func openOn(t *testing.T, h *nettest.Host, v2 bool, gids ...netip.Addr) *Link {
	t.Helper()
	var l *Link
	if err := h.Do(func() (err error) {
		l, err = New(Config{Ifindex: h.Ifindex, GIDs: gids, V2: v2})
		if err == nil {
			l.Resolver().SetSources([]netip.Addr{h.IPv4, h.IPv6})
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mapped(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}

// receiver reads l in the background until l closes; its channel gives
// the packets in order.
func receiver(t *testing.T, l *Link) <-chan link.Packet {
	c := make(chan link.Packet, 1024)
	go func() {
		defer close(c)
		for {
			b := linktest.NewBuffers(16)
			n, err := l.Recv(b)
			if err != nil {
				return
			}
			for _, pk := range b[:n] {
				c <- pk
			}
		}
	}()
	return c
}

// recvOne waits up to limit for one packet from a receiver.
func recvOne(c <-chan link.Packet, limit time.Duration) (link.Packet, bool) {
	select {
	case pk, ok := <-c:
		return pk, ok
	case <-time.After(limit):
		return link.Packet{}, false
	}
}

// TestAcrossRouter runs the link conformance suite between A and B, two
// subnets joined by a namespace that routes (nettest.Routed), over IPv4 and
// IPv6: every frame goes to the gateway's MAC, and arrives having crossed a
// real router, TTL decremented and its ICRC (which masks the TTL) intact;
// the TTL sent is the route's, not the address handle's.
func TestAcrossRouter(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "IPv4"
		if v6 {
			name = "IPv6"
		}
		gid := func(h *nettest.Host) netip.Addr {
			if v6 {
				return h.IPv6
			}
			return mapped(h.IPv4)
		}
		t.Run(name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				a, _, b := nettest.Routed(t, nettest.Options{})
				return linktest.Pair{A: openOn(t, a, true, gid(a)), B: openOn(t, b, true, gid(b)), AGID: gid(a), BGID: gid(b), Version: wire.RoCEv2}
			})
			t.Run("HopLimit", func(t *testing.T) {
				a, r, b := nettest.Routed(t, nettest.Options{})
				la, lb := openOn(t, a, true, gid(a)), openOn(t, b, true, gid(b))
				pk := linktest.TransportPacket(la.Headroom(), 0x11, 1, []byte("across"))
				// Hop limit 1, as ibv_rc_pingpong puts in its AH: Linux sends
				// the route's instead (64), and so does the link.
				pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: gid(a), DstGID: gid(b), HopLimit: 1, TrafficClass: 0x02}
				if n, err := la.Send([]link.Packet{pk}); n != 1 || err != nil {
					t.Fatalf("Send = %d, %v (tx_drop_no_route %d)", n, err, la.Stats().TxNoRoute.Load())
				}
				got, ok := recvOne(receiver(t, lb), 10*time.Second)
				if !ok {
					t.Fatal("nothing arrived at B")
				}
				if got.Addr.HopLimit != 63 {
					t.Errorf("hop limit %d at B, want 63: the packet did not cross one router", got.Addr.HopLimit)
				}
				// B's frame came from R's B-side interface.
				if src := wire.MAC(got.Buf[6:12]); src != r.B.MAC {
					t.Errorf("B's frame from %v, want the router's %v", src, r.B.MAC)
				}
				if s := lb.Stats(); s.RxBadICRC.Load() != 0 {
					t.Errorf("B counted %d bad ICRCs", s.RxBadICRC.Load())
				}
			})
		})
	}
}

// TestV1OffLink: RoCE v1 is one Ethernet segment; a v1 frame to B, which
// A's routes reach through R, is not sent, and PathError says why.
func TestV1OffLink(t *testing.T) {
	a, _, b := nettest.Routed(t, nettest.Options{})
	la := openOn(t, a, false, mapped(a.IPv4))
	pk := linktest.TransportPacket(la.Headroom(), 0x11, 1, []byte("v1"))
	pk.Addr = link.Addr{Version: wire.RoCEv1, SrcGID: mapped(a.IPv4), DstGID: mapped(b.IPv4)}
	if n, err := la.Send([]link.Packet{pk}); n != 0 || err != nil {
		t.Fatalf("Send = %d, %v; want 0 sent", n, err)
	}
	if la.Stats().TxNoRoute.Load() != 1 {
		t.Errorf("tx_drop_no_route = %d, want 1", la.Stats().TxNoRoute.Load())
	}
	err := la.PathError(mapped(b.IPv4), wire.RoCEv1)
	var ne *neigh.Error
	if !errors.As(err, &ne) || ne.Reason != neigh.V1OffLink || !errors.Is(err, syscall.ENETUNREACH) ||
		!strings.Contains(err.Error(), "198.18.2.1 is reached via 198.18.1.254 on rt-a0") || !strings.Contains(err.Error(), "RoCE v1") {
		t.Errorf("PathError = %v", err)
	}
	// RoCE v2 to the same address is fine.
	if err := la.PathError(mapped(b.IPv4), wire.RoCEv2); err != nil {
		t.Errorf("v2 PathError = %v", err)
	}
}

// TestNoNeighbour: a gateway, and an on-link destination, that never answer
// ARP (or ND): packets are held for the resolution (no send waits for it),
// then dropped and counted, and PathError names the route and the silent
// next hop; a route through another netdev is named too.
func TestNoNeighbour(t *testing.T) {
	a, _, _ := nettest.Routed(t, nettest.Options{})
	err := a.Do(func() error {
		l, err := netlink.LinkByName(a.Ifname)
		if err != nil {
			return err
		}
		for _, c := range []struct{ dst, gw string }{{"198.18.7.0/24", "198.18.1.200"}, {"fd00:198:7::/64", "fd00:198:1::200"}} {
			_, dst, _ := net.ParseCIDR(c.dst)
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.ParseIP(c.gw)}); err != nil {
				return err
			}
		}
		// Another interface of A's namespace: a veth pair inside it.
		la := netlink.NewLinkAttrs()
		la.Name = "other0"
		other := &netlink.Veth{LinkAttrs: la, PeerName: "other1"}
		if err := netlink.LinkAdd(other); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.99.0.1/24")
		if err := netlink.AddrAdd(other, addr); err != nil {
			return err
		}
		return netlink.LinkSetUp(other)
	})
	if err != nil {
		t.Fatal(err)
	}
	l := openOn(t, a, true, mapped(a.IPv4), a.IPv6)
	for _, c := range []struct {
		src, dst netip.Addr
		want     string
	}{
		{mapped(a.IPv4), mapped(netip.MustParseAddr("198.18.7.1")), "198.18.7.1 is reached via 198.18.1.200 on rt-a0: no ARP reply from 198.18.1.200"},
		{a.IPv6, netip.MustParseAddr("fd00:198:7::1"), "fd00:198:7::1 is reached via fd00:198:1::200 on rt-a0: no Neighbor Advertisement from fd00:198:1::200"},
		{mapped(a.IPv4), mapped(netip.MustParseAddr("198.18.1.77")), "198.18.1.77 is on-link on rt-a0: no ARP reply from 198.18.1.77"},
	} {
		send := func() time.Duration {
			pk := linktest.TransportPacket(l.Headroom(), 0x11, 1, []byte("x"))
			pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: c.src, DstGID: c.dst}
			start := time.Now()
			if n, err := l.Send([]link.Packet{pk}); n != 1 || err != nil {
				t.Fatalf("Send to %v = %d, %v; want 1 (held for the resolution)", c.dst, n, err)
			}
			return time.Since(start)
		}
		before := l.Stats().TxNoRoute.Load()
		// No send waits for the resolution (each held): a wait of a second
		// per packet would stall a sender for minutes, and one with the
		// link's lock held every other sender of the device.
		for i := 0; i < 6; i++ {
			if d := send(); d > 500*time.Millisecond {
				t.Errorf("send %d to a silent next hop waited %v", i+1, d)
			}
		}
		// Dropped and counted once the wait for the answer has passed.
		testenv.Poll(testenv.Slow, func() bool { return l.Stats().TxNoRoute.Load()-before >= 6 })
		if got := l.Stats().TxNoRoute.Load() - before; got != 6 {
			t.Errorf("tx_drop_no_route +%d, want +6", got)
		}
		err := l.PathError(c.dst, wire.RoCEv2)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) || !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("PathError(%v) = %v\nwant %q…", c.dst, err, c.want)
		}
	}
	err = l.PathError(mapped(netip.MustParseAddr("10.99.0.2")), wire.RoCEv2)
	if !errors.Is(err, syscall.EHOSTUNREACH) || !strings.Contains(err.Error(), "leaves through other0, not rt-a0") {
		t.Errorf("PathError(behind other0) = %v", err)
	}
}

// TestSendHoldsForNeighbour: a packet to a next hop being resolved is held,
// not waited for. Send returns at once; a packet to a live destination,
// sent after it, leaves (held in its turn while the gateway is resolved,
// then sent) and arrives while the first is still held; at Close the held
// one is dropped and counted. Before, Send waited for the resolution (a
// second for a silent next hop) holding the link's lock, so every packet
// of the device waited, and a peer could cause that at will by writing
// from an address nobody answers ARP for.
func TestSendHoldsForNeighbour(t *testing.T) {
	defer func(w time.Duration) { holdWait = w }(holdWait)
	holdWait = time.Minute // longer than the test: the silent one stays held
	a, _, b := nettest.Routed(t, nettest.Options{})
	la, lb := openOn(t, a, true, mapped(a.IPv4)), openOn(t, b, true, mapped(b.IPv4))
	rb := receiver(t, lb)
	send := func(dst netip.Addr, payload string) {
		pk := linktest.TransportPacket(la.Headroom(), 0x11, 1, []byte(payload))
		pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: mapped(a.IPv4), DstGID: dst}
		if n, err := la.Send([]link.Packet{pk}); n != 1 || err != nil {
			t.Fatalf("Send to %v = %d, %v; want 1 (sent or held)", dst, n, err)
		}
	}
	send(mapped(netip.MustParseAddr("198.18.1.77")), "held") // on-link on rt-a0: nobody answers ARP
	if n := la.Stats().TxNoRoute.Load(); n != 0 {
		t.Fatalf("tx_drop_no_route %d after the send to a silent next hop: it was waited for and dropped, not held", n)
	}
	send(mapped(b.IPv4), "through")
	got, ok := recvOne(rb, 10*time.Second)
	if !ok || !strings.Contains(string(got.Transport()), "through") {
		t.Fatalf("the packet to B did not arrive (got %v)", ok)
	}
	if n := la.Stats().TxNoRoute.Load(); n != 0 {
		t.Fatalf("tx_drop_no_route %d while the silent next hop's packet should still be held", n)
	}
	la.Close()
	if n := la.Stats().TxNoRoute.Load(); n != 1 {
		t.Errorf("after Close, tx_drop_no_route %d, want 1: the held packet dropped and counted", n)
	}
}

// TestFollowsNeighbourUpdates: when the gateway's MAC changes and the
// kernel's neighbour table learns the new one, the link sends there from
// then on, as the kernel's own traffic would.
func TestFollowsNeighbourUpdates(t *testing.T) {
	a, r, b := nettest.Routed(t, nettest.Options{})
	la, lb := openOn(t, a, true, mapped(a.IPv4)), openOn(t, b, true, mapped(b.IPv4))
	rx := receiver(t, lb)
	send := func(psn wire.PSN) bool {
		pk := linktest.TransportPacket(la.Headroom(), 0x11, psn, []byte("x"))
		pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: mapped(a.IPv4), DstGID: mapped(b.IPv4)}
		if n, err := la.Send([]link.Packet{pk}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		_, ok := recvOne(rx, time.Second)
		return ok
	}
	if !send(1) {
		t.Fatal("nothing arrived before the change")
	}
	newMAC := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x20, 0x30}
	if err := r.Do(func() error {
		l, err := netlink.LinkByName(r.A.Ifname)
		if err != nil {
			return err
		}
		return netlink.LinkSetHardwareAddr(l, newMAC)
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.Do(func() error {
		return netlink.NeighSet(&netlink.Neigh{LinkIndex: a.Ifindex, Family: netlink.FAMILY_V4, IP: a.Gateway4.AsSlice(),
			HardwareAddr: newMAC, State: netlink.NUD_REACHABLE})
	}); err != nil {
		t.Fatal(err)
	}
	// The update reaches the resolver through netlink, asynchronously.
	deadline := time.Now().Add(10 * time.Second)
	for psn := wire.PSN(2); ; psn++ {
		if send(psn) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the link kept sending to the gateway's old MAC")
		}
	}
}
