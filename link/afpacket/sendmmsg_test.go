package afpacket

import (
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// sendPair opens a RoCE v2 link on each end of a fresh veth pair and
// returns A, B and a batch of n packets from A to B, "packet 0", ...
func sendPair(t *testing.T, n int) (*Link, *Link, []link.Packet) {
	t.Helper()
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	a, b := openOn(t, ha, true, netip.AddrFrom16(ha.IPv4.As16())), openOn(t, hb, true, netip.AddrFrom16(hb.IPv4.As16()))
	batch := make([]link.Packet, n)
	for i := range batch {
		batch[i] = linktest.TransportPacket(a.Headroom(), 0x11, wire.PSN(i), []byte(fmt.Sprintf("packet %d", i)))
		batch[i].Addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()),
			HopLimit: 64, UDPSrcPort: wire.UDSport(2)}
	}
	return a, b, batch
}

// recvPayloads receives n packets on l and returns their payloads.
func recvPayloads(t *testing.T, l *Link, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		bufs := linktest.NewBuffers(l.BatchSize())
		k, err := l.Recv(bufs)
		if err != nil {
			t.Fatalf("Recv after %d of %d packets: %v", len(got), n, err)
		}
		for _, g := range bufs[:k] {
			var w wire.Packet
			if err := w.ParseTransport(g.Transport(), wire.RoCEv2); err != nil {
				t.Fatal(err)
			}
			got = append(got, string(w.Payload()))
		}
	}
	return got
}

// heldSent waits until l holds no packet for a next hop (the first
// packet to b was held while ARP ran, and the goroutine that sent it has
// finished), so a test may replace sendmmsg.
func heldSent(t *testing.T, l *Link) {
	t.Helper()
	if !testenv.Poll(testenv.Slow, func() bool { return l.hold.n.Load() == 0 }) {
		t.Fatal("packets still held for their next hop")
	}
}

// hookSendmmsg replaces sendmmsg for the test with f, which gets the real
// one.
func hookSendmmsg(t *testing.T, f func(real func(uintptr, []unix.Mmsghdr) (int, unix.Errno), fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno)) {
	t.Helper()
	real := sendmmsg
	sendmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) { return f(real, fd, hdrs) }
	t.Cleanup(func() { sendmmsg = real })
}

// TestSendOneSyscallPerBatch: a Send of a full batch makes one sendmmsg
// (it made one sendmsg per packet, under the link's lock, which every
// other sender waits for), and the packets arrive, each once, in order.
func TestSendOneSyscallPerBatch(t *testing.T) {
	a, b, batch := sendPair(t, 64)
	// ARP first, so that Send's lookups find the MAC.
	if k, err := a.Send(batch[:1]); err != nil || k != 1 {
		t.Fatalf("Send = %d, %v", k, err)
	}
	recvPayloads(t, b, 1)
	heldSent(t, a)
	calls := 0
	hookSendmmsg(t, func(real func(uintptr, []unix.Mmsghdr) (int, unix.Errno), fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		calls++
		return real(fd, hdrs)
	})
	if k, err := a.Send(batch); err != nil || k != len(batch) {
		t.Fatalf("Send = %d, %v, want %d", k, err, len(batch))
	}
	if calls != 1 {
		t.Errorf("%d sendmmsg calls for a batch of %d, want 1", calls, len(batch))
	}
	for i, p := range recvPayloads(t, b, len(batch)) {
		if want := fmt.Sprintf("packet %d", i); p != want {
			t.Fatalf("packet %d: %q, want %q", i, p, want)
		}
	}
}

// TestSendSkipsRefusedFrame: a frame the kernel refuses in the middle of a
// batch is counted (tx_no_route) and the frames after it are still sent,
// in order; Send reports the frames sent.
func TestSendSkipsRefusedFrame(t *testing.T) {
	a, b, batch := sendPair(t, 10)
	if k, err := a.Send(batch[:1]); err != nil || k != 1 {
		t.Fatalf("Send = %d, %v", k, err)
	}
	recvPayloads(t, b, 1)
	heldSent(t, a)
	const refused = 4
	sentSoFar := 0
	hookSendmmsg(t, func(real func(uintptr, []unix.Mmsghdr) (int, unix.Errno), fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if sentSoFar < refused {
			// The kernel sends the frames before the refused one, then
			// stops, as sendmmsg(2) does at an error after a success.
			n, e := real(fd, hdrs[:refused-sentSoFar])
			sentSoFar += n
			return n, e
		}
		if sentSoFar == refused {
			sentSoFar++ // the refused frame: sendmmsg fails on its first message
			return -1, unix.EMSGSIZE
		}
		n, e := real(fd, hdrs)
		sentSoFar += n
		return n, e
	})
	noRoute := a.Stats().TxNoRoute.Load()
	if k, err := a.Send(batch); err != nil || k != len(batch)-1 {
		t.Fatalf("Send = %d, %v, want %d", k, err, len(batch)-1)
	}
	if d := a.Stats().TxNoRoute.Load() - noRoute; d != 1 {
		t.Errorf("tx_no_route grew by %d, want 1", d)
	}
	got := recvPayloads(t, b, len(batch)-1)
	j := 0
	for i := range batch {
		if i == refused {
			continue
		}
		if want := fmt.Sprintf("packet %d", i); got[j] != want {
			t.Fatalf("packet %d received: %q, want %q", j, got[j], want)
		}
		j++
	}
}
