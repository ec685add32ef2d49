package udp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// BenchmarkTryRecvEmpty is one look of a busy poll that finds nothing: a
// CQ poller's TryRecv on a socket with no datagram waiting, with the 64
// buffers the device offers.
func BenchmarkTryRecvEmpty(b *testing.B) {
	for _, priv := range []bool{false, true} {
		name := "unprivileged"
		if priv {
			name = "privileged"
		}
		b.Run(name, func(b *testing.B) {
			ha, _ := nettest.VethPair(b, nettest.Options{MTU: 9000})
			l := openOn(b, ha, priv)
			pkts := make([]link.Packet, 64)
			for i := range pkts {
				pkts[i].Buf = make([]byte, link.MaxFrameSize)
			}
			b.ResetTimer()
			for range b.N {
				if n, err := l.TryRecv(pkts); n != 0 || err != nil {
					b.Fatal(n, err)
				}
			}
		})
	}
}

// BenchmarkRecvWrite64K: one 64 KiB RDMA WRITE at path MTU 4096 (a FIRST
// alone and a superpacket of 15 segments over the veth) sent, then
// received by a privileged link, with its receive ring and without.
func BenchmarkRecvWrite64K(b *testing.B) {
	for _, ring := range []bool{true, false} {
		name := "ring"
		if !ring {
			name = "recvmmsg"
		}
		b.Run(name, func(b *testing.B) {
			noRing = !ring
			defer func() { noRing = false }()
			ha, hb := nettest.VethPair(b, nettest.Options{MTU: 9000})
			a, r := openOn(b, ha, false), openOn(b, hb, true)
			if (r.rx.ring != nil) != ring {
				b.Fatal("ring", r.rx.ring != nil)
			}
			addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
			batch := writeBatch(a.Headroom(), addr, 0, 16, 0)
			bufs := linktest.NewBuffers(64)
			b.SetBytes(16 * 4096)
			b.ResetTimer()
			for range b.N {
				if _, err := a.Send(batch); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < 16; {
					n, err := r.TryRecv(bufs)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
			}
		})
	}
}
