package link_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

func TestMulticastMAC(t *testing.T) {
	cases := []struct {
		gid  string
		mac  wire.MAC
		mcst bool
	}{
		// mckey.pcap: the UD SEND to 239.1.2.3 leaves for 01:00:5e:01:02:03.
		{"::ffff:239.1.2.3", wire.MAC{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, true},
		// Only the low 23 bits of the group go into the MAC (RFC 1112 §6.4).
		{"::ffff:239.129.2.3", wire.MAC{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, true},
		{"::ffff:224.0.0.22", wire.MAC{0x01, 0x00, 0x5e, 0x00, 0x00, 0x16}, true},
		{"ff0e::1:2:3:4", wire.MAC{0x33, 0x33, 0x00, 0x03, 0x00, 0x04}, true},
		{"ff02::1:ff00:11", wire.MAC{0x33, 0x33, 0xff, 0x00, 0x00, 0x11}, true},
		{"::ffff:192.0.2.11", wire.MAC{}, false},
		{"fd00:c0:2::11", wire.MAC{}, false},
		{"fe80::1", wire.MAC{}, false},
	}
	for _, c := range cases {
		g := netip.MustParseAddr(c.gid)
		mac, ok := link.MulticastMAC(g)
		if ok != c.mcst || mac != c.mac || link.MulticastGID(g) != c.mcst {
			t.Errorf("%s: MulticastMAC = %v, %v; MulticastGID %v; want %v, %v", c.gid, mac, ok, link.MulticastGID(g), c.mac, c.mcst)
		}
	}
	if g := link.GroupAddr(netip.MustParseAddr("::ffff:239.1.2.3")); g != netip.MustParseAddr("239.1.2.3") {
		t.Errorf("GroupAddr(::ffff:239.1.2.3) = %v", g)
	}
}
