package udp

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// layoutSizes are the payload sizes a fuzzed packet may have: the engine's
// at path MTU 4096 (4096, a RETH's or an ImmDt's more), a few shorter ones
// (a message's last packet), tiny ones, and some beyond 4096 (a RETH's 16 bytes, an ImmDt's 4) that make a
// message's segments larger than the layout's expected size.
var layoutSizes = [16]int{4096, 4096, 4096, 4092, 4100, 4112, 2048, 1024, 512, 64, 1, 4000, 4116, 3000, 4128, 4096}

// FuzzRecvLayout sends over a veth runs of packets whose number and sizes
// the input chooses (the sender makes GSO messages of them, the receiving
// kernel may coalesce them again with UDP GRO) and reads them on a
// privileged link with receive batches whose sizes the input chooses too.
// Whatever the receive layout predicted (link/udp/rx.go: counts, borrow,
// the queue), every packet must reach the caller once, whole and in
// order, and every segment be counted in place, copied or queued. The
// layout is learned from the traffic a peer sends, so a peer can steer it:
// this is the hostile-sequence test of that code. The seeds run as a test.
func FuzzRecvLayout(f *testing.F) {
	f.Add([]byte{0x0f, 0x0f, 0x0f, 0x0f}, []byte{63})                                     // 16-packet runs of 4096
	f.Add([]byte{0x50, 0x0d, 0x30, 0x50, 0x0d, 0x30, 0x50, 0x0d, 0x30}, []byte{63, 39})   // WRITE WITH IMMEDIATE's 1, 14, 1
	f.Add([]byte{0x50, 0x0d, 0x30, 0x50, 0x0e, 0x50, 0x0d, 0x30, 0xc0, 0x9f}, []byte{63}) // a WRITE among them, then tiny
	f.Add([]byte{0xef, 0x0f, 0xa7, 0x4f, 0x0f, 0x6f}, []byte{2, 63, 4})                   // larger than expected, small reads
	f.Add([]byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}, []byte{0, 1, 15})
	ha, hb := nettest.VethPair(f, nettest.Options{MTU: 9000})
	a, b := openOn(f, ha, false), openOn(f, hb, true)
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	psn := wire.PSN(0)
	f.Fuzz(func(t *testing.T, runs, reads []byte) {
		if len(reads) == 0 {
			reads = []byte{63}
		}
		// At most 256 packets (2 MiB) an input: far below the
		// receiving socket's buffer, so nothing is dropped for space.
		var want []link.Packet
		for _, r := range runs {
			n, size := 1+int(r&15), layoutSizes[r>>4]
			if len(want)+n > 256 {
				break
			}
			for range n {
				f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpSendMiddle, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn}}
				f.Payload = bytes.Repeat([]byte{byte(psn), byte(psn >> 8), byte(size)}, size/3+1)[:size]
				want = append(want, build(a.Headroom(), &f, addr))
				psn++
			}
		}
		if len(want) == 0 {
			return
		}
		// One batch a run, as the engine sends a message's packets.
		sent := 0
		for _, r := range runs {
			n := min(1+int(r&15), len(want)-sent)
			if n == 0 {
				break
			}
			if k, err := a.Send(want[sent : sent+n]); err != nil || k != n {
				t.Fatalf("Send = %d, %v; want %d", k, err, n)
			}
			sent += n
		}
		c0 := b.rx.nInPlace + b.rx.nCopied + b.rx.nQueued
		got, i := 0, 0
		ok := testenv.Poll(testenv.Slow, func() bool {
			for {
				bufs := linktest.NewBuffers(1 + int(reads[i%len(reads)]%64))
				i++
				n, err := b.TryRecv(bufs)
				if err != nil {
					t.Fatal(err)
				}
				for _, pk := range bufs[:n] {
					if got == len(want) {
						t.Fatalf("received more than the %d packets sent", len(want))
					}
					w := want[got]
					if !bytes.Equal(pk.Transport()[:pk.Len-wire.ICRCLen], w.Transport()[:w.Len-wire.ICRCLen]) {
						t.Fatalf("packet %d of %d differs: %d bytes, want %d", got, len(want), pk.Len, w.Len)
					}
					got++
				}
				if n == 0 || got == len(want) {
					return got == len(want)
				}
			}
		})
		if !ok {
			t.Fatalf("received %d of %d packets", got, len(want))
		}
		if c := b.rx.nInPlace + b.rx.nCopied + b.rx.nQueued - c0; c != uint64(len(want)) {
			t.Errorf("%d segments counted in place, copied or queued for %d packets", c, len(want))
		}
	})
}
