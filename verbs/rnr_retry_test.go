package verbs_test

// RNR NAK retry and transport retry, in virtual time (testing/synctest):
// the timers cost no wall time, and time.Sleep inside a bubble only
// advances the bubble's clock.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// ackTimeout14 is the local ACK timeout of the pairs' timeout 14:
// 4.096 µs × 2^14 (IBTA §11.2.4.2).
const ackTimeout14 = 4096 << 14 * time.Nanosecond

// rnrPair is an RC pair with the given rnr_retry and min_rnr_timer.
func rnrPair(t *testing.T, net string, rnrRetry, minRNRTimer uint8) *verbstest.Pair {
	return verbstest.NewPair(t, verbstest.Options{Net: net, Tune: func(rtr, rts *verbs.QPAttr) {
		rtr.MinRNRTimer = minRNRTimer
		rts.RNRRetry = rnrRetry
	}})
}

// TestRNRThenReceive: a SEND with no receive posted draws RNR NAKs
// (rcvd_rnr_err at the sender, send_rnr_err at the receiver) and
// completes once a receive is posted.
func TestRNRThenReceive(t *testing.T) {
	for _, net := range verbstest.Networks {
		t.Run(net, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnrPair(t, net, 7, 12) // 0.64 ms
				data := randBytes(500, 1)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 500)})
				synctest.Wait()
				if c := ctr(t, p.A.QP.Counters(), "rcvd_rnr_err"); c != 1 {
					t.Errorf("sender rcvd_rnr_err %d, want 1", c)
				}
				if c := ctr(t, p.B.QP.Counters(), "send_rnr_err"); c != 1 {
					t.Errorf("receiver send_rnr_err %d, want 1", c)
				}
				if c := ctr(t, p.A.Dev.Counters(), "rcvd_rnr_err"); c != 1 {
					t.Errorf("sender port rcvd_rnr_err %d, want 1", c)
				}
				time.Sleep(10 * time.Millisecond) // about 15 more RNR rounds
				// The requester waits the timer the RNR NAK asks for: at most
				// 1 + 10 ms / 0.64 ms NAKs, and not much fewer.
				if c := ctr(t, p.A.QP.Counters(), "rcvd_rnr_err"); c < 10 || c > 17 {
					t.Errorf("sender rcvd_rnr_err %d after 10 ms of 0.64 ms RNR timers, want 10..17", c)
				}
				wantEmpty(t, p.A.CQ)
				dst := newCanary(t, p.B.PD, 500, verbs.AccessLocalWrite)
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{dst.mr.SGE(0, 500)}})
				wantOK(t, p.A.CQ, 1, verbs.WCSend)
				wantOK(t, p.B.RCQ, 2, verbs.WCRecv)
				dst.check(t, piece{0, data})
			})
		})
	}
}

// TestRNRWriteWithImm: RDMA WRITE with immediate needs a receive too; it
// is RNR-retried like a SEND and completes once one is posted.
func TestRNRWriteWithImm(t *testing.T) {
	for _, n := range []int{8, 3000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnrPair(t, "", 7, 12)
				data := randBytes(n, 2)
				dst := newCanary(t, p.B.PD, n, allRemote)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 77, Flags: verbs.SendSignaled,
					SGList: sgl(source(t, p.A.PD, data), n), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
				time.Sleep(5 * time.Millisecond)
				if c := ctr(t, p.A.QP.Counters(), "rcvd_rnr_err"); c == 0 {
					t.Fatal("no RNR NAK for a WRITE_WITH_IMM without a receive")
				}
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2})
				wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
				if wc := wantOK(t, p.B.RCQ, 2, verbs.WCRecvRDMAWithImm); wc.ImmData != 77 || wc.ByteLen != uint32(n) {
					t.Errorf("receive %v imm %d", &wc, wc.ImmData)
				}
				dst.check(t, piece{0, data})
			})
		})
	}
}

// TestRNRRetryExhausted: with rnr_retry 0..6, exactly rnr_retry+1 RNR NAKs
// end in IBV_WC_RNR_RETRY_EXC_ERR whose Detail names the peer and says no
// receive was posted; the QP goes to ERR and flushes the rest.
func TestRNRRetryExhausted(t *testing.T) {
	for rr := uint8(0); rr <= 6; rr++ {
		t.Run(fmt.Sprintf("rnr_retry=%d", rr), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnrPair(t, "", rr, 1) // 10 µs
				src := source(t, p.A.PD, randBytes(100, 3))
				mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 9})
				mustPostSend(t, p.A.QP,
					verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)},
					verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 10), RemoteAddr: 1, RKey: 1}) // unsignaled
				wc := poll(t, p.A.CQ)
				want(t, wc, verbs.WCRNRRetryExcErr, 1)
				wantDetail(t, wc, append(peerWords(p), "no receive")...)
				want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 2)
				want(t, poll(t, p.A.RCQ), verbs.WCWRFlushErr, 9)
				if s := p.A.QP.State(); s != verbs.QPSErr {
					t.Errorf("QP in %v, want ERR", s)
				}
				if c := ctr(t, p.A.QP.Counters(), "rcvd_rnr_err"); c != uint64(rr)+1 {
					t.Errorf("rcvd_rnr_err %d, want rnr_retry+1 = %d", c, rr+1)
				}
				if c := ctr(t, p.B.QP.Counters(), "send_rnr_err"); c != uint64(rr)+1 {
					t.Errorf("receiver send_rnr_err %d, want %d", c, rr+1)
				}
				if c := ctr(t, p.A.QP.Counters(), "retry_rnr_exceeded_err"); c != 1 {
					t.Errorf("retry_rnr_exceeded_err %d, want 1", c)
				}
				if c := ctr(t, p.A.QP.Counters(), "retry_exceeded_err"); c != 0 {
					t.Errorf("retry_exceeded_err %d, want 0", c)
				}
			})
		})
	}
}

// TestRNRRetryInfinite: rnr_retry 7 retries until a receive arrives, here
// after 10 virtual seconds, also for a multi-packet SEND and for several
// SENDs outstanding behind the one that draws the RNR NAKs.
func TestRNRRetryInfinite(t *testing.T) {
	for _, c := range []struct {
		name  string
		sizes []int
	}{
		{"one-packet", []int{100}},
		{"multi-packet", []int{3000}},
		{"three-sends", []int{100, 200, 300}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := rnrPair(t, "", 7, 0) // 655.36 ms, the largest RNR timer
				var datas [][]byte
				var wrs []verbs.SendWR
				for i, n := range c.sizes {
					datas = append(datas, randBytes(n, uint64(i)))
					wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
						SGList: sgl(source(t, p.A.PD, datas[i]), n)})
				}
				mustPostSend(t, p.A.QP, wrs...)
				time.Sleep(10 * time.Second)
				wantEmpty(t, p.A.CQ)
				if s := p.A.QP.State(); s != verbs.QPSRTS {
					t.Fatalf("QP in %v after 10 s of RNR with rnr_retry 7, want RTS", s)
				}
				if n := ctr(t, p.A.QP.Counters(), "rcvd_rnr_err"); n < 10 || n > 16 {
					t.Errorf("rcvd_rnr_err %d after 10 s of 655.36 ms RNR timers, want 10..16", n)
				}
				var dsts []*canary
				for i, n := range c.sizes {
					dsts = append(dsts, newCanary(t, p.B.PD, n, verbs.AccessLocalWrite))
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{dsts[i].mr.SGE(0, n)}})
				}
				for i := range c.sizes {
					wantOK(t, p.A.CQ, uint64(i), verbs.WCSend)
					wantOK(t, p.B.RCQ, uint64(i), verbs.WCRecv)
					dsts[i].check(t, piece{0, datas[i]})
				}
			})
		})
	}
}

// deadPeer makes p's B side unreachable in one of several ways.
var deadPeers = []struct {
	name string
	kill func(p *verbstest.Pair)
}{
	{"loss", func(p *verbstest.Pair) { p.A.Port.SetFaults(fabric.Faults{Loss: 1}) }},
	{"destroyed-qp", func(p *verbstest.Pair) { p.B.QP.Destroy() }},
	{"closed-device", func(p *verbstest.Pair) { p.B.Dev.Close() }},
	{"peer-qp-in-reset", func(p *verbstest.Pair) { p.B.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState) }},
}

// TestRetryExhaustedNeverHeard: a peer that never answered: after
// retry_cnt retransmissions IBV_WC_RETRY_EXC_ERR, whose Detail says no
// response ever arrived and names the peer; the QP goes to ERR and every
// other outstanding WR is flushed.
func TestRetryExhaustedNeverHeard(t *testing.T) {
	for _, net := range verbstest.Networks {
		for _, d := range deadPeers {
			t.Run(net+"/"+d.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					const retryCnt = 3
					p := verbstest.NewPair(t, verbstest.Options{Net: net, Tune: func(rtr, rts *verbs.QPAttr) { rts.RetryCnt = retryCnt }})
					d.kill(p)
					src := source(t, p.A.PD, randBytes(3000, 4))
					local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
					mustPostRecv(t, p.A.QP, verbs.RecvWR{WRID: 9})
					start := time.Now()
					mustPostSend(t, p.A.QP,
						verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 3000)},
						verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 10), RemoteAddr: 1, RKey: 1},
						verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{local.mr.SGE(0, 64)}, RemoteAddr: 1, RKey: 1})
					wc := poll(t, p.A.CQ)
					want(t, wc, verbs.WCRetryExcErr, 1)
					wantDetail(t, wc, append(peerWords(p), "no response ever arrived")...)
					want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 2)
					want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, 3)
					want(t, poll(t, p.A.RCQ), verbs.WCWRFlushErr, 9)
					// (retry_cnt+1) local ACK timeouts of 4.096 µs × 2^14.
					if el, min := time.Since(start), (retryCnt+1)*ackTimeout14; el < min {
						t.Errorf("failed after %v, before %d timeouts (%v)", el, retryCnt+1, min)
					}
					if s := p.A.QP.State(); s != verbs.QPSErr {
						t.Errorf("QP in %v, want ERR", s)
					}
					if c := ctr(t, p.A.QP.Counters(), "retry_exceeded_err"); c != 1 {
						t.Errorf("retry_exceeded_err %d, want 1", c)
					}
					if c := ctr(t, p.A.QP.Counters(), "completer_retry_err"); c != retryCnt {
						t.Errorf("completer_retry_err %d, want retry_cnt = %d", c, retryCnt)
					}
					local.check(t)
					if d.name == "loss" && p.A.Port.FaultStats().Lost.Load() == 0 {
						t.Error("the loss fault never fired")
					}
				})
			})
		}
	}
}

// TestRetryExhaustedAnsweredBefore: a peer that answered before and then
// went silent gets the other wording.
func TestRetryExhaustedAnsweredBefore(t *testing.T) {
	for _, d := range deadPeers {
		t.Run(d.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Tune: func(rtr, rts *verbs.QPAttr) { rts.RetryCnt = 2 }})
				src := source(t, p.A.PD, randBytes(100, 5))
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
				wantOK(t, p.A.CQ, 1, verbs.WCSend)
				d.kill(p)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
				wc := poll(t, p.A.CQ)
				want(t, wc, verbs.WCRetryExcErr, 2)
				wantDetail(t, wc, peerWords(p)...)
				if strings.Contains(wc.Detail, "no response ever arrived") {
					t.Errorf("Detail %q says nothing was ever heard from a peer that answered before", wc.Detail)
				}
				if c := ctr(t, p.A.QP.Counters(), "retry_exceeded_err"); c != 1 {
					t.Errorf("retry_exceeded_err %d, want 1", c)
				}
			})
		})
	}
}

// TestRetryRecovers: lost packets are retransmitted (go-back-N) and the
// data arrives whole once the loss stops.
func TestRetryRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Loss: 1}})
		data := randBytes(5000, 6)
		dst := newCanary(t, p.B.PD, 5000, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 5000)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 5000)})
		time.Sleep(ackTimeout14 * 3 / 2) // one timeout: one retransmission, lost too
		p.A.Port.SetFaults(fabric.Faults{})
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		dst.check(t, piece{0, data})
		if c := ctr(t, p.A.QP.Counters(), "retrans_pkts"); c < 5 {
			t.Errorf("retrans_pkts %d, want ≥ 5 (the 5 packets sent again)", c)
		}
		if p.A.Port.FaultStats().Lost.Load() < 10 {
			t.Errorf("only %d packets lost", p.A.Port.FaultStats().Lost.Load())
		}
	})
}

// TestDuplicatesAreIdempotent: when the responder's answers are lost, the
// retransmitted requests are recognised as duplicates: a SEND consumes one
// receive, an atomic executes once (its saved result is sent again), a
// READ is read again.
func TestDuplicatesAreIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{FaultsB: fabric.Faults{Loss: 1}})
		data := randBytes(2500, 7)
		src := source(t, p.A.PD, data)
		dst := newCanary(t, p.B.PD, 2500, verbs.AccessLocalWrite)
		other := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 2500)}},
			verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{other.mr.SGE(0, 64)}})
		remote := newCanary(t, p.B.PD, 4096, allRemote)
		rd := remote.set(1024, randBytes(3000, 8))
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], 1000)
		remote.set(0, v[:])
		local := newCanary(t, p.A.PD, 4096, verbs.AccessLocalWrite)
		mustPostSend(t, p.A.QP,
			verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 2500)},
			verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{local.mr.SGE(0, 8)},
				RemoteAddr: remote.addr(0), RKey: remote.mr.RKey(), CompareAdd: 1},
			verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: []verbs.SGE{local.mr.SGE(1024, 3000)},
				RemoteAddr: remote.addr(1024), RKey: remote.mr.RKey()})
		// Let two timeouts pass with every answer lost, then let them through.
		time.Sleep(ackTimeout14 * 5 / 2)
		p.B.Port.SetFaults(fabric.Faults{})
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.A.CQ, 2, verbs.WCFetchAdd)
		wantOK(t, p.A.CQ, 3, verbs.WCRDMARead)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		wantEmpty(t, p.B.RCQ) // receive 2 is still posted
		dst.check(t, piece{0, data})
		other.check(t)
		var after [8]byte
		binary.NativeEndian.PutUint64(after[:], 1001)
		remote.check(t, piece{0, after[:]}, rd)
		local.check(t, piece{0, v[:]}, rd)
		if c := ctr(t, p.B.QP.Counters(), "duplicate_request"); c == 0 {
			t.Error("duplicate_request did not move")
		}
	})
}

// TestTimeoutZeroIsInfinite: timeout 0 never times out: after a virtual
// hour with every packet lost there is no error and no retransmission.
func TestTimeoutZeroIsInfinite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Loss: 1}, Tune: func(rtr, rts *verbs.QPAttr) {
			rts.Timeout, rts.RetryCnt = 0, 0
		}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
		time.Sleep(time.Hour)
		wantEmpty(t, p.A.CQ)
		if s := p.A.QP.State(); s != verbs.QPSRTS {
			t.Errorf("QP in %v, want RTS", s)
		}
		for _, name := range []string{"retry_exceeded_err", "completer_retry_err", "retrans_pkts"} {
			if c := ctr(t, p.A.QP.Counters(), name); c != 0 {
				t.Errorf("%s %d, want 0", name, c)
			}
		}
		if p.A.Port.FaultStats().Lost.Load() != 1 {
			t.Errorf("%d packets lost, want 1", p.A.Port.FaultStats().Lost.Load())
		}
	})
}

// TestDestroyStopsTimers: destroying a QP with a retransmission or an RNR
// retry pending stops its timers (nothing fires afterwards) and makes it
// unusable.
func TestDestroyStopsTimers(t *testing.T) {
	for _, c := range []struct {
		name string
		o    verbstest.Options
	}{
		{"retransmit", verbstest.Options{FaultsA: fabric.Faults{Loss: 1}}},
		{"rnr", verbstest.Options{}}, // B posts no receive
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := verbstest.NewPair(t, c.o)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
				synctest.Wait()
				if err := p.A.QP.Destroy(); err != nil {
					t.Fatal(err)
				}
				sent := ctr(t, p.A.Dev.Counters(), "sent_pkts")
				time.Sleep(time.Hour)
				if n := ctr(t, p.A.Dev.Counters(), "sent_pkts"); n != sent {
					t.Errorf("a destroyed QP sent %d packets", n-sent)
				}
				if err := p.A.QP.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend}); !errors.Is(err, net.ErrClosed) {
					t.Errorf("post_send on a destroyed QP: %v, want net.ErrClosed", err)
				}
				if err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); !errors.Is(err, net.ErrClosed) {
					t.Errorf("modify_qp on a destroyed QP: %v, want net.ErrClosed", err)
				}
			})
		})
	}
}

// TestRetryPSNMismatch: a responder expecting an earlier PSN than the
// requester's sq_psn answers with a PSN sequence error NAK; the requester
// retries and finally fails with IBV_WC_RETRY_EXC_ERR whose Detail points
// at the PSNs.
func TestRetryPSNMismatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{NoConnect: true, Tune: func(rtr, rts *verbs.QPAttr) { rts.RetryCnt = 3 }})
		if err := verbstest.ConnectQP(p.A.QP, p.B.QP.Num(), p.B.GID.GID, 0, p.Opts); err != nil {
			t.Fatal(err)
		}
		o := p.Opts
		o.Tune = func(rtr, rts *verbs.QPAttr) { rtr.RQPSN = 0x0FF0 } // A sends from 0x1000
		if err := verbstest.ConnectQP(p.B.QP, p.A.QP.Num(), p.A.GID.GID, 0, o); err != nil {
			t.Fatal(err)
		}
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
		wc := poll(t, p.A.CQ)
		want(t, wc, verbs.WCRetryExcErr, 1)
		wantDetail(t, wc, append(peerWords(p), "sequence")...)
		if c := ctr(t, p.A.QP.Counters(), "rcvd_seq_err"); c == 0 {
			t.Error("rcvd_seq_err did not move")
		}
		if c := ctr(t, p.B.QP.Counters(), "out_of_seq_request"); c == 0 {
			t.Error("out_of_seq_request did not move")
		}
		wantEmpty(t, p.B.RCQ) // nothing was delivered out of sequence
	})
}
