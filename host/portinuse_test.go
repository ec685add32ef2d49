package host_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestPortInUseOK: where another stack owns UDP port 4791 (the kernel's
// rdma_rxe binds it), a device that speaks both versions fails to open
// (EADDRINUSE) unless Options.PortInUseOK says the port may be another's;
// then it opens and reads RoCE v2 with AF_PACKET, and still speaks it: it
// answers a RoCE v2 RC exchange with a device in the other namespace.
func TestPortInUseOK(t *testing.T) {
	a, b := nettest.VethPair(t, nettest.Options{})
	dir := t.TempDir()
	reg := host.NewRegistry(dir)
	addDevice(t, reg, a, "rxeA", host.VersionsBoth)
	addDevice(t, reg, b, "rxeB", host.VersionsV2)
	// The port's owner in a's namespace.
	var owner *net.UDPConn
	if err := a.Do(func() error {
		var err error
		owner, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified, Port: 4791})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer owner.Close()

	if d, err := host.Open("rxeA", host.Options{RunDir: dir}); !errors.Is(err, syscall.EADDRINUSE) {
		if err == nil {
			d.Close()
		}
		t.Fatalf("open with port 4791 taken: %v, want EADDRINUSE", err)
	}
	da, err := host.Open("rxeA", host.Options{RunDir: dir, PortInUseOK: true})
	if err != nil {
		t.Fatalf("open with PortInUseOK: %v", err)
	}
	defer da.Close()
	db, err := host.Open("rxeB", host.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rcExchange(t, da, db, a.IPv4, b.IPv4)
}

// rcExchange connects an RC QP on each device over RoCE v2 and has b
// write to a with immediate data: a receives it (and acknowledges it).
func rcExchange(t *testing.T, a, b *host.Device, ipA, ipB netip.Addr) {
	t.Helper()
	ia, ib := gidIndex(t, a, ipA, verbs.GIDTypeRoCEv2), gidIndex(t, b, ipB, verbs.GIDTypeRoCEv2)
	mk := func(d *host.Device) (*verbs.PD, *verbs.CQ, *verbs.QP) {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64)
		qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return pd, cq, qp
	}
	pdA, cqA, qpA := mk(a)
	pdB, cqB, qpB := mk(b)
	if err := verbstest.ConnectQP(qpA, qpB.Num(), netip.AddrFrom16(ipB.As16()), ia, verbstest.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.ConnectQP(qpB, qpA.Num(), netip.AddrFrom16(ipA.As16()), ib, verbstest.Options{}); err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte("0123456789abcdef"), 200)
	dst := make([]byte, len(src))
	mrB, _ := pdB.RegMR(src, verbs.AccessLocalWrite)
	mrA, _ := pdA.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err := qpA.PostRecv(verbs.RecvWR{WRID: 7}); err != nil {
		t.Fatal(err)
	}
	if err := qpB.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 42, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mrB.SGE(0, len(src))}, RemoteAddr: mrA.Addr(), RKey: mrA.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := verbstest.Poll(t, cqB, 10*time.Second); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %v", &wc)
	}
	if wc := verbstest.Poll(t, cqA, 10*time.Second); wc.Status != verbs.WCSuccess || wc.ImmData != 42 {
		t.Fatalf("WRITE_WITH_IMM at A: %v", &wc)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("written data differs")
	}
}
