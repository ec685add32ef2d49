package verbs_test

// The congestion window (cwnd.go) in the fabric's virtual time: many QPs
// of one device into one slow peer, and one device's QPs to a slow and a
// fast peer.

import (
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// cwndNet is a fabric with devices; port i owns 192.0.2.(i+1).
type cwndNet struct {
	fab   *fabric.Fabric
	ports []*fabric.Port
	devs  []*verbs.Device
}

func cwndGID(i int) verbs.GIDEntry {
	return verbs.GIDEntry{GID: netip.MustParseAddr(fmt.Sprintf("::ffff:192.0.2.%d", i+1)), Type: verbs.GIDTypeRoCEv2}
}

func newCwndNet(t *testing.T, bns ...fabric.Bottleneck) *cwndNet {
	n := &cwndNet{fab: fabric.New()}
	t.Cleanup(func() { n.fab.Close() })
	for i, bn := range bns {
		g := cwndGID(i)
		port, err := n.fab.AddPort(fabric.PortConfig{GIDs: []netip.Addr{g.GID}, Bottleneck: bn})
		if err != nil {
			t.Fatal(err)
		}
		dev, err := verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: port, MAC: port.MAC(), GIDs: []verbs.GIDEntry{g}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		n.ports, n.devs = append(n.ports, port), append(n.devs, dev)
	}
	return n
}

// pair makes an RC QP on device a connected to one on device b, each with
// its own PD and CQ, room for wrs send WRs.
func (n *cwndNet) pair(t *testing.T, a, b, wrs int) (s, r verbstest.Side) {
	side := func(i int) verbstest.Side {
		s := verbstest.Side{Dev: n.devs[i], GID: cwndGID(i)}
		var err error
		if s.PD, err = s.Dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.CQ, err = s.Dev.CreateCQ(2 * wrs); err != nil {
			t.Fatal(err)
		}
		if s.QP, err = s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.CQ, RecvCQ: s.CQ,
			Cap: verbs.QPCap{MaxSendWR: wrs, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s, r = side(a), side(b)
	if err := verbstest.ConnectQP(s.QP, r.QP.Num(), cwndGID(b).GID, 0, verbstest.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.ConnectQP(r.QP, s.QP.Num(), cwndGID(a).GID, 0, verbstest.Options{}); err != nil {
		t.Fatal(err)
	}
	return s, r
}

// writeAll posts wrs WRITEs of size bytes each, all at once, every one
// signaled, and checks they complete successfully in order and that the
// data arrived.
func writeAll(t *testing.T, s, r verbstest.Side, wrs, size int, seed uint64) {
	data := randBytes(wrs*size, seed)
	src := source(t, s.PD, data)
	dst := newCanary(t, r.PD, wrs*size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	batch := make([]verbs.SendWR, wrs)
	for i := range batch {
		batch[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList:     []verbs.SGE{{Addr: src.Addr() + uint64(i*size), Length: uint32(size), LKey: src.LKey()}},
			RemoteAddr: dst.addr(i * size), RKey: dst.mr.RKey()}
	}
	mustPostSend(t, s.QP, batch...)
	for i := range wrs {
		wantOK(t, s.CQ, uint64(i), verbs.WCRDMAWrite)
	}
	dst.check(t, piece{0, data})
}

// TestCwndManyQPsOneSlowPeer is roce perf write -q 64's case in miniature
// (issue 15): 16 QPs of one device each post 128 WRITEs of 4 KiB (512 PSNs
// at path MTU 1024) at once to QPs of one peer behind a 100 Mb/s hop with a
// deep queue (no drops). Every QP's whole queue at once would be 8 MiB,
// 0.67 s at the hop, ten ACK timeouts (timeout 14, 67 ms): every QP timed
// out and resent its window while its originals were still queued. The
// windows keep the queue under the timeout: every WRITE completes in order
// with its data, and no retransmission timer fires.
func TestCwndManyQPsOneSlowPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const qps, wrs, size = 16, 128, 4096
		n := newCwndNet(t, fabric.Bottleneck{}, fabric.Bottleneck{Rate: 100_000_000, LimitBytes: 64 << 20})
		done := make(chan struct{})
		var senders []verbstest.Side
		for i := range qps {
			s, r := n.pair(t, 0, 1, wrs)
			senders = append(senders, s)
			go func() {
				defer func() { done <- struct{}{} }()
				writeAll(t, s, r, wrs, size, uint64(i))
			}()
		}
		for range qps {
			<-done
		}
		c := n.devs[0].Counters()
		var cuts uint64
		for _, s := range senders {
			cuts += s.QP.Info().CwndCuts
		}
		t.Logf("sender: %s; tail-dropped %d; window cuts %d", nonzeroCounters(c), n.ports[1].FaultStats().TailDropped.Load(), cuts)
		if d := n.ports[1].FaultStats().TailDropped.Load(); d != 0 {
			t.Fatalf("the hop dropped %d frames: the test's queue is too short to show a timeout storm", d)
		}
		if r, rt := counterOf(c, "completer_retry_err"), counterOf(c, "retrans_pkts"); r != 0 || rt != 0 {
			t.Errorf("completer_retry_err %d, retrans_pkts %d: the queue outlived the ACK timeout", r, rt)
		}
		if cuts == 0 {
			t.Error("no window was cut for delay: the test did not build a queue")
		}
	})
}

// TestCwndPerPath: one device's QPs to a peer behind a slow hop and to a
// peer on a fast path. Midway the slow hop slows tenfold, and the round
// trip jumps past the target: the window of the QP to the slow peer is
// cut. The QP to the fast peer, which shares the device but not the path,
// grows to maxUnackedPSNs (1,024), is never cut and resends nothing: each
// window answers its own round trips only.
func TestCwndPerPath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wrs, size = 512, 4096
		n := newCwndNet(t, fabric.Bottleneck{}, fabric.Bottleneck{Rate: 50_000_000, LimitBytes: 64 << 20}, fabric.Bottleneck{})
		slowS, slowR := n.pair(t, 0, 1, wrs)
		fastS, fastR := n.pair(t, 0, 2, wrs)
		done := make(chan struct{})
		go func() { writeAll(t, slowS, slowR, wrs, size, 1); done <- struct{}{} }()
		go func() { writeAll(t, fastS, fastR, wrs, size, 2); done <- struct{}{} }()
		time.Sleep(100 * time.Millisecond)
		n.ports[1].SetBottleneck(fabric.Bottleneck{Rate: 5_000_000, LimitBytes: 64 << 20})
		<-done
		<-done
		slow, fast := slowS.QP.Info(), fastS.QP.Info()
		t.Logf("slow peer: cwnd %d, cuts %d, rtt %v, base %v, %s; fast peer: cwnd %d, cuts %d, rtt %v, base %v, %s",
			slow.Cwnd, slow.CwndCuts, slow.RTT, slow.MinRTT, nonzeroCounters(slowS.QP.Counters()),
			fast.Cwnd, fast.CwndCuts, fast.RTT, fast.MinRTT, nonzeroCounters(fastS.QP.Counters()))
		if slow.CwndCuts == 0 || slow.Cwnd >= 1024 {
			t.Errorf("the QP to the slow peer: %d cuts, window %d; want cuts and a window under 1024", slow.CwndCuts, slow.Cwnd)
		}
		if fast.CwndCuts != 0 || fast.Cwnd != 1024 {
			t.Errorf("the QP to the fast peer: %d cuts, window %d; want none and 1024", fast.CwndCuts, fast.Cwnd)
		}
		if c := counterOf(fastS.QP.Counters(), "retrans_pkts"); c != 0 {
			t.Errorf("the QP to the fast peer: retrans_pkts %d", c)
		}
	})
}
