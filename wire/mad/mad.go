package mad

import (
	"fmt"
	"iter"
)

// MAD is a view of a whole management datagram: the 24-byte common header
// followed by the class's data (IBTA Vol 1 §13.4.2). Get one from [Parse],
// which checks the length once so that the accessors need not.
type MAD []byte

// Parse checks that b, the payload of a UD SEND to QP1 after the BTH and DETH
// (ICRC excluded), is a MAD and returns a view of it. Every MAD needs the
// 24-byte header and base version 1; a CM MAD must also be exactly 256 bytes
// with class version 2. Errors wrap [ErrTruncated], [ErrLength],
// [ErrBaseVersion] or [ErrClassVersion]. Parse neither copies nor allocates
// unless it fails; the view aliases b.
func Parse(b []byte) (MAD, error) {
	if len(b) < HeaderLen {
		return nil, fmt.Errorf("%w: %d bytes, a MAD header is %d", ErrTruncated, len(b), HeaderLen)
	}
	h := Header(b)
	if v := h.BaseVersion(); v != BaseVersion {
		return nil, fmt.Errorf("%w %d", ErrBaseVersion, v)
	}
	if h.MgmtClass() == ClassCM {
		if len(b) < Size {
			return nil, fmt.Errorf("%w: %d bytes, a CM MAD is %d", ErrTruncated, len(b), Size)
		}
		if len(b) > Size {
			return nil, fmt.Errorf("%w: %d bytes, a CM MAD is %d", ErrLength, len(b), Size)
		}
		if v := h.ClassVersion(); v != CMClassVersion {
			return nil, fmt.Errorf("%w: CM class version %d, want %d", ErrClassVersion, v, CMClassVersion)
		}
	}
	return MAD(b), nil
}

// Header returns the common header.
func (m MAD) Header() Header { return Header(m[:HeaderLen:HeaderLen]) }

// Data returns the bytes after the common header: for CM, the 232-byte
// attribute data that the message views cover.
func (m MAD) Data() []byte { return m[HeaderLen:] }

// IsCM reports whether m is a well-formed CM MAD: 256 bytes, class CM,
// class version 2.
func (m MAD) IsCM() bool {
	return len(m) == Size && m.Header().MgmtClass() == ClassCM &&
		m.Header().ClassVersion() == CMClassVersion
}

// cm returns the attribute data if m is a CM MAD carrying attr.
func (m MAD) cm(attr AttributeID) ([]byte, bool) {
	if !m.IsCM() || m.Header().AttributeID() != attr {
		return nil, false
	}
	return m[HeaderLen:Size:Size], true
}

// REQ returns the ConnectRequest m carries; ok is false unless m is a CM MAD
// with attribute ID [AttrREQ].
func (m MAD) REQ() (msg REQ, ok bool) { b, ok := m.cm(AttrREQ); return REQ(b), ok }

// MRA returns the MsgRcptAck m carries, as [MAD.REQ] does.
func (m MAD) MRA() (msg MRA, ok bool) { b, ok := m.cm(AttrMRA); return MRA(b), ok }

// REJ returns the ConnectReject m carries, as [MAD.REQ] does.
func (m MAD) REJ() (msg REJ, ok bool) { b, ok := m.cm(AttrREJ); return REJ(b), ok }

// REP returns the ConnectReply m carries, as [MAD.REQ] does.
func (m MAD) REP() (msg REP, ok bool) { b, ok := m.cm(AttrREP); return REP(b), ok }

// RTU returns the ReadyToUse m carries, as [MAD.REQ] does.
func (m MAD) RTU() (msg RTU, ok bool) { b, ok := m.cm(AttrRTU); return RTU(b), ok }

// DREQ returns the DisconnectRequest m carries, as [MAD.REQ] does.
func (m MAD) DREQ() (msg DREQ, ok bool) { b, ok := m.cm(AttrDREQ); return DREQ(b), ok }

// DREP returns the DisconnectReply m carries, as [MAD.REQ] does.
func (m MAD) DREP() (msg DREP, ok bool) { b, ok := m.cm(AttrDREP); return DREP(b), ok }

// SIDRREQ returns the ServiceIDResReq m carries, as [MAD.REQ] does.
func (m MAD) SIDRREQ() (msg SIDRREQ, ok bool) {
	b, ok := m.cm(AttrSIDRREQ)
	return SIDRREQ(b), ok
}

// SIDRREP returns the ServiceIDResReqResp m carries, as [MAD.REQ] does.
func (m MAD) SIDRREP() (msg SIDRREP, ok bool) {
	b, ok := m.cm(AttrSIDRREP)
	return SIDRREP(b), ok
}

// IPCM returns the IP CM header of a REQ or SIDR_REQ with an IP CM service
// ID. Other MADs give [ErrNotIPCM].
func (m MAD) IPCM() (IPCMHeader, error) {
	if req, ok := m.REQ(); ok {
		return req.IPCM()
	}
	if req, ok := m.SIDRREQ(); ok {
		return req.IPCM()
	}
	return nil, fmt.Errorf("%w: not a CM REQ or SIDR_REQ", ErrNotIPCM)
}

// DataFields yields every field of the data after the header, in wire order:
// the fields of the CM message for a CM MAD whose attribute this package
// decodes, otherwise a single "Data" field holding the raw bytes.
func (m MAD) DataFields() iter.Seq2[Field, Value] {
	if m.IsCM() {
		if l := layoutOf(m.Header().AttributeID()); l != nil {
			return walk(l, m[HeaderLen:])
		}
	}
	data := m[HeaderLen:]
	raw := [1]Field{{Name: "Data", Width: 8 * len(data), Kind: KindBytes}}
	return walk(raw[:], data)
}

// Layout yields the field table of a CM message, in wire order, reserved
// fields included; nothing for attributes this package does not decode.
func Layout(attr AttributeID) iter.Seq[Field] {
	l := layoutOf(attr)
	return func(yield func(Field) bool) {
		for _, f := range l {
			if !yield(f) {
				return
			}
		}
	}
}

func layoutOf(attr AttributeID) []Field {
	switch attr {
	case AttrREQ:
		return reqLayout[:]
	case AttrMRA:
		return mraLayout[:]
	case AttrREJ:
		return rejLayout[:]
	case AttrREP:
		return repLayout[:]
	case AttrRTU:
		return rtuLayout[:]
	case AttrDREQ:
		return dreqLayout[:]
	case AttrDREP:
		return drepLayout[:]
	case AttrSIDRREQ:
		return sidrreqLayout[:]
	case AttrSIDRREP:
		return sidrrepLayout[:]
	}
	return nil
}
