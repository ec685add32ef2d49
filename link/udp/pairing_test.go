package udp_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// pairingNetwork returns the network of two devices on a fresh veth pair
// of the given MTU, each on a UDP link configured as package host
// configures one (addresses, MTU, zone, and the netdev for a privileged
// receive), A's receive mode modeA ("privileged": AF_PACKET; "xdp":
// AF_XDP; "unprivileged": the UDP socket), B's modeB; v6 picks the IPv6
// GIDs.
func pairingNetwork(mtu int, modeA, modeB string, v6 bool) verbstest.NetworkFunc {
	return func(tb testing.TB) (a, b verbstest.Endpoint) {
		ha, hb := nettest.VethPair(tb, nettest.Options{MTU: mtu})
		ends := [2]*verbstest.Endpoint{&a, &b}
		for i, h := range []*nettest.Host{ha, hb} {
			name := []string{"rxe0", "rxe1"}[i]
			mode := []string{modeA, modeB}[i]
			priv := mode != "unprivileged"
			ip := netip.AddrFrom16(h.IPv4.As16())
			if v6 {
				ip = h.IPv6
			}
			cfg := udp.Config{Addrs: []netip.Addr{ip}, MTU: mtu - 48, Zone: h.Ifindex}
			if priv {
				cfg.Ifindex = h.Ifindex
			}
			cfg.XDP = mode == "xdp"
			var u *udp.Link
			if err := h.Do(func() (err error) {
				u, err = udp.New(cfg)
				return err
			}); err != nil {
				tb.Fatal(err)
			}
			gid := verbs.GIDEntry{GID: ip, Type: verbs.GIDTypeRoCEv2, Netdev: h.Ifname}
			d, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: u, MAC: h.MAC, GIDs: []verbs.GIDEntry{gid},
				ActiveMTU: verbs.MTUFromBytes(mtu - 80)}) // rxe's RXE_MAX_HDR_LENGTH, as host.ActiveMTU
			if err != nil {
				u.Close()
				tb.Fatal(err)
			}
			tb.Cleanup(func() { d.Close() })
			if u.Privileged() != priv {
				tb.Fatalf("%s: Privileged() %v, want %v", name, u.Privileged(), priv)
			}
			if !u.GSO() {
				testenv.Require(tb, false, "UDP GSO (UDP_SEGMENT, Linux 4.18)")
			}
			tb.Cleanup(func() {
				s := u.Stats()
				tb.Logf("%s (%s): sent %d packets in %d GSO messages; received %d, %d with the IPv4 ID solved for",
					name, mode, s.TxPackets.Load(), u.GSOMessages.Load(), s.RxPackets.Load(), u.IDSolved.Load())
				if s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 || s.RxNotForUs.Load() != 0 || s.TxNoRoute.Load() != 0 {
					tb.Errorf("%s: received %d with a bad ICRC, %d malformed, %d not for us; %d unsendable",
						name, s.RxBadICRC.Load(), s.RxMalformed.Load(), s.RxNotForUs.Load(), s.TxNoRoute.Load())
				}
				if u.GSOMessages.Load() == 0 || u.GSOFallbacks.Load() != 0 {
					tb.Errorf("%s: %d GSO messages, %d GSO fallbacks: the test is for GSO", name, u.GSOMessages.Load(), u.GSOFallbacks.Load())
				}
			})
			*ends[i] = verbstest.Endpoint{Dev: d, GID: gid, GIDIndex: 0}
		}
		return a, b
	}
}

// TestPairings: RC RDMA WRITEs and SENDs of 4 KiB to 4 MiB, and a window
// of 64 KiB WRITEs in flight, from A to B and back, over a veth between
// two namespaces, for every pairing of the UDP link's privileged
// (AF_PACKET) and unprivileged (UDP socket) receive modes, RoCE v2 over
// IPv4 and IPv6, at path MTU 4096 (veth MTU 9000) and 1024 (veth MTU 1500,
// where a 4 KiB SEND is one GSO message of four 1040-byte segments), and
// at 1024 an XDP (AF_XDP) receiver facing another and an unprivileged
// one (an XDP program on a veth takes GSO off its peer, whose kernel then
// segments). The senders use GSO; every byte must arrive, every WR succeed (a receiver
// that drops a packet shape every time ends in RETRY_EXC_ERR within
// seconds, the timeout being 67 ms), and no receiver may count a bad ICRC.
func TestPairings(t *testing.T) {
	testenv.Root(t)
	for _, path := range []struct {
		vethMTU int
		mtu     verbs.MTU
		rounds  int // of the window
		modes   [][2]string
	}{
		{9000, verbs.MTU4096, 4, [][2]string{{"privileged", "privileged"}, {"privileged", "unprivileged"}, {"unprivileged", "privileged"}, {"unprivileged", "unprivileged"}}},
		// AF_XDP frames hold an Ethernet MTU.
		{1500, verbs.MTU1024, 1, [][2]string{{"privileged", "privileged"}, {"privileged", "unprivileged"}, {"unprivileged", "privileged"}, {"unprivileged", "unprivileged"},
			{"xdp", "xdp"}, {"xdp", "unprivileged"}}},
	} {
		for _, fam := range []string{"IPv4", "IPv6"} {
			for _, m := range path.modes {
				name := fmt.Sprintf("mtu%d/%s/%s-%s", path.mtu.Bytes(), fam, m[0], m[1])
				netName := "udp-pairing/" + name
				verbstest.RegisterNetwork(netName, pairingNetwork(path.vethMTU, m[0], m[1], fam == "IPv6"))
				t.Run(name, func(t *testing.T) { testPairing(t, netName, path.mtu, path.rounds) })
			}
		}
	}
}

func testPairing(t *testing.T, netName string, mtu verbs.MTU, rounds int) {
	p := verbstest.NewPair(t, verbstest.Options{Net: netName, MTU: mtu,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1},
		// A lost packet is retried after 67 ms (or more: the engine waits
		// at least four smoothed RTTs), 7 times.
		Tune: func(rtr, rts *verbs.QPAttr) { rts.Timeout, rts.RetryCnt = 14, 7 }})
	sizes := []int{4096, 4128, 4097, 4112, 6000, 8193, 64 << 10, 256<<10 + 100, 4 << 20}
	total := 0
	for _, n := range sizes {
		total += n
	}
	for dir, s := range []*verbstest.Side{&p.A, &p.B} {
		r := &p.B
		if dir == 1 {
			r = &p.A
		}
		src, dst := make([]byte, 2*total), make([]byte, 2*total)
		for i := range src {
			src[i] = byte(i*7 + i>>11 + dir)
		}
		smr, err := s.PD.RegMR(src, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		rmr, err := r.PD.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, n := range sizes {
			// An RDMA WRITE into the first half, a SEND into the second.
			if err := s.QP.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{smr.SGE(off, n)}, RemoteAddr: rmr.Addr() + uint64(off), RKey: rmr.RKey()}); err != nil {
				t.Fatal(err)
			}
			if err := r.QP.PostRecv(verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{rmr.SGE(total+off, n)}}); err != nil {
				t.Fatal(err)
			}
			if err := s.QP.PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{smr.SGE(total+off, n)}}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []uint64{1, 3} {
				wc := verbstest.Poll(t, s.CQ, 30*time.Second)
				if wc.Status != verbs.WCSuccess || wc.WRID != want {
					t.Fatalf("direction %d, %d bytes: send completion %v, want WR %d successful", dir, n, &wc, want)
				}
			}
			wc := verbstest.Poll(t, r.RCQ, 30*time.Second)
			if wc.Status != verbs.WCSuccess || int(wc.ByteLen) != n {
				t.Fatalf("direction %d, %d bytes: receive completion %v", dir, n, &wc)
			}
			off += n
		}
		// A window of WRITEs in flight, as a bandwidth test keeps it.
		const win, wsz = 32, 64 << 10
		wsrc, wdst := make([]byte, win*wsz), make([]byte, win*wsz)
		for i := range wsrc {
			wsrc[i] = byte(i*13 + i>>9 + dir)
		}
		wsmr, err := s.PD.RegMR(wsrc, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		wrmr, err := r.PD.RegMR(wdst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		for round := range rounds {
			for i := range win {
				if err := s.QP.PostSend(verbs.SendWR{WRID: uint64(100 + i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{wsmr.SGE(i*wsz, wsz)}, RemoteAddr: wrmr.Addr() + uint64(i*wsz), RKey: wrmr.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			for range win {
				wc := verbstest.Poll(t, s.CQ, 30*time.Second)
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("direction %d, window round %d: %v", dir, round, &wc)
				}
			}
		}
		// A SEND after the WRITEs: its receive completion orders the
		// responder's writes before the check (for the race detector).
		if err := r.QP.PostRecv(verbs.RecvWR{WRID: 4, SGList: []verbs.SGE{rmr.SGE(0, 1)}}); err != nil {
			t.Fatal(err)
		}
		if err := s.QP.PostSend(verbs.SendWR{WRID: 5, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{smr.SGE(0, 1)}}); err != nil {
			t.Fatal(err)
		}
		if wc := verbstest.Poll(t, s.CQ, 30*time.Second); wc.Status != verbs.WCSuccess {
			t.Fatalf("direction %d: %v", dir, &wc)
		}
		if wc := verbstest.Poll(t, r.RCQ, 30*time.Second); wc.Status != verbs.WCSuccess {
			t.Fatalf("direction %d: %v", dir, &wc)
		}
		if !bytes.Equal(wsrc, wdst) {
			t.Fatalf("direction %d: the windowed WRITEs' data differs", dir)
		}
		if !bytes.Equal(src, dst) {
			i := 0
			for src[i] == dst[i] {
				i++
			}
			t.Fatalf("direction %d: the data differs first at byte %d", dir, i)
		}
	}
	for _, s := range []*verbstest.Side{&p.A, &p.B} {
		// Retransmissions are logged, not failed: on a loaded machine a
		// timer can fire before a late ACK, without any packet lost.
		c := s.Dev.Counters().Snapshot()
		t.Logf("%s: retrans_pkts %d, retry_exceeded_err %d", s.Dev.Name(), c["retrans_pkts"], c["retry_exceeded_err"])
		if c["retry_exceeded_err"] != 0 {
			t.Errorf("%s: retry_exceeded_err %d", s.Dev.Name(), c["retry_exceeded_err"])
		}
	}
}
