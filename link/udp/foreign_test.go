package udp

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestNotForUs: a RoCE v2 packet to an address of the receiver's host that
// is not one of the link's (another device's GID: the kernel accepts the
// datagram, the link must not) is counted in rx_not_for_us and never
// delivered; the packet to the link's own address sent after it is
// delivered, alone. Both receive paths: the privileged link's packet
// socket and the unprivileged link's UDP socket.
func TestNotForUs(t *testing.T) {
	for _, priv := range []bool{true, false} {
		name := "unprivileged"
		if priv {
			name = "privileged"
		}
		t.Run(name, func(t *testing.T) {
			ha, hb := nettest.VethPair(t, nettest.Options{})
			// The second address is hb's, on the same interface, but not
			// given to the link (openOn gives it hb.IPv4 and hb.IPv6).
			other := netip.MustParseAddr("198.18.99.2")
			if err := hb.Do(func() error {
				l, err := netlink.LinkByIndex(hb.Ifindex)
				if err != nil {
					return err
				}
				a, err := netlink.ParseAddr(other.String() + "/32")
				if err != nil {
					return err
				}
				return netlink.AddrAdd(l, a)
			}); err != nil {
				t.Fatal(err)
			}
			if err := ha.Do(func() error {
				return netlink.RouteAdd(&netlink.Route{LinkIndex: ha.Ifindex, Dst: netlink.NewIPNet(other.AsSlice())})
			}); err != nil {
				t.Fatal(err)
			}
			a, b := openOn(t, ha, false), openOn(t, hb, priv)
			src := netip.AddrFrom16(ha.IPv4.As16())
			foreign := link.Addr{Version: wire.RoCEv2, SrcGID: src, DstGID: netip.AddrFrom16(other.As16()), HopLimit: 64}
			ours := link.Addr{Version: wire.RoCEv2, SrcGID: src, DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
			send(t, a, writeBatch(a.Headroom(), foreign, 3, 0, 1), writeBatch(a.Headroom(), ours, 9, 0, 1))
			checkPSNs(t, recvPSNs(t, b, 1), 9)
			s := b.Stats()
			if n := s.RxNotForUs.Load(); n != 1 {
				t.Errorf("rx_not_for_us %d, want 1", n)
			}
			if n := s.RxBadICRC.Load() + s.RxMalformed.Load(); n != 0 {
				t.Errorf("%d bad ICRC or malformed: the foreign packet was judged by something else", n)
			}
			// The foreign packet came first, so it is not still waiting.
			if n, err := b.TryRecv(linktest.NewBuffers(8)); n != 0 || err != nil {
				t.Errorf("TryRecv after: %d packets, %v; want none", n, err)
			}
		})
	}
}
