package verbs_test

// The Send Queue Error state (IBTA §10.3.1): a UC or UD send WQE that
// completes in error stops the send queue, not the QP. The failed WR
// completes with its error, the send queue's other WRs (and any posted
// while in SQE) with IBV_WC_WR_FLUSH_ERR, receives go on, and
// ibv_modify_qp SQE → RTS resumes sending. RC goes to ERR instead.

import (
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// udFrom returns a UD WR addressed at p's A side, for B to send.
func udFrom(t testing.TB, p *verbstest.Pair, wr verbs.SendWR) verbs.SendWR {
	t.Helper()
	ah, err := p.B.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: p.A.GID.GID, SGIDIndex: p.B.GIDIndex}})
	if err != nil {
		t.Fatal(err)
	}
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, p.A.QP.Num(), udQKey
	return wr
}

// wantState fails t unless qp's State and Query both report s.
func wantState(t testing.TB, qp *verbs.QP, s verbs.QPState) {
	t.Helper()
	if got := qp.State(); got != s {
		t.Fatalf("QP in %v, want %v", got, s)
	}
	if a := qp.Query(); a.State != s || a.CurState != s {
		t.Fatalf("ibv_query_qp: qp_state %v cur_qp_state %v, want %v", a.State, a.CurState, s)
	}
}

// TestSendQueueError: on UD (a SEND above the path MTU: IBV_WC_LOC_LEN_ERR)
// and UC (a SEND whose lkey is bad, in its first SGE or, for a message of
// several packets, its second: IBV_WC_LOC_PROT_ERR) the QP goes to SQE:
// the WRs posted behind the failed one, and those posted in SQE, are
// flushed; no IBV_EVENT_QP_FATAL; the QP still receives; SQE → RTS
// (with IBV_QP_CUR_STATE, which SQE accepts) and a SEND goes through, its
// data whole in the peer's receive.
func TestSendQueueError(t *testing.T) {
	cases := []struct {
		name   string
		typ    verbs.QPType
		status verbs.WCStatus
		// partial: the failed message's first packet reached B and
		// started filling B's receive, which the next message reuses
		// (UC abandons a message whose LAST never comes).
		partial bool
		// bad returns the WR that fails, from the local region src.
		bad func(p *verbstest.Pair, src *verbs.MR) verbs.SendWR
	}{
		{"UD/above-MTU", verbs.UD, verbs.WCLocLenErr, false, func(p *verbstest.Pair, src *verbs.MR) verbs.SendWR {
			n := p.A.Dev.ActiveMTU().Bytes() + 1
			return udTo(t, p, verbs.SendWR{Opcode: verbs.WRSend, SGList: sgl(src, n)})
		}},
		{"UD/bad-lkey", verbs.UD, verbs.WCLocProtErr, false, func(p *verbstest.Pair, src *verbs.MR) verbs.SendWR {
			s := src.SGE(0, 100)
			s.LKey ^= 1
			return udTo(t, p, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s}})
		}},
		{"UC/bad-lkey", verbs.UC, verbs.WCLocProtErr, false, func(p *verbstest.Pair, src *verbs.MR) verbs.SendWR {
			s := src.SGE(0, 100)
			s.LKey ^= 1
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{s}}
		}},
		{"UC/second-packet-bad-lkey", verbs.UC, verbs.WCLocProtErr, true, func(p *verbstest.Pair, src *verbs.MR) verbs.SendWR {
			// The first packet (the first SGE, one path MTU) goes out
			// before the second SGE's key fails.
			mtu := p.Opts.MTU.Bytes()
			s := src.SGE(mtu, 100)
			s.LKey = 0xDEADBE00
			return verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{src.SGE(0, mtu), s}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: c.typ})
			to := func(wr verbs.SendWR) verbs.SendWR {
				if c.typ == verbs.UD {
					return udTo(t, p, wr)
				}
				return wr
			}
			from := func(wr verbs.SendWR) verbs.SendWR {
				if c.typ == verbs.UD {
					return udFrom(t, p, wr)
				}
				return wr
			}
			hdr := 0 // the GRH in front of a UD receive
			if c.typ == verbs.UD {
				hdr = 40
			}
			srcData := randBytes(8192, 1)
			src := source(t, p.A.PD, srcData)
			good := randBytes(300, 2)
			goodMR := source(t, p.A.PD, good)
			// B's receive for the SEND after recovery: nothing of the
			// flushed messages may land in it, nor of the failed one
			// unless its first packet went out.
			const bLen = 4096
			bDst := newCanary(t, p.B.PD, bLen, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 10, SGList: []verbs.SGE{bDst.mr.SGE(0, bLen)}})

			bad := c.bad(p, src)
			bad.WRID, bad.Flags = 1, verbs.SendSignaled
			mustPostSend(t, p.A.QP, bad,
				to(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(goodMR, 300)}),
				to(verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, SGList: sgl(goodMR, 10)})) // unsignaled: flushed all the same
			wc := poll(t, p.A.CQ)
			want(t, wc, c.status, 1)
			wantDetail(t, wc, "SQE", "RTS")
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 2)
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 3)
			wantState(t, p.A.QP, verbs.QPSSQE)
			noEvent(t, p.A.Dev, verbs.EventQPFatal)

			// Posting in SQE is accepted (as rxe's post_send accepts
			// every state from RTS on) and the WR is flushed.
			mustPostSend(t, p.A.QP, to(verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SGList: sgl(goodMR, 300)}))
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 4)
			wantState(t, p.A.QP, verbs.QPSSQE)

			// The receive queue works in SQE.
			in := randBytes(200, 3)
			aDst := newCanary(t, p.A.PD, hdr+200, verbs.AccessLocalWrite)
			mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 20, SGList: []verbs.SGE{aDst.mr.SGE(0, hdr+200)}})
			mustPostSend(t, p.B.QP, from(verbs.SendWR{WRID: 20, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: sgl(source(t, p.B.PD, in), 200)}))
			wantOK(t, p.B.CQ, 20, verbs.WCSend)
			if rwc := wantOK(t, p.A.RCQ, 20, verbs.WCRecv); rwc.ByteLen != uint32(hdr+200) {
				t.Errorf("receive in SQE: byte_len %d, want %d", rwc.ByteLen, hdr+200)
			}
			aDst.check(t, piece{0, aDst.region()[:hdr]}, piece{hdr, in})
			wantState(t, p.A.QP, verbs.QPSSQE)
			wantEmpty(t, p.B.RCQ) // nothing A sent reached B

			// SQE → RTS, and a SEND goes through.
			if err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS, CurState: verbs.QPSSQE}, verbs.AttrState|verbs.AttrCurState); err != nil {
				t.Fatalf("SQE → RTS: %v", err)
			}
			wantState(t, p.A.QP, verbs.QPSRTS)
			mustPostSend(t, p.A.QP, to(verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(goodMR, 300)}))
			wantOK(t, p.A.CQ, 5, verbs.WCSend)
			if rwc := wantOK(t, p.B.RCQ, 10, verbs.WCRecv); rwc.ByteLen != uint32(hdr+300) {
				t.Errorf("receive after SQE → RTS: byte_len %d, want %d", rwc.ByteLen, hdr+300)
			}
			pieces := []piece{{0, bDst.region()[:hdr]}, {hdr, good}}
			if c.partial {
				// The failed message's first packet, but for what the
				// SEND after it overwrote.
				pieces = append(pieces, piece{300, srcData[300:p.Opts.MTU.Bytes()]})
			}
			bDst.check(t, pieces...)
			wantEmpty(t, p.A.CQ)
			wantEmpty(t, p.B.RCQ)
		})
	}
}

// TestSendQueueErrorRC: the same local errors on RC move the QP to ERR
// (IBTA has SQE for unreliable QPs only), with IBV_EVENT_QP_FATAL, and ERR
// cannot go back to RTS.
func TestSendQueueErrorRC(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	s := source(t, p.A.PD, randBytes(100, 1)).SGE(0, 100)
	s.LKey ^= 1
	mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s}})
	want(t, poll(t, p.A.CQ), verbs.WCLocProtErr, 1)
	waitEvent(t, p.A.Dev, verbs.EventQPFatal, p.A.QP.Num())
	wantState(t, p.A.QP, verbs.QPSErr)
	wantEINVAL(t, p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState), "ERR", "RTS")
}
