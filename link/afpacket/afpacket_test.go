package afpacket

import (
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/neigh"
	"github.com/goroce/goroce/wire"
)

func frame(t *testing.T, v wire.Version, v6 bool, dport uint16) []byte {
	f := wire.PacketFields{Version: v, Eth: &wire.EthernetFields{},
		BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: 0xffff}, Payload: []byte("x")}
	switch {
	case v == wire.RoCEv1:
		f.GRH = &wire.IPv6Fields{NextHeader: wire.GRHNextHdrIBTH, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2")}
	case v6:
		f.IPv6 = &wire.IPv6Fields{NextHeader: 17, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	default:
		f.IPv4 = &wire.IPv4Fields{Protocol: 17, TTL: 64, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
	}
	f.UDP = wire.UDPFields{SrcPort: 50000, DstPort: dport}
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFilters(t *testing.T) {
	arp := neigh.ARPRequest(wire.MAC{2}, netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"))
	ns := neigh.NeighborSolicitation(wire.MAC{2}, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"))
	// One program for every link: a v1-only link takes RoCE v2 in too, to
	// count and drop it (TestV1OnlyDropsV2).
	vm, err := bpf.NewVM(filterProg())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		f    []byte
		want bool
	}{
		{"RoCE v1", frame(t, wire.RoCEv1, false, 0), true},
		{"ARP", arp, true},
		{"ICMPv6 NS", ns, true},
		{"RoCE v2/IPv4", frame(t, wire.RoCEv2, false, 4791), true},
		{"RoCE v2/IPv6", frame(t, wire.RoCEv2, true, 4791), true},
		{"UDP/IPv4 53", frame(t, wire.RoCEv2, false, 53), false},
		{"UDP/IPv6 53", frame(t, wire.RoCEv2, true, 53), false},
	} {
		n, err := vm.Run(c.f)
		if err != nil {
			t.Fatal(err)
		}
		if got := n > 0; got != c.want {
			t.Errorf("%s: accepted=%v, want %v", c.name, got, c.want)
		}
	}
}

// RoCE v1 between two namespaces over veth, with link-local EUI-64 GIDs
// (the MAC comes from the GID) and with GIDs from the netdevs' IPv4 and
// IPv6 addresses (the MAC comes from the kernel's neighbour resolution);
// and RoCE v2 sent raw.
func TestVeth(t *testing.T) {
	for _, c := range []struct {
		name string
		v    wire.Version
		gid  func(h *nettest.Host) netip.Addr
	}{
		{"v1/link-local", wire.RoCEv1, func(h *nettest.Host) netip.Addr {
			m := h.MAC
			return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
		}},
		{"v1/IPv4-mapped", wire.RoCEv1, func(h *nettest.Host) netip.Addr { return netip.AddrFrom16(h.IPv4.As16()) }},
		{"v1/IPv6", wire.RoCEv1, func(h *nettest.Host) netip.Addr { return h.IPv6 }},
		{"v2/IPv4", wire.RoCEv2, func(h *nettest.Host) netip.Addr { return netip.AddrFrom16(h.IPv4.As16()) }},
		{"v2/IPv6", wire.RoCEv2, func(h *nettest.Host) netip.Addr { return h.IPv6 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
				open := func(h *nettest.Host) *Link {
					var l *Link
					if err := h.Do(func() (err error) {
						l, err = New(Config{Ifindex: h.Ifindex, GIDs: []netip.Addr{c.gid(h)}, V2: c.v == wire.RoCEv2})
						if err == nil {
							l.Resolver().SetSources([]netip.Addr{h.IPv4, h.IPv6})
						}
						return err
					}); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() {
						if s := l.Stats(); s.RxBadICRC.Load()+s.RxMalformed.Load() != 0 {
							t.Errorf("%d bad ICRC, %d malformed", s.RxBadICRC.Load(), s.RxMalformed.Load())
						}
					})
					return l
				}
				return linktest.Pair{A: open(ha), B: open(hb), AGID: c.gid(ha), BGID: c.gid(hb), Version: c.v}
			})
		})
	}
}
