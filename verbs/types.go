package verbs

//go:generate go run ../internal/enumgen

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// WCStatus is a work completion status, enum ibv_wc_status. String returns
// the ibverbs name, e.g. "IBV_WC_RETRY_EXC_ERR"; Description returns
// ibv_wc_status_str's text, e.g. "transport retry counter exceeded".
//
//enum:string IBV_WC_STATUS(%d)
//enum:method Description unknown
type WCStatus uint8

// Work completion statuses, with ibverbs' values.
const (
	WCSuccess        WCStatus = iota // "IBV_WC_SUCCESS" "success"
	WCLocLenErr                      // "IBV_WC_LOC_LEN_ERR" "local length error"
	WCLocQPOpErr                     // "IBV_WC_LOC_QP_OP_ERR" "local QP operation error"
	WCLocEECOpErr                    // "IBV_WC_LOC_EEC_OP_ERR" "local EE context operation error"
	WCLocProtErr                     // "IBV_WC_LOC_PROT_ERR" "local protection error"
	WCWRFlushErr                     // "IBV_WC_WR_FLUSH_ERR" "Work Request Flushed Error"
	WCMWBindErr                      // "IBV_WC_MW_BIND_ERR" "memory management operation error"
	WCBadRespErr                     // "IBV_WC_BAD_RESP_ERR" "bad response error"
	WCLocAccessErr                   // "IBV_WC_LOC_ACCESS_ERR" "local access error"
	WCRemInvReqErr                   // "IBV_WC_REM_INV_REQ_ERR" "remote invalid request error"
	WCRemAccessErr                   // "IBV_WC_REM_ACCESS_ERR" "remote access error"
	WCRemOpErr                       // "IBV_WC_REM_OP_ERR" "remote operation error"
	WCRetryExcErr                    // "IBV_WC_RETRY_EXC_ERR" "transport retry counter exceeded"
	WCRNRRetryExcErr                 // "IBV_WC_RNR_RETRY_EXC_ERR" "RNR retry counter exceeded"
	WCLocRDDViolErr                  // "IBV_WC_LOC_RDD_VIOL_ERR" "local RDD violation error"
	WCRemInvRDReqErr                 // "IBV_WC_REM_INV_RD_REQ_ERR" "remote invalid RD request"
	WCRemAbortErr                    // "IBV_WC_REM_ABORT_ERR" "aborted error"
	WCInvEECNErr                     // "IBV_WC_INV_EECN_ERR" "invalid EE context number"
	WCInvEECStateErr                 // "IBV_WC_INV_EEC_STATE_ERR" "invalid EE context state"
	WCFatalErr                       // "IBV_WC_FATAL_ERR" "fatal error"
	WCRespTimeoutErr                 // "IBV_WC_RESP_TIMEOUT_ERR" "response timeout error"
	WCGeneralErr                     // "IBV_WC_GENERAL_ERR" "general error"
)

// WCOpcode is enum ibv_wc_opcode; String returns the name rdma-core's
// verbs.h gives it, e.g. "IBV_WC_RDMA_READ".
//
//enum:string IBV_WC_OPCODE(%d)
type WCOpcode uint8

// Completion opcodes, with ibverbs' values.
const (
	WCSend            WCOpcode = 0   // "IBV_WC_SEND"
	WCRDMAWrite       WCOpcode = 1   // "IBV_WC_RDMA_WRITE"
	WCRDMARead        WCOpcode = 2   // "IBV_WC_RDMA_READ"
	WCCompSwap        WCOpcode = 3   // "IBV_WC_COMP_SWAP"
	WCFetchAdd        WCOpcode = 4   // "IBV_WC_FETCH_ADD"
	WCBindMW          WCOpcode = 5   // "IBV_WC_BIND_MW"
	WCLocalInv        WCOpcode = 6   // "IBV_WC_LOCAL_INV"
	WCAtomicWrite     WCOpcode = 9   // "IBV_WC_ATOMIC_WRITE"
	WCFlush           WCOpcode = 10  // "IBV_WC_FLUSH"
	WCRecv            WCOpcode = 128 // "IBV_WC_RECV"
	WCRecvRDMAWithImm WCOpcode = 129 // "IBV_WC_RECV_RDMA_WITH_IMM"
)

// WCFlags is a set of ibv_wc_flags.
type WCFlags uint8

// Completion flags.
const (
	WCWithGRH WCFlags = 1 << 0
	WCWithImm WCFlags = 1 << 1
	WCWithInv WCFlags = 1 << 3
)

// WC is a work completion, struct ibv_wc.
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	// ImmData is the immediate data (WCWithImm, host order) or the
	// invalidated rkey (WCWithInv).
	ImmData   uint32
	QPNum     uint32
	SrcQP     uint32 // UD: the sender's QP
	Flags     WCFlags
	PKeyIndex uint16
	// Detail says, for an error status, what happened in words a user can
	// act on (which peer, which key, how long); empty on success.
	Detail string
}

func (wc WC) String() string {
	s := fmt.Sprintf("wr_id %d %v %v byte_len %d qp %#x", wc.WRID, wc.Status, wc.Opcode, wc.ByteLen, wc.QPNum)
	if wc.Detail != "" {
		s += ": " + wc.Detail
	}
	return s
}

// WROpcode is enum ibv_wr_opcode; String returns the name verbs.h gives
// it, e.g. "IBV_WR_SEND".
//
//enum:string IBV_WR_OPCODE(%d)
type WROpcode uint8

// Send work request opcodes, with ibverbs' values.
const (
	WRRDMAWrite         WROpcode = 0  // "IBV_WR_RDMA_WRITE"
	WRRDMAWriteWithImm  WROpcode = 1  // "IBV_WR_RDMA_WRITE_WITH_IMM"
	WRSend              WROpcode = 2  // "IBV_WR_SEND"
	WRSendWithImm       WROpcode = 3  // "IBV_WR_SEND_WITH_IMM"
	WRRDMARead          WROpcode = 4  // "IBV_WR_RDMA_READ"
	WRAtomicCmpAndSwp   WROpcode = 5  // "IBV_WR_ATOMIC_CMP_AND_SWP"
	WRAtomicFetchAndAdd WROpcode = 6  // "IBV_WR_ATOMIC_FETCH_AND_ADD"
	WRLocalInv          WROpcode = 7  // "IBV_WR_LOCAL_INV" invalidate InvalidateRKey's type 2 memory window (RC, UC)
	WRBindMW            WROpcode = 8  // "IBV_WR_BIND_MW" bind a type 2 memory window: MW, RKey, BindInfo (RC, UC)
	WRSendWithInv       WROpcode = 9  // "IBV_WR_SEND_WITH_INV"
	WRFlush             WROpcode = 14 // "IBV_WR_FLUSH"
	WRAtomicWrite       WROpcode = 15 // "IBV_WR_ATOMIC_WRITE"
)

func (o WROpcode) wcOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// SendFlags is a set of ibv_send_flags.
type SendFlags uint8

// Send flags, with ibverbs' values.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

// SGE is a scatter/gather element, struct ibv_sge.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request, struct ibv_send_wr.
type SendWR struct {
	WRID    uint64
	Opcode  WROpcode
	Flags   SendFlags
	SGList  []SGE
	ImmData uint32 // immediate data (WITH_IMM opcodes)
	// InvalidateRKey is the rkey SEND_WITH_INV asks the responder to
	// invalidate, or the one LOCAL_INV invalidates.
	InvalidateRKey uint32
	// RDMA, atomic, FLUSH and ATOMIC_WRITE: the remote address and rkey.
	// BIND_MW: RKey is the window's new rkey, its low 8 bits the
	// consumer's key (ibv_send_wr's bind_mw.rkey; IncRKey(MW.RKey())).
	RemoteAddr uint64
	RKey       uint32
	// BIND_MW: the type 2 window to bind and what to bind it to
	// (bind_mw.mw and bind_mw.bind_info).
	MW       *MW
	BindInfo MWBindInfo
	// Atomics: CompareAdd is the compare value (CMP_AND_SWP) or the addend
	// (FETCH_AND_ADD); Swap is the swap value.
	CompareAdd uint64
	Swap       uint64
	// UD: the address handle, remote QPN and Q_Key (a Q_Key with the high
	// bit set means "use the QP's Q_Key", §10.2.5).
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// FLUSH: selectivity level and placement type (wire.FlushSel*,
	// wire.Flush*). The length flushed (ibv_wr_flush's len) is the total of
	// SGList's lengths, whose keys are not used; ATOMIC_WRITE takes its 8
	// bytes from SGList (or InlineData).
	FlushSel       uint8
	FlushPlacement uint8
	InlineData     []byte // for SendInline: the data itself, instead of SGList
}

// RecvWR is a receive work request, struct ibv_recv_wr.
type RecvWR struct {
	WRID   uint64
	SGList []SGE
}

// QPType is enum ibv_qp_type.
//
//enum:string QPType(%d)
type QPType uint8

// QP types, with ibverbs' values; GSI is the special QP1 the CM uses.
const (
	RC  QPType = 2    // "RC"
	UC  QPType = 3    // "UC"
	UD  QPType = 4    // "UD"
	GSI QPType = 0xFF // "GSI"
)

// QPState is enum ibv_qp_state.
//
//enum:string QPState(%d)
type QPState uint8

// QP states.
const (
	QPSReset QPState = iota // "RESET"
	QPSInit                 // "INIT"
	QPSRTR                  // "RTR"
	QPSRTS                  // "RTS"
	QPSSQD                  // "SQD"
	QPSSQE                  // "SQE"
	QPSErr                  // "ERR"
)

// MTU is enum ibv_mtu: 1 = 256 … 5 = 4096.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 if invalid.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string {
	if b := m.Bytes(); b > 0 {
		return fmt.Sprintf("%d", b)
	}
	return fmt.Sprintf("invalid MTU enum %d", uint8(m))
}

// MTUFromBytes returns the largest IB MTU not above n bytes, or 0.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// GIDType is the type of a GID table entry; String returns its name as
// sysfs gid_attrs/types prints it.
//
//enum:string unknown
type GIDType uint8

// GID entry types.
const (
	GIDTypeRoCEv1 GIDType = 1 // "IB/RoCE v1"
	GIDTypeRoCEv2 GIDType = 2 // "RoCE v2"
)

// Version returns the wire version a GID of this type sends with.
func (t GIDType) Version() wire.Version {
	if t == GIDTypeRoCEv1 {
		return wire.RoCEv1
	}
	return wire.RoCEv2
}

// GIDTypeFor returns the GID type that sends with RoCE version v, the
// inverse of GIDType.Version: GIDTypeRoCEv1 for wire.RoCEv1, else
// GIDTypeRoCEv2 (a RoCE mode, as config and rdmacm hold it, is a version).
func GIDTypeFor(v wire.Version) GIDType {
	if v == wire.RoCEv1 {
		return GIDTypeRoCEv1
	}
	return GIDTypeRoCEv2
}

// GIDEntry is one entry of a port's GID table.
type GIDEntry struct {
	GID    netip.Addr
	Type   GIDType
	Netdev string
}

// GlobalRoute is struct ibv_global_route: the GRH/IP fields of a path.
type GlobalRoute struct {
	DGID         netip.Addr
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is struct ibv_ah_attr. On RoCE every path is global.
type AHAttr struct {
	GRH      GlobalRoute
	SL       uint8
	PortNum  uint8
	IsGlobal bool
}

// AH is an address handle for UD sends.
type AH struct {
	pd   *PD
	attr AHAttr
	path path
}

// Attr returns the attributes the AH was created with.
func (a *AH) Attr() AHAttr { return a.attr }
