package mad

import "iter"

// This file holds the CM messages other than REQ (req.go). Each has a layout
// table (IBTA Vol 1 Chapter 12 message tables, offsets from the start of the
// attribute data; Linux's CM_* macros in include/rdma/ibta_vol1_c12.h give the
// same byte, bit and width), a view, a Fields struct and an encoder. The
// tables are read-only.

// ---------------------------------------------------------------------------
// MRA

// MRA is a view of the attribute data of a MsgRcptAck (IBTA Vol 1 §12.6.6,
// Table 107 "MRA Message Contents"): "received your message, the answer will
// take longer". It must be at least [DataLen] bytes long.
type MRA []byte

const (
	mraLocalCommID = iota
	mraRemoteCommID
	mraMessageMRAed
	mraReserved8
	mraServiceTimeout
	mraReserved9
	mraPrivateData
)

var mraLayout = [...]Field{
	mraLocalCommID:    {"LocalCommID", 0, 0, 32, KindHex},
	mraRemoteCommID:   {"RemoteCommID", 4, 0, 32, KindHex},
	mraMessageMRAed:   {"MessageMRAed", 8, 0, 2, KindMsgType},
	mraReserved8:      {"Reserved8", 8, 2, 6, KindReserved},
	mraServiceTimeout: {"ServiceTimeout", 9, 0, 5, KindTimeout},
	mraReserved9:      {"Reserved9", 9, 5, 3, KindReserved},
	mraPrivateData:    {"PrivateData", 10, 0, 8 * MRAPrivateDataLen, KindBytes},
}

func (m MRA) get(i int) uint64    { return mraLayout[i].getUint(m) }
func (m MRA) set(i int, v uint64) { mraLayout[i].setUint(m, v) }

// LocalCommID returns the sender's communication ID.
func (m MRA) LocalCommID() uint32 { return uint32(m.get(mraLocalCommID)) }

// RemoteCommID returns the receiver's communication ID.
func (m MRA) RemoteCommID() uint32 { return uint32(m.get(mraRemoteCommID)) }

// MessageMRAed returns which message is acknowledged (REQ, REP or LAP).
func (m MRA) MessageMRAed() MsgType { return MsgType(m.get(mraMessageMRAed)) }

// ServiceTimeout returns the 5-bit timeout exponent the sender needs to answer.
func (m MRA) ServiceTimeout() uint8 { return uint8(m.get(mraServiceTimeout)) }

// PrivateData returns the 222-byte private data field, aliasing m.
func (m MRA) PrivateData() []byte { return mraLayout[mraPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m MRA) SetLocalCommID(v uint32) { m.set(mraLocalCommID, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m MRA) SetRemoteCommID(v uint32) { m.set(mraRemoteCommID, uint64(v)) }

// SetMessageMRAed sets the acknowledged message type (2 bits).
func (m MRA) SetMessageMRAed(v MsgType) { m.set(mraMessageMRAed, uint64(v)) }

// SetServiceTimeout sets the service timeout (5 bits).
func (m MRA) SetServiceTimeout(v uint8) { m.set(mraServiceTimeout, uint64(v)) }

// All yields every field of the MRA, reserved ones included, in wire order.
func (m MRA) All() iter.Seq2[Field, Value] { return walk(mraLayout[:], m) }

// Fields decodes the MRA.
func (m MRA) Fields() MRAFields {
	return MRAFields{
		LocalCommID:    m.LocalCommID(),
		RemoteCommID:   m.RemoteCommID(),
		MessageMRAed:   m.MessageMRAed(),
		ServiceTimeout: m.ServiceTimeout(),
		PrivateData:    [MRAPrivateDataLen]byte(m.PrivateData()),
	}
}

// MRAFields holds the contents of an MRA.
type MRAFields struct {
	LocalCommID    uint32
	RemoteCommID   uint32
	MessageMRAed   MsgType // 2 bits
	ServiceTimeout uint8   // 5 bits
	PrivateData    [MRAPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b, truncating values wider
// than their field; Validate reports them.
func (f MRAFields) Append(b []byte) []byte { b, _ = f.appendChecked(b); return b }

// Validate reports the first value too wide for its field as a [*RangeError].
func (f MRAFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *MRAFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, mraLayout[:])
	e.uint(mraLocalCommID, uint64(f.LocalCommID))
	e.uint(mraRemoteCommID, uint64(f.RemoteCommID))
	e.uint(mraMessageMRAed, uint64(f.MessageMRAed))
	e.uint(mraServiceTimeout, uint64(f.ServiceTimeout))
	e.bytes(mraPrivateData, f.PrivateData[:])
	return b, e.err("MRA", mraLayout[:])
}

// ---------------------------------------------------------------------------
// REJ

// REJ is a view of the attribute data of a ConnectReject (IBTA Vol 1 §12.6.7,
// Table 108 "REJ Message Contents"). It must be at least [DataLen] bytes long.
type REJ []byte

const (
	rejLocalCommID = iota
	rejRemoteCommID
	rejMessageRejected
	rejReserved8
	rejRejectInfoLength
	rejReserved9
	rejReason
	rejARI
	rejPrivateData
)

var rejLayout = [...]Field{
	rejLocalCommID:      {"LocalCommID", 0, 0, 32, KindHex},
	rejRemoteCommID:     {"RemoteCommID", 4, 0, 32, KindHex},
	rejMessageRejected:  {"MessageRejected", 8, 0, 2, KindMsgType},
	rejReserved8:        {"Reserved8", 8, 2, 6, KindReserved},
	rejRejectInfoLength: {"RejectInfoLength", 9, 0, 7, KindUint},
	rejReserved9:        {"Reserved9", 9, 7, 1, KindReserved},
	rejReason:           {"Reason", 10, 0, 16, KindRejectReason},
	rejARI:              {"ARI", 12, 0, 8 * REJARILen, KindBytes},
	rejPrivateData:      {"PrivateData", 84, 0, 8 * REJPrivateDataLen, KindBytes},
}

func (m REJ) get(i int) uint64    { return rejLayout[i].getUint(m) }
func (m REJ) set(i int, v uint64) { rejLayout[i].setUint(m, v) }

// LocalCommID returns the sender's communication ID.
func (m REJ) LocalCommID() uint32 { return uint32(m.get(rejLocalCommID)) }

// RemoteCommID returns the receiver's communication ID (0 if unknown).
func (m REJ) RemoteCommID() uint32 { return uint32(m.get(rejRemoteCommID)) }

// MessageRejected returns which message is rejected (REQ, REP or none).
func (m REJ) MessageRejected() MsgType { return MsgType(m.get(rejMessageRejected)) }

// RejectInfoLength returns the 7-bit number of valid bytes in the ARI.
func (m REJ) RejectInfoLength() uint8 { return uint8(m.get(rejRejectInfoLength)) }

// Reason returns the reject reason.
func (m REJ) Reason() RejectReason { return RejectReason(m.get(rejReason)) }

// ARI returns the 72-byte Additional Rejection Information field, aliasing m.
// Only the first RejectInfoLength bytes are meaningful.
func (m REJ) ARI() []byte { return rejLayout[rejARI].bytes(m) }

// PrivateData returns the 148-byte private data field, aliasing m.
func (m REJ) PrivateData() []byte { return rejLayout[rejPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m REJ) SetLocalCommID(v uint32) { m.set(rejLocalCommID, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m REJ) SetRemoteCommID(v uint32) { m.set(rejRemoteCommID, uint64(v)) }

// SetMessageRejected sets the rejected message type (2 bits).
func (m REJ) SetMessageRejected(v MsgType) { m.set(rejMessageRejected, uint64(v)) }

// SetRejectInfoLength sets the ARI length (7 bits).
func (m REJ) SetRejectInfoLength(v uint8) { m.set(rejRejectInfoLength, uint64(v)) }

// SetReason sets the reject reason.
func (m REJ) SetReason(v RejectReason) { m.set(rejReason, uint64(v)) }

// All yields every field of the REJ, reserved ones included, in wire order.
func (m REJ) All() iter.Seq2[Field, Value] { return walk(rejLayout[:], m) }

// Fields decodes the REJ.
func (m REJ) Fields() REJFields {
	return REJFields{
		LocalCommID:      m.LocalCommID(),
		RemoteCommID:     m.RemoteCommID(),
		MessageRejected:  m.MessageRejected(),
		RejectInfoLength: m.RejectInfoLength(),
		Reason:           m.Reason(),
		ARI:              [REJARILen]byte(m.ARI()),
		PrivateData:      [REJPrivateDataLen]byte(m.PrivateData()),
	}
}

// REJFields holds the contents of a REJ.
type REJFields struct {
	LocalCommID      uint32
	RemoteCommID     uint32
	MessageRejected  MsgType // 2 bits
	RejectInfoLength uint8   // 7 bits
	Reason           RejectReason
	ARI              [REJARILen]byte
	PrivateData      [REJPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b, truncating values wider
// than their field; Validate reports them.
func (f REJFields) Append(b []byte) []byte { b, _ = f.appendChecked(b); return b }

// Validate reports the first value too wide for its field as a [*RangeError].
func (f REJFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *REJFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, rejLayout[:])
	e.uint(rejLocalCommID, uint64(f.LocalCommID))
	e.uint(rejRemoteCommID, uint64(f.RemoteCommID))
	e.uint(rejMessageRejected, uint64(f.MessageRejected))
	e.uint(rejRejectInfoLength, uint64(f.RejectInfoLength))
	e.uint(rejReason, uint64(f.Reason))
	e.bytes(rejARI, f.ARI[:])
	e.bytes(rejPrivateData, f.PrivateData[:])
	return b, e.err("REJ", rejLayout[:])
}

// ---------------------------------------------------------------------------
// REP

// REP is a view of the attribute data of a ConnectReply (IBTA Vol 1 §12.6.8,
// Table 110 "REP Message Contents"): the passive side's QP and up to 196
// bytes of private data. It must be at least [DataLen] bytes long.
type REP []byte

const (
	repLocalCommID = iota
	repRemoteCommID
	repLocalQKey
	repLocalQPN
	repVendorIDH
	repLocalEEContext
	repVendorIDM
	repStartingPSN
	repVendorIDL
	repResponderResources
	repInitiatorDepth
	repTargetACKDelay
	repFailoverAccepted
	repEndToEndFlowControl
	repRNRRetryCount
	repSRQ
	repReserved27
	repLocalCAGUID
	repPrivateData
)

var repLayout = [...]Field{
	repLocalCommID:         {"LocalCommID", 0, 0, 32, KindHex},
	repRemoteCommID:        {"RemoteCommID", 4, 0, 32, KindHex},
	repLocalQKey:           {"LocalQKey", 8, 0, 32, KindHex},
	repLocalQPN:            {"LocalQPN", 12, 0, 24, KindHex},
	repVendorIDH:           {"VendorIDH", 15, 0, 8, KindHex}, // VendorID[23:16]
	repLocalEEContext:      {"LocalEEContext", 16, 0, 24, KindHex},
	repVendorIDM:           {"VendorIDM", 19, 0, 8, KindHex}, // VendorID[15:8]
	repStartingPSN:         {"StartingPSN", 20, 0, 24, KindHex},
	repVendorIDL:           {"VendorIDL", 23, 0, 8, KindHex}, // VendorID[7:0]
	repResponderResources:  {"ResponderResources", 24, 0, 8, KindUint},
	repInitiatorDepth:      {"InitiatorDepth", 25, 0, 8, KindUint},
	repTargetACKDelay:      {"TargetACKDelay", 26, 0, 5, KindTimeout},
	repFailoverAccepted:    {"FailoverAccepted", 26, 5, 2, KindUint},
	repEndToEndFlowControl: {"EndToEndFlowControl", 26, 7, 1, KindFlag},
	repRNRRetryCount:       {"RNRRetryCount", 27, 0, 3, KindUint},
	repSRQ:                 {"SRQ", 27, 3, 1, KindFlag},
	repReserved27:          {"Reserved27", 27, 4, 4, KindReserved},
	repLocalCAGUID:         {"LocalCAGUID", 28, 0, 64, KindHex},
	repPrivateData:         {"PrivateData", 36, 0, 8 * REPPrivateDataLen, KindBytes},
}

func (m REP) get(i int) uint64    { return repLayout[i].getUint(m) }
func (m REP) set(i int, v uint64) { repLayout[i].setUint(m, v) }

// LocalCommID returns the passive side's communication ID.
func (m REP) LocalCommID() uint32 { return uint32(m.get(repLocalCommID)) }

// RemoteCommID returns the active side's communication ID (the REQ's LocalCommID).
func (m REP) RemoteCommID() uint32 { return uint32(m.get(repRemoteCommID)) }

// LocalQKey returns the passive side's Q_Key (RD only).
func (m REP) LocalQKey() uint32 { return uint32(m.get(repLocalQKey)) }

// LocalQPN returns the passive side's 24-bit QP number.
func (m REP) LocalQPN() uint32 { return uint32(m.get(repLocalQPN)) }

// VendorID returns the 24-bit Vendor ID of Enhanced Connection Establishment
// (ECE, added to IBTA Vol 1 Table 110 by IBA comment 9434; Linux
// CM_REP_VENDOR_ID_H/M/L), whose bytes sit at 15, 19 and 23: it names the
// vendor whose ECE options the MAD header's AttributeModifier carries. Zero
// when the sender does not use ECE.
func (m REP) VendorID() uint32 {
	return uint32(joinUint(repLayout[:], m, repVendorIDH, repVendorIDM, repVendorIDL))
}

// LocalEEContext returns the passive side's 24-bit EE context number (RD; the
// XRC target SRQ number for XRC).
func (m REP) LocalEEContext() uint32 { return uint32(m.get(repLocalEEContext)) }

// StartingPSN returns the 24-bit PSN the passive side will send first.
func (m REP) StartingPSN() uint32 { return uint32(m.get(repStartingPSN)) }

// ResponderResources returns the RDMA read/atomic depth the passive side accepts.
func (m REP) ResponderResources() uint8 { return uint8(m.get(repResponderResources)) }

// InitiatorDepth returns the RDMA read/atomic depth the passive side initiates.
func (m REP) InitiatorDepth() uint8 { return uint8(m.get(repInitiatorDepth)) }

// TargetACKDelay returns the 5-bit exponent of the passive side's ACK delay.
func (m REP) TargetACKDelay() uint8 { return uint8(m.get(repTargetACKDelay)) }

// FailoverAccepted returns the 2-bit answer to the alternate path: 0 accepted,
// 1 failover not supported, 2 rejected.
func (m REP) FailoverAccepted() uint8 { return uint8(m.get(repFailoverAccepted)) }

// EndToEndFlowControl reports the end-to-end flow control bit.
func (m REP) EndToEndFlowControl() bool { return m.get(repEndToEndFlowControl) != 0 }

// RNRRetryCount returns the 3-bit RNR NAK retry count.
func (m REP) RNRRetryCount() uint8 { return uint8(m.get(repRNRRetryCount)) }

// SRQ reports whether the passive side's QP uses a shared receive queue.
func (m REP) SRQ() bool { return m.get(repSRQ) != 0 }

// LocalCAGUID returns the passive side's CA GUID.
func (m REP) LocalCAGUID() uint64 { return m.get(repLocalCAGUID) }

// PrivateData returns the 196-byte private data field, aliasing m.
func (m REP) PrivateData() []byte { return repLayout[repPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m REP) SetLocalCommID(v uint32) { m.set(repLocalCommID, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m REP) SetRemoteCommID(v uint32) { m.set(repRemoteCommID, uint64(v)) }

// SetLocalQKey sets the local Q_Key.
func (m REP) SetLocalQKey(v uint32) { m.set(repLocalQKey, uint64(v)) }

// SetLocalQPN sets the local QPN; only the low 24 bits are stored.
func (m REP) SetLocalQPN(v uint32) { m.set(repLocalQPN, uint64(v)) }

// SetVendorID sets the ECE Vendor ID; only the low 24 bits are stored.
func (m REP) SetVendorID(v uint32) {
	splitUint(repLayout[:], m, uint64(v), repVendorIDH, repVendorIDM, repVendorIDL)
}

// SetLocalEEContext sets the local EE context number; only the low 24 bits
// are stored.
func (m REP) SetLocalEEContext(v uint32) { m.set(repLocalEEContext, uint64(v)) }

// SetStartingPSN sets the starting PSN; only the low 24 bits are stored.
func (m REP) SetStartingPSN(v uint32) { m.set(repStartingPSN, uint64(v)) }

// SetResponderResources sets the responder resources.
func (m REP) SetResponderResources(v uint8) { m.set(repResponderResources, uint64(v)) }

// SetInitiatorDepth sets the initiator depth.
func (m REP) SetInitiatorDepth(v uint8) { m.set(repInitiatorDepth, uint64(v)) }

// SetTargetACKDelay sets the target ACK delay (5 bits).
func (m REP) SetTargetACKDelay(v uint8) { m.set(repTargetACKDelay, uint64(v)) }

// SetFailoverAccepted sets the failover accepted code (2 bits).
func (m REP) SetFailoverAccepted(v uint8) { m.set(repFailoverAccepted, uint64(v)) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (m REP) SetEndToEndFlowControl(v bool) { m.set(repEndToEndFlowControl, b2u(v)) }

// SetRNRRetryCount sets the RNR retry count (3 bits).
func (m REP) SetRNRRetryCount(v uint8) { m.set(repRNRRetryCount, uint64(v)) }

// SetSRQ sets the SRQ bit.
func (m REP) SetSRQ(v bool) { m.set(repSRQ, b2u(v)) }

// SetLocalCAGUID sets the local CA GUID.
func (m REP) SetLocalCAGUID(v uint64) { m.set(repLocalCAGUID, v) }

// All yields every field of the REP, reserved ones included, in wire order.
func (m REP) All() iter.Seq2[Field, Value] { return walk(repLayout[:], m) }

// Fields decodes the REP.
func (m REP) Fields() REPFields {
	return REPFields{
		LocalCommID:         m.LocalCommID(),
		RemoteCommID:        m.RemoteCommID(),
		LocalQKey:           m.LocalQKey(),
		LocalQPN:            m.LocalQPN(),
		VendorID:            m.VendorID(),
		LocalEEContext:      m.LocalEEContext(),
		StartingPSN:         m.StartingPSN(),
		ResponderResources:  m.ResponderResources(),
		InitiatorDepth:      m.InitiatorDepth(),
		TargetACKDelay:      m.TargetACKDelay(),
		FailoverAccepted:    m.FailoverAccepted(),
		EndToEndFlowControl: m.EndToEndFlowControl(),
		RNRRetryCount:       m.RNRRetryCount(),
		SRQ:                 m.SRQ(),
		LocalCAGUID:         m.LocalCAGUID(),
		PrivateData:         [REPPrivateDataLen]byte(m.PrivateData()),
	}
}

// REPFields holds the contents of a REP. Reserved bits are encoded as zero.
type REPFields struct {
	LocalCommID         uint32
	RemoteCommID        uint32
	LocalQKey           uint32
	LocalQPN            uint32 // 24 bits
	VendorID            uint32 // 24 bits: ECE Vendor ID, split over bytes 15, 19, 23
	LocalEEContext      uint32 // 24 bits
	StartingPSN         uint32 // 24 bits
	ResponderResources  uint8
	InitiatorDepth      uint8
	TargetACKDelay      uint8 // 5 bits
	FailoverAccepted    uint8 // 2 bits
	EndToEndFlowControl bool
	RNRRetryCount       uint8 // 3 bits
	SRQ                 bool
	LocalCAGUID         uint64
	PrivateData         [REPPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b, truncating values wider
// than their field; Validate reports them.
func (f REPFields) Append(b []byte) []byte { b, _ = f.appendChecked(b); return b }

// Validate reports the first value too wide for its field as a [*RangeError].
func (f REPFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *REPFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, repLayout[:])
	e.uint(repLocalCommID, uint64(f.LocalCommID))
	e.uint(repRemoteCommID, uint64(f.RemoteCommID))
	e.uint(repLocalQKey, uint64(f.LocalQKey))
	e.uint(repLocalQPN, uint64(f.LocalQPN))
	e.split(uint64(f.VendorID), repVendorIDH, repVendorIDM, repVendorIDL)
	e.uint(repLocalEEContext, uint64(f.LocalEEContext))
	e.uint(repStartingPSN, uint64(f.StartingPSN))
	e.uint(repResponderResources, uint64(f.ResponderResources))
	e.uint(repInitiatorDepth, uint64(f.InitiatorDepth))
	e.uint(repTargetACKDelay, uint64(f.TargetACKDelay))
	e.uint(repFailoverAccepted, uint64(f.FailoverAccepted))
	e.flag(repEndToEndFlowControl, f.EndToEndFlowControl)
	e.uint(repRNRRetryCount, uint64(f.RNRRetryCount))
	e.flag(repSRQ, f.SRQ)
	e.uint(repLocalCAGUID, f.LocalCAGUID)
	e.bytes(repPrivateData, f.PrivateData[:])
	return b, e.err("REP", repLayout[:])
}

// ---------------------------------------------------------------------------
// RTU

// RTU is a view of the attribute data of a ReadyToUse (IBTA Vol 1 §12.6.9,
// Table 111 "RTU Message Contents"). It must be at least [DataLen] bytes long.
type RTU []byte

const (
	rtuLocalCommID = iota
	rtuRemoteCommID
	rtuPrivateData
)

var rtuLayout = [...]Field{
	rtuLocalCommID:  {"LocalCommID", 0, 0, 32, KindHex},
	rtuRemoteCommID: {"RemoteCommID", 4, 0, 32, KindHex},
	rtuPrivateData:  {"PrivateData", 8, 0, 8 * RTUPrivateDataLen, KindBytes},
}

// LocalCommID returns the sender's (active side's) communication ID.
func (m RTU) LocalCommID() uint32 { return uint32(rtuLayout[rtuLocalCommID].getUint(m)) }

// RemoteCommID returns the receiver's communication ID.
func (m RTU) RemoteCommID() uint32 { return uint32(rtuLayout[rtuRemoteCommID].getUint(m)) }

// PrivateData returns the 224-byte private data field, aliasing m.
func (m RTU) PrivateData() []byte { return rtuLayout[rtuPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m RTU) SetLocalCommID(v uint32) { rtuLayout[rtuLocalCommID].setUint(m, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m RTU) SetRemoteCommID(v uint32) { rtuLayout[rtuRemoteCommID].setUint(m, uint64(v)) }

// All yields every field of the RTU in wire order.
func (m RTU) All() iter.Seq2[Field, Value] { return walk(rtuLayout[:], m) }

// Fields decodes the RTU.
func (m RTU) Fields() RTUFields {
	return RTUFields{
		LocalCommID:  m.LocalCommID(),
		RemoteCommID: m.RemoteCommID(),
		PrivateData:  [RTUPrivateDataLen]byte(m.PrivateData()),
	}
}

// RTUFields holds the contents of an RTU.
type RTUFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [RTUPrivateDataLen]byte
}

// Validate returns nil: every field of RTUFields fits its wire width.
func (RTUFields) Validate() error { return nil }

// Append appends the 232-byte attribute data to b.
func (f RTUFields) Append(b []byte) []byte {
	e, b := newEncoder(b, DataLen, rtuLayout[:])
	e.uint(rtuLocalCommID, uint64(f.LocalCommID))
	e.uint(rtuRemoteCommID, uint64(f.RemoteCommID))
	e.bytes(rtuPrivateData, f.PrivateData[:])
	return b
}

// ---------------------------------------------------------------------------
// DREQ

// DREQ is a view of the attribute data of a DisconnectRequest (IBTA Vol 1
// §12.6.10, Table 112 "DREQ Message Contents"). It must be at least [DataLen]
// bytes long.
type DREQ []byte

const (
	dreqLocalCommID = iota
	dreqRemoteCommID
	dreqRemoteQPN
	dreqReserved11
	dreqPrivateData
)

var dreqLayout = [...]Field{
	dreqLocalCommID:  {"LocalCommID", 0, 0, 32, KindHex},
	dreqRemoteCommID: {"RemoteCommID", 4, 0, 32, KindHex},
	dreqRemoteQPN:    {"RemoteQPN", 8, 0, 24, KindHex},
	dreqReserved11:   {"Reserved11", 11, 0, 8, KindReserved},
	dreqPrivateData:  {"PrivateData", 12, 0, 8 * DREQPrivateDataLen, KindBytes},
}

// LocalCommID returns the sender's communication ID.
func (m DREQ) LocalCommID() uint32 { return uint32(dreqLayout[dreqLocalCommID].getUint(m)) }

// RemoteCommID returns the receiver's communication ID.
func (m DREQ) RemoteCommID() uint32 { return uint32(dreqLayout[dreqRemoteCommID].getUint(m)) }

// RemoteQPN returns the 24-bit "Remote QPN/EECN": the receiver's QP (or EE
// context) being disconnected.
func (m DREQ) RemoteQPN() uint32 { return uint32(dreqLayout[dreqRemoteQPN].getUint(m)) }

// PrivateData returns the 220-byte private data field, aliasing m.
func (m DREQ) PrivateData() []byte { return dreqLayout[dreqPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m DREQ) SetLocalCommID(v uint32) { dreqLayout[dreqLocalCommID].setUint(m, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m DREQ) SetRemoteCommID(v uint32) { dreqLayout[dreqRemoteCommID].setUint(m, uint64(v)) }

// SetRemoteQPN sets the remote QPN/EECN; only the low 24 bits are stored.
func (m DREQ) SetRemoteQPN(v uint32) { dreqLayout[dreqRemoteQPN].setUint(m, uint64(v)) }

// All yields every field of the DREQ, reserved ones included, in wire order.
func (m DREQ) All() iter.Seq2[Field, Value] { return walk(dreqLayout[:], m) }

// Fields decodes the DREQ.
func (m DREQ) Fields() DREQFields {
	return DREQFields{
		LocalCommID:  m.LocalCommID(),
		RemoteCommID: m.RemoteCommID(),
		RemoteQPN:    m.RemoteQPN(),
		PrivateData:  [DREQPrivateDataLen]byte(m.PrivateData()),
	}
}

// DREQFields holds the contents of a DREQ.
type DREQFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	RemoteQPN    uint32 // 24 bits: Remote QPN/EECN
	PrivateData  [DREQPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b, truncating values wider
// than their field; Validate reports them.
func (f DREQFields) Append(b []byte) []byte { b, _ = f.appendChecked(b); return b }

// Validate reports the first value too wide for its field as a [*RangeError].
func (f DREQFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *DREQFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, dreqLayout[:])
	e.uint(dreqLocalCommID, uint64(f.LocalCommID))
	e.uint(dreqRemoteCommID, uint64(f.RemoteCommID))
	e.uint(dreqRemoteQPN, uint64(f.RemoteQPN))
	e.bytes(dreqPrivateData, f.PrivateData[:])
	return b, e.err("DREQ", dreqLayout[:])
}

// ---------------------------------------------------------------------------
// DREP

// DREP is a view of the attribute data of a DisconnectReply (IBTA Vol 1
// §12.6.11, Table 113 "DREP Message Contents"). It must be at least [DataLen]
// bytes long.
type DREP []byte

const (
	drepLocalCommID = iota
	drepRemoteCommID
	drepPrivateData
)

var drepLayout = [...]Field{
	drepLocalCommID:  {"LocalCommID", 0, 0, 32, KindHex},
	drepRemoteCommID: {"RemoteCommID", 4, 0, 32, KindHex},
	drepPrivateData:  {"PrivateData", 8, 0, 8 * DREPPrivateDataLen, KindBytes},
}

// LocalCommID returns the sender's communication ID.
func (m DREP) LocalCommID() uint32 { return uint32(drepLayout[drepLocalCommID].getUint(m)) }

// RemoteCommID returns the receiver's communication ID.
func (m DREP) RemoteCommID() uint32 { return uint32(drepLayout[drepRemoteCommID].getUint(m)) }

// PrivateData returns the 224-byte private data field, aliasing m.
func (m DREP) PrivateData() []byte { return drepLayout[drepPrivateData].bytes(m) }

// SetLocalCommID sets the local communication ID.
func (m DREP) SetLocalCommID(v uint32) { drepLayout[drepLocalCommID].setUint(m, uint64(v)) }

// SetRemoteCommID sets the remote communication ID.
func (m DREP) SetRemoteCommID(v uint32) { drepLayout[drepRemoteCommID].setUint(m, uint64(v)) }

// All yields every field of the DREP in wire order.
func (m DREP) All() iter.Seq2[Field, Value] { return walk(drepLayout[:], m) }

// Fields decodes the DREP.
func (m DREP) Fields() DREPFields {
	return DREPFields{
		LocalCommID:  m.LocalCommID(),
		RemoteCommID: m.RemoteCommID(),
		PrivateData:  [DREPPrivateDataLen]byte(m.PrivateData()),
	}
}

// DREPFields holds the contents of a DREP.
type DREPFields struct {
	LocalCommID  uint32
	RemoteCommID uint32
	PrivateData  [DREPPrivateDataLen]byte
}

// Validate returns nil: every field of DREPFields fits its wire width.
func (DREPFields) Validate() error { return nil }

// Append appends the 232-byte attribute data to b.
func (f DREPFields) Append(b []byte) []byte {
	e, b := newEncoder(b, DataLen, drepLayout[:])
	e.uint(drepLocalCommID, uint64(f.LocalCommID))
	e.uint(drepRemoteCommID, uint64(f.RemoteCommID))
	e.bytes(drepPrivateData, f.PrivateData[:])
	return b
}

// ---------------------------------------------------------------------------
// SIDR_REQ

// SIDRREQ is a view of the attribute data of a ServiceIDResReq (IBTA Vol 1
// §12.11.1, Table 119 "SIDR_REQ Message Contents"): which UD QP serves this
// service ID? It must be at least [DataLen] bytes long.
type SIDRREQ []byte

const (
	sidrreqRequestID = iota
	sidrreqPartitionKey
	sidrreqReserved6
	sidrreqServiceID
	sidrreqPrivateData
)

var sidrreqLayout = [...]Field{
	sidrreqRequestID:    {"RequestID", 0, 0, 32, KindHex},
	sidrreqPartitionKey: {"PartitionKey", 4, 0, 16, KindHex},
	sidrreqReserved6:    {"Reserved6", 6, 0, 16, KindReserved},
	sidrreqServiceID:    {"ServiceID", 8, 0, 64, KindServiceID},
	sidrreqPrivateData:  {"PrivateData", 16, 0, 8 * SIDRREQPrivateDataLen, KindBytes},
}

// RequestID returns the requester's ID, echoed in the SIDR_REP.
func (m SIDRREQ) RequestID() uint32 { return uint32(sidrreqLayout[sidrreqRequestID].getUint(m)) }

// PartitionKey returns the P_Key the requester will use.
func (m SIDRREQ) PartitionKey() uint16 {
	return uint16(sidrreqLayout[sidrreqPartitionKey].getUint(m))
}

// ServiceID returns the service to resolve.
func (m SIDRREQ) ServiceID() ServiceID {
	return ServiceID(sidrreqLayout[sidrreqServiceID].getUint(m))
}

// PrivateData returns the 216-byte private data field, aliasing m. With an IP
// CM service ID its first 36 bytes are the IP CM header; see [SIDRREQ.IPCM].
func (m SIDRREQ) PrivateData() []byte { return sidrreqLayout[sidrreqPrivateData].bytes(m) }

// IPCM returns the IP CM header at the start of the private data. It fails
// with [ErrNotIPCM] when the service ID is not an IP CM one, and as
// [ParseIPCMHeader] does when the header is malformed.
func (m SIDRREQ) IPCM() (IPCMHeader, error) { return ipcmOf(m.ServiceID(), m.PrivateData()) }

// SetRequestID sets the request ID.
func (m SIDRREQ) SetRequestID(v uint32) { sidrreqLayout[sidrreqRequestID].setUint(m, uint64(v)) }

// SetPartitionKey sets the P_Key.
func (m SIDRREQ) SetPartitionKey(v uint16) {
	sidrreqLayout[sidrreqPartitionKey].setUint(m, uint64(v))
}

// SetServiceID sets the service ID.
func (m SIDRREQ) SetServiceID(v ServiceID) {
	sidrreqLayout[sidrreqServiceID].setUint(m, uint64(v))
}

// All yields every field of the SIDR_REQ, reserved ones included, in wire order.
func (m SIDRREQ) All() iter.Seq2[Field, Value] { return walk(sidrreqLayout[:], m) }

// Fields decodes the SIDR_REQ.
func (m SIDRREQ) Fields() SIDRREQFields {
	return SIDRREQFields{
		RequestID:    m.RequestID(),
		PartitionKey: m.PartitionKey(),
		ServiceID:    m.ServiceID(),
		PrivateData:  [SIDRREQPrivateDataLen]byte(m.PrivateData()),
	}
}

// SIDRREQFields holds the contents of a SIDR_REQ.
type SIDRREQFields struct {
	RequestID    uint32
	PartitionKey uint16
	ServiceID    ServiceID
	PrivateData  [SIDRREQPrivateDataLen]byte
}

// Validate returns nil: every field of SIDRREQFields fits its wire width.
func (SIDRREQFields) Validate() error { return nil }

// Append appends the 232-byte attribute data to b.
func (f SIDRREQFields) Append(b []byte) []byte {
	e, b := newEncoder(b, DataLen, sidrreqLayout[:])
	e.uint(sidrreqRequestID, uint64(f.RequestID))
	e.uint(sidrreqPartitionKey, uint64(f.PartitionKey))
	e.uint(sidrreqServiceID, uint64(f.ServiceID))
	e.bytes(sidrreqPrivateData, f.PrivateData[:])
	return b
}

// ---------------------------------------------------------------------------
// SIDR_REP

// SIDRREP is a view of the attribute data of a ServiceIDResReqResp (IBTA Vol 1
// §12.11.2, Table 120 "SIDR_REP Message Contents"): the QPN and Q_Key serving
// the service ID. It must be at least [DataLen] bytes long.
type SIDRREP []byte

const (
	sidrrepRequestID = iota
	sidrrepStatus
	sidrrepAdditionalInfoLength
	sidrrepVendorIDH
	sidrrepQPN
	sidrrepVendorIDL
	sidrrepServiceID
	sidrrepQKey
	sidrrepClassPortInfo
	sidrrepPrivateData
)

var sidrrepLayout = [...]Field{
	sidrrepRequestID:            {"RequestID", 0, 0, 32, KindHex},
	sidrrepStatus:               {"Status", 4, 0, 8, KindSIDRStatus},
	sidrrepAdditionalInfoLength: {"AdditionalInfoLength", 5, 0, 8, KindUint},
	sidrrepVendorIDH:            {"VendorIDH", 6, 0, 16, KindHex}, // VendorID[23:8]
	sidrrepQPN:                  {"QPN", 8, 0, 24, KindHex},
	sidrrepVendorIDL:            {"VendorIDL", 11, 0, 8, KindHex}, // VendorID[7:0]
	sidrrepServiceID:            {"ServiceID", 12, 0, 64, KindServiceID},
	sidrrepQKey:                 {"QKey", 20, 0, 32, KindHex},
	sidrrepClassPortInfo:        {"ClassPortInfo", 24, 0, 8 * SIDRREPInfoLen, KindBytes},
	sidrrepPrivateData:          {"PrivateData", 96, 0, 8 * SIDRREPPrivateDataLen, KindBytes},
}

func (m SIDRREP) get(i int) uint64    { return sidrrepLayout[i].getUint(m) }
func (m SIDRREP) set(i int, v uint64) { sidrrepLayout[i].setUint(m, v) }

// RequestID returns the RequestID of the SIDR_REQ answered.
func (m SIDRREP) RequestID() uint32 { return uint32(m.get(sidrrepRequestID)) }

// Status returns the resolution status.
func (m SIDRREP) Status() SIDRStatus { return SIDRStatus(m.get(sidrrepStatus)) }

// AdditionalInfoLength returns the number of valid bytes in ClassPortInfo.
func (m SIDRREP) AdditionalInfoLength() uint8 { return uint8(m.get(sidrrepAdditionalInfoLength)) }

// VendorID returns the 24-bit Vendor ID of Enhanced Connection Establishment
// (ECE, added to IBTA Vol 1 Table 120 by IBA comment 9434; Linux
// CM_SIDR_REP_VENDOR_ID_H/L), whose bytes sit at 6–7 and 11: it names the
// vendor whose ECE options the MAD header's AttributeModifier carries. Zero
// when the sender does not use ECE. Linux's cm_format_sidr_rep writes only
// bits 15-0 of its vendor_id (bits 15-8 into the low byte of VendorIDH).
func (m SIDRREP) VendorID() uint32 {
	return uint32(joinUint(sidrrepLayout[:], m, sidrrepVendorIDH, sidrrepVendorIDL))
}

// QPN returns the 24-bit number of the UD QP serving the service.
func (m SIDRREP) QPN() uint32 { return uint32(m.get(sidrrepQPN)) }

// ServiceID returns the service ID resolved.
func (m SIDRREP) ServiceID() ServiceID { return ServiceID(m.get(sidrrepServiceID)) }

// QKey returns the Q_Key of the UD QP serving the service.
func (m SIDRREP) QKey() uint32 { return uint32(m.get(sidrrepQKey)) }

// ClassPortInfo returns the 72-byte ClassPortInfo (Additional Information)
// field, aliasing m; with status Redirect it says where to go.
func (m SIDRREP) ClassPortInfo() []byte { return sidrrepLayout[sidrrepClassPortInfo].bytes(m) }

// PrivateData returns the 136-byte private data field, aliasing m.
func (m SIDRREP) PrivateData() []byte { return sidrrepLayout[sidrrepPrivateData].bytes(m) }

// SetRequestID sets the request ID.
func (m SIDRREP) SetRequestID(v uint32) { m.set(sidrrepRequestID, uint64(v)) }

// SetStatus sets the status.
func (m SIDRREP) SetStatus(v SIDRStatus) { m.set(sidrrepStatus, uint64(v)) }

// SetAdditionalInfoLength sets the additional information length.
func (m SIDRREP) SetAdditionalInfoLength(v uint8) {
	m.set(sidrrepAdditionalInfoLength, uint64(v))
}

// SetVendorID sets the ECE Vendor ID; only the low 24 bits are stored.
func (m SIDRREP) SetVendorID(v uint32) {
	splitUint(sidrrepLayout[:], m, uint64(v), sidrrepVendorIDH, sidrrepVendorIDL)
}

// SetQPN sets the QPN; only the low 24 bits are stored.
func (m SIDRREP) SetQPN(v uint32) { m.set(sidrrepQPN, uint64(v)) }

// SetServiceID sets the service ID.
func (m SIDRREP) SetServiceID(v ServiceID) { m.set(sidrrepServiceID, uint64(v)) }

// SetQKey sets the Q_Key.
func (m SIDRREP) SetQKey(v uint32) { m.set(sidrrepQKey, uint64(v)) }

// All yields every field of the SIDR_REP, reserved ones included, in wire order.
func (m SIDRREP) All() iter.Seq2[Field, Value] { return walk(sidrrepLayout[:], m) }

// Fields decodes the SIDR_REP.
func (m SIDRREP) Fields() SIDRREPFields {
	return SIDRREPFields{
		RequestID:            m.RequestID(),
		Status:               m.Status(),
		AdditionalInfoLength: m.AdditionalInfoLength(),
		VendorID:             m.VendorID(),
		QPN:                  m.QPN(),
		ServiceID:            m.ServiceID(),
		QKey:                 m.QKey(),
		ClassPortInfo:        [SIDRREPInfoLen]byte(m.ClassPortInfo()),
		PrivateData:          [SIDRREPPrivateDataLen]byte(m.PrivateData()),
	}
}

// SIDRREPFields holds the contents of a SIDR_REP.
type SIDRREPFields struct {
	RequestID            uint32
	Status               SIDRStatus
	AdditionalInfoLength uint8
	VendorID             uint32 // 24 bits: ECE Vendor ID, split over bytes 6–7 and 11
	QPN                  uint32 // 24 bits
	ServiceID            ServiceID
	QKey                 uint32
	ClassPortInfo        [SIDRREPInfoLen]byte
	PrivateData          [SIDRREPPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b, truncating values wider
// than their field; Validate reports them.
func (f SIDRREPFields) Append(b []byte) []byte { b, _ = f.appendChecked(b); return b }

// Validate reports the first value too wide for its field as a [*RangeError].
func (f SIDRREPFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *SIDRREPFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, sidrrepLayout[:])
	e.uint(sidrrepRequestID, uint64(f.RequestID))
	e.uint(sidrrepStatus, uint64(f.Status))
	e.uint(sidrrepAdditionalInfoLength, uint64(f.AdditionalInfoLength))
	e.split(uint64(f.VendorID), sidrrepVendorIDH, sidrrepVendorIDL)
	e.uint(sidrrepQPN, uint64(f.QPN))
	e.uint(sidrrepServiceID, uint64(f.ServiceID))
	e.uint(sidrrepQKey, uint64(f.QKey))
	e.bytes(sidrrepClassPortInfo, f.ClassPortInfo[:])
	e.bytes(sidrrepPrivateData, f.PrivateData[:])
	return b, e.err("SIDR_REP", sidrrepLayout[:])
}
