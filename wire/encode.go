package wire

import (
	"fmt"
	"math/bits"
)

// ExtFields holds the extended transport headers of a packet for encoding.
// Only the headers the opcode carries (OpInfo.Headers) are written, in
// packet order; the others are ignored.
type ExtFields struct {
	RDETH       uint32 // EE context
	DETH        DETHFields
	XRCETH      uint32 // XRC SRQ number
	FETH        uint32 // the FETH word; see FETHWord
	RETH        RETHFields
	AtomicETH   AtomicETHFields
	AETH        AETHFields
	AtomicAck   uint64 // original remote data
	ImmDt       uint32
	IETH        uint32 // R_Key to invalidate
	CNPReserved [CNPReservedLen]byte
}

// AETHFields holds an AETH for encoding.
type AETHFields struct {
	Syndrome Syndrome
	MSN      uint32
}

// PacketFields describes a whole RoCE packet for encoding with Append.
//
// For RoCE v2 set IPv4 or IPv6 and UDP; for RoCE v1 set GRH (an IPv6Fields
// with NextHeader 0x1B and GIDs as addresses). Eth is optional: without it
// the encoding starts at the network header.
type PacketFields struct {
	Version Version
	Eth     *EthernetFields // EtherType is set by Append
	IPv4    *IPv4Fields     // RoCE v2 over IPv4
	IPv6    *IPv6Fields     // RoCE v2 over IPv6
	GRH     *GRHFields      // RoCE v1
	UDP     UDPFields       // RoCE v2; Length is set by Append
	BTH     BTHFields       // PadCount is set by Append
	Ext     ExtFields
	Payload []byte
	// Trailer is appended after the packet: Ethernet padding of short frames.
	Trailer []byte
}

// Fields returns the fields of a parsed packet, such that Append of the
// result reproduces p.Bytes exactly when p is well formed. Slices in the
// result alias p.Bytes.
func (p *Packet) Fields() PacketFields {
	f := PacketFields{Version: p.Version, BTH: p.BTH().Fields(), Payload: p.Payload(), Trailer: p.Trailer()}
	if e := p.Ethernet(); e != nil {
		ef := e.Fields()
		f.Eth = &ef
	}
	switch {
	case p.IPv4() != nil:
		v := p.IPv4().Fields()
		f.IPv4 = &v
	case p.IPv6() != nil:
		v := p.IPv6().Fields()
		f.IPv6 = &v
	case p.GRH() != nil:
		v := p.GRH().Fields()
		f.GRH = &v
	}
	if u := p.UDP(); u != nil {
		f.UDP = u.Fields()
	}
	x := &f.Ext
	if h := p.RDETH(); h != nil {
		x.RDETH = h.Value()
	}
	if h := p.DETH(); h != nil {
		x.DETH = h.Fields()
	}
	if h := p.XRCETH(); h != nil {
		x.XRCETH = h.Value()
	}
	if h := p.FETH(); h != nil {
		x.FETH = h.Word()
	}
	if h := p.RETH(); h != nil {
		x.RETH = h.Fields()
	}
	if h := p.AtomicETH(); h != nil {
		x.AtomicETH = h.Fields()
	}
	if h := p.AETH(); h != nil {
		x.AETH = AETHFields{h.Syndrome(), h.MSN()}
	}
	if h := p.AtomicAckETH(); h != nil {
		x.AtomicAck = h.OrigData()
	}
	if h := p.ImmDt(); h != nil {
		x.ImmDt = h.Value()
	}
	if h := p.IETH(); h != nil {
		x.IETH = h.Value()
	}
	if h := p.Header(HdrCNPReserved); h != nil {
		copy(x.CNPReserved[:], h)
	}
	return f
}

// AppendTransport appends the IBA transport packet (BTH, extended headers,
// payload and pad) without the ICRC, setting the BTH pad count from the
// payload length.
func (f *PacketFields) AppendTransport(b []byte) []byte {
	info := &opcodeTable[f.BTH.Opcode]
	bth := f.BTH
	pad := (4 - len(f.Payload)%4) % 4
	bth.PadCount = pad
	b = bth.Append(b)
	x := &f.Ext
	// The opcode's headers, lowest first (their order in the packet).
	for hs := info.Headers; hs != 0; hs &= hs - 1 {
		switch h := Header(bits.TrailingZeros16(uint16(hs))); h {
		case HdrRDETH:
			b = AppendWord24(b, 0, x.RDETH)
		case HdrDETH:
			b = x.DETH.Append(b)
		case HdrXRCETH:
			b = AppendWord24(b, 0, x.XRCETH)
		case HdrFETH:
			b = AppendFETH(b, x.FETH)
		case HdrRETH:
			b = x.RETH.Append(b)
		case HdrAtomicETH:
			b = x.AtomicETH.Append(b)
		case HdrAETH:
			b = AppendAETH(b, x.AETH.Syndrome, x.AETH.MSN)
		case HdrAtomicAckETH:
			b = AppendAtomicAckETH(b, x.AtomicAck)
		case HdrImmDt:
			b = AppendWord32(b, x.ImmDt)
		case HdrIETH:
			b = AppendWord32(b, x.IETH)
		case HdrCNPReserved:
			b = append(b, x.CNPReserved[:]...)
		}
	}
	b = append(b, f.Payload...)
	for ; pad > 0; pad-- {
		b = append(b, 0)
	}
	return b
}

// Append appends the encoded packet to b. It computes what the fields
// leave to the encoder: the Ethertype, IPv4 total length and header
// checksum, IPv6/GRH payload length, UDP length, BTH pad count, pad bytes
// and the ICRC. Other fields are written as given.
func (f *PacketFields) Append(b []byte) ([]byte, error) {
	start := len(b)
	h := Headers{Version: f.Version, Eth: f.Eth, IPv4: f.IPv4, IPv6: f.IPv6, GRH: f.GRH, UDP: f.UDP}
	b, nethdr, nlen, ipVer, err := h.appendHeaders(b)
	if err != nil {
		return b, err
	}
	if !opcodeTable[f.BTH.Opcode].Valid() {
		return b[:start], fmt.Errorf("encode: unknown opcode %#02x", uint8(f.BTH.Opcode))
	}
	b = f.AppendTransport(b)
	b = append(b, 0, 0, 0, 0) // ICRC
	end := len(b)
	// Lengths and checksums, then the ICRC over the final headers.
	h.setLengths(b[nethdr:], nlen, ipVer, end-nethdr)
	putICRC(b[end-ICRCLen:], icrcInPlace(b[nethdr:end-ICRCLen], nlen, ipVer, f.Version)) // Append owns b
	return append(b, f.Trailer...), nil
}

// Headers holds the headers that precede a transport packet, for
// encoding with Append: what PacketFields holds of them, in a struct small
// enough to build per packet.
type Headers struct {
	Version Version
	Eth     *EthernetFields // EtherType is set by Append
	IPv4    *IPv4Fields     // RoCE v2 over IPv4
	IPv6    *IPv6Fields     // RoCE v2 over IPv6
	GRH     *GRHFields      // RoCE v1
	UDP     UDPFields       // RoCE v2; Length is set by Append
}

// Append appends the headers that precede a transport packet of
// transportLen bytes (BTH through ICRC): the Ethernet header if h.Eth is
// set, then the GRH of RoCE v1, or the IPv4 or IPv6 header and the UDP
// header of RoCE v2. It computes what PacketFields.Append computes for
// them (the Ethertype, the IP and UDP lengths and the IPv4 header
// checksum), and returns b and the length of the network header, which
// ICRC needs. It allocates nothing when b has the room: the links encode
// into the headroom before their transport packets with it.
func (h *Headers) Append(b []byte, transportLen int) ([]byte, int, error) {
	b, nethdr, nlen, ipVer, err := h.appendHeaders(b)
	if err != nil {
		return b, 0, err
	}
	h.setLengths(b[nethdr:], nlen, ipVer, len(b)-nethdr+transportLen)
	return b, nlen, nil
}

// appendHeaders appends the Ethernet (if any), network and UDP headers as
// given, the Ethertype set; it returns b, the offset of the network header
// in b, its length and its IP version (6 for a GRH).
func (f *Headers) appendHeaders(b []byte) (_ []byte, nethdr, nlen int, ipVer uint8, _ error) {
	switch f.Version {
	case RoCEv1:
		if f.GRH == nil || f.IPv4 != nil || f.IPv6 != nil {
			return b, 0, 0, 0, fmt.Errorf("encode: RoCE v1 needs a GRH and no IP header")
		}
		if f.Eth != nil {
			e := *f.Eth
			e.EtherType = EtherTypeRoCE
			b = e.Append(b)
		}
		nethdr, nlen, ipVer = len(b), GRHLen, 6
		b = f.GRH.Append(b)
	case RoCEv2:
		if f.GRH != nil || (f.IPv4 == nil) == (f.IPv6 == nil) {
			return b, 0, 0, 0, fmt.Errorf("encode: RoCE v2 needs exactly one of IPv4 and IPv6")
		}
		if f.IPv4 != nil {
			if err := checkIPv4(f.IPv4); err != nil {
				return b, 0, 0, 0, err
			}
		}
		if f.Eth != nil {
			e := *f.Eth
			e.EtherType = EtherTypeIPv4
			if f.IPv6 != nil {
				e.EtherType = EtherTypeIPv6
			}
			b = e.Append(b)
		}
		nethdr = len(b)
		if f.IPv4 != nil {
			b = f.IPv4.Append(b)
			ipVer = 4
		} else {
			b = f.IPv6.Append(b)
			ipVer = 6
		}
		nlen = len(b) - nethdr
		b = f.UDP.Append(b)
	default:
		return b, 0, 0, 0, fmt.Errorf("encode: RoCE version %v", f.Version)
	}
	return b, nethdr, nlen, ipVer, nil
}

// setLengths sets the lengths in the headers at the start of n, a network
// header of nlen bytes (IP version ipVer) followed by a packet of total
// bytes in all, and the IPv4 header checksum over the result.
func (f *Headers) setLengths(n []byte, nlen int, ipVer uint8, total int) {
	setLengths(n, f.Version, nlen, ipVer, total, true)
}

// setLengths is Headers.setLengths for headers of RoCE version v; it
// leaves the IPv4 header checksum alone unless checksum is set.
func setLengths(n []byte, v Version, nlen int, ipVer uint8, total int, checksum bool) {
	switch {
	case v == RoCEv1 || ipVer == 6:
		IPv6(n).SetPayloadLen(total - IPv6Len)
	default:
		ip := IPv4(n[:nlen])
		ip.SetTotalLen(total)
		if checksum {
			ip.SetChecksum(ip.ComputeChecksum())
		}
	}
	if v == RoCEv2 {
		UDP(n[nlen:]).SetLength(total - nlen)
	}
}

// maxHeadersLen bounds what Headers.Append writes: Ethernet with an 802.1Q
// tag, an IPv4 header with 40 bytes of options, UDP.
const maxHeadersLen = EthernetLen + VLANTagLen + 60 + UDPLen

// HeaderTemplate is headers Headers.Append encoded once, kept to be written
// before many transport packets: from one packet to the next of a run to
// (or from) one peer only the lengths and the IPv4 Identification change,
// so a link pays for the encoder, and its checks, once per run.
//
// A masked template is for headers only the ICRC reads, as link/udp's are
// (the kernel writes the real ones): Put leaves the IPv4 header checksum as
// Set wrote it, for the ICRC masks it (IBTA Vol 1 Annex A17.8, see icrc),
// as it masks TOS, TTL, traffic class, flow label and hop limit, which
// such a caller may leave zero.
//
// The zero HeaderTemplate is empty (Len 0) until Set succeeds.
type HeaderTemplate struct {
	b       [maxHeadersLen]byte
	n       int // encoded length; 0 when empty
	nethdr  int // offset of the network header
	nlen    int // its length
	ipVer   uint8
	version Version
	masked  bool
}

// Set encodes h into t with Headers.Append's encoder and checks. On error
// t is empty.
func (t *HeaderTemplate) Set(h *Headers, masked bool) error {
	b, nethdr, nlen, ipVer, err := h.appendHeaders(t.b[:0])
	if err == nil && len(b) > len(t.b) { // unreachable: appendHeaders bounds the options
		err = fmt.Errorf("encode: %d bytes of headers, more than %d", len(b), len(t.b))
	}
	if err != nil {
		t.n = 0
		return err
	}
	t.n, t.nethdr, t.nlen, t.ipVer, t.version, t.masked = len(b), nethdr, nlen, ipVer, h.Version, masked
	return nil
}

// Len returns the length of the headers, 0 for an empty template.
func (t *HeaderTemplate) Len() int { return t.n }

// NetLen returns the length of the network header (IP header or GRH), which
// ICRC needs.
func (t *HeaderTemplate) NetLen() int { return t.nlen }

// Put writes the headers into dst[:t.Len()] for a transport packet (BTH
// through ICRC) of transportLen bytes, with IPv4 Identification id (ignored
// without IPv4), and sets the lengths and, unless t is masked, the IPv4
// header checksum, as Headers.Append does. It returns the length of the
// network header. dst must have room for t.Len() bytes.
func (t *HeaderTemplate) Put(dst []byte, transportLen int, id uint16) int {
	h := dst[:t.n]
	CopyHeaders(h, t.b[:t.n])
	n := h[t.nethdr:]
	if t.version == RoCEv2 && t.ipVer == 4 {
		IPv4(n).SetID(id)
	}
	setLengths(n, t.version, t.nlen, t.ipVer, len(n)+transportLen, !t.masked)
	return t.nlen
}

// checkIPv4 reports what IPv4Fields.Append cannot encode: an address that
// is not IPv4 (netip.Addr.As4 panics on it) or more than 40 bytes of
// options (the IHL has 4 bits: at most 60 bytes of header).
func checkIPv4(f *IPv4Fields) error {
	if !f.Src.Is4() && !f.Src.Is4In6() {
		return fmt.Errorf("encode: IPv4 source address %v is not IPv4", f.Src)
	}
	if !f.Dst.Is4() && !f.Dst.Is4In6() {
		return fmt.Errorf("encode: IPv4 destination address %v is not IPv4", f.Dst)
	}
	if len(f.Options) > 40 {
		return fmt.Errorf("encode: %d bytes of IPv4 options, more than 40", len(f.Options))
	}
	return nil
}

// Valid reports whether the opcode row is defined.
func (i *OpInfo) Valid() bool { return i.Name != "" }
