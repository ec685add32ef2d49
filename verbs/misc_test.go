package verbs_test

// CQ overflow, COMM_EST, SRQ limits, the GSI QP, device and port
// attributes, and counters.

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestCQOverflow: more completions than an unpolled CQ holds put it in
// error: IBV_EVENT_CQ_ERR is reported and Poll returns an error after the
// entries it kept, so no completion is lost silently.
func TestCQOverflow(t *testing.T) {
	const cqe = 4
	p := verbstest.NewPair(t, verbstest.Options{CQE: cqe})
	sdata := randBytes(64, 1)
	src := source(t, p.A.PD, sdata)
	dst := newCanary(t, p.B.PD, 64, allRemote)
	var wrs []verbs.SendWR
	for i := range 2 * cqe {
		wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, 8), RemoteAddr: dst.addr(8 * i), RKey: dst.mr.RKey()})
	}
	// A SEND behind the WRITEs tells (on B's receive CQ) when they have all
	// landed, since their own completions are the ones the overflow loses.
	mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 99})
	wrs = append(wrs, verbs.SendWR{WRID: 99, Opcode: verbs.WRSend})
	mustPostSend(t, p.A.QP, wrs...)
	ev := waitEvent(t, p.A.Dev, verbs.EventCQErr, 0)
	if ev.Detail == "" {
		t.Error("CQ_ERR without a Detail")
	}
	var wc [4 * cqe]verbs.WC
	n, err := p.A.CQ.Poll(wc[:])
	if n > cqe {
		t.Fatalf("a CQ of %d entries returned %d completions", cqe, n)
	}
	for i := range n {
		want(t, wc[i], verbs.WCSuccess, uint64(i))
	}
	if err == nil {
		n2, err2 := p.A.CQ.Poll(wc[:])
		if n2 != 0 || err2 == nil {
			t.Fatalf("after %d completions of %d the overflowed CQ polls %d, %v; want an error", n, 2*cqe, n2, err2)
		}
		err = err2
	}
	t.Logf("poll after the overflow: %v", err)
	wantOK(t, p.B.RCQ, 99, verbs.WCRecv)
	// Every WRITE was executed even though completions were lost.
	dst.check(t, piece{0, bytes.Repeat(sdata[:8], 2*cqe)})
}

// TestCommEst: the first packet a connected QP receives in RTR reports
// IBV_EVENT_COMM_EST, once.
func TestCommEst(t *testing.T) {
	for _, typ := range rcuc {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
			if err := verbstest.ConnectQP(p.A.QP, p.B.QP.Num(), p.B.GID.GID, 0, p.Opts); err != nil {
				t.Fatal(err)
			}
			// B up to RTR only, expecting A's sq_psn.
			for _, s := range []verbs.QPState{verbs.QPSInit, verbs.QPSRTR} {
				step(t, p.B.QP, s, p.A.QP.Num(), p.A.GID.GID)
			}
			noEvent(t, p.B.Dev, verbs.EventCommEst)
			data := randBytes(100, 2)
			dst := newCanary(t, p.B.PD, 100, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 100)}}, verbs.RecvWR{WRID: 2})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 100)})
			wantOK(t, p.A.CQ, 1, verbs.WCSend) // an RC responder in RTR acknowledges
			wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
			dst.check(t, piece{0, data})
			waitEvent(t, p.B.Dev, verbs.EventCommEst, p.B.QP.Num())
			step(t, p.B.QP, verbs.QPSRTS, p.A.QP.Num(), p.A.GID.GID)
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			wantOK(t, p.A.CQ, 2, verbs.WCSend)
			wantOK(t, p.B.RCQ, 2, verbs.WCRecv)
			noEvent(t, p.B.Dev, verbs.EventCommEst)
		})
	}
}

// TestSRQ: two QPs share one SRQ: receives are consumed in order by
// whichever QP a message arrives on, and IBV_EVENT_SRQ_LIMIT_REACHED is
// reported once when fewer than srq_limit receives remain.
func TestSRQ(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UD} {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, NoConnect: true})
			srq, err := p.B.PD.CreateSRQ(verbs.SRQAttr{MaxWR: 16, MaxSGE: 2})
			if err != nil {
				t.Fatal(err)
			}
			var bq [2]*verbs.QP
			for i := range bq {
				if bq[i], err = p.B.PD.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: p.B.CQ, RecvCQ: p.B.RCQ, SRQ: srq,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxSendSGE: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			aq := [2]*verbs.QP{p.A.QP, newQP(t, p, typ)}
			for i := range 2 {
				if err := verbstest.ConnectQP(aq[i], bq[i].Num(), p.B.GID.GID, 0, p.Opts); err != nil {
					t.Fatal(err)
				}
				if err := verbstest.ConnectQP(bq[i], aq[i].Num(), p.A.GID.GID, 0, p.Opts); err != nil {
					t.Fatal(err)
				}
			}
			wantEINVAL(t, bq[0].PostRecv(verbs.RecvWR{WRID: 1}), "SRQ")
			const n = 4
			off := 0
			if typ == verbs.UD {
				off = 40
			}
			var dsts [n]*canary
			for i := range n {
				dsts[i] = newCanary(t, p.B.PD, off+100, verbs.AccessLocalWrite)
				if err := srq.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{dsts[i].mr.SGE(0, off+100)}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := srq.Arm(2); err != nil {
				t.Fatal(err)
			}
			from := []int{0, 1, 0, 1} // the QP pair each message travels on
			for i := range n {
				data := randBytes(100, uint64(i))
				wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 100)}
				if typ == verbs.UD {
					wr = udTo(t, p, wr)
					wr.RemoteQPN = bq[from[i]].Num()
				}
				mustPostSend(t, aq[from[i]], wr)
				wantOK(t, p.A.CQ, uint64(i), verbs.WCSend)
				rwc := wantOK(t, p.B.RCQ, uint64(i), verbs.WCRecv)
				if rwc.QPNum != bq[from[i]].Num() {
					t.Errorf("message %d completed on QP %#x, want %#x", i, rwc.QPNum, bq[from[i]].Num())
				}
				dsts[i].check(t, piece{0, dsts[i].region()[:off]}, piece{off, data})
				switch left := n - 1 - i; {
				case left == 1: // fewer than 2 left: the limit fires
					waitEvent(t, p.B.Dev, verbs.EventSRQLimitReached, 0)
				default:
					noEvent(t, p.B.Dev, verbs.EventSRQLimitReached)
				}
			}
			wantEINVAL(t, srq.Arm(17), "srq_limit")
			// A QP with an SRQ that goes to ERR reports LAST_WQE_REACHED.
			if err := bq[0].Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
			waitEvent(t, p.B.Dev, verbs.EventQPLastWQEReached, bq[0].Num())
			for _, q := range bq {
				q.Destroy()
			}
		})
	}
}

// TestGSI: QP1 on each device exchanges a MAD-sized datagram with the
// well-known Q_Key 0x80010000.
func TestGSI(t *testing.T) {
	for _, net := range verbstest.Networks {
		t.Run(net, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD, Net: net})
			var gsi [2]*verbs.QP
			for i, s := range []*verbstest.Side{&p.A, &p.B} {
				qp, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.GSI, SendCQ: s.CQ, RecvCQ: s.RCQ,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if qp.Num() != 1 {
					t.Fatalf("GSI QP number %d, want 1", qp.Num())
				}
				if _, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.GSI, SendCQ: s.CQ, RecvCQ: s.RCQ,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); !errors.Is(err, syscall.EEXIST) {
					t.Errorf("a second GSI QP: %v, want EEXIST", err)
				}
				if err := verbstest.ConnectQP(qp, 0, netip.Addr{}, 0, p.Opts); err != nil {
					t.Fatal(err)
				}
				if q := qp.Query().QKey; q != verbs.GSIQKey {
					t.Errorf("GSI Q_Key %#x, want %#x", q, verbs.GSIQKey)
				}
				gsi[i] = qp
			}
			mad := randBytes(256, 3)
			dst := newCanary(t, p.B.PD, 40+256, verbs.AccessLocalWrite)
			mustPostRecv(t, gsi[1], verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 40+256)}})
			wr := udTo(t, p, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, mad), 256)})
			wr.RemoteQPN, wr.RemoteQKey = 1, verbs.GSIQKey
			mustPostSend(t, gsi[0], wr)
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			rwc := wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
			if rwc.SrcQP != 1 || rwc.QPNum != 1 || rwc.ByteLen != 296 || rwc.Flags&verbs.WCWithGRH == 0 {
				t.Errorf("GSI receive %v src_qp %d flags %#x; want src_qp 1, byte_len 296, WITH_GRH", &rwc, rwc.SrcQP, rwc.Flags)
			}
			checkGRH(t, net, dst.region()[:40], p.A.GID.GID, p.B.GID.GID, 256, 0, false) // lengths: TestUD
			dst.check(t, piece{0, dst.region()[:40]}, piece{40, mad})
		})
	}
}

// TestDeviceQuery: ibv_query_device and ibv_query_port values; the active
// MTU follows the link.
func TestDeviceQuery(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	a := p.A.Dev.Query()
	if a.MaxQPRdAtom != 128 || a.MaxQPInitRdAtom != 128 {
		t.Errorf("max_qp_rd_atom %d max_qp_init_rd_atom %d, want 128", a.MaxQPRdAtom, a.MaxQPInitRdAtom)
	}
	if a.AtomicCap != 1 {
		t.Errorf("atomic_cap %d, want 1 (IBV_ATOMIC_HCA)", a.AtomicCap)
	}
	if a.PhysPortCnt != 1 || a.NodeGUID == 0 || a.NodeGUID != p.A.Dev.GUID() || a.MaxSGE < 4 || a.MaxCQE < 4096 || a.MaxMsgSize < 1<<20 {
		t.Errorf("query_device: %+v", a)
	}
	if b := p.B.Dev.Query(); b.NodeGUID == a.NodeGUID {
		t.Errorf("two devices with node GUID %#x", a.NodeGUID)
	}
	port, err := p.A.Dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	if port.State != verbs.PortState(4) || port.ActiveMTU != verbs.MTU4096 || port.MaxMTU != verbs.MTU4096 || port.LinkLayer != "Ethernet" {
		t.Errorf("query_port: %+v", port)
	}
	_, err = p.A.Dev.QueryPort(2)
	wantEINVAL(t, err, "port")

	for _, c := range []struct {
		linkMTU int
		want    verbs.MTU
	}{{256 + 64, verbs.MTU256}, {1024 + 64, verbs.MTU1024}, {1500, verbs.MTU1024}, {2048 + 64, verbs.MTU2048}, {4096 + 63, verbs.MTU2048}, {9000, verbs.MTU4096}} {
		t.Run(fmt.Sprintf("link-mtu-%d", c.linkMTU), func(t *testing.T) {
			p := buildPair(t, pairConfig{Options: verbstest.Options{NoConnect: true}, PortMTU: c.linkMTU})
			port, err := p.A.Dev.QueryPort(1)
			if err != nil {
				t.Fatal(err)
			}
			if port.ActiveMTU != c.want || p.A.Dev.ActiveMTU() != c.want {
				t.Errorf("link MTU %d: active MTU %v, want %v", c.linkMTU, port.ActiveMTU, c.want)
			}
		})
	}

	t.Run("port-state", func(t *testing.T) {
		p.A.Dev.SetPortState(false)
		waitEvent(t, p.A.Dev, verbs.EventPortErr, 0)
		if port, _ := p.A.Dev.QueryPort(1); port.State == verbs.PortState(4) {
			t.Error("port down but query_port says ACTIVE")
		}
		p.A.Dev.SetPortState(true)
		waitEvent(t, p.A.Dev, verbs.EventPortActive, 0)
	})
}

// TestCreateCQBad: a CQ of 0 or more than max_cqe entries is EINVAL.
func TestCreateCQBad(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	max := p.A.Dev.Query().MaxCQE
	for _, n := range []int{0, -1, max + 1} {
		_, err := p.A.Dev.CreateCQ(n)
		wantEINVAL(t, err, "cqe")
	}
	if cq, err := p.A.Dev.CreateCQ(max); err != nil {
		t.Errorf("a CQ of max_cqe %d entries: %v", max, err)
	} else {
		cq.Destroy()
	}
}

// TestCounters: sent_pkts and rcvd_pkts move, per port and per QP, by the
// packets of a 10-packet SEND.
func TestCounters(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	type snap struct{ aDev, bDev, aQP, bQP map[string]uint64 }
	take := func() snap {
		return snap{p.A.Dev.Counters().Snapshot(), p.B.Dev.Counters().Snapshot(), p.A.QP.Counters().Snapshot(), p.B.QP.Counters().Snapshot()}
	}
	before := take()
	mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{newCanary(t, p.B.PD, 10240, verbs.AccessLocalWrite).mr.SGE(0, 10240)}})
	mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, randBytes(10240, 1)), 10240)})
	wantOK(t, p.A.CQ, 1, verbs.WCSend)
	wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
	after := take()
	d := func(b, a map[string]uint64, k string) uint64 { return a[k] - b[k] }
	if n := d(before.aDev, after.aDev, "sent_pkts"); n != 10 {
		t.Errorf("A port sent_pkts +%d, want +10", n)
	}
	if n := d(before.bDev, after.bDev, "rcvd_pkts"); n != 10 {
		t.Errorf("B port rcvd_pkts +%d, want +10", n)
	}
	if n := d(before.bDev, after.bDev, "sent_pkts"); n < 1 {
		t.Errorf("B port sent_pkts +%d, want ≥ 1 (the ACK)", n)
	}
	if n := d(before.aDev, after.aDev, "rcvd_pkts"); n < 1 {
		t.Errorf("A port rcvd_pkts +%d, want ≥ 1 (the ACK)", n)
	}
	if n := d(before.bQP, after.bQP, "rcvd_pkts"); n != 10 {
		t.Errorf("B QP rcvd_pkts +%d, want +10", n)
	}
	if n := d(before.aQP, after.aQP, "sent_pkts"); n != 10 {
		t.Errorf("A QP sent_pkts +%d, want +10", n)
	}
	for _, k := range verbs.CounterNames {
		if _, ok := after.aQP[k]; !ok {
			t.Errorf("counter %q missing from the QP snapshot", k)
		}
	}
}

// TestCountersFromUpperPSN: a QP whose first PSN lies in the upper half of
// the 24-bit space (as ibv_rc_pingpong's random PSNs do half the time)
// counts its first SEND in rdma_sends, not as a retransmission, and a
// run that wraps the PSN retransmits nothing.
func TestCountersFromUpperPSN(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC, verbs.UD} {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, Tune: func(rtr, rts *verbs.QPAttr) {
				rtr.RQPSN, rts.SQPSN = 0xfffff0, 0xfffff0
			}})
			const n = 32
			slot := 64
			if typ == verbs.UD {
				slot += 40 // the GRH in front
			}
			dst := newCanary(t, p.B.PD, slot*n, verbs.AccessLocalWrite)
			src := source(t, p.A.PD, randBytes(64, 3))
			for i := range n {
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{dst.mr.SGE(slot*i, slot)}})
			}
			for i := range n {
				wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 64)}
				if typ == verbs.UD {
					wr = udTo(t, p, wr)
				}
				mustPostSend(t, p.A.QP, wr)
				wantOK(t, p.A.CQ, uint64(i), verbs.WCSend)
				wantOK(t, p.B.RCQ, uint64(i), verbs.WCRecv)
			}
			c := p.A.QP.Counters()
			if got := counterOf(c, "rdma_sends"); got != n {
				t.Errorf("rdma_sends %d, want %d", got, n)
			}
			if got := counterOf(c, "retrans_pkts"); got != 0 {
				t.Errorf("retrans_pkts %d, want 0 (nothing was lost)", got)
			}
		})
	}
}
