package rdmacm

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// mcJoin has s join group on a new UD ID with a UD QP (receives posted)
// and returns the ID, its QP, the MR of its buffer and the join event.
func mcJoin(t *testing.T, s *side, group netip.Addr) (*ID, *verbs.QP, *verbs.MR, Event) {
	t.Helper()
	id, err := s.cm.CreateID(s.ec, PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(s.ip, netip.AddrPortFrom(group, 0), 0); err != nil {
		t.Fatal(err)
	}
	s.want(t, EventAddrResolved)
	init := rcInit(s)
	init.Type = verbs.UD
	qp, err := id.CreateQP(s.pd, init)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := s.pd.RegMR(make([]byte, 4*140), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mr.SGE(i*140, 140)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := id.JoinMulticast(group); err != nil {
		t.Fatal(err)
	}
	return id, qp, mr, s.want(t, EventMulticastJoin)
}

// TestJoinMulticast: rdma_join_multicast's event gives what Linux's CM
// gives (QPN 0xFFFFFF, Q_Key 0x01234567, the MGID cma_iboe_set_mgid maps
// the group to), its QP is attached, and a UD SEND to the group with that
// AH reaches the other side's joined QP, as mckey does it.
func TestJoinMulticast(t *testing.T) {
	for _, c := range []struct {
		net, group, mgid string
		hop              uint8
	}{
		{verbstest.NetV2IPv4, "239.1.2.3", "::ffff:239.1.2.3", 64},
		{verbstest.NetV2IPv6, "ff0e::1:2:3", "ff0e::1:2:3", 1},
	} {
		t.Run(c.net, func(t *testing.T) {
			a, b := newSides(t, c.net, fastOptions, fastOptions)
			group := netip.MustParseAddr(c.group)
			rid, rqp, _, ev := mcJoin(t, b, group)
			u := ev.UD
			if u.QPNum != 0xFFFFFF || u.QKey != 0x01234567 || u.AH.GRH.DGID != netip.MustParseAddr(c.mgid) ||
				u.AH.GRH.HopLimit != c.hop || !u.AH.IsGlobal || ev.Group != group {
				t.Fatalf("MULTICAST_JOIN: %+v; want QPN 0xffffff, Q_Key 0x1234567, dgid %s, hop limit %d", ev, c.mgid, c.hop)
			}
			if g, n := b.dev.McastGroups(); g != 1 || n != 1 {
				t.Fatalf("receiver device: %d groups, %d attachments; want 1, 1", g, n)
			}
			if err := rid.JoinMulticast(group); !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("second join: %v, want EADDRINUSE", err)
			}
			sid, sqp, _, sev := mcJoin(t, a, group)
			ah, err := a.pd.CreateAH(sev.UD.AH)
			if err != nil {
				t.Fatal(err)
			}
			src, err := a.pd.RegMR([]byte("to the group"), 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := sqp.PostSend(verbs.SendWR{WRID: 9, Opcode: verbs.WRSendWithImm, ImmData: sqp.Num(), Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{src.SGE(0, 12)}, AH: ah, RemoteQPN: sev.UD.QPNum, RemoteQKey: sev.UD.QKey}); err != nil {
				t.Fatal(err)
			}
			wc := verbstest.MustSucceed(t, b.cq)
			if wc.QPNum != rqp.Num() || wc.ImmData != sqp.Num() || wc.SrcQP != sqp.Num() || wc.ByteLen != 52 {
				t.Fatalf("receive %v; want imm = src_qp = %#x, 52 bytes", &wc, sqp.Num())
			}
			if err := rid.LeaveMulticast(group); err != nil {
				t.Fatal(err)
			}
			if g, _ := b.dev.McastGroups(); g != 0 {
				t.Errorf("after leave: %d groups", g)
			}
			if err := rid.LeaveMulticast(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
				t.Errorf("leaving again: %v, want EADDRNOTAVAIL", err)
			}
			// Destroy leaves the groups the ID still has.
			if err := sid.Destroy(); err != nil {
				t.Fatal(err)
			}
			if g, _ := a.dev.McastGroups(); g != 0 {
				t.Errorf("after destroy: %d groups", g)
			}
		})
	}
}

func TestJoinMulticastRefused(t *testing.T) {
	a, _ := newSides(t, verbstest.NetV2IPv4, fastOptions, fastOptions)
	group := netip.MustParseAddr("239.1.2.3")
	id, err := a.cm.CreateID(a.ec, PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.JoinMulticast(group); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join before the ID has a device: %v, want EINVAL", err)
	}
	if err := id.BindAddr(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	if err := id.JoinMulticast(netip.MustParseAddr("192.0.2.9")); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join of a unicast address: %v, want EINVAL", err)
	}
	tcp, err := a.cm.CreateID(a.ec, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := tcp.BindAddr(netip.AddrPortFrom(a.ip, 0)); err != nil {
		t.Fatal(err)
	}
	if err := tcp.JoinMulticast(group); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join on a TCP port space ID: %v, want EINVAL", err)
	}
	// Bound (not resolved), no QP: the event comes, nothing is attached.
	if err := id.JoinMulticast(group); err != nil {
		t.Fatal(err)
	}
	if ev := a.want(t, EventMulticastJoin); ev.UD.AH.GRH.DGID != netip.MustParseAddr("::ffff:239.1.2.3") {
		t.Errorf("join event %+v", ev)
	}
}
