package dissect_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/cmd/roce/internal/dissect"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

func decodeOne(data []byte, port uint16) (*dissect.Packet, error) {
	d := dissect.Decoder{UDPPort: port}
	var p dissect.Packet
	err := d.Decode(pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}, &p)
	return &p, err
}

func v2IPv6Fields(op wire.Opcode) wire.PacketFields {
	f := v2Fields(op)
	f.IPv4 = nil
	f.IPv6 = &wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, HopLimit: 64, FlowLabel: 0x12345,
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	return f
}

func v1Fields(op wire.Opcode) wire.PacketFields {
	f := v2Fields(op)
	f.Version, f.IPv4 = wire.RoCEv1, nil
	f.GRH = &wire.GRHFields{NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1,
		Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2")}
	return f
}

// udpChecksum computes the UDP checksum of the RoCE v2 frame b (no VLAN)
// the long way, a pseudo-header laid out in bytes (RFC 768, RFC 8200
// §8.1) and RFC 1071's sum over it and the datagram, and the pseudo-header's
// own folded sum: what a sender with checksum offload leaves in the field.
func udpChecksum(b []byte) (sum, partial uint16) {
	ip := b[wire.EthernetLen:]
	var pseudo, dgram []byte
	if ip[0]>>4 == 4 {
		hl := int(ip[0]&0xF) * 4
		dgram = ip[hl:binary.BigEndian.Uint16(ip[2:])]
		pseudo = append(append([]byte{}, ip[12:20]...), 0, wire.IPProtocolUDP, 0, 0)
		binary.BigEndian.PutUint16(pseudo[10:], uint16(len(dgram)))
	} else {
		dgram = ip[wire.IPv6Len : wire.IPv6Len+int(binary.BigEndian.Uint16(ip[4:]))]
		pseudo = append(append([]byte{}, ip[8:40]...), 0, 0, 0, 0, 0, 0, 0, wire.IPProtocolUDP)
		binary.BigEndian.PutUint16(pseudo[34:], uint16(len(dgram)))
	}
	all := append(bytes.Clone(pseudo), dgram...)
	all[len(pseudo)+6], all[len(pseudo)+7] = 0, 0
	if c := ^onesSum(all); c != 0 {
		return c, onesSum(pseudo)
	}
	return 0xFFFF, onesSum(pseudo)
}

// onesSum is RFC 1071's folded sum of b.
func onesSum(b []byte) uint16 {
	if len(b)%2 == 1 {
		b = append(bytes.Clone(b), 0)
	}
	var sum uint64
	for i := 0; i < len(b); i += 2 {
		sum += uint64(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// TestUDPChecksum: a RoCE v2 packet may carry a UDP checksum (the ICRC
// masks the field). Zero is "none"; a right one, or the pseudo-header sum a
// sender with checksum offload leaves, passes; anything else is a problem.
func TestUDPChecksum(t *testing.T) {
	for _, fam := range []string{"ipv4", "ipv6"} {
		f := v2Fields(wire.OpcodeRCSendOnly)
		nlen := wire.IPv4MinLen
		if fam == "ipv6" {
			f, nlen = v2IPv6Fields(wire.OpcodeRCSendOnly), wire.IPv6Len
		}
		good := frame(t, f)
		at := wire.EthernetLen + nlen + 6
		want, partial := udpChecksum(good)
		for _, tc := range []struct {
			sum     uint16
			problem string
			verbose string
		}{
			{0, "", "Checksum: 0x0000 (none)"},
			{want, "", "(correct)"},
			{partial, "", "(partial: the pseudo-header sum, left for checksum offload)"},
			{want ^ 0x0100, "UDP checksum 0x", "(WRONG, should be 0x"},
		} {
			data := bytes.Clone(good)
			binary.BigEndian.PutUint16(data[at:], tc.sum)
			p, err := decodeOne(data, 0)
			if err != nil {
				t.Fatalf("%s: %v", fam, err)
			}
			probs := strings.Join(p.Problems(), "; ")
			if tc.problem == "" && probs != "" || !strings.HasPrefix(probs, tc.problem) || !p.ICRCOK() {
				t.Errorf("%s checksum 0x%04x: problems %q, want %q", fam, tc.sum, probs, tc.problem)
			}
			if v := string(p.AppendVerbose(nil)); !strings.Contains(v, tc.verbose) {
				t.Errorf("%s checksum 0x%04x: -V lacks %q:\n%s", fam, tc.sum, tc.verbose, v)
			}
		}
	}
}

// TestResv6a: the BTH's reserved bits must be 0; FECN and BECN may be set.
func TestResv6a(t *testing.T) {
	for _, tc := range []struct {
		byte4   byte
		problem string
	}{{0x80, ""}, {0x40, ""}, {0xC0, ""}, {0x01, "BTH reserved bits (resv6a) 0x01, should be 0"}, {0xFF, "BTH reserved bits (resv6a) 0x3f, should be 0"}} {
		data := frame(t, v2Fields(wire.OpcodeRCSendOnly))
		data[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen+4] = tc.byte4
		p, err := decodeOne(data, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(p.Problems(), "; "); got != tc.problem || !p.ICRCOK() {
			t.Errorf("byte 4 0x%02x: problems %q, want %q", tc.byte4, got, tc.problem)
		}
	}
}

// TestCorruptedSelectors restores each kind of field that decides whether
// a frame is RoCE, over the encapsulations the CLI test does not build: an
// 802.1Q tag, an Ethertype that names the other IP version or looks like a
// tag, RoCE v1, another --udp-port.
func TestCorruptedSelectors(t *testing.T) {
	tagged := func() []byte {
		f := v2Fields(wire.OpcodeRCSendOnly)
		f.Eth.VLAN, f.Eth.VLANTCI = true, 0x6007
		return frame(t, f)
	}
	set16 := func(b []byte, off int, v uint16) []byte { binary.BigEndian.PutUint16(b[off:], v); return b }
	port := func(p uint16) []byte {
		f := v2IPv6Fields(wire.OpcodeRCAcknowledge)
		f.UDP.DstPort = p
		return frame(t, f)
	}
	const transit = " with a valid ICRC: corrupted in transit?"
	for _, tc := range []struct {
		name string
		data []byte
		port uint16
		want string
	}{
		{"inner Ethertype", set16(tagged(), 16, 0x0801), 0,
			"frame 1: Ethertype 0x0801, but the frame is a RoCE v2 packet over IPv4 (Ethertype 0x0800)" + transit},
		{"TPID", set16(tagged(), 12, 0x8101), 0,
			"frame 1: Ethertype 0x8101, but the frame is a RoCE v2 packet over IPv4 with an 802.1Q tag (Ethertype 0x8100)" + transit},
		{"Ethertype looks like a tag", set16(frame(t, v2Fields(wire.OpcodeRCSendOnly)), 12, 0x8100), 0,
			"frame 1: Ethertype 0x8100, but the frame is a RoCE v2 packet over IPv4 (Ethertype 0x0800)" + transit},
		{"Ethertype IPv6 over IPv4", set16(frame(t, v2Fields(wire.OpcodeRCSendOnly)), 12, 0x86DD), 0,
			"frame 1: Ethertype 0x86dd, but the frame is a RoCE v2 packet over IPv4 (Ethertype 0x0800)" + transit},
		{"v1 Ethertype IPv6", set16(frame(t, v1Fields(wire.OpcodeUDSendOnly)), 12, 0x86DD), 0,
			"frame 1: Ethertype 0x86dd, but the frame is a RoCE v1 packet (Ethertype 0x8915)" + transit},
		{"v1 Ethertype", set16(frame(t, v1Fields(wire.OpcodeRCAcknowledge)), 12, 0x0915), 0,
			"frame 1: Ethertype 0x0915, but the frame is a RoCE v1 packet (Ethertype 0x8915)" + transit},
		{"fragment offset, no DF", func() []byte {
			f := v2Fields(wire.OpcodeRCSendOnly)
			f.IPv4.Flags = 0
			b := frame(t, f)
			b[wire.EthernetLen+7] ^= 0xFF
			return b
		}(), 0, "frame 1: IPv4 flags and fragment offset 0x00ff, but the frame is an unfragmented RoCE v2 packet (0x0000)" + transit},
		{"more fragments", func() []byte {
			b := frame(t, v2Fields(wire.OpcodeRCSendOnly))
			b[wire.EthernetLen+6] ^= 0x20
			return b
		}(), 0, "frame 1: IPv4: fragmented RoCE v2 packet (more-fragments set)"},
		{"--udp-port", set16(port(4792), wire.EthernetLen+wire.IPv6Len+2, 4793), 4792,
			"frame 1: UDP destination port 4793, but the frame is a RoCE v2 packet to port 4792" + transit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeOne(tc.data, tc.port)
			var (
				fe *dissect.FrameError
				ce *dissect.CorruptedError
			)
			if !errors.As(err, &fe) || err.Error() != tc.want || strings.HasSuffix(tc.want, transit) != errors.As(err, &ce) {
				t.Errorf("err %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestNotRoCEStaysQuiet: frames that are really not RoCE are plain
// wire.ErrNotRoCE: UDP to another port (its ICRC, if it had one, was not
// computed over the RoCE port), RoCE to 4791 decoded with --udp-port 4792,
// a TCP-like frame, ARP, and an IPv4 header the capture cut short.
func TestNotRoCEStaysQuiet(t *testing.T) {
	other := v2Fields(wire.OpcodeRCSendOnly)
	other.UDP.DstPort = 53
	tcp := tcpFrame(t)
	ip := wire.IPv4(tcp[wire.EthernetLen : wire.EthernetLen+wire.IPv4MinLen])
	ip.SetChecksum(ip.ComputeChecksum()) // a frame sent as TCP
	arp := append(bytes.Repeat([]byte{0xff}, 12), 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1)
	good := frame(t, v2Fields(wire.OpcodeRCSendOnly))
	// RoCE behind a service tag (802.1ad, or an older vendor TPID), which
	// goroce does not parse: the restoration of a corrupted 802.1Q TPID
	// must not take a real tag for one (the ICRC does not cover the
	// Ethernet header, so it would prove nothing).
	stag := func(tpid uint16) []byte {
		f := v2Fields(wire.OpcodeRCSendOnly)
		f.Eth.VLAN, f.Eth.VLANTCI = true, 0x6007
		b := frame(t, f)
		binary.BigEndian.PutUint16(b[12:], tpid)
		return b
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		port    uint16
		origLen int
	}{
		{"802.1ad S-tag", stag(0x88A8), 0, 0},
		{"TPID 0x9100", stag(0x9100), 0, 0},
		{"UDP to port 53", frame(t, other), 0, 0},
		{"RoCE to 4791 with --udp-port 4792", good, 4792, 0},
		{"RoCE v6 to 4791 with --udp-port 4792", frame(t, v2IPv6Fields(wire.OpcodeRCSendOnly)), 4792, 0},
		{"TCP", tcp, 0, 0},
		{"ARP", arp, 0, 0},
		{"IPv4 header cut by the snap length", good[:wire.EthernetLen+10], 0, len(good)},
	} {
		d := dissect.Decoder{UDPPort: tc.port}
		var p dissect.Packet
		orig := tc.origLen
		if orig == 0 {
			orig = len(tc.data)
		}
		if err := d.Decode(pcap.Frame{Number: 1, Data: tc.data, OrigLen: orig}, &p); err != wire.ErrNotRoCE {
			t.Errorf("%s: err %v, want exactly wire.ErrNotRoCE", tc.name, err)
		}
	}
}

// tcpFrame returns a RoCE frame turned into TCP: protocol 6, and a last
// payload byte changed, so that no ICRC says it was ever RoCE.
func tcpFrame(t *testing.T) []byte {
	b := frame(t, v2Fields(wire.OpcodeRCSendOnly))
	b[wire.EthernetLen+9] = 6
	b[len(b)-wire.ICRCLen-2]++
	return b
}

// TestDamagedOtherFrames: a frame that is not RoCE but whose IP header is
// damaged is a SkippedError, which still is wire.ErrNotRoCE.
func TestDamagedOtherFrames(t *testing.T) {
	tcp := tcpFrame(t) // and its header checksum is now wrong
	short := append(bytes.Clone(tcp[:wire.EthernetLen]), 0x45, 0, 0, 40)
	v6 := frame(t, v2IPv6Fields(wire.OpcodeRCSendOnly))
	v6[wire.EthernetLen] = 0x50 // version 5, and no restoration to 6 helps: ...
	v6[wire.EthernetLen+40+3]++ // ... the port is wrong too
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"IPv4 checksum", tcp, "frame 1: IPv4 header checksum 0x"},
		{"IPv4 header cut short", short, "frame 1: IPv4 header of 20 bytes, but the frame ends after 4 (not RoCE: skipped)"},
		{"IPv6 version", v6, "frame 1: Ethertype 0x86dd (IPv6), but IP version 5 (not RoCE: skipped)"},
	} {
		_, err := decodeOne(tc.data, 0)
		var se *dissect.SkippedError
		if !errors.As(err, &se) || !errors.Is(err, wire.ErrNotRoCE) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q…", tc.name, err, tc.want)
		}
		var s dissect.Stats
		s.Add(&dissect.Packet{}, err)
		if s.Other != 1 || s.OtherIPBad != 1 || s.Failed() != 1 {
			t.Errorf("%s: stats %+v", tc.name, s)
		}
	}
}

// TestDecodeOtherAllocs: looking for a corrupted selector costs no
// allocation for frames that are not RoCE (after the first, which sizes
// the decoder's scratch buffer).
func TestDecodeOtherAllocs(t *testing.T) {
	other := v2Fields(wire.OpcodeRCSendOnly)
	other.UDP.DstPort = 53
	data := frame(t, other)
	var (
		d dissect.Decoder
		p dissect.Packet
	)
	f := pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}
	d.Decode(f, &p)
	if n := testing.AllocsPerRun(100, func() { d.Decode(f, &p) }); n != 0 {
		t.Errorf("%v allocations per frame", n)
	}
}
