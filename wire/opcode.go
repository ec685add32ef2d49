package wire

//go:generate go run ../internal/enumgen

import "fmt"

// Opcode is the BTH OpCode (IBTA Vol 1 §9.2.1, Table 35): the upper three
// bits select the transport service, the lower five the operation.
type Opcode uint8

// Transport services, the upper three bits of an Opcode.
const (
	TransportRC  Opcode = 0x00 // Reliable Connection
	TransportUC  Opcode = 0x20 // Unreliable Connection
	TransportRD  Opcode = 0x40 // Reliable Datagram
	TransportUD  Opcode = 0x60 // Unreliable Datagram
	TransportCNP Opcode = 0x80 // Congestion Notification (RoCE v2, Annex A17.9.3)
	TransportXRC Opcode = 0xA0 // Extended Reliable Connection
)

// Operations, the lower five bits of an Opcode (IBTA Vol 1 Table 35).
const (
	OpSendFirst                   Opcode = 0x00
	OpSendMiddle                  Opcode = 0x01
	OpSendLast                    Opcode = 0x02
	OpSendLastWithImmediate       Opcode = 0x03
	OpSendOnly                    Opcode = 0x04
	OpSendOnlyWithImmediate       Opcode = 0x05
	OpWriteFirst                  Opcode = 0x06
	OpWriteMiddle                 Opcode = 0x07
	OpWriteLast                   Opcode = 0x08
	OpWriteLastWithImmediate      Opcode = 0x09
	OpWriteOnly                   Opcode = 0x0A
	OpWriteOnlyWithImmediate      Opcode = 0x0B
	OpReadRequest                 Opcode = 0x0C
	OpReadResponseFirst           Opcode = 0x0D
	OpReadResponseMiddle          Opcode = 0x0E
	OpReadResponseLast            Opcode = 0x0F
	OpReadResponseOnly            Opcode = 0x10
	OpAcknowledge                 Opcode = 0x11
	OpAtomicAcknowledge           Opcode = 0x12
	OpCompareSwap                 Opcode = 0x13
	OpFetchAdd                    Opcode = 0x14
	OpResync                      Opcode = 0x15 // RD only
	OpSendLastWithInvalidate      Opcode = 0x16
	OpSendOnlyWithInvalidate      Opcode = 0x17
	OpFlush                       Opcode = 0x1C // IBTA 1.5 Memory Placement Extensions
	OpAtomicWrite                 Opcode = 0x1D // IBTA 1.5 Memory Placement Extensions
	OpCNP                         Opcode = 0x01 // with TransportCNP: 0x81
	opMask                        Opcode = 0x1F
	transportMask                 Opcode = 0xE0
	OpcodeCNP                            = TransportCNP | OpCNP
	OpcodeRCSendOnly                     = TransportRC | OpSendOnly
	OpcodeRCAcknowledge                  = TransportRC | OpAcknowledge
	OpcodeUDSendOnly                     = TransportUD | OpSendOnly
	OpcodeUDSendOnlyWithImmediate        = TransportUD | OpSendOnlyWithImmediate
)

// Transport returns the transport-service bits of o.
func (o Opcode) Transport() Opcode { return o & transportMask }

// Operation returns the operation bits of o.
func (o Opcode) Operation() Opcode { return o & opMask }

// Info returns o's entry in the opcode table.
func (o Opcode) Info() *OpInfo { return &opcodeTable[o] }

// Valid reports whether o is defined by the IBTA (and this table).
func (o Opcode) Valid() bool { return opcodeTable[o].Name != "" }

// String returns the IBTA name without the IB_OPCODE_ prefix Linux uses,
// e.g. "RC_SEND_ONLY", or "OPCODE_0x1e" for an undefined opcode.
func (o Opcode) String() string {
	if n := opcodeTable[o].Name; n != "" {
		return n
	}
	return fmt.Sprintf("OPCODE_%#02x", uint8(o))
}

// Header identifies one transport header after the BTH. The constants are in
// the order the headers appear in a packet (IBTA Vol 1 §9.2, Figure 24), so
// a header's offset is the sum of the sizes of the present headers before it.
// String returns the header's IBTA name.
//
//enum:string Header(%d)
type Header uint8

// Extended transport headers.
const (
	HdrRDETH        Header = iota // "RDETH": Reliable Datagram ETH, 4 bytes
	HdrDETH                       // "DETH": Datagram ETH, 8 bytes
	HdrXRCETH                     // "XRCETH": XRC ETH, 4 bytes
	HdrFETH                       // "FETH": FLUSH ETH, 4 bytes (precedes the RETH)
	HdrRETH                       // "RETH": RDMA ETH, 16 bytes
	HdrAtomicETH                  // "AtomicETH": Atomic ETH, 28 bytes
	HdrAETH                       // "AETH": ACK ETH, 4 bytes
	HdrAtomicAckETH               // "AtomicAckETH": Atomic ACK ETH, 8 bytes
	HdrImmDt                      // "ImmDt": Immediate data, 4 bytes
	HdrIETH                       // "IETH": Invalidate ETH, 4 bytes
	HdrCNPReserved                // "CNP reserved": 16 reserved bytes of a CNP (RoCE v2 Annex A17.9.3)
	numHeaders
)

var headerInfo = [numHeaders]struct {
	size int
}{
	HdrRDETH:        {RDETHLen},
	HdrDETH:         {DETHLen},
	HdrXRCETH:       {XRCETHLen},
	HdrFETH:         {FETHLen},
	HdrRETH:         {RETHLen},
	HdrAtomicETH:    {AtomicETHLen},
	HdrAETH:         {AETHLen},
	HdrAtomicAckETH: {AtomicAckETHLen},
	HdrImmDt:        {ImmDtLen},
	HdrIETH:         {IETHLen},
	HdrCNPReserved:  {CNPReservedLen},
}

// Size returns the header's length in bytes.
func (h Header) Size() int {
	if h < numHeaders {
		return headerInfo[h].size
	}
	return 0
}

// HeaderMask is a set of Headers.
type HeaderMask uint16

// Has reports whether h is in m.
func (m HeaderMask) Has(h Header) bool { return m&(1<<h) != 0 }

func mask(hs ...Header) HeaderMask {
	var m HeaderMask
	for _, h := range hs {
		m |= 1 << h
	}
	return m
}

// OpFlags describe what an opcode does; they drive the requester, responder
// and completer as rxe's RXE_*_MASK bits do (drivers/infiniband/sw/rxe/rxe_opcode.h).
type OpFlags uint32

// Opcode flags.
const (
	FlagPayload      OpFlags = 1 << iota // carries a payload
	FlagRequest                          // sent by a requester
	FlagResponse                         // sent by a responder (ACK, read response, atomic ACK)
	FlagFirst                            // first packet of a multi-packet message
	FlagMiddle                           // middle packet
	FlagLast                             // last packet (FlagFirst|FlagLast = an ONLY packet)
	FlagSend                             // SEND family
	FlagWrite                            // RDMA WRITE family
	FlagRead                             // RDMA READ request
	FlagAtomic                           // Compare&Swap or Fetch&Add request
	FlagImmediate                        // carries ImmDt
	FlagInvalidate                       // carries IETH
	FlagAck                              // ACK/NAK
	FlagReadResponse                     // RDMA READ response
	FlagAtomicAck                        // Atomic acknowledge
	FlagFlush                            // FLUSH request
	FlagAtomicWrite                      // ATOMIC WRITE request
	FlagResync                           // RD RESYNC
	FlagCNP                              // congestion notification
)

// OpInfo is one row of the opcode table.
type OpInfo struct {
	Name    string     // IBTA name, e.g. "RC_RDMA_WRITE_FIRST"; "" for undefined opcodes
	Flags   OpFlags    // what the opcode does
	Headers HeaderMask // the headers between BTH and payload
	// Offset[h] is header h's offset from the start of the BTH, valid when
	// Headers.Has(h).
	Offset [numHeaders]uint8
	// HeaderLen is the length of BTH plus every extended header: the offset
	// of the payload.
	HeaderLen int
	// FixedPayload is the exact payload length for opcodes that define one
	// (8 for ATOMIC_WRITE), else -1 (payload opcodes) or 0 (no payload).
	FixedPayload int
}

// Has reports whether packets of this opcode carry header h.
func (i *OpInfo) Has(h Header) bool { return i.Headers.Has(h) }

// Is reports whether all of f are set.
func (i *OpInfo) Is(f OpFlags) bool { return i.Flags&f == f }

// opcodeTable is the whole opcode table, built once from the per-operation
// rows below and the per-transport rules of IBTA Vol 1 §9.2 and Table 35.
var opcodeTable = buildOpcodeTable()

// Opcodes returns a copy of the opcode table indexed by opcode.
func Opcodes() [256]OpInfo { return opcodeTable }

type opRow struct {
	op    Opcode
	name  string
	flags OpFlags
	hdrs  HeaderMask
	fixed int
}

// opRows lists every operation with the headers it carries on RC; the other
// transports add or drop headers in buildOpcodeTable.
var opRows = []opRow{
	{OpSendFirst, "SEND_FIRST", FlagPayload | FlagRequest | FlagSend | FlagFirst, 0, -1},
	{OpSendMiddle, "SEND_MIDDLE", FlagPayload | FlagRequest | FlagSend | FlagMiddle, 0, -1},
	{OpSendLast, "SEND_LAST", FlagPayload | FlagRequest | FlagSend | FlagLast, 0, -1},
	{OpSendLastWithImmediate, "SEND_LAST_WITH_IMMEDIATE", FlagPayload | FlagRequest | FlagSend | FlagLast | FlagImmediate, mask(HdrImmDt), -1},
	{OpSendOnly, "SEND_ONLY", FlagPayload | FlagRequest | FlagSend | FlagFirst | FlagLast, 0, -1},
	{OpSendOnlyWithImmediate, "SEND_ONLY_WITH_IMMEDIATE", FlagPayload | FlagRequest | FlagSend | FlagFirst | FlagLast | FlagImmediate, mask(HdrImmDt), -1},
	{OpWriteFirst, "RDMA_WRITE_FIRST", FlagPayload | FlagRequest | FlagWrite | FlagFirst, mask(HdrRETH), -1},
	{OpWriteMiddle, "RDMA_WRITE_MIDDLE", FlagPayload | FlagRequest | FlagWrite | FlagMiddle, 0, -1},
	{OpWriteLast, "RDMA_WRITE_LAST", FlagPayload | FlagRequest | FlagWrite | FlagLast, 0, -1},
	{OpWriteLastWithImmediate, "RDMA_WRITE_LAST_WITH_IMMEDIATE", FlagPayload | FlagRequest | FlagWrite | FlagLast | FlagImmediate, mask(HdrImmDt), -1},
	{OpWriteOnly, "RDMA_WRITE_ONLY", FlagPayload | FlagRequest | FlagWrite | FlagFirst | FlagLast, mask(HdrRETH), -1},
	{OpWriteOnlyWithImmediate, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", FlagPayload | FlagRequest | FlagWrite | FlagFirst | FlagLast | FlagImmediate, mask(HdrRETH, HdrImmDt), -1},
	{OpReadRequest, "RDMA_READ_REQUEST", FlagRequest | FlagRead | FlagFirst | FlagLast, mask(HdrRETH), 0},
	{OpReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", FlagPayload | FlagResponse | FlagReadResponse | FlagFirst, mask(HdrAETH), -1},
	{OpReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", FlagPayload | FlagResponse | FlagReadResponse | FlagMiddle, 0, -1},
	{OpReadResponseLast, "RDMA_READ_RESPONSE_LAST", FlagPayload | FlagResponse | FlagReadResponse | FlagLast, mask(HdrAETH), -1},
	{OpReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", FlagPayload | FlagResponse | FlagReadResponse | FlagFirst | FlagLast, mask(HdrAETH), -1},
	{OpAcknowledge, "ACKNOWLEDGE", FlagResponse | FlagAck | FlagFirst | FlagLast, mask(HdrAETH), 0},
	{OpAtomicAcknowledge, "ATOMIC_ACKNOWLEDGE", FlagResponse | FlagAtomicAck | FlagFirst | FlagLast, mask(HdrAETH, HdrAtomicAckETH), 0},
	{OpCompareSwap, "COMPARE_SWAP", FlagRequest | FlagAtomic | FlagFirst | FlagLast, mask(HdrAtomicETH), 0},
	{OpFetchAdd, "FETCH_ADD", FlagRequest | FlagAtomic | FlagFirst | FlagLast, mask(HdrAtomicETH), 0},
	{OpResync, "RESYNC", FlagRequest | FlagResync | FlagFirst | FlagLast, 0, 0},
	{OpSendLastWithInvalidate, "SEND_LAST_WITH_INVALIDATE", FlagPayload | FlagRequest | FlagSend | FlagLast | FlagInvalidate, mask(HdrIETH), -1},
	{OpSendOnlyWithInvalidate, "SEND_ONLY_WITH_INVALIDATE", FlagPayload | FlagRequest | FlagSend | FlagFirst | FlagLast | FlagInvalidate, mask(HdrIETH), -1},
	{OpFlush, "FLUSH", FlagRequest | FlagFlush | FlagFirst | FlagLast, mask(HdrFETH, HdrRETH), 0},
	{OpAtomicWrite, "ATOMIC_WRITE", FlagPayload | FlagRequest | FlagAtomicWrite | FlagFirst | FlagLast, mask(HdrRETH), 8},
}

func buildOpcodeTable() (t [256]OpInfo) {
	set := func(code Opcode, name string, flags OpFlags, hdrs HeaderMask, fixed int) {
		e := &t[code]
		e.Name, e.Flags, e.Headers, e.FixedPayload = name, flags, hdrs, fixed
		off := BTHLen
		for h := Header(0); h < numHeaders; h++ {
			if hdrs.Has(h) {
				e.Offset[h] = uint8(off)
				off += headerInfo[h].size
			}
		}
		e.HeaderLen = off
	}
	for _, r := range opRows {
		switch {
		case r.op <= OpFetchAdd || r.op == OpSendLastWithInvalidate || r.op == OpSendOnlyWithInvalidate ||
			r.op == OpFlush || r.op == OpAtomicWrite:
			set(TransportRC|r.op, "RC_"+r.name, r.flags, r.hdrs, r.fixed)
		}
		if r.op <= OpWriteOnlyWithImmediate { // UC: SEND and RDMA WRITE only (Table 35)
			set(TransportUC|r.op, "UC_"+r.name, r.flags, r.hdrs, r.fixed)
		}
		if r.op <= OpResync { // RD: RDETH on every packet, DETH on requests (§9.2.2, §9.2.3)
			h := r.hdrs | mask(HdrRDETH)
			if r.flags&FlagRequest != 0 {
				h |= mask(HdrDETH)
			}
			set(TransportRD|r.op, "RD_"+r.name, r.flags, h, r.fixed)
		}
		if r.op == OpSendOnly || r.op == OpSendOnlyWithImmediate { // UD (§9.2.3)
			set(TransportUD|r.op, "UD_"+r.name, r.flags, r.hdrs|mask(HdrDETH), r.fixed)
		}
		if r.op <= OpFetchAdd || r.op == OpSendLastWithInvalidate || r.op == OpSendOnlyWithInvalidate {
			// XRC (Annex A14): XRCETH on requests; responses are as on RC.
			h := r.hdrs
			if r.flags&FlagRequest != 0 {
				h |= mask(HdrXRCETH)
			}
			set(TransportXRC|r.op, "XRC_"+r.name, r.flags, h, r.fixed)
		}
	}
	set(OpcodeCNP, "CNP", FlagCNP, mask(HdrCNPReserved), 0)
	return t
}
