package verbs_test

// The QP state machine of IBTA §10.3 / Table 94 (Linux ib_modify_qp_is_ok):
// valid transitions with exactly their required attributes, missing and
// superfluous attributes, invalid transitions and out-of-range values, all
// EINVAL naming what is wrong; SQD draining; what may be posted in which state.

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// required lists, per QP type, the attributes each step of RESET → INIT →
// RTR → RTS requires (IBTA Table 94; Linux qp_state_table).
var required = map[verbs.QPType]map[verbs.QPState]verbs.QPAttrMask{
	verbs.RC: {
		verbs.QPSInit: verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags,
		verbs.QPSRTR: verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer,
		verbs.QPSRTS: verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic,
	},
	verbs.UC: {
		verbs.QPSInit: verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags,
		verbs.QPSRTR:  verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN,
		verbs.QPSRTS:  verbs.AttrSQPSN,
	},
	verbs.UD: {
		verbs.QPSInit: verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey,
		verbs.QPSRTR:  0,
		verbs.QPSRTS:  verbs.AttrSQPSN,
	},
}

// stepAttr returns the attributes of the step to state, addressed at peer.
func stepAttr(typ verbs.QPType, state verbs.QPState, peer uint32, dgid netip.Addr) *verbs.QPAttr {
	acc := allRemote
	if typ == verbs.UC {
		acc = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	}
	return &verbs.QPAttr{State: state, PortNum: 1, PKeyIndex: 0, AccessFlags: acc, QKey: udQKey,
		PathMTU: verbs.MTU1024, DestQPN: peer, RQPSN: 0x1000, MaxDestRdAtomic: 4, MinRNRTimer: 12,
		AH:    verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: dgid, HopLimit: 64}},
		SQPSN: 0x200, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
}

// step moves qp one step towards RTS with exactly the required attributes.
func step(t testing.TB, qp *verbs.QP, state verbs.QPState, peer uint32, dgid netip.Addr) {
	t.Helper()
	if err := qp.Modify(stepAttr(qp.Type(), state, peer, dgid), verbs.AttrState|required[qp.Type()][state]); err != nil {
		t.Fatalf("→ %v: %v", state, err)
	}
	if s := qp.State(); s != state {
		t.Fatalf("QP in %v after a successful modify to %v", s, state)
	}
}

// drive moves a fresh qp from RESET to state.
func drive(t testing.TB, qp *verbs.QP, state verbs.QPState, peer uint32, dgid netip.Addr) {
	t.Helper()
	switch state {
	case verbs.QPSReset:
		return
	case verbs.QPSErr:
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, s := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
		step(t, qp, s, peer, dgid)
		if s == state {
			return
		}
	}
	if state == verbs.QPSSQD {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
	}
}

// newQP creates another QP of typ on p's side A.
func newQP(t testing.TB, p *verbstest.Pair, typ verbs.QPType) *verbs.QP {
	t.Helper()
	qp, err := p.A.PD.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: p.A.CQ, RecvCQ: p.A.RCQ,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qp.Destroy() })
	return qp
}

var allTypes = []verbs.QPType{verbs.RC, verbs.UC, verbs.UD}

// TestQPValidPath: RESET → INIT → INIT → RTR → RTS → RTS with exactly the
// required attributes (and allowed optional ones); Query returns what was
// set, and the QP carries traffic.
func TestQPValidPath(t *testing.T) {
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
			a := p.A.QP
			if s := a.State(); s != verbs.QPSReset {
				t.Fatalf("new QP in %v, want RESET", s)
			}
			step(t, a, verbs.QPSInit, p.B.QP.Num(), p.B.GID.GID)
			// INIT → INIT with an optional attribute.
			opt := verbs.AttrAccessFlags
			if typ == verbs.UD {
				opt = verbs.AttrQKey
			}
			if err := a.Modify(stepAttr(typ, verbs.QPSInit, 0, netip.Addr{}), verbs.AttrState|opt); err != nil {
				t.Fatalf("INIT → INIT with %v: %v", opt, err)
			}
			step(t, a, verbs.QPSRTR, p.B.QP.Num(), p.B.GID.GID)
			step(t, a, verbs.QPSRTS, p.B.QP.Num(), p.B.GID.GID)
			// RTS → RTS with an optional attribute (and no state change).
			rtsOpt := map[verbs.QPType]verbs.QPAttrMask{verbs.RC: verbs.AttrMinRNRTimer, verbs.UC: verbs.AttrAccessFlags, verbs.UD: verbs.AttrQKey}[typ]
			if err := a.Modify(stepAttr(typ, verbs.QPSRTS, 0, netip.Addr{}), rtsOpt); err != nil {
				t.Fatalf("RTS → RTS with %v: %v", rtsOpt, err)
			}
			q := a.Query()
			if q.State != verbs.QPSRTS || q.SQPSN != 0x200 {
				t.Errorf("query: state %v sq_psn %#x", q.State, q.SQPSN)
			}
			if typ == verbs.UD {
				if q.QKey != udQKey {
					t.Errorf("query: qkey %#x", q.QKey)
				}
			} else if q.PathMTU != verbs.MTU1024 || q.DestQPN != p.B.QP.Num() || q.RQPSN != 0x1000 {
				t.Errorf("query: path_mtu %v dest_qp %#x rq_psn %#x", q.PathMTU, q.DestQPN, q.RQPSN)
			}
			if typ == verbs.RC && (q.Timeout != 14 || q.RetryCnt != 7 || q.RNRRetry != 7 || q.MaxRdAtomic != 4 ||
				q.MaxDestRdAtomic != 4 || q.MinRNRTimer != 12 || q.AccessFlags != allRemote) {
				t.Errorf("query: %+v", q)
			}
			// B the usual way, its rq_psn matching A's sq_psn: traffic both ways.
			o := p.Opts
			o.Tune = func(rtr, rts *verbs.QPAttr) { rtr.RQPSN = 0x200 }
			if err := verbstest.ConnectQP(p.B.QP, a.Num(), p.A.GID.GID, 0, o); err != nil {
				t.Fatal(err)
			}
			exchange(t, p)
		})
	}
}

// exchange sends a message each way over p and checks it.
func exchange(t testing.TB, p *verbstest.Pair) {
	t.Helper()
	for i, s := range []struct{ from, to *verbstest.Side }{{&p.A, &p.B}, {&p.B, &p.A}} {
		data := randBytes(300, uint64(i))
		dst := newCanary(t, s.to.PD, 400, verbs.AccessLocalWrite)
		mustPostRecv(t, s.to.QP, verbs.RecvWR{WRID: 77, SGList: []verbs.SGE{dst.mr.SGE(0, 400)}})
		wr := verbs.SendWR{WRID: 77, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, s.from.PD, data), 300)}
		off := 0
		if s.from.QP.Type() == verbs.UD {
			ah, err := s.from.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: s.to.GID.GID}})
			if err != nil {
				t.Fatal(err)
			}
			wr.AH, wr.RemoteQPN, wr.RemoteQKey, off = ah, s.to.QP.Num(), udQKey, 40
		}
		mustPostSend(t, s.from.QP, wr)
		wantOK(t, s.from.CQ, 77, verbs.WCSend)
		wantOK(t, s.to.RCQ, 77, verbs.WCRecv)
		dst.check(t, piece{0, dst.region()[:off]}, piece{off, data})
	}
}

// TestQPMissingRequired: leaving out any required attribute is EINVAL
// naming it (IBV_QP_…), and the QP stays where it was.
func TestQPMissingRequired(t *testing.T) {
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
			a := p.A.QP
			from := verbs.QPSReset
			for _, to := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS} {
				req := required[typ][to]
				for req != 0 {
					bit := verbs.QPAttrMask(1) << bits.TrailingZeros32(uint32(req))
					req &^= bit
					err := a.Modify(stepAttr(typ, to, p.B.QP.Num(), p.B.GID.GID), verbs.AttrState|required[typ][to]&^bit)
					wantEINVAL(t, err, bit.String())
					if s := a.State(); s != from {
						t.Fatalf("QP in %v after a refused %v → %v, want %v", s, from, to, from)
					}
				}
				step(t, a, to, p.B.QP.Num(), p.B.GID.GID)
				from = to
			}
		})
	}
}

// TestQPNotAllowed: an attribute the transition does not take is EINVAL
// naming it.
func TestQPNotAllowed(t *testing.T) {
	cases := []struct {
		typ   verbs.QPType
		from  verbs.QPState
		to    verbs.QPState
		extra verbs.QPAttrMask
	}{
		{verbs.RC, verbs.QPSReset, verbs.QPSInit, verbs.AttrPathMTU},
		{verbs.RC, verbs.QPSReset, verbs.QPSInit, verbs.AttrQKey},
		{verbs.RC, verbs.QPSReset, verbs.QPSInit, verbs.AttrSQPSN},
		// IBV_QP_CUR_STATE is optional only from RTR, RTS, SQD and SQE (IBTA Table 94).
		{verbs.RC, verbs.QPSReset, verbs.QPSInit, verbs.AttrCurState},
		{verbs.UD, verbs.QPSReset, verbs.QPSInit, verbs.AttrAccessFlags},
		{verbs.UC, verbs.QPSReset, verbs.QPSInit, verbs.AttrQKey},
		{verbs.RC, verbs.QPSInit, verbs.QPSRTR, verbs.AttrSQPSN},
		{verbs.RC, verbs.QPSInit, verbs.QPSRTR, verbs.AttrTimeout},
		{verbs.RC, verbs.QPSInit, verbs.QPSRTR, verbs.AttrRetryCnt},
		{verbs.UC, verbs.QPSInit, verbs.QPSRTR, verbs.AttrMaxDestRdAtomic},
		{verbs.UC, verbs.QPSInit, verbs.QPSRTR, verbs.AttrMinRNRTimer},
		{verbs.UD, verbs.QPSInit, verbs.QPSRTR, verbs.AttrAV},
		{verbs.UD, verbs.QPSInit, verbs.QPSRTR, verbs.AttrPathMTU},
		{verbs.RC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrPathMTU},
		{verbs.RC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrDestQPN},
		{verbs.RC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrRQPSN},
		{verbs.UC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrTimeout},
		{verbs.UC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrRNRRetry},
		{verbs.UC, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrMaxQPRdAtomic},
		{verbs.UD, verbs.QPSRTR, verbs.QPSRTS, verbs.AttrRetryCnt},
		{verbs.RC, verbs.QPSRTS, verbs.QPSRTS, verbs.AttrSQPSN},
		{verbs.RC, verbs.QPSRTS, verbs.QPSRTS, verbs.AttrPathMTU},
		{verbs.RC, verbs.QPSRTS, verbs.QPSErr, verbs.AttrPathMTU},
		{verbs.UD, verbs.QPSRTS, verbs.QPSReset, verbs.AttrQKey},
		{verbs.RC, verbs.QPSInit, verbs.QPSReset, verbs.AttrAccessFlags},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/%v-%v/%v", c.typ, c.from, c.to, c.extra), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: c.typ, NoConnect: true})
			a := p.A.QP
			drive(t, a, c.from, p.B.QP.Num(), p.B.GID.GID)
			attr := stepAttr(c.typ, c.to, p.B.QP.Num(), p.B.GID.GID)
			attr.CurState = c.from
			m := verbs.AttrState | c.extra
			if c.from != c.to && c.to != verbs.QPSErr && c.to != verbs.QPSReset {
				m |= required[c.typ][c.to]
			}
			wantEINVAL(t, a.Modify(attr, m), c.extra.String())
			if s := a.State(); s != c.from {
				t.Errorf("QP in %v after a refused modify, want %v", s, c.from)
			}
		})
	}
}

// TestQPInvalidTransitions: transitions Table 94 does not have are EINVAL
// naming both states, even with every attribute the target would need.
func TestQPInvalidTransitions(t *testing.T) {
	cases := []struct{ from, to verbs.QPState }{
		{verbs.QPSReset, verbs.QPSRTR}, {verbs.QPSReset, verbs.QPSRTS}, {verbs.QPSReset, verbs.QPSSQD},
		{verbs.QPSInit, verbs.QPSRTS}, {verbs.QPSInit, verbs.QPSSQD},
		{verbs.QPSRTR, verbs.QPSInit}, {verbs.QPSRTR, verbs.QPSRTR}, {verbs.QPSRTR, verbs.QPSSQD},
		{verbs.QPSRTS, verbs.QPSInit}, {verbs.QPSRTS, verbs.QPSRTR}, {verbs.QPSRTS, verbs.QPSSQE},
		{verbs.QPSSQD, verbs.QPSInit},
		{verbs.QPSErr, verbs.QPSInit}, {verbs.QPSErr, verbs.QPSRTS},
	}
	for _, typ := range allTypes {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/%v-%v", typ, c.from, c.to), func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
				a := p.A.QP
				drive(t, a, c.from, p.B.QP.Num(), p.B.GID.GID)
				m := verbs.AttrState | required[typ][c.to]
				wantEINVAL(t, a.Modify(stepAttr(typ, c.to, p.B.QP.Num(), p.B.GID.GID), m), c.from.String(), c.to.String())
				if s := a.State(); s != c.from {
					t.Errorf("QP in %v after a refused %v → %v", s, c.from, c.to)
				}
			})
		}
	}
	t.Run("not-a-state", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
		wantEINVAL(t, p.A.QP.Modify(&verbs.QPAttr{State: 7}, verbs.AttrState))
	})
	t.Run("cur_qp_state-mismatch", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS, CurState: verbs.QPSRTR, MinRNRTimer: 3},
			verbs.AttrState|verbs.AttrCurState|verbs.AttrMinRNRTimer)
		wantEINVAL(t, err, "cur_qp_state")
	})
}

// TestQPOutOfRange: values outside their range are EINVAL naming the
// attribute and the range; nothing changes.
func TestQPOutOfRange(t *testing.T) {
	cases := []struct {
		name string
		to   verbs.QPState
		set  func(a *verbs.QPAttr)
		subs []string
	}{
		{"path_mtu=0", verbs.QPSRTR, func(a *verbs.QPAttr) { a.PathMTU = 0 }, []string{"path_mtu", "4096"}},
		{"path_mtu=6", verbs.QPSRTR, func(a *verbs.QPAttr) { a.PathMTU = 6 }, []string{"path_mtu", "4096"}},
		{"min_rnr_timer=32", verbs.QPSRTR, func(a *verbs.QPAttr) { a.MinRNRTimer = 32 }, []string{"min_rnr_timer", "31"}},
		{"max_dest_rd_atomic=200", verbs.QPSRTR, func(a *verbs.QPAttr) { a.MaxDestRdAtomic = 200 }, []string{"max_dest_rd_atomic", "128"}},
		{"dest_qp_num=1<<24", verbs.QPSRTR, func(a *verbs.QPAttr) { a.DestQPN = 1 << 24 }, []string{"dest_qp_num", "24"}},
		{"rq_psn=1<<24", verbs.QPSRTR, func(a *verbs.QPAttr) { a.RQPSN = 1 << 24 }, []string{"rq_psn", "24"}},
		{"ah.is_global=0", verbs.QPSRTR, func(a *verbs.QPAttr) { a.AH.IsGlobal = false }, []string{"is_global"}},
		{"ah.sgid_index=5", verbs.QPSRTR, func(a *verbs.QPAttr) { a.AH.GRH.SGIDIndex = 5 }, []string{"sgid_index"}},
		{"ah.port_num=2", verbs.QPSRTR, func(a *verbs.QPAttr) { a.AH.PortNum = 2 }, []string{"port_num"}},
		{"ah.flow_label=1<<20", verbs.QPSRTR, func(a *verbs.QPAttr) { a.AH.GRH.FlowLabel = 1 << 20 }, []string{"flow_label", "20"}},
		{"ah.dgid-unset", verbs.QPSRTR, func(a *verbs.QPAttr) { a.AH.GRH.DGID = netip.Addr{} }, []string{"dgid"}},
		{"retry_cnt=8", verbs.QPSRTS, func(a *verbs.QPAttr) { a.RetryCnt = 8 }, []string{"retry_cnt", "7"}},
		{"rnr_retry=8", verbs.QPSRTS, func(a *verbs.QPAttr) { a.RNRRetry = 8 }, []string{"rnr_retry", "7"}},
		{"timeout=32", verbs.QPSRTS, func(a *verbs.QPAttr) { a.Timeout = 32 }, []string{"timeout", "31"}},
		{"max_rd_atomic=200", verbs.QPSRTS, func(a *verbs.QPAttr) { a.MaxRdAtomic = 200 }, []string{"max_rd_atomic", "128"}},
		{"sq_psn=1<<24", verbs.QPSRTS, func(a *verbs.QPAttr) { a.SQPSN = 1 << 24 }, []string{"sq_psn", "24"}},
		{"port_num=2", verbs.QPSInit, func(a *verbs.QPAttr) { a.PortNum = 2 }, []string{"port_num"}},
		{"pkey_index=1", verbs.QPSInit, func(a *verbs.QPAttr) { a.PKeyIndex = 1 }, []string{"pkey_index"}},
		{"qp_access_flags=1<<30", verbs.QPSInit, func(a *verbs.QPAttr) { a.AccessFlags |= 1 << 30 }, []string{"qp_access_flags"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
			a := p.A.QP
			from := map[verbs.QPState]verbs.QPState{verbs.QPSInit: verbs.QPSReset, verbs.QPSRTR: verbs.QPSInit, verbs.QPSRTS: verbs.QPSRTR}[c.to]
			drive(t, a, from, p.B.QP.Num(), p.B.GID.GID)
			before := a.Query()
			attr := stepAttr(verbs.RC, c.to, p.B.QP.Num(), p.B.GID.GID)
			c.set(attr)
			wantEINVAL(t, a.Modify(attr, verbs.AttrState|required[verbs.RC][c.to]), c.subs...)
			if after := a.Query(); after != before {
				t.Errorf("a refused modify changed the QP:\n%+v\n%+v", before, after)
			}
			// The same step with good values still works.
			step(t, a, c.to, p.B.QP.Num(), p.B.GID.GID)
		})
	}
}

// TestQPPathMTUAboveActive: path_mtu above the port's active MTU is EINVAL.
func TestQPPathMTUAboveActive(t *testing.T) {
	p := buildPair(t, pairConfig{Options: verbstest.Options{NoConnect: true}, PortMTU: 1024 + 64})
	if m := p.A.Dev.ActiveMTU(); m != verbs.MTU1024 {
		t.Fatalf("active MTU %v on a link of 1088 bytes, want 1024", m)
	}
	drive(t, p.A.QP, verbs.QPSInit, 0, netip.Addr{})
	attr := stepAttr(verbs.RC, verbs.QPSRTR, p.B.QP.Num(), p.B.GID.GID)
	attr.PathMTU = verbs.MTU2048
	wantEINVAL(t, p.A.QP.Modify(attr, verbs.AttrState|required[verbs.RC][verbs.QPSRTR]), "path_mtu", "1024")
}

// TestQPAnyToErrAndReset: every state can go to ERR and to RESET, and a
// QP reset to RESET can be brought up again.
func TestQPAnyToErrAndReset(t *testing.T) {
	for _, typ := range allTypes {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
		for _, from := range []verbs.QPState{verbs.QPSReset, verbs.QPSInit, verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSErr} {
			for _, to := range []verbs.QPState{verbs.QPSErr, verbs.QPSReset} {
				t.Run(fmt.Sprintf("%v/%v-%v", typ, from, to), func(t *testing.T) {
					qp := newQP(t, p, typ)
					drive(t, qp, from, p.B.QP.Num(), p.B.GID.GID)
					if err := qp.Modify(&verbs.QPAttr{State: to}, verbs.AttrState); err != nil {
						t.Fatalf("%v → %v: %v", from, to, err)
					}
					if s := qp.State(); s != to {
						t.Fatalf("QP in %v, want %v", s, to)
					}
					if to == verbs.QPSReset {
						drive(t, qp, verbs.QPSRTS, p.B.QP.Num(), p.B.GID.GID)
					}
				})
			}
		}
	}
}

// TestQPReuseAfterReset: a connected pair that went to ERR, back to RESET
// and up again with new PSNs carries traffic; nothing of the old
// connection leaks into the new one.
func TestQPReuseAfterReset(t *testing.T) {
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ})
			exchange(t, p)
			// Leave a receive posted on B: RESET discards it without a completion.
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 5})
			for _, s := range []*verbstest.Side{&p.A, &p.B} {
				for _, st := range []verbs.QPState{verbs.QPSErr, verbs.QPSReset} {
					if err := s.QP.Modify(&verbs.QPAttr{State: st}, verbs.AttrState); err != nil {
						t.Fatal(err)
					}
				}
			}
			// ERR flushed B's receive.
			want(t, poll(t, p.B.RCQ), verbs.WCWRFlushErr, 5)
			o := p.Opts
			o.Tune = func(rtr, rts *verbs.QPAttr) { rtr.RQPSN, rts.SQPSN = 0xABCDE, 0xABCDE }
			if err := verbstest.ConnectQP(p.A.QP, p.B.QP.Num(), p.B.GID.GID, 0, o); err != nil {
				t.Fatal(err)
			}
			if err := verbstest.ConnectQP(p.B.QP, p.A.QP.Num(), p.A.GID.GID, 0, o); err != nil {
				t.Fatal(err)
			}
			exchange(t, p)
			wantEmpty(t, p.A.CQ)
			wantEmpty(t, p.B.RCQ)
		})
	}
}

// TestSQD: RTS → SQD stops starting new messages, finishes those in
// flight, reports IBV_EVENT_SQ_DRAINED (with EnSQDAsyncNotify) once
// nothing is outstanding, and SQD → RTS resumes.
func TestSQD(t *testing.T) {
	sqd := func(t *testing.T, qp *verbs.QP, notify bool) {
		t.Helper()
		m := verbs.AttrState
		if notify {
			m |= verbs.AttrEnSQDAsyncNotify
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD, EnSQDAsyncNotify: notify}, m); err != nil {
			t.Fatal(err)
		}
		if s := qp.State(); s != verbs.QPSSQD {
			t.Fatalf("QP in %v, want SQD", s)
		}
	}
	rts := func(t *testing.T, qp *verbs.QP) {
		t.Helper()
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("drains-in-flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Delay: time.Millisecond}})
			data := randBytes(3000, 1)
			dst := newCanary(t, p.B.PD, 3000, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 3000)}})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 3000)})
			sqd(t, p.A.QP, true)
			if !p.A.QP.Query().SQDraining {
				t.Error("sq_draining is false with a message in flight")
			}
			noEvent(t, p.A.Dev, verbs.EventSQDrained)
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			waitEvent(t, p.A.Dev, verbs.EventSQDrained, p.A.QP.Num())
			if p.A.QP.Query().SQDraining {
				t.Error("sq_draining is true after SQ_DRAINED")
			}
			wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
			dst.check(t, piece{0, data})
			rts(t, p.A.QP)
			exchange(t, p)
		})
	})
	t.Run("new-wr-waits-for-rts", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			sqd(t, p.A.QP, true)
			waitEvent(t, p.A.Dev, verbs.EventSQDrained, p.A.QP.Num()) // nothing was outstanding
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
			sent := ctr(t, p.A.Dev.Counters(), "sent_pkts")
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			synctest.Wait()
			if n := ctr(t, p.A.Dev.Counters(), "sent_pkts"); n != sent {
				t.Errorf("%d packets sent in SQD", n-sent)
			}
			wantEmpty(t, p.A.CQ)
			wantEmpty(t, p.B.RCQ)
			rts(t, p.A.QP)
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		})
	})
	t.Run("no-notify-no-event", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			sqd(t, p.A.QP, false)
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			synctest.Wait()
			noEvent(t, p.A.Dev, verbs.EventSQDrained)
		})
	})
	// A message the responder RNR-NAKed is still in progress: SQD must
	// finish it (retransmitting it), then report the drain.
	t.Run("drains-rnr-retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			synctest.Wait() // the RNR NAK is in
			sqd(t, p.A.QP, true)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
			waitEvent(t, p.A.Dev, verbs.EventSQDrained, p.A.QP.Num())
		})
	})
	// Likewise a message whose packets were lost: the retransmit timer
	// resends it in SQD.
	t.Run("drains-retransmission", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Loss: 1}})
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			synctest.Wait()
			sqd(t, p.A.QP, true)
			p.A.Port.SetFaults(fabric.Faults{})
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			waitEvent(t, p.A.Dev, verbs.EventSQDrained, p.A.QP.Num())
		})
	})
	t.Run("sqd-to-sqd", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		sqd(t, p.A.QP, false)
		if err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSSQD, Timeout: 10, RetryCnt: 5}, verbs.AttrState|verbs.AttrTimeout|verbs.AttrRetryCnt); err != nil {
			t.Fatalf("SQD → SQD with timeout and retry_cnt: %v", err)
		}
		if q := p.A.QP.Query(); q.Timeout != 10 || q.RetryCnt != 5 {
			t.Errorf("query after SQD → SQD: timeout %d retry_cnt %d", q.Timeout, q.RetryCnt)
		}
		rts(t, p.A.QP)
		exchange(t, p)
	})
}

// TestPostInWrongState: post_send before RTS and post_recv in RESET are
// EINVAL naming the state; post_recv in INIT and RTR is fine.
func TestPostInWrongState(t *testing.T) {
	for _, typ := range allTypes {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
			a := p.A.QP
			wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}
			if typ == verbs.UD {
				wr = udTo(t, p, wr)
			}
			wantEINVAL(t, a.PostSend(wr), "RESET")
			wantEINVAL(t, a.PostRecv(verbs.RecvWR{WRID: 1}), "RESET")
			step(t, a, verbs.QPSInit, p.B.QP.Num(), p.B.GID.GID)
			wantEINVAL(t, a.PostSend(wr), "INIT")
			mustPostRecv(t, a, verbs.RecvWR{WRID: 2})
			step(t, a, verbs.QPSRTR, p.B.QP.Num(), p.B.GID.GID)
			wantEINVAL(t, a.PostSend(wr), "RTR")
			mustPostRecv(t, a, verbs.RecvWR{WRID: 3})
			wantEmpty(t, p.A.CQ)
			wantEmpty(t, p.A.RCQ)
		})
	}
}

// TestQueueLimits: too many SGEs is EINVAL, a full queue ENOMEM.
func TestQueueLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Loss: 1},
			Cap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 2, MaxRecvSGE: 2}})
		mr := source(t, p.A.PD, make([]byte, 64))
		three := []verbs.SGE{mr.SGE(0, 8), mr.SGE(8, 8), mr.SGE(16, 8)}
		wantEINVAL(t, p.A.QP.PostSend(verbs.SendWR{Opcode: verbs.WRSend, SGList: three}), "max_send_sge")
		wantEINVAL(t, p.A.QP.PostRecv(verbs.RecvWR{SGList: three}), "max_recv_sge")
		mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 1}, verbs.RecvWR{WRID: 2})
		if err := p.A.QP.PostRecv(verbs.RecvWR{WRID: 3}); !errors.Is(err, syscall.ENOMEM) {
			t.Errorf("third receive on a 2-deep RQ: %v, want ENOMEM", err)
		}
		// Nothing is acknowledged (every packet is lost): two WRs fill the SQ.
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend}, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend})
		if err := p.A.QP.PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend}); !errors.Is(err, syscall.ENOMEM) {
			t.Errorf("third send on a 2-deep SQ: %v, want ENOMEM", err)
		}
	})
}

// TestCreateQPBadCaps: CreateQP refuses bad capabilities and CQs with
// EINVAL naming them.
func TestCreateQPBadCaps(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	good := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	pd2, err := p.A.Dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	srq2, err := pd2.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	srq, err := p.A.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		set  func(a *verbs.QPInitAttr)
		subs []string
	}{
		{"max_send_wr=0", func(a *verbs.QPInitAttr) { a.Cap.MaxSendWR = 0 }, []string{"max_send_wr"}},
		{"max_send_wr-too-big", func(a *verbs.QPInitAttr) { a.Cap.MaxSendWR = 1<<20 + 1 }, []string{"max_send_wr"}},
		{"max_recv_wr=0", func(a *verbs.QPInitAttr) { a.Cap.MaxRecvWR = 0 }, []string{"max_recv_wr"}},
		{"max_recv_wr-too-big", func(a *verbs.QPInitAttr) { a.Cap.MaxRecvWR = 1<<20 + 1 }, []string{"max_recv_wr"}},
		{"max_send_sge=33", func(a *verbs.QPInitAttr) { a.Cap.MaxSendSGE = 33 }, []string{"max_send_sge", "32"}},
		{"max_send_sge=-1", func(a *verbs.QPInitAttr) { a.Cap.MaxSendSGE = -1 }, []string{"max_send_sge"}},
		{"max_recv_sge=33", func(a *verbs.QPInitAttr) { a.Cap.MaxRecvSGE = 33 }, []string{"max_recv_sge", "32"}},
		{"max_inline_data=257", func(a *verbs.QPInitAttr) { a.Cap.MaxInlineData = 257 }, []string{"max_inline_data", "256"}},
		{"no-send_cq", func(a *verbs.QPInitAttr) { a.SendCQ = nil }, []string{"send_cq"}},
		{"no-recv_cq", func(a *verbs.QPInitAttr) { a.RecvCQ = nil }, []string{"recv_cq"}},
		{"send_cq-of-another-device", func(a *verbs.QPInitAttr) { a.SendCQ = p.B.CQ }, []string{"send_cq"}},
		{"recv_cq-of-another-device", func(a *verbs.QPInitAttr) { a.RecvCQ = p.B.RCQ }, []string{"recv_cq"}},
		{"qp_type=9", func(a *verbs.QPInitAttr) { a.Type = 9 }, []string{"qp_type"}},
		{"srq-of-another-pd", func(a *verbs.QPInitAttr) { a.SRQ = srq2 }, []string{"SRQ"}},
		{"srq-on-uc", func(a *verbs.QPInitAttr) { a.Type, a.SRQ = verbs.UC, srq }, []string{"SRQ"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.A.CQ, RecvCQ: p.A.RCQ, Cap: good}
			c.set(&a)
			qp, err := p.A.PD.CreateQP(a)
			if err == nil {
				qp.Destroy()
			}
			wantEINVAL(t, err, c.subs...)
		})
	}
	t.Run("good", func(t *testing.T) {
		qp, err := p.A.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.A.CQ, RecvCQ: p.A.RCQ, Cap: good})
		if err != nil {
			t.Fatal(err)
		}
		qp.Destroy()
	})
}

// TestPostSendStopsAtBadWR: a list with a bad WR in the middle posts the
// WRs before it, returns an error naming the bad one, and drops the rest
// (ibv_post_send's bad_wr).
func TestPostSendStopsAtBadWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		mr := source(t, p.A.PD, make([]byte, 64))
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1}, verbs.RecvWR{WRID: 3})
		five := []verbs.SGE{mr.SGE(0, 0), mr.SGE(0, 0), mr.SGE(0, 0), mr.SGE(0, 0), mr.SGE(0, 0)}
		err := p.A.QP.PostSend(
			verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled},
			verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: five},
			verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
		wantEINVAL(t, err, "wr_id 2", "max_send_sge")
		// WR 1 is posted: it is sent without waiting for another post.
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		// A WR behind shows that WR 3 never went out: it takes receive 3.
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
		wantOK(t, p.A.CQ, 4, verbs.WCSend)
		wantOK(t, p.B.RCQ, 3, verbs.WCRecv)
		wantEmpty(t, p.A.CQ)
	})
}
