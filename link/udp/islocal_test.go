package udp

import (
	"net/netip"
	"testing"
)

// TestIsLocal: an address of the set, in either form, is local; another,
// or one of the set with a zone, is not; SetAddrs replaces the set.
func TestIsLocal(t *testing.T) {
	l := &Link{}
	l.SetAddrs([]netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00::1")})
	for _, c := range []struct {
		a    string
		want bool
	}{
		{"::ffff:198.18.0.1", true}, // a GID's form of an IPv4 address
		{"fd00::1", true},
		{"::ffff:198.18.0.2", false},
		{"fd00::2", false},
		{"fd00::1%eth0", false},
	} {
		a := netip.MustParseAddr(c.a)
		if got := l.isLocal(netip.AddrFrom16(a.As16()).WithZone(a.Zone())); got != c.want {
			t.Errorf("isLocal(%s) = %v, want %v", c.a, got, c.want)
		}
	}
	l.SetAddrs([]netip.Addr{netip.MustParseAddr("198.18.0.2")})
	if l.isLocal(netip.AddrFrom16(netip.MustParseAddr("198.18.0.1").As16())) || !l.isLocal(netip.AddrFrom16(netip.MustParseAddr("198.18.0.2").As16())) {
		t.Error("SetAddrs did not replace the set")
	}
	l.SetAddrs(nil)
	if l.isLocal(netip.AddrFrom16(netip.MustParseAddr("198.18.0.2").As16())) {
		t.Error("an empty set has a local address")
	}
}

// BenchmarkIsLocal is the check every received packet makes: its
// destination is one of the device's addresses (two here, IPv4 and IPv6).
func BenchmarkIsLocal(b *testing.B) {
	l := &Link{}
	l.SetAddrs([]netip.Addr{netip.MustParseAddr("fd00::1"), netip.MustParseAddr("198.18.0.1")})
	a := netip.AddrFrom16(netip.MustParseAddr("198.18.0.1").As16())
	for b.Loop() {
		if !l.isLocal(a) {
			b.Fatal("not local")
		}
	}
}
