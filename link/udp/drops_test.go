package udp

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/pktstat"
	"github.com/goroce/goroce/wire"
)

// takeAll takes what b holds with TryRecv until a look finds nothing and
// returns how many packets it took.
func takeAll(t *testing.T, b *Link) (got int) {
	t.Helper()
	for {
		bufs := linktest.NewBuffers(64)
		n, err := b.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return got
		}
		got += n
	}
}

// TestSocketFullCounted: a privileged link whose AF_PACKET socket
// overflowed (the receiver fell behind a sender's burst) counts the
// kernel's drops as rx_drop_socket_full, so `roce stat` shows why the
// sender retransmits. They were invisible: the UDP socket's drop-all
// filter makes the kernel's UDP counters count every datagram, and the
// packet socket's own drops were never read (a helper found thousands per
// `roce perf write -q 64` run with `ss -0 -m`).
func TestSocketFullCounted(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	a, b := openOn(t, ha, false), openOn(t, hb, true)
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	recvAll := func() int { return takeAll(t, b) }
	// A packet the receiver keeps up with: nothing dropped.
	if _, err := a.Send(writeBatch(a.Headroom(), addr, 1, 0, 1)); err != nil {
		t.Fatal(err)
	}
	if !testenv.Poll(testenv.Slow, func() bool { return recvAll() > 0 }) {
		t.Fatal("the first packet never arrived")
	}
	if n := b.Stats().RxSocketFull.Load(); n != 0 {
		t.Fatalf("rx_drop_socket_full %d with nothing dropped", n)
	}
	// 48 MiB while the receiver reads nothing: three times the socket's
	// 16 MiB (8 MiB forced, doubled by the kernel).
	const batches = 750
	for i := range batches {
		if _, err := a.Send(writeBatch(a.Headroom(), addr, wire.PSN(16*i), 16, 0)); err != nil {
			t.Fatal(err)
		}
	}
	got := recvAll()
	drops := b.Stats().RxSocketFull.Load()
	t.Logf("sent %d packets, received %d, rx_drop_socket_full %d (superpackets)", 16*batches, got, drops)
	if drops == 0 {
		t.Errorf("received %d of %d packets and counted no socket drop", got, 16*batches)
	}
	if got >= 16*batches {
		t.Errorf("received all %d packets: the socket never overflowed, the test proves nothing", got)
	}
	// The drops were counted although most full reads did not ask the
	// kernel: one in pktstat.DropsEvery did, and the read that found the
	// backlog gone.
	full, samples := b.rx.drops.FullReads, b.rx.drops.Samples
	t.Logf("%d reads filled every buffer, %d PACKET_STATISTICS samples", full, samples)
	if full < 2*pktstat.DropsEvery {
		t.Fatalf("only %d full reads: the test proves nothing about sampling", full)
	}
	if max := full/pktstat.DropsEvery + 1; samples > max {
		t.Errorf("%d samples for %d full reads, want at most %d", samples, full, max)
	}
}
