package verbs_test

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

var mgid = netip.MustParseAddr("::ffff:239.1.2.3") // cma_iboe_set_mgid's MGID for 239.1.2.3 on RoCE v2

// mcastQP is a UD QP in RTS on one side of p, with its own receive CQ.
type mcastQP struct {
	qp  *verbs.QP
	rcq *verbs.CQ
	mr  *verbs.MR
	buf []byte
}

func newMcastQP(t *testing.T, s *verbstest.Side, o verbstest.Options) *mcastQP {
	t.Helper()
	rcq, err := s.Dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: s.CQ, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := verbstest.ConnectQP(qp, 0, netip.Addr{}, s.GIDIndex, o); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	mr, err := s.PD.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return &mcastQP{qp: qp, rcq: rcq, mr: mr, buf: buf}
}

// postRecvs posts n receives of 40+100 bytes (GRH + message, as mckey).
func (m *mcastQP) postRecvs(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		mustPostRecv(t, m.qp, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{m.mr.SGE(i*140, 140)}})
	}
}

// sendToGroup sends one UD SEND with immediate from p's A side to mgid.
func sendToGroup(t *testing.T, p *verbstest.Pair, qkey, imm uint32) {
	t.Helper()
	ah, err := p.A.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: mgid, SGIDIndex: p.A.GIDIndex, HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	mustPostSend(t, p.A.QP, verbs.SendWR{WRID: uint64(imm), Opcode: verbs.WRSendWithImm, ImmData: imm, Flags: verbs.SendSignaled,
		SGList: sgl(source(t, p.A.PD, []byte("multicast datagram")), 18), AH: ah, RemoteQPN: verbs.MulticastQPN, RemoteQKey: qkey})
	wantOK(t, p.A.CQ, uint64(imm), verbs.WCSend)
}

// TestMcastDelivery: a UD SEND to QPN 0xFFFFFF and a group's MGID reaches
// every QP attached to the group on the receiving device, and no other
// (rxe_rcv_mcast_pkt); after a detach it no longer reaches that QP, and a
// copy with a wrong Q_Key is dropped and counted by each attached QP.
func TestMcastDelivery(t *testing.T) {
	o := verbstest.Options{Type: verbs.UD}
	p := buildPair(t, pairConfig{Options: o})
	o = p.Opts
	qs := []*mcastQP{newMcastQP(t, &p.B, o), newMcastQP(t, &p.B, o), newMcastQP(t, &p.B, o)}
	for _, m := range qs {
		m.postRecvs(t, 8)
	}
	for _, m := range qs[:2] {
		if err := m.qp.AttachMcast(mgid, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := qs[0].qp.AttachMcast(mgid, 0); err != nil {
		t.Fatalf("attaching a QP twice: %v, want nil as ibv_attach_mcast", err)
	}
	if g, a := p.B.Dev.McastGroups(); g != 1 || a != 2 {
		t.Fatalf("McastGroups = %d groups, %d attachments; want 1, 2", g, a)
	}
	sendToGroup(t, p, udQKey, 0x20)
	for i, m := range qs[:2] {
		wc := poll(t, m.rcq)
		if wc.Status != verbs.WCSuccess || wc.ImmData != 0x20 || wc.SrcQP != p.A.QP.Num() || wc.ByteLen != 40+18 || wc.QPNum != m.qp.Num() {
			t.Fatalf("QP %d: completion %v; want success, imm 0x20, src_qp %#x, 58 bytes", i, &wc, p.A.QP.Num())
		}
		if got := string(m.buf[wc.WRID*140+40 : wc.WRID*140+58]); got != "multicast datagram" {
			t.Errorf("QP %d received %q", i, got)
		}
	}
	// A wrong Q_Key: every attached QP drops its copy and counts it.
	before := ctr(t, p.B.Dev.Counters(), "rcvd_bad_qkey")
	sendToGroup(t, p, udQKey+1, 0x21)
	for deadline := time.Now().Add(pollTimeout); ctr(t, p.B.Dev.Counters(), "rcvd_bad_qkey")-before < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("rcvd_bad_qkey rose by %d, want 2 (one per attached QP)", ctr(t, p.B.Dev.Counters(), "rcvd_bad_qkey")-before)
		}
		time.Sleep(time.Millisecond)
	}
	// Then a good one, which must be the next completion.
	if err := qs[1].qp.DetachMcast(mgid, 0); err != nil {
		t.Fatal(err)
	}
	sendToGroup(t, p, udQKey, 0x22)
	if wc := poll(t, qs[0].rcq); wc.ImmData != 0x22 {
		t.Fatalf("attached QP: completion %v, want imm 0x22 (the bad Q_Key's copy dropped)", &wc)
	}
	if got := ctr(t, p.B.Dev.Counters(), "rcvd_bad_qkey") - before; got != 2 {
		t.Errorf("rcvd_bad_qkey rose by %d, want 2 (one per attached QP)", got)
	}
	if got := ctr(t, qs[1].qp.Counters(), "rcvd_bad_qkey"); got != 1 {
		t.Errorf("QP 1 rcvd_bad_qkey = %d, want 1", got)
	}
	p.B.Dev.Barrier()
	wantEmpty(t, qs[1].rcq) // detached before 0x22
	wantEmpty(t, qs[2].rcq) // never attached
	if err := qs[1].qp.DetachMcast(mgid, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("detaching a QP not attached: %v, want EINVAL", err)
	}
	// Destroying the last attached QP leaves the group.
	if err := qs[0].qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if g, a := p.B.Dev.McastGroups(); g != 0 || a != 0 {
		t.Errorf("after destroy: %d groups, %d attachments; want 0, 0", g, a)
	}
}

// TestMcastLimits: the device reports rxe's limits and enforces them, and
// attach refuses what ib_attach_mcast refuses.
func TestMcastLimits(t *testing.T) {
	p := buildPair(t, pairConfig{Options: verbstest.Options{Type: verbs.UD}})
	a := p.B.Dev.Query()
	if a.MaxMcastGrp != 8192 || a.MaxMcastQPAttach != 56 || a.MaxTotalMcastQPAttach != 458752 {
		t.Errorf("max_mcast_grp %d, max_mcast_qp_attach %d, max_total_mcast_qp_attach %d; want rxe's 8192, 56, 458752",
			a.MaxMcastGrp, a.MaxMcastQPAttach, a.MaxTotalMcastQPAttach)
	}
	qp := p.B.QP
	wantEINVAL(t, qp.AttachMcast(netip.MustParseAddr("::ffff:192.0.2.9"), 0), "not a multicast GID")
	rc := buildPair(t, pairConfig{})
	wantEINVAL(t, rc.B.QP.AttachMcast(mgid, 0), "only UD")
	// max_mcast_qp_attach QPs in one group, then ENOMEM.
	for i := range verbs.MaxMcastQPAttach {
		q, err := p.B.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: p.B.CQ, RecvCQ: p.B.RCQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.AttachMcast(mgid, 0); err != nil {
			t.Fatalf("attach %d: %v", i, err)
		}
	}
	if err := qp.AttachMcast(mgid, 0); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("attach %d to one group: %v, want ENOMEM", verbs.MaxMcastQPAttach+1, err)
	}
	// max_mcast_grp groups, then ENOMEM.
	for i := 1; i < verbs.MaxMcastGrp; i++ {
		g := netip.AddrFrom16([16]byte{0xff, 0x0e, 14: byte(i >> 8), 15: byte(i)})
		if err := qp.AttachMcast(g, 0); err != nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	if err := qp.AttachMcast(netip.MustParseAddr("ff0e::1:0:0"), 0); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("group %d: %v, want ENOMEM", verbs.MaxMcastGrp+1, err)
	}
	if g, _ := p.B.Dev.McastGroups(); g != verbs.MaxMcastGrp {
		t.Errorf("%d groups, want %d", g, verbs.MaxMcastGrp)
	}
}

// sendRecorder records the address of every packet a device sends.
type sendRecorder struct {
	link.Link
	mu    sync.Mutex
	addrs []link.Addr // guarded by mu
}

func (s *sendRecorder) Send(pkts []link.Packet) (int, error) {
	s.mu.Lock()
	for i := range pkts {
		s.addrs = append(s.addrs, pkts[i].Addr)
	}
	s.mu.Unlock()
	return s.Link.Send(pkts)
}

// TestUDSourcePort: a UD QP's datagrams, to a group or to a peer, leave
// from UDP source port 0xC000 + hash_32(QPN, 14), as rxe's (mckey.pcap:
// QPN 0x20 sends from 52804), not from port 0: UD QPs get no address
// vector from modify_qp to compute it from.
func TestUDSourcePort(t *testing.T) {
	var rec *sendRecorder
	p := buildPair(t, pairConfig{Options: verbstest.Options{Type: verbs.UD}, Wrap: func(side int, l link.Link) link.Link {
		if side == 0 {
			rec = &sendRecorder{Link: l}
			return rec
		}
		return l
	}})
	sendToGroup(t, p, udQKey, 1)
	mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}))
	wantOK(t, p.A.CQ, 2, verbs.WCSend)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := wire.UDSport(p.A.QP.Num())
	if len(rec.addrs) != 2 {
		t.Fatalf("%d packets sent, want 2", len(rec.addrs))
	}
	for _, a := range rec.addrs {
		if a.UDPSrcPort != want {
			t.Errorf("datagram to %v from UDP port %d, want %d (0xC000 + hash of QPN %#x)", a.DstGID, a.UDPSrcPort, want, p.A.QP.Num())
		}
	}
}
