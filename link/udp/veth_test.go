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
// receive), in XDP mode (AF_XDP receive, on Ethernet's MTU) and in
// unprivileged mode: every ICRC the sender predicted is verified over the
// real IP header (in unprivileged mode, to the bits the socket shows),
// IPv4 and IPv6.
func TestVeth(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, mode := range []string{"privileged", "unprivileged", "xdp"} {
			priv := mode != "unprivileged"
			t.Run(fam+"/"+mode, func(t *testing.T) {
				linktest.Run(t, func(t *testing.T) linktest.Pair {
					mtu := 9000
					if mode == "xdp" {
						mtu = 1500
					}
					ha, hb := nettest.VethPair(t, nettest.Options{MTU: mtu})
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
							cfg.XDP = mode == "xdp"
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
