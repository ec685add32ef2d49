package udp

import (
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
		start, nlen := l.pseudoHeaders(pk, 0xC001, id)
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
		n := testing.AllocsPerRun(100, func() { l.pseudoHeaders(pk, 0xC001, 3) })
		if n != 0 {
			t.Errorf("v6=%v: pseudoHeaders: %v allocations, want 0", v6, n)
		}
	}
}

// BenchmarkPseudoHeadersICRC is the link's per-packet send work before
// the socket: the predicted headers and the ICRC over them.
func BenchmarkPseudoHeadersICRC(b *testing.B) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	pk, _ := pseudoPacket(b, false, 1024)
	b.SetBytes(int64(pk.Len))
	b.ReportAllocs()
	for b.Loop() {
		start, nlen := l.pseudoHeaders(pk, 0xC001, 3)
		end := pk.Off + pk.Len
		binary.LittleEndian.PutUint32(pk.Buf[end-wire.ICRCLen:], wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2))
	}
}
