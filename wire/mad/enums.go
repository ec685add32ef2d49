package mad

//go:generate go run ../../internal/enumgen

// MsgType is the 2-bit "Message MRAed" field of an MRA and the "Message
// REJected" field of a REJ (IBTA Vol 1 §12.6.6, §12.6.7): which message the
// MRA or REJ answers.
//
//enum:string reserved(%d)
type MsgType uint8

// Message types (Linux enum cm_msg_response).
const (
	MsgREQ   MsgType = 0 // "REQ"
	MsgREP   MsgType = 1 // "REP"
	MsgOther MsgType = 2 // "other": MRA: LAP; REJ: no message (e.g. a REJ in answer to a stale connection)
)

// TransportType is the REQ's 2-bit Transport Service Type (IBTA Vol 1 §12.6.5).
//
//enum:string TransportType(%d)
type TransportType uint8

// Transport service types. TransportExtended means "see the Extended Transport
// Type field", where 1 is XRC (IBTA Vol 1 Annex A14).
const (
	TransportRC       TransportType = 0 // "RC"
	TransportUC       TransportType = 1 // "UC"
	TransportRD       TransportType = 2 // "RD"
	TransportExtended TransportType = 3 // "extended"
)

// RejectReason is the 16-bit Reason of a REJ (IBTA Vol 1 §12.6.7.2, REJ
// reasons; Linux enum ib_cm_rej_reason). String returns the IBTA name of the reason, such as
// "Consumer Reject".
//
//enum:string RejectReason(%d)
type RejectReason uint16

// Reject reasons.
const (
	RejectNoQP                      RejectReason = 1  // "No QP Available"
	RejectNoEEC                     RejectReason = 2  // "No EEC Available"
	RejectNoResources               RejectReason = 3  // "No Resources Available"
	RejectTimeout                   RejectReason = 4  // "Timeout"
	RejectUnsupported               RejectReason = 5  // "Unsupported Request"
	RejectInvalidCommID             RejectReason = 6  // "Invalid Communication ID"
	RejectInvalidCommInstance       RejectReason = 7  // "Invalid Communication Instance"
	RejectInvalidServiceID          RejectReason = 8  // "Invalid Service ID"
	RejectInvalidTransportType      RejectReason = 9  // "Invalid Transport Service Type"
	RejectStaleConn                 RejectReason = 10 // "Stale Connection"
	RejectRDCNotExist               RejectReason = 11 // "RDC Does Not Exist"
	RejectInvalidGID                RejectReason = 12 // "Primary Remote Port GID Rejected"
	RejectInvalidLID                RejectReason = 13 // "Primary Remote Port LID Rejected"
	RejectInvalidSL                 RejectReason = 14 // "Invalid Primary SL"
	RejectInvalidTrafficClass       RejectReason = 15 // "Invalid Primary Traffic Class"
	RejectInvalidHopLimit           RejectReason = 16 // "Invalid Primary Hop Limit"
	RejectInvalidPacketRate         RejectReason = 17 // "Invalid Primary Packet Rate"
	RejectInvalidAltGID             RejectReason = 18 // "Alternate Remote Port GID Rejected"
	RejectInvalidAltLID             RejectReason = 19 // "Alternate Remote Port LID Rejected"
	RejectInvalidAltSL              RejectReason = 20 // "Invalid Alternate SL"
	RejectInvalidAltTrafficClass    RejectReason = 21 // "Invalid Alternate Traffic Class"
	RejectInvalidAltHopLimit        RejectReason = 22 // "Invalid Alternate Hop Limit"
	RejectInvalidAltPacketRate      RejectReason = 23 // "Invalid Alternate Packet Rate"
	RejectPortCMRedirect            RejectReason = 24 // "Port and CM Redirection"
	RejectPortRedirect              RejectReason = 25 // "Port Redirection"
	RejectInvalidMTU                RejectReason = 26 // "Invalid Path MTU"
	RejectInsufficientRespResources RejectReason = 27 // "Insufficient Responder Resources"
	RejectConsumer                  RejectReason = 28 // "Consumer Reject"
	RejectInvalidRNRRetry           RejectReason = 29 // "RNR Retry Count Reject"
	RejectDuplicateLocalCommID      RejectReason = 30 // "Duplicate Local Communication ID"
	RejectInvalidClassVersion       RejectReason = 31 // "Invalid Class Version"
	RejectInvalidFlowLabel          RejectReason = 32 // "Invalid Primary Flow Label"
	RejectInvalidAltFlowLabel       RejectReason = 33 // "Invalid Alternate Flow Label"
	RejectVendorOptionNotSupported  RejectReason = 35 // "Vendor Option Not Supported": Linux, for ECE
)

// SIDRStatus is the Status of a SIDR_REP (IBTA Vol 1 §12.11.2; Linux enum
// ib_cm_sidr_status). String returns the name of the status, such as "Service ID
// Not Supported".
//
//enum:string SIDRStatus(%d)
type SIDRStatus uint8

// SIDR_REP status values.
const (
	SIDRSuccess            SIDRStatus = 0 // "Success": QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // "Service ID Not Supported": service ID not supported
	SIDRReject             SIDRStatus = 2 // "Rejected by Service Provider": service provider rejected the request
	SIDRNoQP               SIDRStatus = 3 // "No QP Available": no QP available
	SIDRRedirect           SIDRStatus = 4 // "Redirect": see the ClassPortInfo field
	SIDRUnsupportedVersion SIDRStatus = 5 // "Unsupported Class Version": class version not supported
)
