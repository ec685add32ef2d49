package mad

import (
	"fmt"
	"iter"
	"strings"
)

// MgmtClass is the management class of a MAD (IBTA Vol 1 §13.4.4).
//
//enum:string MgmtClass(0x%02x)
type MgmtClass uint8

// Management classes (IBTA Vol 1 §13.4.4, Management Class Values).
const (
	ClassSubnLIDRouted     MgmtClass = 0x01 // "SubnMgt (LID routed)": subnet management, LID routed
	ClassSubnAdm           MgmtClass = 0x03 // "SubnAdm": subnet administration
	ClassPerfMgt           MgmtClass = 0x04 // "PerfMgt": performance management
	ClassBM                MgmtClass = 0x05 // "BM": baseboard management
	ClassDevMgt            MgmtClass = 0x06 // "DevMgt": device management
	ClassCM                MgmtClass = 0x07 // "CM": communication management (Chapter 12)
	ClassSNMP              MgmtClass = 0x08 // "SNMP": SNMP tunnelling
	ClassSubnDirectedRoute MgmtClass = 0x81 // "SubnMgt (directed route)": subnet management, directed route
)

// Method is the method byte of a MAD, including the R (response) bit in its
// most significant bit (IBTA Vol 1 §13.4.5): GetResp is Get with R set.
//
//enum:string Method(0x%02x)
type Method uint8

// Methods common to all management classes (IBTA Vol 1 §13.4.5).
const (
	MethodGet         Method = 0x01 // "Get"
	MethodSet         Method = 0x02 // "Set"
	MethodSend        Method = 0x03 // "Send"
	MethodTrap        Method = 0x05 // "Trap"
	MethodReport      Method = 0x06 // "Report"
	MethodTrapRepress Method = 0x07 // "TrapRepress"
	MethodGetResp     Method = 0x81 // "GetResp"
	MethodReportResp  Method = 0x86 // "ReportResp"

	// MethodResponse is the R bit: set in every response method.
	MethodResponse Method = 0x80
)

// IsResponse reports whether the R bit is set.
func (m Method) IsResponse() bool { return m&MethodResponse != 0 }

// Status is the 16-bit MAD status field (IBTA Vol 1 §13.4.7, MAD Status
// Field): bit 0 busy, bit 1 redirect required, bits 2–4 an invalid-field
// code, bits 5–7 reserved, bits 8–15 class specific. Bit 0 is the least
// significant bit.
type Status uint16

// Status values. The invalid-field codes occupy bits 2–4 and are mutually
// exclusive; busy and redirect are independent bits.
const (
	StatusBusy                       Status = 0x0001
	StatusRedirectRequired           Status = 0x0002
	StatusBadVersion                 Status = 1 << 2 // unsupported base or class version
	StatusUnsupportedMethod          Status = 2 << 2
	StatusUnsupportedMethodAttribute Status = 3 << 2
	StatusInvalidAttributeOrModifier Status = 7 << 2
	statusInvalidFieldMask           Status = 7 << 2
	statusReservedMask               Status = 0x00e0
	statusClassSpecificMask          Status = 0xff00
)

// Busy reports bit 0: the responder was busy; retry later.
func (s Status) Busy() bool { return s&StatusBusy != 0 }

// RedirectRequired reports bit 1: use the ClassPortInfo in the response.
func (s Status) RedirectRequired() bool { return s&StatusRedirectRequired != 0 }

// InvalidField returns the invalid-field code in bits 2–4 (0 = no invalid field).
func (s Status) InvalidField() uint8 { return uint8(s&statusInvalidFieldMask) >> 2 }

// ClassSpecific returns bits 8–15, whose meaning the management class defines.
func (s Status) ClassSpecific() uint8 { return uint8(s >> 8) }

var invalidFieldNames = [8]string{
	1: "unsupported class or version",
	2: "unsupported method",
	3: "unsupported method/attribute combination",
	4: "reserved invalid-field code 4",
	5: "reserved invalid-field code 5",
	6: "reserved invalid-field code 6",
	7: "invalid attribute or attribute modifier value",
}

// String names the status bits that are set, e.g. 0x000c is "unsupported
// method/attribute combination" and 0 is "success".
func (s Status) String() string {
	if s == 0 {
		return "success"
	}
	var parts []string
	if s.Busy() {
		parts = append(parts, "busy")
	}
	if s.RedirectRequired() {
		parts = append(parts, "redirect required")
	}
	if c := s.InvalidField(); c != 0 {
		parts = append(parts, invalidFieldNames[c])
	}
	if r := s & statusReservedMask; r != 0 {
		parts = append(parts, fmt.Sprintf("reserved bits 0x%04x", uint16(r)))
	}
	if c := s.ClassSpecific(); c != 0 {
		parts = append(parts, fmt.Sprintf("class specific 0x%02x", c))
	}
	return strings.Join(parts, ", ")
}

// AttributeID identifies the attribute a MAD carries. The names are those of
// the CM class (IBTA Vol 1 §12.6, CM Attributes); ClassPortInfo
// is common to every class (§13.4.8.1). String returns the attribute name
// IBTA and Wireshark use, such as "ConnectRequest"; Short the message
// abbreviation IBTA uses in Chapter 12, such as "REQ" or "SIDR_REQ".
//
//enum:string AttributeID(0x%04x)
//enum:method Short 0x%04x
type AttributeID uint16

// Attribute IDs of the CM class.
const (
	AttrClassPortInfo AttributeID = 0x0001 // "ClassPortInfo" "ClassPortInfo"
	AttrREQ           AttributeID = 0x0010 // "ConnectRequest" "REQ"
	AttrMRA           AttributeID = 0x0011 // "MsgRcptAck" "MRA"
	AttrREJ           AttributeID = 0x0012 // "ConnectReject" "REJ"
	AttrREP           AttributeID = 0x0013 // "ConnectReply" "REP"
	AttrRTU           AttributeID = 0x0014 // "ReadyToUse" "RTU"
	AttrDREQ          AttributeID = 0x0015 // "DisconnectRequest" "DREQ"
	AttrDREP          AttributeID = 0x0016 // "DisconnectReply" "DREP"
	AttrSIDRREQ       AttributeID = 0x0017 // "ServiceIDResReq" "SIDR_REQ"
	AttrSIDRREP       AttributeID = 0x0018 // "ServiceIDResReqResp" "SIDR_REP"
	AttrLAP           AttributeID = 0x0019 // "LoadAlternatePath" "LAP"
	AttrAPR           AttributeID = 0x001A // "AlternatePathResponse" "APR"
)

// Header is a view of the 24-byte MAD common header (IBTA Vol 1 §13.4.2,
// MAD Common Header). It must be at least [HeaderLen] bytes long.
type Header []byte

// Indices into headerLayout.
const (
	hdrBaseVersion = iota
	hdrMgmtClass
	hdrClassVersion
	hdrMethod
	hdrStatus
	hdrClassSpecific
	hdrTransactionID
	hdrAttributeID
	hdrReserved
	hdrAttributeModifier
)

// headerLayout is the MAD common header (IBTA Vol 1 §13.4.2). IBTA draws R
// and Method as a 1-bit and a 7-bit field; they are one byte here because the
// method values (GetResp = 0x81) include R. Read-only.
var headerLayout = [...]Field{
	hdrBaseVersion:       {"BaseVersion", 0, 0, 8, KindUint},
	hdrMgmtClass:         {"MgmtClass", 1, 0, 8, KindMgmtClass},
	hdrClassVersion:      {"ClassVersion", 2, 0, 8, KindUint},
	hdrMethod:            {"Method", 3, 0, 8, KindMethod},
	hdrStatus:            {"Status", 4, 0, 16, KindStatus},
	hdrClassSpecific:     {"ClassSpecific", 6, 0, 16, KindHex},
	hdrTransactionID:     {"TransactionID", 8, 0, 64, KindHex},
	hdrAttributeID:       {"AttributeID", 16, 0, 16, KindAttributeID},
	hdrReserved:          {"Reserved", 18, 0, 16, KindReserved},
	hdrAttributeModifier: {"AttributeModifier", 20, 0, 32, KindHex},
}

func (h Header) get(i int) uint64    { return headerLayout[i].getUint(h) }
func (h Header) set(i int, v uint64) { headerLayout[i].setUint(h, v) }

// BaseVersion returns the MAD format version; 1 for every IBTA MAD.
func (h Header) BaseVersion() uint8 { return uint8(h.get(hdrBaseVersion)) }

// MgmtClass returns the management class.
func (h Header) MgmtClass() MgmtClass { return MgmtClass(h.get(hdrMgmtClass)) }

// ClassVersion returns the version of the management class; 2 for CM.
func (h Header) ClassVersion() uint8 { return uint8(h.get(hdrClassVersion)) }

// Method returns the method byte, R bit included.
func (h Header) Method() Method { return Method(h.get(hdrMethod)) }

// R reports the response bit, the most significant bit of the method byte.
func (h Header) R() bool { return h.Method().IsResponse() }

// Status returns the status field; meaningful in responses only.
func (h Header) Status() Status { return Status(h.get(hdrStatus)) }

// ClassSpecific returns the 16 class-specific bits (unused by CM).
func (h Header) ClassSpecific() uint16 { return uint16(h.get(hdrClassSpecific)) }

// TransactionID returns the transaction ID that pairs requests and responses.
func (h Header) TransactionID() uint64 { return h.get(hdrTransactionID) }

// AttributeID returns the attribute the MAD carries.
func (h Header) AttributeID() AttributeID { return AttributeID(h.get(hdrAttributeID)) }

// Reserved returns the reserved 16 bits after the attribute ID.
func (h Header) Reserved() uint16 { return uint16(h.get(hdrReserved)) }

// AttributeModifier returns the attribute modifier (0 in every CM message).
func (h Header) AttributeModifier() uint32 { return uint32(h.get(hdrAttributeModifier)) }

// SetBaseVersion sets the base version.
func (h Header) SetBaseVersion(v uint8) { h.set(hdrBaseVersion, uint64(v)) }

// SetMgmtClass sets the management class.
func (h Header) SetMgmtClass(v MgmtClass) { h.set(hdrMgmtClass, uint64(v)) }

// SetClassVersion sets the class version.
func (h Header) SetClassVersion(v uint8) { h.set(hdrClassVersion, uint64(v)) }

// SetMethod sets the method byte, R bit included.
func (h Header) SetMethod(v Method) { h.set(hdrMethod, uint64(v)) }

// SetR sets or clears the response bit, keeping the method.
func (h Header) SetR(r bool) {
	m := h.Method() &^ MethodResponse
	if r {
		m |= MethodResponse
	}
	h.SetMethod(m)
}

// SetStatus sets the status field.
func (h Header) SetStatus(v Status) { h.set(hdrStatus, uint64(v)) }

// SetClassSpecific sets the class-specific field.
func (h Header) SetClassSpecific(v uint16) { h.set(hdrClassSpecific, uint64(v)) }

// SetTransactionID sets the transaction ID.
func (h Header) SetTransactionID(v uint64) { h.set(hdrTransactionID, v) }

// SetAttributeID sets the attribute ID.
func (h Header) SetAttributeID(v AttributeID) { h.set(hdrAttributeID, uint64(v)) }

// SetReserved sets the reserved field (senders must leave it zero).
func (h Header) SetReserved(v uint16) { h.set(hdrReserved, uint64(v)) }

// SetAttributeModifier sets the attribute modifier.
func (h Header) SetAttributeModifier(v uint32) { h.set(hdrAttributeModifier, uint64(v)) }

// All yields every header field in wire order. The attribute ID is shown by
// its CM name only when the class is CM.
func (h Header) All() iter.Seq2[Field, Value] {
	return func(yield func(Field, Value) bool) {
		isCM := h.MgmtClass() == ClassCM
		for i := range headerLayout {
			f := headerLayout[i]
			if i == hdrAttributeID && !isCM {
				f.Kind = KindHex
			}
			if !yield(f, f.value(h)) {
				return
			}
		}
	}
}

// Fields decodes the header.
func (h Header) Fields() HeaderFields {
	return HeaderFields{
		BaseVersion:       h.BaseVersion(),
		MgmtClass:         h.MgmtClass(),
		ClassVersion:      h.ClassVersion(),
		Method:            h.Method(),
		Status:            h.Status(),
		ClassSpecific:     h.ClassSpecific(),
		TransactionID:     h.TransactionID(),
		AttributeID:       h.AttributeID(),
		AttributeModifier: h.AttributeModifier(),
	}
}

// HeaderFields holds the contents of a MAD common header. The reserved field
// is always encoded as zero.
type HeaderFields struct {
	BaseVersion       uint8
	MgmtClass         MgmtClass
	ClassVersion      uint8
	Method            Method // R bit included
	Status            Status
	ClassSpecific     uint16
	TransactionID     uint64
	AttributeID       AttributeID
	AttributeModifier uint32
}

// NewCMHeader returns the header of a CM message: base version 1, class CM,
// class version 2, method Send, the method every CM message uses (§12.6).
func NewCMHeader(attr AttributeID, tid uint64) HeaderFields {
	return HeaderFields{
		BaseVersion:   BaseVersion,
		MgmtClass:     ClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MethodSend,
		TransactionID: tid,
		AttributeID:   attr,
	}
}

// Validate returns nil: every field of HeaderFields fits its wire width.
func (HeaderFields) Validate() error { return nil }

// Append appends the encoded 24-byte header to b.
func (f HeaderFields) Append(b []byte) []byte {
	e, b := newEncoder(b, HeaderLen, headerLayout[:])
	e.uint(hdrBaseVersion, uint64(f.BaseVersion))
	e.uint(hdrMgmtClass, uint64(f.MgmtClass))
	e.uint(hdrClassVersion, uint64(f.ClassVersion))
	e.uint(hdrMethod, uint64(f.Method))
	e.uint(hdrStatus, uint64(f.Status))
	e.uint(hdrClassSpecific, uint64(f.ClassSpecific))
	e.uint(hdrTransactionID, f.TransactionID)
	e.uint(hdrAttributeID, uint64(f.AttributeID))
	e.uint(hdrAttributeModifier, uint64(f.AttributeModifier))
	return b
}
