package wire

import (
	"encoding/binary"
	"fmt"
)

// Version is the RoCE version of a packet.
//
//enum:string unknown
type Version uint8

// RoCE versions.
const (
	VersionUnknown Version = iota
	RoCEv1                 // "RoCEv1": Ethertype 0x8915, GRH, IBA transport (Annex A16)
	RoCEv2                 // "RoCEv2": IPv4/IPv6, UDP port 4791, IBA transport (Annex A17)
)

// Packet is a parsed RoCE packet: offsets into the bytes it was parsed from.
// It does not copy; its views alias Bytes and are valid while Bytes is.
// The zero Packet is ready for a Parse method; parsing allocates nothing.
type Packet struct {
	// Bytes are the bytes parsed: an Ethernet frame (ParseFrame), an IP
	// packet (ParseIP), or an IBA transport packet from the BTH to the ICRC
	// (ParseTransport).
	Bytes   []byte
	Version Version
	Info    *OpInfo // the opcode's table row

	l2, l3, ib int // offsets of the Ethernet, IP/GRH and BTH headers; -1 when absent
	l4         int // offset of the UDP header; -1 when absent
	l3Len      int // length of the IP header or GRH
	ipVer      uint8
	payload    int  // offset of the payload
	icrc       int  // offset of the ICRC
	end        int  // end of the IP packet (or of the IB packet): the bytes after it are link padding
	bth0, bth1 byte // the BTH's first two bytes as parsed: opcode; SE, M, pad count, TVer (see Holds)
}

// ParseFrame parses an Ethernet frame carrying RoCE v1 (Ethertype 0x8915)
// or RoCE v2 (IPv4 or IPv6, UDP destination port udpPort, normally 4791).
// Frames of any other kind return ErrNotRoCE; malformed RoCE returns a
// *ParseError.
func (p *Packet) ParseFrame(b []byte, udpPort uint16) error {
	p.reset(b)
	eth, err := ParseEthernet(b)
	if err != nil {
		return err
	}
	p.l2 = 0
	off := len(eth)
	switch eth.EtherType() {
	case EtherTypeRoCE:
		return p.parseGRH(off)
	case EtherTypeIPv4, EtherTypeIPv6:
		// The Ethertype must agree with the IP version, as Linux's
		// ip_rcv and ipv6_rcv insist; PacketFields.Append derives the
		// Ethertype from the header, so a mismatch would not round-trip.
		want, layer := uint8(4), "IPv4"
		if eth.EtherType() == EtherTypeIPv6 {
			want, layer = 6, "IPv6"
		}
		if len(b) > off && b[off]>>4 != want {
			return malformed(layer, "version %d", b[off]>>4)
		}
		return p.parseIP(off, udpPort)
	}
	return ErrNotRoCE
}

// ParseIP parses an IPv4 or IPv6 packet carrying RoCE v2 to udpPort.
func (p *Packet) ParseIP(b []byte, udpPort uint16) error {
	p.reset(b)
	return p.parseIP(0, udpPort)
}

// ParseTransport parses an IBA transport packet, from the BTH up to and
// including the ICRC, as a UDP socket delivers RoCE v2. Without the IP
// header the ICRC cannot be computed (ComputeICRC and VerifyICRC fail);
// compute it with [ICRC] over the IP header and the transport packet
// together.
func (p *Packet) ParseTransport(b []byte, v Version) error {
	p.reset(b)
	p.Version = v
	return p.parseIB(0, len(b))
}

// Holds reports whether p holds a successful parse (by any Parse method)
// of the transport packet b of version v, unchanged since: b is the very
// memory p.Transport() is (same start, same length), and the bytes the
// parse checked, the opcode, pad count and transport header version, still
// read as they did. Every check of ParseTransport(b, v) then passes as it
// did and every offset is as it would set it, so a caller handed a parse
// along with the bytes (the engine, a link's parse in link.Packet) can
// use p instead of parsing b again. A zero or failed p holds nothing.
func (p *Packet) Holds(b []byte, v Version) bool {
	if p.Info == nil || p.Version != v || len(b) < BTHLen || p.ib < 0 || p.end-p.ib != len(b) || p.end > len(p.Bytes) {
		return false
	}
	return &p.Bytes[p.ib] == &b[0] && b[0] == p.bth0 && b[1] == p.bth1
}

func (p *Packet) reset(b []byte) {
	*p = Packet{Bytes: b, l2: -1, l3: -1, l4: -1, ib: -1}
}

func (p *Packet) parseGRH(off int) error {
	grh, err := ParseGRH(p.Bytes[off:])
	if err != nil {
		return err
	}
	if grh.NextHeader() != GRHNextHdrIBTH {
		return malformed("GRH", "next header %#02x, want 0x1b (IBA transport)", grh.NextHeader())
	}
	p.Version, p.l3, p.l3Len, p.ipVer = RoCEv1, off, GRHLen, 6
	end := off + GRHLen + grh.PayloadLen()
	return p.parseIB(off+GRHLen, end)
}

func (p *Packet) parseIP(off int, udpPort uint16) error {
	b := p.Bytes[off:]
	if len(b) < 1 {
		return truncated("IP", 1, 0)
	}
	var l4, end int
	switch b[0] >> 4 {
	case 4:
		ip, err := ParseIPv4(b)
		if err != nil {
			return err
		}
		if ip.Protocol() != IPProtocolUDP {
			return ErrNotRoCE
		}
		if ip.FragOffset() != 0 {
			return ErrNotRoCE // a later fragment: its UDP port is unknown
		}
		p.ipVer, p.l3Len = 4, ip.HeaderLen()
		l4, end = off+ip.HeaderLen(), off+ip.TotalLen()
		if ip.Flags()&1 != 0 { // more fragments: a first fragment
			if u := p.Bytes[l4:end]; len(u) >= UDPLen && binary.BigEndian.Uint16(u[2:]) == udpPort {
				return malformed("IPv4", "fragmented RoCE v2 packet (more-fragments set)")
			}
			return ErrNotRoCE
		}
	case 6:
		ip, err := ParseIPv6(b)
		if err != nil {
			return err
		}
		if ip.NextHeader() != IPProtocolUDP {
			return ErrNotRoCE
		}
		p.ipVer, p.l3Len = 6, IPv6Len
		l4, end = off+IPv6Len, off+IPv6Len+ip.PayloadLen()
	default:
		return malformed("IP", "version %d", b[0]>>4)
	}
	udp, err := ParseUDP(p.Bytes[l4:end])
	if err != nil {
		return err
	}
	if udp.DstPort() != udpPort {
		return ErrNotRoCE
	}
	if udp.Length() != end-l4 {
		return malformed("UDP", "length %d, but the IP payload is %d bytes", udp.Length(), end-l4)
	}
	p.Version, p.l3, p.l4 = RoCEv2, off, l4
	return p.parseIB(l4+UDPLen, end)
}

// parseIB parses the IBA transport packet in p.Bytes[off:end].
func (p *Packet) parseIB(off, end int) error {
	b := p.Bytes[off:end]
	bth, err := ParseBTH(b)
	if err != nil {
		return err
	}
	op := bth.Opcode()
	info := &opcodeTable[op]
	if info.Name == "" {
		return malformed("BTH", "unknown opcode %#02x", uint8(op))
	}
	if tv := bth.TVer(); tv != 0 {
		return malformed("BTH", "transport header version %d, want 0", tv)
	}
	if len(b) < info.HeaderLen+ICRCLen {
		return truncated(op.String(), info.HeaderLen+ICRCLen, len(b))
	}
	pad := bth.PadCount()
	paylen := len(b) - info.HeaderLen - ICRCLen - pad
	if paylen < 0 {
		return malformed("BTH", "pad count %d exceeds the %d bytes after the headers", pad, len(b)-info.HeaderLen-ICRCLen)
	}
	switch {
	case info.FixedPayload == 0 && paylen+pad != 0:
		return malformed(op.String(), "%d unexpected bytes after the headers", paylen+pad)
	case info.FixedPayload > 0 && paylen != info.FixedPayload:
		return malformed(op.String(), "payload of %d bytes, want %d", paylen, info.FixedPayload)
	}
	p.Info, p.ib = info, off
	p.bth0, p.bth1 = b[0], b[1]
	p.payload = off + info.HeaderLen
	p.icrc = end - ICRCLen
	p.end = end
	return nil
}

// Ethernet returns the Ethernet header, or nil.
func (p *Packet) Ethernet() Ethernet {
	if p.l2 < 0 {
		return nil
	}
	if binary.BigEndian.Uint16(p.Bytes[p.l2+12:]) == EtherTypeVLAN {
		return Ethernet(p.Bytes[p.l2 : p.l2+EthernetLen+VLANTagLen])
	}
	return Ethernet(p.Bytes[p.l2 : p.l2+EthernetLen])
}

// IPVersion returns 4 or 6 for RoCE v2, 6 for RoCE v1 (the GRH), 0 when
// the packet was parsed without its network header.
func (p *Packet) IPVersion() uint8 { return p.ipVer }

// IPv4 returns the IPv4 header of a RoCE v2 packet, or nil.
func (p *Packet) IPv4() IPv4 {
	if p.l3 < 0 || p.ipVer != 4 {
		return nil
	}
	return IPv4(p.Bytes[p.l3 : p.l3+p.l3Len])
}

// IPv6 returns the IPv6 header of a RoCE v2 packet, or nil.
func (p *Packet) IPv6() IPv6 {
	if p.l3 < 0 || p.ipVer != 6 || p.Version != RoCEv2 {
		return nil
	}
	return IPv6(p.Bytes[p.l3 : p.l3+IPv6Len])
}

// GRH returns the GRH of a RoCE v1 packet, or nil.
func (p *Packet) GRH() GRH {
	if p.l3 < 0 || p.Version != RoCEv1 {
		return nil
	}
	return GRH(p.Bytes[p.l3 : p.l3+GRHLen])
}

// Network returns the IP header or GRH, whichever the packet has, or nil.
func (p *Packet) Network() []byte {
	if p.l3 < 0 {
		return nil
	}
	return p.Bytes[p.l3 : p.l3+p.l3Len]
}

// UDP returns the UDP header of a RoCE v2 packet, or nil.
func (p *Packet) UDP() UDP {
	if p.l4 < 0 {
		return nil
	}
	return UDP(p.Bytes[p.l4 : p.l4+UDPLen])
}

// BTH returns the Base Transport Header.
func (p *Packet) BTH() BTH { return BTH(p.Bytes[p.ib : p.ib+BTHLen]) }

// Opcode returns the BTH opcode.
func (p *Packet) Opcode() Opcode { return Opcode(p.Bytes[p.ib]) }

// Header returns the bytes of extended header h, or nil when the opcode
// does not carry it.
func (p *Packet) Header(h Header) []byte {
	if p.Info == nil || !p.Info.Headers.Has(h) {
		return nil
	}
	o := p.ib + int(p.Info.Offset[h])
	return p.Bytes[o : o+headerInfo[h].size]
}

// RETH returns the RETH, or nil.
func (p *Packet) RETH() RETH { return RETH(p.Header(HdrRETH)) }

// AETH returns the AETH, or nil.
func (p *Packet) AETH() AETH { return AETH(p.Header(HdrAETH)) }

// AtomicETH returns the AtomicETH, or nil.
func (p *Packet) AtomicETH() AtomicETH { return AtomicETH(p.Header(HdrAtomicETH)) }

// AtomicAckETH returns the AtomicAckETH, or nil.
func (p *Packet) AtomicAckETH() AtomicAckETH { return AtomicAckETH(p.Header(HdrAtomicAckETH)) }

// DETH returns the DETH, or nil.
func (p *Packet) DETH() DETH { return DETH(p.Header(HdrDETH)) }

// FETH returns the FETH, or nil.
func (p *Packet) FETH() FETH { return FETH(p.Header(HdrFETH)) }

// RDETH returns the RDETH, or nil.
func (p *Packet) RDETH() RDETH { return RDETH(p.Header(HdrRDETH)) }

// XRCETH returns the XRCETH, or nil.
func (p *Packet) XRCETH() XRCETH { return XRCETH(p.Header(HdrXRCETH)) }

// ImmDt returns the immediate data header, or nil.
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.Header(HdrImmDt)) }

// IETH returns the invalidate header, or nil.
func (p *Packet) IETH() IETH { return IETH(p.Header(HdrIETH)) }

// Payload returns the payload, without pad bytes.
func (p *Packet) Payload() []byte { return p.Bytes[p.payload : p.icrc-p.BTH().PadCount()] }

// Pad returns the pad bytes between payload and ICRC (0-3 bytes, §9.2: PadCnt).
func (p *Packet) Pad() []byte { return p.Bytes[p.icrc-p.BTH().PadCount() : p.icrc] }

// Transport returns the IBA transport packet: from the BTH through the ICRC.
func (p *Packet) Transport() []byte { return p.Bytes[p.ib:p.end] }

// ICRC returns the ICRC carried by the packet (sent least-significant byte first).
func (p *Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.Bytes[p.icrc:]) }

// Trailer returns the bytes after the IP packet or GRH payload: Ethernet
// padding of short frames, normally zeros.
func (p *Packet) Trailer() []byte { return p.Bytes[p.end:] }

// ComputeICRC computes the ICRC the packet should carry. It needs the
// network header: it fails for packets parsed with ParseTransport.
func (p *Packet) ComputeICRC() (uint32, error) {
	if p.l3 < 0 {
		return 0, fmt.Errorf("ICRC: the %v packet was parsed without its network header", p.Version)
	}
	return icrc(p.Bytes[p.l3:p.icrc], p.l3Len, p.ipVer, p.Version), nil
}

// VerifyICRC recomputes the ICRC and returns an error wrapping ErrBadICRC
// when it differs from the one the packet carries.
func (p *Packet) VerifyICRC() error {
	want, err := p.ComputeICRC()
	if err != nil {
		return err
	}
	if got := p.ICRC(); got != want {
		return fmt.Errorf("%w: packet carries %#08x, computed %#08x", ErrBadICRC, got, want)
	}
	return nil
}
