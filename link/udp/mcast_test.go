package udp_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/wire"
)

// TestMulticastVeth: across a veth, a link that joined a group receives
// the group's packets (ICRC verified, destination the group's MGID), in
// privileged and unprivileged mode, IPv4 and IPv6; after LeaveGroup it no
// longer does.
func TestMulticastVeth(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, priv := range []bool{true, false} {
			name := fam + "/unprivileged"
			if priv {
				name = fam + "/privileged"
			}
			t.Run(name, func(t *testing.T) {
				ha, hb := nettest.VethPair(t, nettest.Options{})
				mgid, src, dst := netip.MustParseAddr("::ffff:239.1.2.3"), ha.IPv4, hb.IPv4
				if fam == "IPv6" {
					mgid, src, dst = netip.MustParseAddr("ff0e::1:2:3"), ha.IPv6, hb.IPv6
				}
				open := func(h *nettest.Host) *udp.Link {
					var l *udp.Link
					err := h.Do(func() (err error) {
						cfg := udp.Config{Addrs: []netip.Addr{h.IPv4, h.IPv6}, Zone: h.Ifindex}
						if priv {
							cfg.Ifindex = h.Ifindex
						}
						l, err = udp.New(cfg)
						return err
					})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { l.Close() })
					return l
				}
				a, b := open(ha), open(hb)
				if err := b.JoinGroup(mgid); err != nil {
					t.Fatal(err)
				}
				send := func(to netip.Addr, psn wire.PSN) {
					t.Helper()
					pk := linktest.TransportPacket(a.Headroom(), 0xFFFFFF, psn, []byte("to the group"))
					pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(src.As16()), DstGID: netip.AddrFrom16(to.As16()), HopLimit: 64}
					if n, err := a.Send([]link.Packet{pk}); n != 1 || err != nil {
						t.Fatalf("Send to %v = %d, %v", to, n, err)
					}
				}
				type got struct {
					dst netip.Addr
					psn wire.PSN
				}
				ch := make(chan got, 64)
				done := make(chan struct{})
				go func() {
					defer close(done)
					bufs := linktest.NewBuffers(4)
					for {
						n, err := b.Recv(bufs)
						if err != nil {
							return
						}
						for _, p := range bufs[:n] {
							var w wire.Packet
							if w.ParseTransport(p.Transport(), wire.RoCEv2) == nil {
								ch <- got{p.Addr.DstGID, w.BTH().PSN()}
							}
						}
					}
				}()
				defer func() { b.Close(); <-done }()
				// The veth may not carry the first packets yet (no ARP
				// exchange precedes a multicast one): send until one arrives.
				joined := false
				for deadline := time.Now().Add(testenv.Slow); !joined && time.Now().Before(deadline); {
					send(mgid, 0)
					select {
					case g := <-ch:
						if g.dst != mgid {
							t.Fatalf("received a packet to %v, want %v", g.dst, mgid)
						}
						joined = true
					case <-time.After(100 * time.Millisecond):
					}
				}
				if !joined {
					t.Fatalf("nothing sent to %v arrived", mgid)
				}
				if err := b.LeaveGroup(mgid); err != nil {
					t.Fatal(err)
				}
				// Left: nothing sent to the group after it (PSN 99) arrives
				// before the unicast packet sent after that (PSN 100).
				send(mgid, 99)
				send(dst, 100)
				for g := range ch {
					if g.psn == 99 {
						t.Fatalf("after LeaveGroup, the packet to %v arrived", g.dst)
					}
					if g.psn == 100 {
						break
					}
				}
				if s := b.Stats(); s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 {
					t.Errorf("%d bad ICRC, %d malformed", s.RxBadICRC.Load(), s.RxMalformed.Load())
				}
			})
		}
	}
}
