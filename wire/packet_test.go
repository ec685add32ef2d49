package wire_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestPacketRoundTrip encodes a packet of every opcode in every
// encapsulation, parses it, checks every accessor against the fields it was
// built from, and re-encodes the parsed fields to the same bytes.
func TestPacketRoundTrip(t *testing.T) {
	for _, e := range encaps {
		for _, op := range validOpcodes() {
			for _, plen := range payloadLens(op) {
				payload := samplePayload(plen)
				if op.Info().FixedPayload > 0 {
					payload = defaultPayload(op)
				}
				f := sampleFields(op, e, payload)
				frame := encode(t, f)
				name := e.name + "/" + op.String()
				if plen > 0 {
					name += "/" + string(rune('0'+plen%10))
				}
				t.Run(name, func(t *testing.T) { checkPacket(t, f, frame) })
			}
		}
	}
}

// payloadLens returns the payload lengths to try for op: every pad count.
func payloadLens(op wire.Opcode) []int {
	if op.Info().FixedPayload >= 0 {
		return []int{op.Info().FixedPayload}
	}
	return []int{0, 1, 2, 3, 4, 1024}
}

func checkPacket(t *testing.T, f wire.PacketFields, frame []byte) {
	t.Helper()
	op := f.BTH.Opcode
	info := op.Info()
	p := parseFrame(t, frame)
	if p.Version != f.Version || p.Opcode() != op || p.Info != info || p.BTH().Opcode() != op {
		t.Fatalf("parsed version %v opcode %v", p.Version, p.Opcode())
	}
	if !bytes.Equal(p.Bytes, frame) {
		t.Error("Bytes is not the frame")
	}
	// Layer 2 and 3.
	eth := p.Ethernet()
	if eth == nil || eth.HasVLAN() != f.Eth.VLAN || eth.Dst() != f.Eth.Dst || eth.Src() != f.Eth.Src ||
		(f.Eth.VLAN && eth.VLANTCI() != f.Eth.VLANTCI) || (!f.Eth.VLAN && eth.VLANTCI() != 0) {
		t.Errorf("Ethernet %x", []byte(eth))
	}
	var wantType uint16
	switch {
	case f.GRH != nil:
		wantType = wire.EtherTypeRoCE
		if p.GRH() == nil || p.IPv4() != nil || p.IPv6() != nil || p.UDP() != nil || p.IPVersion() != 6 {
			t.Error("RoCE v1: want a GRH and nothing else")
		}
		if g := p.GRH().Fields(); g.Src != f.GRH.Src || g.Dst != f.GRH.Dst || g.NextHeader != 0x1B || g.HopLimit != f.GRH.HopLimit {
			t.Errorf("GRH %+v", g)
		}
		if !bytes.Equal(p.Network(), p.GRH()) {
			t.Error("Network() is not the GRH")
		}
	case f.IPv4 != nil:
		wantType = wire.EtherTypeIPv4
		ip := p.IPv4()
		if ip == nil || p.IPv6() != nil || p.GRH() != nil || p.IPVersion() != 4 || !bytes.Equal(p.Network(), ip) {
			t.Fatal("RoCE v2/IPv4: want an IPv4 header and nothing else")
		}
		if ip.Src() != f.IPv4.Src || ip.Dst() != f.IPv4.Dst || ip.TOS() != f.IPv4.TOS || ip.ID() != f.IPv4.ID || ip.TTL() != f.IPv4.TTL {
			t.Errorf("IPv4 %+v", ip.Fields())
		}
		if ip.TotalLen() != len(frame)-len(eth) || ip.Checksum() != ip.ComputeChecksum() {
			t.Errorf("IPv4 total length %d (frame %d), checksum %#x (want %#x)", ip.TotalLen(), len(frame), ip.Checksum(), ip.ComputeChecksum())
		}
	default:
		wantType = wire.EtherTypeIPv6
		ip := p.IPv6()
		if ip == nil || p.IPv4() != nil || p.GRH() != nil || p.IPVersion() != 6 || !bytes.Equal(p.Network(), ip) {
			t.Fatal("RoCE v2/IPv6: want an IPv6 header and nothing else")
		}
		if ip.Src() != f.IPv6.Src || ip.Dst() != f.IPv6.Dst || ip.FlowLabel() != f.IPv6.FlowLabel ||
			ip.TrafficClass() != f.IPv6.TrafficClass || ip.PayloadLen() != len(frame)-len(eth)-wire.IPv6Len {
			t.Errorf("IPv6 %+v", ip.Fields())
		}
	}
	if eth.EtherType() != wantType {
		t.Errorf("Ethertype %#04x, want %#04x", eth.EtherType(), wantType)
	}
	if f.Version == wire.RoCEv2 {
		u := p.UDP()
		if u == nil || u.SrcPort() != f.UDP.SrcPort || u.DstPort() != wire.RoCEv2Port || u.Checksum() != 0 ||
			u.Length() != wire.UDPLen+len(p.Transport()) {
			t.Errorf("UDP %+v", u.Fields())
		}
	}
	// Transport.
	bth := p.BTH()
	pad := (4 - len(f.Payload)%4) % 4
	if got := bth.Fields(); got.PSN != f.BTH.PSN || got.DestQP != f.BTH.DestQP || got.PKey != f.BTH.PKey ||
		got.AckReq != f.BTH.AckReq || got.SolicitedEvent != f.BTH.SolicitedEvent || got.BECN != f.BTH.BECN || got.PadCount != pad {
		t.Errorf("BTH %+v", got)
	}
	for h := wire.Header(0); h.Size() > 0; h++ {
		b := p.Header(h)
		if (b != nil) != info.Has(h) || (b != nil && len(b) != h.Size()) {
			t.Errorf("Header(%v) = %x; the opcode has it: %v", h, b, info.Has(h))
		}
	}
	x := &f.Ext
	check := func(name string, present bool, ok bool) {
		t.Helper()
		if present && !ok {
			t.Errorf("%s differs from the fields encoded", name)
		}
	}
	check("RDETH", info.Has(rdeth), p.RDETH() != nil && p.RDETH().Value() == x.RDETH && p.RDETH().Reserved() == 0)
	check("DETH", info.Has(deth), p.DETH() != nil && p.DETH().Fields() == x.DETH)
	check("XRCETH", info.Has(xrceth), p.XRCETH() != nil && p.XRCETH().Value() == x.XRCETH)
	check("FETH", info.Has(feth), p.FETH() != nil && p.FETH().Word() == x.FETH)
	check("RETH", info.Has(reth), p.RETH() != nil && p.RETH().Fields() == x.RETH)
	check("AtomicETH", info.Has(atmeth), p.AtomicETH() != nil && p.AtomicETH().Fields() == x.AtomicETH)
	check("AETH", info.Has(aeth), p.AETH() != nil && p.AETH().Syndrome() == x.AETH.Syndrome && p.AETH().MSN() == x.AETH.MSN)
	check("AtomicAckETH", info.Has(atmack), p.AtomicAckETH() != nil && p.AtomicAckETH().OrigData() == x.AtomicAck)
	check("ImmDt", info.Has(immdt), p.ImmDt() != nil && p.ImmDt().Value() == x.ImmDt)
	check("IETH", info.Has(ieth), p.IETH() != nil && p.IETH().Value() == x.IETH)
	if (p.RETH() == nil) == info.Has(reth) || (p.AETH() == nil) == info.Has(aeth) || (p.DETH() == nil) == info.Has(deth) ||
		(p.ImmDt() == nil) == info.Has(immdt) || (p.IETH() == nil) == info.Has(ieth) || (p.FETH() == nil) == info.Has(feth) ||
		(p.RDETH() == nil) == info.Has(rdeth) || (p.XRCETH() == nil) == info.Has(xrceth) ||
		(p.AtomicETH() == nil) == info.Has(atmeth) || (p.AtomicAckETH() == nil) == info.Has(atmack) {
		t.Error("a typed accessor's presence disagrees with the opcode table")
	}
	if !bytes.Equal(p.Payload(), f.Payload) {
		t.Errorf("payload %q, want %q", p.Payload(), f.Payload)
	}
	if !bytes.Equal(p.Pad(), make([]byte, pad)) {
		t.Errorf("pad %x, want %d zero bytes", p.Pad(), pad)
	}
	if n := len(p.Transport()); n != info.HeaderLen+len(f.Payload)+pad+wire.ICRCLen || n%4 != 0 {
		t.Errorf("transport is %d bytes", n)
	}
	if len(p.Trailer()) != 0 {
		t.Errorf("trailer %x", p.Trailer())
	}
	if err := p.VerifyICRC(); err != nil {
		t.Error(err)
	}
	if c, _ := p.ComputeICRC(); c != binary.LittleEndian.Uint32(frame[len(frame)-4:]) || c != p.ICRC() {
		t.Errorf("ICRC %#08x, frame ends %x", c, frame[len(frame)-4:])
	}
	// Fields and Append reproduce the frame.
	pf := p.Fields()
	again, err := pf.Append(nil)
	if err != nil || !bytes.Equal(again, frame) {
		t.Errorf("Fields().Append: %v\n got %x\nwant %x", err, again, frame)
	}
	// The IP packet alone (RoCE v2), as a raw socket delivers it.
	nw := frame[len(eth):]
	var q wire.Packet
	err = q.ParseIP(nw, wire.RoCEv2Port)
	if f.Version == wire.RoCEv1 {
		if !errors.Is(err, wire.ErrNotRoCE) {
			t.Errorf("ParseIP of a GRH: %v, want ErrNotRoCE", err)
		}
	} else {
		if err != nil {
			t.Fatalf("ParseIP: %v", err)
		}
		if q.Ethernet() != nil || q.Opcode() != op || !bytes.Equal(q.Payload(), f.Payload) || q.VerifyICRC() != nil {
			t.Error("ParseIP disagrees with ParseFrame")
		}
		qf := q.Fields()
		if b, err := qf.Append(nil); err != nil || !bytes.Equal(b, nw) {
			t.Errorf("ParseIP: Fields().Append: %v", err)
		}
	}
	// The transport packet alone, as a UDP socket delivers it.
	tr := p.Transport()
	if err := q.ParseTransport(tr, f.Version); err != nil {
		t.Fatalf("ParseTransport: %v", err)
	}
	if q.Version != f.Version || q.Opcode() != op || !bytes.Equal(q.Payload(), f.Payload) || q.ICRC() != p.ICRC() ||
		q.Ethernet() != nil || q.Network() != nil || q.UDP() != nil || q.IPVersion() != 0 || len(q.Trailer()) != 0 {
		t.Error("ParseTransport disagrees with ParseFrame")
	}
	for h := wire.Header(0); h.Size() > 0; h++ {
		if !bytes.Equal(q.Header(h), p.Header(h)) {
			t.Errorf("ParseTransport: %v differs", h)
		}
	}
	if _, err := q.ComputeICRC(); err == nil {
		t.Error("ComputeICRC without the network header succeeded")
	}
	if err := q.VerifyICRC(); err == nil || errors.Is(err, wire.ErrBadICRC) {
		t.Errorf("VerifyICRC without the network header: %v", err)
	}
	qf := q.Fields()
	if b := qf.AppendTransport(nil); !bytes.Equal(b, tr[:len(tr)-wire.ICRCLen]) {
		t.Errorf("AppendTransport\n got %x\nwant %x", b, tr[:len(tr)-4])
	}
}

// TestPacketTrailer checks a short frame padded to the Ethernet minimum:
// the padding is the trailer, outside the ICRC, and re-encoded as given.
func TestPacketTrailer(t *testing.T) {
	for _, e := range encaps {
		f := sampleFields(wire.OpcodeRCAcknowledge, e, nil)
		f.Trailer = []byte{0, 0, 0, 0, 0, 0}
		frame := encode(t, f)
		p := parseFrame(t, frame)
		if !bytes.Equal(p.Trailer(), f.Trailer) {
			t.Errorf("trailer %x", p.Trailer())
		}
		if err := p.VerifyICRC(); err != nil {
			t.Error(err)
		}
		pf := p.Fields()
		if b, err := pf.Append(nil); err != nil || !bytes.Equal(b, frame) {
			t.Errorf("re-encode with trailer: %v", err)
		}
		// A non-zero trailer is not covered by the ICRC.
		frame[len(frame)-1] = 0xFF
		p = parseFrame(t, frame)
		if err := p.VerifyICRC(); err != nil {
			t.Errorf("trailer byte changed the ICRC: %v", err)
		}
	}
}

// mutate returns a copy of the sample frame of op in encapsulation e,
// changed by fn (given the frame and the network header offset).
func mutate(t *testing.T, op wire.Opcode, e encap, payload []byte, fn func(b []byte, nh int)) []byte {
	t.Helper()
	b := encode(t, sampleFields(op, e, payload))
	fn(b, networkOffset(e))
	return b
}

// TestParseFrameErrors names every way ParseFrame refuses a frame.
func TestParseFrameErrors(t *testing.T) {
	v1, v4, v6 := encaps[0], encaps[2], encaps[4]
	send := wire.OpcodeRCSendOnly
	for _, tc := range []struct {
		name    string
		frame   []byte
		notRoCE bool   // want ErrNotRoCE
		layer   string // else want a *ParseError of this layer ...
		reason  string // ... whose reason contains this
	}{
		{name: "ARP", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[12], b[13] = 0x08, 0x06 }), notRoCE: true},
		{name: "IPv4 TCP", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+9] = 6 }), notRoCE: true},
		{name: "IPv4 UDP to another port", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+20+3]++ }), notRoCE: true},
		{name: "IPv4 later fragment", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+7] = 1 }), notRoCE: true},
		{name: "IPv4 first fragment of RoCE", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+6] |= 0x20 }),
			layer: "IPv4", reason: "fragmented"},
		{name: "IPv4 first fragment of other UDP", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+6] |= 0x20; b[nh+23]++ }),
			notRoCE: true},
		{name: "IPv6 TCP", frame: mutate(t, send, v6, nil, func(b []byte, nh int) { b[nh+6] = 6 }), notRoCE: true},
		{name: "IPv6 UDP to another port", frame: mutate(t, send, v6, nil, func(b []byte, nh int) { b[nh+40+2] = 0 }), notRoCE: true},
		{name: "IP version 5", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh] = 0x55 }), layer: "IPv4", reason: "version 5"},
		{name: "IPv4 Ethertype, IPv6 packet", frame: mutate(t, send, v6, nil, func(b []byte, nh int) { b[12], b[13] = 0x08, 0x00 }),
			layer: "IPv4", reason: "version 6"},
		{name: "IPv6 Ethertype, IPv4 packet", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[12], b[13] = 0x86, 0xDD }),
			layer: "IPv6", reason: "version 4"},
		{name: "GRH next header UDP", frame: mutate(t, send, v1, nil, func(b []byte, nh int) { b[nh+6] = 17 }),
			layer: "GRH", reason: "next header 0x11"},
		{name: "GRH version 4", frame: mutate(t, send, v1, nil, func(b []byte, nh int) { b[nh] = 0x40 }), layer: "GRH", reason: "version 4"},
		{name: "UDP length shorter than the IP payload", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+20+5] -= 4 }),
			layer: "UDP", reason: "but the IP payload is"},
		{name: "UDP length below 8", frame: mutate(t, send, v6, nil, func(b []byte, nh int) { b[nh+40+4], b[nh+40+5] = 0, 7 }),
			layer: "UDP", reason: "length 7 < 8"},
		{name: "unknown opcode 0x1e", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+28] = 0x1E }),
			layer: "BTH", reason: "unknown opcode 0x1e"},
		{name: "unknown opcode 0x15 on RC", frame: mutate(t, send, v6, nil, func(b []byte, nh int) { b[nh+48] = 0x15 }),
			layer: "BTH", reason: "unknown opcode 0x15"},
		{name: "TVer 1", frame: mutate(t, send, v1, nil, func(b []byte, nh int) { b[nh+40+1] |= 1 }),
			layer: "BTH", reason: "transport header version 1"},
		{name: "too short for the opcode's headers", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+28] = 0x13 }),
			layer: "RC_COMPARE_SWAP", reason: "truncated: need 44 bytes, have 16"},
		{name: "pad count beyond the payload", frame: mutate(t, send, v4, nil, func(b []byte, nh int) { b[nh+29] |= 0x30 }),
			layer: "BTH", reason: "pad count 3 exceeds the 0 bytes"},
		{name: "bytes after an ACK", frame: mutate(t, wire.OpcodeRCSendOnly, v6, samplePayload(8), func(b []byte, nh int) { b[nh+48] = 0x11 }),
			layer: "RC_ACKNOWLEDGE", reason: "4 unexpected bytes"},
		{name: "ATOMIC_WRITE with 4 bytes", frame: mutate(t, 0x0A, v4, samplePayload(4), func(b []byte, nh int) { b[nh+28] = 0x1D }),
			layer: "RC_ATOMIC_WRITE", reason: "payload of 4 bytes, want 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p wire.Packet
			err := p.ParseFrame(tc.frame, wire.RoCEv2Port)
			switch {
			case err == nil:
				t.Fatalf("parsed as %v", p.Opcode())
			case tc.notRoCE:
				if !errors.Is(err, wire.ErrNotRoCE) {
					t.Errorf("error %v, want ErrNotRoCE", err)
				}
			default:
				wantParseError(t, err, tc.layer, tc.reason)
			}
		})
	}
}

// TestParseIPErrors checks what ParseIP says of a packet that is no IP.
func TestParseIPErrors(t *testing.T) {
	var p wire.Packet
	wantParseError(t, p.ParseIP(nil, wire.RoCEv2Port), "IP", "truncated")
	frame := encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[2], nil))
	ip := frame[wire.EthernetLen:]
	ip[0] = 0x55
	wantParseError(t, p.ParseIP(ip, wire.RoCEv2Port), "IP", "version 5")
}

// TestParseFrameUDPPort checks that the UDP port is the caller's.
func TestParseFrameUDPPort(t *testing.T) {
	f := sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(8))
	f.UDP.DstPort = 4792
	frame := encode(t, f)
	var p wire.Packet
	if err := p.ParseFrame(frame, wire.RoCEv2Port); !errors.Is(err, wire.ErrNotRoCE) {
		t.Errorf("port 4792 parsed for 4791: %v", err)
	}
	if err := p.ParseFrame(frame, 4792); err != nil || p.VerifyICRC() != nil {
		t.Errorf("port 4792: %v", err)
	}
}

// TestVerifyICRCBad checks the error for a wrong ICRC.
func TestVerifyICRCBad(t *testing.T) {
	frame := encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(8)))
	frame[len(frame)-1] ^= 0x80
	p := parseFrame(t, frame)
	err := p.VerifyICRC()
	if !errors.Is(err, wire.ErrBadICRC) {
		t.Errorf("VerifyICRC: %v, want ErrBadICRC", err)
	}
}

// TestEncodeErrors checks that PacketFields.Append refuses inconsistent
// fields and leaves b as it was.
func TestEncodeErrors(t *testing.T) {
	good := sampleFields(wire.OpcodeRCSendOnly, encaps[2], nil)
	for _, tc := range []struct {
		name string
		fn   func(f *wire.PacketFields)
	}{
		{"no version", func(f *wire.PacketFields) { f.Version = wire.VersionUnknown }},
		{"v2 without IP", func(f *wire.PacketFields) { f.IPv4 = nil }},
		{"v2 with both IPs", func(f *wire.PacketFields) { f.IPv6 = sampleFields(0, encaps[4], nil).IPv6 }},
		{"v2 with a GRH", func(f *wire.PacketFields) { f.GRH = sampleFields(0, encaps[0], nil).GRH }},
		{"v1 without GRH", func(f *wire.PacketFields) { f.Version = wire.RoCEv1 }},
		{"unknown opcode", func(f *wire.PacketFields) { f.BTH.Opcode = 0x1E }},
		{"IPv4 without a source address", func(f *wire.PacketFields) { f.IPv4.Src = netip.Addr{} }},
		{"IPv4 to an IPv6 address", func(f *wire.PacketFields) { f.IPv4.Dst = ip6Server }},
		{"44 bytes of IPv4 options", func(f *wire.PacketFields) { f.IPv4.Options = make([]byte, 44) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			ip := *good.IPv4
			f.IPv4 = &ip
			tc.fn(&f)
			prefix := []byte{1, 2, 3}
			b, err := f.Append(bytes.Clone(prefix))
			if err == nil {
				t.Fatal("no error")
			}
			if !bytes.Equal(b, prefix) {
				t.Errorf("b changed to %x", b)
			}
		})
	}
}

// TestEncodeIPv4Limits checks the largest IPv4 header (40 bytes of
// options, IHL 15) and IPv4-mapped addresses, which Append accepts.
func TestEncodeIPv4Limits(t *testing.T) {
	f := sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(3))
	opts := make([]byte, 40)
	opts[0], opts[1] = 0x94, 4 // Router Alert, then end-of-options zeros
	f.IPv4.Options = opts
	f.IPv4.Src = netip.MustParseAddr("::ffff:192.0.2.12")
	frame := encode(t, f)
	p := parseFrame(t, frame)
	if ip := p.IPv4(); ip.HeaderLen() != 60 || ip.Src() != ip4Client || !bytes.Equal(ip.Options(), opts) {
		t.Errorf("IPv4 header %x", []byte(p.IPv4()))
	}
	if err := p.VerifyICRC(); err != nil {
		t.Error(err)
	}
}

// TestVersionString pins the names.
func TestVersionString(t *testing.T) {
	if wire.RoCEv1.String() != "RoCEv1" || wire.RoCEv2.String() != "RoCEv2" || wire.VersionUnknown.String() != "unknown" {
		t.Error("Version.String")
	}
}
