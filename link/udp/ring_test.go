package udp

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// ringPair opens an unprivileged sender on host ha and a privileged
// receiver, which reads its ring, over a veth of MTU 9000 whose GSO
// messages cross whole (superpackets, too long for a ring frame).
func ringPair(t *testing.T) (a, b *Link, addr link.Addr, ha *nettest.Host) {
	t.Helper()
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	a, b = openOn(t, ha, false), openOn(t, hb, true)
	testenv.Require(t, a.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	if b.rx.ring == nil {
		t.Fatal("the privileged link has no receive ring")
	}
	addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	return a, b, addr, ha
}

// xdpPair is ringPair with a receiver that reads an AF_XDP socket
// (Config.XDP) over a veth of Ethernet's MTU (XDP in veth's driver mode,
// which has the sender's kernel segment its GSO messages).
func xdpPair(t *testing.T) (a, b *Link, addr link.Addr, ha *nettest.Host) {
	t.Helper()
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	a = openOn(t, ha, false)
	if err := hb.Do(func() (err error) {
		b, err = New(Config{Addrs: []netip.Addr{hb.IPv4, hb.IPv6}, Ifindex: hb.Ifindex, XDP: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if b.raw == nil || b.raw.xsk == nil || b.rx.ring == nil {
		t.Fatal("the XDP link has no AF_XDP socket")
	}
	addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	return a, b, addr, ha
}

// pairFunc opens a sender and a receiver that reads frames (ringPair,
// xdpPair).
type pairFunc func(*testing.T) (a, b *Link, addr link.Addr, ha *nettest.Host)

// eachFrameSource runs f with each kind of receiver that reads frames:
// an AF_PACKET ring, an AF_XDP socket.
func eachFrameSource(t *testing.T, f func(t *testing.T, pair pairFunc)) {
	t.Run("ring", func(t *testing.T) { f(t, ringPair) })
	t.Run("xdp", func(t *testing.T) { f(t, xdpPair) })
}

// recvPSNs takes packets with TryRecv until want have come (or the wait
// ends) and returns their PSNs, in the order received.
func recvPSNs(t *testing.T, b *Link, want int) []wire.PSN {
	t.Helper()
	var psns []wire.PSN
	testenv.Poll(testenv.Slow, func() bool {
		bufs := linktest.NewBuffers(64)
		n, err := b.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:n] {
			psns = append(psns, wire.BTH(p.Buf[p.Off:p.Off+p.Len]).PSN())
		}
		return len(psns) >= want
	})
	return psns
}

// TestRingDelivers: a privileged link reads small packets from its ring's
// frames and longer ones, truncated there, whole from the socket's queue
// (TP_STATUS_COPY), in the order they came, each with its ICRC verified
// (process drops any other), and nothing mismatched.
func TestRingDelivers(t *testing.T) {
	a, b, addr, _ := ringPair(t)
	// Each round: a SEND of 4 bytes (a frame), then a WRITE of 16 packets:
	// its FIRST alone (its RETH makes it longer than the MIDDLEs) and one
	// superpacket of the 14 MIDDLEs and the LAST (both queued).
	const rounds = 20
	for i := range rounds {
		send(t, a, writeBatch(a.Headroom(), addr, wire.PSN(17*i), 0, 1), writeBatch(a.Headroom(), addr, wire.PSN(17*i+1), 16, 0))
	}
	checkPSNs(t, recvPSNs(t, b, 17*rounds), psnRange(0, 17*rounds-1)...)
	g := b.rx.ring
	t.Logf("from frames %d, from the queue %d, truncated %d, mismatched %d", g.framed.Load(), g.copied.Load(), g.truncated.Load(), g.mismatched.Load())
	if g.framed.Load() < rounds || g.copied.Load() < 2*rounds {
		t.Errorf("from frames %d (want ≥ %d), from the queue %d (want ≥ %d): a path this test is for was not taken",
			g.framed.Load(), rounds, g.copied.Load(), 2*rounds)
	}
	if n := g.truncated.Load() + g.mismatched.Load(); n != 0 {
		t.Errorf("%d packets lost or mismatched with the receiver keeping up", n)
	}
	if n := b.Stats().RxMalformed.Load(); n != 0 {
		t.Errorf("rx_malformed %d", n)
	}
}

// send sends each batch with its own Send, in order.
func send(t *testing.T, a *Link, batches ...[]link.Packet) {
	t.Helper()
	for _, batch := range batches {
		if _, err := a.Send(batch); err != nil {
			t.Fatal(err)
		}
	}
}

// inRing waits until n frames from the ring's head hold packets.
func inRing(t *testing.T, b *Link, n int32) {
	t.Helper()
	g := b.rx.ring
	if !testenv.Poll(testenv.Slow, func() bool {
		var k int32
		_ = b.raw.rc.Control(func(uintptr) {
			for i := range n {
				if g.Status((g.Head()+i)%int32(g.Frames()))&unix.TP_STATUS_USER != 0 {
					k++
				}
			}
		})
		return k == n
	}) {
		t.Fatalf("%d packets never reached the ring", n)
	}
}

func checkPSNs(t *testing.T, got []wire.PSN, want ...wire.PSN) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("received PSNs %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("received PSNs %v, want %v", got, want)
		}
	}
}

func psnRange(from, to int) []wire.PSN {
	var p []wire.PSN
	for i := from; i <= to; i++ {
		p = append(p, wire.PSN(i))
	}
	return p
}

// TestRingTruncatedNotQueued: a packet too long for a frame that the
// kernel truncates into one and cannot also queue (the socket's receive
// buffer is full) is a lost packet, counted in rx_drop_socket_full; its
// frame's partial bytes never reach the caller, and what follows arrives.
func TestRingTruncatedNotQueued(t *testing.T) {
	a, b, addr, _ := ringPair(t)
	// The smallest buffer the kernel allows: the first long packet's copy
	// is queued (nothing is), the second's is not (the first's is).
	if err := b.raw.rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 0) }); err != nil {
		t.Fatal(err)
	}
	// Two WRITE FIRSTs of 4 KiB, then a SEND of 4 bytes.
	send(t, a, writeBatch(a.Headroom(), addr, 0, 1, 0), writeBatch(a.Headroom(), addr, 1, 1, 0), writeBatch(a.Headroom(), addr, 2, 0, 1))
	inRing(t, b, 3)
	checkPSNs(t, recvPSNs(t, b, 2), 0, 2)
	if n := b.rx.ring.truncated.Load(); n != 1 {
		t.Errorf("truncated %d, want 1", n)
	}
	if n := b.Stats().RxSocketFull.Load(); n < 1 {
		t.Errorf("rx_drop_socket_full %d, want the lost packet counted", n)
	}
	if n := b.Stats().RxMalformed.Load(); n != 0 {
		t.Errorf("rx_malformed %d: the truncated frame was passed on", n)
	}
}

// TestRingKernelRefused: the kernel refuses a packet it reads from the
// socket's queue (EINVAL, as Linux 6.1 does for a UDP GRO superpacket
// behind PACKET_VNET_HDR) and drops it; the link counts it
// (rx_drop_kernel_refused), gives its frame back, and the frames and the
// queue stay paired: what follows arrives, nothing mismatched. The
// refusal comes after a packet read from a frame in the same look, so the
// error waits for the next (lateErr), as recvmmsg reports it.
func TestRingKernelRefused(t *testing.T) {
	a, b, addr, _ := ringPair(t)
	var calls atomic.Int32
	real := recvmmsg
	recvmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if calls.Add(1) == 1 {
			// As the kernel: the refused packet is consumed.
			if n, e := real(fd, hdrs[:1]); n != 1 || e != 0 {
				t.Errorf("the refused packet's copy: %d, %v", n, e)
			}
			return -1, unix.EINVAL
		}
		return real(fd, hdrs)
	}
	t.Cleanup(func() { recvmmsg = real })
	// A SEND (a frame), a WRITE FIRST alone (queued: refused), a WRITE of
	// 16 packets (two queued messages), a SEND.
	send(t, a, writeBatch(a.Headroom(), addr, 0, 0, 1), writeBatch(a.Headroom(), addr, 1, 1, 0),
		writeBatch(a.Headroom(), addr, 2, 16, 0), writeBatch(a.Headroom(), addr, 18, 0, 1))
	inRing(t, b, 5)
	checkPSNs(t, recvPSNs(t, b, 18), append([]wire.PSN{0}, psnRange(2, 18)...)...)
	if n := b.Stats().RxKernelRefused.Load(); n != 1 {
		t.Errorf("rx_drop_kernel_refused %d, want 1", n)
	}
	if n := b.rx.ring.mismatched.Load(); n != 0 {
		t.Errorf("%d queued packets were not their frame's", n)
	}
}

// TestRingHostile: what a peer sends to port 4791 reaches the same checks
// through the ring as through recvmmsg: a packet from the frames and one
// from the socket's queue with a wrong ICRC are dropped as rx_drop_bad_icrc,
// five bytes that are no BTH as rx_drop_malformed, and a good packet after
// them arrives alone.
func TestRingHostile(t *testing.T) {
	a, b, addr, ha := ringPair(t)
	// The test's packets carry ICRC 0 (the link computes it at Send): sent
	// raw, as a peer could, it is wrong.
	small := writeBatch(a.Headroom(), addr, 0, 0, 1)[0]
	long := writeBatch(a.Headroom(), addr, 1, 1, 0)[0] // 4 KiB: queued, not in a frame
	sendRaw(t, ha, addr, small.Buf[small.Off:small.Off+small.Len], long.Buf[long.Off:long.Off+long.Len], []byte{1, 2, 3, 4, 5})
	send(t, a, writeBatch(a.Headroom(), addr, 7, 0, 1))
	checkPSNs(t, recvPSNs(t, b, 1), 7)
	s := b.Stats()
	if n := s.RxBadICRC.Load(); n != 2 {
		t.Errorf("rx_drop_bad_icrc %d, want 2 (one from a frame, one from the queue)", n)
	}
	if n := s.RxMalformed.Load(); n != 1 {
		t.Errorf("rx_drop_malformed %d, want 1", n)
	}
	g := b.rx.ring
	if g.framed.Load() < 2 || g.copied.Load() < 1 {
		t.Errorf("from frames %d, from the queue %d: a path this test is for was not taken", g.framed.Load(), g.copied.Load())
	}
}

// sendRaw sends each payload from ha's namespace, through a UDP socket of
// its own, to the RoCE port of addr's destination: bytes as any peer may
// send them, not through a Link.
func sendRaw(t *testing.T, ha *nettest.Host, addr link.Addr, payloads ...[]byte) {
	t.Helper()
	dst := &net.UDPAddr{IP: addr.DstGID.Unmap().AsSlice(), Port: wire.RoCEv2Port}
	if err := ha.Do(func() error {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ha.IPv4.AsSlice()})
		if err != nil {
			return err
		}
		defer c.Close()
		for _, p := range payloads {
			if _, err := c.WriteToUDP(p, dst); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRingFragmented: an IPv4 datagram to the RoCE port that the sender's
// kernel fragmented (a peer's RoCE v2 packet larger than the path MTU)
// reaches the ring as a first fragment (more fragments set), which the
// link counts malformed and does not deliver (frameAddr, read once per
// message); its later fragments carry no UDP header and the socket's
// filter drops them. A packet after it is delivered.
func TestRingFragmented(t *testing.T) {
	a, b, addr, ha := ringPair(t)
	sendRaw(t, ha, addr, make([]byte, 12000)) // over the veth's 9000: fragmented
	send(t, a, writeBatch(a.Headroom(), addr, 3, 0, 1))
	checkPSNs(t, recvPSNs(t, b, 1), 3)
	if n := b.Stats().RxMalformed.Load(); n != 1 {
		t.Errorf("rx_drop_malformed %d, want 1 (the first fragment)", n)
	}
	if n := b.Stats().RxPackets.Load(); n != 1 {
		t.Errorf("%d packets delivered, want 1", n)
	}
}

// TestEmptyLookPlansNothing: a TryRecv that finds the ring empty does not
// lay out its read (plan), which in the lab's VMs cost a busy-polling
// client a sixth of its CPU; one that finds a frame delivers it, and takes
// it as it lies in the ring (ringDirect), without a plan either.
func TestEmptyLookPlansNothing(t *testing.T) {
	eachFrameSource(t, func(t *testing.T, pair pairFunc) {
		a, b, addr, _ := pair(t)
		bufs := linktest.NewBuffers(64)
		plans := b.rx.plans
		for range 100 {
			if n, err := b.TryRecv(bufs); n != 0 || err != nil {
				t.Fatalf("TryRecv of an empty ring: %d, %v", n, err)
			}
		}
		if got := b.rx.plans - plans; got != 0 {
			t.Errorf("100 empty looks planned %d reads, want 0", got)
		}
		send(t, a, writeBatch(a.Headroom(), addr, 5, 0, 1))
		inRing(t, b, 1)
		n, err := b.TryRecv(bufs)
		if n != 1 || err != nil {
			t.Fatalf("TryRecv of a ring holding a SEND: %d, %v", n, err)
		}
		if psn := wire.BTH(bufs[0].Buf[bufs[0].Off : bufs[0].Off+bufs[0].Len]).PSN(); psn != 5 {
			t.Errorf("PSN %d, want 5", psn)
		}
		if got := b.rx.plans - plans; got != 0 {
			t.Errorf("a look that found a frame planned %d reads, want 0", got)
		}
	})
}

// A busy poller's look at a ring takes no file reference: TryRecv answers
// from the ring's head under rxMu, without RawConn.Control, whether it
// finds nothing or a frame it takes as it lies (ringDirect).
func TestEmptyLookTakesNoFileRef(t *testing.T) {
	eachFrameSource(t, func(t *testing.T, pair pairFunc) {
		a, b, addr, _ := pair(t)
		bufs := linktest.NewBuffers(64)
		tries := b.rx.tries
		for range 100 {
			if n, err := b.TryRecv(bufs); n != 0 || err != nil {
				t.Fatalf("TryRecv of an empty ring: %d, %v", n, err)
			}
		}
		if got := b.rx.tries - tries; got != 0 {
			t.Errorf("100 empty looks went into the socket's Control %d times, want 0", got)
		}
		send(t, a, writeBatch(a.Headroom(), addr, 9, 0, 1))
		inRing(t, b, 1)
		if n, err := b.TryRecv(bufs); n != 1 || err != nil {
			t.Fatalf("TryRecv of a ring holding a SEND: %d, %v", n, err)
		}
		if got := b.rx.tries - tries; got != 0 {
			t.Errorf("a look that found a frame went into Control %d times, want 0", got)
		}
	})
}

// Pollers looking at the ring while the link closes: each look ends with
// nothing or net.ErrClosed, and none reads the ring after it is unmapped
// (a fault, which ends the test binary).
func TestEmptyLookDuringClose(t *testing.T) {
	eachFrameSource(t, func(t *testing.T, pair pairFunc) {
		for range 30 {
			_, b, _, _ := pair(t)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					bufs := linktest.NewBuffers(8)
					<-start
					for {
						n, err := b.TryRecv(bufs)
						if errors.Is(err, net.ErrClosed) {
							return
						}
						if n != 0 || err != nil {
							t.Errorf("TryRecv while closing: %d, %v", n, err)
							return
						}
					}
				}()
			}
			close(start)
			time.Sleep(time.Millisecond)
			b.Close()
			wg.Wait()
		}
	})
}

// Pending on a link with a ring looks at the ring's head, not through the
// socket's RawConn, and says what TryRecv would find.
func TestRingPendingTakesNoFileRef(t *testing.T) {
	eachFrameSource(t, func(t *testing.T, pair pairFunc) {
		a, b, addr, _ := pair(t)
		inqs := b.inqs.Load()
		for range 100 {
			if b.Pending() {
				t.Fatal("Pending of an empty ring said true")
			}
		}
		if got := b.inqs.Load() - inqs; got != 0 {
			t.Errorf("100 looks of Pending went through the socket %d times, want 0", got)
		}
		send(t, a, writeBatch(a.Headroom(), addr, 3, 0, 1))
		inRing(t, b, 1)
		if !b.Pending() {
			t.Error("Pending of a ring holding a SEND said false")
		}
		if n, err := b.TryRecv(linktest.NewBuffers(4)); n != 1 || err != nil {
			t.Fatalf("TryRecv of a ring holding a SEND: %d, %v", n, err)
		}
		if b.Pending() {
			t.Error("Pending said true once TryRecv had taken the SEND")
		}
		b.Close()
		if !b.Pending() {
			t.Error("Pending of a closed link said false: TryRecv would return net.ErrClosed")
		}
	})
}

// TestPlanFollowsReadyFrames: a TryRecv that finds k frames in the ring
// (fewer than a read's 64 messages) takes them as they lie (ringDirect),
// laying out no read; a RecvLocked (the receive goroutine's read) lays out
// k messages, not 64: planning 64 for the one packet a ping-pong brings
// cost as much as the engine's handling of it. Neither read is a full
// one, so neither asks the kernel for a drop count (a system call) on the
// look after it; a look that finds more frames than buffers takes as
// many as it has buffers for, in order.
func TestPlanFollowsReadyFrames(t *testing.T) {
	eachFrameSource(t, func(t *testing.T, pair pairFunc) {
		a, b, addr, _ := pair(t)
		bufs := linktest.NewBuffers(64)
		samples, plans := b.rx.drops.Samples, b.rx.plans
		psn := 0
		for _, k := range []int{1, 3, 1, 7} {
			for range k {
				send(t, a, writeBatch(a.Headroom(), addr, wire.PSN(psn), 0, 1))
				psn++
			}
			inRing(t, b, int32(k))
			got := recvPSNs(t, b, k)
			checkPSNs(t, got, psnRange(psn-k, psn-1)...)
			if b.rx.plans != plans {
				t.Errorf("looks at %d ready frames laid out a read (%d plans), want none: they take them from the ring as they lie", k, b.rx.plans-plans)
			}
			if n, err := b.TryRecv(bufs); n != 0 || err != nil {
				t.Fatalf("TryRecv after: %d, %v", n, err)
			}
		}
		for _, k := range []int{1, 3} {
			for range k {
				send(t, a, writeBatch(a.Headroom(), addr, wire.PSN(psn), 0, 1))
				psn++
			}
			inRing(t, b, int32(k))
			var mu sync.Mutex
			n, err := b.RecvLocked(bufs, &mu)
			if err != nil || n != k {
				t.Fatalf("RecvLocked of %d ready frames: %d, %v", k, n, err)
			}
			mu.Unlock()
			if b.rx.m != k {
				t.Errorf("RecvLocked's read of %d frames laid out %d messages", k, b.rx.m)
			}
		}
		if got := b.rx.drops.Samples - samples; got != 0 {
			t.Errorf("reads of every ready frame took %d drop samples, want 0", got)
		}
		// More frames than buffers: the read takes as many as it has buffers
		// for, and the next the rest.
		small := linktest.NewBuffers(4)
		for i := range 6 {
			send(t, a, writeBatch(a.Headroom(), addr, wire.PSN(psn+i), 0, 1))
		}
		inRing(t, b, 6)
		var got []wire.PSN
		for len(got) < 6 {
			n, err := b.TryRecv(small)
			if err != nil || n == 0 {
				t.Fatalf("TryRecv with %d of 6 taken: %d, %v", len(got), n, err)
			}
			for _, p := range small[:n] {
				got = append(got, wire.BTH(p.Buf[p.Off:p.Off+p.Len]).PSN())
			}
		}
		checkPSNs(t, got, psnRange(psn, psn+5)...)
	})
}

// TestRingFrameFor: a netdev of Ethernet's MTU gets frames that hold a
// whole packet, a jumbo or unknown one small frames.
func TestRingFrameFor(t *testing.T) {
	for _, tc := range []struct{ mtu, frame int }{
		{0, ringFrame}, {576, ringFrameWhole}, {1500, ringFrameWhole},
		{ringFrameWhole - ringFrameOverhead, ringFrameWhole}, {ringFrameWhole - ringFrameOverhead + 1, ringFrame},
		{9000, ringFrame}, {65536, ringFrame},
	} {
		if got := ringFrameFor(tc.mtu); got != tc.frame {
			t.Errorf("ringFrameFor(%d) = %d, want %d", tc.mtu, got, tc.frame)
		}
	}
}

// TestRingWholeFrames: on a netdev of MTU 1500 the ring's frames hold a
// whole data packet of path MTU 1024, so a WRITE sent one datagram a
// packet (as rxe sends, and as GRO leaves them where the kernel cannot
// give this socket a superpacket) is read from the frames, none from
// the socket's queue, in order, each ICRC verified: a packet of the same
// size with a wrong ICRC, read from a frame too, is dropped.
func TestRingWholeFrames(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	var a *Link
	if err := ha.Do(func() (err error) {
		a, err = New(Config{Addrs: []netip.Addr{ha.IPv4}, NoGSO: true})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b := openOn(t, hb, true)
	g := b.rx.ring
	if g == nil {
		t.Fatal("the privileged link has no receive ring")
	}
	if g.FrameSize() != ringFrameWhole {
		t.Fatalf("frames of %d bytes on a netdev of MTU 1500, want %d", g.FrameSize(), ringFrameWhole)
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	const n = 40
	var pkts []link.Packet
	for i := range n {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpWriteMiddle, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(i)}}
		f.Payload = make([]byte, 1024)
		for j := range f.Payload {
			f.Payload[j] = byte(i + j)
		}
		pkts = append(pkts, build(a.Headroom(), &f, addr))
	}
	// First a hostile copy of the first packet, sent raw with ICRC 0: it
	// too lands whole in a frame, and is dropped there.
	bad := pkts[0]
	sendRaw(t, ha, addr, bad.Buf[bad.Off:bad.Off+bad.Len])
	send(t, a, pkts)
	checkPSNs(t, recvPSNs(t, b, n), psnRange(0, n-1)...)
	if g.framed.Load() != n+1 || g.copied.Load() != 0 {
		t.Errorf("from frames %d (want %d), from the queue %d (want 0)", g.framed.Load(), n+1, g.copied.Load())
	}
	if s := b.Stats(); s.RxBadICRC.Load() != 1 || s.RxMalformed.Load() != 0 {
		t.Errorf("rx_drop_bad_icrc %d (want 1), rx_drop_malformed %d (want 0)", s.RxBadICRC.Load(), s.RxMalformed.Load())
	}
}
