package afpacket

import (
	"testing"
	"time"

	"github.com/goroce/goroce/link/pktstat"
)

// TestSocketFullCounted: the packet socket's own drops (a receiver that
// fell behind a burst) are counted as rx_drop_socket_full, as link/udp's
// privileged link counts them. They were never read here: `roce perf
// write -q 64` between two namespaces lost 3% of its packets on the way
// into the server's socket (sent_pkts 799,098 at the client, rcvd_pkts
// 773,933 at the server) while the counter said 0.
func TestSocketFullCounted(t *testing.T) {
	a, b, batch := sendPair(t, 64)
	// ARP first: while it runs, what Send holds for b is bounded
	// (holdBytes), and the rest would be dropped before the socket.
	if k, err := a.Send(batch[:1]); err != nil || k != 1 {
		t.Fatalf("Send = %d, %v", k, err)
	}
	recvPayloads(t, b, 1)
	heldSent(t, a)
	// 128,000 frames while b reads nothing: beyond its ring's 4,096
	// frames (and, without a ring, its socket's 16 MiB: 8 MiB forced,
	// doubled by the kernel, of about 1 KiB per frame).
	const batches = 2000
	for range batches {
		if _, err := a.Send(batch); err != nil {
			t.Fatal(err)
		}
	}
	c := receiver(t, b)
	got := 0
	for {
		if _, ok := recvOne(c, 500*time.Millisecond); !ok {
			break
		}
		got++
	}
	// Stop the receiver before reading its counts: its last empty look
	// wrote them.
	b.Close()
	for range c {
	}
	sent := batches * len(batch)
	drops := int(b.Stats().RxSocketFull.Load())
	t.Logf("sent %d frames, received %d, rx_drop_socket_full %d; %d reads filled every buffer, %d PACKET_STATISTICS samples",
		sent, got, drops, b.rx.drops.FullReads, b.rx.drops.Samples)
	if got >= sent {
		t.Fatalf("received all %d frames: the socket never overflowed, the test proves nothing", got)
	}
	if drops == 0 {
		t.Errorf("received %d of %d frames and counted no socket drop", got, sent)
	}
	if got+drops > sent {
		t.Errorf("received %d and counted %d drops: more than the %d frames sent", got, drops, sent)
	}
	if b.rx.drops.FullReads > 2*pktstat.DropsEvery && b.rx.drops.Samples > b.rx.drops.FullReads/pktstat.DropsEvery+1 {
		t.Errorf("%d samples for %d full reads, want at most one per %d and one when drained", b.rx.drops.Samples, b.rx.drops.FullReads, pktstat.DropsEvery)
	}
}
