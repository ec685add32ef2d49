package verbs

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// wrapLink, if set, decorates the link of side i (0: a, 1: b) in rcPair.
var wrapLink func(i int, l link.Link) link.Link

// rcPairTimeout is the local ACK timeout rcPair gives its QPs (10: 4 ms).
var rcPairTimeout uint8 = 10

type side struct {
	dev  *Device
	pd   *PD
	cq   *CQ
	qp   *QP
	port *fabric.Port
}

// rcPair makes two devices on a fabric with a connected RC (or UC) QP pair.
func rcPair(t testing.TB, typ QPType, fa fabric.Faults, v wire.Version) (a, b side, fab *fabric.Fabric) {
	fab = fabric.New()
	gids := [2]GIDEntry{
		{GID: netip.MustParseAddr("::ffff:192.0.2.1"), Type: GIDTypeRoCEv2},
		{GID: netip.MustParseAddr("::ffff:192.0.2.2"), Type: GIDTypeRoCEv2},
	}
	if v == wire.RoCEv1 {
		gids[0] = GIDEntry{GID: netip.MustParseAddr("fe80::1"), Type: GIDTypeRoCEv1}
		gids[1] = GIDEntry{GID: netip.MustParseAddr("fe80::2"), Type: GIDTypeRoCEv1}
	}
	sides := []*side{&a, &b}
	for i, s := range sides {
		fa := fa
		if i == 1 {
			fa = fabric.Faults{}
		}
		p, err := fab.AddPort(fabric.PortConfig{Name: []string{"a", "b"}[i], GIDs: []netip.Addr{gids[i].GID}, Faults: fa, Seed: uint64(i + 7)})
		if err != nil {
			t.Fatal(err)
		}
		s.port = p
		var l link.Link = p
		if wrapLink != nil {
			l = wrapLink(i, p)
		}
		s.dev, err = Open(DeviceConfig{Name: []string{"rxe0", "rxe1"}[i], Link: l, MAC: p.MAC(), GIDs: []GIDEntry{gids[i]}})
		if err != nil {
			t.Fatal(err)
		}
		s.pd, _ = s.dev.AllocPD()
		s.cq, _ = s.dev.CreateCQ(4096)
		s.qp, err = s.pd.CreateQP(QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
	}
	connect := func(s, peer *side, peerGID netip.Addr) {
		acc := mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic | mem.FlushGlobal | mem.FlushPersistent
		if typ == UC {
			acc = mem.LocalWrite | mem.RemoteWrite
		}
		if err := s.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: acc}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		rtr := &QPAttr{State: QPSRTR, PathMTU: MTU1024, DestQPN: peer.qp.Num(), RQPSN: 100, MaxDestRdAtomic: 16, MinRNRTimer: 1,
			AH: AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: peerGID, HopLimit: 64}}}
		m := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
		if typ == RC {
			m |= AttrMaxDestRdAtomic | AttrMinRNRTimer
		}
		if err := s.qp.Modify(rtr, m); err != nil {
			t.Fatal(err)
		}
		rts := &QPAttr{State: QPSRTS, SQPSN: 100, Timeout: rcPairTimeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
		m = AttrState | AttrSQPSN
		if typ == RC {
			m |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
		}
		if err := s.qp.Modify(rts, m); err != nil {
			t.Fatal(err)
		}
	}
	connect(&a, &b, gids[1].GID)
	connect(&b, &a, gids[0].GID)
	t.Cleanup(func() {
		a.dev.Close()
		b.dev.Close()
		fab.Close()
	})
	return a, b, fab
}

// writeRegions registers n bytes on each side of an rcPair: a's to RDMA
// WRITE from, b's to WRITE into.
func writeRegions(t testing.TB, a, b side, n int) (src, dst *MR) {
	t.Helper()
	src, err := a.pd.RegMR(make([]byte, n), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err = b.pd.RegMR(make([]byte, n), AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	return src, dst
}

// postWrite posts on s's QP a signaled RDMA WRITE of src, whole, to dst,
// with wr_id id.
func postWrite(t testing.TB, s side, id uint64, src, dst *MR) {
	t.Helper()
	if err := s.qp.PostSend(SendWR{WRID: id, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGList: []SGE{src.SGE(0, src.Len())}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
		t.Fatal(err)
	}
}

func poll(t testing.TB, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]WC
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		t.Fatalf("poll: %v", err)
	}
	return wc[0]
}

func TestSmokeRC(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
		bufA := make([]byte, 1<<16)
		bufB := make([]byte, 1<<16)
		mrA, _ := a.pd.RegMR(bufA, mem.LocalWrite)
		mrB, err := b.pd.RegMR(bufB, mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead|mem.RemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		for i := range bufA {
			bufA[i] = byte(i * 7)
		}
		// SEND 5000 bytes.
		if err := b.qp.PostRecv(RecvWR{WRID: 1, SGList: []SGE{mrB.SGE(0, 8192)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{mrA.SGE(0, 5000)}}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.WRID != 2 {
			t.Fatalf("send: %v", &wc)
		}
		if wc := poll(t, b.cq); wc.Status != WCSuccess || wc.ByteLen != 5000 {
			t.Fatalf("recv: %v", &wc)
		}
		if !bytes.Equal(bufA[:5000], bufB[:5000]) {
			t.Fatal("SEND data differs")
		}
		// WRITE 10000 bytes at offset 10000.
		if err := a.qp.PostSend(SendWR{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{mrA.SGE(100, 10000)},
			RemoteAddr: mrB.Addr() + 10000, RKey: mrB.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq); wc.Status != WCSuccess {
			t.Fatalf("write: %v", &wc)
		}
		if !bytes.Equal(bufA[100:10100], bufB[10000:20000]) {
			t.Fatal("WRITE data differs")
		}
		// READ it back into A at 30000.
		if err := a.qp.PostSend(SendWR{WRID: 4, Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{mrA.SGE(30000, 10000)},
			RemoteAddr: mrB.Addr() + 10000, RKey: mrB.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.ByteLen != 10000 {
			t.Fatalf("read: %v", &wc)
		}
		if !bytes.Equal(bufA[100:10100], bufA[30000:40000]) {
			t.Fatal("READ data differs")
		}
		// FETCH_ADD at B+40000.
		if err := a.qp.PostSend(SendWR{WRID: 5, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: []SGE{mrA.SGE(50000, 8)},
			RemoteAddr: mrB.Addr() + 40000, RKey: mrB.RKey(), CompareAdd: 5}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq); wc.Status != WCSuccess {
			t.Fatalf("fadd: %v", &wc)
		}
		// Bad rkey.
		if err := a.qp.PostSend(SendWR{WRID: 6, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{mrA.SGE(0, 10)},
			RemoteAddr: mrB.Addr(), RKey: mrB.RKey() ^ 1}); err != nil {
			t.Fatal(err)
		}
		if wc := poll(t, a.cq); wc.Status != WCRemAccessErr {
			t.Fatalf("bad rkey: %v", &wc)
		} else {
			t.Logf("bad rkey: %v", &wc)
		}
	})
}

// TestRetransTimerStaleCallback: the retransmit timer fires and its
// callback starts, but before it gets the QP's lock an ACK makes progress
// and re-arms the timer (Stop cannot recall a started callback; Reset
// schedules another). The stale callback must not resend: the timer as
// re-armed has a full timeout to run. Here the callback runs right after
// the timer was armed, which is the state the stale one finds; B's packets
// are lost, so the WRITE stays outstanding.
func TestRetransTimerStaleCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wrapLink = func(i int, l link.Link) link.Link {
			if i == 1 {
				return silentLink{l}
			}
			return l
		}
		defer func() { wrapLink = nil }()
		a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
		src, dst := writeRegions(t, a, b, 4096)
		postWrite(t, a, 1, src, dst)
		a.qp.onRetransTimer() // as a callback that started before the timer was (re-)armed
		if got := a.qp.counters.Get(CompleterRetryErr); got != 0 {
			t.Errorf("completer_retry_err %d after a callback that ran before the timer's deadline, want 0", got)
		}
		// The timer as armed still fires: the lost ACK is retried for.
		time.Sleep(2 * TimeoutDuration(rcPairTimeout))
		if got := a.qp.counters.Get(CompleterRetryErr); got == 0 {
			t.Error("no retry after the timeout with the ACK lost")
		}
	})
}

// silentLink loses everything its device sends.
type silentLink struct{ link.Link }

func (silentLink) Send(pkts []link.Packet) (int, error) { return len(pkts), nil }
