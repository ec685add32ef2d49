package rdmacm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// noEvent fails t if s gets an event within d.
func noEvent(t *testing.T, s *side, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if e, err := s.ec.Get(ctx); err == nil {
		t.Fatalf("unexpected event %v", e)
	}
}

// resolve makes an ID on a with its address and route resolved to dst,
// and no QP.
func resolve(t *testing.T, a *side, ps PortSpace, dst netip.AddrPort) *ID {
	t.Helper()
	id, err := a.cm.CreateID(a.ec, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.Addr{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventRouteResolved)
	return id
}

// modify moves qp to st with the attributes the ID gives for it.
func modify(t *testing.T, id *ID, qp *verbs.QP, st verbs.QPState) {
	t.Helper()
	attr, mask, err := id.InitQPAttr(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.Modify(&attr, mask); err != nil {
		t.Fatalf("modify to %v: %v", st, err)
	}
}

// TestConnectWithoutQP: both sides leave the QP to the caller, as a
// librdmacm program that creates its QP with ibv_create_qp does. The REQ
// and REP carry the QP numbers given in ConnParam.QPNum; the active side
// gets CONNECT_RESPONSE with the peer's QP number, READ depths and private
// data, moves its QP itself (here with attributes built by hand, as
// verbstest.ConnectQP builds them, and only the PSNs taken from
// InitQPAttr, which must be the REQ's and the REP's) and calls Establish:
// the RTU gives the passive side ESTABLISHED, the active side nothing more.
// SENDs then go both ways, which they cannot with the PSNs swapped.
func TestConnectWithoutQP(t *testing.T) {
	reqHook, reqs := capture(mad.AttrREQ)
	repHook, reps := capture(mad.AttrREP)
	a, b := newSidesHook(t, "", fastOptions, fastOptions, repHook, reqHook)
	listen(t, b, PSTCP, 7174)
	ca := resolve(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
	qa, err := a.pd.CreateQP(rcInit(a))
	if err != nil {
		t.Fatal(err)
	}
	defer qa.Destroy()
	modify(t, ca, qa, verbs.QPSInit)
	if _, _, err := ca.InitQPAttr(verbs.QPSRTR); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("InitQPAttr(RTR) before the peer is known: %v, want EINVAL", err)
	}
	if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Connect with neither a QP nor ConnParam.QPNum: %v, want EINVAL", err)
	}
	if err := ca.Connect(ConnParam{PrivateData: []byte("my own QP"), QPNum: qa.Num(), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	req := b.want(t, EventConnectRequest)
	if req.Param.QPNum != qa.Num() {
		t.Errorf("CONNECT_REQUEST QP number %d, want the active side's %d", req.Param.QPNum, qa.Num())
	}
	cb := req.ID
	qb, err := b.pd.CreateQP(rcInit(b))
	if err != nil {
		t.Fatal(err)
	}
	defer qb.Destroy()
	for _, st := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
		modify(t, cb, qb, st) // before Accept, as cma_accept_ib moves its QP
	}
	if err := cb.Accept(ConnParam{PrivateData: []byte("mine too"), QPNum: qb.Num(), ResponderResources: 1, InitiatorDepth: 1,
		RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}

	resp := a.want(t, EventConnectResponse)
	if resp.ID != ca || resp.Param.QPNum != qb.Num() || resp.Param.ResponderResources != 1 || resp.Param.InitiatorDepth != 1 ||
		resp.Param.RNRRetryCount != 7 {
		p := resp.Param
		t.Errorf("CONNECT_RESPONSE for %p: QP %d, depths %d/%d, RNR retry %d; want %p, QP %d, depths 1/1, RNR retry 7",
			resp.ID, p.QPNum, p.ResponderResources, p.InitiatorDepth, p.RNRRetryCount, ca, qb.Num())
	}
	if !bytes.HasPrefix(resp.PrivateData, []byte("mine too")) || len(resp.PrivateData) != mad.RDMACMMaxREPPrivateData {
		t.Errorf("CONNECT_RESPONSE private data %q", resp.PrivateData)
	}
	reqMAD, _ := mad.Parse(recvMAD(t, reqs).mad)
	repMAD, _ := mad.Parse(recvMAD(t, reps).mad)
	r1, _ := reqMAD.REQ()
	r2, _ := repMAD.REP()
	if r1.LocalQPN() != qa.Num() || r2.LocalQPN() != qb.Num() {
		t.Errorf("REQ names QP %d, REP QP %d; want %d and %d", r1.LocalQPN(), r2.LocalQPN(), qa.Num(), qb.Num())
	}
	reqPSN, repPSN := wirePSN(r1.StartingPSN()), wirePSN(r2.StartingPSN())
	rtrCM, _, err := ca.InitQPAttr(verbs.QPSRTR)
	if err != nil {
		t.Fatal(err)
	}
	rtsCM, _, err := ca.InitQPAttr(verbs.QPSRTS)
	if err != nil {
		t.Fatal(err)
	}
	if rtrCM.RQPSN != reqPSN || rtsCM.SQPSN != repPSN || rtrCM.DestQPN != qb.Num() {
		t.Errorf("InitQPAttr: rq_psn %#x, sq_psn %#x, dest QPN %d; want the REQ's PSN %#x, the REP's %#x, QP %d",
			uint32(rtrCM.RQPSN), uint32(rtsCM.SQPSN), rtrCM.DestQPN, uint32(reqPSN), uint32(repPSN), qb.Num())
	}
	var sgid uint8
	for i, e := range a.dev.GIDs() {
		if e.GID == gidOf(a.ip) && e.Type == verbs.GIDTypeRoCEv2 {
			sgid = uint8(i)
		}
	}
	rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: a.dev.ActiveMTU(), DestQPN: resp.Param.QPNum, RQPSN: rtrCM.RQPSN,
		MaxDestRdAtomic: resp.Param.ResponderResources, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: gidOf(b.ip), SGIDIndex: sgid, HopLimit: 64}}}
	if err := qa.Modify(rtr, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
		verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: rtsCM.SQPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: resp.Param.InitiatorDepth}
	if err := qa.Modify(rts, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|
		verbs.AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}

	noEvent(t, b, 300*time.Millisecond) // no RTU yet: the REP's repeats draw MRAs
	if err := ca.Establish(); err != nil {
		t.Fatal(err)
	}
	b.want(t, EventEstablished)
	noEvent(t, a, 300*time.Millisecond) // rdma_establish: no event on the active side
	if err := ca.Establish(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("second Establish: %v, want EINVAL", err)
	}

	send(t, a, b, qa, qb, []byte("active to passive"))
	send(t, b, a, qb, qa, []byte("passive to active"))

	disconnectBoth(t, a, b, ca, cb)
	ca.Destroy()
	cb.Destroy()
}

// TestEstablishWithQP: Establish is for IDs without a QP; on one with a
// QP the CM has sent the RTU itself.
func TestEstablishWithQP(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, b, nil, nil)
	if err := ca.Establish(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Establish on an ID with a QP: %v, want EINVAL", err)
	}
	ca.Destroy()
	cb.Destroy()
}

// TestConnectResponseMRA: with Linux's timeouts, an active side that takes
// 100 s over CONNECT_RESPONSE (past the 16 × 4.3 s after which an
// unanswered REP gives UNREACHABLE) still connects: the REP's first repeat
// draws an MRA for the REP (service timeout 24, the REQ's transaction ID),
// which makes the passive side's later tries wait ≈ 67.6 s; the repeat at
// 71.9 s draws another. Virtual time.
func TestConnectResponseMRA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mraHook, mras := capture(mad.AttrMRA)
		a, b := newSidesHook(t, "", Options{}, Options{}, nil, mraHook)
		listen(t, b, PSTCP, 7174)
		ca := resolve(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
		qa, err := a.pd.CreateQP(rcInit(a))
		if err != nil {
			t.Fatal(err)
		}
		defer qa.Destroy()
		if err := ca.Connect(ConnParam{QPNum: qa.Num(), RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		cb := acceptRC(t, b)
		a.want(t, EventConnectResponse)

		time.Sleep(100 * time.Second) // the consumer thinks it over

		for _, st := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
			modify(t, ca, qa, st)
		}
		if err := ca.Establish(); err != nil {
			t.Fatal(err)
		}
		if e := getWithin(t, b, time.Minute); e.Type != EventEstablished {
			t.Fatalf("passive side got %v, want ESTABLISHED", e)
		}
		if n := len(mras); n != 2 {
			t.Errorf("passive side got %d MRAs, want 2 (for the REP's repeats at 4.3 s and 71.9 s)", n)
		}
		m, err := mad.Parse(recvMAD(t, mras).mad)
		if err != nil {
			t.Fatal(err)
		}
		mra, _ := m.MRA()
		a.cm.mu.Lock()
		tid, alcid := ca.tid, ca.lcid
		a.cm.mu.Unlock()
		b.cm.mu.Lock()
		blcid := cb.lcid
		b.cm.mu.Unlock()
		if mra.MessageMRAed() != mad.MsgREP || mra.ServiceTimeout() != 24 || m.Header().TransactionID() != tid ||
			mra.LocalCommID() != alcid || mra.RemoteCommID() != blcid {
			t.Errorf("MRA: MRAed %v, service timeout %d, TID %#x, comm IDs %#x/%#x; want REP, 24, %#x, %#x/%#x",
				mra.MessageMRAed(), mra.ServiceTimeout(), m.Header().TransactionID(), mra.LocalCommID(), mra.RemoteCommID(),
				tid, alcid, blcid)
		}
		ca.Destroy()
		cb.Destroy()
	})
}

// TestRejectConnectResponse: the active side may turn the REP down: Reject
// (with private data) and Destroy send a REJ for the REP with reason
// Consumer Reject, and the passive side gets REJECTED.
func TestRejectConnectResponse(t *testing.T) {
	for _, how := range []string{"reject", "destroy"} {
		t.Run(how, func(t *testing.T) {
			rejHook, rejs := capture(mad.AttrREJ)
			a, b := newSidesHook(t, "", fastOptions, fastOptions, nil, rejHook)
			listen(t, b, PSTCP, 7174)
			ca := resolve(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
			if err := ca.Connect(ConnParam{QPNum: 0x123, RetryCount: 7, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			cb := acceptRC(t, b)
			a.want(t, EventConnectResponse)
			if how == "reject" {
				if err := ca.Reject([]byte("not today")); err != nil {
					t.Fatal(err)
				}
			} else {
				ca.Destroy()
			}
			e := b.want(t, EventRejected)
			if e.Status != int(mad.RejectConsumer) {
				t.Errorf("REJECTED status %d, want %d", e.Status, mad.RejectConsumer)
			}
			if how == "reject" && !bytes.HasPrefix(e.PrivateData, []byte("not today")) {
				t.Errorf("REJECTED private data %q", e.PrivateData)
			}
			m, _ := mad.Parse(recvMAD(t, rejs).mad)
			if rej, _ := m.REJ(); rej.MessageRejected() != mad.MsgREP {
				t.Errorf("REJ rejects %v, want the REP", rej.MessageRejected())
			}
			if err := ca.Establish(); err == nil {
				t.Error("Establish after rejecting the REP succeeded")
			}
			ca.Destroy()
			cb.Destroy()
		})
	}
}
