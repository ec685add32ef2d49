package wire

import (
	"encoding/binary"
	"net/netip"
	"slices"
)

// Ethertypes RoCE uses.
const (
	EtherTypeIPv4  = 0x0800
	EtherTypeARP   = 0x0806
	EtherTypeVLAN  = 0x8100 // IEEE 802.1Q
	EtherTypeIPv6  = 0x86DD
	EtherTypeRoCE  = 0x8915 // RoCE v1: IBA GRH + transport (IBTA Annex A16)
	EthernetLen    = 14
	VLANTagLen     = 4
	IPv4MinLen     = 20
	IPv6Len        = 40
	GRHLen         = 40
	UDPLen         = 8
	RoCEv2Port     = 4791 // IANA-assigned UDP destination port of RoCE v2 (Annex A17.2)
	IPProtocolUDP  = 17
	GRHNextHdrIBTH = 0x1B // GRH NxtHdr for an IBA transport header (§8.3.1)
)

// MAC is an Ethernet address.
type MAC [6]byte

func (m MAC) String() string {
	const hexd = "0123456789abcdef"
	b := make([]byte, 0, 17)
	for i, x := range m {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hexd[x>>4], hexd[x&15])
	}
	return string(b)
}

// Ethernet is an Ethernet II header, optionally followed by one 802.1Q tag.
// The view covers the header and the tag (14 or 18 bytes).
type Ethernet []byte

// ParseEthernet returns an Ethernet view over the header (and 802.1Q tag) at the start of b.
func ParseEthernet(b []byte) (Ethernet, error) {
	if len(b) < EthernetLen {
		return nil, truncated("Ethernet", EthernetLen, len(b))
	}
	if binary.BigEndian.Uint16(b[12:]) == EtherTypeVLAN {
		if len(b) < EthernetLen+VLANTagLen {
			return nil, truncated("802.1Q", EthernetLen+VLANTagLen, len(b))
		}
		return Ethernet(b[:EthernetLen+VLANTagLen]), nil
	}
	return Ethernet(b[:EthernetLen]), nil
}

func (h Ethernet) Dst() (m MAC)  { copy(m[:], h[0:6]); return }
func (h Ethernet) Src() (m MAC)  { copy(m[:], h[6:12]); return }
func (h Ethernet) HasVLAN() bool { return len(h) == EthernetLen+VLANTagLen }

// VLANTCI returns the 802.1Q tag control information (PCP 3 bits, DEI 1, VID 12), 0 without a tag.
func (h Ethernet) VLANTCI() uint16 {
	if !h.HasVLAN() {
		return 0
	}
	return binary.BigEndian.Uint16(h[14:])
}

// EtherType returns the Ethertype of the payload (inside the tag, if any).
func (h Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(h[len(h)-2:]) }

func (h Ethernet) SetDst(m MAC)          { copy(h[0:6], m[:]) }
func (h Ethernet) SetSrc(m MAC)          { copy(h[6:12], m[:]) }
func (h Ethernet) SetEtherType(t uint16) { binary.BigEndian.PutUint16(h[len(h)-2:], t) }

// EthernetFields holds an Ethernet header for encoding.
type EthernetFields struct {
	Dst, Src  MAC
	VLAN      bool   // add an 802.1Q tag
	VLANTCI   uint16 // PCP(3) DEI(1) VID(12)
	EtherType uint16
}

// Fields returns h's fields.
func (h Ethernet) Fields() EthernetFields {
	return EthernetFields{Dst: h.Dst(), Src: h.Src(), VLAN: h.HasVLAN(), VLANTCI: h.VLANTCI(), EtherType: h.EtherType()}
}

// Len returns the encoded length: 14, or 18 with a tag.
func (f *EthernetFields) Len() int {
	if f.VLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// Append appends the encoded header to b.
func (f *EthernetFields) Append(b []byte) []byte {
	b = append(b, f.Dst[:]...)
	b = append(b, f.Src[:]...)
	if f.VLAN {
		b = binary.BigEndian.AppendUint16(b, EtherTypeVLAN)
		b = binary.BigEndian.AppendUint16(b, f.VLANTCI)
	}
	return binary.BigEndian.AppendUint16(b, f.EtherType)
}

// IPv4 is an IPv4 header (RFC 791), options included.
type IPv4 []byte

// ParseIPv4 returns an IPv4 view over the header at the start of b, after
// checking the version, IHL and total length against len(b).
func ParseIPv4(b []byte) (IPv4, error) {
	if len(b) < IPv4MinLen {
		return nil, truncated("IPv4", IPv4MinLen, len(b))
	}
	if v := b[0] >> 4; v != 4 {
		return nil, malformed("IPv4", "version %d", v)
	}
	ihl := int(b[0]&0xF) * 4
	if ihl < IPv4MinLen {
		return nil, malformed("IPv4", "header length %d < 20", ihl)
	}
	if len(b) < ihl {
		return nil, truncated("IPv4", ihl, len(b))
	}
	tl := int(binary.BigEndian.Uint16(b[2:]))
	if tl < ihl {
		return nil, malformed("IPv4", "total length %d < header length %d", tl, ihl)
	}
	if tl > len(b) {
		return nil, truncated("IPv4", tl, len(b))
	}
	return IPv4(b[:ihl]), nil
}

func (h IPv4) HeaderLen() int       { return int(h[0]&0xF) * 4 }
func (h IPv4) TOS() uint8           { return h[1] }
func (h IPv4) DSCP() uint8          { return h[1] >> 2 }
func (h IPv4) ECN() uint8           { return h[1] & 3 }
func (h IPv4) TotalLen() int        { return int(binary.BigEndian.Uint16(h[2:])) }
func (h IPv4) ID() uint16           { return binary.BigEndian.Uint16(h[4:]) }
func (h IPv4) Flags() uint8         { return h[6] >> 5 }
func (h IPv4) DontFragment() bool   { return h[6]&0x40 != 0 }
func (h IPv4) FragOffset() uint16   { return binary.BigEndian.Uint16(h[6:]) & 0x1FFF }
func (h IPv4) TTL() uint8           { return h[8] }
func (h IPv4) Protocol() uint8      { return h[9] }
func (h IPv4) Checksum() uint16     { return binary.BigEndian.Uint16(h[10:]) }
func (h IPv4) Src() netip.Addr      { return netip.AddrFrom4([4]byte(h[12:16])) }
func (h IPv4) Dst() netip.Addr      { return netip.AddrFrom4([4]byte(h[16:20])) }
func (h IPv4) Options() []byte      { return h[IPv4MinLen:h.HeaderLen()] }
func (h IPv4) SetTOS(t uint8)       { h[1] = t }
func (h IPv4) SetID(id uint16)      { binary.BigEndian.PutUint16(h[4:], id) }
func (h IPv4) SetTTL(t uint8)       { h[8] = t }
func (h IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[10:], c) }
func (h IPv4) SetTotalLen(n int)    { binary.BigEndian.PutUint16(h[2:], uint16(n)) }

// ComputeChecksum returns the header checksum (RFC 791, RFC 1071) the
// header should carry.
func (h IPv4) ComputeChecksum() uint16 {
	// Sum 32-bit words (RFC 1071 §2(B): the sum is independent of the word
	// size once folded), then take the checksum field back out: no branch
	// in the loop, a quarter of the loads. Encoders run it per packet.
	var sum uint64
	b := h
	if len(b) >= IPv4MinLen { // the fixed header, unrolled
		sum = uint64(binary.BigEndian.Uint32(b[16:])) + uint64(binary.BigEndian.Uint32(b[12:])) +
			uint64(binary.BigEndian.Uint32(b[8:])) + uint64(binary.BigEndian.Uint32(b[4:])) + uint64(binary.BigEndian.Uint32(b))
		b = b[IPv4MinLen:]
	}
	for len(b) >= 4 {
		sum += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		sum += uint64(binary.BigEndian.Uint16(b)) << 16
	}
	sum -= uint64(h.Checksum())
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return ^uint16(sum)
}

// IPv4Fields holds an IPv4 header for encoding. Zero TotalLen and Checksum
// are computed by Packet encoding; see PacketFields.
type IPv4Fields struct {
	TOS        uint8
	TotalLen   int
	ID         uint16
	Flags      uint8 // bit 1 (0x2) = DF
	FragOffset uint16
	TTL        uint8
	Protocol   uint8
	Checksum   uint16
	Src, Dst   netip.Addr
	Options    []byte // a multiple of 4 bytes, at most 40
}

// Fields returns h's fields. Options alias h.
func (h IPv4) Fields() IPv4Fields {
	f := IPv4Fields{TOS: h.TOS(), TotalLen: h.TotalLen(), ID: h.ID(), Flags: h.Flags(),
		FragOffset: h.FragOffset(), TTL: h.TTL(), Protocol: h.Protocol(), Checksum: h.Checksum(),
		Src: h.Src(), Dst: h.Dst()}
	if o := h.Options(); len(o) > 0 {
		f.Options = o
	}
	return f
}

// Append appends the header exactly as given (no length or checksum computed).
func (f *IPv4Fields) Append(b []byte) []byte {
	ihl := (IPv4MinLen + len(f.Options) + 3) / 4
	n := len(b)
	b = slices.Grow(b, ihl*4)[:n+ihl*4]
	h := b[n:]
	h[0], h[1] = 0x40|byte(ihl), f.TOS
	binary.BigEndian.PutUint16(h[2:], uint16(f.TotalLen))
	binary.BigEndian.PutUint16(h[4:], f.ID)
	binary.BigEndian.PutUint16(h[6:], uint16(f.Flags&7)<<13|f.FragOffset&0x1FFF)
	h[8], h[9] = f.TTL, f.Protocol
	binary.BigEndian.PutUint16(h[10:], f.Checksum)
	s, d := f.Src.As4(), f.Dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	clear(h[IPv4MinLen+copy(h[IPv4MinLen:], f.Options):]) // options, then zero padding
	return b
}

// IPv6 is an IPv6 header (RFC 8200) or, with the same layout, the IBA
// Global Route Header of RoCE v1 (IBTA Vol 1 §8.3, Figure 19), where
// NextHeader is 0x1B and addresses are GIDs.
type IPv6 []byte

// GRH is the Global Route Header of RoCE v1; its layout is IPv6's.
type GRH = IPv6

// ParseIPv6 returns an IPv6 view over the fixed header at the start of b and
// checks the payload length against len(b).
func ParseIPv6(b []byte) (IPv6, error) { return parseIPv6Like("IPv6", 6, b) }

// ParseGRH returns a GRH view over the first 40 bytes of b (IPVer 6, §8.3.1).
func ParseGRH(b []byte) (GRH, error) { return parseIPv6Like("GRH", 6, b) }

func parseIPv6Like(layer string, ver uint8, b []byte) (IPv6, error) {
	if len(b) < IPv6Len {
		return nil, truncated(layer, IPv6Len, len(b))
	}
	if v := b[0] >> 4; v != ver {
		return nil, malformed(layer, "version %d", v)
	}
	if pl := int(binary.BigEndian.Uint16(b[4:])); IPv6Len+pl > len(b) {
		return nil, truncated(layer, IPv6Len+pl, len(b))
	}
	return IPv6(b[:IPv6Len]), nil
}

func (h IPv6) Version() uint8      { return h[0] >> 4 }
func (h IPv6) TrafficClass() uint8 { return h[0]<<4 | h[1]>>4 }
func (h IPv6) FlowLabel() uint32   { return binary.BigEndian.Uint32(h[0:]) & 0xFFFFF }
func (h IPv6) PayloadLen() int     { return int(binary.BigEndian.Uint16(h[4:])) }
func (h IPv6) NextHeader() uint8   { return h[6] }
func (h IPv6) HopLimit() uint8     { return h[7] }
func (h IPv6) Src() netip.Addr     { return netip.AddrFrom16([16]byte(h[8:24])) }
func (h IPv6) Dst() netip.Addr     { return netip.AddrFrom16([16]byte(h[24:40])) }
func (h IPv6) SetPayloadLen(n int) { binary.BigEndian.PutUint16(h[4:], uint16(n)) }
func (h IPv6) SetHopLimit(n uint8) { h[7] = n }
func (h IPv6) SetTrafficClass(t uint8) {
	binary.BigEndian.PutUint32(h, binary.BigEndian.Uint32(h)&^0x0FF00000|uint32(t)<<20)
}

// IPv6Fields holds an IPv6 header or GRH for encoding.
type IPv6Fields struct {
	Version      uint8 // 6; zero means 6
	TrafficClass uint8
	FlowLabel    uint32
	PayloadLen   int
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr // GIDs for a GRH
}

// GRHFields holds a GRH for encoding.
type GRHFields = IPv6Fields

// Fields returns h's fields.
func (h IPv6) Fields() IPv6Fields {
	return IPv6Fields{Version: h.Version(), TrafficClass: h.TrafficClass(), FlowLabel: h.FlowLabel(),
		PayloadLen: h.PayloadLen(), NextHeader: h.NextHeader(), HopLimit: h.HopLimit(), Src: h.Src(), Dst: h.Dst()}
}

// Append appends the header exactly as given.
func (f *IPv6Fields) Append(b []byte) []byte {
	v := f.Version
	if v == 0 {
		v = 6
	}
	n := len(b)
	b = slices.Grow(b, IPv6Len)[:n+IPv6Len]
	h := b[n:]
	binary.BigEndian.PutUint32(h, uint32(v&0xF)<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(h[4:], uint16(f.PayloadLen))
	h[6], h[7] = f.NextHeader, f.HopLimit
	s, d := f.Src.As16(), f.Dst.As16()
	copy(h[8:24], s[:])
	copy(h[24:40], d[:])
	return b
}

// UDP is a UDP header (RFC 768).
type UDP []byte

// ParseUDP returns a UDP view over b and checks the length field against len(b).
func ParseUDP(b []byte) (UDP, error) {
	if len(b) < UDPLen {
		return nil, truncated("UDP", UDPLen, len(b))
	}
	l := int(binary.BigEndian.Uint16(b[4:]))
	if l < UDPLen {
		return nil, malformed("UDP", "length %d < 8", l)
	}
	if l > len(b) {
		return nil, truncated("UDP", l, len(b))
	}
	return UDP(b[:UDPLen]), nil
}

func (h UDP) SrcPort() uint16      { return binary.BigEndian.Uint16(h[0:]) }
func (h UDP) DstPort() uint16      { return binary.BigEndian.Uint16(h[2:]) }
func (h UDP) Length() int          { return int(binary.BigEndian.Uint16(h[4:])) }
func (h UDP) Checksum() uint16     { return binary.BigEndian.Uint16(h[6:]) }
func (h UDP) SetSrcPort(p uint16)  { binary.BigEndian.PutUint16(h[0:], p) }
func (h UDP) SetDstPort(p uint16)  { binary.BigEndian.PutUint16(h[2:], p) }
func (h UDP) SetLength(n int)      { binary.BigEndian.PutUint16(h[4:], uint16(n)) }
func (h UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(h[6:], c) }

// UDPFields holds a UDP header for encoding.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           int
	Checksum         uint16 // rxe sends 0 over IPv4 and IPv6
}

// Fields returns h's fields.
func (h UDP) Fields() UDPFields { return UDPFields{h.SrcPort(), h.DstPort(), h.Length(), h.Checksum()} }

// Append appends the header exactly as given.
func (f *UDPFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, f.SrcPort)
	b = binary.BigEndian.AppendUint16(b, f.DstPort)
	b = binary.BigEndian.AppendUint16(b, uint16(f.Length))
	return binary.BigEndian.AppendUint16(b, f.Checksum)
}

// CopyHeaders copies src into dst, as copy does, and returns the number of
// bytes copied; made for a packet's network and UDP headers, it copies
// those of RoCE v2 over IPv4 without options (28 bytes) and over IPv6 (48)
// in moves of constant length, which the compiler emits inline, where copy
// calls runtime.memmove: in the lab's QEMU VMs a call costs 15-150 ns,
// by how much of the rest of a round trip runs the callee too
// (BENCHMARKS.md, "What the VMs charge for"), and the packet path copies
// headers several times a round trip. The moves are 16 bytes at
// most: a longer one at a variable address the compiler leaves to
// memmove, since source and destination might overlap (a 16-byte move
// loads all of its source before it stores).
func CopyHeaders(dst, src []byte) int {
	switch {
	case len(src) == IPv4MinLen+UDPLen && len(dst) >= IPv4MinLen+UDPLen:
		*(*[16]byte)(dst) = [16]byte(src)
		*(*[12]byte)(dst[16:]) = [12]byte(src[16:])
		return IPv4MinLen + UDPLen
	case len(src) == IPv6Len+UDPLen && len(dst) >= IPv6Len+UDPLen:
		*(*[16]byte)(dst) = [16]byte(src)
		*(*[16]byte)(dst[16:]) = [16]byte(src[16:])
		*(*[16]byte)(dst[32:]) = [16]byte(src[32:])
		return IPv6Len + UDPLen
	}
	return copy(dst, src)
}
