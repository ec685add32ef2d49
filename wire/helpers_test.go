package wire_test

// Shared builders for the wire tests: one encoded packet of every opcode
// in every encapsulation, with the addresses of the lab's rxe traces
// (../shared/traces/README.md) and distinct non-zero header values, so a
// field written at the wrong offset shows.

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// encap is one way of carrying an IBA transport packet in an Ethernet frame.
type encap struct {
	name    string
	version wire.Version
	ipVer   uint8 // 4 or 6 (6 for the GRH of RoCE v1)
	vlan    bool  // one 802.1Q tag
}

// encaps lists every encapsulation ParseFrame accepts.
var encaps = []encap{
	{"v1", wire.RoCEv1, 6, false},
	{"v1-vlan", wire.RoCEv1, 6, true},
	{"v2-ipv4", wire.RoCEv2, 4, false},
	{"v2-ipv4-vlan", wire.RoCEv2, 4, true},
	{"v2-ipv6", wire.RoCEv2, 6, false},
	{"v2-ipv6-vlan", wire.RoCEv2, 6, true},
}

// encapsNoVLAN are the three encapsulations proper: RoCE v1, v2/IPv4, v2/IPv6.
var encapsNoVLAN = []encap{encaps[0], encaps[2], encaps[4]}

// validOpcodes returns every opcode the table defines, in numeric order.
func validOpcodes() []wire.Opcode {
	var ops []wire.Opcode
	for i := range 256 {
		if op := wire.Opcode(i); op.Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

var (
	macServer = wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}
	macClient = wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0c}
	ip4Server = netip.MustParseAddr("192.0.2.11")
	ip4Client = netip.MustParseAddr("192.0.2.12")
	ip6Server = netip.MustParseAddr("fd00:c0:2::11")
	ip6Client = netip.MustParseAddr("fd00:c0:2::12")
	// RoCE v1 GIDs: the link-local GIDs derived from the MACs (EUI-64).
	gidServer = netip.MustParseAddr("fe80::5054:ff:fec0:20b")
	gidClient = netip.MustParseAddr("fe80::5054:ff:fec0:20c")
)

// samplePayload returns a payload of n bytes that looks like application
// data: ASCII text, as rping and the pingpong tools send.
func samplePayload(n int) []byte {
	const text = "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
	b := make([]byte, n)
	for i := range b {
		b[i] = text[i%len(text)]
	}
	return b
}

// defaultPayload is the payload samplePacket gives op: none where the
// opcode carries none, 8 bytes for ATOMIC_WRITE, 37 bytes otherwise (not a
// multiple of 4, so the packet has 3 pad bytes).
func defaultPayload(op wire.Opcode) []byte {
	switch n := op.Info().FixedPayload; {
	case n == 0:
		return nil
	case n > 0:
		return []byte{0, 0, 0, 0, 0, 0, 0x10, 0x01}
	}
	return samplePayload(37)
}

// sampleFields describes a packet of opcode op in encapsulation e, sent
// by the client to the server.
func sampleFields(op wire.Opcode, e encap, payload []byte) wire.PacketFields {
	f := wire.PacketFields{
		Version: e.version,
		Eth:     &wire.EthernetFields{Dst: macServer, Src: macClient, VLAN: e.vlan, VLANTCI: 3<<13 | 100},
		BTH: wire.BTHFields{
			Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x000011, PSN: 0xC0FFEE, AckReq: true,
		},
		Ext: wire.ExtFields{
			RDETH:     0xABCDEF,
			DETH:      wire.DETHFields{QKey: 0x11111111, SrcQP: 0x000123},
			XRCETH:    0x000456,
			FETH:      wire.FETHWord(wire.FlushSelMRRange, wire.FlushPersistence),
			RETH:      wire.RETHFields{VA: 0x00007F12_34567000, RKey: 0x00001234, DMALength: uint32(len(payload))},
			AtomicETH: wire.AtomicETHFields{VA: 0x00007F12_34568000, RKey: 0x00001235, SwapAdd: 1, Compare: 0},
			AETH:      wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 7},
			AtomicAck: 0x2A,
			ImmDt:     0xDEADBEEF,
			IETH:      0x00C0FFEE,
		},
		Payload: payload,
	}
	info := op.Info()
	switch {
	case op == wire.OpcodeCNP:
		// Annex A17.9.3: BECN set, PSN 0, AckReq clear.
		f.BTH.BECN, f.BTH.PSN, f.BTH.AckReq = true, 0, false
	case info.Is(wire.FlagRead) || info.Is(wire.FlagFlush):
		f.Ext.RETH.DMALength = 4096
	case info.Is(wire.FlagResponse):
		f.BTH.AckReq = false
	}
	if op.Transport() == wire.TransportUD {
		// As ud_pingpong: an ordinary UD QP (not QP1, whose payload tshark
		// would decode as a MAD) and an application Q_Key.
		f.BTH.DestQP = 0x000012
	}
	if info.Is(wire.FlagSend) && info.Is(wire.FlagLast) {
		f.BTH.SolicitedEvent = true
	}
	switch {
	case e.version == wire.RoCEv1:
		f.GRH = &wire.GRHFields{TrafficClass: 0, FlowLabel: 0, NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1,
			Src: gidClient, Dst: gidServer}
	case e.ipVer == 4:
		f.IPv4 = &wire.IPv4Fields{TOS: 0x02, ID: 0x3D1C, Flags: 2, TTL: 64, Protocol: wire.IPProtocolUDP,
			Src: ip4Client, Dst: ip4Server}
	default:
		f.IPv6 = &wire.IPv6Fields{TrafficClass: 0x02, FlowLabel: 0xB2F4F, NextHeader: wire.IPProtocolUDP, HopLimit: 64,
			Src: ip6Client, Dst: ip6Server}
	}
	if e.version == wire.RoCEv2 {
		f.UDP = wire.UDPFields{SrcPort: 61283, DstPort: wire.RoCEv2Port}
	}
	return f
}

// encode appends f and fails t on error.
func encode(t testing.TB, f wire.PacketFields) []byte {
	t.Helper()
	b, err := f.Append(nil)
	if err != nil {
		t.Fatalf("encode %v: %v", f.BTH.Opcode, err)
	}
	return b
}

// sample is one encoded test frame.
type sample struct {
	name  string
	op    wire.Opcode
	encap encap
	frame []byte
}

// samples encodes one frame of every opcode in each of es.
func samples(t testing.TB, es []encap) []sample {
	t.Helper()
	var out []sample
	for _, e := range es {
		for _, op := range validOpcodes() {
			out = append(out, sample{
				name:  fmt.Sprintf("%s/%v", e.name, op),
				op:    op,
				encap: e,
				frame: encode(t, sampleFields(op, e, defaultPayload(op))),
			})
		}
	}
	return out
}

// parseFrame parses b and fails t on error.
func parseFrame(t testing.TB, b []byte) *wire.Packet {
	t.Helper()
	var p wire.Packet
	if err := p.ParseFrame(b, wire.RoCEv2Port); err != nil {
		t.Fatalf("ParseFrame: %v\n%x", err, b)
	}
	return &p
}

// networkOffset returns the offset of the IP header or GRH in frame.
func networkOffset(e encap) int {
	if e.vlan {
		return wire.EthernetLen + wire.VLANTagLen
	}
	return wire.EthernetLen
}
