package afpacket

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// FuzzRingFrames sends runs of hostile frames, as any host on the segment
// can, to a link reading its ring: RoCE v1 and v2 frames built right and
// then cut short, lengthened past a ring frame (so they are read from the
// socket's queue), or with a byte changed anywhere (headers, lengths,
// payload, ICRC). After each run a good packet must still arrive, every
// packet the link delivers must parse, and no queued copy may be
// mismatched with its frame; the link must not panic.
//
// Input: records of a kind byte (bit 0: v1 or v2; bits 1-2: keep, cut,
// lengthen, change a byte), two bytes that pick the length or position,
// and up to 255 bytes of payload (one length byte first).
func FuzzRingFrames(f *testing.F) {
	ha, hb := nettest.VethPair(f, nettest.Options{MTU: 9000})
	open := func(h *nettest.Host) *Link {
		var l *Link
		if err := h.Do(func() (err error) {
			l, err = New(Config{Ifindex: h.Ifindex, GIDs: []netip.Addr{mapped(h.IPv4)}, V2: true})
			return err
		}); err != nil {
			f.Fatal(err)
		}
		l.Resolver().SetSources([]netip.Addr{h.IPv4, h.IPv6})
		f.Cleanup(func() { l.Close() })
		return l
	}
	a, b := open(ha), open(hb)
	if b.rx.ring == nil {
		f.Fatal("the link has no receive ring")
	}
	addr := func(v wire.Version) link.Addr {
		return link.Addr{Version: v, SrcGID: mapped(ha.IPv4), DstGID: mapped(hb.IPv4), HopLimit: 64, UDPSrcPort: wire.UDSport(2)}
	}
	psn := wire.PSN(0)
	// sentinel sends a good packet and takes what arrives until it does.
	sentinel := func(t testing.TB) {
		psn++
		want := psn
		pk := linktest.TransportPacket(a.Headroom(), 0x11, want, []byte("sentinel"))
		pk.Addr = addr(wire.RoCEv2)
		if n, err := a.Send([]link.Packet{pk}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
		seen := false
		if !testenv.Poll(testenv.Slow, func() bool {
			bufs := linktest.NewBuffers(16)
			n, err := b.TryRecv(bufs)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range bufs[:n] {
				var w wire.Packet
				if err := w.ParseTransport(p.Transport(), p.Addr.Version); err != nil {
					t.Fatalf("the link delivered a packet that does not parse: %v", err)
				}
				if w.BTH().PSN() == want && string(w.Payload()) == "sentinel" {
					seen = true
				}
			}
			return seen
		}) {
			t.Fatalf("the good packet after the run never arrived (rx_packets %d)", b.Stats().RxPackets.Load())
		}
		if n := b.rx.ring.mismatched.Load(); n != 0 {
			t.Fatalf("%d queued copies were not their frame's", n)
		}
	}
	sentinel(f) // and the next hop resolved
	f.Cleanup(func() {
		g, st := b.rx.ring, b.Stats()
		f.Logf("from frames %d, from the socket's queue %d, truncated %d; rx_packets %d, bad ICRC %d, malformed %d",
			g.framed.Load(), g.copied.Load(), g.truncated.Load(), st.RxPackets.Load(), st.RxBadICRC.Load(), st.RxMalformed.Load())
	})
	f.Add([]byte{0, 0, 0, 4, 'a', 'b', 'c', 'd'})
	f.Add([]byte{1, 0, 0, 4, 'a', 'b', 'c', 'd'})
	f.Add([]byte{2, 0, 10, 8, 1, 2, 3, 4, 5, 6, 7, 8})            // v2 cut
	f.Add([]byte{5, 0x1f, 0x40, 2, 9, 9})                         // v1 lengthened to ~8 KiB
	f.Add([]byte{6, 0, 30, 3, 1, 2, 3, 7, 0, 50, 1, 0})           // v2 a byte changed, then v1 a byte changed
	f.Add([]byte{4, 0x20, 0x00, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0xff}) // v2 lengthened, v1 kept
	f.Fuzz(func(t *testing.T, in []byte) {
		for k := 0; len(in) >= 4 && k < 16; k++ {
			kind, arg, n := in[0], int(binary.BigEndian.Uint16(in[1:3])), int(in[3])
			in = in[4:]
			n = min(n, len(in))
			payload := in[:n]
			in = in[n:]
			v := wire.RoCEv2
			if kind&1 != 0 {
				v = wire.RoCEv1
			}
			pk := linktest.TransportPacket(a.Headroom(), 0x11, 0x7fffff, payload)
			pk.Addr = addr(v)
			frame, err := link.Encapsulate(&pk, a.cfg.MAC, hb.MAC, 1)
			if err != nil {
				t.Fatal(err)
			}
			frame = append([]byte(nil), frame...)
			switch kind >> 1 & 3 {
			case 1: // cut short (at least the Ethernet header)
				frame = frame[:max(wire.EthernetLen, min(len(frame), arg%len(frame)))]
			case 2: // lengthened past a ring frame, up to the veth's MTU
				extra := arg % (9000 - len(frame) + wire.EthernetLen)
				for i := range extra {
					frame = append(frame, byte(i))
				}
			case 3: // one byte changed
				frame[arg%len(frame)] ^= byte(arg>>8) | 1
			}
			if err := a.sendFrame(frame); err != nil {
				t.Fatal(err)
			}
		}
		sentinel(t)
	})
}
