package udp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/wire"
)

func TestRoCEFilter(t *testing.T) {
	vm, err := bpf.NewVM(pktring.UDPPortFilter(4791))
	if err != nil {
		t.Fatal(err)
	}
	eth := func(etype uint16) []byte {
		e := make([]byte, wire.EthernetLen)
		binary.BigEndian.PutUint16(e[12:], etype)
		return e
	}
	v4 := func(proto uint8, frag uint16, ihl int, dport uint16) []byte {
		f := wire.IPv4Fields{Protocol: proto, TTL: 64, Flags: 2, FragOffset: frag,
			Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2"), Options: make([]byte, ihl-20)}
		b := f.Append(eth(wire.EtherTypeIPv4))
		u := wire.UDPFields{SrcPort: 50000, DstPort: dport, Length: 8}
		return append(u.Append(b), make([]byte, 16)...)
	}
	v6 := func(next uint8, dport uint16) []byte {
		f := wire.IPv6Fields{NextHeader: next, HopLimit: 64, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
		b := f.Append(eth(wire.EtherTypeIPv6))
		u := wire.UDPFields{SrcPort: 50000, DstPort: dport, Length: 8}
		return append(u.Append(b), make([]byte, 16)...)
	}
	for _, c := range []struct {
		name string
		pkt  []byte
		want bool
	}{
		{"IPv4 UDP 4791", v4(17, 0, 20, 4791), true},
		{"IPv4 with options UDP 4791", v4(17, 0, 24, 4791), true},
		{"IPv4 UDP 53", v4(17, 0, 20, 53), false},
		{"IPv4 TCP", v4(6, 0, 20, 4791), false},
		{"IPv4 later fragment", v4(17, 100, 20, 4791), false},
		{"IPv6 UDP 4791", v6(17, 4791), true},
		{"IPv6 UDP 53", v6(17, 53), false},
		{"IPv6 TCP", v6(6, 4791), false},
		{"ARP", append(eth(0x0806), 0x00, 0x01, 0x08, 0x00, 6, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"IPv4 UDP 4791 behind the IPv6 Ethertype", append(eth(wire.EtherTypeIPv6), v4(17, 0, 20, 4791)[wire.EthernetLen:]...), false},
	} {
		n, err := vm.Run(c.pkt)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := n > 0; got != c.want {
			t.Errorf("%s: accepted=%v, want %v", c.name, got, c.want)
		}
	}
}
