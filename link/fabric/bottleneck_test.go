package fabric_test

import (
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestBottleneck: frames to a port behind a bottleneck leave it at its rate
// (each arrives after the bytes ahead of it and its own serialization, in
// virtual time), ECN-capable frames that find MarkBytes queued arrive CE
// with a valid ICRC and IP checksum, Not-ECT frames are never marked, and
// frames beyond LimitBytes are tail-dropped — over IPv4 and IPv6.
func TestBottleneck(t *testing.T) {
	for _, name := range []string{"v2-IPv4", "v2-IPv6"} {
		for _, ect := range []uint8{0, 2, 1} {
			t.Run(fmt.Sprintf("%s/ecn=%d", name, ect), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { testBottleneck(t, name, ect) })
			})
		}
	}
}

func testBottleneck(t *testing.T, name string, ect uint8) {
	f := fabric.New()
	defer f.Close()
	g := gids[name]
	a, err := f.AddPort(fabric.PortConfig{Name: "a", GIDs: []netip.Addr{g[0]}})
	if err != nil {
		t.Fatal(err)
	}
	// 8 Mb/s: a byte takes 1 µs.
	bn := fabric.Bottleneck{Rate: 8_000_000, MarkBytes: 3000, LimitBytes: 8000}
	b, err := f.AddPort(fabric.PortConfig{Name: "b", GIDs: []netip.Addr{g[1]}, Bottleneck: bn})
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	payload := make([]byte, 900)
	start := time.Now()
	var frameLen int
	for i := range n {
		pk := linktest.TransportPacket(a.Headroom(), 0x11, wire.PSN(i), payload)
		pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: g[0], DstGID: g[1], TrafficClass: 26<<2 | ect}
		if _, err := a.Send([]link.Packet{pk}); err != nil {
			t.Fatal(err)
		}
		frameLen = int(a.Stats().TxBytes.Load()) / (i + 1)
	}
	// Frames queue behind one another: frame i finds i·frameLen bytes ahead.
	wantDelivered := 0
	for i := range n {
		if (i+1)*frameLen <= bn.LimitBytes {
			wantDelivered++
		}
	}
	bufs := linktest.NewBuffers(1)
	for i := range wantDelivered {
		if _, err := b.Recv(bufs); err != nil {
			t.Fatal(err)
		}
		pk := &bufs[0]
		var w wire.Packet
		if err := w.ParseTransport(pk.Transport(), wire.RoCEv2); err != nil || w.BTH().PSN() != wire.PSN(i) {
			t.Fatalf("frame %d: PSN %v, %v", i, w.BTH().PSN(), err)
		}
		if d, want := time.Since(start), time.Duration((i+1)*frameLen)*time.Microsecond; d != want {
			t.Errorf("frame %d (%d bytes) arrived after %v, want %v", i, frameLen, d, want)
		}
		if name == "v2-IPv4" {
			// The frame sits in Buf before the transport packet.
			ip := wire.IPv4(pk.Buf[wire.EthernetLen : wire.EthernetLen+wire.IPv4MinLen])
			if ip.Checksum() != ip.ComputeChecksum() {
				t.Errorf("frame %d: IPv4 header checksum %#x, want %#x", i, ip.Checksum(), ip.ComputeChecksum())
			}
		}
		tc := pk.Addr.TrafficClass
		wantCE := ect != 0 && i*frameLen >= bn.MarkBytes
		if tc>>2 != 26 || (tc&3 == 3) != wantCE || !wantCE && tc&3 != ect {
			t.Errorf("frame %d (%d bytes ahead): traffic class %#x, want DSCP 26, CE %v", i, i*frameLen, tc, wantCE)
		}
	}
	wantMarked := 0
	if ect != 0 {
		for i := range wantDelivered {
			if i*frameLen >= bn.MarkBytes {
				wantMarked++
			}
		}
	}
	fs := b.FaultStats()
	if m, d := fs.Marked.Load(), fs.TailDropped.Load(); m != uint64(wantMarked) || d != uint64(n-wantDelivered) {
		t.Errorf("marked %d, tail-dropped %d; want %d, %d", m, d, wantMarked, n-wantDelivered)
	}
	if wantMarked == 0 && ect != 0 || wantDelivered == n {
		t.Fatal("the test marks or drops nothing")
	}
	// The link verified every ICRC: none dropped.
	if s := b.Stats(); s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 {
		t.Errorf("bad ICRC %d, malformed %d", s.RxBadICRC.Load(), s.RxMalformed.Load())
	}
}
