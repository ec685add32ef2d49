package udp_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/wire"
)

// Two unprivileged links on loopback, bound to 127.0.0.1 and 127.0.0.2,
// each on port 4791: the conformance suite, with ICRCs verified by solving
// for the IPv4 ID the socket does not show.
func TestLoopbackIPv4(t *testing.T) {
	a4, b4 := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		a, err := udp.New(udp.Config{Bind: a4, Addrs: []netip.Addr{a4}})
		if err != nil {
			t.Fatal(err)
		}
		b, err := udp.New(udp.Config{Bind: b4, Addrs: []netip.Addr{b4}})
		if err != nil {
			a.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if a.Stats().RxBadICRC.Load()+b.Stats().RxBadICRC.Load() != 0 {
				t.Errorf("ICRC failures on loopback: %d, %d", a.Stats().RxBadICRC.Load(), b.Stats().RxBadICRC.Load())
			}
		})
		return linktest.Pair{A: a, B: b, AGID: netip.AddrFrom16(a4.As16()), BGID: netip.AddrFrom16(b4.As16()), Version: wire.RoCEv2}
	})
}
