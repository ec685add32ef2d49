package mad

import (
	"bytes"
	"testing"
)

// The rows below transcribe IBTA Vol 1 Tables 106–120 as Linux's
// include/rdma/ibta_vol1_c12.h states them: CM_FIELD*_LOC(struct, byte,
// width) and CM_FIELD_BLOC(struct, byte, bit, width), byte offsets relative
// to the end of the MAD header.

func encREQ(f REQFields) []byte         { return f.Append(nil) }
func encMRA(f MRAFields) []byte         { return f.Append(nil) }
func encREJ(f REJFields) []byte         { return f.Append(nil) }
func encREP(f REPFields) []byte         { return f.Append(nil) }
func encRTU(f RTUFields) []byte         { return f.Append(nil) }
func encDREQ(f DREQFields) []byte       { return f.Append(nil) }
func encDREP(f DREPFields) []byte       { return f.Append(nil) }
func encSIDRREQ(f SIDRREQFields) []byte { return f.Append(nil) }
func encSIDRREP(f SIDRREPFields) []byte { return f.Append(nil) }
func encHeader(f HeaderFields) []byte   { return f.Append(nil) }

func u64[T ~uint8 | ~uint16 | ~uint32 | ~uint64](v T) uint64 { return uint64(v) }

func TestREQFields(t *testing.T) {
	type c = fieldCase[REQFields, REQ]
	gid := func(g [16]byte) []byte { return g[:] }
	runFieldCases(t, reqLayout[:], DataLen, encREQ, REQ.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *REQFields) { f.LocalCommID = 0xffffffff },
			get: func(m REQ) uint64 { return u64(m.LocalCommID()) }, put: func(m REQ, v uint64) { m.SetLocalCommID(uint32(v)) }},
		// CM_REQ_VENDOR_ID CM_FIELD32_LOC(5, 24): bytes 5-7; byte 4 stays reserved.
		{name: "VendorID", off: 5, bit: 0, width: 24,
			set: func(f *REQFields) { f.VendorID = 0xffffff },
			get: func(m REQ) uint64 { return u64(m.VendorID()) }, put: func(m REQ, v uint64) { m.SetVendorID(uint32(v)) }},
		{name: "ServiceID", off: 8, bit: 0, width: 64,
			set: func(f *REQFields) { f.ServiceID = ^ServiceID(0) },
			get: func(m REQ) uint64 { return u64(m.ServiceID()) }, put: func(m REQ, v uint64) { m.SetServiceID(ServiceID(v)) }},
		{name: "LocalCAGUID", off: 16, bit: 0, width: 64,
			set: func(f *REQFields) { f.LocalCAGUID = ^uint64(0) },
			get: func(m REQ) uint64 { return m.LocalCAGUID() }, put: func(m REQ, v uint64) { m.SetLocalCAGUID(v) }},
		{name: "LocalQKey", off: 28, bit: 0, width: 32,
			set: func(f *REQFields) { f.LocalQKey = 0xffffffff },
			get: func(m REQ) uint64 { return u64(m.LocalQKey()) }, put: func(m REQ, v uint64) { m.SetLocalQKey(uint32(v)) }},
		{name: "LocalQPN", off: 32, bit: 0, width: 24,
			set: func(f *REQFields) { f.LocalQPN = 0xffffff },
			get: func(m REQ) uint64 { return u64(m.LocalQPN()) }, put: func(m REQ, v uint64) { m.SetLocalQPN(uint32(v)) }},
		{name: "ResponderResources", off: 35, bit: 0, width: 8,
			set: func(f *REQFields) { f.ResponderResources = 0xff },
			get: func(m REQ) uint64 { return u64(m.ResponderResources()) }, put: func(m REQ, v uint64) { m.SetResponderResources(uint8(v)) }},
		{name: "LocalEECN", off: 36, bit: 0, width: 24,
			set: func(f *REQFields) { f.LocalEECN = 0xffffff },
			get: func(m REQ) uint64 { return u64(m.LocalEECN()) }, put: func(m REQ, v uint64) { m.SetLocalEECN(uint32(v)) }},
		{name: "InitiatorDepth", off: 39, bit: 0, width: 8,
			set: func(f *REQFields) { f.InitiatorDepth = 0xff },
			get: func(m REQ) uint64 { return u64(m.InitiatorDepth()) }, put: func(m REQ, v uint64) { m.SetInitiatorDepth(uint8(v)) }},
		{name: "RemoteEECN", off: 40, bit: 0, width: 24,
			set: func(f *REQFields) { f.RemoteEECN = 0xffffff },
			get: func(m REQ) uint64 { return u64(m.RemoteEECN()) }, put: func(m REQ, v uint64) { m.SetRemoteEECN(uint32(v)) }},
		{name: "RemoteCMResponseTimeout", off: 43, bit: 0, width: 5,
			set: func(f *REQFields) { f.RemoteCMResponseTimeout = 31 },
			get: func(m REQ) uint64 { return u64(m.RemoteCMResponseTimeout()) }, put: func(m REQ, v uint64) { m.SetRemoteCMResponseTimeout(uint8(v)) }},
		{name: "TransportServiceType", off: 43, bit: 5, width: 2,
			set: func(f *REQFields) { f.TransportServiceType = TransportExtended },
			get: func(m REQ) uint64 { return u64(m.TransportServiceType()) }, put: func(m REQ, v uint64) { m.SetTransportServiceType(TransportType(v)) }},
		{name: "EndToEndFlowControl", off: 43, bit: 7, width: 1,
			set: func(f *REQFields) { f.EndToEndFlowControl = true },
			get: func(m REQ) uint64 { return b2u(m.EndToEndFlowControl()) }, put: func(m REQ, v uint64) { m.SetEndToEndFlowControl(v != 0) }},
		{name: "StartingPSN", off: 44, bit: 0, width: 24,
			set: func(f *REQFields) { f.StartingPSN = 0xffffff },
			get: func(m REQ) uint64 { return u64(m.StartingPSN()) }, put: func(m REQ, v uint64) { m.SetStartingPSN(uint32(v)) }},
		{name: "LocalCMResponseTimeout", off: 47, bit: 0, width: 5,
			set: func(f *REQFields) { f.LocalCMResponseTimeout = 31 },
			get: func(m REQ) uint64 { return u64(m.LocalCMResponseTimeout()) }, put: func(m REQ, v uint64) { m.SetLocalCMResponseTimeout(uint8(v)) }},
		{name: "RetryCount", off: 47, bit: 5, width: 3,
			set: func(f *REQFields) { f.RetryCount = 7 },
			get: func(m REQ) uint64 { return u64(m.RetryCount()) }, put: func(m REQ, v uint64) { m.SetRetryCount(uint8(v)) }},
		{name: "PartitionKey", off: 48, bit: 0, width: 16,
			set: func(f *REQFields) { f.PartitionKey = 0xffff },
			get: func(m REQ) uint64 { return u64(m.PartitionKey()) }, put: func(m REQ, v uint64) { m.SetPartitionKey(uint16(v)) }},
		{name: "PathPacketPayloadMTU", off: 50, bit: 0, width: 4,
			set: func(f *REQFields) { f.PathPacketPayloadMTU = 15 },
			get: func(m REQ) uint64 { return u64(m.PathPacketPayloadMTU()) }, put: func(m REQ, v uint64) { m.SetPathPacketPayloadMTU(uint8(v)) }},
		{name: "RDCExists", off: 50, bit: 4, width: 1,
			set: func(f *REQFields) { f.RDCExists = true },
			get: func(m REQ) uint64 { return b2u(m.RDCExists()) }, put: func(m REQ, v uint64) { m.SetRDCExists(v != 0) }},
		{name: "RNRRetryCount", off: 50, bit: 5, width: 3,
			set: func(f *REQFields) { f.RNRRetryCount = 7 },
			get: func(m REQ) uint64 { return u64(m.RNRRetryCount()) }, put: func(m REQ, v uint64) { m.SetRNRRetryCount(uint8(v)) }},
		{name: "MaxCMRetries", off: 51, bit: 0, width: 4,
			set: func(f *REQFields) { f.MaxCMRetries = 15 },
			get: func(m REQ) uint64 { return u64(m.MaxCMRetries()) }, put: func(m REQ, v uint64) { m.SetMaxCMRetries(uint8(v)) }},
		{name: "SRQ", off: 51, bit: 4, width: 1,
			set: func(f *REQFields) { f.SRQ = true },
			get: func(m REQ) uint64 { return b2u(m.SRQ()) }, put: func(m REQ, v uint64) { m.SetSRQ(v != 0) }},
		{name: "ExtendedTransportType", off: 51, bit: 5, width: 3,
			set: func(f *REQFields) { f.ExtendedTransportType = 7 },
			get: func(m REQ) uint64 { return u64(m.ExtendedTransportType()) }, put: func(m REQ, v uint64) { m.SetExtendedTransportType(uint8(v)) }},

		{name: "PrimaryLocalPortLID", off: 52, bit: 0, width: 16,
			set: func(f *REQFields) { f.Primary.LocalPortLID = 0xffff },
			get: func(m REQ) uint64 { return u64(m.PrimaryLocalPortLID()) }, put: func(m REQ, v uint64) { m.SetPrimaryLocalPortLID(uint16(v)) }},
		{name: "PrimaryRemotePortLID", off: 54, bit: 0, width: 16,
			set: func(f *REQFields) { f.Primary.RemotePortLID = 0xffff },
			get: func(m REQ) uint64 { return u64(m.PrimaryRemotePortLID()) }, put: func(m REQ, v uint64) { m.SetPrimaryRemotePortLID(uint16(v)) }},
		{name: "PrimaryLocalPortGID", off: 56, bit: 0, width: 128,
			set:  func(f *REQFields) { f.Primary.LocalPortGID = ones16() },
			getb: func(m REQ) []byte { return gid(m.PrimaryLocalPortGID()) }, putb: func(m REQ, p []byte) { m.SetPrimaryLocalPortGID([16]byte(p)) }},
		{name: "PrimaryRemotePortGID", off: 72, bit: 0, width: 128,
			set:  func(f *REQFields) { f.Primary.RemotePortGID = ones16() },
			getb: func(m REQ) []byte { return gid(m.PrimaryRemotePortGID()) }, putb: func(m REQ, p []byte) { m.SetPrimaryRemotePortGID([16]byte(p)) }},
		{name: "PrimaryFlowLabel", off: 88, bit: 0, width: 20,
			set: func(f *REQFields) { f.Primary.FlowLabel = 0xfffff },
			get: func(m REQ) uint64 { return u64(m.PrimaryFlowLabel()) }, put: func(m REQ, v uint64) { m.SetPrimaryFlowLabel(uint32(v)) }},
		{name: "PrimaryPacketRate", off: 91, bit: 2, width: 6,
			set: func(f *REQFields) { f.Primary.PacketRate = 63 },
			get: func(m REQ) uint64 { return u64(m.PrimaryPacketRate()) }, put: func(m REQ, v uint64) { m.SetPrimaryPacketRate(uint8(v)) }},
		{name: "PrimaryTrafficClass", off: 92, bit: 0, width: 8,
			set: func(f *REQFields) { f.Primary.TrafficClass = 0xff },
			get: func(m REQ) uint64 { return u64(m.PrimaryTrafficClass()) }, put: func(m REQ, v uint64) { m.SetPrimaryTrafficClass(uint8(v)) }},
		{name: "PrimaryHopLimit", off: 93, bit: 0, width: 8,
			set: func(f *REQFields) { f.Primary.HopLimit = 0xff },
			get: func(m REQ) uint64 { return u64(m.PrimaryHopLimit()) }, put: func(m REQ, v uint64) { m.SetPrimaryHopLimit(uint8(v)) }},
		{name: "PrimarySL", off: 94, bit: 0, width: 4,
			set: func(f *REQFields) { f.Primary.SL = 15 },
			get: func(m REQ) uint64 { return u64(m.PrimarySL()) }, put: func(m REQ, v uint64) { m.SetPrimarySL(uint8(v)) }},
		{name: "PrimarySubnetLocal", off: 94, bit: 4, width: 1,
			set: func(f *REQFields) { f.Primary.SubnetLocal = true },
			get: func(m REQ) uint64 { return b2u(m.PrimarySubnetLocal()) }, put: func(m REQ, v uint64) { m.SetPrimarySubnetLocal(v != 0) }},
		{name: "PrimaryLocalACKTimeout", off: 95, bit: 0, width: 5,
			set: func(f *REQFields) { f.Primary.LocalACKTimeout = 31 },
			get: func(m REQ) uint64 { return u64(m.PrimaryLocalACKTimeout()) }, put: func(m REQ, v uint64) { m.SetPrimaryLocalACKTimeout(uint8(v)) }},

		{name: "AlternateLocalPortLID", off: 96, bit: 0, width: 16,
			set: func(f *REQFields) { f.Alternate.LocalPortLID = 0xffff },
			get: func(m REQ) uint64 { return u64(m.AlternateLocalPortLID()) }, put: func(m REQ, v uint64) { m.SetAlternateLocalPortLID(uint16(v)) }},
		{name: "AlternateRemotePortLID", off: 98, bit: 0, width: 16,
			set: func(f *REQFields) { f.Alternate.RemotePortLID = 0xffff },
			get: func(m REQ) uint64 { return u64(m.AlternateRemotePortLID()) }, put: func(m REQ, v uint64) { m.SetAlternateRemotePortLID(uint16(v)) }},
		{name: "AlternateLocalPortGID", off: 100, bit: 0, width: 128,
			set:  func(f *REQFields) { f.Alternate.LocalPortGID = ones16() },
			getb: func(m REQ) []byte { return gid(m.AlternateLocalPortGID()) }, putb: func(m REQ, p []byte) { m.SetAlternateLocalPortGID([16]byte(p)) }},
		{name: "AlternateRemotePortGID", off: 116, bit: 0, width: 128,
			set:  func(f *REQFields) { f.Alternate.RemotePortGID = ones16() },
			getb: func(m REQ) []byte { return gid(m.AlternateRemotePortGID()) }, putb: func(m REQ, p []byte) { m.SetAlternateRemotePortGID([16]byte(p)) }},
		{name: "AlternateFlowLabel", off: 132, bit: 0, width: 20,
			set: func(f *REQFields) { f.Alternate.FlowLabel = 0xfffff },
			get: func(m REQ) uint64 { return u64(m.AlternateFlowLabel()) }, put: func(m REQ, v uint64) { m.SetAlternateFlowLabel(uint32(v)) }},
		{name: "AlternatePacketRate", off: 135, bit: 2, width: 6,
			set: func(f *REQFields) { f.Alternate.PacketRate = 63 },
			get: func(m REQ) uint64 { return u64(m.AlternatePacketRate()) }, put: func(m REQ, v uint64) { m.SetAlternatePacketRate(uint8(v)) }},
		{name: "AlternateTrafficClass", off: 136, bit: 0, width: 8,
			set: func(f *REQFields) { f.Alternate.TrafficClass = 0xff },
			get: func(m REQ) uint64 { return u64(m.AlternateTrafficClass()) }, put: func(m REQ, v uint64) { m.SetAlternateTrafficClass(uint8(v)) }},
		{name: "AlternateHopLimit", off: 137, bit: 0, width: 8,
			set: func(f *REQFields) { f.Alternate.HopLimit = 0xff },
			get: func(m REQ) uint64 { return u64(m.AlternateHopLimit()) }, put: func(m REQ, v uint64) { m.SetAlternateHopLimit(uint8(v)) }},
		{name: "AlternateSL", off: 138, bit: 0, width: 4,
			set: func(f *REQFields) { f.Alternate.SL = 15 },
			get: func(m REQ) uint64 { return u64(m.AlternateSL()) }, put: func(m REQ, v uint64) { m.SetAlternateSL(uint8(v)) }},
		{name: "AlternateSubnetLocal", off: 138, bit: 4, width: 1,
			set: func(f *REQFields) { f.Alternate.SubnetLocal = true },
			get: func(m REQ) uint64 { return b2u(m.AlternateSubnetLocal()) }, put: func(m REQ, v uint64) { m.SetAlternateSubnetLocal(v != 0) }},
		{name: "AlternateLocalACKTimeout", off: 139, bit: 0, width: 5,
			set: func(f *REQFields) { f.Alternate.LocalACKTimeout = 31 },
			get: func(m REQ) uint64 { return u64(m.AlternateLocalACKTimeout()) }, put: func(m REQ, v uint64) { m.SetAlternateLocalACKTimeout(uint8(v)) }},
		{name: "SAPSupported", off: 139, bit: 5, width: 1,
			set: func(f *REQFields) { f.SAPSupported = true },
			get: func(m REQ) uint64 { return b2u(m.SAPSupported()) }, put: func(m REQ, v uint64) { m.SetSAPSupported(v != 0) }},
		{name: "PrivateData", off: 140, bit: 0, width: 8 * 92,
			set:  func(f *REQFields) { f.PrivateData = [92]byte(ff(92)) },
			getb: REQ.PrivateData, putb: func(m REQ, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestMRAFields(t *testing.T) {
	type c = fieldCase[MRAFields, MRA]
	runFieldCases(t, mraLayout[:], DataLen, encMRA, MRA.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *MRAFields) { f.LocalCommID = 0xffffffff },
			get: func(m MRA) uint64 { return u64(m.LocalCommID()) }, put: func(m MRA, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *MRAFields) { f.RemoteCommID = 0xffffffff },
			get: func(m MRA) uint64 { return u64(m.RemoteCommID()) }, put: func(m MRA, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "MessageMRAed", off: 8, bit: 0, width: 2,
			set: func(f *MRAFields) { f.MessageMRAed = 3 },
			get: func(m MRA) uint64 { return u64(m.MessageMRAed()) }, put: func(m MRA, v uint64) { m.SetMessageMRAed(MsgType(v)) }},
		{name: "ServiceTimeout", off: 9, bit: 0, width: 5,
			set: func(f *MRAFields) { f.ServiceTimeout = 31 },
			get: func(m MRA) uint64 { return u64(m.ServiceTimeout()) }, put: func(m MRA, v uint64) { m.SetServiceTimeout(uint8(v)) }},
		{name: "PrivateData", off: 10, bit: 0, width: 8 * 222,
			set:  func(f *MRAFields) { f.PrivateData = [222]byte(ff(222)) },
			getb: MRA.PrivateData, putb: func(m MRA, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestREJFields(t *testing.T) {
	type c = fieldCase[REJFields, REJ]
	runFieldCases(t, rejLayout[:], DataLen, encREJ, REJ.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *REJFields) { f.LocalCommID = 0xffffffff },
			get: func(m REJ) uint64 { return u64(m.LocalCommID()) }, put: func(m REJ, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *REJFields) { f.RemoteCommID = 0xffffffff },
			get: func(m REJ) uint64 { return u64(m.RemoteCommID()) }, put: func(m REJ, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "MessageRejected", off: 8, bit: 0, width: 2,
			set: func(f *REJFields) { f.MessageRejected = 3 },
			get: func(m REJ) uint64 { return u64(m.MessageRejected()) }, put: func(m REJ, v uint64) { m.SetMessageRejected(MsgType(v)) }},
		{name: "RejectInfoLength", off: 9, bit: 0, width: 7,
			set: func(f *REJFields) { f.RejectInfoLength = 127 },
			get: func(m REJ) uint64 { return u64(m.RejectInfoLength()) }, put: func(m REJ, v uint64) { m.SetRejectInfoLength(uint8(v)) }},
		{name: "Reason", off: 10, bit: 0, width: 16,
			set: func(f *REJFields) { f.Reason = 0xffff },
			get: func(m REJ) uint64 { return u64(m.Reason()) }, put: func(m REJ, v uint64) { m.SetReason(RejectReason(v)) }},
		{name: "ARI", off: 12, bit: 0, width: 8 * 72,
			set:  func(f *REJFields) { f.ARI = [72]byte(ff(72)) },
			getb: REJ.ARI, putb: func(m REJ, p []byte) { copy(m.ARI(), p) }},
		{name: "PrivateData", off: 84, bit: 0, width: 8 * 148,
			set:  func(f *REJFields) { f.PrivateData = [148]byte(ff(148)) },
			getb: REJ.PrivateData, putb: func(m REJ, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestREPFields(t *testing.T) {
	type c = fieldCase[REPFields, REP]
	runFieldCases(t, repLayout[:], DataLen, encREP, REP.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *REPFields) { f.LocalCommID = 0xffffffff },
			get: func(m REP) uint64 { return u64(m.LocalCommID()) }, put: func(m REP, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *REPFields) { f.RemoteCommID = 0xffffffff },
			get: func(m REP) uint64 { return u64(m.RemoteCommID()) }, put: func(m REP, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "LocalQKey", off: 8, bit: 0, width: 32,
			set: func(f *REPFields) { f.LocalQKey = 0xffffffff },
			get: func(m REP) uint64 { return u64(m.LocalQKey()) }, put: func(m REP, v uint64) { m.SetLocalQKey(uint32(v)) }},
		{name: "LocalQPN", off: 12, bit: 0, width: 24,
			set: func(f *REPFields) { f.LocalQPN = 0xffffff },
			get: func(m REP) uint64 { return u64(m.LocalQPN()) }, put: func(m REP, v uint64) { m.SetLocalQPN(uint32(v)) }},
		// CM_REP_VENDOR_ID_H/M/L: VendorID[23:16] at 15, [15:8] at 19, [7:0]
		// at 23, each part reached through VendorID and SetVendorID.
		{name: "VendorIDH", off: 15, bit: 0, width: 8,
			set: func(f *REPFields) { f.VendorID = 0xff0000 },
			get: func(m REP) uint64 { return u64(m.VendorID() >> 16) },
			put: func(m REP, v uint64) { m.SetVendorID(m.VendorID()&^0xff0000 | uint32(v)<<16) }},
		{name: "LocalEEContext", off: 16, bit: 0, width: 24,
			set: func(f *REPFields) { f.LocalEEContext = 0xffffff },
			get: func(m REP) uint64 { return u64(m.LocalEEContext()) }, put: func(m REP, v uint64) { m.SetLocalEEContext(uint32(v)) }},
		{name: "VendorIDM", off: 19, bit: 0, width: 8,
			set: func(f *REPFields) { f.VendorID = 0x00ff00 },
			get: func(m REP) uint64 { return u64(m.VendorID() >> 8 & 0xff) },
			put: func(m REP, v uint64) { m.SetVendorID(m.VendorID()&^0x00ff00 | uint32(v)<<8) }},
		{name: "StartingPSN", off: 20, bit: 0, width: 24,
			set: func(f *REPFields) { f.StartingPSN = 0xffffff },
			get: func(m REP) uint64 { return u64(m.StartingPSN()) }, put: func(m REP, v uint64) { m.SetStartingPSN(uint32(v)) }},
		{name: "VendorIDL", off: 23, bit: 0, width: 8,
			set: func(f *REPFields) { f.VendorID = 0x0000ff },
			get: func(m REP) uint64 { return u64(m.VendorID() & 0xff) },
			put: func(m REP, v uint64) { m.SetVendorID(m.VendorID()&^0x0000ff | uint32(v)) }},
		{name: "ResponderResources", off: 24, bit: 0, width: 8,
			set: func(f *REPFields) { f.ResponderResources = 0xff },
			get: func(m REP) uint64 { return u64(m.ResponderResources()) }, put: func(m REP, v uint64) { m.SetResponderResources(uint8(v)) }},
		{name: "InitiatorDepth", off: 25, bit: 0, width: 8,
			set: func(f *REPFields) { f.InitiatorDepth = 0xff },
			get: func(m REP) uint64 { return u64(m.InitiatorDepth()) }, put: func(m REP, v uint64) { m.SetInitiatorDepth(uint8(v)) }},
		{name: "TargetACKDelay", off: 26, bit: 0, width: 5,
			set: func(f *REPFields) { f.TargetACKDelay = 31 },
			get: func(m REP) uint64 { return u64(m.TargetACKDelay()) }, put: func(m REP, v uint64) { m.SetTargetACKDelay(uint8(v)) }},
		{name: "FailoverAccepted", off: 26, bit: 5, width: 2,
			set: func(f *REPFields) { f.FailoverAccepted = 3 },
			get: func(m REP) uint64 { return u64(m.FailoverAccepted()) }, put: func(m REP, v uint64) { m.SetFailoverAccepted(uint8(v)) }},
		{name: "EndToEndFlowControl", off: 26, bit: 7, width: 1,
			set: func(f *REPFields) { f.EndToEndFlowControl = true },
			get: func(m REP) uint64 { return b2u(m.EndToEndFlowControl()) }, put: func(m REP, v uint64) { m.SetEndToEndFlowControl(v != 0) }},
		{name: "RNRRetryCount", off: 27, bit: 0, width: 3,
			set: func(f *REPFields) { f.RNRRetryCount = 7 },
			get: func(m REP) uint64 { return u64(m.RNRRetryCount()) }, put: func(m REP, v uint64) { m.SetRNRRetryCount(uint8(v)) }},
		{name: "SRQ", off: 27, bit: 3, width: 1,
			set: func(f *REPFields) { f.SRQ = true },
			get: func(m REP) uint64 { return b2u(m.SRQ()) }, put: func(m REP, v uint64) { m.SetSRQ(v != 0) }},
		{name: "LocalCAGUID", off: 28, bit: 0, width: 64,
			set: func(f *REPFields) { f.LocalCAGUID = ^uint64(0) },
			get: func(m REP) uint64 { return m.LocalCAGUID() }, put: func(m REP, v uint64) { m.SetLocalCAGUID(v) }},
		{name: "PrivateData", off: 36, bit: 0, width: 8 * 196,
			set:  func(f *REPFields) { f.PrivateData = [196]byte(ff(196)) },
			getb: REP.PrivateData, putb: func(m REP, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestRTUFields(t *testing.T) {
	type c = fieldCase[RTUFields, RTU]
	runFieldCases(t, rtuLayout[:], DataLen, encRTU, RTU.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *RTUFields) { f.LocalCommID = 0xffffffff },
			get: func(m RTU) uint64 { return u64(m.LocalCommID()) }, put: func(m RTU, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *RTUFields) { f.RemoteCommID = 0xffffffff },
			get: func(m RTU) uint64 { return u64(m.RemoteCommID()) }, put: func(m RTU, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "PrivateData", off: 8, bit: 0, width: 8 * 224,
			set:  func(f *RTUFields) { f.PrivateData = [224]byte(ff(224)) },
			getb: RTU.PrivateData, putb: func(m RTU, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestDREQFields(t *testing.T) {
	type c = fieldCase[DREQFields, DREQ]
	runFieldCases(t, dreqLayout[:], DataLen, encDREQ, DREQ.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *DREQFields) { f.LocalCommID = 0xffffffff },
			get: func(m DREQ) uint64 { return u64(m.LocalCommID()) }, put: func(m DREQ, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *DREQFields) { f.RemoteCommID = 0xffffffff },
			get: func(m DREQ) uint64 { return u64(m.RemoteCommID()) }, put: func(m DREQ, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "RemoteQPN", off: 8, bit: 0, width: 24,
			set: func(f *DREQFields) { f.RemoteQPN = 0xffffff },
			get: func(m DREQ) uint64 { return u64(m.RemoteQPN()) }, put: func(m DREQ, v uint64) { m.SetRemoteQPN(uint32(v)) }},
		{name: "PrivateData", off: 12, bit: 0, width: 8 * 220,
			set:  func(f *DREQFields) { f.PrivateData = [220]byte(ff(220)) },
			getb: DREQ.PrivateData, putb: func(m DREQ, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestDREPFields(t *testing.T) {
	type c = fieldCase[DREPFields, DREP]
	runFieldCases(t, drepLayout[:], DataLen, encDREP, DREP.Fields, []c{
		{name: "LocalCommID", off: 0, bit: 0, width: 32,
			set: func(f *DREPFields) { f.LocalCommID = 0xffffffff },
			get: func(m DREP) uint64 { return u64(m.LocalCommID()) }, put: func(m DREP, v uint64) { m.SetLocalCommID(uint32(v)) }},
		{name: "RemoteCommID", off: 4, bit: 0, width: 32,
			set: func(f *DREPFields) { f.RemoteCommID = 0xffffffff },
			get: func(m DREP) uint64 { return u64(m.RemoteCommID()) }, put: func(m DREP, v uint64) { m.SetRemoteCommID(uint32(v)) }},
		{name: "PrivateData", off: 8, bit: 0, width: 8 * 224,
			set:  func(f *DREPFields) { f.PrivateData = [224]byte(ff(224)) },
			getb: DREP.PrivateData, putb: func(m DREP, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestSIDRREQFields(t *testing.T) {
	type c = fieldCase[SIDRREQFields, SIDRREQ]
	runFieldCases(t, sidrreqLayout[:], DataLen, encSIDRREQ, SIDRREQ.Fields, []c{
		{name: "RequestID", off: 0, bit: 0, width: 32,
			set: func(f *SIDRREQFields) { f.RequestID = 0xffffffff },
			get: func(m SIDRREQ) uint64 { return u64(m.RequestID()) }, put: func(m SIDRREQ, v uint64) { m.SetRequestID(uint32(v)) }},
		{name: "PartitionKey", off: 4, bit: 0, width: 16,
			set: func(f *SIDRREQFields) { f.PartitionKey = 0xffff },
			get: func(m SIDRREQ) uint64 { return u64(m.PartitionKey()) }, put: func(m SIDRREQ, v uint64) { m.SetPartitionKey(uint16(v)) }},
		{name: "ServiceID", off: 8, bit: 0, width: 64,
			set: func(f *SIDRREQFields) { f.ServiceID = ^ServiceID(0) },
			get: func(m SIDRREQ) uint64 { return u64(m.ServiceID()) }, put: func(m SIDRREQ, v uint64) { m.SetServiceID(ServiceID(v)) }},
		{name: "PrivateData", off: 16, bit: 0, width: 8 * 216,
			set:  func(f *SIDRREQFields) { f.PrivateData = [216]byte(ff(216)) },
			getb: SIDRREQ.PrivateData, putb: func(m SIDRREQ, p []byte) { copy(m.PrivateData(), p) }},
	})
}

func TestSIDRREPFields(t *testing.T) {
	type c = fieldCase[SIDRREPFields, SIDRREP]
	runFieldCases(t, sidrrepLayout[:], DataLen, encSIDRREP, SIDRREP.Fields, []c{
		{name: "RequestID", off: 0, bit: 0, width: 32,
			set: func(f *SIDRREPFields) { f.RequestID = 0xffffffff },
			get: func(m SIDRREP) uint64 { return u64(m.RequestID()) }, put: func(m SIDRREP, v uint64) { m.SetRequestID(uint32(v)) }},
		{name: "Status", off: 4, bit: 0, width: 8,
			set: func(f *SIDRREPFields) { f.Status = 0xff },
			get: func(m SIDRREP) uint64 { return u64(m.Status()) }, put: func(m SIDRREP, v uint64) { m.SetStatus(SIDRStatus(v)) }},
		{name: "AdditionalInfoLength", off: 5, bit: 0, width: 8,
			set: func(f *SIDRREPFields) { f.AdditionalInfoLength = 0xff },
			get: func(m SIDRREP) uint64 { return u64(m.AdditionalInfoLength()) }, put: func(m SIDRREP, v uint64) { m.SetAdditionalInfoLength(uint8(v)) }},
		// CM_SIDR_REP_VENDOR_ID_H CM_FIELD16_LOC(6, 16) is VendorID[23:8],
		// CM_SIDR_REP_VENDOR_ID_L CM_FIELD8_LOC(11, 8) VendorID[7:0].
		{name: "VendorIDH", off: 6, bit: 0, width: 16,
			set: func(f *SIDRREPFields) { f.VendorID = 0xffff00 },
			get: func(m SIDRREP) uint64 { return u64(m.VendorID() >> 8) },
			put: func(m SIDRREP, v uint64) { m.SetVendorID(m.VendorID()&^0xffff00 | uint32(v)<<8) }},
		{name: "QPN", off: 8, bit: 0, width: 24,
			set: func(f *SIDRREPFields) { f.QPN = 0xffffff },
			get: func(m SIDRREP) uint64 { return u64(m.QPN()) }, put: func(m SIDRREP, v uint64) { m.SetQPN(uint32(v)) }},
		{name: "VendorIDL", off: 11, bit: 0, width: 8,
			set: func(f *SIDRREPFields) { f.VendorID = 0x0000ff },
			get: func(m SIDRREP) uint64 { return u64(m.VendorID() & 0xff) },
			put: func(m SIDRREP, v uint64) { m.SetVendorID(m.VendorID()&^0x0000ff | uint32(v)) }},
		{name: "ServiceID", off: 12, bit: 0, width: 64,
			set: func(f *SIDRREPFields) { f.ServiceID = ^ServiceID(0) },
			get: func(m SIDRREP) uint64 { return u64(m.ServiceID()) }, put: func(m SIDRREP, v uint64) { m.SetServiceID(ServiceID(v)) }},
		{name: "QKey", off: 20, bit: 0, width: 32,
			set: func(f *SIDRREPFields) { f.QKey = 0xffffffff },
			get: func(m SIDRREP) uint64 { return u64(m.QKey()) }, put: func(m SIDRREP, v uint64) { m.SetQKey(uint32(v)) }},
		{name: "ClassPortInfo", off: 24, bit: 0, width: 8 * 72,
			set:  func(f *SIDRREPFields) { f.ClassPortInfo = [72]byte(ff(72)) },
			getb: SIDRREP.ClassPortInfo, putb: func(m SIDRREP, p []byte) { copy(m.ClassPortInfo(), p) }},
		{name: "PrivateData", off: 96, bit: 0, width: 8 * 136,
			set:  func(f *SIDRREPFields) { f.PrivateData = [136]byte(ff(136)) },
			getb: SIDRREP.PrivateData, putb: func(m SIDRREP, p []byte) { copy(m.PrivateData(), p) }},
	})
}

// TestHeaderFields checks the MAD common header against IBTA Vol 1 §13.4.2
// (Linux struct ib_mad_hdr).
func TestHeaderFields(t *testing.T) {
	type c = fieldCase[HeaderFields, Header]
	runFieldCases(t, headerLayout[:], HeaderLen, encHeader, Header.Fields, []c{
		{name: "BaseVersion", off: 0, bit: 0, width: 8,
			set: func(f *HeaderFields) { f.BaseVersion = 0xff },
			get: func(h Header) uint64 { return u64(h.BaseVersion()) }, put: func(h Header, v uint64) { h.SetBaseVersion(uint8(v)) }},
		{name: "MgmtClass", off: 1, bit: 0, width: 8,
			set: func(f *HeaderFields) { f.MgmtClass = 0xff },
			get: func(h Header) uint64 { return u64(h.MgmtClass()) }, put: func(h Header, v uint64) { h.SetMgmtClass(MgmtClass(v)) }},
		{name: "ClassVersion", off: 2, bit: 0, width: 8,
			set: func(f *HeaderFields) { f.ClassVersion = 0xff },
			get: func(h Header) uint64 { return u64(h.ClassVersion()) }, put: func(h Header, v uint64) { h.SetClassVersion(uint8(v)) }},
		{name: "Method", off: 3, bit: 0, width: 8,
			set: func(f *HeaderFields) { f.Method = 0xff },
			get: func(h Header) uint64 { return u64(h.Method()) }, put: func(h Header, v uint64) { h.SetMethod(Method(v)) }},
		{name: "Status", off: 4, bit: 0, width: 16,
			set: func(f *HeaderFields) { f.Status = 0xffff },
			get: func(h Header) uint64 { return u64(h.Status()) }, put: func(h Header, v uint64) { h.SetStatus(Status(v)) }},
		{name: "ClassSpecific", off: 6, bit: 0, width: 16,
			set: func(f *HeaderFields) { f.ClassSpecific = 0xffff },
			get: func(h Header) uint64 { return u64(h.ClassSpecific()) }, put: func(h Header, v uint64) { h.SetClassSpecific(uint16(v)) }},
		{name: "TransactionID", off: 8, bit: 0, width: 64,
			set: func(f *HeaderFields) { f.TransactionID = ^uint64(0) },
			get: func(h Header) uint64 { return h.TransactionID() }, put: func(h Header, v uint64) { h.SetTransactionID(v) }},
		{name: "AttributeID", off: 16, bit: 0, width: 16,
			set: func(f *HeaderFields) { f.AttributeID = 0xffff },
			get: func(h Header) uint64 { return u64(h.AttributeID()) }, put: func(h Header, v uint64) { h.SetAttributeID(AttributeID(v)) }},
		{name: "AttributeModifier", off: 20, bit: 0, width: 32,
			set: func(f *HeaderFields) { f.AttributeModifier = 0xffffffff },
			get: func(h Header) uint64 { return u64(h.AttributeModifier()) }, put: func(h Header, v uint64) { h.SetAttributeModifier(uint32(v)) }},
	})
}

// TestVendorIDSplit checks that the ECE Vendor ID, one 24-bit value, lands
// in the bytes IBTA gives each part: REQ bytes 5-7, REP bytes 15, 19 and 23,
// SIDR_REP bytes 6-7 and 11, most significant part first, and nowhere else.
func TestVendorIDSplit(t *testing.T) {
	const id = 0xabcdef
	for _, tc := range []struct {
		name  string
		enc   []byte       // Fields with only VendorID set, encoded
		set   func([]byte) // SetVendorID on a zero view
		get   func([]byte) uint32
		bytes map[int]byte // offset → byte; every other byte is zero
	}{
		{"REQ", REQFields{VendorID: id}.Append(nil),
			func(b []byte) { REQ(b).SetVendorID(id) }, func(b []byte) uint32 { return REQ(b).VendorID() },
			map[int]byte{5: 0xab, 6: 0xcd, 7: 0xef}},
		{"REP", REPFields{VendorID: id}.Append(nil),
			func(b []byte) { REP(b).SetVendorID(id) }, func(b []byte) uint32 { return REP(b).VendorID() },
			map[int]byte{15: 0xab, 19: 0xcd, 23: 0xef}},
		{"SIDR_REP", SIDRREPFields{VendorID: id}.Append(nil),
			func(b []byte) { SIDRREP(b).SetVendorID(id) }, func(b []byte) uint32 { return SIDRREP(b).VendorID() },
			map[int]byte{6: 0xab, 7: 0xcd, 11: 0xef}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := make([]byte, DataLen)
			for off, c := range tc.bytes {
				want[off] = c
			}
			if !bytes.Equal(tc.enc, want) {
				t.Errorf("Append:\n got %x\nwant %x", tc.enc, want)
			}
			b := make([]byte, DataLen)
			tc.set(b)
			if !bytes.Equal(b, want) {
				t.Errorf("SetVendorID:\n got %x\nwant %x", b, want)
			}
			if got := tc.get(want); got != id {
				t.Errorf("VendorID = %#x, want %#x", got, id)
			}
			// SetVendorID keeps to 24 bits and to its own bytes.
			ones := bytes.Repeat([]byte{0xff}, DataLen)
			tc.set(ones)
			for off, c := range tc.bytes {
				if ones[off] != c {
					t.Errorf("SetVendorID over ones: byte %d = %#x, want %#x", off, ones[off], c)
				}
				ones[off] = 0xff
			}
			if !allBytes(ones, 0xff) {
				t.Errorf("SetVendorID over ones touched other bytes: %x", ones)
			}
		})
	}
}
