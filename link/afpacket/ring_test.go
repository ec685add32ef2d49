package afpacket

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/wire"
)

// ringPair opens a RoCE v2 sender on link/udp (unprivileged: it sends
// multi-packet messages as UDP GSO messages, which cross the veth whole)
// in A and a raw link with its receive ring in B, over a veth of MTU 9000,
// and returns them with the address from A to B.
func ringPair(t *testing.T) (*udp.Link, *Link, link.Addr, *nettest.Host) {
	t.Helper()
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	var tx *udp.Link
	if err := ha.Do(func() (err error) {
		tx, err = udp.New(udp.Config{Addrs: []netip.Addr{mapped(ha.IPv4)}, MTU: 9000 - 48, Zone: ha.Ifindex})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	testenv.Require(t, tx.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	rx := openOn(t, hb, true, mapped(hb.IPv4))
	if rx.rx.ring == nil {
		t.Fatal("the link has no receive ring")
	}
	a := link.Addr{Version: wire.RoCEv2, SrcGID: mapped(ha.IPv4), DstGID: mapped(hb.IPv4), HopLimit: 64}
	return tx, rx, a, ha
}

// sendAll sends each batch with its own Send, in order.
func sendAll(t *testing.T, l link.Link, batches ...[]link.Packet) {
	t.Helper()
	for _, b := range batches {
		if n, err := l.Send(b); n != len(b) || err != nil {
			t.Fatalf("Send = %d of %d, %v", n, len(b), err)
		}
	}
}

// takePSNs takes packets with TryRecv until want have come (or the wait
// ends), checks each payload's bytes (linktest.WriteBatch's: the PSN's low
// byte) and returns the PSNs in the order received.
func takePSNs(t *testing.T, l *Link, want int) []wire.PSN {
	t.Helper()
	var psns []wire.PSN
	testenv.Poll(testenv.Slow, func() bool {
		bufs := linktest.NewBuffers(64)
		n, err := l.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, pk := range bufs[:n] {
			var p wire.Packet
			if err := p.ParseTransport(pk.Transport(), wire.RoCEv2); err != nil {
				t.Fatal(err)
			}
			psn := p.BTH().PSN()
			if pl := p.Payload(); len(pl) == 0 || pl[0] != byte(psn) {
				t.Fatalf("PSN %d: payload does not start with its PSN's byte", psn)
			}
			psns = append(psns, psn)
		}
		return len(psns) >= want
	})
	return psns
}

func psnRange(from, to int) []wire.PSN {
	var p []wire.PSN
	for i := from; i <= to; i++ {
		p = append(p, wire.PSN(i))
	}
	return p
}

// TestRingDelivers: the link reads packets whole from its ring's frames
// (a SEND, a WRITE FIRST of 4 KiB) and superpackets, truncated there, from
// the socket's queue (TP_STATUS_COPY), in the order they came, every
// packet's ICRC verified; nothing truncated or mismatched.
func TestRingDelivers(t *testing.T) {
	tx, rx, a, _ := ringPair(t)
	// Each round: a SEND of 4 bytes, then a WRITE of 16 packets: its
	// FIRST alone (its RETH makes it longer than the MIDDLEs) and one
	// superpacket of the 14 MIDDLEs and the LAST.
	const rounds = 20
	for i := range rounds {
		sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, wire.PSN(17*i), 0, 1), linktest.WriteBatch(tx.Headroom(), a, wire.PSN(17*i+1), 16, 0))
	}
	if got, want := takePSNs(t, rx, 17*rounds), psnRange(0, 17*rounds-1); !slices.Equal(got, want) {
		t.Fatalf("received PSNs %v, want %v", got, want)
	}
	g := rx.rx.ring
	t.Logf("from frames %d, from the queue %d, truncated %d, mismatched %d", g.framed.Load(), g.copied.Load(), g.truncated.Load(), g.mismatched.Load())
	if g.framed.Load() < 2*rounds || g.copied.Load() < rounds {
		t.Errorf("from frames %d (want ≥ %d), from the queue %d (want ≥ %d): a path this test is for was not taken",
			g.framed.Load(), 2*rounds, g.copied.Load(), rounds)
	}
	if n := g.truncated.Load() + g.mismatched.Load(); n != 0 {
		t.Errorf("%d packets lost or mismatched with the receiver keeping up", n)
	}
	if s := rx.Stats(); s.RxMalformed.Load()+s.RxBadICRC.Load() != 0 {
		t.Errorf("rx_drop_malformed %d, rx_drop_bad_icrc %d", s.RxMalformed.Load(), s.RxBadICRC.Load())
	}
}

// TestRingTruncatedNotQueued: a superpacket the kernel truncates into a
// frame and cannot also queue (the socket's receive buffer is full) is
// lost, counted in rx_drop_socket_full; its frame's partial bytes never
// reach the caller, and what follows arrives.
func TestRingTruncatedNotQueued(t *testing.T) {
	tx, rx, a, _ := ringPair(t)
	// The smallest buffer the kernel allows: the first superpacket's copy
	// is queued (nothing is), the second's is not (the first's is).
	if err := rx.rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 0) }); err != nil {
		t.Fatal(err)
	}
	// Two WRITEs of 4 packets (a FIRST and a superpacket of three each),
	// then a SEND.
	sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 0, 4, 0), linktest.WriteBatch(tx.Headroom(), a, 4, 4, 0), linktest.WriteBatch(tx.Headroom(), a, 8, 0, 1))
	if !testenv.Poll(testenv.Slow, func() bool {
		var k int
		_ = rx.rc.Control(func(uintptr) {
			g := rx.rx.ring
			for i := range int32(5) {
				if g.Status((g.Head()+i)%int32(g.Frames()))&unix.TP_STATUS_USER != 0 {
					k++
				}
			}
		})
		return k == 5
	}) {
		t.Fatal("the five frames never reached the ring")
	}
	if got, want := takePSNs(t, rx, 6), []wire.PSN{0, 1, 2, 3, 4, 8}; !slices.Equal(got, want) {
		t.Fatalf("received PSNs %v, want %v", got, want)
	}
	if n := rx.rx.ring.truncated.Load(); n != 1 {
		t.Errorf("truncated %d, want 1", n)
	}
	if n := rx.Stats().RxSocketFull.Load(); n < 1 {
		t.Errorf("rx_drop_socket_full %d, want the lost superpacket counted", n)
	}
	if n := rx.Stats().RxMalformed.Load() + rx.Stats().RxBadICRC.Load(); n != 0 {
		t.Errorf("%d malformed or bad ICRC: the truncated frame was passed on", n)
	}
}

// TestRingHostile: what a peer sends to port 4791 reaches the same checks
// through the ring as through recvmsg: a packet from a frame and a
// datagram too long for a frame (read from the socket's queue), each with
// a wrong ICRC, are dropped as rx_drop_bad_icrc, five bytes that are no
// BTH as rx_drop_malformed, and a good packet after them arrives alone.
func TestRingHostile(t *testing.T) {
	tx, rx, a, ha := ringPair(t)
	// The test's packets carry ICRC 0 (the link computes it at Send): sent
	// raw, as a peer could, it is wrong.
	small := linktest.WriteBatch(tx.Headroom(), a, 0, 0, 1)[0]
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 1},
		Payload: make([]byte, 6000)} // longer than any frame: queued
	long := linktest.Build(0, &f, a)
	dst := &net.UDPAddr{IP: a.DstGID.Unmap().AsSlice(), Port: wire.RoCEv2Port}
	if err := ha.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ha.IPv4.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		for _, p := range [][]byte{small.Transport(), long.Transport(), {1, 2, 3, 4, 5}} {
			if _, err := c.WriteToUDP(p, dst); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 7, 0, 1))
	if got := takePSNs(t, rx, 1); !slices.Equal(got, []wire.PSN{7}) {
		t.Fatalf("received PSNs %v, want [7]", got)
	}
	s := rx.Stats()
	if n := s.RxBadICRC.Load(); n != 2 {
		t.Errorf("rx_drop_bad_icrc %d, want 2 (one from a frame, one from the queue)", n)
	}
	if n := s.RxMalformed.Load(); n != 1 {
		t.Errorf("rx_drop_malformed %d, want 1", n)
	}
	g := rx.rx.ring
	if g.framed.Load() < 2 || g.copied.Load() < 1 {
		t.Errorf("from frames %d, from the queue %d: a path this test is for was not taken", g.framed.Load(), g.copied.Load())
	}
}

// TestRecvLockedKeepsOrderAfterTryRecv: link.Poller promises the link's
// order to its two receivers, the device's receive goroutine (RecvLocked)
// and a goroutine polling a CQ (TryRecv). While RecvLocked sleeps, a
// TryRecv with three buffers takes a superpacket and queues the segments
// that did not fit; a packet that arrives next wakes RecvLocked, which
// must hand over the queued segments before it.
func TestRecvLockedKeepsOrderAfterTryRecv(t *testing.T) {
	tx, rx, a, _ := ringPair(t)
	// A WRITE of 8 packets (a FIRST and a superpacket of seven), then a
	// SEND.
	r := linktest.RecvLockedAfterTryRecv(t, rx,
		func() { sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 100, 8, 0)) },
		func() { sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 108, 0, 1)) },
		func() int {
			rx.rxMu.Lock()
			defer rx.rxMu.Unlock()
			return len(rx.rx.pend) - rx.rx.next
		}, 9)
	if got, want := psnsOf(r.All), psnRange(100, 108); !slices.Equal(got, want) {
		t.Errorf("PSNs in the order the two receivers got them: %v, want %v (TryRecv took %v, RecvLocked's first batch %v)",
			got, want, psnsOf(r.Polled), psnsOf(r.First))
	}
}

// psnsOf is the packets' PSNs.
func psnsOf(pkts []link.Packet) []wire.PSN {
	var s []wire.PSN
	for _, p := range pkts {
		s = append(s, wire.BTH(p.Transport()[:wire.BTHLen]).PSN())
	}
	return s
}

// TestPendingAndEmptyLook: Pending says what TryRecv would find, without
// allocating, and TryRecv on an empty link finds nothing without a
// system call (the ring's status word) and without allocating.
func TestPendingAndEmptyLook(t *testing.T) {
	tx, rx, a, _ := ringPair(t)
	bufs := linktest.NewBuffers(4)
	if !testenv.Poll(testenv.Slow, func() bool {
		n, err := rx.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		return n == 0 && !rx.Pending()
	}) {
		t.Fatal("never empty")
	}
	if n := testing.AllocsPerRun(100, func() { rx.Pending() }); n != 0 {
		t.Errorf("Pending allocates %v times a call, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = rx.TryRecv(bufs) }); n != 0 {
		t.Errorf("an empty TryRecv allocates %v times a call, want 0", n)
	}
	sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 5, 0, 1))
	if !testenv.Poll(testenv.Slow, rx.Pending) {
		t.Fatal("Pending() never became true after a SEND was sent")
	}
	if got := takePSNs(t, rx, 1); !slices.Equal(got, []wire.PSN{5}) {
		t.Fatalf("received PSNs %v, want [5]", got)
	}
	if rx.Pending() {
		t.Error("Pending() true once the SEND was taken")
	}
}

// TestNoBuffers: Recv, TryRecv and RecvLocked given no buffers return 0
// at once, with a packet waiting or not (they used to loop forever: a
// read that fills every buffer it was given reports that it did).
func TestNoBuffers(t *testing.T) {
	tx, rx, a, _ := ringPair(t)
	sendAll(t, tx, linktest.WriteBatch(tx.Headroom(), a, 1, 0, 1))
	if !testenv.Poll(testenv.Slow, rx.Pending) {
		t.Fatal("the SEND never arrived")
	}
	done := make(chan string, 3)
	var mu sync.Mutex
	go func() {
		n, err := rx.Recv(nil)
		done <- fmt.Sprintf("Recv: %d, %v", n, err)
	}()
	go func() {
		n, err := rx.TryRecv(nil)
		done <- fmt.Sprintf("TryRecv: %d, %v", n, err)
	}()
	go func() {
		n, err := rx.RecvLocked(nil, &mu)
		done <- fmt.Sprintf("RecvLocked: %d, %v", n, err)
	}()
	for range 3 {
		select {
		case r := <-done:
			if !strings.HasSuffix(r, ": 0, <nil>") {
				t.Error(r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a receive with no buffers did not return")
		}
	}
	if got := takePSNs(t, rx, 1); !slices.Equal(got, []wire.PSN{1}) {
		t.Fatalf("received PSNs %v, want [1]", got)
	}
}
