package mad

import "fmt"

// MsgType is the 2-bit "Message MRAed" field of an MRA and the "Message
// REJected" field of a REJ (IBTA Vol 1 §12.6.6, §12.6.7): which message the
// MRA or REJ answers.
type MsgType uint8

// Message types (Linux enum cm_msg_response).
const (
	MsgREQ   MsgType = 0
	MsgREP   MsgType = 1
	MsgOther MsgType = 2 // MRA: LAP; REJ: no message (e.g. a REJ in answer to a stale connection)
)

func (t MsgType) String() string {
	switch t {
	case MsgREQ:
		return "REQ"
	case MsgREP:
		return "REP"
	case MsgOther:
		return "other"
	}
	return fmt.Sprintf("reserved(%d)", uint8(t))
}

// TransportType is the REQ's 2-bit Transport Service Type (IBTA Vol 1 §12.6.5).
type TransportType uint8

// Transport service types. TransportExtended means "see the Extended Transport
// Type field", where 1 is XRC (IBTA Vol 1 Annex A14).
const (
	TransportRC       TransportType = 0
	TransportUC       TransportType = 1
	TransportRD       TransportType = 2
	TransportExtended TransportType = 3
)

func (t TransportType) String() string {
	switch t {
	case TransportRC:
		return "RC"
	case TransportUC:
		return "UC"
	case TransportRD:
		return "RD"
	case TransportExtended:
		return "extended"
	}
	return fmt.Sprintf("TransportType(%d)", uint8(t))
}

// RejectReason is the 16-bit Reason of a REJ (IBTA Vol 1 §12.6.7.2, REJ
// reasons; Linux enum ib_cm_rej_reason).
type RejectReason uint16

// Reject reasons.
const (
	RejectNoQP                      RejectReason = 1
	RejectNoEEC                     RejectReason = 2
	RejectNoResources               RejectReason = 3
	RejectTimeout                   RejectReason = 4
	RejectUnsupported               RejectReason = 5
	RejectInvalidCommID             RejectReason = 6
	RejectInvalidCommInstance       RejectReason = 7
	RejectInvalidServiceID          RejectReason = 8
	RejectInvalidTransportType      RejectReason = 9
	RejectStaleConn                 RejectReason = 10
	RejectRDCNotExist               RejectReason = 11
	RejectInvalidGID                RejectReason = 12
	RejectInvalidLID                RejectReason = 13
	RejectInvalidSL                 RejectReason = 14
	RejectInvalidTrafficClass       RejectReason = 15
	RejectInvalidHopLimit           RejectReason = 16
	RejectInvalidPacketRate         RejectReason = 17
	RejectInvalidAltGID             RejectReason = 18
	RejectInvalidAltLID             RejectReason = 19
	RejectInvalidAltSL              RejectReason = 20
	RejectInvalidAltTrafficClass    RejectReason = 21
	RejectInvalidAltHopLimit        RejectReason = 22
	RejectInvalidAltPacketRate      RejectReason = 23
	RejectPortCMRedirect            RejectReason = 24
	RejectPortRedirect              RejectReason = 25
	RejectInvalidMTU                RejectReason = 26
	RejectInsufficientRespResources RejectReason = 27
	RejectConsumer                  RejectReason = 28
	RejectInvalidRNRRetry           RejectReason = 29
	RejectDuplicateLocalCommID      RejectReason = 30
	RejectInvalidClassVersion       RejectReason = 31
	RejectInvalidFlowLabel          RejectReason = 32
	RejectInvalidAltFlowLabel       RejectReason = 33
	RejectVendorOptionNotSupported  RejectReason = 35 // Linux, for ECE
)

var rejectReasonNames = [...]string{
	RejectNoQP:                      "No QP Available",
	RejectNoEEC:                     "No EEC Available",
	RejectNoResources:               "No Resources Available",
	RejectTimeout:                   "Timeout",
	RejectUnsupported:               "Unsupported Request",
	RejectInvalidCommID:             "Invalid Communication ID",
	RejectInvalidCommInstance:       "Invalid Communication Instance",
	RejectInvalidServiceID:          "Invalid Service ID",
	RejectInvalidTransportType:      "Invalid Transport Service Type",
	RejectStaleConn:                 "Stale Connection",
	RejectRDCNotExist:               "RDC Does Not Exist",
	RejectInvalidGID:                "Primary Remote Port GID Rejected",
	RejectInvalidLID:                "Primary Remote Port LID Rejected",
	RejectInvalidSL:                 "Invalid Primary SL",
	RejectInvalidTrafficClass:       "Invalid Primary Traffic Class",
	RejectInvalidHopLimit:           "Invalid Primary Hop Limit",
	RejectInvalidPacketRate:         "Invalid Primary Packet Rate",
	RejectInvalidAltGID:             "Alternate Remote Port GID Rejected",
	RejectInvalidAltLID:             "Alternate Remote Port LID Rejected",
	RejectInvalidAltSL:              "Invalid Alternate SL",
	RejectInvalidAltTrafficClass:    "Invalid Alternate Traffic Class",
	RejectInvalidAltHopLimit:        "Invalid Alternate Hop Limit",
	RejectInvalidAltPacketRate:      "Invalid Alternate Packet Rate",
	RejectPortCMRedirect:            "Port and CM Redirection",
	RejectPortRedirect:              "Port Redirection",
	RejectInvalidMTU:                "Invalid Path MTU",
	RejectInsufficientRespResources: "Insufficient Responder Resources",
	RejectConsumer:                  "Consumer Reject",
	RejectInvalidRNRRetry:           "RNR Retry Count Reject",
	RejectDuplicateLocalCommID:      "Duplicate Local Communication ID",
	RejectInvalidClassVersion:       "Invalid Class Version",
	RejectInvalidFlowLabel:          "Invalid Primary Flow Label",
	RejectInvalidAltFlowLabel:       "Invalid Alternate Flow Label",
	RejectVendorOptionNotSupported:  "Vendor Option Not Supported",
}

// String returns the IBTA name of the reason, such as "Consumer Reject".
func (r RejectReason) String() string {
	if int(r) < len(rejectReasonNames) && rejectReasonNames[r] != "" {
		return rejectReasonNames[r]
	}
	return fmt.Sprintf("RejectReason(%d)", uint16(r))
}

// SIDRStatus is the Status of a SIDR_REP (IBTA Vol 1 §12.11.2; Linux enum
// ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP status values.
const (
	SIDRSuccess            SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // service provider rejected the request
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // see the ClassPortInfo field
	SIDRUnsupportedVersion SIDRStatus = 5 // class version not supported
)

var sidrStatusNames = [...]string{
	SIDRSuccess:            "Success",
	SIDRUnsupported:        "Service ID Not Supported",
	SIDRReject:             "Rejected by Service Provider",
	SIDRNoQP:               "No QP Available",
	SIDRRedirect:           "Redirect",
	SIDRUnsupportedVersion: "Unsupported Class Version",
}

// String returns the name of the status, such as "Service ID Not Supported".
func (s SIDRStatus) String() string {
	if int(s) < len(sidrStatusNames) {
		return sidrStatusNames[s]
	}
	return fmt.Sprintf("SIDRStatus(%d)", uint8(s))
}
