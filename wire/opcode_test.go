package wire_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goroce/goroce/wire"
)

// Short names for the expected-header lists below.
const (
	rdeth  = wire.HdrRDETH
	deth   = wire.HdrDETH
	xrceth = wire.HdrXRCETH
	feth   = wire.HdrFETH
	reth   = wire.HdrRETH
	atmeth = wire.HdrAtomicETH
	aeth   = wire.HdrAETH
	atmack = wire.HdrAtomicAckETH
	immdt  = wire.HdrImmDt
	ieth   = wire.HdrIETH
	cnpres = wire.HdrCNPReserved
)

type wantOp struct {
	name  string
	hdrs  []wire.Header // in packet order
	fixed int           // FixedPayload: -1 any payload, 0 none, n exactly n bytes
}

// ibtaOpcodes is every opcode of IBTA Vol 1 Table 35, Annex A14 (XRC), the
// Memory Placement Extensions (FLUSH, ATOMIC WRITE) and Annex A17.9.3
// (CNP), written out here independently of the package's table, with the
// headers each carries (IBTA §9.2, Figure 24; names as Linux's
// rxe_opcode.c spells them without the IB_OPCODE_ prefix).
var ibtaOpcodes = func() map[wire.Opcode]wantOp {
	m := map[wire.Opcode]wantOp{}
	// The operations as RC carries them.
	rc := []struct {
		op    wire.Opcode
		name  string
		hdrs  []wire.Header
		fixed int
	}{
		{0x00, "SEND_FIRST", nil, -1},
		{0x01, "SEND_MIDDLE", nil, -1},
		{0x02, "SEND_LAST", nil, -1},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", []wire.Header{immdt}, -1},
		{0x04, "SEND_ONLY", nil, -1},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", []wire.Header{immdt}, -1},
		{0x06, "RDMA_WRITE_FIRST", []wire.Header{reth}, -1},
		{0x07, "RDMA_WRITE_MIDDLE", nil, -1},
		{0x08, "RDMA_WRITE_LAST", nil, -1},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", []wire.Header{immdt}, -1},
		{0x0A, "RDMA_WRITE_ONLY", []wire.Header{reth}, -1},
		{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", []wire.Header{reth, immdt}, -1},
		{0x0C, "RDMA_READ_REQUEST", []wire.Header{reth}, 0},
		{0x0D, "RDMA_READ_RESPONSE_FIRST", []wire.Header{aeth}, -1},
		{0x0E, "RDMA_READ_RESPONSE_MIDDLE", nil, -1},
		{0x0F, "RDMA_READ_RESPONSE_LAST", []wire.Header{aeth}, -1},
		{0x10, "RDMA_READ_RESPONSE_ONLY", []wire.Header{aeth}, -1},
		{0x11, "ACKNOWLEDGE", []wire.Header{aeth}, 0},
		{0x12, "ATOMIC_ACKNOWLEDGE", []wire.Header{aeth, atmack}, 0},
		{0x13, "COMPARE_SWAP", []wire.Header{atmeth}, 0},
		{0x14, "FETCH_ADD", []wire.Header{atmeth}, 0},
		{0x15, "RESYNC", nil, 0}, // RD only
		{0x16, "SEND_LAST_WITH_INVALIDATE", []wire.Header{ieth}, -1},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", []wire.Header{ieth}, -1},
		{0x1C, "FLUSH", []wire.Header{feth, reth}, 0},
		{0x1D, "ATOMIC_WRITE", []wire.Header{reth}, 8},
	}
	isResponse := func(op wire.Opcode) bool { return op >= 0x0D && op <= 0x12 }
	for _, r := range rc {
		if r.op != 0x15 {
			m[wire.TransportRC|r.op] = wantOp{"RC_" + r.name, r.hdrs, r.fixed}
		}
		if r.op <= 0x0B {
			m[wire.TransportUC|r.op] = wantOp{"UC_" + r.name, r.hdrs, r.fixed}
		}
		if r.op <= 0x15 {
			// RD: RDETH on every packet, DETH on every request (§9.2.2-3).
			h := []wire.Header{rdeth}
			if !isResponse(r.op) {
				h = append(h, deth)
			}
			m[wire.TransportRD|r.op] = wantOp{"RD_" + r.name, append(h, r.hdrs...), r.fixed}
		}
		if r.op <= 0x14 || r.op == 0x16 || r.op == 0x17 {
			// XRC: XRCETH on every request (Annex A14).
			var h []wire.Header
			if !isResponse(r.op) {
				h = []wire.Header{xrceth}
			}
			m[wire.TransportXRC|r.op] = wantOp{"XRC_" + r.name, append(h, r.hdrs...), r.fixed}
		}
	}
	m[0x64] = wantOp{"UD_SEND_ONLY", []wire.Header{deth}, -1}
	m[0x65] = wantOp{"UD_SEND_ONLY_WITH_IMMEDIATE", []wire.Header{deth, immdt}, -1}
	m[0x81] = wantOp{"CNP", []wire.Header{cnpres}, 0}
	return m
}()

// TestOpcodeRanges pins the opcode numbers the IBTA defines, by range.
func TestOpcodeRanges(t *testing.T) {
	var want []wire.Opcode
	add := func(lo, hi wire.Opcode) {
		for o := lo; o <= hi; o++ {
			want = append(want, o)
		}
	}
	add(0x00, 0x14)
	add(0x16, 0x17)
	add(0x1C, 0x1D) // RC
	add(0x20, 0x2B) // UC
	add(0x40, 0x55) // RD
	add(0x64, 0x65) // UD
	add(0x81, 0x81) // CNP
	add(0xA0, 0xB4)
	add(0xB6, 0xB7) // XRC
	if got := validOpcodes(); !slices.Equal(got, want) {
		t.Errorf("valid opcodes\n got %x\nwant %x", got, want)
	}
	if len(ibtaOpcodes) != len(want) {
		t.Errorf("the test's table has %d opcodes, the ranges %d", len(ibtaOpcodes), len(want))
	}
	for _, o := range want {
		if _, ok := ibtaOpcodes[o]; !ok {
			t.Errorf("%#02x missing from the test's table", uint8(o))
		}
	}
}

func TestOpcodeTable(t *testing.T) {
	table := wire.Opcodes()
	for i := range 256 {
		op := wire.Opcode(i)
		info := op.Info()
		if table[i] != *info {
			t.Errorf("%#02x: Opcodes()[i] and Info() differ", i)
		}
		want, ok := ibtaOpcodes[op]
		if !ok {
			if op.Valid() || info.Valid() || info.Name != "" || info.Headers != 0 || info.HeaderLen != 0 {
				t.Errorf("%#02x: not an IBTA opcode, but the table has %+v", i, *info)
			}
			if got, w := op.String(), fmt.Sprintf("OPCODE_%#02x", i); got != w {
				t.Errorf("%#02x: String() = %q, want %q", i, got, w)
			}
			continue
		}
		t.Run(want.name, func(t *testing.T) {
			if !op.Valid() || !info.Valid() {
				t.Fatal("not valid")
			}
			if info.Name != want.name || op.String() != want.name {
				t.Errorf("name %q / String %q, want %q", info.Name, op.String(), want.name)
			}
			if info.FixedPayload != want.fixed {
				t.Errorf("FixedPayload %d, want %d", info.FixedPayload, want.fixed)
			}
			if got := info.Is(wire.FlagPayload); got != (want.fixed != 0) {
				t.Errorf("FlagPayload %v, but FixedPayload %d", got, want.fixed)
			}
			// Headers present: exactly the expected ones. Offsets add up:
			// each header starts where the previous present one ended, the
			// first right after the BTH, and HeaderLen is the last end.
			off := wire.BTHLen
			for _, h := range want.hdrs {
				if !info.Has(h) || !info.Headers.Has(h) {
					t.Errorf("%v missing", h)
				}
				if int(info.Offset[h]) != off {
					t.Errorf("%v at offset %d, want %d", h, info.Offset[h], off)
				}
				off += h.Size()
			}
			if info.HeaderLen != off {
				t.Errorf("HeaderLen %d, want %d", info.HeaderLen, off)
			}
			for h := wire.Header(0); h.Size() > 0; h++ {
				if info.Has(h) && !slices.Contains(want.hdrs, h) {
					t.Errorf("unexpected %v", h)
				}
			}
			// The transport and operation bits.
			if op.Transport()|op.Operation() != op || op.Transport()&0x1F != 0 || op.Operation() > 0x1F {
				t.Errorf("Transport %#x Operation %#x", op.Transport(), op.Operation())
			}
		})
	}
}

// TestOpcodeFlags checks the flags that drive the requester, responder and
// completer for each kind of opcode.
func TestOpcodeFlags(t *testing.T) {
	for _, op := range validOpcodes() {
		info := op.Info()
		n := info.Name
		req, resp := info.Is(wire.FlagRequest), info.Is(wire.FlagResponse)
		if req == resp && op != wire.OpcodeCNP {
			t.Errorf("%s: request %v, response %v", n, req, resp)
		}
		if info.Is(wire.FlagImmediate) != info.Has(wire.HdrImmDt) {
			t.Errorf("%s: FlagImmediate disagrees with ImmDt", n)
		}
		if info.Is(wire.FlagInvalidate) != info.Has(wire.HdrIETH) {
			t.Errorf("%s: FlagInvalidate disagrees with IETH", n)
		}
		if info.Is(wire.FlagAtomic) != info.Has(wire.HdrAtomicETH) {
			t.Errorf("%s: FlagAtomic disagrees with AtomicETH", n)
		}
		if info.Is(wire.FlagAtomicAck) != info.Has(wire.HdrAtomicAckETH) {
			t.Errorf("%s: FlagAtomicAck disagrees with AtomicAckETH", n)
		}
		if info.Is(wire.FlagFlush) != info.Has(wire.HdrFETH) {
			t.Errorf("%s: FlagFlush disagrees with FETH", n)
		}
		if info.Is(wire.FlagCNP) != (op == wire.OpcodeCNP) {
			t.Errorf("%s: FlagCNP", n)
		}
		if info.Is(wire.FlagFirst|wire.FlagMiddle) || info.Is(wire.FlagMiddle|wire.FlagLast) {
			t.Errorf("%s: middle and first/last at once", n)
		}
		// Every request of a datagram service names its source (DETH);
		// every RD packet carries its EE context (RDETH).
		if tr := op.Transport(); tr == wire.TransportUD || (tr == wire.TransportRD && req) {
			if !info.Has(wire.HdrDETH) {
				t.Errorf("%s: no DETH", n)
			}
		}
		if (op.Transport() == wire.TransportRD) != info.Has(wire.HdrRDETH) {
			t.Errorf("%s: RDETH", n)
		}
		if op.Transport() == wire.TransportXRC && req != info.Has(wire.HdrXRCETH) {
			t.Errorf("%s: XRCETH on requests only", n)
		}
	}
	for _, tc := range []struct {
		op    wire.Opcode
		flags wire.OpFlags
	}{
		{0x04, wire.FlagPayload | wire.FlagRequest | wire.FlagSend | wire.FlagFirst | wire.FlagLast},
		{0x00, wire.FlagPayload | wire.FlagRequest | wire.FlagSend | wire.FlagFirst},
		{0x01, wire.FlagPayload | wire.FlagRequest | wire.FlagSend | wire.FlagMiddle},
		{0x0B, wire.FlagPayload | wire.FlagRequest | wire.FlagWrite | wire.FlagFirst | wire.FlagLast | wire.FlagImmediate},
		{0x0C, wire.FlagRequest | wire.FlagRead | wire.FlagFirst | wire.FlagLast},
		{0x0E, wire.FlagPayload | wire.FlagResponse | wire.FlagReadResponse | wire.FlagMiddle},
		{0x11, wire.FlagResponse | wire.FlagAck | wire.FlagFirst | wire.FlagLast},
		{0x12, wire.FlagResponse | wire.FlagAtomicAck | wire.FlagFirst | wire.FlagLast},
		{0x14, wire.FlagRequest | wire.FlagAtomic | wire.FlagFirst | wire.FlagLast},
		{0x17, wire.FlagPayload | wire.FlagRequest | wire.FlagSend | wire.FlagFirst | wire.FlagLast | wire.FlagInvalidate},
		{0x1C, wire.FlagRequest | wire.FlagFlush | wire.FlagFirst | wire.FlagLast},
		{0x1D, wire.FlagPayload | wire.FlagRequest | wire.FlagAtomicWrite | wire.FlagFirst | wire.FlagLast},
		{0x55, wire.FlagRequest | wire.FlagResync | wire.FlagFirst | wire.FlagLast},
		{0x65, wire.FlagPayload | wire.FlagRequest | wire.FlagSend | wire.FlagFirst | wire.FlagLast | wire.FlagImmediate},
		{0x81, wire.FlagCNP},
	} {
		if got := tc.op.Info().Flags; got != tc.flags {
			t.Errorf("%v: flags %#x, want %#x", tc.op, got, tc.flags)
		}
	}
}

// TestOpcodeSpotChecks spells out a few rows in full, offsets included.
func TestOpcodeSpotChecks(t *testing.T) {
	type hdrAt struct {
		h   wire.Header
		off int
	}
	for _, tc := range []struct {
		op        wire.Opcode
		name      string
		hdrs      []hdrAt
		headerLen int
		fixed     int
	}{
		{0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []hdrAt{{reth, 12}, {immdt, 28}}, 32, -1},
		{0x1C, "RC_FLUSH", []hdrAt{{feth, 12}, {reth, 16}}, 32, 0},
		{0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", []hdrAt{{deth, 12}, {immdt, 20}}, 24, -1},
		{0x12, "RC_ATOMIC_ACKNOWLEDGE", []hdrAt{{aeth, 12}, {atmack, 16}}, 24, 0},
		{0x1D, "RC_ATOMIC_WRITE", []hdrAt{{reth, 12}}, 28, 8},
		{0x13, "RC_COMPARE_SWAP", []hdrAt{{atmeth, 12}}, 40, 0},
		{0x04, "RC_SEND_ONLY", nil, 12, -1},
		{0x11, "RC_ACKNOWLEDGE", []hdrAt{{aeth, 12}}, 16, 0},
		{0x4B, "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []hdrAt{{rdeth, 12}, {deth, 16}, {reth, 24}, {immdt, 40}}, 44, -1},
		{0x52, "RD_ATOMIC_ACKNOWLEDGE", []hdrAt{{rdeth, 12}, {aeth, 16}, {atmack, 20}}, 28, 0},
		{0x55, "RD_RESYNC", []hdrAt{{rdeth, 12}, {deth, 16}}, 24, 0},
		{0xAB, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", []hdrAt{{xrceth, 12}, {reth, 16}, {immdt, 32}}, 36, -1},
		{0xB7, "XRC_SEND_ONLY_WITH_INVALIDATE", []hdrAt{{xrceth, 12}, {ieth, 16}}, 20, -1},
		{0xB1, "XRC_ACKNOWLEDGE", []hdrAt{{aeth, 12}}, 16, 0},
		{0x81, "CNP", []hdrAt{{cnpres, 12}}, 28, 0},
	} {
		info := tc.op.Info()
		if info.Name != tc.name {
			t.Errorf("%#02x: %q, want %q", uint8(tc.op), info.Name, tc.name)
			continue
		}
		n := 0
		for h := wire.Header(0); h.Size() > 0; h++ {
			if info.Has(h) {
				n++
			}
		}
		if n != len(tc.hdrs) {
			t.Errorf("%s: %d headers, want %d", tc.name, n, len(tc.hdrs))
		}
		for _, w := range tc.hdrs {
			if !info.Has(w.h) || int(info.Offset[w.h]) != w.off {
				t.Errorf("%s: %v has %v at %d, want at %d", tc.name, w.h, info.Has(w.h), info.Offset[w.h], w.off)
			}
		}
		if info.HeaderLen != tc.headerLen || info.FixedPayload != tc.fixed {
			t.Errorf("%s: HeaderLen %d FixedPayload %d, want %d %d", tc.name, info.HeaderLen, info.FixedPayload, tc.headerLen, tc.fixed)
		}
	}
	if wire.OpcodeCNP != 0x81 || wire.OpcodeRCSendOnly != 0x04 || wire.OpcodeRCAcknowledge != 0x11 ||
		wire.OpcodeUDSendOnly != 0x64 || wire.OpcodeUDSendOnlyWithImmediate != 0x65 {
		t.Error("named opcode constants are wrong")
	}
}

func TestHeaderNamesAndSizes(t *testing.T) {
	for _, tc := range []struct {
		h    wire.Header
		name string
		size int
	}{
		{rdeth, "RDETH", 4}, {deth, "DETH", 8}, {xrceth, "XRCETH", 4}, {feth, "FETH", 4},
		{reth, "RETH", 16}, {atmeth, "AtomicETH", 28}, {aeth, "AETH", 4}, {atmack, "AtomicAckETH", 8},
		{immdt, "ImmDt", 4}, {ieth, "IETH", 4}, {cnpres, "CNP reserved", 16},
	} {
		if tc.h.String() != tc.name || tc.h.Size() != tc.size {
			t.Errorf("Header %d: %q size %d, want %q %d", tc.h, tc.h.String(), tc.h.Size(), tc.name, tc.size)
		}
	}
	if h := wire.Header(11); h.Size() != 0 || h.String() != "Header(11)" {
		t.Errorf("Header(11): %q size %d", h.String(), h.Size())
	}
}
