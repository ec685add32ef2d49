package wire_test

// Named table tests for every header view (ARCHITECTURE.md rule 13): the
// expected bytes are written out by hand from the IBTA figures and RFCs,
// not produced by the encoder, and each case checks the accessors (Fields),
// the encoder (Append), and the setters against them.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/wire"
)

// hexBytes decodes hex written with spaces or newlines for readability.
func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// checkAppend checks that append(prefix) writes want after an untouched prefix.
func checkAppend(t *testing.T, app func([]byte) []byte, want []byte) {
	t.Helper()
	if got := app(nil); !bytes.Equal(got, want) {
		t.Errorf("Append(nil)\n got %x\nwant %x", got, want)
	}
	prefix := []byte{0xAA, 0xBB, 0xCC}
	got := app(bytes.Clone(prefix))
	if !bytes.Equal(got[:3], prefix) || !bytes.Equal(got[3:], want) {
		t.Errorf("Append(prefix)\n got %x\nwant %x%x", got, prefix, want)
	}
}

// wantParseError checks that err is a *wire.ParseError naming layer (if
// layer is not empty) and whose reason contains reason.
func wantParseError(t *testing.T, err error, layer, reason string) {
	t.Helper()
	var pe *wire.ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T), want a *wire.ParseError", err, err)
	}
	if layer != "" && pe.Layer != layer {
		t.Errorf("error layer %q, want %q (%v)", pe.Layer, layer, err)
	}
	if !strings.Contains(pe.Reason, reason) {
		t.Errorf("error %q, want it to mention %q", err, reason)
	}
}

func TestBTH(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.BTHFields
		hex  string
	}{
		{"zero", wire.BTHFields{}, "00 00 0000 00 000000 00 000000"},
		{"typical RC_RDMA_WRITE_ONLY",
			wire.BTHFields{Opcode: 0x0A, SolicitedEvent: true, MigReq: true, PadCount: 2, PKey: 0xFFFF,
				FECN: true, DestQP: 0x123456, AckReq: true, PSN: 0xABCDEF},
			"0a e0 ffff 80 123456 80 abcdef"},
		{"opcode 0xff", wire.BTHFields{Opcode: 0xFF}, "ff 00 0000 00 000000 00 000000"},
		// Byte 1: SE(7) MigReq(6) PadCnt(5-4) TVer(3-0).
		{"SE is bit 7 of byte 1", wire.BTHFields{SolicitedEvent: true}, "00 80 0000 00 000000 00 000000"},
		{"MigReq is bit 6 of byte 1", wire.BTHFields{MigReq: true}, "00 40 0000 00 000000 00 000000"},
		{"PadCnt 1 is bit 4 of byte 1", wire.BTHFields{PadCount: 1}, "00 10 0000 00 000000 00 000000"},
		{"PadCnt 2 is bit 5 of byte 1", wire.BTHFields{PadCount: 2}, "00 20 0000 00 000000 00 000000"},
		{"PadCnt 3", wire.BTHFields{PadCount: 3}, "00 30 0000 00 000000 00 000000"},
		{"TVer 1 is bit 0 of byte 1", wire.BTHFields{TVer: 1}, "00 01 0000 00 000000 00 000000"},
		{"TVer 15 is bits 3-0 of byte 1", wire.BTHFields{TVer: 15}, "00 0f 0000 00 000000 00 000000"},
		// Bytes 2-3: P_Key, big-endian.
		{"P_Key", wire.BTHFields{PKey: 0x8001}, "00 00 8001 00 000000 00 000000"},
		// Byte 4: FECN(7) BECN(6) Resv6a(5-0).
		{"FECN is bit 7 of byte 4", wire.BTHFields{FECN: true}, "00 00 0000 80 000000 00 000000"},
		{"BECN is bit 6 of byte 4", wire.BTHFields{BECN: true}, "00 00 0000 40 000000 00 000000"},
		{"Resv6a is bits 5-0 of byte 4", wire.BTHFields{Resv6a: 0x3F}, "00 00 0000 3f 000000 00 000000"},
		{"Resv6a bit 0", wire.BTHFields{Resv6a: 0x01}, "00 00 0000 01 000000 00 000000"},
		// Bytes 5-7: DestQP, big-endian 24 bits.
		{"DestQP 1", wire.BTHFields{DestQP: 1}, "00 00 0000 00 000001 00 000000"},
		{"DestQP 0x800000", wire.BTHFields{DestQP: 0x800000}, "00 00 0000 00 800000 00 000000"},
		{"DestQP all ones (multicast QPN)", wire.BTHFields{DestQP: 0xFFFFFF}, "00 00 0000 00 ffffff 00 000000"},
		// Byte 8: AckReq(7) Resv7(6-0).
		{"AckReq is bit 7 of byte 8", wire.BTHFields{AckReq: true}, "00 00 0000 00 000000 80 000000"},
		{"Resv7 is bits 6-0 of byte 8", wire.BTHFields{Resv7: 0x7F}, "00 00 0000 00 000000 7f 000000"},
		// Bytes 9-11: PSN, big-endian 24 bits.
		{"PSN 1", wire.BTHFields{PSN: 1}, "00 00 0000 00 000000 00 000001"},
		{"PSN 0xFFFFFF", wire.BTHFields{PSN: 0xFFFFFF}, "00 00 0000 00 000000 00 ffffff"},
		{"all ones",
			wire.BTHFields{Opcode: 0xFF, SolicitedEvent: true, MigReq: true, PadCount: 3, TVer: 15, PKey: 0xFFFF,
				FECN: true, BECN: true, Resv6a: 0x3F, DestQP: 0xFFFFFF, AckReq: true, Resv7: 0x7F, PSN: 0xFFFFFF},
			"ff ff ffff ff ffffff ff ffffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			if len(want) != wire.BTHLen {
				t.Fatalf("test bytes are %d long", len(want))
			}
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseBTH(append(bytes.Clone(want), 0xEE, 0xEE)) // followed by more bytes
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.BTHLen {
				t.Errorf("view is %d bytes, want %d", len(h), wire.BTHLen)
			}
			if got := h.Fields(); got != tc.f {
				t.Errorf("Fields\n got %+v\nwant %+v", got, tc.f)
			}
			if h.Opcode() != tc.f.Opcode || h.SolicitedEvent() != tc.f.SolicitedEvent || h.MigReq() != tc.f.MigReq ||
				h.PadCount() != tc.f.PadCount || h.TVer() != tc.f.TVer || h.PKey() != tc.f.PKey ||
				h.FECN() != tc.f.FECN || h.BECN() != tc.f.BECN || h.Resv6a() != tc.f.Resv6a ||
				h.DestQP() != tc.f.DestQP || h.AckReq() != tc.f.AckReq || h.Resv7() != tc.f.Resv7 || h.PSN() != tc.f.PSN {
				t.Errorf("an accessor disagrees with Fields: %+v", h.Fields())
			}
			// The setters, from all zeros and from all ones (so they must
			// both set and clear), give the same bytes. The reserved
			// fields have no setters: they are written directly.
			for _, fill := range []byte{0x00, 0xFF} {
				h := wire.BTH(bytes.Repeat([]byte{fill}, wire.BTHLen))
				h[4] = h[4]&0xC0 | tc.f.Resv6a
				h[8] = h[8]&0x80 | tc.f.Resv7
				h.SetOpcode(tc.f.Opcode)
				h.SetSolicitedEvent(tc.f.SolicitedEvent)
				h.SetMigReq(tc.f.MigReq)
				h.SetPadCount(tc.f.PadCount)
				h.SetTVer(tc.f.TVer)
				h.SetPKey(tc.f.PKey)
				h.SetFECN(tc.f.FECN)
				h.SetBECN(tc.f.BECN)
				h.SetDestQP(tc.f.DestQP)
				h.SetAckReq(tc.f.AckReq)
				h.SetPSN(tc.f.PSN)
				if !bytes.Equal(h, want) {
					t.Errorf("setters over %#02x bytes\n got %x\nwant %x", fill, []byte(h), want)
				}
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
}

// TestBTHSettersStayInTheirField checks that out-of-range values are cut to
// the field's width and never spill into a neighbouring field.
func TestBTHSettersStayInTheirField(t *testing.T) {
	h := wire.BTH(make([]byte, wire.BTHLen))
	h.SetPadCount(7) // 3 bits: only the low 2 are kept
	h.SetTVer(0x1F)
	h.SetDestQP(0xAB123456)
	h.SetPSN(0xCD654321)
	want := hexBytes(t, "00 3f 0000 00 123456 00 654321")
	if !bytes.Equal(h, want) {
		t.Errorf("got %x\nwant %x", []byte(h), want)
	}
	f := wire.BTHFields{PadCount: 5, TVer: 0x13, Resv6a: 0xFF, Resv7: 0xFF, DestQP: 0xFF000001, PSN: 0x01000002}
	if got, want := f.Append(nil), hexBytes(t, "00 13 0000 3f 000001 7f 000002"); !bytes.Equal(got, want) {
		t.Errorf("Append of out-of-range fields\n got %x\nwant %x", got, want)
	}
}

func TestRETH(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.RETHFields
		hex  string
	}{
		{"zero", wire.RETHFields{}, "0000000000000000 00000000 00000000"},
		{"typical", wire.RETHFields{VA: 0x0123456789ABCDEF, RKey: 0xFEDCBA98, DMALength: 4096},
			"0123456789abcdef fedcba98 00001000"},
		{"max", wire.RETHFields{VA: ^uint64(0), RKey: ^uint32(0), DMALength: 1 << 31},
			"ffffffffffffffff ffffffff 80000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseRETH(append(bytes.Clone(want), 1, 2, 3))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.RETHLen {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tc.f || h.VA() != tc.f.VA || h.RKey() != tc.f.RKey || h.DMALength() != tc.f.DMALength {
				t.Errorf("Fields %+v, want %+v", got, tc.f)
			}
			s := wire.RETH(bytes.Repeat([]byte{0x5A}, wire.RETHLen))
			s.SetVA(tc.f.VA)
			s.SetRKey(tc.f.RKey)
			s.SetDMALength(tc.f.DMALength)
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
}

func TestAtomicETH(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.AtomicETHFields
		hex  string
	}{
		{"zero", wire.AtomicETHFields{}, "0000000000000000 00000000 0000000000000000 0000000000000000"},
		{"compare and swap",
			wire.AtomicETHFields{VA: 0x1122334455667788, RKey: 0x99AABBCC, SwapAdd: 0x0102030405060708, Compare: 0xF0E0D0C0B0A09080},
			"1122334455667788 99aabbcc 0102030405060708 f0e0d0c0b0a09080"},
		{"fetch and add 1", wire.AtomicETHFields{VA: 0x7F0000001000, RKey: 0x1234, SwapAdd: 1},
			"00007f0000001000 00001234 0000000000000001 0000000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			if len(want) != wire.AtomicETHLen {
				t.Fatalf("test bytes are %d long", len(want))
			}
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseAtomicETH(append(bytes.Clone(want), 9))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.AtomicETHLen {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tc.f || h.VA() != tc.f.VA || h.RKey() != tc.f.RKey ||
				h.SwapAdd() != tc.f.SwapAdd || h.Compare() != tc.f.Compare {
				t.Errorf("Fields %+v, want %+v", got, tc.f)
			}
			s := wire.AtomicETH(bytes.Repeat([]byte{0xA5}, wire.AtomicETHLen))
			s.SetVA(tc.f.VA)
			s.SetRKey(tc.f.RKey)
			s.SetSwapAdd(tc.f.SwapAdd)
			s.SetCompare(tc.f.Compare)
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
}

func TestAtomicAckETH(t *testing.T) {
	for _, tc := range []struct {
		orig uint64
		hex  string
	}{
		{0, "0000000000000000"},
		{0x8877665544332211, "8877665544332211"},
		{42, "000000000000002a"},
	} {
		t.Run(fmt.Sprintf("%#x", tc.orig), func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, func(b []byte) []byte { return wire.AppendAtomicAckETH(b, tc.orig) }, want)
			h, err := wire.ParseAtomicAckETH(append(bytes.Clone(want), 7, 7))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.AtomicAckETHLen || h.OrigData() != tc.orig {
				t.Errorf("view %x: OrigData %#x, want %#x", []byte(h), h.OrigData(), tc.orig)
			}
			s := wire.AtomicAckETH(bytes.Repeat([]byte{0xFF}, 8))
			s.SetOrigData(tc.orig)
			if !bytes.Equal(s, want) {
				t.Errorf("setter: got %x, want %x", []byte(s), want)
			}
			checkAppend(t, func(b []byte) []byte { return wire.AppendAtomicAckETH(b, h.OrigData()) }, want)
		})
	}
}

func TestDETH(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.DETHFields
		hex  string
	}{
		{"zero", wire.DETHFields{}, "00000000 00 000000"},
		{"GSI (QP1) Q_Key, source QP 1", wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1}, "80010000 00 000001"},
		{"ud_pingpong", wire.DETHFields{QKey: 0x11111111, SrcQP: 0x000123}, "11111111 00 000123"},
		{"reserved byte and max QP", wire.DETHFields{QKey: 0xFFFFFFFF, Reserved: 0xA5, SrcQP: 0xFFFFFF}, "ffffffff a5 ffffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseDETH(append(bytes.Clone(want), 0x77))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.DETHLen {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tc.f || h.QKey() != tc.f.QKey || h.Reserved() != tc.f.Reserved || h.SrcQP() != tc.f.SrcQP {
				t.Errorf("Fields %+v, want %+v", got, tc.f)
			}
			s := wire.DETH(make([]byte, wire.DETHLen))
			s[4] = tc.f.Reserved // no setter: reserved
			s.SetQKey(tc.f.QKey)
			s.SetSrcQP(tc.f.SrcQP)
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
	// SetSrcQP keeps to its 24 bits: the reserved byte is untouched.
	s := wire.DETH(hexBytes(t, "00000000 5a 000000"))
	s.SetSrcQP(0xFF123456)
	if want := hexBytes(t, "00000000 5a 123456"); !bytes.Equal(s, want) {
		t.Errorf("SetSrcQP(0xFF123456): got %x, want %x", []byte(s), want)
	}
}

// TestWord24 covers RDETH (EE context) and XRCETH (XRC SRQ number): one
// reserved byte and a 24-bit value.
func TestWord24(t *testing.T) {
	for _, tc := range []struct {
		name     string
		layer    string
		reserved uint8
		value    uint32
		hex      string
	}{
		{"RDETH EE context", "RDETH", 0, 0xABCDEF, "00 abcdef"},
		{"XRCETH SRQ number", "XRCETH", 0, 0x000456, "00 000456"},
		{"reserved byte set", "RDETH", 0x5A, 0x123456, "5a 123456"},
		{"max", "XRCETH", 0xFF, 0xFFFFFF, "ff ffffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, func(b []byte) []byte { return wire.AppendWord24(b, tc.reserved, tc.value) }, want)
			h, err := wire.ParseWord24(tc.layer, append(bytes.Clone(want), 1))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != 4 || h.Reserved() != tc.reserved || h.Value() != tc.value {
				t.Errorf("view %x: reserved %#x value %#x", []byte(h), h.Reserved(), h.Value())
			}
			var r wire.RDETH = h // the aliases are the same view
			var x wire.XRCETH = h
			if r.Value() != tc.value || x.Value() != tc.value {
				t.Error("RDETH/XRCETH aliases disagree")
			}
			s := wire.Word24{tc.reserved, 0xEE, 0xEE, 0xEE}
			s.SetValue(tc.value | 0xFF000000) // the top byte is cut off, the reserved byte kept
			if !bytes.Equal(s, want) {
				t.Errorf("SetValue: got %x, want %x", []byte(s), want)
			}
			checkAppend(t, func(b []byte) []byte { return wire.AppendWord24(b, h.Reserved(), h.Value()) }, want)
			if _, err := wire.ParseWord24(tc.layer, want[:3]); err == nil {
				t.Error("3 bytes parsed")
			} else {
				wantParseError(t, err, tc.layer, "truncated")
			}
		})
	}
}

// TestWord32 covers ImmDt (immediate data) and IETH (the R_Key to invalidate).
func TestWord32(t *testing.T) {
	for _, tc := range []struct {
		name  string
		layer string
		value uint32
		hex   string
	}{
		{"ImmDt", "ImmDt", 0xDEADBEEF, "deadbeef"},
		{"IETH", "IETH", 0x00C0FFEE, "00c0ffee"},
		{"zero", "ImmDt", 0, "00000000"},
		{"max", "IETH", 0xFFFFFFFF, "ffffffff"},
		{"big-endian byte order", "ImmDt", 0x01020304, "01020304"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, func(b []byte) []byte { return wire.AppendWord32(b, tc.value) }, want)
			h, err := wire.ParseWord32(tc.layer, append(bytes.Clone(want), 1, 2))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != 4 || h.Value() != tc.value {
				t.Errorf("view %x: value %#x, want %#x", []byte(h), h.Value(), tc.value)
			}
			var imm wire.ImmDt = h // the aliases are the same view
			var ieth wire.IETH = h
			if imm.Value() != tc.value || ieth.Value() != tc.value {
				t.Error("ImmDt/IETH aliases disagree")
			}
			s := wire.Word32{0x55, 0x55, 0x55, 0x55}
			s.SetValue(tc.value)
			if !bytes.Equal(s, want) {
				t.Errorf("SetValue: got %x, want %x", []byte(s), want)
			}
			checkAppend(t, func(b []byte) []byte { return wire.AppendWord32(b, h.Value()) }, want)
			if _, err := wire.ParseWord32(tc.layer, want[:3]); err == nil {
				t.Error("3 bytes parsed")
			} else {
				wantParseError(t, err, tc.layer, "truncated")
			}
		})
	}
}

func TestFETH(t *testing.T) {
	for _, tc := range []struct {
		name           string
		sel, placement uint8
		word           uint32
		hex            string
	}{
		{"global visibility of the RETH range", wire.FlushSelMRRange, wire.FlushGlobalVisibility, 0x01, "00000001"},
		{"persistence of the range", wire.FlushSelMRRange, wire.FlushPersistence, 0x02, "00000002"},
		{"persistence of the whole MR", wire.FlushSelWholeMR, wire.FlushPersistence, 0x12, "00000012"},
		{"both placement types, whole MR", wire.FlushSelWholeMR, wire.FlushGlobalVisibility | wire.FlushPersistence, 0x13, "00000013"},
		{"max selectivity and placement", 3, 0xF, 0x3F, "0000003f"},
		{"out-of-range values are cut to 2 and 4 bits", 0x07, 0x1F, 0x3F, "0000003f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			if w := wire.FETHWord(tc.sel, tc.placement); w != tc.word {
				t.Errorf("FETHWord(%d, %d) = %#x, want %#x", tc.sel, tc.placement, w, tc.word)
			}
			h, err := wire.ParseFETH(append(bytes.Clone(want), 0xFF))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.FETHLen || h.Word() != tc.word {
				t.Errorf("view %x: word %#x", []byte(h), h.Word())
			}
			if h.Selectivity() != tc.sel&3 || h.PlacementType() != tc.placement&0xF {
				t.Errorf("selectivity %d placement %d, want %d %d", h.Selectivity(), h.PlacementType(), tc.sel&3, tc.placement&0xF)
			}
			s := wire.FETH{0xAA, 0xAA, 0xAA, 0xAA}
			s.SetWord(tc.word)
			if !bytes.Equal(s, want) {
				t.Errorf("SetWord: got %x, want %x", []byte(s), want)
			}
			checkAppend(t, func(b []byte) []byte { return wire.AppendFETH(b, tc.word) }, want)
			checkAppend(t, func(b []byte) []byte { return wire.AppendFETH(b, h.Word()) }, want)
			if _, err := wire.ParseFETH(want[:3]); err == nil {
				t.Error("3 bytes parsed")
			} else {
				wantParseError(t, err, "FETH", "truncated")
			}
		})
	}
	// Bits above 5 are reserved; the accessors ignore them, and the
	// encoder writes them as given so that a parsed FETH re-encodes exactly.
	want := hexBytes(t, "ffffffc6")
	h := wire.FETH(want)
	if h.Selectivity() != 0 || h.PlacementType() != 6 {
		t.Errorf("reserved bits leak: selectivity %d placement %d", h.Selectivity(), h.PlacementType())
	}
	checkAppend(t, func(b []byte) []byte { return wire.AppendFETH(b, h.Word()) }, want)
}

func TestAETH(t *testing.T) {
	for _, tc := range []struct {
		name string
		syn  wire.Syndrome
		msn  uint32
		hex  string
	}{
		{"ACK as rxe sends it", wire.SyndromeACK, 5, "1f 000005"},
		{"NAK PSN sequence error, max MSN", wire.SyndromePSNSeqErr, 0xFFFFFF, "60 ffffff"},
		{"RNR NAK 0.64 ms", wire.RNRNAK(12), 0x010203, "2c 010203"},
		{"ACK 64 credits", wire.ACKWithCredits(12), 0, "0c 000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, func(b []byte) []byte { return wire.AppendAETH(b, tc.syn, tc.msn) }, want)
			h, err := wire.ParseAETH(append(bytes.Clone(want), 0))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.AETHLen || h.Syndrome() != tc.syn || h.MSN() != tc.msn {
				t.Errorf("view %x: syndrome %#x MSN %#x", []byte(h), h.Syndrome(), h.MSN())
			}
			s := wire.AETH{0xFF, 0xFF, 0xFF, 0xFF}
			s.SetSyndrome(tc.syn)
			s.SetMSN(tc.msn | 0x5A000000) // cut to 24 bits: the syndrome stays
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
		})
	}
}

// TestSyndromeConstants pins the named syndromes to IBTA Vol 1 Tables 43
// and 44: bits 6-5 the type (0 ACK, 1 RNR NAK, 3 NAK), bits 4-0 the value.
func TestSyndromeConstants(t *testing.T) {
	for _, tc := range []struct {
		s    wire.Syndrome
		want uint8
	}{
		{wire.SyndromeACK, 0x1F},
		{wire.SyndromePSNSeqErr, 0x60},
		{wire.SyndromeInvalidReq, 0x61},
		{wire.SyndromeRemAccessErr, 0x62},
		{wire.SyndromeRemOpErr, 0x63},
		{wire.SyndromeInvalidRDReq, 0x64},
		{wire.RNRNAK(0), 0x20},
		{wire.RNRNAK(31), 0x3F},
		{wire.RNRNAK(32 + 5), 0x25}, // cut to 5 bits
		{wire.ACKWithCredits(0), 0x00},
		{wire.ACKWithCredits(30), 0x1E},
		{wire.ACKWithCredits(0xE1), 0x01},
	} {
		if uint8(tc.s) != tc.want {
			t.Errorf("%v = %#02x, want %#02x", tc.s, uint8(tc.s), tc.want)
		}
	}
}

// ibtaACKCredits is IBTA Vol 1 Table 45 (credit code → credits), written
// out from the spec.
var ibtaACKCredits = []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
	512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}

// ibtaRNRTimers is IBTA Vol 1 Table 46 (timer code → minimum delay, in
// milliseconds as the spec prints them; also Linux's IB_RNR_TIMER_* names).
var ibtaRNRTimers = []string{"655.36", "0.01", "0.02", "0.03", "0.04", "0.06", "0.08", "0.12",
	"0.16", "0.24", "0.32", "0.48", "0.64", "0.96", "1.28", "1.92", "2.56", "3.84", "5.12", "7.68",
	"10.24", "15.36", "20.48", "30.72", "40.96", "61.44", "81.92", "122.88", "163.84", "245.76",
	"327.68", "491.52"}

// TestSyndromeNames checks Type, Value, the predicates, ACKCredits,
// RNRTimer and String for every syndrome.
func TestSyndromeNames(t *testing.T) {
	if len(ibtaACKCredits) != 31 || len(ibtaRNRTimers) != 32 {
		t.Fatal("test tables have the wrong length")
	}
	nakNames := []string{"PSN Sequence Error", "Invalid Request", "Remote Access Error",
		"Remote Operational Error", "Invalid RD Request"}
	for i := range 256 {
		s := wire.Syndrome(i)
		typ, val := wire.SyndromeType(i>>5&3), uint8(i&31)
		if s.Type() != typ || s.Value() != val {
			t.Errorf("%#02x: type %d value %d, want %d %d", i, s.Type(), s.Value(), typ, val)
		}
		if s.IsACK() != (typ == 0) || s.IsRNRNAK() != (typ == 1) || s.IsNAK() != (typ == 3) {
			t.Errorf("%#02x: predicates disagree with type %d", i, typ)
		}
		var want string
		switch typ {
		case wire.SynACK:
			if val == 31 {
				want = "ACK (credits: invalid)"
			} else {
				want = fmt.Sprintf("ACK (credits: %d)", ibtaACKCredits[val])
			}
		case wire.SynRNRNAK:
			want = "RNR NAK (timer " + ibtaRNRTimers[val] + " ms)"
		case wire.SynReserved:
			want = fmt.Sprintf("reserved syndrome %#02x", i)
		case wire.SynNAK:
			if val < 5 {
				want = "NAK " + nakNames[val]
			} else {
				want = fmt.Sprintf("NAK reserved code %d", val)
			}
		}
		if got := s.String(); got != want {
			t.Errorf("Syndrome(%#02x).String() = %q, want %q", i, got, want)
		}
	}
	for code := range uint8(32) {
		want := -1
		if code < 31 {
			want = ibtaACKCredits[code]
		}
		if got := wire.ACKCredits(code); got != want {
			t.Errorf("ACKCredits(%d) = %d, want %d", code, got, want)
		}
		d, err := time.ParseDuration(ibtaRNRTimers[code] + "ms")
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.RNRTimer(code); got != d {
			t.Errorf("RNRTimer(%d) = %v, want %v", code, got, d)
		}
		if wire.RNRTimer(code+32) != wire.RNRTimer(code) {
			t.Errorf("RNRTimer(%d) does not cut the code to 5 bits", code+32)
		}
	}
	if got := wire.ACKCredits(200); got != -1 {
		t.Errorf("ACKCredits(200) = %d, want -1", got)
	}
}

func TestEthernet(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.EthernetFields
		hex  string
	}{
		{"IPv4", wire.EthernetFields{Dst: macServer, Src: macClient, EtherType: wire.EtherTypeIPv4},
			"5254 00c0 020b  5254 00c0 020c  0800"},
		{"RoCE v1", wire.EthernetFields{Dst: macServer, Src: macClient, EtherType: wire.EtherTypeRoCE},
			"5254 00c0 020b  5254 00c0 020c  8915"},
		{"802.1Q PCP 3 VID 100, IPv6",
			wire.EthernetFields{Dst: macServer, Src: macClient, VLAN: true, VLANTCI: 3<<13 | 100, EtherType: wire.EtherTypeIPv6},
			"5254 00c0 020b  5254 00c0 020c  8100 6064  86dd"},
		{"802.1Q DEI and VID 4095, RoCE v1",
			wire.EthernetFields{Dst: wire.MAC{1, 0, 0x5e, 1, 2, 3}, Src: macClient, VLAN: true, VLANTCI: 0x1FFF, EtherType: wire.EtherTypeRoCE},
			"0100 5e01 0203  5254 00c0 020c  8100 1fff  8915"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			if n := tc.f.Len(); n != len(want) {
				t.Errorf("Len() = %d, want %d", n, len(want))
			}
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseEthernet(append(bytes.Clone(want), 0x45, 0x00))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != len(want) {
				t.Errorf("view is %d bytes, want %d", len(h), len(want))
			}
			if got := h.Fields(); got != tc.f {
				t.Errorf("Fields %+v, want %+v", got, tc.f)
			}
			if h.Dst() != tc.f.Dst || h.Src() != tc.f.Src || h.HasVLAN() != tc.f.VLAN ||
				h.VLANTCI() != tc.f.VLANTCI || h.EtherType() != tc.f.EtherType {
				t.Error("an accessor disagrees")
			}
			s := wire.Ethernet(make([]byte, len(want)))
			if tc.f.VLAN {
				copy(s[12:16], want[12:16]) // tag: no setter
			}
			s.SetDst(tc.f.Dst)
			s.SetSrc(tc.f.Src)
			s.SetEtherType(tc.f.EtherType) // inside the tag, if any
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
	if got := macServer.String(); got != "52:54:00:c0:02:0b" {
		t.Errorf("MAC.String() = %q", got)
	}
	if got := (wire.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}).String(); got != "ff:ff:ff:ff:ff:ff" {
		t.Errorf("MAC.String() = %q", got)
	}
}

func TestParseEthernetErrors(t *testing.T) {
	for _, tc := range []struct {
		name, hex, layer, reason string
	}{
		{"empty", "", "Ethernet", "truncated: need 14 bytes, have 0"},
		{"13 bytes", "5254 00c0 020b  5254 00c0 020c  08", "Ethernet", "truncated"},
		{"tag without its TCI", "5254 00c0 020b  5254 00c0 020c  8100 00", "802.1Q", "truncated: need 18 bytes, have 15"},
		{"tag without the inner type", "5254 00c0 020b  5254 00c0 020c  8100 0064 08", "802.1Q", "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := wire.ParseEthernet(hexBytes(t, tc.hex))
			if err == nil {
				t.Fatalf("parsed as %x", []byte(h))
			}
			wantParseError(t, err, tc.layer, tc.reason)
		})
	}
}

// ipv4Example is the IPv4 header of the well-known example on Wikipedia's
// "Internet checksum" page (RFC 1071 arithmetic): checksum 0xb861.
const ipv4Example = "4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7"

func TestIPv4(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.IPv4Fields
		hex  string
	}{
		{"RFC 1071 example", wire.IPv4Fields{TotalLen: 0x73, Flags: 2, TTL: 64, Protocol: 17, Checksum: 0xb861,
			Src: netip.MustParseAddr("192.168.0.1"), Dst: netip.MustParseAddr("192.168.0.199")},
			ipv4Example},
		// Checksum by hand: 4602+0020+3d1c+4000+4011+c000+020c+c000+020b+0101+0100
		// = 0x28967; folded 0x8969; complement 0x7696.
		{"with options (IHL 6), ECN 2, DF",
			wire.IPv4Fields{TOS: 0x02, TotalLen: 0x20, ID: 0x3d1c, Flags: 2, TTL: 64, Protocol: 17, Checksum: 0x7696,
				Src: ip4Client, Dst: ip4Server, Options: []byte{1, 1, 1, 0}},
			"4602 0020 3d1c 4000 4011 7696 c000 020c c000 020b 0101 0100"},
		// Flags: reserved(2) DF(1) MF(0) are the top 3 bits of byte 6.
		{"all flags, fragment offset 0x1234",
			wire.IPv4Fields{TOS: 0xB8, TotalLen: 20, ID: 0xFFFF, Flags: 7, FragOffset: 0x1234, TTL: 1, Protocol: 6, Checksum: 0xABCD,
				Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("255.255.255.255")},
			"45b8 0014 ffff f234 0106 abcd 0a00 0001 ffff ffff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, tc.f.Append, want)
			pkt := append(bytes.Clone(want), make([]byte, tc.f.TotalLen-len(want))...) // the rest of the datagram
			h, err := wire.ParseIPv4(pkt)
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != len(want) || h.HeaderLen() != len(want) {
				t.Errorf("view is %d bytes, HeaderLen %d, want %d", len(h), h.HeaderLen(), len(want))
			}
			got := h.Fields()
			if got.TOS != tc.f.TOS || got.TotalLen != tc.f.TotalLen || got.ID != tc.f.ID || got.Flags != tc.f.Flags ||
				got.FragOffset != tc.f.FragOffset || got.TTL != tc.f.TTL || got.Protocol != tc.f.Protocol ||
				got.Checksum != tc.f.Checksum || got.Src != tc.f.Src || got.Dst != tc.f.Dst || !bytes.Equal(got.Options, tc.f.Options) {
				t.Errorf("Fields\n got %+v\nwant %+v", got, tc.f)
			}
			if h.DSCP() != tc.f.TOS>>2 || h.ECN() != tc.f.TOS&3 || h.DontFragment() != (tc.f.Flags&2 != 0) {
				t.Errorf("DSCP %d ECN %d DF %v", h.DSCP(), h.ECN(), h.DontFragment())
			}
			if c := h.ComputeChecksum(); tc.name != "all flags, fragment offset 0x1234" && c != tc.f.Checksum {
				t.Errorf("ComputeChecksum() = %#04x, want %#04x", c, tc.f.Checksum)
			}
			checkAppend(t, got.Append, want)
			s := wire.IPv4(bytes.Clone(want))
			s.SetTOS(0x55)
			s.SetID(0x0102)
			s.SetTTL(9)
			s.SetTotalLen(0x0304)
			s.SetChecksum(0x0506)
			if s.TOS() != 0x55 || s.ID() != 0x0102 || s.TTL() != 9 || s.TotalLen() != 0x0304 || s.Checksum() != 0x0506 {
				t.Errorf("setters: %x", []byte(s))
			}
			want2 := bytes.Clone(want)
			want2[1], want2[2], want2[3], want2[4], want2[5], want2[8], want2[10], want2[11] = 0x55, 3, 4, 1, 2, 9, 5, 6
			if !bytes.Equal(s, want2) {
				t.Errorf("setters wrote other bytes:\n got %x\nwant %x", []byte(s), want2)
			}
		})
	}
}

// TestIPv4Checksum checks ComputeChecksum against RFC 1071's property: the
// one's-complement sum of a header carrying its checksum is 0xFFFF.
func TestIPv4Checksum(t *testing.T) {
	h := wire.IPv4(hexBytes(t, ipv4Example))
	h.SetChecksum(0) // ComputeChecksum skips the field, whatever it holds
	if c := h.ComputeChecksum(); c != 0xb861 {
		t.Fatalf("ComputeChecksum() = %#04x, want 0xb861", c)
	}
	for _, s := range samples(t, []encap{{"v2-ipv4", wire.RoCEv2, 4, false}}) {
		ip := parseFrame(t, s.frame).IPv4()
		var sum uint32
		for i := 0; i < len(ip); i += 2 {
			sum += uint32(ip[i])<<8 | uint32(ip[i+1])
		}
		for sum > 0xFFFF {
			sum = sum>>16 + sum&0xFFFF
		}
		if sum != 0xFFFF {
			t.Errorf("%s: header sums to %#04x, want 0xffff", s.name, sum)
		}
	}
}

func TestParseIPv4Errors(t *testing.T) {
	for _, tc := range []struct {
		name, hex, reason string
	}{
		{"19 bytes", "4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00", "truncated: need 20 bytes, have 19"},
		{"version 6", "6500 0014 0000 4000 4011 b861 c0a8 0001 c0a8 00c7", "version 6"},
		{"IHL 4", "4400 0014 0000 4000 4011 b861 c0a8 0001 c0a8 00c7", "header length 16 < 20"},
		{"IHL 15 in 20 bytes", "4f00 0014 0000 4000 4011 b861 c0a8 0001 c0a8 00c7", "truncated: need 60 bytes, have 20"},
		{"total length below header length", "4500 0013 0000 4000 4011 b861 c0a8 0001 c0a8 00c7", "total length 19 < header length 20"},
		{"total length beyond the bytes", ipv4Example, "truncated: need 115 bytes, have 20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := wire.ParseIPv4(hexBytes(t, tc.hex))
			if err == nil {
				t.Fatalf("parsed as %x", []byte(h))
			}
			wantParseError(t, err, "IPv4", tc.reason)
		})
	}
}

func TestIPv6AndGRH(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grh   bool
		f     wire.IPv6Fields
		hex   string
		after int // payload bytes that follow
	}{
		{"IPv6 TC 0xAB flow 0x12345", false,
			wire.IPv6Fields{Version: 6, TrafficClass: 0xAB, FlowLabel: 0x12345, PayloadLen: 16, NextHeader: 17, HopLimit: 64,
				Src: ip6Client, Dst: ip6Server},
			"6ab1 2345 0010 11 40  fd00 00c0 0002 0000 0000 0000 0000 0012  fd00 00c0 0002 0000 0000 0000 0000 0011", 16},
		{"IPv6 as rping6 sends it", false,
			wire.IPv6Fields{Version: 6, TrafficClass: 0x02, FlowLabel: 0xB2F4F, PayloadLen: 0, NextHeader: 17, HopLimit: 64,
				Src: ip6Server, Dst: ip6Client},
			"602b 2f4f 0000 11 40  fd00 00c0 0002 0000 0000 0000 0000 0011  fd00 00c0 0002 0000 0000 0000 0000 0012", 0},
		{"GRH of RoCE v1", true,
			wire.IPv6Fields{Version: 6, PayloadLen: 32, NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1, Src: gidClient, Dst: gidServer},
			"6000 0000 0020 1b 01  fe80 0000 0000 0000 5054 00ff fec0 020c  fe80 0000 0000 0000 5054 00ff fec0 020b", 32},
		{"GRH with all variant fields set", true,
			wire.IPv6Fields{Version: 6, TrafficClass: 0xFF, FlowLabel: 0xFFFFF, PayloadLen: 4, NextHeader: wire.GRHNextHdrIBTH, HopLimit: 0xFF,
				Src: gidClient, Dst: gidServer},
			"6fff ffff 0004 1b ff  fe80 0000 0000 0000 5054 00ff fec0 020c  fe80 0000 0000 0000 5054 00ff fec0 020b", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, tc.f.Append, want)
			zeroVer := tc.f
			zeroVer.Version = 0 // zero means 6
			checkAppend(t, zeroVer.Append, want)
			parse := wire.ParseIPv6
			if tc.grh {
				parse = wire.ParseGRH
			}
			h, err := parse(append(bytes.Clone(want), make([]byte, tc.after)...))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.IPv6Len {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tc.f {
				t.Errorf("Fields\n got %+v\nwant %+v", got, tc.f)
			}
			if h.Version() != 6 || h.TrafficClass() != tc.f.TrafficClass || h.FlowLabel() != tc.f.FlowLabel ||
				h.PayloadLen() != tc.f.PayloadLen || h.NextHeader() != tc.f.NextHeader || h.HopLimit() != tc.f.HopLimit ||
				h.Src() != tc.f.Src || h.Dst() != tc.f.Dst {
				t.Error("an accessor disagrees")
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
			// SetTrafficClass writes the 8 bits that straddle bytes 0 and 1
			// and nothing else.
			s := wire.IPv6(bytes.Clone(want))
			s.SetTrafficClass(0x5C)
			s.SetHopLimit(7)
			s.SetPayloadLen(0x0102)
			want2 := bytes.Clone(want)
			want2[0] = 0x65
			want2[1] = 0xC0 | want[1]&0x0F
			want2[4], want2[5], want2[7] = 1, 2, 7
			if !bytes.Equal(s, want2) {
				t.Errorf("setters\n got %x\nwant %x", []byte(s), want2)
			}
			if s.TrafficClass() != 0x5C || s.FlowLabel() != tc.f.FlowLabel || s.Version() != 6 {
				t.Errorf("after SetTrafficClass: TC %#x flow %#x version %d", s.TrafficClass(), s.FlowLabel(), s.Version())
			}
		})
	}
}

func TestParseIPv6Errors(t *testing.T) {
	const addrs = "fd00 00c0 0002 0000 0000 0000 0000 0012  fd00 00c0 0002 0000 0000 0000 0000 0011"
	for _, tc := range []struct {
		name, layer, hex, reason string
		grh                      bool
	}{
		{"39 bytes", "IPv6", "6000 0000 0000 11 40 " + addrs[:len(addrs)-2], "truncated: need 40 bytes, have 39", false},
		{"version 4", "IPv6", "4000 0000 0000 11 40 " + addrs, "version 4", false},
		{"payload beyond the bytes", "IPv6", "6000 0000 0001 11 40 " + addrs, "truncated: need 41 bytes, have 40", false},
		{"GRH 39 bytes", "GRH", "6000 0000 0000 1b 01 " + addrs[:len(addrs)-2], "truncated", true},
		{"GRH version 0", "GRH", "0000 0000 0000 1b 01 " + addrs, "version 0", true},
		{"GRH payload beyond the bytes", "GRH", "6000 0000 ffff 1b 01 " + addrs, "truncated: need 65575 bytes, have 40", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parse := wire.ParseIPv6
			if tc.grh {
				parse = wire.ParseGRH
			}
			h, err := parse(hexBytes(t, tc.hex))
			if err == nil {
				t.Fatalf("parsed as %x", []byte(h))
			}
			wantParseError(t, err, tc.layer, tc.reason)
		})
	}
}

func TestUDP(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    wire.UDPFields
		hex  string
	}{
		{"rping data QP", wire.UDPFields{SrcPort: 61283, DstPort: wire.RoCEv2Port, Length: 28}, "ef63 12b7 001c 0000"},
		{"GSI source port, checksum set", wire.UDPFields{SrcPort: 55410, DstPort: wire.RoCEv2Port, Length: 8, Checksum: 0xBEEF},
			"d872 12b7 0008 beef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := hexBytes(t, tc.hex)
			checkAppend(t, tc.f.Append, want)
			h, err := wire.ParseUDP(append(bytes.Clone(want), make([]byte, tc.f.Length-wire.UDPLen+3)...))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != wire.UDPLen {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tc.f || h.SrcPort() != tc.f.SrcPort || h.DstPort() != tc.f.DstPort ||
				h.Length() != tc.f.Length || h.Checksum() != tc.f.Checksum {
				t.Errorf("Fields %+v, want %+v", got, tc.f)
			}
			s := wire.UDP(make([]byte, wire.UDPLen))
			s.SetSrcPort(tc.f.SrcPort)
			s.SetDstPort(tc.f.DstPort)
			s.SetLength(tc.f.Length)
			s.SetChecksum(tc.f.Checksum)
			if !bytes.Equal(s, want) {
				t.Errorf("setters: got %x, want %x", []byte(s), want)
			}
			f := h.Fields()
			checkAppend(t, f.Append, want)
		})
	}
}

func TestParseUDPErrors(t *testing.T) {
	for _, tc := range []struct {
		name, hex, reason string
	}{
		{"7 bytes", "ef63 12b7 0008 00", "truncated: need 8 bytes, have 7"},
		{"length 7", "ef63 12b7 0007 0000", "length 7 < 8"},
		{"length 0", "ef63 12b7 0000 0000", "length 0 < 8"},
		{"length beyond the bytes", "ef63 12b7 0009 0000", "truncated: need 9 bytes, have 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := wire.ParseUDP(hexBytes(t, tc.hex))
			if err == nil {
				t.Fatalf("parsed as %x", []byte(h))
			}
			wantParseError(t, err, "UDP", tc.reason)
		})
	}
}

// TestTransportHeaderParseErrors checks the error each fixed-size header
// parser returns for too few bytes, and that it names its layer.
func TestTransportHeaderParseErrors(t *testing.T) {
	for _, tc := range []struct {
		layer string
		size  int
		parse func([]byte) error
	}{
		{"BTH", wire.BTHLen, func(b []byte) error { _, err := wire.ParseBTH(b); return err }},
		{"RETH", wire.RETHLen, func(b []byte) error { _, err := wire.ParseRETH(b); return err }},
		{"AtomicETH", wire.AtomicETHLen, func(b []byte) error { _, err := wire.ParseAtomicETH(b); return err }},
		{"AtomicAckETH", wire.AtomicAckETHLen, func(b []byte) error { _, err := wire.ParseAtomicAckETH(b); return err }},
		{"DETH", wire.DETHLen, func(b []byte) error { _, err := wire.ParseDETH(b); return err }},
		{"FETH", wire.FETHLen, func(b []byte) error { _, err := wire.ParseFETH(b); return err }},
		{"AETH", wire.AETHLen, func(b []byte) error { _, err := wire.ParseAETH(b); return err }},
	} {
		t.Run(tc.layer, func(t *testing.T) {
			err := tc.parse(make([]byte, tc.size-1))
			wantParseError(t, err, tc.layer, fmt.Sprintf("truncated: need %d bytes, have %d", tc.size, tc.size-1))
			if err := tc.parse(make([]byte, tc.size)); err != nil {
				t.Errorf("%d bytes: %v", tc.size, err)
			}
		})
	}
}
