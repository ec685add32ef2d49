package link

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// segFrames returns n RoCE v2 frames of an RC SEND of the given payload
// sizes, as the kernel's GSO would cut them from one message: IPv4 IDs
// id0, id0+1, … (or all id0 when fixed).
func segFrames(t testing.TB, v6, fixed bool, id0 uint16, sizes ...int) [][]byte {
	var out [][]byte
	for s, n := range sizes {
		f := wire.PacketFields{Version: wire.RoCEv2, Eth: &wire.EthernetFields{Dst: wire.MAC{2, 0, 0, 0, 0, 2}, Src: wire.MAC{2, 0, 0, 0, 0, 1}},
			BTH:     wire.BTHFields{Opcode: wire.TransportRC | wire.OpSendMiddle, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(7 + s)},
			Payload: bytes.Repeat([]byte{byte(s + 1)}, n)}
		f.UDP = wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port}
		if v6 {
			f.IPv6 = &wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, HopLimit: 64,
				Src: netip.MustParseAddr("fd00:198:1::1"), Dst: netip.MustParseAddr("fd00:198:2::1")}
		} else {
			id := id0 + uint16(s)
			if fixed {
				id = id0
			}
			f.IPv4 = &wire.IPv4Fields{ID: id, Flags: 2, TTL: 64, Protocol: wire.IPProtocolUDP,
				Src: netip.MustParseAddr("198.18.1.1"), Dst: netip.MustParseAddr("198.18.2.1")}
		}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// superOf joins frames as one GSO superpacket: the first's headers, with
// lengths covering every segment's UDP payload.
func superOf(frames [][]byte) []byte {
	first := frames[0]
	hl := wire.EthernetLen + wire.UDPLen
	v4 := binary.BigEndian.Uint16(first[12:]) == wire.EtherTypeIPv4
	if v4 {
		hl += int(first[wire.EthernetLen]&0xf) * 4
	} else {
		hl += wire.IPv6Len
	}
	sp := append([]byte(nil), first[:hl]...)
	for _, f := range frames {
		sp = append(sp, f[hl:]...)
	}
	n := len(sp) - wire.EthernetLen
	if v4 {
		binary.BigEndian.PutUint16(sp[wire.EthernetLen+2:], uint16(n))
	} else {
		binary.BigEndian.PutUint16(sp[wire.EthernetLen+4:], uint16(n-wire.IPv6Len))
	}
	binary.BigEndian.PutUint16(sp[hl-wire.UDPLen+4:], uint16(len(sp)-hl+wire.UDPLen))
	return sp
}

// TestSuperpacket: a superpacket cut back into its segments gives the
// frames the kernel would have sent on their own, byte for byte (lengths,
// IPv4 ID first+index, header checksum), and its segment size is found
// from its RoCE headers alone, for IPv4 and IPv6, a short last segment or
// not.
func TestSuperpacket(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, sizes := range [][]int{{1024, 1024, 1024, 1024}, {1024, 1024, 300}, {40, 40, 40, 40, 40, 40, 40, 40}, {256, 8}} {
			t.Run(fmt.Sprintf("IPv6=%v/%v", v6, sizes), func(t *testing.T) {
				frames := segFrames(t, v6, false, 0xfff0, sizes...) // the ID wraps around
				sp, err := ParseSuperpacket(superOf(frames))
				if err != nil {
					t.Fatal(err)
				}
				g := wire.BTHLen + sizes[0] + wire.ICRCLen
				got, ok := sp.InferSegmentSize(make([]byte, 0, MaxFrameSize))
				if !ok || got != g {
					t.Fatalf("InferSegmentSize = %d, %v; want %d", got, ok, g)
				}
				if k := sp.Segments(g); k != len(frames) {
					t.Fatalf("Segments = %d, want %d", k, len(frames))
				}
				for s, want := range frames {
					if f := sp.AppendSegment(nil, g, s, false); !bytes.Equal(f, want) {
						t.Errorf("segment %d:\n got %x\nwant %x", s, f, want)
					}
				}
			})
		}
	}
}

// TestSuperpacketFixedID: segments of a sender that kept the IPv4 ID fixed
// come back with that ID when asked.
func TestSuperpacketFixedID(t *testing.T) {
	frames := segFrames(t, false, true, 0x1234, 512, 512, 512)
	sp, err := ParseSuperpacket(superOf(frames))
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range frames {
		if f := sp.AppendSegment(nil, 12+512+4, s, true); !bytes.Equal(f, want) {
			t.Errorf("segment %d differs", s)
		}
	}
}

// TestSuperpacketNotOne: a single packet, and a frame that is not RoCE,
// are no superpacket.
func TestSuperpacketNotOne(t *testing.T) {
	single := segFrames(t, false, false, 1, 3000)[0]
	sp, err := ParseSuperpacket(single)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := sp.InferSegmentSize(nil); ok {
		t.Errorf("a single packet split into %d-byte segments", g)
	}
	junk := append(append([]byte(nil), single[:42]...), bytes.Repeat([]byte{0xff}, 2000)...)
	if sp, err := ParseSuperpacket(junk); err == nil {
		if g, ok := sp.InferSegmentSize(nil); ok {
			t.Errorf("junk split into %d-byte segments", g)
		}
	}
}

// TestSuperpacketTruncated: every prefix of a superpacket parses or fails
// without a panic, and inference on it finds nothing it should not.
func TestSuperpacketTruncated(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		b := superOf(segFrames(t, v6, false, 9, 64, 64, 64))
		for n := range len(b) {
			sp, err := ParseSuperpacket(b[:n])
			if err != nil {
				continue
			}
			sp.InferSegmentSize(nil)
			for s := range sp.Segments(80) {
				sp.AppendSegment(nil, 80, s, false)
			}
		}
	}
}

func FuzzSuperpacket(f *testing.F) {
	f.Add(superOf(segFrames(f, false, false, 0, 64, 64, 20)))
	f.Add(superOf(segFrames(f, true, false, 0, 1024, 1024)))
	f.Add(segFrames(f, false, false, 0, 100)[0])
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := ParseSuperpacket(b)
		if err != nil {
			return
		}
		g, ok := sp.InferSegmentSize(nil)
		if !ok {
			return
		}
		total := 0
		for s := range sp.Segments(g) {
			f := sp.AppendSegment(nil, g, s, false)
			total += len(f) - (sp.udpOff + wire.UDPLen)
		}
		if total != sp.PayloadLen() {
			t.Fatalf("segments hold %d bytes of %d", total, sp.PayloadLen())
		}
	})
}
