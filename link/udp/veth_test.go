package udp_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/wire"
)

// Between two namespaces over a veth pair, in privileged mode (AF_PACKET
// receive): every ICRC the sender predicted is verified over the real IP
// header, IPv4 and IPv6; and in unprivileged mode likewise.
func TestVeth(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, priv := range []bool{true, false} {
			name := fam + "/unprivileged"
			if priv {
				name = fam + "/privileged"
			}
			t.Run(name, func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
					addr := func(h *nettest.Host) netip.Addr {
						if fam == "IPv4" {
							return h.IPv4
						}
						return h.IPv6
					}
					open := func(h *nettest.Host) *udp.Link {
						var l *udp.Link
						err := h.Do(func() (err error) {
							cfg := udp.Config{Addrs: []netip.Addr{h.IPv4, h.IPv6}}
							if priv {
								cfg.Ifindex = h.Ifindex
							}
							l, err = udp.New(cfg)
							return err
						})
						if err != nil {
							t.Fatal(err)
						}
						if l.Privileged() != priv {
							t.Fatalf("Privileged() = %v", l.Privileged())
						}
						t.Cleanup(func() {
							s := l.Stats()
							if s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 {
								t.Errorf("%s: %d bad ICRC, %d malformed", h.NSName, s.RxBadICRC.Load(), s.RxMalformed.Load())
							}
						})
						return l
					}
					a, b := open(ha), open(hb)
					return linktest.Pair{A: a, B: b, AGID: netip.AddrFrom16(addr(ha).As16()), BGID: netip.AddrFrom16(addr(hb).As16()), Version: wire.RoCEv2}
				})
			})
		}
	}
}
