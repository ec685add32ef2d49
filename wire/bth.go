package wire

import "encoding/binary"

// BTHLen is the length of the Base Transport Header.
const BTHLen = 12

// BTH is the Base Transport Header (IBTA Vol 1 §9.2, Figure 26):
//
//	byte 0      OpCode
//	byte 1      SE(1) MigReq(1) PadCnt(2) TVer(4)
//	bytes 2-3   P_Key
//	byte 4      FECN(1) BECN(1) Resv6a(6)   (the ICRC masks this whole byte)
//	bytes 5-7   DestQP
//	byte 8      AckReq(1) Resv7(7)
//	bytes 9-11  PSN
type BTH []byte

// ParseBTH returns a BTH view over b's first BTHLen bytes.
func ParseBTH(b []byte) (BTH, error) {
	if len(b) < BTHLen {
		return nil, truncated("BTH", BTHLen, len(b))
	}
	return BTH(b[:BTHLen]), nil
}

func (h BTH) Opcode() Opcode       { return Opcode(h[0]) }
func (h BTH) SolicitedEvent() bool { return h[1]&0x80 != 0 }
func (h BTH) MigReq() bool         { return h[1]&0x40 != 0 }
func (h BTH) PadCount() int        { return int(h[1]>>4) & 3 }
func (h BTH) TVer() uint8          { return h[1] & 0x0F }
func (h BTH) PKey() uint16         { return binary.BigEndian.Uint16(h[2:]) }
func (h BTH) FECN() bool           { return h[4]&0x80 != 0 }
func (h BTH) BECN() bool           { return h[4]&0x40 != 0 }
func (h BTH) Resv6a() uint8        { return h[4] & 0x3F }
func (h BTH) DestQP() uint32       { return be24(h[5:]) }
func (h BTH) AckReq() bool         { return h[8]&0x80 != 0 }
func (h BTH) Resv7() uint8         { return h[8] & 0x7F }
func (h BTH) PSN() PSN             { return PSN(be24(h[9:])) }

func (h BTH) SetOpcode(o Opcode)       { h[0] = byte(o) }
func (h BTH) SetSolicitedEvent(v bool) { h[1] = setBit(h[1], 0x80, v) }
func (h BTH) SetMigReq(v bool)         { h[1] = setBit(h[1], 0x40, v) }
func (h BTH) SetPadCount(n int)        { h[1] = h[1]&^0x30 | byte(n&3)<<4 }
func (h BTH) SetTVer(v uint8)          { h[1] = h[1]&^0x0F | v&0x0F }
func (h BTH) SetPKey(k uint16)         { binary.BigEndian.PutUint16(h[2:], k) }
func (h BTH) SetFECN(v bool)           { h[4] = setBit(h[4], 0x80, v) }
func (h BTH) SetBECN(v bool)           { h[4] = setBit(h[4], 0x40, v) }
func (h BTH) SetDestQP(qpn uint32)     { putBE24(h[5:], qpn) }
func (h BTH) SetAckReq(v bool)         { h[8] = setBit(h[8], 0x80, v) }
func (h BTH) SetPSN(p PSN)             { putBE24(h[9:], uint32(p)) }

// BTHFields holds every BTH field for encoding.
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int
	TVer           uint8
	PKey           uint16
	FECN, BECN     bool
	Resv6a         uint8
	DestQP         uint32
	AckReq         bool
	Resv7          uint8
	PSN            PSN
}

// Fields returns h's fields.
func (h BTH) Fields() BTHFields {
	return BTHFields{
		Opcode: h.Opcode(), SolicitedEvent: h.SolicitedEvent(), MigReq: h.MigReq(),
		PadCount: h.PadCount(), TVer: h.TVer(), PKey: h.PKey(), FECN: h.FECN(), BECN: h.BECN(),
		Resv6a: h.Resv6a(), DestQP: h.DestQP(), AckReq: h.AckReq(), Resv7: h.Resv7(), PSN: h.PSN(),
	}
}

// Append appends the encoded BTH to b.
func (f *BTHFields) Append(b []byte) []byte {
	b, h := grow(b, BTHLen)
	// Three big-endian words, not a setter per field: the requester and
	// the responder build a BTH per packet (bench/callgrind.sh).
	b1 := bit(f.SolicitedEvent, 0x80) | bit(f.MigReq, 0x40) | byte(f.PadCount&3)<<4 | f.TVer&0x0F
	b4 := bit(f.FECN, 0x80) | bit(f.BECN, 0x40) | f.Resv6a&0x3F
	b8 := bit(f.AckReq, 0x80) | f.Resv7&0x7F
	binary.BigEndian.PutUint32(h[0:], uint32(f.Opcode)<<24|uint32(b1)<<16|uint32(f.PKey))
	binary.BigEndian.PutUint32(h[4:], uint32(b4)<<24|f.DestQP&0xFFFFFF)
	binary.BigEndian.PutUint32(h[8:], uint32(b8)<<24|uint32(f.PSN)&0xFFFFFF)
	return b
}

// bit is v's bit: b when v, else 0.
func bit(v bool, b byte) byte {
	if v {
		return b
	}
	return 0
}

// DefaultPKey is the default partition key (full member of the default
// partition), the only one RoCE uses in practice.
const DefaultPKey = 0xFFFF

func be24(b []byte) uint32 { _ = b[2]; return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func putBE24(b []byte, v uint32) {
	_ = b[2]
	b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v)
}

func setBit(b, bit byte, v bool) byte {
	if v {
		return b | bit
	}
	return b &^ bit
}

// grow extends b by n bytes and returns the extended slice and the new n bytes.
func grow(b []byte, n int) ([]byte, []byte) {
	l := len(b)
	if cap(b)-l < n {
		nb := make([]byte, l, 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	b = b[:l+n]
	return b, b[l:]
}
