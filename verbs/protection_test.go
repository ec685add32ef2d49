package verbs_test

// Memory protection: every remote and local key, bounds and access check,
// with proof that no byte outside the target (and, for a refused request,
// no byte at all) changed, and the error flush that follows.

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

const regionLen = 4096

// protEnv is what a protection case's work request is built from.
type protEnv struct {
	p      *verbstest.Pair
	remote *canary   // B's target region (regionLen bytes)
	local  *canary   // A's READ/atomic target (regionLen bytes, LOCAL_WRITE)
	src    *verbs.MR // A's source data (regionLen bytes)
	data   []byte    // the source data
	pd     *verbs.PD // the PD the remote region is in
	rkey   uint32    // the rkey the case uses (for the Detail check)
}

type remoteCase struct {
	name     string
	mrAccess verbs.Access // B's region; 0 = every right
	qpAccess verbs.Access // B's qp_access_flags; 0 = every right
	otherPD  bool         // register B's region in a second PD
	dereg    bool         // deregister B's region before the request
	wr       func(e *protEnv) verbs.SendWR
	status   verbs.WCStatus
	event    verbs.EventType
}

func writeWR(addr func(e *protEnv) uint64, n int) func(e *protEnv) verbs.SendWR {
	return func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(e.src, n), RemoteAddr: addr(e), RKey: e.rkey}
	}
}

func readWR(addr func(e *protEnv) uint64, n int) func(e *protEnv) verbs.SendWR {
	return func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{e.local.mr.SGE(0, n)}, RemoteAddr: addr(e), RKey: e.rkey}
	}
}

func atomicWR(op verbs.WROpcode, addr func(e *protEnv) uint64) func(e *protEnv) verbs.SendWR {
	return func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: op, SGList: []verbs.SGE{e.local.mr.SGE(8, 8)}, RemoteAddr: addr(e), RKey: e.rkey,
			CompareAdd: 1, Swap: 2}
	}
}

func at(off int) func(e *protEnv) uint64 {
	return func(e *protEnv) uint64 { return e.remote.addr(0) + uint64(off) }
}

var (
	noRemoteWrite  = verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	noRemoteRead   = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	noRemoteAtomic = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
)

var remoteCases = []remoteCase{
	{name: "write/wrong-rkey", wr: func(e *protEnv) verbs.SendWR {
		e.rkey ^= 1 // another key of the same index (the low 8 bits are random)
		return writeWR(at(0), 100)(e)
	}},
	{name: "write/unknown-rkey", wr: func(e *protEnv) verbs.SendWR {
		e.rkey = 0xDEADBE00
		return writeWR(at(0), 100)(e)
	}},
	{name: "write/one-byte-past-end", wr: writeWR(at(regionLen-100+1), 100)},
	{name: "write/below-start", wr: writeWR(at(-1), 100)},
	{name: "write/far-below-start", wr: writeWR(at(-canaryGuard), 100)},
	{name: "write/multi-packet-past-end", wr: writeWR(at(regionLen-3000+1), 3000)},
	{name: "write/mr-without-REMOTE_WRITE", mrAccess: noRemoteWrite, wr: writeWR(at(0), 100)},
	{name: "write/qp-without-REMOTE_WRITE", qpAccess: noRemoteWrite, wr: writeWR(at(0), 100)},
	{name: "write/mr-of-another-pd", otherPD: true, wr: writeWR(at(0), 100)},
	{name: "write/deregistered-mr", dereg: true, wr: writeWR(at(0), 100)},
	{name: "write_with_imm/one-byte-past-end", wr: func(e *protEnv) verbs.SendWR {
		w := writeWR(at(regionLen-10+1), 10)(e)
		w.Opcode, w.ImmData = verbs.WRRDMAWriteWithImm, 7
		return w
	}},
	{name: "read/wrong-rkey", wr: func(e *protEnv) verbs.SendWR {
		e.rkey ^= 1
		return readWR(at(0), 100)(e)
	}},
	{name: "read/one-byte-past-end", wr: readWR(at(regionLen-100+1), 100)},
	{name: "read/below-start", wr: readWR(at(-1), 100)},
	{name: "read/multi-packet-past-end", wr: readWR(at(regionLen-3000+1), 3000)},
	{name: "read/mr-without-REMOTE_READ", mrAccess: noRemoteRead, wr: readWR(at(0), 100)},
	{name: "read/qp-without-REMOTE_READ", qpAccess: noRemoteRead, wr: readWR(at(0), 100)},
	{name: "read/mr-of-another-pd", otherPD: true, wr: readWR(at(0), 100)},
	{name: "read/deregistered-mr", dereg: true, wr: readWR(at(0), 100)},
	{name: "cmp_swp/mr-without-REMOTE_ATOMIC", mrAccess: noRemoteAtomic, wr: atomicWR(verbs.WRAtomicCmpAndSwp, at(8))},
	{name: "fetch_add/mr-without-REMOTE_ATOMIC", mrAccess: noRemoteAtomic, wr: atomicWR(verbs.WRAtomicFetchAndAdd, at(8))},
	{name: "fetch_add/qp-without-REMOTE_ATOMIC", qpAccess: noRemoteAtomic, wr: atomicWR(verbs.WRAtomicFetchAndAdd, at(8))},
	{name: "cmp_swp/past-end", wr: atomicWR(verbs.WRAtomicCmpAndSwp, at(regionLen))},
	{name: "fetch_add/below-start", wr: atomicWR(verbs.WRAtomicFetchAndAdd, at(-8))},
	{name: "fetch_add/wrong-rkey", wr: func(e *protEnv) verbs.SendWR {
		e.rkey ^= 1
		return atomicWR(verbs.WRAtomicFetchAndAdd, at(8))(e)
	}},
	{name: "fetch_add/mr-of-another-pd", otherPD: true, wr: atomicWR(verbs.WRAtomicFetchAndAdd, at(8))},
	{name: "cmp_swp/misaligned", wr: atomicWR(verbs.WRAtomicCmpAndSwp, at(4)), status: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr},
	{name: "fetch_add/misaligned", wr: atomicWR(verbs.WRAtomicFetchAndAdd, at(9)), status: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr},
	{name: "atomic_write/mr-without-REMOTE_WRITE", mrAccess: noRemoteWrite, wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: sgl(e.src, 8), RemoteAddr: at(8)(e), RKey: e.rkey}
	}},
	{name: "atomic_write/past-end", wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: sgl(e.src, 8), RemoteAddr: at(regionLen)(e), RKey: e.rkey}
	}},
	{name: "atomic_write/misaligned", wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: sgl(e.src, 8), RemoteAddr: at(12)(e), RKey: e.rkey}
	}, status: verbs.WCRemInvReqErr, event: verbs.EventQPReqErr},
	{name: "flush/mr-without-FLUSH_PERSISTENT", mrAccess: allRemote &^ verbs.AccessFlushPersistent, wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRFlush, SGList: []verbs.SGE{{Length: 64}}, RemoteAddr: at(0)(e), RKey: e.rkey,
			FlushSel: wire.FlushSelMRRange, FlushPlacement: wire.FlushPersistence}
	}},
	{name: "flush/mr-without-FLUSH_GLOBAL", mrAccess: allRemote &^ verbs.AccessFlushGlobal, wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRFlush, SGList: []verbs.SGE{{Length: 64}}, RemoteAddr: at(0)(e), RKey: e.rkey,
			FlushSel: wire.FlushSelWholeMR, FlushPlacement: wire.FlushGlobalVisibility}
	}},
	{name: "flush/range-past-end", wr: func(e *protEnv) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.WRFlush, SGList: []verbs.SGE{{Length: 64}}, RemoteAddr: at(regionLen - 63)(e), RKey: e.rkey,
			FlushSel: wire.FlushSelMRRange, FlushPlacement: wire.FlushGlobalVisibility}
	}},
}

// TestRemoteProtection: a refused request completes with
// IBV_WC_REM_ACCESS_ERR (or REM_INV_REQ_ERR for a misaligned atomic), the
// requester QP goes to ERR and flushes everything else outstanding, the
// responder reports IBV_EVENT_QP_ACCESS_ERR (QP_REQ_ERR) and goes to ERR,
// and no byte of either side's memory changes.
func TestRemoteProtection(t *testing.T) {
	for _, c := range remoteCases {
		t.Run(c.name, func(t *testing.T) {
			if c.status == 0 {
				c.status, c.event = verbs.WCRemAccessErr, verbs.EventQPAccessErr
			}
			qpAccess := c.qpAccess
			p := verbstest.NewPair(t, verbstest.Options{QPAccess: qpAccess})
			e := &protEnv{p: p, pd: p.B.PD}
			if c.otherPD {
				pd2, err := p.B.Dev.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				e.pd = pd2
			}
			acc := c.mrAccess
			if acc == 0 {
				acc = allRemote
			}
			e.remote = newCanary(t, e.pd, regionLen, acc)
			rdata := e.remote.set(0, randBytes(regionLen, 1))
			e.local = newCanary(t, p.A.PD, regionLen, verbs.AccessLocalWrite)
			e.data = randBytes(regionLen, 2)
			e.src = source(t, p.A.PD, e.data)
			e.rkey = e.remote.mr.RKey()
			if c.dereg {
				if err := e.remote.mr.Dereg(); err != nil {
					t.Fatal(err)
				}
			}
			// A region the WRs behind the bad one may legitimately write:
			// they must be flushed, so it must stay untouched too.
			ok := newCanary(t, p.B.PD, 256, allRemote)
			bRecv0 := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite)
			bRecv := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 49, SGList: []verbs.SGE{bRecv0.mr.SGE(0, 64)}},
				verbs.RecvWR{WRID: 50, SGList: []verbs.SGE{bRecv.mr.SGE(0, 256)}})
			mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 60})

			bad := c.wr(e)
			bad.WRID, bad.Flags = 1, bad.Flags|verbs.SendSignaled
			// A SEND before the bad WR succeeds (the NAK acknowledges it);
			// the WRs behind it are flushed.
			mustPostSend(t, p.A.QP,
				verbs.SendWR{WRID: 0, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(e.src, 16)},
				bad,
				verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(e.src, 100)},
				verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SGList: sgl(e.src, 100), RemoteAddr: ok.addr(100), RKey: ok.mr.RKey()}, // unsignaled
			)
			wantOK(t, p.A.CQ, 0, verbs.WCSend)
			wantOK(t, p.B.RCQ, 49, verbs.WCRecv)
			wc := poll(t, p.A.CQ)
			want(t, wc, c.status, 1)
			if wc.Detail == "" {
				t.Errorf("%v without a Detail", wc.Status)
			}
			if c.status == verbs.WCRemAccessErr {
				wantDetail(t, wc, fmt.Sprintf("%#x", e.rkey))
			}
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 2)
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 3)
			want(t, poll(t, p.A.RCQ), verbs.WCWRFlushErr, 60)
			if s := p.A.QP.State(); s != verbs.QPSErr {
				t.Errorf("requester in %v, want ERR", s)
			}
			ev := waitEvent(t, p.B.Dev, c.event, p.B.QP.Num())
			if ev.Detail == "" {
				t.Errorf("event %v without a Detail", ev)
			}
			want(t, poll(t, p.B.RCQ), verbs.WCWRFlushErr, 50)
			if s := p.B.QP.State(); s != verbs.QPSErr {
				t.Errorf("responder in %v, want ERR", s)
			}

			// Posting in ERR completes at once with IBV_WC_WR_FLUSH_ERR.
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SGList: sgl(e.src, 10)})
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 4)
			mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 61})
			want(t, poll(t, p.A.RCQ), verbs.WCWRFlushErr, 61)
			wantEmpty(t, p.A.CQ)

			e.remote.check(t, rdata)
			e.local.check(t)
			ok.check(t)
			bRecv0.check(t, piece{0, e.data[:16]})
			bRecv.check(t)
		})
	}
}

// TestDeregisterAfterUse: a QP remembers the region each of its keys last
// named (the send queue's lkey, the receive queue's, a peer's rkey), and a
// deregistration ends that at once: the same key, used again after
// MR.Dereg, fails as a key never registered does, and no byte moves.
func TestDeregisterAfterUse(t *testing.T) {
	t.Run("rkey", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		data := randBytes(regionLen, 5)
		src := source(t, p.A.PD, data)
		remote := newCanary(t, p.B.PD, regionLen, allRemote)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, 100), RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()})
		wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
		if err := remote.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{src.SGE(100, 100)}, RemoteAddr: remote.addr(100), RKey: remote.mr.RKey()})
		want(t, poll(t, p.A.CQ), verbs.WCRemAccessErr, 2)
		remote.check(t, piece{0, data[:100]})
	})
	t.Run("send-lkey", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		data := randBytes(regionLen, 6)
		src := source(t, p.A.PD, data)
		dst := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 256)}},
			verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{dst.mr.SGE(0, 256)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		if err := src.Dereg(); err != nil {
			t.Fatal(err)
		}
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
		want(t, poll(t, p.A.CQ), verbs.WCLocProtErr, 2)
		wantEmpty(t, p.B.RCQ)
		dst.check(t, piece{0, data[:100]})
	})
	t.Run("recv-lkey", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		data := randBytes(regionLen, 7)
		src := source(t, p.A.PD, data)
		dst := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 100)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		if err := dst.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{dst.mr.SGE(100, 100)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{src.SGE(100, 100)}})
		want(t, poll(t, p.B.RCQ), verbs.WCLocProtErr, 2)
		want(t, poll(t, p.A.CQ), verbs.WCRemOpErr, 2)
		dst.check(t, piece{0, data[:100]})
	})
}

// TestZeroLengthNoKeyCheck: a zero-length RDMA WRITE or READ checks no
// rkey (IBTA §9.4.1.1, §9.4.3; rxe's check_rkey) and touches nothing.
func TestZeroLengthNoKeyCheck(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	remote := newCanary(t, p.B.PD, 64, allRemote)
	local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
	mustPostSend(t, p.A.QP,
		verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: 0x1000, RKey: 0xDEADBE00},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{local.mr.SGE(0, 0)},
			RemoteAddr: 0x1000, RKey: 0xDEADBE00})
	wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
	if wc := wantOK(t, p.A.CQ, 2, verbs.WCRDMARead); wc.ByteLen != 0 {
		t.Errorf("zero-length READ byte_len %d", wc.ByteLen)
	}
	remote.check(t)
	local.check(t)
}

// TestLocalProtection: a bad local key or range, or a local region
// without LOCAL_WRITE as a READ/atomic target, completes with
// IBV_WC_LOC_PROT_ERR; the QP goes to ERR and flushes the rest; the
// local target is untouched and the peer is unaffected.
func TestLocalProtection(t *testing.T) {
	cases := []struct {
		name string
		wr   func(src *verbs.MR, noWrite *canary, remote *canary) verbs.SendWR
	}{
		{"send/bad-lkey", func(src *verbs.MR, _, _ *canary) verbs.SendWR {
			s := src.SGE(0, 100)
			s.LKey ^= 1
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s}}
		}},
		{"send/sge-past-region", func(src *verbs.MR, _, _ *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{src.SGE(src.Len()-99, 100)}}
		}},
		{"send/second-sge-bad", func(src *verbs.MR, _, _ *canary) verbs.SendWR {
			s := src.SGE(100, 100)
			s.LKey = 0xDEADBE00
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{src.SGE(0, 100), s}}
		}},
		{"write/bad-lkey", func(src *verbs.MR, _, remote *canary) verbs.SendWR {
			s := src.SGE(0, 3000)
			s.LKey ^= 1
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{s}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()}
		}},
		{"read/target-without-LOCAL_WRITE", func(_ *verbs.MR, noWrite, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{noWrite.mr.SGE(0, 100)}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()}
		}},
		{"read/target-bad-lkey", func(_ *verbs.MR, noWrite, remote *canary) verbs.SendWR {
			s := noWrite.mr.SGE(0, 100)
			s.LKey = 0xDEADBE00
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{s}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()}
		}},
		{"fetch_add/result-without-LOCAL_WRITE", func(_ *verbs.MR, noWrite, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{noWrite.mr.SGE(8, 8)}, RemoteAddr: remote.addr(8),
				RKey: remote.mr.RKey(), CompareAdd: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			data := randBytes(regionLen, 3)
			src := source(t, p.A.PD, data)
			noWrite := newCanary(t, p.A.PD, 256, 0) // local read only
			remote := newCanary(t, p.B.PD, regionLen, allRemote)
			rdata := remote.set(0, randBytes(regionLen, 4))
			bRecv := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 50, SGList: []verbs.SGE{bRecv.mr.SGE(0, 256)}})
			bad := c.wr(src, noWrite, remote)
			bad.WRID, bad.Flags = 1, verbs.SendSignaled
			// The WR behind may have executed at the responder before a
			// READ/atomic response exposes the local error: it gets
			// WR_FLUSH_ERR either way; its target is not checked.
			maybe := newCanary(t, p.B.PD, 64, allRemote)
			mustPostSend(t, p.A.QP, bad,
				verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 10), RemoteAddr: maybe.addr(0), RKey: maybe.mr.RKey()})
			wc := poll(t, p.A.CQ)
			want(t, wc, verbs.WCLocProtErr, 1)
			if wc.Detail == "" {
				t.Error("IBV_WC_LOC_PROT_ERR without a Detail")
			}
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 2)
			if s := p.A.QP.State(); s != verbs.QPSErr {
				t.Errorf("QP in %v, want ERR", s)
			}
			noWrite.check(t)
			if bad.Opcode != verbs.WRAtomicFetchAndAdd { // the responder executed the atomic; that is allowed
				remote.check(t, rdata)
			}
			// The peer did not see a complete request: its receive is still posted.
			wantEmpty(t, p.B.RCQ)
			bRecv.check(t)
			if s := p.B.QP.State(); s != verbs.QPSRTS {
				t.Errorf("peer QP in %v, want RTS", s)
			}
		})
	}
}

// TestReceiveProtection: a receive whose buffer has a bad lkey fails with
// IBV_WC_LOC_PROT_ERR at the responder; the RC sender gets
// IBV_WC_REM_OP_ERR.
func TestReceiveProtection(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	dst := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
	s := dst.mr.SGE(0, 256)
	s.LKey ^= 1
	mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{s}}, verbs.RecvWR{WRID: 2})
	mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, randBytes(100, 1)), 100)})
	rwc := poll(t, p.B.RCQ)
	want(t, rwc, verbs.WCLocProtErr, 1)
	want(t, poll(t, p.B.RCQ), verbs.WCWRFlushErr, 2)
	wc := poll(t, p.A.CQ)
	want(t, wc, verbs.WCRemOpErr, 1)
	if wc.Detail == "" || rwc.Detail == "" {
		t.Errorf("errors without a Detail: %v / %v", &wc, &rwc)
	}
	dst.check(t)
}

// TestUCProtection: UC has no NAK: a refused RDMA WRITE is dropped at the
// responder, which writes nothing and keeps working.
func TestUCProtection(t *testing.T) {
	for _, c := range []struct {
		name     string
		mrAccess verbs.Access
		addr     int
		n        int
		rkeyXor  uint32
	}{
		{"wrong-rkey", allRemote, 0, 100, 1},
		{"one-byte-past-end", allRemote, regionLen - 100 + 1, 100, 0},
		{"multi-packet-past-end", allRemote, regionLen - 3000 + 1, 3000, 0},
		{"below-start", allRemote, -1, 100, 0},
		{"mr-without-REMOTE_WRITE", verbs.AccessLocalWrite | verbs.AccessRemoteRead, 0, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UC})
			remote := newCanary(t, p.B.PD, regionLen, c.mrAccess)
			data := randBytes(regionLen, 5)
			src := source(t, p.A.PD, data)
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGList: sgl(src, c.n),
				RemoteAddr: uint64(int64(remote.addr(0)) + int64(c.addr)), RKey: remote.mr.RKey() ^ c.rkeyXor})
			wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
			// A good write and a SEND behind it arrive: the QP still works.
			good := newCanary(t, p.B.PD, 64, allRemote)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2})
			mustPostSend(t, p.A.QP,
				verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 64), RemoteAddr: good.addr(0), RKey: good.mr.RKey()},
				verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			wantOK(t, p.A.CQ, 3, verbs.WCSend)
			wantOK(t, p.B.RCQ, 2, verbs.WCRecv)
			remote.check(t)
			good.check(t, piece{0, data[:64]})
			if s := p.B.QP.State(); s != verbs.QPSRTS {
				t.Errorf("UC responder in %v, want RTS", s)
			}
		})
	}
}

// TestRegMRAccessRules: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE
// (ibv_reg_mr: EINVAL).
func TestRegMRAccessRules(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	buf := make([]byte, 64)
	for _, acc := range []verbs.Access{verbs.AccessRemoteWrite, verbs.AccessRemoteAtomic, verbs.AccessRemoteWrite | verbs.AccessRemoteRead} {
		_, err := p.A.PD.RegMR(buf, acc)
		wantEINVAL(t, err, "LOCAL_WRITE")
	}
	if _, err := p.A.PD.RegMR(buf, verbs.AccessRemoteRead); err != nil {
		t.Errorf("REMOTE_READ alone: %v", err)
	}
	if !bytes.Equal(buf, make([]byte, 64)) {
		t.Error("registration changed the buffer")
	}
}
