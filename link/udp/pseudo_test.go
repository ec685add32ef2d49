package udp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// pseudoPacket returns an RC SEND ONLY as the link sends it: the transport
// packet after link.FrameHeadroom, addressed over IPv4 or IPv6.
func pseudoPacket(t testing.TB, v6 bool, payload int) (*link.Packet, wire.PacketFields) {
	t.Helper()
	src, dst := netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2")
	if v6 {
		src, dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	f := wire.PacketFields{Version: wire.RoCEv2, BTH: wire.BTHFields{Opcode: 0x04, DestQP: 0x11, PSN: 7},
		UDP: wire.UDPFields{SrcPort: 0xC001, DstPort: wire.RoCEv2Port}, Payload: make([]byte, payload)}
	if v6 {
		f.IPv6 = &wire.IPv6Fields{TrafficClass: 0x60, FlowLabel: 0x12345, NextHeader: wire.IPProtocolUDP, HopLimit: 9, Src: src, Dst: dst}
	} else {
		f.IPv4 = &wire.IPv4Fields{TOS: 0x60, ID: 5, Flags: 2, TTL: 9, Protocol: wire.IPProtocolUDP, Src: src.Unmap(), Dst: dst.Unmap()}
	}
	tr := append(f.AppendTransport(nil), 0, 0, 0, 0)
	buf := make([]byte, link.FrameHeadroom+len(tr))
	copy(buf[link.FrameHeadroom:], tr)
	return &link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: len(tr),
		Addr: link.Addr{Version: wire.RoCEv2, SrcGID: src, DstGID: dst, UDPSrcPort: 0xC001}}, f
}

// TestPseudoHeadersICRC checks that the ICRC the link computes over the
// headers it predicts is the ICRC of the packet wire's encoder writes with
// the headers the kernel sends (TOS, TTL and flow label differ: the ICRC
// masks them).
func TestPseudoHeadersICRC(t *testing.T) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	for _, v6 := range []bool{false, true} {
		pk, f := pseudoPacket(t, v6, 100)
		want, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		id := uint16(0)
		if !v6 {
			id = f.IPv4.ID
		}
		start, nlen := l.pseudoHeaders(new(pseudoCache), pk, 0xC001, id)
		end := pk.Off + pk.Len
		got := wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2)
		if w := binary.LittleEndian.Uint32(want[len(want)-wire.ICRCLen:]); got != w {
			t.Errorf("v6=%v: ICRC over the predicted headers %#08x, wire's encoder %#08x", v6, got, w)
		}
		if wantN := map[bool]int{false: wire.IPv4MinLen, true: wire.IPv6Len}[v6]; nlen != wantN || start != pk.Off-nlen-wire.UDPLen {
			t.Errorf("v6=%v: headers at %d, network header %d bytes", v6, start, nlen)
		}
	}
}

// TestPseudoHeadersAllocs pins that predicting the headers allocates nothing.
func TestPseudoHeadersAllocs(t *testing.T) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	for _, v6 := range []bool{false, true} {
		pk, _ := pseudoPacket(t, v6, 1024)
		var c pseudoCache
		n := testing.AllocsPerRun(100, func() {
			c.ok = false // the encoder, then the template
			l.pseudoHeaders(&c, pk, 0xC001, 3)
			l.pseudoHeaders(&c, pk, 0xC001, 4)
		})
		if n != 0 {
			t.Errorf("v6=%v: pseudoHeaders: %v allocations, want 0", v6, n)
		}
	}
}

// BenchmarkPseudoHeadersICRC is the link's per-packet send work before
// the socket: the predicted headers and the ICRC over them, for a run of
// packets to one peer (as Send's batches are).
func BenchmarkPseudoHeadersICRC(b *testing.B) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	pk, _ := pseudoPacket(b, false, 1024)
	b.SetBytes(int64(pk.Len))
	b.ReportAllocs()
	for b.Loop() {
		start, nlen := l.pseudoHeaders(&l.txPseudo, pk, 0xC001, 3)
		end := pk.Off + pk.Len
		binary.LittleEndian.PutUint32(pk.Buf[end-wire.ICRCLen:], wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2))
	}
}

// TestPseudoHeadersCached checks that the headers pseudoHeaders writes
// from its cache are the ones it builds afresh, through a sequence that
// changes, one at a time, the peer, the family, the source port, the IPv4
// Identification and the packet length.
func TestPseudoHeadersCached(t *testing.T) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	var c pseudoCache
	v4, _ := pseudoPacket(t, false, 100)
	v6, _ := pseudoPacket(t, true, 100)
	other := *v4
	other.Addr.DstGID = netip.MustParseAddr("::ffff:10.0.0.3")
	short, _ := pseudoPacket(t, false, 3)
	for i, step := range []struct {
		pk    *link.Packet
		sport uint16
		id    uint16
	}{{v4, 0xC001, 0}, {v4, 0xC001, 1}, {short, 0xC001, 1}, {v4, 0xC002, 1}, {&other, 0xC002, 7},
		{v6, 0xC002, 0}, {v6, 0xC003, 0}, {v4, 0xC003, 9}, {v4, 0xC003, 9}} {
		got, want := *step.pk, *step.pk
		got.Buf, want.Buf = bytes.Clone(step.pk.Buf), bytes.Clone(step.pk.Buf)
		for j := range got.Off {
			got.Buf[j], want.Buf[j] = 0xEE, 0xEE // stale headroom
		}
		gs, gn := l.pseudoHeaders(&c, &got, step.sport, step.id)
		ws, wn := l.pseudoHeaders(new(pseudoCache), &want, step.sport, step.id)
		if gs != ws || gn != wn || !bytes.Equal(got.Buf, want.Buf) {
			t.Errorf("step %d: cached headers at %d (%d):\n%x\nfresh at %d (%d):\n%x", i, gs, gn, got.Buf[:got.Off], ws, wn, want.Buf[:want.Off])
		}
	}
}
