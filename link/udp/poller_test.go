package udp

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestRecvLockedKeepsOrderAfterTryRecv: link.Poller promises the link's
// order to the two receivers that share a link, the device's receive
// goroutine (RecvLocked) and a goroutine polling a CQ (TryRecv). While
// RecvLocked sleeps, a TryRecv with few buffers takes a GRO superpacket
// and queues the segments that did not fit; a datagram that arrives next
// wakes RecvLocked, which must hand over the queued segments before it.
// It used to look at the queue only on entry and returned the new datagram
// first: READ responses reordered, which left a `roce perf read -u 0`
// client waiting forever in clean-clone CI run 10.
func TestRecvLockedKeepsOrderAfterTryRecv(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		t.Run(fam, func(t *testing.T) { testRecvLockedOrder(t, fam == "IPv6") })
	}
}

func testRecvLockedOrder(t *testing.T, v6 bool) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	a, b := openOn(t, ha, false), openOn(t, hb, false)
	testenv.Require(t, a.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	src, dst := ha.IPv4, hb.IPv4
	if v6 {
		src, dst = ha.IPv6, hb.IPv6
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(src.As16()), DstGID: netip.AddrFrom16(dst.As16()), HopLimit: 64}
	const psn0, writeLen = wire.PSN(100), 8
	send := func(pkts []link.Packet) {
		t.Helper()
		if _, err := a.Send(pkts); err != nil {
			t.Fatal(err)
		}
	}
	psns := func(pkts []link.Packet) []wire.PSN {
		var s []wire.PSN
		for _, p := range pkts {
			s = append(s, wire.BTH(p.Transport()[:wire.BTHLen]).PSN())
		}
		return s
	}
	// Warm up the path (neighbour resolution) and learn whether this
	// kernel hands the receiver superpackets at all (GRO).
	send(writeBatch(a.Headroom(), addr, 1, 0, 1))
	var warm []link.Packet
	if !testenv.Poll(testenv.Slow, func() bool {
		bufs := linktest.NewBuffers(4)
		n, err := b.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		warm = append(warm, bufs[:n]...)
		return len(warm) > 0
	}) {
		t.Fatal("the warm-up datagram never arrived")
	}

	// The poller takes three packets of a WRITE of 8 (a FIRST and a GSO
	// message of seven), so five segments are left queued in the link;
	// then a later datagram.
	r := linktest.RecvLockedAfterTryRecv(t, b,
		func() { send(writeBatch(a.Headroom(), addr, psn0, writeLen, 0)) },
		func() { send(writeBatch(a.Headroom(), addr, psn0+writeLen, 0, 1)) },
		func() int {
			b.rxMu.Lock()
			defer b.rxMu.Unlock()
			return len(b.rx.pend) - b.rx.pendNext
		}, writeLen+1)
	want := make([]wire.PSN, writeLen+1)
	for i := range want {
		want[i] = psn0 + wire.PSN(i)
	}
	if g := psns(r.All); !slices.Equal(g, want) {
		t.Errorf("PSNs in the order the two receivers got them: %v, want %v (TryRecv took %v, RecvLocked's first batch %v; segments queued by TryRecv: %d)",
			g, want, psns(r.Polled), psns(r.First), b.rx.nQueued)
	}
}

// TestPendingTellsWhatTryRecvWouldFind: Pending (link.PendingReporter) is
// what the engine asks before it takes its receive lock to poll, so it must
// never say false while a packet waits, in the socket or queued in the
// link after a TryRecv with too few buffers, and it must say false once
// everything is taken; it allocates nothing (a busy poll calls it in a
// loop).
func TestPendingTellsWhatTryRecvWouldFind(t *testing.T) {
	for _, priv := range []bool{false, true} {
		name := "unprivileged"
		if priv {
			name = "privileged"
		}
		t.Run(name, func(t *testing.T) {
			if priv {
				testenv.Root(t)
			}
			ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
			a, b := openOn(t, ha, false), openOn(t, hb, priv)
			addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
			// drained takes what TryRecv finds and reports whether it
			// found nothing and Pending then says so. Pending may say
			// true for frames TryRecv discards (a packet socket holds
			// what arrived before its filter was attached): those go.
			extra := 0
			drained := func() bool {
				bufs := linktest.NewBuffers(4)
				n, err := b.TryRecv(bufs)
				if err != nil {
					t.Fatal(err)
				}
				extra += n
				return n == 0 && !b.Pending()
			}
			if !testenv.Poll(testenv.Slow, drained) || extra != 0 {
				t.Fatalf("before anything was sent: TryRecv took %d packets, Pending() %v", extra, b.Pending())
			}
			if n := testing.AllocsPerRun(100, func() { b.Pending() }); n != 0 {
				t.Errorf("Pending allocates %v times a call, want 0", n)
			}
			const psn0, writeLen = wire.PSN(100), 8
			if _, err := a.Send(writeBatch(a.Headroom(), addr, psn0, writeLen, 0)); err != nil {
				t.Fatal(err)
			}
			if !testenv.Poll(testenv.Slow, b.Pending) {
				t.Fatal("Pending() never became true after a WRITE of 8 packets was sent")
			}
			var got []wire.PSN
			for len(got) < writeLen {
				// The rest may still be on its way into the socket (a
				// loaded host defers the veth's softirq): it must be
				// reported once it is there.
				if !testenv.Poll(testenv.Slow, b.Pending) {
					t.Fatalf("Pending() stayed false with %d of %d packets taken", len(got), writeLen)
				}
				bufs := linktest.NewBuffers(3)
				n, err := b.TryRecv(bufs)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range bufs[:n] {
					got = append(got, wire.BTH(p.Transport()[:wire.BTHLen]).PSN())
				}
			}
			want := make([]wire.PSN, writeLen)
			for i := range want {
				want[i] = psn0.Add(i)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("TryRecv took PSNs %v, want %v", got, want)
			}
			if !testenv.Poll(testenv.Slow, drained) || extra != 0 {
				t.Errorf("once every packet was taken: TryRecv took %d more, Pending() %v", extra, b.Pending())
			}
		})
	}
}
