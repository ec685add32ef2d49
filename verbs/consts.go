package verbs

import (
	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/wire"
)

// QP types.
const (
	RC  = transport.QPTypeRC
	UC  = transport.QPTypeUC
	UD  = transport.QPTypeUD
	GSI = transport.QPTypeGSI
)

// QP states.
const (
	QPSReset = transport.QPSReset
	QPSInit  = transport.QPSInit
	QPSRTR   = transport.QPSRTR
	QPSRTS   = transport.QPSRTS
	QPSSQD   = transport.QPSSQD
	QPSSQE   = transport.QPSSQE
	QPSErr   = transport.QPSErr
)

// QP attribute mask bits (IBV_QP_*).
const (
	AttrState            = transport.AttrState
	AttrCurState         = transport.AttrCurState
	AttrEnSQDAsyncNotify = transport.AttrEnSQDAsyncNotify
	AttrAccessFlags      = transport.AttrAccessFlags
	AttrPKeyIndex        = transport.AttrPKeyIndex
	AttrPort             = transport.AttrPort
	AttrQKey             = transport.AttrQKey
	AttrAV               = transport.AttrAV
	AttrPathMTU          = transport.AttrPathMTU
	AttrTimeout          = transport.AttrTimeout
	AttrRetryCnt         = transport.AttrRetryCnt
	AttrRNRRetry         = transport.AttrRNRRetry
	AttrRQPSN            = transport.AttrRQPSN
	AttrMaxQPRdAtomic    = transport.AttrMaxQPRdAtomic
	AttrAltPath          = transport.AttrAltPath
	AttrMinRNRTimer      = transport.AttrMinRNRTimer
	AttrSQPSN            = transport.AttrSQPSN
	AttrMaxDestRdAtomic  = transport.AttrMaxDestRdAtomic
	AttrPathMigState     = transport.AttrPathMigState
	AttrCap              = transport.AttrCap
	AttrDestQPN          = transport.AttrDestQPN
	AttrRateLimit        = transport.AttrRateLimit
)

// Rate limits (QPAttr.RateLimit, kb/s), as ibv_query_device_ex's
// packet_pacing_caps report them.
const (
	RateLimitMinKbps = transport.RateLimitMinKbps
	RateLimitMaxKbps = transport.RateLimitMaxKbps
)

// Path MTUs.
const (
	MTU256  = transport.MTU256
	MTU512  = transport.MTU512
	MTU1024 = transport.MTU1024
	MTU2048 = transport.MTU2048
	MTU4096 = transport.MTU4096
)

// Memory access flags (IBV_ACCESS_*).
const (
	AccessLocalWrite      = mem.LocalWrite
	AccessRemoteWrite     = mem.RemoteWrite
	AccessRemoteRead      = mem.RemoteRead
	AccessRemoteAtomic    = mem.RemoteAtomic
	AccessMWBind          = mem.MWBind
	AccessFlushGlobal     = mem.FlushGlobal
	AccessFlushPersistent = mem.FlushPersistent
	AccessRelaxedOrdering = mem.RelaxedOrdering
)

// Send work request opcodes (IBV_WR_*).
const (
	WRRDMAWrite         = transport.WRRDMAWrite
	WRRDMAWriteWithImm  = transport.WRRDMAWriteWithImm
	WRSend              = transport.WRSend
	WRSendWithImm       = transport.WRSendWithImm
	WRRDMARead          = transport.WRRDMARead
	WRAtomicCmpAndSwp   = transport.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = transport.WRAtomicFetchAndAdd
	WRSendWithInv       = transport.WRSendWithInv
	WRFlush             = transport.WRFlush
	WRAtomicWrite       = transport.WRAtomicWrite
)

// Send flags (IBV_SEND_*).
const (
	SendFence     = transport.SendFence
	SendSignaled  = transport.SendSignaled
	SendSolicited = transport.SendSolicited
	SendInline    = transport.SendInline
)

// Completion statuses (IBV_WC_*).
const (
	WCSuccess        = transport.WCSuccess
	WCLocLenErr      = transport.WCLocLenErr
	WCLocQPOpErr     = transport.WCLocQPOpErr
	WCLocProtErr     = transport.WCLocProtErr
	WCWRFlushErr     = transport.WCWRFlushErr
	WCBadRespErr     = transport.WCBadRespErr
	WCLocAccessErr   = transport.WCLocAccessErr
	WCRemInvReqErr   = transport.WCRemInvReqErr
	WCRemAccessErr   = transport.WCRemAccessErr
	WCRemOpErr       = transport.WCRemOpErr
	WCRetryExcErr    = transport.WCRetryExcErr
	WCRNRRetryExcErr = transport.WCRNRRetryExcErr
	WCFatalErr       = transport.WCFatalErr
	WCGeneralErr     = transport.WCGeneralErr
)

// Completion opcodes (IBV_WC_*).
const (
	WCSend            = transport.WCSend
	WCRDMAWrite       = transport.WCRDMAWrite
	WCRDMARead        = transport.WCRDMARead
	WCCompSwap        = transport.WCCompSwap
	WCFetchAdd        = transport.WCFetchAdd
	WCAtomicWrite     = transport.WCAtomicWrite
	WCFlush           = transport.WCFlush
	WCRecv            = transport.WCRecv
	WCRecvRDMAWithImm = transport.WCRecvRDMAWithImm
)

// Completion flags (IBV_WC_*).
const (
	WCWithGRH = transport.WCWithGRH
	WCWithImm = transport.WCWithImm
	WCWithInv = transport.WCWithInv
)

// GID types.
const (
	GIDTypeRoCEv1 = transport.GIDTypeRoCEv1
	GIDTypeRoCEv2 = transport.GIDTypeRoCEv2
)

// Asynchronous event types (IBV_EVENT_*).
const (
	EventCQErr            = transport.EventCQErr
	EventQPFatal          = transport.EventQPFatal
	EventQPReqErr         = transport.EventQPReqErr
	EventQPAccessErr      = transport.EventQPAccessErr
	EventCommEst          = transport.EventCommEst
	EventSQDrained        = transport.EventSQDrained
	EventDeviceFatal      = transport.EventDeviceFatal
	EventPortActive       = transport.EventPortActive
	EventPortErr          = transport.EventPortErr
	EventSRQErr           = transport.EventSRQErr
	EventSRQLimitReached  = transport.EventSRQLimitReached
	EventQPLastWQEReached = transport.EventQPLastWQEReached
	EventGIDChange        = transport.EventGIDChange
)

// GSIQKey is QP1's well-known Q_Key.
const GSIQKey = 0x80010000

// CounterNames are the counters' names, as rxe names them, then goroce's drops by cause.
var CounterNames = transport.CounterNames

// GIDTypeFor returns the GID type that sends with RoCE version v, the
// inverse of GIDType.Version.
func GIDTypeFor(v wire.Version) GIDType { return transport.GIDTypeFor(v) }

// MTUFromBytes returns the largest IB MTU not above n bytes.
func MTUFromBytes(n int) MTU { return transport.MTUFromBytes(n) }
