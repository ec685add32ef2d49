package dissect

import (
	"fmt"
	"math/bits"
	"strconv"

	"github.com/goroce/goroce/wire"
)

// This file turns wire's header views into Nodes, one function per layer.
// Offsets and lengths come from wire (the views' accessors and the opcode
// table); only names and presentation live here.

func field(name, key string, v Value) Node { return Node{Name: name, Key: key, Value: v} }

func layer(name, key string, children ...Node) Node {
	return Node{Name: name, Key: key, Children: children}
}

var etherTypeNames = map[uint16]string{
	wire.EtherTypeIPv4: "IPv4",
	wire.EtherTypeARP:  "ARP",
	wire.EtherTypeVLAN: "802.1Q",
	wire.EtherTypeIPv6: "IPv6",
	wire.EtherTypeRoCE: "RoCE",
}

func ethernetNode(e wire.Ethernet) Node {
	n := layer("Ethernet II", "eth",
		field("Destination", "dst", Text(e.Dst().String())),
		field("Source", "src", Text(e.Src().String())),
	)
	if e.HasVLAN() {
		tci := e.VLANTCI()
		n.Children = append(n.Children, layer("802.1Q Virtual LAN", "vlan",
			field("Priority (PCP)", "pcp", Uint(uint64(tci>>13), 3)),
			field("Drop Eligible (DEI)", "dei", Bool(tci&0x1000 != 0)),
			field("VLAN ID", "vid", Uint(uint64(tci&0xFFF), 12)),
		))
	}
	et := e.EtherType()
	n.Children = append(n.Children, field("Type", "type", Hex(uint64(et), 16).Named(etherTypeNames[et])))
	return n
}

var ecnNames = [4]string{"Not-ECT", "ECT(1)", "ECT(0)", "CE"}

func ipProtoName(p uint8) string {
	if p == wire.IPProtocolUDP {
		return "UDP"
	}
	return ""
}

func checksumStatus(got, want uint16) string {
	if got == want {
		return "correct"
	}
	return fmt.Sprintf("WRONG, should be 0x%04x", want)
}

func ipv4Node(h wire.IPv4) Node {
	flags := h.Flags()
	n := layer("Internet Protocol Version 4", "ipv4",
		field("Version", "version", Uint(4, 4)),
		field("Header Length", "header_len", Uint(uint64(h.HeaderLen()), 8)),
		field("Differentiated Services Codepoint", "dscp", Uint(uint64(h.DSCP()), 6)),
		field("Explicit Congestion Notification", "ecn", Uint(uint64(h.ECN()), 2).Named(ecnNames[h.ECN()])),
		field("Total Length", "total_len", Uint(uint64(h.TotalLen()), 16)),
		field("Identification", "id", Hex(uint64(h.ID()), 16)),
		Node{Name: "Flags", Key: "flags", Value: Hex(uint64(flags), 3), Children: []Node{
			field("Reserved", "reserved", Bool(flags&4 != 0)),
			field("Don't Fragment", "df", Bool(h.DontFragment())),
			field("More Fragments", "mf", Bool(flags&1 != 0)),
		}},
		field("Fragment Offset", "frag_offset", Uint(uint64(h.FragOffset()), 13)),
		field("Time to Live", "ttl", Uint(uint64(h.TTL()), 8)),
		field("Protocol", "protocol", Uint(uint64(h.Protocol()), 8).Named(ipProtoName(h.Protocol()))),
		field("Header Checksum", "checksum", Hex(uint64(h.Checksum()), 16).Named(checksumStatus(h.Checksum(), h.ComputeChecksum()))),
		field("Source Address", "src", Text(h.Src().String())),
		field("Destination Address", "dst", Text(h.Dst().String())),
	)
	if o := h.Options(); len(o) > 0 {
		n.Children = append(n.Children, field("Options", "options", Bytes(o)))
	}
	return n
}

// ipv6Node dissects an IPv6 header of RoCE v2 or, with IBTA's names, the
// GRH of RoCE v1 (the same layout, IBTA Vol 1 §8.3).
func ipv6Node(h wire.IPv6, grh bool) Node {
	tc := h.TrafficClass()
	if grh {
		return layer("Global Route Header", "grh",
			field("IP Version", "ipver", Uint(uint64(h.Version()), 4)),
			field("Traffic Class", "tclass", Hex(uint64(tc), 8)),
			field("Flow Label", "flow_label", Hex(uint64(h.FlowLabel()), 20)),
			field("Payload Length", "paylen", Uint(uint64(h.PayloadLen()), 16)),
			field("Next Header", "nxthdr", Hex(uint64(h.NextHeader()), 8).Named(grhNextName(h.NextHeader()))),
			field("Hop Limit", "hoplmt", Uint(uint64(h.HopLimit()), 8)),
			field("Source GID", "sgid", Text(h.Src().String())),
			field("Destination GID", "dgid", Text(h.Dst().String())),
		)
	}
	return layer("Internet Protocol Version 6", "ipv6",
		field("Version", "version", Uint(uint64(h.Version()), 4)),
		Node{Name: "Traffic Class", Key: "traffic_class", Value: Hex(uint64(tc), 8), Children: []Node{
			field("Differentiated Services Codepoint", "dscp", Uint(uint64(tc>>2), 6)),
			field("Explicit Congestion Notification", "ecn", Uint(uint64(tc&3), 2).Named(ecnNames[tc&3])),
		}},
		field("Flow Label", "flow_label", Hex(uint64(h.FlowLabel()), 20)),
		field("Payload Length", "payload_len", Uint(uint64(h.PayloadLen()), 16)),
		field("Next Header", "next_header", Uint(uint64(h.NextHeader()), 8).Named(ipProtoName(h.NextHeader()))),
		field("Hop Limit", "hop_limit", Uint(uint64(h.HopLimit()), 8)),
		field("Source Address", "src", Text(h.Src().String())),
		field("Destination Address", "dst", Text(h.Dst().String())),
	)
}

func grhNextName(nh uint8) string {
	if nh == wire.GRHNextHdrIBTH {
		return "IBA transport"
	}
	return ""
}

func udpNode(h wire.UDP, verdict udpVerdict, want uint16) Node {
	port := func(p uint16) Value {
		v := Uint(uint64(p), 16)
		if p == wire.RoCEv2Port {
			v = v.Named("RoCE v2")
		}
		return v
	}
	cs := Hex(uint64(h.Checksum()), 16)
	switch verdict {
	case udpNone:
		cs = cs.Named("none")
	case udpOK:
		cs = cs.Named("correct")
	case udpPartial:
		cs = cs.Named("partial: the pseudo-header sum, left for checksum offload")
	case udpWrong:
		cs = cs.Named(checksumStatus(h.Checksum(), want))
	}
	return layer("User Datagram Protocol", "udp",
		field("Source Port", "src_port", port(h.SrcPort())),
		field("Destination Port", "dst_port", port(h.DstPort())),
		field("Length", "length", Uint(uint64(h.Length()), 16)),
		field("Checksum", "checksum", cs),
	)
}

// bthNode dissects the Base Transport Header (IBTA Vol 1 §9.2).
func bthNode(h wire.BTH) Node {
	op := h.Opcode()
	return layer("Base Transport Header", "bth",
		field("Opcode", "opcode", Hex(uint64(op), 8).Named(op.String())),
		field("Solicited Event", "se", Bool(h.SolicitedEvent())),
		field("MigReq", "migreq", Bool(h.MigReq())),
		field("Pad Count", "pad_count", Uint(uint64(h.PadCount()), 2)),
		field("Header Version", "tver", Uint(uint64(h.TVer()), 4)),
		field("Partition Key", "pkey", Hex(uint64(h.PKey()), 16)),
		field("FECN", "fecn", Bool(h.FECN())),
		field("BECN", "becn", Bool(h.BECN())),
		field("Reserved (6 bits)", "resv6a", Hex(uint64(h.Resv6a()), 6)),
		field("Destination QP", "dest_qp", Hex(uint64(h.DestQP()), 24)),
		field("Acknowledge Request", "ack_req", Bool(h.AckReq())),
		field("Reserved (7 bits)", "resv7", Hex(uint64(h.Resv7()), 7)),
		field("Packet Sequence Number", "psn", Uint(uint64(h.PSN()), 24)),
	)
}

// extHeader describes how one extended transport header is shown; the
// table is indexed by wire.Header, and which headers a packet carries, in
// which order and where, comes from wire's opcode table.
type extHeader struct {
	name   string // long name, after IBTA and Wireshark
	key    string // JSON key
	fields func(p *wire.Packet, b []byte) []Node
}

var extHeaders = map[wire.Header]extHeader{
	wire.HdrRDETH: {"RDETH - Reliable Datagram Extended Transport Header", "rdeth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.Word24(b)
		return []Node{
			field("Reserved", "reserved", Hex(uint64(h.Reserved()), 8)),
			field("EE Context", "ee_context", Hex(uint64(h.Value()), 24)),
		}
	}},
	wire.HdrDETH: {"DETH - Datagram Extended Transport Header", "deth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.DETH(b)
		qk := Hex(uint64(h.QKey()), 32)
		if h.QKey() == wire.GSIQKey {
			qk = qk.Named("GSI")
		}
		return []Node{
			field("Queue Key", "qkey", qk),
			field("Reserved", "reserved", Hex(uint64(h.Reserved()), 8)),
			field("Source QP", "src_qp", Hex(uint64(h.SrcQP()), 24)),
		}
	}},
	wire.HdrXRCETH: {"XRCETH - XRC Extended Transport Header", "xrceth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.Word24(b)
		return []Node{
			field("Reserved", "reserved", Hex(uint64(h.Reserved()), 8)),
			field("XRC SRQ", "xrc_srq", Hex(uint64(h.Value()), 24)),
		}
	}},
	wire.HdrFETH: {"FETH - FLUSH Extended Transport Header", "feth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.FETH(b)
		return []Node{
			field("Reserved", "reserved", Hex(uint64(h.Word()>>6), 26)),
			field("Selectivity Level", "selectivity", Uint(uint64(h.Selectivity()), 2).Named(flushSelName(h.Selectivity()))),
			field("Placement Type", "placement", Hex(uint64(h.PlacementType()), 4).Named(flushPlacementName(h.PlacementType()))),
		}
	}},
	wire.HdrRETH: {"RETH - RDMA Extended Transport Header", "reth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.RETH(b)
		return []Node{
			field("Virtual Address", "va", Hex(h.VA(), 64)),
			field("Remote Key", "rkey", Hex(uint64(h.RKey()), 32)),
			field("DMA Length", "dma_len", Uint(uint64(h.DMALength()), 32)),
		}
	}},
	wire.HdrAtomicETH: {"AtomicETH - Atomic Extended Transport Header", "atomiceth", func(p *wire.Packet, b []byte) []Node {
		h := wire.AtomicETH(b)
		swapName, swapKey := "Swap Data", "swap"
		if p.Opcode().Operation() == wire.OpFetchAdd {
			swapName, swapKey = "Add Data", "add"
		}
		return []Node{
			field("Virtual Address", "va", Hex(h.VA(), 64)),
			field("Remote Key", "rkey", Hex(uint64(h.RKey()), 32)),
			field(swapName, swapKey, Hex(h.SwapAdd(), 64)),
			field("Compare Data", "compare", Hex(h.Compare(), 64)),
		}
	}},
	wire.HdrAETH: {"AETH - ACK Extended Transport Header", "aeth", func(_ *wire.Packet, b []byte) []Node {
		h := wire.AETH(b)
		s := h.Syndrome()
		return []Node{
			{Name: "Syndrome", Key: "syndrome", Value: Hex(uint64(s), 8).Named(s.String()), Children: []Node{
				field("Reserved", "reserved", Uint(uint64(s>>7), 1)),
				field("Type", "type", Uint(uint64(s.Type()), 2).Named(synTypeNames[s.Type()])),
				field(synValueName(s), "code", Uint(uint64(s.Value()), 5)),
			}},
			field("Message Sequence Number", "msn", Uint(uint64(h.MSN()), 24)),
		}
	}},
	wire.HdrAtomicAckETH: {"AtomicAckETH - Atomic ACK Extended Transport Header", "atomicacketh", func(_ *wire.Packet, b []byte) []Node {
		return []Node{field("Original Remote Data", "orig_data", Hex(wire.AtomicAckETH(b).OrigData(), 64))}
	}},
	wire.HdrImmDt: {"ImmDt - Immediate Data", "immdt", func(_ *wire.Packet, b []byte) []Node {
		return []Node{field("Immediate Data", "imm", Hex(uint64(wire.Word32(b).Value()), 32))}
	}},
	wire.HdrIETH: {"IETH - Invalidate Extended Transport Header", "ieth", func(_ *wire.Packet, b []byte) []Node {
		return []Node{field("Remote Key to Invalidate", "rkey", Hex(uint64(wire.Word32(b).Value()), 32))}
	}},
	wire.HdrCNPReserved: {"CNP reserved - Congestion Notification Packet reserved bytes", "cnp", func(_ *wire.Packet, b []byte) []Node {
		return []Node{field("Reserved", "reserved", Bytes(b))}
	}},
}

var synTypeNames = [4]string{wire.SynACK: "ACK", wire.SynRNRNAK: "RNR NAK", wire.SynReserved: "reserved", wire.SynNAK: "NAK"}

func synValueName(s wire.Syndrome) string {
	switch s.Type() {
	case wire.SynACK:
		return "Credit Count"
	case wire.SynRNRNAK:
		return "Timer"
	case wire.SynNAK:
		return "NAK Code"
	}
	return "Value"
}

func flushSelName(s uint8) string {
	switch s {
	case wire.FlushSelMRRange:
		return "memory region range"
	case wire.FlushSelWholeMR:
		return "whole memory region"
	}
	return "reserved"
}

func flushPlacementName(t uint8) string {
	switch t {
	case wire.FlushGlobalVisibility:
		return "global visibility"
	case wire.FlushPersistence:
		return "persistence"
	case wire.FlushGlobalVisibility | wire.FlushPersistence:
		return "global visibility, persistence"
	}
	return ""
}

// allHeaders lists every extended header wire knows, in packet order:
// wire.Header values count up from 0 and Size is 0 past the last.
func allHeaders() []wire.Header {
	var hs []wire.Header
	for h := wire.Header(0); h.Size() > 0; h++ {
		hs = append(hs, h)
	}
	return hs
}

var headerOrder = allHeaders()

// extNodes dissects the extended headers the packet's opcode carries, in
// packet order.
func extNodes(p *wire.Packet) []Node {
	var nodes []Node
	for _, h := range headerOrder {
		b := p.Header(h)
		if b == nil {
			continue
		}
		x, ok := extHeaders[h]
		if !ok { // a header wire added that this package does not know yet
			nodes = append(nodes, layer(h.String(), keyOf(h.String()), field("Bytes", "bytes", Bytes(b))))
			continue
		}
		nodes = append(nodes, layer(x.name, x.key, x.fields(p, b)...))
	}
	return nodes
}

// icrcNode shows the ICRC the packet carries and whether it is the one the
// packet's invariant fields give. The value is shown as its bytes appear on
// the wire, as Wireshark shows it; the CRC-32 itself is sent
// least-significant byte first, so it is the byte-swapped value.
func icrcNode(got, want uint32) Node {
	v := Hex(uint64(bits.ReverseBytes32(got)), 32).Named("correct")
	if got != want {
		v = v.Named("WRONG, should be " + string(appendHex(nil, uint64(bits.ReverseBytes32(want)), 32)))
	}
	return Node{Name: "Invariant CRC", Key: "icrc", Value: v, Children: []Node{
		field("CRC-32 Value", "crc32", Hex(uint64(got), 32).Named("sent least-significant byte first")),
	}}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
