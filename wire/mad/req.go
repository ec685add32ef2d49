package mad

import "iter"

// REQ is a view of the attribute data of a ConnectRequest (IBTA Vol 1 §12.6.5,
// Table 106 "REQ Message Contents"): the active side's QP, its path(s) and
// up to 92 bytes of private data. It must be at least [DataLen] bytes long;
// get one from [MAD.REQ].
type REQ []byte

// Indices into reqLayout. The two path blocks have the same fields in the same
// order (path* offsets below), the alternate one 44 bytes later, plus the SAP
// Supported bit in the alternate's last byte.
const (
	reqLocalCommID = iota
	reqReserved4
	reqVendorID
	reqServiceID
	reqLocalCAGUID
	reqReserved24
	reqLocalQKey
	reqLocalQPN
	reqResponderResources
	reqLocalEECN
	reqInitiatorDepth
	reqRemoteEECN
	reqRemoteCMResponseTimeout
	reqTransportServiceType
	reqEndToEndFlowControl
	reqStartingPSN
	reqLocalCMResponseTimeout
	reqRetryCount
	reqPartitionKey
	reqPathPacketPayloadMTU
	reqRDCExists
	reqRNRRetryCount
	reqMaxCMRetries
	reqSRQ
	reqExtendedTransportType
	reqPrimary // first field of the primary path block
)

const (
	reqAlternate            = reqPrimary + pathLen       // first field of the alternate path block
	reqSAPSupported         = reqAlternate + pathLen - 1 // in place of the primary's pathReservedACK
	reqAlternateReserved139 = reqSAPSupported + 1
	reqPrivateData          = reqSAPSupported + 2
)

// Offsets of the fields of a path block from its first index.
const (
	pathLocalPortLID = iota
	pathRemotePortLID
	pathLocalPortGID
	pathRemotePortGID
	pathFlowLabel
	pathReservedFlow
	pathPacketRate
	pathTrafficClass
	pathHopLimit
	pathSL
	pathSubnetLocal
	pathReservedSL
	pathLocalACKTimeout
	pathReservedACK // primary: 3 reserved bits; alternate: SAP Supported + 2 reserved
	pathLen
)

// reqLayout is IBTA Vol 1 Table 106 (REQ Message Contents), offsets from the
// start of the attribute data; Linux's CM_REQ_* in include/rdma/ibta_vol1_c12.h
// give the same (byte, bit, width). Read-only.
var reqLayout = [...]Field{
	reqLocalCommID:             {"LocalCommID", 0, 0, 32, KindHex},
	reqReserved4:               {"Reserved4", 4, 0, 8, KindReserved},
	reqVendorID:                {"VendorID", 5, 0, 24, KindHex},
	reqServiceID:               {"ServiceID", 8, 0, 64, KindServiceID},
	reqLocalCAGUID:             {"LocalCAGUID", 16, 0, 64, KindHex},
	reqReserved24:              {"Reserved24", 24, 0, 32, KindReserved},
	reqLocalQKey:               {"LocalQKey", 28, 0, 32, KindHex},
	reqLocalQPN:                {"LocalQPN", 32, 0, 24, KindHex},
	reqResponderResources:      {"ResponderResources", 35, 0, 8, KindUint},
	reqLocalEECN:               {"LocalEECN", 36, 0, 24, KindHex},
	reqInitiatorDepth:          {"InitiatorDepth", 39, 0, 8, KindUint},
	reqRemoteEECN:              {"RemoteEECN", 40, 0, 24, KindHex},
	reqRemoteCMResponseTimeout: {"RemoteCMResponseTimeout", 43, 0, 5, KindTimeout},
	reqTransportServiceType:    {"TransportServiceType", 43, 5, 2, KindTransportType},
	reqEndToEndFlowControl:     {"EndToEndFlowControl", 43, 7, 1, KindFlag},
	reqStartingPSN:             {"StartingPSN", 44, 0, 24, KindHex},
	reqLocalCMResponseTimeout:  {"LocalCMResponseTimeout", 47, 0, 5, KindTimeout},
	reqRetryCount:              {"RetryCount", 47, 5, 3, KindUint},
	reqPartitionKey:            {"PartitionKey", 48, 0, 16, KindHex},
	reqPathPacketPayloadMTU:    {"PathPacketPayloadMTU", 50, 0, 4, KindMTU},
	reqRDCExists:               {"RDCExists", 50, 4, 1, KindFlag},
	reqRNRRetryCount:           {"RNRRetryCount", 50, 5, 3, KindUint},
	reqMaxCMRetries:            {"MaxCMRetries", 51, 0, 4, KindUint},
	reqSRQ:                     {"SRQ", 51, 4, 1, KindFlag},
	reqExtendedTransportType:   {"ExtendedTransportType", 51, 5, 3, KindUint},

	reqPrimary + pathLocalPortLID:    {"PrimaryLocalPortLID", 52, 0, 16, KindUint},
	reqPrimary + pathRemotePortLID:   {"PrimaryRemotePortLID", 54, 0, 16, KindUint},
	reqPrimary + pathLocalPortGID:    {"PrimaryLocalPortGID", 56, 0, 128, KindGID},
	reqPrimary + pathRemotePortGID:   {"PrimaryRemotePortGID", 72, 0, 128, KindGID},
	reqPrimary + pathFlowLabel:       {"PrimaryFlowLabel", 88, 0, 20, KindHex},
	reqPrimary + pathReservedFlow:    {"Reserved90", 90, 4, 6, KindReserved},
	reqPrimary + pathPacketRate:      {"PrimaryPacketRate", 91, 2, 6, KindUint},
	reqPrimary + pathTrafficClass:    {"PrimaryTrafficClass", 92, 0, 8, KindHex},
	reqPrimary + pathHopLimit:        {"PrimaryHopLimit", 93, 0, 8, KindUint},
	reqPrimary + pathSL:              {"PrimarySL", 94, 0, 4, KindUint},
	reqPrimary + pathSubnetLocal:     {"PrimarySubnetLocal", 94, 4, 1, KindFlag},
	reqPrimary + pathReservedSL:      {"Reserved94", 94, 5, 3, KindReserved},
	reqPrimary + pathLocalACKTimeout: {"PrimaryLocalACKTimeout", 95, 0, 5, KindTimeout},
	reqPrimary + pathReservedACK:     {"Reserved95", 95, 5, 3, KindReserved},

	reqAlternate + pathLocalPortLID:    {"AlternateLocalPortLID", 96, 0, 16, KindUint},
	reqAlternate + pathRemotePortLID:   {"AlternateRemotePortLID", 98, 0, 16, KindUint},
	reqAlternate + pathLocalPortGID:    {"AlternateLocalPortGID", 100, 0, 128, KindGID},
	reqAlternate + pathRemotePortGID:   {"AlternateRemotePortGID", 116, 0, 128, KindGID},
	reqAlternate + pathFlowLabel:       {"AlternateFlowLabel", 132, 0, 20, KindHex},
	reqAlternate + pathReservedFlow:    {"Reserved134", 134, 4, 6, KindReserved},
	reqAlternate + pathPacketRate:      {"AlternatePacketRate", 135, 2, 6, KindUint},
	reqAlternate + pathTrafficClass:    {"AlternateTrafficClass", 136, 0, 8, KindHex},
	reqAlternate + pathHopLimit:        {"AlternateHopLimit", 137, 0, 8, KindUint},
	reqAlternate + pathSL:              {"AlternateSL", 138, 0, 4, KindUint},
	reqAlternate + pathSubnetLocal:     {"AlternateSubnetLocal", 138, 4, 1, KindFlag},
	reqAlternate + pathReservedSL:      {"Reserved138", 138, 5, 3, KindReserved},
	reqAlternate + pathLocalACKTimeout: {"AlternateLocalACKTimeout", 139, 0, 5, KindTimeout},
	reqSAPSupported:                    {"SAPSupported", 139, 5, 1, KindFlag},
	reqAlternateReserved139:            {"Reserved139", 139, 6, 2, KindReserved},

	reqPrivateData: {"PrivateData", 140, 0, 8 * REQPrivateDataLen, KindBytes},
}

func (m REQ) get(i int) uint64    { return reqLayout[i].getUint(m) }
func (m REQ) set(i int, v uint64) { reqLayout[i].setUint(m, v) }
func (m REQ) gid(i int) [16]byte  { return [16]byte(reqLayout[i].bytes(m)) }
func (m REQ) setGID(i int, g [16]byte) {
	copy(reqLayout[i].bytes(m), g[:])
}

// LocalCommID returns the active side's communication ID.
func (m REQ) LocalCommID() uint32 { return uint32(m.get(reqLocalCommID)) }

// VendorID returns the 24-bit Vendor ID of Enhanced Connection Establishment
// (ECE, added to IBTA Vol 1 Table 106 by IBA comment 9434; Linux
// CM_REQ_VENDOR_ID): it names the vendor whose ECE options the MAD header's
// AttributeModifier carries. Zero when the sender does not use ECE.
func (m REQ) VendorID() uint32 { return uint32(m.get(reqVendorID)) }

// ServiceID returns the service the REQ connects to.
func (m REQ) ServiceID() ServiceID { return ServiceID(m.get(reqServiceID)) }

// LocalCAGUID returns the active side's CA GUID.
func (m REQ) LocalCAGUID() uint64 { return m.get(reqLocalCAGUID) }

// LocalQKey returns the active side's Q_Key (RD only).
func (m REQ) LocalQKey() uint32 { return uint32(m.get(reqLocalQKey)) }

// LocalQPN returns the active side's 24-bit QP number.
func (m REQ) LocalQPN() uint32 { return uint32(m.get(reqLocalQPN)) }

// ResponderResources returns the RDMA read/atomic depth the active side accepts.
func (m REQ) ResponderResources() uint8 { return uint8(m.get(reqResponderResources)) }

// LocalEECN returns the active side's 24-bit EE context number (RD only).
func (m REQ) LocalEECN() uint32 { return uint32(m.get(reqLocalEECN)) }

// InitiatorDepth returns the RDMA read/atomic depth the active side initiates.
func (m REQ) InitiatorDepth() uint8 { return uint8(m.get(reqInitiatorDepth)) }

// RemoteEECN returns the 24-bit remote EE context number (RD only).
func (m REQ) RemoteEECN() uint32 { return uint32(m.get(reqRemoteEECN)) }

// RemoteCMResponseTimeout returns the 5-bit timeout exponent within which the
// passive side's CM is expected to answer.
func (m REQ) RemoteCMResponseTimeout() uint8 { return uint8(m.get(reqRemoteCMResponseTimeout)) }

// TransportServiceType returns the 2-bit transport service type.
func (m REQ) TransportServiceType() TransportType {
	return TransportType(m.get(reqTransportServiceType))
}

// EndToEndFlowControl reports whether the active side's receive queue
// generates end-to-end flow control credits.
func (m REQ) EndToEndFlowControl() bool { return m.get(reqEndToEndFlowControl) != 0 }

// StartingPSN returns the 24-bit PSN the active side will send first.
func (m REQ) StartingPSN() uint32 { return uint32(m.get(reqStartingPSN)) }

// LocalCMResponseTimeout returns the 5-bit timeout exponent within which the
// active side's CM answers.
func (m REQ) LocalCMResponseTimeout() uint8 { return uint8(m.get(reqLocalCMResponseTimeout)) }

// RetryCount returns the 3-bit transport retry count.
func (m REQ) RetryCount() uint8 { return uint8(m.get(reqRetryCount)) }

// PartitionKey returns the P_Key of the connection.
func (m REQ) PartitionKey() uint16 { return uint16(m.get(reqPartitionKey)) }

// PathPacketPayloadMTU returns the 4-bit path MTU code (1 = 256 … 5 = 4096).
func (m REQ) PathPacketPayloadMTU() uint8 { return uint8(m.get(reqPathPacketPayloadMTU)) }

// RDCExists reports the RDC Exists bit (RD only).
func (m REQ) RDCExists() bool { return m.get(reqRDCExists) != 0 }

// RNRRetryCount returns the 3-bit RNR NAK retry count (7 = infinite).
func (m REQ) RNRRetryCount() uint8 { return uint8(m.get(reqRNRRetryCount)) }

// MaxCMRetries returns the 4-bit number of times the active side resends a CM
// message.
func (m REQ) MaxCMRetries() uint8 { return uint8(m.get(reqMaxCMRetries)) }

// SRQ reports whether the active side's QP uses a shared receive queue.
func (m REQ) SRQ() bool { return m.get(reqSRQ) != 0 }

// ExtendedTransportType returns the 3-bit extended transport type (1 = XRC),
// meaningful when TransportServiceType is [TransportExtended].
func (m REQ) ExtendedTransportType() uint8 { return uint8(m.get(reqExtendedTransportType)) }

// PrimaryLocalPortLID returns the active side's LID on the primary path
// (0xFFFF, the permissive LID, on RoCE).
func (m REQ) PrimaryLocalPortLID() uint16 { return uint16(m.get(reqPrimary + pathLocalPortLID)) }

// PrimaryRemotePortLID returns the passive side's LID on the primary path.
func (m REQ) PrimaryRemotePortLID() uint16 { return uint16(m.get(reqPrimary + pathRemotePortLID)) }

// PrimaryLocalPortGID returns the active side's GID on the primary path.
func (m REQ) PrimaryLocalPortGID() [16]byte { return m.gid(reqPrimary + pathLocalPortGID) }

// PrimaryRemotePortGID returns the passive side's GID on the primary path.
func (m REQ) PrimaryRemotePortGID() [16]byte { return m.gid(reqPrimary + pathRemotePortGID) }

// PrimaryFlowLabel returns the 20-bit flow label of the primary path.
func (m REQ) PrimaryFlowLabel() uint32 { return uint32(m.get(reqPrimary + pathFlowLabel)) }

// PrimaryPacketRate returns the 6-bit static rate code of the primary path.
func (m REQ) PrimaryPacketRate() uint8 { return uint8(m.get(reqPrimary + pathPacketRate)) }

// PrimaryTrafficClass returns the traffic class of the primary path.
func (m REQ) PrimaryTrafficClass() uint8 { return uint8(m.get(reqPrimary + pathTrafficClass)) }

// PrimaryHopLimit returns the hop limit of the primary path.
func (m REQ) PrimaryHopLimit() uint8 { return uint8(m.get(reqPrimary + pathHopLimit)) }

// PrimarySL returns the 4-bit service level of the primary path.
func (m REQ) PrimarySL() uint8 { return uint8(m.get(reqPrimary + pathSL)) }

// PrimarySubnetLocal reports whether the primary path stays in the subnet.
func (m REQ) PrimarySubnetLocal() bool { return m.get(reqPrimary+pathSubnetLocal) != 0 }

// PrimaryLocalACKTimeout returns the 5-bit local ACK timeout exponent of the
// primary path.
func (m REQ) PrimaryLocalACKTimeout() uint8 {
	return uint8(m.get(reqPrimary + pathLocalACKTimeout))
}

// AlternateLocalPortLID returns the active side's LID on the alternate path.
func (m REQ) AlternateLocalPortLID() uint16 {
	return uint16(m.get(reqAlternate + pathLocalPortLID))
}

// AlternateRemotePortLID returns the passive side's LID on the alternate path.
func (m REQ) AlternateRemotePortLID() uint16 {
	return uint16(m.get(reqAlternate + pathRemotePortLID))
}

// AlternateLocalPortGID returns the active side's GID on the alternate path.
func (m REQ) AlternateLocalPortGID() [16]byte { return m.gid(reqAlternate + pathLocalPortGID) }

// AlternateRemotePortGID returns the passive side's GID on the alternate path.
func (m REQ) AlternateRemotePortGID() [16]byte { return m.gid(reqAlternate + pathRemotePortGID) }

// AlternateFlowLabel returns the 20-bit flow label of the alternate path.
func (m REQ) AlternateFlowLabel() uint32 { return uint32(m.get(reqAlternate + pathFlowLabel)) }

// AlternatePacketRate returns the 6-bit static rate code of the alternate path.
func (m REQ) AlternatePacketRate() uint8 { return uint8(m.get(reqAlternate + pathPacketRate)) }

// AlternateTrafficClass returns the traffic class of the alternate path.
func (m REQ) AlternateTrafficClass() uint8 {
	return uint8(m.get(reqAlternate + pathTrafficClass))
}

// AlternateHopLimit returns the hop limit of the alternate path.
func (m REQ) AlternateHopLimit() uint8 { return uint8(m.get(reqAlternate + pathHopLimit)) }

// AlternateSL returns the 4-bit service level of the alternate path.
func (m REQ) AlternateSL() uint8 { return uint8(m.get(reqAlternate + pathSL)) }

// AlternateSubnetLocal reports whether the alternate path stays in the subnet.
func (m REQ) AlternateSubnetLocal() bool { return m.get(reqAlternate+pathSubnetLocal) != 0 }

// AlternateLocalACKTimeout returns the 5-bit local ACK timeout exponent of the
// alternate path.
func (m REQ) AlternateLocalACKTimeout() uint8 {
	return uint8(m.get(reqAlternate + pathLocalACKTimeout))
}

// SAPSupported reports the SAP Supported bit (byte 139 bit 5; IBTA 1.3 and
// later, Linux CM_REQ_SAP_SUPPORTED): the active side understands
// SuggestAlternatePath.
func (m REQ) SAPSupported() bool { return m.get(reqSAPSupported) != 0 }

// PrivateData returns the 92-byte private data field, aliasing m. With an IP
// CM service ID its first 36 bytes are the IP CM header; see [REQ.IPCM].
func (m REQ) PrivateData() []byte { return reqLayout[reqPrivateData].bytes(m) }

// IPCM returns the IP CM header at the start of the private data. It fails
// with [ErrNotIPCM] when the service ID is not an IP CM one, and as
// [ParseIPCMHeader] does when the header is malformed.
func (m REQ) IPCM() (IPCMHeader, error) { return ipcmOf(m.ServiceID(), m.PrivateData()) }

// SetLocalCommID sets the local communication ID.
func (m REQ) SetLocalCommID(v uint32) { m.set(reqLocalCommID, uint64(v)) }

// SetVendorID sets the ECE Vendor ID; only the low 24 bits are stored.
func (m REQ) SetVendorID(v uint32) { m.set(reqVendorID, uint64(v)) }

// SetServiceID sets the service ID.
func (m REQ) SetServiceID(v ServiceID) { m.set(reqServiceID, uint64(v)) }

// SetLocalCAGUID sets the local CA GUID.
func (m REQ) SetLocalCAGUID(v uint64) { m.set(reqLocalCAGUID, v) }

// SetLocalQKey sets the local Q_Key.
func (m REQ) SetLocalQKey(v uint32) { m.set(reqLocalQKey, uint64(v)) }

// SetLocalQPN sets the local QPN; only the low 24 bits are stored.
func (m REQ) SetLocalQPN(v uint32) { m.set(reqLocalQPN, uint64(v)) }

// SetResponderResources sets the responder resources.
func (m REQ) SetResponderResources(v uint8) { m.set(reqResponderResources, uint64(v)) }

// SetLocalEECN sets the local EECN; only the low 24 bits are stored.
func (m REQ) SetLocalEECN(v uint32) { m.set(reqLocalEECN, uint64(v)) }

// SetInitiatorDepth sets the initiator depth.
func (m REQ) SetInitiatorDepth(v uint8) { m.set(reqInitiatorDepth, uint64(v)) }

// SetRemoteEECN sets the remote EECN; only the low 24 bits are stored.
func (m REQ) SetRemoteEECN(v uint32) { m.set(reqRemoteEECN, uint64(v)) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout (5 bits).
func (m REQ) SetRemoteCMResponseTimeout(v uint8) {
	m.set(reqRemoteCMResponseTimeout, uint64(v))
}

// SetTransportServiceType sets the transport service type (2 bits).
func (m REQ) SetTransportServiceType(v TransportType) {
	m.set(reqTransportServiceType, uint64(v))
}

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (m REQ) SetEndToEndFlowControl(v bool) { m.set(reqEndToEndFlowControl, b2u(v)) }

// SetStartingPSN sets the starting PSN; only the low 24 bits are stored.
func (m REQ) SetStartingPSN(v uint32) { m.set(reqStartingPSN, uint64(v)) }

// SetLocalCMResponseTimeout sets the local CM response timeout (5 bits).
func (m REQ) SetLocalCMResponseTimeout(v uint8) { m.set(reqLocalCMResponseTimeout, uint64(v)) }

// SetRetryCount sets the retry count (3 bits).
func (m REQ) SetRetryCount(v uint8) { m.set(reqRetryCount, uint64(v)) }

// SetPartitionKey sets the P_Key.
func (m REQ) SetPartitionKey(v uint16) { m.set(reqPartitionKey, uint64(v)) }

// SetPathPacketPayloadMTU sets the path MTU code (4 bits).
func (m REQ) SetPathPacketPayloadMTU(v uint8) { m.set(reqPathPacketPayloadMTU, uint64(v)) }

// SetRDCExists sets the RDC Exists bit.
func (m REQ) SetRDCExists(v bool) { m.set(reqRDCExists, b2u(v)) }

// SetRNRRetryCount sets the RNR retry count (3 bits).
func (m REQ) SetRNRRetryCount(v uint8) { m.set(reqRNRRetryCount, uint64(v)) }

// SetMaxCMRetries sets the maximum CM retries (4 bits).
func (m REQ) SetMaxCMRetries(v uint8) { m.set(reqMaxCMRetries, uint64(v)) }

// SetSRQ sets the SRQ bit.
func (m REQ) SetSRQ(v bool) { m.set(reqSRQ, b2u(v)) }

// SetExtendedTransportType sets the extended transport type (3 bits).
func (m REQ) SetExtendedTransportType(v uint8) { m.set(reqExtendedTransportType, uint64(v)) }

// SetPrimaryLocalPortLID sets the primary path's local LID.
func (m REQ) SetPrimaryLocalPortLID(v uint16) { m.set(reqPrimary+pathLocalPortLID, uint64(v)) }

// SetPrimaryRemotePortLID sets the primary path's remote LID.
func (m REQ) SetPrimaryRemotePortLID(v uint16) { m.set(reqPrimary+pathRemotePortLID, uint64(v)) }

// SetPrimaryLocalPortGID sets the primary path's local GID.
func (m REQ) SetPrimaryLocalPortGID(g [16]byte) { m.setGID(reqPrimary+pathLocalPortGID, g) }

// SetPrimaryRemotePortGID sets the primary path's remote GID.
func (m REQ) SetPrimaryRemotePortGID(g [16]byte) { m.setGID(reqPrimary+pathRemotePortGID, g) }

// SetPrimaryFlowLabel sets the primary path's flow label (20 bits).
func (m REQ) SetPrimaryFlowLabel(v uint32) { m.set(reqPrimary+pathFlowLabel, uint64(v)) }

// SetPrimaryPacketRate sets the primary path's packet rate (6 bits).
func (m REQ) SetPrimaryPacketRate(v uint8) { m.set(reqPrimary+pathPacketRate, uint64(v)) }

// SetPrimaryTrafficClass sets the primary path's traffic class.
func (m REQ) SetPrimaryTrafficClass(v uint8) { m.set(reqPrimary+pathTrafficClass, uint64(v)) }

// SetPrimaryHopLimit sets the primary path's hop limit.
func (m REQ) SetPrimaryHopLimit(v uint8) { m.set(reqPrimary+pathHopLimit, uint64(v)) }

// SetPrimarySL sets the primary path's service level (4 bits).
func (m REQ) SetPrimarySL(v uint8) { m.set(reqPrimary+pathSL, uint64(v)) }

// SetPrimarySubnetLocal sets the primary path's subnet-local bit.
func (m REQ) SetPrimarySubnetLocal(v bool) { m.set(reqPrimary+pathSubnetLocal, b2u(v)) }

// SetPrimaryLocalACKTimeout sets the primary path's local ACK timeout (5 bits).
func (m REQ) SetPrimaryLocalACKTimeout(v uint8) {
	m.set(reqPrimary+pathLocalACKTimeout, uint64(v))
}

// SetAlternateLocalPortLID sets the alternate path's local LID.
func (m REQ) SetAlternateLocalPortLID(v uint16) {
	m.set(reqAlternate+pathLocalPortLID, uint64(v))
}

// SetAlternateRemotePortLID sets the alternate path's remote LID.
func (m REQ) SetAlternateRemotePortLID(v uint16) {
	m.set(reqAlternate+pathRemotePortLID, uint64(v))
}

// SetAlternateLocalPortGID sets the alternate path's local GID.
func (m REQ) SetAlternateLocalPortGID(g [16]byte) { m.setGID(reqAlternate+pathLocalPortGID, g) }

// SetAlternateRemotePortGID sets the alternate path's remote GID.
func (m REQ) SetAlternateRemotePortGID(g [16]byte) {
	m.setGID(reqAlternate+pathRemotePortGID, g)
}

// SetAlternateFlowLabel sets the alternate path's flow label (20 bits).
func (m REQ) SetAlternateFlowLabel(v uint32) { m.set(reqAlternate+pathFlowLabel, uint64(v)) }

// SetAlternatePacketRate sets the alternate path's packet rate (6 bits).
func (m REQ) SetAlternatePacketRate(v uint8) { m.set(reqAlternate+pathPacketRate, uint64(v)) }

// SetAlternateTrafficClass sets the alternate path's traffic class.
func (m REQ) SetAlternateTrafficClass(v uint8) {
	m.set(reqAlternate+pathTrafficClass, uint64(v))
}

// SetAlternateHopLimit sets the alternate path's hop limit.
func (m REQ) SetAlternateHopLimit(v uint8) { m.set(reqAlternate+pathHopLimit, uint64(v)) }

// SetAlternateSL sets the alternate path's service level (4 bits).
func (m REQ) SetAlternateSL(v uint8) { m.set(reqAlternate+pathSL, uint64(v)) }

// SetAlternateSubnetLocal sets the alternate path's subnet-local bit.
func (m REQ) SetAlternateSubnetLocal(v bool) { m.set(reqAlternate+pathSubnetLocal, b2u(v)) }

// SetAlternateLocalACKTimeout sets the alternate path's local ACK timeout (5 bits).
func (m REQ) SetAlternateLocalACKTimeout(v uint8) {
	m.set(reqAlternate+pathLocalACKTimeout, uint64(v))
}

// SetSAPSupported sets the SAP Supported bit.
func (m REQ) SetSAPSupported(v bool) { m.set(reqSAPSupported, b2u(v)) }

// REQPath holds one path block of a REQ: the primary path at bytes 52–95 or
// the alternate path at bytes 96–139.
type REQPath struct {
	LocalPortLID    uint16
	RemotePortLID   uint16
	LocalPortGID    [16]byte
	RemotePortGID   [16]byte
	FlowLabel       uint32 // 20 bits
	PacketRate      uint8  // 6 bits
	TrafficClass    uint8
	HopLimit        uint8
	SL              uint8 // 4 bits
	SubnetLocal     bool
	LocalACKTimeout uint8 // 5 bits
}

func (m REQ) path(base int) REQPath {
	return REQPath{
		LocalPortLID:    uint16(m.get(base + pathLocalPortLID)),
		RemotePortLID:   uint16(m.get(base + pathRemotePortLID)),
		LocalPortGID:    m.gid(base + pathLocalPortGID),
		RemotePortGID:   m.gid(base + pathRemotePortGID),
		FlowLabel:       uint32(m.get(base + pathFlowLabel)),
		PacketRate:      uint8(m.get(base + pathPacketRate)),
		TrafficClass:    uint8(m.get(base + pathTrafficClass)),
		HopLimit:        uint8(m.get(base + pathHopLimit)),
		SL:              uint8(m.get(base + pathSL)),
		SubnetLocal:     m.get(base+pathSubnetLocal) != 0,
		LocalACKTimeout: uint8(m.get(base + pathLocalACKTimeout)),
	}
}

func (p *REQPath) encode(e *encoder, base int) {
	e.uint(base+pathLocalPortLID, uint64(p.LocalPortLID))
	e.uint(base+pathRemotePortLID, uint64(p.RemotePortLID))
	e.bytes(base+pathLocalPortGID, p.LocalPortGID[:])
	e.bytes(base+pathRemotePortGID, p.RemotePortGID[:])
	e.uint(base+pathFlowLabel, uint64(p.FlowLabel))
	e.uint(base+pathPacketRate, uint64(p.PacketRate))
	e.uint(base+pathTrafficClass, uint64(p.TrafficClass))
	e.uint(base+pathHopLimit, uint64(p.HopLimit))
	e.uint(base+pathSL, uint64(p.SL))
	e.flag(base+pathSubnetLocal, p.SubnetLocal)
	e.uint(base+pathLocalACKTimeout, uint64(p.LocalACKTimeout))
}

// PrimaryPath decodes the primary path block.
func (m REQ) PrimaryPath() REQPath { return m.path(reqPrimary) }

// AlternatePath decodes the alternate path block.
func (m REQ) AlternatePath() REQPath { return m.path(reqAlternate) }

// All yields every field of the REQ, reserved ones included, in wire order.
func (m REQ) All() iter.Seq2[Field, Value] { return walk(reqLayout[:], m) }

// Fields decodes the REQ.
func (m REQ) Fields() REQFields {
	return REQFields{
		LocalCommID:             m.LocalCommID(),
		VendorID:                m.VendorID(),
		ServiceID:               m.ServiceID(),
		LocalCAGUID:             m.LocalCAGUID(),
		LocalQKey:               m.LocalQKey(),
		LocalQPN:                m.LocalQPN(),
		ResponderResources:      m.ResponderResources(),
		LocalEECN:               m.LocalEECN(),
		InitiatorDepth:          m.InitiatorDepth(),
		RemoteEECN:              m.RemoteEECN(),
		RemoteCMResponseTimeout: m.RemoteCMResponseTimeout(),
		TransportServiceType:    m.TransportServiceType(),
		EndToEndFlowControl:     m.EndToEndFlowControl(),
		StartingPSN:             m.StartingPSN(),
		LocalCMResponseTimeout:  m.LocalCMResponseTimeout(),
		RetryCount:              m.RetryCount(),
		PartitionKey:            m.PartitionKey(),
		PathPacketPayloadMTU:    m.PathPacketPayloadMTU(),
		RDCExists:               m.RDCExists(),
		RNRRetryCount:           m.RNRRetryCount(),
		MaxCMRetries:            m.MaxCMRetries(),
		SRQ:                     m.SRQ(),
		ExtendedTransportType:   m.ExtendedTransportType(),
		Primary:                 m.PrimaryPath(),
		Alternate:               m.AlternatePath(),
		SAPSupported:            m.SAPSupported(),
		PrivateData:             [REQPrivateDataLen]byte(m.PrivateData()),
	}
}

// REQFields holds the contents of a REQ. Reserved bits are encoded as zero.
type REQFields struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits: ECE Vendor ID
	ServiceID               ServiceID
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportServiceType    TransportType
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PartitionKey            uint16
	PathPacketPayloadMTU    uint8 // 4 bits
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary                 REQPath
	Alternate               REQPath
	SAPSupported            bool
	PrivateData             [REQPrivateDataLen]byte
}

// Append appends the 232-byte attribute data to b. Values wider than their
// field are truncated to its width; Validate reports them.
func (f REQFields) Append(b []byte) []byte {
	b, _ = f.appendChecked(b)
	return b
}

// Validate reports the first value too wide for its field as a [*RangeError].
func (f REQFields) Validate() error {
	var buf [DataLen]byte
	_, err := f.appendChecked(buf[:0])
	return err
}

func (f *REQFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, DataLen, reqLayout[:])
	e.uint(reqLocalCommID, uint64(f.LocalCommID))
	e.uint(reqVendorID, uint64(f.VendorID))
	e.uint(reqServiceID, uint64(f.ServiceID))
	e.uint(reqLocalCAGUID, f.LocalCAGUID)
	e.uint(reqLocalQKey, uint64(f.LocalQKey))
	e.uint(reqLocalQPN, uint64(f.LocalQPN))
	e.uint(reqResponderResources, uint64(f.ResponderResources))
	e.uint(reqLocalEECN, uint64(f.LocalEECN))
	e.uint(reqInitiatorDepth, uint64(f.InitiatorDepth))
	e.uint(reqRemoteEECN, uint64(f.RemoteEECN))
	e.uint(reqRemoteCMResponseTimeout, uint64(f.RemoteCMResponseTimeout))
	e.uint(reqTransportServiceType, uint64(f.TransportServiceType))
	e.flag(reqEndToEndFlowControl, f.EndToEndFlowControl)
	e.uint(reqStartingPSN, uint64(f.StartingPSN))
	e.uint(reqLocalCMResponseTimeout, uint64(f.LocalCMResponseTimeout))
	e.uint(reqRetryCount, uint64(f.RetryCount))
	e.uint(reqPartitionKey, uint64(f.PartitionKey))
	e.uint(reqPathPacketPayloadMTU, uint64(f.PathPacketPayloadMTU))
	e.flag(reqRDCExists, f.RDCExists)
	e.uint(reqRNRRetryCount, uint64(f.RNRRetryCount))
	e.uint(reqMaxCMRetries, uint64(f.MaxCMRetries))
	e.flag(reqSRQ, f.SRQ)
	e.uint(reqExtendedTransportType, uint64(f.ExtendedTransportType))
	f.Primary.encode(&e, reqPrimary)
	f.Alternate.encode(&e, reqAlternate)
	e.flag(reqSAPSupported, f.SAPSupported)
	e.bytes(reqPrivateData, f.PrivateData[:])
	return b, e.err("REQ", reqLayout[:])
}
