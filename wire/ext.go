package wire

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Extended transport header lengths (IBTA Vol 1 §9.3, §9.4; Annex A14; 1.5 Memory Placement Extensions).
const (
	RDETHLen        = 4
	DETHLen         = 8
	XRCETHLen       = 4
	FETHLen         = 4
	RETHLen         = 16
	AtomicETHLen    = 28
	AETHLen         = 4
	AtomicAckETHLen = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPReservedLen  = 16
	ICRCLen         = 4
)

func view(layer string, b []byte, n int) ([]byte, error) {
	if len(b) < n {
		return nil, truncated(layer, n, len(b))
	}
	return b[:n], nil
}

// RETH is the RDMA Extended Transport Header (§9.3.3): virtual address,
// R_Key and DMA length of an RDMA WRITE, READ or FLUSH.
type RETH []byte

// ParseRETH returns a RETH view over b.
func ParseRETH(b []byte) (RETH, error) { v, err := view("RETH", b, RETHLen); return RETH(v), err }

func (h RETH) VA() uint64            { return binary.BigEndian.Uint64(h[0:]) }
func (h RETH) RKey() uint32          { return binary.BigEndian.Uint32(h[8:]) }
func (h RETH) DMALength() uint32     { return binary.BigEndian.Uint32(h[12:]) }
func (h RETH) SetVA(v uint64)        { binary.BigEndian.PutUint64(h[0:], v) }
func (h RETH) SetRKey(k uint32)      { binary.BigEndian.PutUint32(h[8:], k) }
func (h RETH) SetDMALength(n uint32) { binary.BigEndian.PutUint32(h[12:], n) }

// RETHFields holds a RETH for encoding.
type RETHFields struct {
	VA        uint64
	RKey      uint32
	DMALength uint32
}

func (h RETH) Fields() RETHFields { return RETHFields{h.VA(), h.RKey(), h.DMALength()} }

// Append appends the encoded RETH to b.
func (f *RETHFields) Append(b []byte) []byte {
	b, v := grow(b, RETHLen)
	h := RETH(v)
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetDMALength(f.DMALength)
	return b
}

// AtomicETH is the Atomic Extended Transport Header (§9.3.4).
type AtomicETH []byte

// ParseAtomicETH returns an AtomicETH view over b.
func ParseAtomicETH(b []byte) (AtomicETH, error) {
	v, err := view("AtomicETH", b, AtomicETHLen)
	return AtomicETH(v), err
}

func (h AtomicETH) VA() uint64   { return binary.BigEndian.Uint64(h[0:]) }
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SwapAdd is the swap value (Compare&Swap) or the addend (Fetch&Add).
func (h AtomicETH) SwapAdd() uint64     { return binary.BigEndian.Uint64(h[12:]) }
func (h AtomicETH) Compare() uint64     { return binary.BigEndian.Uint64(h[20:]) }
func (h AtomicETH) SetVA(v uint64)      { binary.BigEndian.PutUint64(h[0:], v) }
func (h AtomicETH) SetRKey(k uint32)    { binary.BigEndian.PutUint32(h[8:], k) }
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// AtomicETHFields holds an AtomicETH for encoding.
type AtomicETHFields struct {
	VA      uint64
	RKey    uint32
	SwapAdd uint64
	Compare uint64
}

func (h AtomicETH) Fields() AtomicETHFields {
	return AtomicETHFields{h.VA(), h.RKey(), h.SwapAdd(), h.Compare()}
}

// Append appends the encoded AtomicETH to b.
func (f *AtomicETHFields) Append(b []byte) []byte {
	b, v := grow(b, AtomicETHLen)
	h := AtomicETH(v)
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
	return b
}

// AtomicAckETH carries the original remote data of an atomic (§9.5.3).
type AtomicAckETH []byte

// ParseAtomicAckETH returns an AtomicAckETH view over b.
func ParseAtomicAckETH(b []byte) (AtomicAckETH, error) {
	v, err := view("AtomicAckETH", b, AtomicAckETHLen)
	return AtomicAckETH(v), err
}

func (h AtomicAckETH) OrigData() uint64     { return binary.BigEndian.Uint64(h) }
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// AppendAtomicAckETH appends an AtomicAckETH carrying orig to b.
func AppendAtomicAckETH(b []byte, orig uint64) []byte { return binary.BigEndian.AppendUint64(b, orig) }

// DETH is the Datagram Extended Transport Header (§9.3.2): Q_Key and source QP.
type DETH []byte

// ParseDETH returns a DETH view over b.
func ParseDETH(b []byte) (DETH, error) { v, err := view("DETH", b, DETHLen); return DETH(v), err }

func (h DETH) QKey() uint32      { return binary.BigEndian.Uint32(h[0:]) }
func (h DETH) Reserved() uint8   { return h[4] }
func (h DETH) SrcQP() uint32     { return be24(h[5:]) }
func (h DETH) SetQKey(k uint32)  { binary.BigEndian.PutUint32(h[0:], k) }
func (h DETH) SetSrcQP(q uint32) { putBE24(h[5:], q) }

// DETHFields holds a DETH for encoding.
type DETHFields struct {
	QKey     uint32
	Reserved uint8
	SrcQP    uint32
}

func (h DETH) Fields() DETHFields { return DETHFields{h.QKey(), h.Reserved(), h.SrcQP()} }

// Append appends the encoded DETH to b.
func (f *DETHFields) Append(b []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, f.QKey)
	return append(b, f.Reserved, byte(f.SrcQP>>16), byte(f.SrcQP>>8), byte(f.SrcQP))
}

// GSIQKey is the well-known Q_Key of QP1, the General Services Interface (§13.5.3.1);
// Linux's CM sends its MADs with it.
const GSIQKey = 0x80010000

// Word24 is the view of a 4-byte header holding 8 reserved bits and a 24-bit
// value: RDETH (EE context, §9.3.1) and XRCETH (XRC SRQ number, Annex A14).
type Word24 []byte

// RDETH is the Reliable Datagram ETH; Value is the EE context.
type RDETH = Word24

// XRCETH is the XRC ETH; Value is the XRC SRQ number.
type XRCETH = Word24

// ParseWord24 returns a Word24 view over b.
func ParseWord24(layer string, b []byte) (Word24, error) {
	v, err := view(layer, b, 4)
	return Word24(v), err
}

func (h Word24) Reserved() uint8   { return h[0] }
func (h Word24) Value() uint32     { return be24(h[1:]) }
func (h Word24) SetValue(v uint32) { putBE24(h[1:], v) }

// AppendWord24 appends a reserved byte and a 24-bit value.
func AppendWord24(b []byte, reserved uint8, v uint32) []byte {
	return append(b, reserved, byte(v>>16), byte(v>>8), byte(v))
}

// Word32 is the view of a 4-byte header holding one 32-bit value: ImmDt
// (immediate data, §9.3.5) and IETH (the R_Key to invalidate, §9.3.6).
type Word32 []byte

// ParseWord32 returns a Word32 view over b.
func ParseWord32(layer string, b []byte) (Word32, error) {
	v, err := view(layer, b, 4)
	return Word32(v), err
}

func (h Word32) Value() uint32     { return binary.BigEndian.Uint32(h) }
func (h Word32) SetValue(v uint32) { binary.BigEndian.PutUint32(h, v) }

// ImmDt is the Immediate Data header; Value is the immediate data.
type ImmDt = Word32

// IETH is the Invalidate ETH; Value is the R_Key to invalidate.
type IETH = Word32

// AppendWord32 appends a 32-bit value: an ImmDt carrying immediate data v
// or an IETH carrying the R_Key v to invalidate.
func AppendWord32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// FETH is the FLUSH Extended Transport Header (IBTA 1.5 Memory Placement
// Extensions; rxe_hdr.h): selectivity level in bits 5-4, placement type in
// bits 3-0 of a 32-bit word.
type FETH []byte

// Placement types (FETH bits 3-0).
const (
	FlushGlobalVisibility = 1 << 0
	FlushPersistence      = 1 << 1
)

// Selectivity levels (FETH bits 5-4).
const (
	FlushSelMRRange = 0 // the range in the RETH
	FlushSelWholeMR = 1 // the whole memory region
)

// ParseFETH returns a FETH view over b.
func ParseFETH(b []byte) (FETH, error) { v, err := view("FETH", b, FETHLen); return FETH(v), err }

func (h FETH) Word() uint32         { return binary.BigEndian.Uint32(h) }
func (h FETH) Selectivity() uint8   { return uint8(h.Word()>>4) & 3 }
func (h FETH) PlacementType() uint8 { return uint8(h.Word()) & 0xF }
func (h FETH) SetWord(w uint32)     { binary.BigEndian.PutUint32(h, w) }

// FETHWord builds a FETH word from a selectivity level and placement type.
func FETHWord(sel, placement uint8) uint32 { return uint32(sel&3)<<4 | uint32(placement&0xF) }

// AppendFETH appends a FETH holding word w (see FETHWord); its reserved
// bits are written as given.
func AppendFETH(b []byte, w uint32) []byte { return binary.BigEndian.AppendUint32(b, w) }

// AETH is the ACK Extended Transport Header (IBTA Vol 1 §9.3): an 8-bit
// syndrome and a 24-bit MSN.
type AETH []byte

// ParseAETH returns an AETH view over b.
func ParseAETH(b []byte) (AETH, error) { v, err := view("AETH", b, AETHLen); return AETH(v), err }

func (h AETH) Syndrome() Syndrome     { return Syndrome(h[0]) }
func (h AETH) MSN() uint32            { return be24(h[1:]) }
func (h AETH) SetSyndrome(s Syndrome) { h[0] = byte(s) }
func (h AETH) SetMSN(m uint32)        { putBE24(h[1:], m) }

// AppendAETH appends an AETH to b.
func AppendAETH(b []byte, s Syndrome, msn uint32) []byte {
	return append(b, byte(s), byte(msn>>16), byte(msn>>8), byte(msn))
}

// Syndrome is the AETH syndrome (IBTA Vol 1 §9.7.5.2.1, Table 43): bit 7
// reserved, bits 6-5 the type (ACK, RNR NAK, NAK), bits 4-0 a credit count
// (ACK), a timer code (RNR NAK) or a NAK code.
type Syndrome uint8

// SyndromeType is bits 6-5 of a Syndrome.
type SyndromeType uint8

// Syndrome types.
const (
	SynACK      SyndromeType = 0
	SynRNRNAK   SyndromeType = 1
	SynReserved SyndromeType = 2
	SynNAK      SyndromeType = 3
)

// NAK codes (Table 44).
const (
	NAKPSNSequenceError       = 0
	NAKInvalidRequest         = 1
	NAKRemoteAccessError      = 2
	NAKRemoteOperationalError = 3
	NAKInvalidRDRequest       = 4
)

// CreditsInvalid is the ACK credit code that means "no credit count"
// (end-to-end flow control off); rxe always sends it (syndrome 0x1f).
const CreditsInvalid = 31

// Common syndromes.
const (
	SyndromeACK          Syndrome = Syndrome(SynACK)<<5 | CreditsInvalid // 0x1f, as rxe sends
	SyndromePSNSeqErr    Syndrome = Syndrome(SynNAK)<<5 | NAKPSNSequenceError
	SyndromeInvalidReq   Syndrome = Syndrome(SynNAK)<<5 | NAKInvalidRequest
	SyndromeRemAccessErr Syndrome = Syndrome(SynNAK)<<5 | NAKRemoteAccessError
	SyndromeRemOpErr     Syndrome = Syndrome(SynNAK)<<5 | NAKRemoteOperationalError
	SyndromeInvalidRDReq Syndrome = Syndrome(SynNAK)<<5 | NAKInvalidRDRequest
)

// RNRNAK returns the RNR NAK syndrome with timer code t (0-31).
func RNRNAK(t uint8) Syndrome { return Syndrome(SynRNRNAK)<<5 | Syndrome(t&31) }

// ACKWithCredits returns the ACK syndrome with credit code c (0-31).
func ACKWithCredits(c uint8) Syndrome { return Syndrome(SynACK)<<5 | Syndrome(c&31) }

func (s Syndrome) Type() SyndromeType { return SyndromeType(s>>5) & 3 }
func (s Syndrome) Value() uint8       { return uint8(s) & 31 }
func (s Syndrome) IsACK() bool        { return s.Type() == SynACK }
func (s Syndrome) IsNAK() bool        { return s.Type() == SynNAK }
func (s Syndrome) IsRNRNAK() bool     { return s.Type() == SynRNRNAK }

var nakNames = [...]string{
	NAKPSNSequenceError:       "PSN Sequence Error",
	NAKInvalidRequest:         "Invalid Request",
	NAKRemoteAccessError:      "Remote Access Error",
	NAKRemoteOperationalError: "Remote Operational Error",
	NAKInvalidRDRequest:       "Invalid RD Request",
}

// String names the syndrome as Wireshark does: "ACK (credits: invalid)",
// "ACK (credits: 64)", "RNR NAK (timer 0.64 ms)", "NAK PSN Sequence Error".
func (s Syndrome) String() string {
	switch s.Type() {
	case SynACK:
		if s.Value() == CreditsInvalid {
			return "ACK (credits: invalid)"
		}
		return fmt.Sprintf("ACK (credits: %d)", ACKCredits(s.Value()))
	case SynRNRNAK:
		// In milliseconds with two decimals, as IBTA Table 46 lists the
		// timer values (and ib_verbs.h names them: IB_RNR_TIMER_000_64).
		t := rnrTimer10ns[s.Value()] / 1000 // hundredths of a millisecond
		return fmt.Sprintf("RNR NAK (timer %d.%02d ms)", t/100, t%100)
	case SynNAK:
		if int(s.Value()) < len(nakNames) {
			return "NAK " + nakNames[s.Value()]
		}
		return fmt.Sprintf("NAK reserved code %d", s.Value())
	}
	return fmt.Sprintf("reserved syndrome %#02x", uint8(s))
}

// ackCredits is IBTA Vol 1 Table 45: credit code → number of credits.
var ackCredits = [31]int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256,
	384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// ACKCredits returns the number of receive credits an ACK credit code
// means, or -1 for the invalid code 31.
func ACKCredits(code uint8) int {
	if code >= CreditsInvalid {
		return -1
	}
	return ackCredits[code]
}

// rnrTimer10ns is IBTA Vol 1 Table 46: RNR NAK timer code → minimum delay,
// in units of 10 ns (code 0 is the largest, 655.36 ms).
var rnrTimer10ns = [32]int64{65536000, 1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000, 24000,
	32000, 48000, 64000, 96000, 128000, 192000, 256000, 384000, 512000, 768000, 1024000,
	1536000, 2048000, 3072000, 4096000, 6144000, 8192000, 12288000, 16384000, 24576000,
	32768000, 49152000}

// RNRTimer returns the minimum RNR NAK delay that timer code t (0-31) asks for.
func RNRTimer(t uint8) time.Duration { return time.Duration(rnrTimer10ns[t&31]) * 10 * time.Nanosecond }
