// Package verbs is goroce's RDMA verbs API: what an ibverbs user does with
// libibverbs, in Go. A Device runs on any link.Link (the in-memory fabric,
// or a real network through package host); on it you allocate protection
// domains, register memory, create completion queues and queue pairs, move
// QPs through RESET → INIT → RTR → RTS with Modify, and post work requests.
//
//	dev, _ := verbs.Open(verbs.DeviceConfig{Name: "rxe0", Link: l, GIDs: gids})
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(256)
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: ...})
//	qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, ...}, verbs.AttrState|...)
//	qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{mr.SGE(0, n)}, ...})
//	n, err := cq.PollWait(ctx, wcs)
//
// Names follow ibverbs: statuses print as IBV_WC_RETRY_EXC_ERR, events as
// IBV_EVENT_QP_FATAL. Errors of the control path wrap syscall.Errno
// (EINVAL names the attribute and the valid values); errors of the data path
// arrive in completions, whose Detail says what happened in words.
//
// The engine lives in internal/transport; this package is its public face.
package verbs

import "github.com/goroce/goroce/internal/transport"

// Open starts a device on cfg.Link.
func Open(cfg DeviceConfig) (*Device, error) { return transport.OpenDevice(cfg) }

// Types of the verbs API.
type (
	Device       = transport.Device
	DeviceConfig = transport.Config
	DeviceAttr   = transport.DeviceAttr
	PortAttr     = transport.PortAttr
	PortState    = transport.PortState
	PD           = transport.PD
	MR           = transport.MR
	CQ           = transport.CQ
	QP           = transport.QP
	SRQ          = transport.SRQ
	SRQAttr      = transport.SRQAttr
	AH           = transport.AH
	AHAttr       = transport.AHAttr
	GlobalRoute  = transport.GlobalRoute
	GIDEntry     = transport.GIDEntry
	GIDType      = transport.GIDType
	QPType       = transport.QPType
	QPState      = transport.QPState
	QPAttr       = transport.QPAttr
	QPAttrMask   = transport.QPAttrMask
	QPInitAttr   = transport.QPInitAttr
	QPCap        = transport.QPCap
	MTU          = transport.MTU
	Access       = transport.Access
	SGE          = transport.SGE
	SendWR       = transport.SendWR
	RecvWR       = transport.RecvWR
	SendFlags    = transport.SendFlags
	WROpcode     = transport.WROpcode
	WC           = transport.WC
	WCStatus     = transport.WCStatus
	WCOpcode     = transport.WCOpcode
	WCFlags      = transport.WCFlags
	AsyncEvent   = transport.AsyncEvent
	EventType    = transport.EventType
	Counters     = transport.Counters
	Counter      = transport.Counter
	Pacer        = transport.Pacer
)
