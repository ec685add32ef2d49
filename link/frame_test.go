package link

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// framePacket returns a RoCE v2 transport packet (an RC SEND ONLY with
// payload bytes) in a buffer with FrameHeadroom before it, addressed over
// IPv4 or IPv6.
func framePacket(t testing.TB, v6 bool, payload int) *Packet {
	t.Helper()
	src, dst := netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2")
	if v6 {
		src, dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: 0x04, DestQP: 0x11, PSN: 7}, Payload: make([]byte, payload)}
	tr := append(f.AppendTransport(nil), 0, 0, 0, 0)
	buf := make([]byte, FrameHeadroom+len(tr))
	copy(buf[FrameHeadroom:], tr)
	return &Packet{Buf: buf, Off: FrameHeadroom, Len: len(tr), Addr: Addr{Version: wire.RoCEv2,
		SrcGID: src, DstGID: dst, UDPSrcPort: 0xC000, TrafficClass: 0x60, FlowLabel: 0x12345, HopLimit: 9}}
}

// TestEncapsulateMatchesWire checks that Encapsulate writes the frame
// wire's packet encoder writes for the same fields, ICRC included, over
// IPv4, IPv6 and the GRH of RoCE v1.
func TestEncapsulateMatchesWire(t *testing.T) {
	smac, dmac := wire.MAC{2, 0, 0, 0, 0, 1}, wire.MAC{2, 0, 0, 0, 0, 2}
	for _, tc := range []struct {
		name string
		v6   bool
		ver  wire.Version
	}{{"v2-IPv4", false, wire.RoCEv2}, {"v2-IPv6", true, wire.RoCEv2}, {"v1", true, wire.RoCEv1}} {
		t.Run(tc.name, func(t *testing.T) {
			pk := framePacket(t, tc.v6, 100)
			pk.Addr.Version = tc.ver
			frame, err := Encapsulate(pk, smac, dmac, 0x1234)
			if err != nil {
				t.Fatal(err)
			}
			var p wire.Packet
			if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
				t.Fatal(err)
			}
			if err := p.VerifyICRC(); err != nil {
				t.Fatal(err)
			}
			f := p.Fields()
			want, err := f.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(want) != string(frame) {
				t.Errorf("Encapsulate:\n%x\nwire's encoder of its fields:\n%x", frame, want)
			}
			a := pk.Addr
			switch {
			case f.IPv4 != nil:
				if f.IPv4.ID != 0x1234 || f.IPv4.Flags != 2 || f.IPv4.TTL != a.HopLimit || f.IPv4.TOS != a.TrafficClass {
					t.Errorf("IPv4 fields %+v for %+v", *f.IPv4, a)
				}
			case f.IPv6 != nil, f.GRH != nil:
				ip := f.IPv6
				if ip == nil {
					ip = f.GRH
				}
				if ip.FlowLabel != a.FlowLabel || ip.HopLimit != a.HopLimit || ip.TrafficClass != a.TrafficClass {
					t.Errorf("IPv6/GRH fields %+v for %+v", *ip, a)
				}
			}
			if tc.ver == wire.RoCEv2 && (f.UDP.SrcPort != a.UDPSrcPort || f.UDP.DstPort != wire.RoCEv2Port || f.UDP.Checksum != 0) {
				t.Errorf("UDP fields %+v", f.UDP)
			}
		})
	}
}

// TestEncapsulateAllocs pins that framing a packet allocates nothing.
func TestEncapsulateAllocs(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		pk := framePacket(t, v6, 1024)
		n := testing.AllocsPerRun(100, func() {
			if _, err := Encapsulate(pk, wire.MAC{}, wire.MAC{}, 1); err != nil {
				t.Fatal(err)
			}
		})
		if n != 0 {
			t.Errorf("v6=%v: Encapsulate: %v allocations, want 0", v6, n)
		}
	}
}

func BenchmarkEncapsulate(b *testing.B) {
	pk := framePacket(b, false, 1024)
	b.SetBytes(int64(pk.Len))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encapsulate(pk, wire.MAC{}, wire.MAC{}, 1); err != nil {
			b.Fatal(err)
		}
	}
}
