package verbs

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/wire"
)

// QPCap is struct ibv_qp_cap.
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr is struct ibv_qp_init_attr.
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    QPCap
	// SigAll: every send WR completes with a CQE (sq_sig_all).
	SigAll bool
}

// QPAttrMask is enum ibv_qp_attr_mask.
type QPAttrMask uint32

// QP attribute mask bits, with ibverbs' values.
const (
	AttrState            QPAttrMask = 1 << 0
	AttrCurState         QPAttrMask = 1 << 1
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	AttrAccessFlags      QPAttrMask = 1 << 3
	AttrPKeyIndex        QPAttrMask = 1 << 4
	AttrPort             QPAttrMask = 1 << 5
	AttrQKey             QPAttrMask = 1 << 6
	AttrAV               QPAttrMask = 1 << 7
	AttrPathMTU          QPAttrMask = 1 << 8
	AttrTimeout          QPAttrMask = 1 << 9
	AttrRetryCnt         QPAttrMask = 1 << 10
	AttrRNRRetry         QPAttrMask = 1 << 11
	AttrRQPSN            QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	AttrAltPath          QPAttrMask = 1 << 14
	AttrMinRNRTimer      QPAttrMask = 1 << 15
	AttrSQPSN            QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	AttrPathMigState     QPAttrMask = 1 << 18
	AttrCap              QPAttrMask = 1 << 19
	AttrDestQPN          QPAttrMask = 1 << 20
	AttrRateLimit        QPAttrMask = 1 << 25 // IBV_QP_RATE_LIMIT
)

var maskNames = []string{"IBV_QP_STATE", "IBV_QP_CUR_STATE", "IBV_QP_EN_SQD_ASYNC_NOTIFY",
	"IBV_QP_ACCESS_FLAGS", "IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_QKEY", "IBV_QP_AV",
	"IBV_QP_PATH_MTU", "IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT", "IBV_QP_RNR_RETRY", "IBV_QP_RQ_PSN",
	"IBV_QP_MAX_QP_RD_ATOMIC", "IBV_QP_ALT_PATH", "IBV_QP_MIN_RNR_TIMER", "IBV_QP_SQ_PSN",
	"IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_PATH_MIG_STATE", "IBV_QP_CAP", "IBV_QP_DEST_QPN",
	"bit 21", "bit 22", "bit 23", "bit 24", "IBV_QP_RATE_LIMIT"}

func (m QPAttrMask) String() string {
	var parts []string
	for i, n := range maskNames {
		if m&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// QPAttr is struct ibv_qp_attr (the fields RoCE uses).
type QPAttr struct {
	State            QPState
	CurState         QPState
	PathMTU          MTU
	QKey             uint32
	RQPSN            wire.PSN
	SQPSN            wire.PSN
	DestQPN          uint32
	AccessFlags      Access // remote access this QP's responder allows
	Cap              QPCap
	AH               AHAttr
	PKeyIndex        uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	MaxRdAtomic      uint8 // max_rd_atomic: outstanding READ/ATOMIC as requester
	MaxDestRdAtomic  uint8 // max_dest_rd_atomic: as responder
	MinRNRTimer      uint8 // RNR NAK timer code this QP's responder sends
	PortNum          uint8
	Timeout          uint8 // local ACK timeout: 4.096 µs × 2^timeout, 0 = infinite
	RetryCnt         uint8 // 0-7
	RNRRetry         uint8 // 0-7; 7 = infinite
	// RateLimit paces the QP's requester to this many kb/s (1 kb = 1000
	// bits; the transport packets, BTH to ICRC), as ibverbs' rate_limit;
	// 0: no limit.
	RateLimit uint32
}

// QP is a queue pair.
type QP struct {
	dev    *Device
	pd     *PD
	num    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	cap    QPCap

	counters Counters

	mu        sync.Mutex
	state     QPState     // guarded by mu
	attr      QPAttr      // guarded by mu
	path      path        // guarded by mu: RC/UC primary path
	pmtu      int         // guarded by mu: path MTU in bytes
	sport     uint16      // guarded by mu: UDP source port for RoCE v2
	destroyed bool        // guarded by mu
	rq        recvQueue   // guarded by mu (unused with an SRQ)
	sq        sendQueue   // guarded by mu
	req       reqState    // guarded by mu
	comp      compState   // guarded by mu
	resp      respState   // guarded by mu
	retrans   *time.Timer // guarded by mu
	rnrTimer  *time.Timer // guarded by mu
	pacer     Pacer       // guarded by mu: nil, or the rate limit's (or SetPacer's)
	paceTimer *time.Timer // guarded by mu
	// keySend, keyRecv and keyRemote remember the region each side's last
	// key named (mem.Cache; guarded by mu): the send queue's lkeys
	// (gather, a READ's or atomic's local target), the receive queue's,
	// and the rkeys peers send.
	keySend, keyRecv, keyRemote mem.Cache
	// cc is the QP's DCQCN reaction point, made at its first packet or CNP
	// while the port's RP is enabled, under configuration ccCfg; npLast is when the
	// notification point last sent the peer a CNP, if npSent (all guarded
	// by mu; ecn.go).
	cc     *dcqcnRP
	ccCfg  *ECNConfig
	npLast time.Time
	npSent bool
	// reqBatch is the transmit batch holding the requester's packets not
	// yet sent, if any; reqDeferred: a requester run found it held by
	// another goroutine's batch, which runs it again on release (both
	// guarded by mu; see txBatch.own).
	reqBatch    *txBatch
	reqDeferred bool
	// kickDue: a change under mu let the requester go on; it runs once
	// mu is let go of (kick, resumeKicked; guarded by mu).
	kickDue bool
	// respBatch is the transmit batch holding the responder's packets not
	// yet sent (guarded by mu): no other batch sends this QP's responses
	// before them (see respond).
	respBatch *txBatch
	// queued: the QP waits for a turn in the device's scheduler (guarded
	// by dev.sched.mu).
	queued bool
	// bulk: the QP has work in the scheduler, from its push until a
	// turn leaves none (sched.go); its packets do not make the device's
	// other QPs active.
	bulk atomic.Bool
	// bulkEnd is when bulk was last cleared (the scheduler's clock; 0:
	// never).
	bulkEnd atomic.Int64
}

// CreateQP creates a queue pair in RESET (GSI: QP1).
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	d := pd.dev
	bad := func(format string, args ...any) (*QP, error) {
		return nil, errorf("create_qp", d.name, 0, syscall.EINVAL, format, args...)
	}
	switch init.Type {
	case RC, UC, UD, GSI:
	default:
		return bad("qp_type %d: valid types are RC (2), UC (3), UD (4) and GSI", init.Type)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return bad("send_cq and recv_cq are required")
	}
	if init.SendCQ.dev != d {
		return bad("send_cq belongs to device %q, not %q", init.SendCQ.dev.name, d.name)
	}
	if init.RecvCQ.dev != d {
		return bad("recv_cq belongs to device %q, not %q", init.RecvCQ.dev.name, d.name)
	}
	c := &init.Cap
	if c.MaxSendWR < 1 || c.MaxSendWR > MaxQPWR {
		return bad("cap.max_send_wr %d outside 1..%d", c.MaxSendWR, MaxQPWR)
	}
	if c.MaxSendSGE < 0 || c.MaxSendSGE > MaxSGE {
		return bad("cap.max_send_sge %d outside 0..%d", c.MaxSendSGE, MaxSGE)
	}
	if c.MaxInlineData < 0 || c.MaxInlineData > MaxInlineData {
		return bad("cap.max_inline_data %d outside 0..%d", c.MaxInlineData, MaxInlineData)
	}
	if init.SRQ == nil {
		if c.MaxRecvWR < 1 || c.MaxRecvWR > MaxQPWR {
			return bad("cap.max_recv_wr %d outside 1..%d", c.MaxRecvWR, MaxQPWR)
		}
		if c.MaxRecvSGE < 0 || c.MaxRecvSGE > MaxSGE {
			return bad("cap.max_recv_sge %d outside 0..%d", c.MaxRecvSGE, MaxSGE)
		}
	} else if init.SRQ.pd != pd {
		return bad("the SRQ belongs to another PD")
	}
	if init.SRQ != nil && init.Type != RC && init.Type != UD {
		return bad("an SRQ needs an RC or UD QP, not %v", init.Type)
	}
	q := &QP{dev: d, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ, srq: init.SRQ,
		sigAll: init.SigAll, cap: *c}
	if init.SRQ == nil {
		q.rq.init(c.MaxRecvWR, c.MaxRecvSGE)
	}
	q.sq.init(c.MaxSendWR)
	q.attr.Cap = *c
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, net.ErrClosed
	}
	if init.Type == GSI {
		if d.qps[GSIQPN] != nil {
			return nil, errorf("create_qp", d.name, 0, syscall.EEXIST, "the GSI QP (QP1) already exists")
		}
		q.num = GSIQPN
	} else {
		if len(d.qps) >= MaxQP {
			return nil, errorf("create_qp", d.name, 0, syscall.ENOMEM, "%d QPs exist (max_qp)", len(d.qps))
		}
		for d.qps[d.nextQPN] != nil || d.nextQPN < firstQPN {
			d.nextQPN = (d.nextQPN + 1) & wire.PSNMask
		}
		q.num = d.nextQPN
		d.nextQPN = (d.nextQPN + 1) & wire.PSNMask
	}
	if q.typ != RC && q.typ != UC {
		// A UD or GSI QP's UDP source port follows from its QPN alone, as
		// rxe sets it at creation (rxe_qp_init_req); no modify gives such a
		// QP an address vector to compute it from (updateSport).
		q.sport = wire.UDSport(q.num)
	}
	d.qps[q.num] = q
	d.qpGen.Add(1)
	return q, nil
}

// Num returns the QP number.
func (q *QP) Num() uint32 { return q.num }

// Type returns the QP type.
func (q *QP) Type() QPType { return q.typ }

// Counters returns the QP's counters.
func (q *QP) Counters() *Counters { return &q.counters }

func (q *QP) count(k Counter) {
	q.counters[k].Add(1)
	q.dev.counters[k].Add(1)
}

// State returns the QP's current state.
func (q *QP) State() QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Query returns the QP's attributes, like ibv_query_qp.
func (q *QP) Query() QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.State, a.CurState = q.state, q.state
	a.SQDraining = q.state == QPSSQD && q.sq.head < q.req.sqdEnd
	return a
}

// Destroy destroys the QP: its timers stop and its number is freed.
func (q *QP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.destroyed = true
	q.state = QPSErr
	q.stopTimers()
	q.mu.Unlock()
	d := q.dev
	d.detachAll(q)
	d.mu.Lock()
	if d.qps[q.num] == q {
		delete(d.qps, q.num)
		d.qpGen.Add(1)
	}
	d.mu.Unlock()
	return nil
}

func (q *QP) stopTimers() {
	q.stopRetrans()
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	if q.paceTimer != nil {
		q.paceTimer.Stop()
	}
	q.comp.timerArmed = false
	q.comp.rnrWait = false
}

// transition lists, for each (type class, from, to), the attributes
// required and allowed (IBTA §11.2.4.2 Table 94; Linux ib_modify_qp_is_ok).
type transition struct{ req, opt QPAttrMask }

type qpClass uint8

const (
	classRC qpClass = iota
	classUC
	classUD // UD and GSI
)

func (q *QP) class() qpClass {
	switch q.typ {
	case RC:
		return classRC
	case UC:
		return classUC
	}
	return classUD
}

var transitions = map[[2]QPState][3]*transition{
	{QPSReset, QPSInit}: {
		classRC: {req: AttrPKeyIndex | AttrPort | AttrAccessFlags},
		classUC: {req: AttrPKeyIndex | AttrPort | AttrAccessFlags},
		classUD: {req: AttrPKeyIndex | AttrPort | AttrQKey},
	},
	{QPSInit, QPSInit}: {
		classRC: {opt: AttrPKeyIndex | AttrPort | AttrAccessFlags},
		classUC: {opt: AttrPKeyIndex | AttrPort | AttrAccessFlags},
		classUD: {opt: AttrPKeyIndex | AttrPort | AttrQKey},
	},
	{QPSInit, QPSRTR}: {
		classRC: {req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
			opt: AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
		classUC: {req: AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN, opt: AttrAltPath | AttrAccessFlags | AttrPKeyIndex},
		classUD: {opt: AttrPKeyIndex | AttrQKey},
	},
	{QPSRTR, QPSRTS}: {
		classRC: {req: AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
			opt: AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState | AttrRateLimit},
		classUC: {req: AttrSQPSN, opt: AttrCurState | AttrAltPath | AttrAccessFlags | AttrPathMigState | AttrRateLimit},
		classUD: {req: AttrSQPSN, opt: AttrCurState | AttrQKey | AttrRateLimit},
	},
	{QPSRTS, QPSRTS}: {
		classRC: {opt: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer | AttrRateLimit},
		classUC: {opt: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrRateLimit},
		classUD: {opt: AttrCurState | AttrQKey | AttrRateLimit},
	},
	{QPSRTS, QPSSQD}: {
		classRC: {opt: AttrEnSQDAsyncNotify}, classUC: {opt: AttrEnSQDAsyncNotify}, classUD: {opt: AttrEnSQDAsyncNotify},
	},
	{QPSSQD, QPSRTS}: {
		classRC: {opt: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer},
		classUC: {opt: AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState},
		classUD: {opt: AttrCurState | AttrQKey},
	},
	{QPSSQD, QPSSQD}: {
		classRC: {opt: AttrPKeyIndex | AttrAccessFlags | AttrAV | AttrAltPath | AttrMaxQPRdAtomic | AttrMaxDestRdAtomic |
			AttrPathMigState | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMinRNRTimer},
		classUC: {opt: AttrPKeyIndex | AttrAccessFlags | AttrAV | AttrAltPath | AttrPathMigState},
		classUD: {opt: AttrPKeyIndex | AttrQKey},
	},
	{QPSSQE, QPSRTS}: {
		classUC: {opt: AttrCurState | AttrAccessFlags}, classUD: {opt: AttrCurState | AttrQKey},
	},
}

// Modify changes the QP's attributes and state, like ibv_modify_qp. An
// invalid transition, a missing required attribute, one not allowed in
// the transition, or a value out of range returns EINVAL naming it.
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	err := q.modify(attr, mask)
	q.resumeKicked()
	return err
}

// modify is Modify with q.mu held; a change that lets the requester go on
// (a new rate limit, SQD → RTS) leaves it to resumeKicked (kick).
func (q *QP) modify(attr *QPAttr, mask QPAttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return net.ErrClosed
	}
	next, err := q.checkTransition(attr, mask)
	if err != nil {
		return err
	}
	mask &^= AttrState
	a, p, err := q.checkAttrs(attr, mask)
	if err != nil {
		return err
	}
	q.commitModify(a, p, mask, next)
	return nil
}

// modifyErr is Modify's EINVAL, naming what is wrong.
func (q *QP) modifyErr(format string, args ...any) error {
	return errorf("modify_qp", q.dev.name, q.num, syscall.EINVAL, format, args...)
}

// checkTransition returns the state Modify goes to, after checking that
// the QP may go there from its state with the attributes in mask: each
// one the transition requires, none it does not accept (the transitions
// table, as the kernel's qp_state_table for ib_modify_qp_is_ok).
// Called with q.mu held.
func (q *QP) checkTransition(attr *QPAttr, mask QPAttrMask) (QPState, error) {
	bad := func(format string, args ...any) (QPState, error) { return 0, q.modifyErr(format, args...) }
	cur := q.state
	if mask&AttrCurState != 0 && attr.CurState != cur {
		return bad("cur_qp_state %v, but the QP is in %v", attr.CurState, cur)
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if next > QPSErr {
		return bad("qp_state %d is not a QP state", next)
	}
	mask &^= AttrState
	var tr transition
	switch {
	case next == QPSReset || next == QPSErr:
		// Any state may go to RESET or ERR, with no other attributes.
	default:
		row, ok := transitions[[2]QPState{cur, next}]
		t := row[q.class()]
		if !ok || t == nil {
			return bad("%v QP cannot go from %v to %v", q.typ, cur, next)
		}
		tr = *t
	}
	if miss := tr.req &^ mask; miss != 0 {
		return bad("%v → %v of a %v QP requires %v", cur, next, q.typ, miss)
	}
	if extra := mask &^ (tr.req | tr.opt); extra != 0 {
		return bad("%v → %v of a %v QP does not accept %v", cur, next, q.typ, extra)
	}
	return next, nil
}

// checkAttrs validates the values of the attributes in mask and returns
// the QP's attributes with them, and the path AttrAV resolves to, without
// changing anything. Called with q.mu held.
func (q *QP) checkAttrs(attr *QPAttr, mask QPAttrMask) (QPAttr, path, error) {
	bad := func(format string, args ...any) (QPAttr, path, error) {
		return QPAttr{}, path{}, q.modifyErr(format, args...)
	}
	a := q.attr
	var p path
	if mask&AttrPort != 0 && attr.PortNum != 1 {
		return bad("port_num %d: the device has port 1 only", attr.PortNum)
	}
	if mask&AttrPKeyIndex != 0 && attr.PKeyIndex >= PKeyTableLen {
		return bad("pkey_index %d: the P_Key table has %d entry", attr.PKeyIndex, PKeyTableLen)
	}
	if mask&AttrAccessFlags != 0 {
		if extra := attr.AccessFlags &^ (mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic |
			mem.MWBind | mem.FlushGlobal | mem.FlushPersistent | mem.RelaxedOrdering); extra != 0 {
			return bad("qp_access_flags %v: unsupported bits %v", attr.AccessFlags, extra)
		}
		a.AccessFlags = attr.AccessFlags
	}
	if mask&AttrPathMTU != 0 {
		if attr.PathMTU.Bytes() == 0 {
			return bad("path_mtu %d: valid values are 1 (256) to 5 (4096)", attr.PathMTU)
		}
		if attr.PathMTU > q.dev.activeMTU {
			return bad("path_mtu %v exceeds the port's active MTU %v", attr.PathMTU, q.dev.activeMTU)
		}
		a.PathMTU = attr.PathMTU
	}
	if mask&AttrAV != 0 {
		var err error
		if p, err = q.dev.resolvePath(&attr.AH); err != nil {
			return QPAttr{}, path{}, withOp(err, "modify_qp", q.dev.name, q.num)
		}
		a.AH = attr.AH
	}
	if mask&AttrDestQPN != 0 {
		if attr.DestQPN > wire.PSNMask {
			return bad("dest_qp_num %#x exceeds 24 bits", attr.DestQPN)
		}
		a.DestQPN = attr.DestQPN
	}
	if mask&AttrRQPSN != 0 {
		if attr.RQPSN > wire.PSNMask {
			return bad("rq_psn %#x exceeds 24 bits", uint32(attr.RQPSN))
		}
		a.RQPSN = attr.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		if attr.SQPSN > wire.PSNMask {
			return bad("sq_psn %#x exceeds 24 bits", uint32(attr.SQPSN))
		}
		a.SQPSN = attr.SQPSN
	}
	if mask&AttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		if attr.MaxDestRdAtomic > MaxQPRdAtom {
			return bad("max_dest_rd_atomic %d exceeds max_qp_rd_atom %d", attr.MaxDestRdAtomic, MaxQPRdAtom)
		}
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		if attr.MaxRdAtomic > MaxQPInitRdAtom {
			return bad("max_rd_atomic %d exceeds max_qp_init_rd_atom %d", attr.MaxRdAtomic, MaxQPInitRdAtom)
		}
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&AttrMinRNRTimer != 0 {
		if attr.MinRNRTimer > 31 {
			return bad("min_rnr_timer %d outside 0..31", attr.MinRNRTimer)
		}
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		if attr.Timeout > 31 {
			return bad("timeout %d outside 0..31", attr.Timeout)
		}
		a.Timeout = attr.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		if attr.RetryCnt > 7 {
			return bad("retry_cnt %d outside 0..7", attr.RetryCnt)
		}
		a.RetryCnt = attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		if attr.RNRRetry > 7 {
			return bad("rnr_retry %d outside 0..7 (7 = infinite)", attr.RNRRetry)
		}
		a.RNRRetry = attr.RNRRetry
	}
	if mask&AttrRateLimit != 0 {
		if r := attr.RateLimit; r != 0 && (r < RateLimitMinKbps || r > RateLimitMaxKbps) {
			return bad("rate_limit %d kbps outside %d..%d (0 = no limit)", r, RateLimitMinKbps, RateLimitMaxKbps)
		}
		a.RateLimit = attr.RateLimit
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if mask&AttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	return a, p, nil
}

// commitModify applies what checkTransition and checkAttrs accepted: the
// attributes a (with path p if mask has AttrAV), then the state next and
// what entering it does. Called with q.mu held; it cannot fail.
func (q *QP) commitModify(a QPAttr, p path, mask QPAttrMask, next QPState) {
	q.attr = a
	if mask&AttrAV != 0 {
		q.path = p
		q.updateSport()
	}
	if mask&AttrPathMTU != 0 {
		q.pmtu = a.PathMTU.Bytes()
	}
	if mask&AttrDestQPN != 0 {
		q.updateSport()
	}
	if mask&AttrRQPSN != 0 {
		q.resp.psn = a.RQPSN
	}
	if mask&AttrSQPSN != 0 {
		q.req.psn = a.SQPSN
		q.comp.psn = a.SQPSN
	}
	if mask&AttrRetryCnt != 0 {
		q.comp.retryLeft = int(a.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 {
		q.comp.rnrLeft = int(a.RNRRetry)
	}
	if mask&AttrRateLimit != 0 {
		q.setRateLimit(a.RateLimit)
	}
	if q.typ == UD || q.typ == GSI {
		q.pmtu = q.dev.activeMTU.Bytes()
		if q.typ == GSI {
			q.attr.QKey = wire.GSIQKey
		}
	}
	prev := q.state
	q.state = next
	switch {
	case next == QPSReset && prev != QPSReset:
		q.reset()
	case next == QPSErr && prev != QPSErr:
		q.resp.pend = respQueue{} // an application's ERR stops the responses too
		q.resp.msg = msgState{}
		q.enterError(-1, WCWRFlushErr, "")
	case next == QPSRTS && (prev == QPSSQD || prev == QPSSQE):
		q.kick()
	case next == QPSSQD:
		if prev != QPSSQD {
			q.req.sqdEnd = q.sq.cur
			if q.sq.cur < q.sq.tail && (q.req.off > 0 || q.sq.at(q.sq.cur).started) {
				q.req.sqdEnd++ // the message being sent
			}
		}
		q.req.sqdNotified = false
		q.checkDrained()
	}
}

// updateSport computes the RoCE v2 UDP source port as Linux does: from the
// flow label, or from the QP pair when the flow label is 0 (connected QPs),
// or rxe's hash of the QPN for UD and GSI.
func (q *QP) updateSport() {
	switch q.typ {
	case RC, UC:
		fl := q.path.flow
		if fl == 0 {
			fl = wire.CalcFlowLabel(q.num, q.attr.DestQPN)
		}
		q.sport = wire.FlowLabelToUDPSport(fl)
	default:
		q.sport = wire.UDSport(q.num)
	}
}

// reset returns the QP to its state after creation: queues emptied
// without completions (IBTA §10.3.1: RESET discards WQEs).
func (q *QP) reset() {
	q.stopTimers()
	q.sq.clear()
	if q.srq == nil {
		q.rq.head, q.rq.n = 0, 0
	}
	q.req = reqState{}
	q.comp = compState{}
	q.resp = respState{}
}

// kick asks for the requester to run once the caller has let go of q.mu
// (resumeKicked), after a change that may let it go on: a state change, a
// new rate limit or pacer. Called with q.mu held. It used to run the
// requester and send its batch right here, under q.mu: a link call under
// a QP's lock, which issue 15 rules out (the receive path then waits for
// the link behind that QP's lock).
func (q *QP) kick() {
	q.kickDue = true
}

// resumeKicked runs the requester a kick asked for, from the application's
// goroutine, and sends what it built with no lock held. Called without
// q.mu.
func (q *QP) resumeKicked() {
	q.mu.Lock()
	if !q.kickDue {
		q.mu.Unlock()
		return
	}
	q.kickDue = false
	if q.destroyed || q.state != QPSRTS && q.state != QPSSQD {
		q.mu.Unlock()
		return
	}
	out := getTxBatch(q.dev)
	out.unlimited = true // the application's goroutine
	q.reqRun(out)
	q.mu.Unlock()
	putTxBatch(out) // sends, gives q back and runs what waited for it (release)
}

// PostRecv posts receive work requests, like ibv_post_recv.
func (q *QP) PostRecv(wrs ...RecvWR) error {
	if q.srq != nil {
		return errorf("post_recv", q.dev.name, q.num, syscall.EINVAL, "the QP uses an SRQ; post to the SRQ")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return net.ErrClosed
	}
	if q.state == QPSReset {
		return errorf("post_recv", q.dev.name, q.num, syscall.EINVAL, "the QP is in RESET; move it to INIT first")
	}
	for i := range wrs {
		if q.state == QPSErr {
			q.recvCQ.push(WC{WRID: wrs[i].WRID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: q.num})
			continue
		}
		if err := q.rq.push(&wrs[i]); err != nil {
			return withOp(err, "post_recv", q.dev.name, q.num)
		}
	}
	return nil
}

// completeSend posts a send completion if the WQE is signaled or failed.
func (q *QP) completeSend(w *sendWQE, status WCStatus, detail string) {
	if status == WCSuccess && !w.signaled {
		return
	}
	wc := WC{WRID: w.wr.WRID, Status: status, Opcode: w.wr.Opcode.wcOpcode(), QPNum: q.num, Detail: detail}
	if status == WCSuccess {
		switch w.wr.Opcode {
		case WRRDMARead:
			wc.ByteLen = uint32(w.length)
		case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
			wc.ByteLen = 8
		}
	}
	q.sendCQ.push(wc)
}

// enterError moves the QP to ERR: the send WQE at failed (an SQ index, or
// -1) completes with status and detail, every other outstanding send and
// receive WQE completes with IBV_WC_WR_FLUSH_ERR (IBTA §10.3.1.2).
func (q *QP) enterError(failed int64, status WCStatus, detail string) {
	q.state = QPSErr
	q.stopTimers()
	q.flushSend(failed, status, detail)
	if q.resp.wqe.active {
		// The receive a message in progress took is the oldest
		// outstanding one: it is flushed too, first.
		q.failRecv(WCWRFlushErr, "")
	}
	q.resp.msg = msgState{}
	if q.srq == nil {
		for e := q.rq.peek(); e != nil; e = q.rq.peek() {
			q.recvCQ.push(WC{WRID: e.wrID, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: q.num})
			q.rq.pop()
		}
	} else {
		q.dev.events.post(AsyncEvent{Type: EventQPLastWQEReached, QPNum: q.num})
	}
}

// flushSend empties the send queue: the WQE at failed (an SQ index, or -1)
// completes with status and detail, every other one with
// IBV_WC_WR_FLUSH_ERR.
func (q *QP) flushSend(failed int64, status WCStatus, detail string) {
	for i := q.sq.head; i < q.sq.tail; i++ {
		w := q.sq.at(i)
		if int64(i) == failed {
			q.completeSend(w, status, detail)
		} else {
			q.completeSend(w, WCWRFlushErr, "")
		}
	}
	q.sq.head, q.sq.cur = q.sq.tail, q.sq.tail
	q.req.off = 0
}

// enterSQE moves a UC, UD or GSI QP to SQE (Send Queue Error) after a send
// WQE completed in error: IBTA §10.3.1 and its QP state diagram send an
// unreliable QP there, not to ERR, on a send-queue completion error (a
// local length or protection error of a send WQE). The failed WQE
// completes with status, the send queue's other WQEs, and any posted
// while in SQE, with IBV_WC_WR_FLUSH_ERR; the receive queue goes on
// working; ibv_modify_qp SQE → RTS resumes sending. No affiliated
// asynchronous event is reported: the error completion is the report
// (IBV_EVENT_QP_FATAL means the QP went to ERR).
//
// Linux rxe has no SQE: its requester moves every QP type to ERR on a
// send error, and SQE is unreachable there (rxe_qp_from_attr only notes
// it). goroce follows IBTA, as rxe is silent: users of hardware that
// implements SQE recover with SQE → RTS (Linux IPoIB's UD QP does, on a
// send completion error: ipoib_qp_state_validate_work), and a program
// written for rxe's ERR can still modify the QP to RESET or ERR from SQE.
func (q *QP) enterSQE(failed int64, status WCStatus, detail string) {
	q.state = QPSSQE
	q.flushSend(failed, status, detail)
}
