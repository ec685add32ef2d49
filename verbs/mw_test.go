package verbs_test

// Memory windows (IBTA §10.6.7; rxe_mw.c): binds, their rules and errors,
// and the responder's checks of a window's rkey, with proof that a refused
// access writes no byte.

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

const (
	mwRegion = 8192 // B's region
	mwOff    = 1024 // the window: region offsets [mwOff, mwOff+mwLen)
	mwLen    = 2048
)

// mwBindAccess is a region that grants nothing remotely itself: every
// remote access below goes through a window or fails.
const mwBindAccess = verbs.AccessLocalWrite | verbs.AccessMWBind

// mwEnv is a connected RC pair whose responder B has a region windows are
// bound to, and A's source and READ target.
type mwEnv struct {
	p      *verbstest.Pair
	target *canary // B's region
	data   []byte
	src    *verbs.MR // A: data
	dst    *canary   // A: READ target
}

func newMWEnv(t *testing.T, regionAccess verbs.Access) *mwEnv {
	t.Helper()
	return newMWEnvOn(t, verbstest.NetV2IPv4, regionAccess)
}

func newMWEnvOn(t *testing.T, net string, regionAccess verbs.Access) *mwEnv {
	t.Helper()
	p := verbstest.NewPair(t, verbstest.Options{Net: net})
	e := &mwEnv{p: p, data: randBytes(mwLen, 19)}
	e.target = newCanary(t, p.B.PD, mwRegion, regionAccess)
	e.src = source(t, p.A.PD, e.data)
	e.dst = newCanary(t, p.A.PD, mwLen, verbs.AccessLocalWrite)
	return e
}

// info is a bind of the window to B's region with access.
func (e *mwEnv) info(access verbs.Access) verbs.MWBindInfo {
	return verbs.MWBindInfo{MR: e.target.mr, Addr: e.target.addr(mwOff), Length: mwLen, Access: access}
}

func allocMW(t *testing.T, pd *verbs.PD, typ verbs.MWType) *verbs.MW {
	t.Helper()
	mw, err := pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// bind1 binds a type 1 window through qp and waits for the completion on cq.
func bind1(t *testing.T, qp *verbs.QP, cq *verbs.CQ, mw *verbs.MW, info verbs.MWBindInfo) verbs.WC {
	t.Helper()
	if err := qp.BindMW(mw, verbs.MWBind{WRID: 77, Flags: verbs.SendSignaled, BindInfo: info}); err != nil {
		t.Fatal(err)
	}
	return poll(t, cq)
}

// bind2 binds a type 2 window by an IBV_WR_BIND_MW work request on qp with
// the new rkey rkey, and waits for the completion on cq.
func bind2(t *testing.T, qp *verbs.QP, cq *verbs.CQ, mw *verbs.MW, rkey uint32, info verbs.MWBindInfo) verbs.WC {
	t.Helper()
	mustPostSend(t, qp, verbs.SendWR{WRID: 78, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw, RKey: rkey, BindInfo: info})
	return poll(t, cq)
}

func wantBound(t *testing.T, wc verbs.WC) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCBindMW {
		t.Fatalf("bind completion %v; want IBV_WC_SUCCESS IBV_WC_BIND_MW", &wc)
	}
}

// write WRITEs n bytes of A's data at window offset off through rkey and
// returns A's completion.
func (e *mwEnv) write(t *testing.T, wrid uint64, rkey uint32, addr uint64, n int) verbs.WC {
	t.Helper()
	mustPostSend(t, e.p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: sgl(e.src, n), RemoteAddr: addr, RKey: rkey})
	return poll(t, e.p.A.CQ)
}

// wantRemAccess checks a refused access: IBV_WC_REM_ACCESS_ERR at A, the
// responder in ERR, and B's region untouched.
func (e *mwEnv) wantRemAccess(t *testing.T, wc verbs.WC, wrid uint64, pieces ...piece) {
	t.Helper()
	want(t, wc, verbs.WCRemAccessErr, wrid)
	waitEvent(t, e.p.B.Dev, verbs.EventQPAccessErr, e.p.B.QP.Num())
	e.target.check(t, pieces...)
}

// TestMWWriteRead: RDMA WRITE and READ through a bound type 1 and a bound
// type 2 window (a zero-based one too) of a region that grants no remote
// access itself, the window's rkey carrying the consumer's key byte.
func TestMWWriteRead(t *testing.T) {
	for _, c := range []struct {
		name      string
		typ       verbs.MWType
		zeroBased bool
	}{{"type1", verbs.MWType1, false}, {"type2", verbs.MWType2, false}, {"type2-zero-based", verbs.MWType2, true}} {
		t.Run(c.name, func(t *testing.T) {
			e := newMWEnv(t, mwBindAccess)
			mw := allocMW(t, e.p.B.PD, c.typ)
			old := mw.RKey()
			access := verbs.AccessRemoteWrite | verbs.AccessRemoteRead
			var rkey uint32
			if c.typ == verbs.MWType1 {
				wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(access)))
				rkey = mw.RKey()
				if rkey != verbs.IncRKey(old) {
					t.Fatalf("rkey after ibv_bind_mw %#x, want %#x (the key byte incremented)", rkey, verbs.IncRKey(old))
				}
			} else {
				if c.zeroBased {
					access |= verbs.AccessZeroBased
				}
				rkey = old&^0xff | (old+0x5A)&0xff // the consumer's key
				wantBound(t, bind2(t, e.p.B.QP, e.p.B.CQ, mw, rkey, e.info(access)))
				if mw.RKey() != rkey {
					t.Fatalf("MW.RKey %#x after the bind, want %#x", mw.RKey(), rkey)
				}
			}
			base := e.target.addr(mwOff)
			if c.zeroBased {
				base = 0
			}
			if wc := e.write(t, 1, rkey, base+100, 1000); wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE through the window: %v", &wc)
			}
			e.target.check(t, piece{mwOff + 100, e.data[:1000]})
			mustPostSend(t, e.p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{e.dst.mr.SGE(0, 1000)}, RemoteAddr: base + 100, RKey: rkey})
			wantOK(t, e.p.A.CQ, 2, verbs.WCRDMARead)
			e.dst.check(t, piece{0, e.data[:1000]})
			// The key byte of the allocation no longer names the window.
			e.wantRemAccess(t, e.write(t, 3, old, base, 8), 3, piece{mwOff + 100, e.data[:1000]})
		})
	}
}

// TestMWAccessChecks: what a bound window refuses — a range beyond the
// window though inside its region, an access it does not grant — with the
// remote access error and no byte written.
func TestMWAccessChecks(t *testing.T) {
	for _, c := range []struct {
		name   string
		access verbs.Access
		wr     func(e *mwEnv, rkey uint32) verbs.SendWR
	}{
		{"write-past-window-end", verbs.AccessRemoteWrite, func(e *mwEnv, rkey uint32) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(e.src, 100), RemoteAddr: e.target.addr(mwOff + mwLen - 99), RKey: rkey}
		}},
		{"write-below-window", verbs.AccessRemoteWrite, func(e *mwEnv, rkey uint32) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(e.src, 100), RemoteAddr: e.target.addr(mwOff - 1), RKey: rkey}
		}},
		{"write-read-only-window", verbs.AccessRemoteRead, func(e *mwEnv, rkey uint32) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(e.src, 100), RemoteAddr: e.target.addr(mwOff), RKey: rkey}
		}},
		{"read-write-only-window", verbs.AccessRemoteWrite, func(e *mwEnv, rkey uint32) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{e.dst.mr.SGE(0, 100)}, RemoteAddr: e.target.addr(mwOff), RKey: rkey}
		}},
		{"atomic-write-only-window", verbs.AccessRemoteWrite, func(e *mwEnv, rkey uint32) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{e.dst.mr.SGE(0, 8)}, RemoteAddr: e.target.addr(mwOff), RKey: rkey, CompareAdd: 1}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newMWEnv(t, mwBindAccess)
			mw := allocMW(t, e.p.B.PD, verbs.MWType1)
			wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(c.access)))
			wr := c.wr(e, mw.RKey())
			wr.WRID, wr.Flags = 1, verbs.SendSignaled
			mustPostSend(t, e.p.A.QP, wr)
			e.wantRemAccess(t, poll(t, e.p.A.CQ), 1)
		})
	}
}

// TestMWRevoked: a WRITE through a window's rkey after LOCAL_INV, after a
// peer's SEND_WITH_INVALIDATE, after ibv_dealloc_mw, and before any bind:
// IBV_WC_REM_ACCESS_ERR and the region unchanged; each revocation works
// (the same WRITE succeeded before it).
func TestMWRevoked(t *testing.T) {
	access := verbs.AccessRemoteWrite
	for _, c := range []struct {
		name   string
		typ    verbs.MWType
		bind   bool
		revoke func(t *testing.T, e *mwEnv, mw *verbs.MW)
	}{
		{"local-inv", verbs.MWType2, true, func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			mustPostSend(t, e.p.B.QP, verbs.SendWR{WRID: 9, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mw.RKey()})
			wantOK(t, e.p.B.CQ, 9, verbs.WCLocalInv)
		}},
		{"remote-inv", verbs.MWType2, true, func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			rbuf := newCanary(t, e.p.B.PD, 64, verbs.AccessLocalWrite)
			mustPostRecv(t, e.p.B.QP, verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{rbuf.mr.SGE(0, 64)}})
			mustPostSend(t, e.p.A.QP, verbs.SendWR{WRID: 9, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
				SGList: sgl(e.src, 10), InvalidateRKey: mw.RKey()})
			wantOK(t, e.p.A.CQ, 9, verbs.WCSend)
			rwc := wantOK(t, e.p.B.RCQ, 9, verbs.WCRecv)
			if rwc.Flags&verbs.WCWithInv == 0 || rwc.ImmData != mw.RKey() {
				t.Fatalf("receive %v flags %#x invalidated rkey %#x; want IBV_WC_WITH_INV and %#x", &rwc, rwc.Flags, rwc.ImmData, mw.RKey())
			}
		}},
		{"dealloc-type1", verbs.MWType1, true, func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
		}},
		{"dealloc-type2", verbs.MWType2, true, func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			if err := mw.Dealloc(); err != nil {
				t.Fatal(err)
			}
		}},
		{"unbind-type1", verbs.MWType1, true, func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, verbs.MWBindInfo{}))
		}},
		{"before-bind-type1", verbs.MWType1, false, nil},
		{"before-bind-type2", verbs.MWType2, false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newMWEnv(t, mwBindAccess)
			mw := allocMW(t, e.p.B.PD, c.typ)
			var written []piece
			if c.bind {
				if c.typ == verbs.MWType1 {
					wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(access)))
				} else {
					wantBound(t, bind2(t, e.p.B.QP, e.p.B.CQ, mw, verbs.IncRKey(mw.RKey()), e.info(access)))
				}
				if wc := e.write(t, 1, mw.RKey(), e.target.addr(mwOff), 8); wc.Status != verbs.WCSuccess {
					t.Fatalf("WRITE before the revocation: %v", &wc)
				}
				written = append(written, piece{mwOff, e.data[:8]})
				e.target.check(t, written...)
				c.revoke(t, e, mw)
			}
			e.wantRemAccess(t, e.write(t, 2, mw.RKey(), e.target.addr(mwOff+8), 500), 2, written...)
		})
	}
}

// TestMWBindErrors: binds rxe refuses, each completing with
// IBV_WC_MW_BIND_ERR (rxe_check_bind_mw's EINVAL, which rxe_do_local_ops
// reports so) and the binding QP leaving RTS; the window grants nothing.
func TestMWBindErrors(t *testing.T) {
	rw := verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	for _, c := range []struct {
		name         string
		typ          verbs.MWType
		regionAccess verbs.Access
		info         func(e *mwEnv) verbs.MWBindInfo
		before       func(t *testing.T, e *mwEnv, mw *verbs.MW) // a first bind, for "twice"
		otherPD      bool                                       // bind from a QP of another PD
	}{
		{name: "outside-region/type1", typ: verbs.MWType1, info: func(e *mwEnv) verbs.MWBindInfo {
			return verbs.MWBindInfo{MR: e.target.mr, Addr: e.target.addr(mwRegion - 100), Length: 101, Access: rw}
		}},
		{name: "outside-region/type2", typ: verbs.MWType2, info: func(e *mwEnv) verbs.MWBindInfo {
			return verbs.MWBindInfo{MR: e.target.mr, Addr: e.target.addr(0) - 1, Length: 100, Access: rw}
		}},
		{name: "no-mw-bind/type1", typ: verbs.MWType1, regionAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead},
		{name: "no-mw-bind/type2", typ: verbs.MWType2, regionAccess: verbs.AccessLocalWrite},
		{name: "remote-write-no-local-write/type1", typ: verbs.MWType1, regionAccess: verbs.AccessMWBind | verbs.AccessRemoteRead},
		{name: "remote-atomic-no-local-write/type2", typ: verbs.MWType2, regionAccess: verbs.AccessMWBind, info: func(e *mwEnv) verbs.MWBindInfo {
			return e.info(verbs.AccessRemoteAtomic)
		}},
		{name: "zero-based/type1", typ: verbs.MWType1, info: func(e *mwEnv) verbs.MWBindInfo {
			return e.info(verbs.AccessRemoteRead | verbs.AccessZeroBased)
		}},
		{name: "bound-twice/type2", typ: verbs.MWType2, before: func(t *testing.T, e *mwEnv, mw *verbs.MW) {
			wantBound(t, bind2(t, e.p.B.QP, e.p.B.CQ, mw, verbs.IncRKey(mw.RKey()), e.info(rw)))
		}},
		{name: "other-pd/type2", typ: verbs.MWType2, otherPD: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ra := c.regionAccess
			if ra == 0 {
				ra = mwBindAccess
			}
			e := newMWEnv(t, ra)
			mw := allocMW(t, e.p.B.PD, c.typ)
			info := e.info(rw)
			if c.info != nil {
				info = c.info(e)
			}
			if c.before != nil {
				c.before(t, e, mw)
			}
			qp, cq := e.p.B.QP, e.p.B.CQ
			if c.otherPD {
				pd2, err := e.p.B.Dev.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				cq, err = e.p.B.Dev.CreateCQ(16)
				if err != nil {
					t.Fatal(err)
				}
				if qp, err = pd2.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
					t.Fatal(err)
				}
				if err := verbstest.ConnectQP(qp, e.p.A.QP.Num(), e.p.A.GID.GID, e.p.B.GIDIndex, e.p.Opts); err != nil {
					t.Fatal(err)
				}
			}
			rkey := mw.RKey()
			// The zero-based type 1 case goes through the send queue:
			// ibv_bind_mw refuses it before (TestMWBindMWPostChecks),
			// and the device refuses it too.
			if c.typ == verbs.MWType2 || info.Access&verbs.AccessZeroBased != 0 {
				mustPostSend(t, qp, verbs.SendWR{WRID: 5, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw,
					RKey: verbs.IncRKey(rkey), BindInfo: info})
			} else if err := qp.BindMW(mw, verbs.MWBind{WRID: 5, Flags: verbs.SendSignaled, BindInfo: info}); err != nil {
				t.Fatal(err)
			}
			wc := poll(t, cq)
			want(t, wc, verbs.WCMWBindErr, 5)
			if wc.Opcode != verbs.WCBindMW || wc.Detail == "" {
				t.Errorf("completion %v: want opcode IBV_WC_BIND_MW and a Detail", &wc)
			}
			if s := qp.State(); s != verbs.QPSErr {
				t.Errorf("binding QP in %v after IBV_WC_MW_BIND_ERR, want ERR", s)
			}
			noEvent(t, e.p.B.Dev, verbs.EventQPFatal) // rxe reports none: the completion is the report
			// The window is not usable with the rkey the failed bind
			// announced (on a fresh connection: B's QP may be in ERR).
			a, _ := freshRC(t, e.p)
			mustPostSend(t, a.qp, verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: sgl(e.src, 100), RemoteAddr: info.Addr, RKey: verbs.IncRKey(rkey)})
			want(t, poll(t, a.cq), verbs.WCRemAccessErr, 6)
			e.target.check(t)
		})
	}
}

// TestMWType2OtherQP: a type 2 window bound through one QP is usable only
// by that QP's peer (rxe_lookup_mw: mw->qp != qp): the same WRITE through
// another connection between the same devices and PDs is refused.
func TestMWType2OtherQP(t *testing.T) {
	e := newMWEnv(t, mwBindAccess)
	a, b := freshRC(t, e.p)
	mw := allocMW(t, e.p.B.PD, verbs.MWType2)
	wantBound(t, bind2(t, b.qp, b.cq, mw, verbs.IncRKey(mw.RKey()), e.info(verbs.AccessRemoteWrite)))
	mustPostSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: sgl(e.src, 16), RemoteAddr: e.target.addr(mwOff), RKey: mw.RKey()})
	wantOK(t, a.cq, 1, verbs.WCRDMAWrite) // through the QP it was bound to
	written := piece{mwOff, e.data[:16]}
	e.target.check(t, written)
	e.wantRemAccess(t, e.write(t, 2, mw.RKey(), e.target.addr(mwOff+100), 500), 2, written)
}

// TestMWInvalidateType1: a type 1 window may be invalidated neither by a
// peer's SEND_WITH_INVALIDATE (rxe_check_invalidate_mw, o10-37.2.26:
// IBV_WC_REM_INV_REQ_ERR at both ends, as for a user MR) nor by LOCAL_INV
// (IBV_WC_LOC_QP_OP_ERR, as rxe_do_local_ops reports it); it stays bound.
func TestMWInvalidateType1(t *testing.T) {
	t.Run("send-with-inv", func(t *testing.T) {
		e := newMWEnv(t, mwBindAccess)
		mw := allocMW(t, e.p.B.PD, verbs.MWType1)
		wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(verbs.AccessRemoteWrite)))
		rbuf := newCanary(t, e.p.B.PD, 64, verbs.AccessLocalWrite)
		mustPostRecv(t, e.p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{rbuf.mr.SGE(0, 64)}})
		mustPostSend(t, e.p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
			SGList: sgl(e.src, 10), InvalidateRKey: mw.RKey()})
		wantInvRefused(t, e.p, 2, mw.RKey())
		// Still bound: a WRITE through it works on a new connection.
		a, _ := freshRC(t, e.p)
		mustPostSend(t, a.qp, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(e.src, 100), RemoteAddr: e.target.addr(mwOff), RKey: mw.RKey()})
		wantOK(t, a.cq, 3, verbs.WCRDMAWrite)
		e.target.check(t, piece{mwOff, e.data[:100]})
	})
	t.Run("local-inv", func(t *testing.T) {
		e := newMWEnv(t, mwBindAccess)
		mw := allocMW(t, e.p.B.PD, verbs.MWType1)
		wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(verbs.AccessRemoteWrite)))
		mustPostSend(t, e.p.B.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mw.RKey()})
		wc := poll(t, e.p.B.CQ)
		want(t, wc, verbs.WCLocQPOpErr, 4)
		if wc.Opcode != verbs.WCLocalInv {
			t.Errorf("completion %v: want opcode IBV_WC_LOCAL_INV", &wc)
		}
		if wc := e.write(t, 5, mw.RKey(), e.target.addr(mwOff), 100); wc.Status == verbs.WCRemAccessErr {
			t.Fatalf("WRITE after a refused LOCAL_INV of a type 1 window: %v (the window must stay bound)", &wc)
		}
	})
}

// TestMWBindMWPostChecks: what ibv_bind_mw refuses before posting
// (libibverbs' and the rxe provider's checks): a type 2 window, a length
// without an MR, a zero-based type 1 window (EINVAL), an MR of another PD
// (EPERM); and IBV_WR_BIND_MW without a window, or on a UD QP.
func TestMWBindMWPostChecks(t *testing.T) {
	e := newMWEnv(t, mwBindAccess)
	mw1 := allocMW(t, e.p.B.PD, verbs.MWType1)
	mw2 := allocMW(t, e.p.B.PD, verbs.MWType2)
	pd2, err := e.p.B.Dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pd2.RegMR(make([]byte, 64), mwBindAccess)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		mw    *verbs.MW
		info  verbs.MWBindInfo
		errno syscall.Errno
	}{
		{"type2", mw2, e.info(verbs.AccessRemoteRead), syscall.EINVAL},
		{"length-without-mr", mw1, verbs.MWBindInfo{Length: 10, Access: verbs.AccessRemoteRead}, syscall.EINVAL},
		{"zero-based", mw1, e.info(verbs.AccessRemoteRead | verbs.AccessZeroBased), syscall.EINVAL},
		{"mr-of-other-pd", mw1, verbs.MWBindInfo{MR: other, Addr: other.Addr(), Length: 64, Access: verbs.AccessRemoteRead}, syscall.EPERM},
	} {
		rkey := c.mw.RKey()
		err := e.p.B.QP.BindMW(c.mw, verbs.MWBind{WRID: 1, BindInfo: c.info})
		var ve *verbs.Error
		if !errors.Is(err, c.errno) || !errors.As(err, &ve) || ve.Op != "bind_mw" || ve.Detail == "" {
			t.Errorf("%s: BindMW = %v; want a bind_mw *verbs.Error with %v and a Detail", c.name, err, c.errno)
		}
		if c.mw.RKey() != rkey {
			t.Errorf("%s: a refused BindMW changed the rkey %#x to %#x", c.name, rkey, c.mw.RKey())
		}
	}
	if err := e.p.B.QP.PostSend(verbs.SendWR{Opcode: verbs.WRBindMW, RKey: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("IBV_WR_BIND_MW without a window: %v, want EINVAL", err)
	}
	if s := e.p.B.QP.State(); s != verbs.QPSRTS {
		t.Errorf("QP in %v after refused posts, want RTS", s)
	}
	ud := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD})
	mwUD := allocMW(t, ud.A.PD, verbs.MWType2)
	for _, op := range []verbs.WROpcode{verbs.WRBindMW, verbs.WRLocalInv} {
		if err := ud.A.QP.PostSend(verbs.SendWR{Opcode: op, MW: mwUD, RKey: 1}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v on a UD QP: %v, want EINVAL", op, err)
		}
	}
}

// TestMWDeregBoundRegion: a region with a window bound to it is not
// deregistered (rxe_dereg_mr: EINVAL while num_mw > 0); once the window is
// deallocated it is.
func TestMWDeregBoundRegion(t *testing.T) {
	e := newMWEnv(t, mwBindAccess)
	mw := allocMW(t, e.p.B.PD, verbs.MWType1)
	wantBound(t, bind1(t, e.p.B.QP, e.p.B.CQ, mw, e.info(verbs.AccessRemoteWrite)))
	if err := e.target.mr.Dereg(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Dereg of a region with a bound window: %v, want EINVAL", err)
	}
	if wc := e.write(t, 1, mw.RKey(), e.target.addr(mwOff), 8); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE after the refused Dereg: %v", &wc)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := e.target.mr.Dereg(); err != nil {
		t.Fatalf("Dereg after the window's Dealloc: %v", err)
	}
}

// TestMWKeys: a window's rkey has a random key byte, as rxe_alloc_mw draws
// it (not one that counts up), and its index names neither an MR nor
// another window; max_mw is rxe's.
func TestMWKeys(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	mr := source(t, p.A.PD, make([]byte, 64))
	seen := map[uint32]bool{mr.RKey() >> 8: true}
	keys := map[uint8]bool{}
	var prev uint32
	sequential := 0
	for i := range 64 {
		mw := allocMW(t, p.A.PD, verbs.MWType(1+i%2))
		k := mw.RKey()
		if seen[k>>8] {
			t.Fatalf("window rkey %#x reuses an index in use", k)
		}
		seen[k>>8] = true
		keys[uint8(k)] = true
		if i > 0 && uint8(k) == uint8(prev)+1 {
			sequential++
		}
		prev = k
	}
	if len(keys) < 16 || sequential > 8 {
		t.Errorf("64 windows' key bytes: %d distinct, %d counting up: want random bytes", len(keys), sequential)
	}
	if got := p.A.Dev.Query().MaxMW; got != 524287 {
		t.Errorf("max_mw %d, want rxe's 524287", got)
	}
	if _, err := p.A.PD.AllocMW(3); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AllocMW(3): %v, want EINVAL", err)
	}
}

// TestMWBadInput: issue 19's bad input on every network verbstest runs
// (the fabric's; the veth pair's under TestOverVeth): a WRITE through an
// unbound window's rkey, through a locally and a remotely invalidated
// one's, through a type 2 window bound to another QP, and a bind outside
// the region: each refused as rxe refuses it, and no byte written.
func TestMWBadInput(t *testing.T) {
	access := verbs.AccessRemoteWrite
	for _, net := range verbstest.Networks {
		t.Run(net+"/unbound", func(t *testing.T) {
			e := newMWEnvOn(t, net, mwBindAccess)
			mw := allocMW(t, e.p.B.PD, verbs.MWType2)
			e.wantRemAccess(t, e.write(t, 1, mw.RKey(), e.target.addr(mwOff), 1000), 1)
		})
		for _, remote := range []bool{false, true} {
			name := "/local-inv"
			if remote {
				name = "/remote-inv"
			}
			t.Run(net+name, func(t *testing.T) {
				e := newMWEnvOn(t, net, mwBindAccess)
				mw := allocMW(t, e.p.B.PD, verbs.MWType2)
				wantBound(t, bind2(t, e.p.B.QP, e.p.B.CQ, mw, verbs.IncRKey(mw.RKey()), e.info(access)))
				if wc := e.write(t, 1, mw.RKey(), e.target.addr(mwOff), 8); wc.Status != verbs.WCSuccess {
					t.Fatalf("WRITE through the bound window: %v", &wc)
				}
				written := piece{mwOff, e.data[:8]}
				if remote {
					rbuf := newCanary(t, e.p.B.PD, 64, verbs.AccessLocalWrite)
					mustPostRecv(t, e.p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{rbuf.mr.SGE(0, 64)}})
					mustPostSend(t, e.p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
						SGList: sgl(e.src, 10), InvalidateRKey: mw.RKey()})
					wantOK(t, e.p.A.CQ, 2, verbs.WCSend)
					wantOK(t, e.p.B.RCQ, 2, verbs.WCRecv)
				} else {
					mustPostSend(t, e.p.B.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvalidateRKey: mw.RKey()})
					wantOK(t, e.p.B.CQ, 2, verbs.WCLocalInv)
				}
				e.wantRemAccess(t, e.write(t, 3, mw.RKey(), e.target.addr(mwOff+8), 2000), 3, written)
			})
		}
		t.Run(net+"/type2-other-qp", func(t *testing.T) {
			e := newMWEnvOn(t, net, mwBindAccess)
			_, b := freshRC(t, e.p)
			mw := allocMW(t, e.p.B.PD, verbs.MWType2)
			wantBound(t, bind2(t, b.qp, b.cq, mw, verbs.IncRKey(mw.RKey()), e.info(access)))
			e.wantRemAccess(t, e.write(t, 1, mw.RKey(), e.target.addr(mwOff), 1000), 1)
		})
		t.Run(net+"/outside-region", func(t *testing.T) {
			e := newMWEnvOn(t, net, mwBindAccess)
			mw := allocMW(t, e.p.B.PD, verbs.MWType2)
			info := verbs.MWBindInfo{MR: e.target.mr, Addr: e.target.addr(mwRegion - 8), Length: 16, Access: access}
			want(t, bind2(t, e.p.B.QP, e.p.B.CQ, mw, verbs.IncRKey(mw.RKey()), info), verbs.WCMWBindErr, 78)
			a, _ := freshRC(t, e.p)
			mustPostSend(t, a.qp, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: sgl(e.src, 16), RemoteAddr: info.Addr, RKey: mw.RKey()})
			want(t, poll(t, a.cq), verbs.WCRemAccessErr, 4)
			e.target.check(t)
		})
	}
}

// TestMWBindInSendQueueOrder: a bind posted behind a SEND in one
// ibv_post_send takes effect after it and completes after it, in order,
// on RC (the SEND waits for its ACK) and on UC.
func TestMWBindInSendQueueOrder(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC} {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ})
			target := newCanary(t, p.B.PD, mwRegion, mwBindAccess)
			src := source(t, p.B.PD, randBytes(64, 3))
			rbuf := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
			mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rbuf.mr.SGE(0, 64)}})
			mw := allocMW(t, p.B.PD, verbs.MWType2)
			rkey := verbs.IncRKey(mw.RKey())
			mustPostSend(t, p.B.QP,
				verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 64)},
				verbs.SendWR{WRID: 11, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled, MW: mw, RKey: rkey,
					BindInfo: verbs.MWBindInfo{MR: target.mr, Addr: target.addr(0), Length: 64, Access: verbs.AccessRemoteWrite}})
			wantOK(t, p.B.CQ, 10, verbs.WCSend)
			wantOK(t, p.B.CQ, 11, verbs.WCBindMW)
			wantOK(t, p.A.RCQ, 1, verbs.WCRecv)
			data := randBytes(32, 4)
			asrc := source(t, p.A.PD, data)
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: sgl(asrc, 32), RemoteAddr: target.addr(16), RKey: rkey})
			wantOK(t, p.A.CQ, 2, verbs.WCRDMAWrite)
			if typ == verbs.UC {
				// UC completes at send time; the responder's write is
				// seen once the device has handled it.
				deadline := time.Now().Add(pollTimeout)
				for arrived := false; !arrived && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
					p.B.Dev.Observe(func() { arrived = bytes.Equal(target.region()[16:48], data) })
				}
			}
			target.check(t, piece{16, data})
		})
	}
}
