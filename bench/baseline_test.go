package bench_test

// The raw-UDP baselines: what the kernel's UDP stack alone does over the
// same veth, with the same datagrams goroce sends, in the best ways a
// program can drive it. Sockets are IPv4, connected (the cheapest send
// path), with DF set and the 8 MiB buffers goroce's link asks for.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/wire"
)

const (
	basePort = 20000
	// gsoSegs is the most datagrams of dgramLen one GSO send carries: a
	// UDP datagram, even a GSO one, is at most 65535 bytes (udp_sendmsg).
	gsoSegs = 65507 / dgramLen
	// mmsgBatch is the most messages per sendmmsg/recvmmsg (goroce's link
	// batch size).
	mmsgBatch = 64
	groBuf    = 1 << 16
)

// BenchmarkUDPThroughput moves 64 KiB of payload per op as 16 datagrams of
// 4112 bytes (a RoCE v2 WRITE MIDDLE's UDP payload at path MTU 4096) from
// one namespace to the other, with 16 ops in flight (the receiver returns
// a credit per 64 KiB it has read), in four ways:
//
//   - plain: one send(2) per datagram, one recv(2) per datagram;
//   - sendmmsg: sendmmsg(2) and recvmmsg(2) of up to 64 datagrams;
//   - gso: sendmmsg of GSO messages (UDP_SEGMENT, up to 15 datagrams each),
//     recvmmsg of up to 64 datagrams;
//   - gso+gro: as gso, and the receiver sets UDP_GRO, so one recvmmsg
//     entry may return many datagrams back to back;
//   - gso+gro+roce (floorMode): as gso+gro, plus the work any user-space
//     RoCE must add to every byte, done by hand with no RDMA engine: the
//     sender copies each 4 KiB from a 1 MiB source ring (16 × 64 KiB, the
//     16 WRITEs in flight) into its datagram and computes a CRC-32 over the
//     datagram (the ICRC); the receiver checks each datagram's CRC-32 and
//     copies its payload into a 1 MiB destination ring (the MR). One
//     sendmmsg per 64 KiB, as goroce's transmit batches. It is not a
//     candidate for the best mode: it is the floor under RCWrite64K.
func BenchmarkUDPThroughput(b *testing.B) {
	ha, hb := newVeth(b)
	for i, mode := range append(slices.Clone(udpModes), floorMode) {
		b.Run(mode, func(b *testing.B) {
			benchUDPThroughput(b, ha, hb, mode, basePort+i)
		})
	}
}

// BenchmarkUDPRoundTrip64: a 64-byte datagram from A to B and back; ns/op
// is one round trip.
//
//   - blocking: each side, on an OS thread of its own, blocks in recv(2) on
//     a blocking socket;
//   - netpoll: each side is a goroutine reading Go's net.UDPConn, which
//     parks in the netpoller, as goroce's link does;
//   - busypoll: each side, on an OS thread of its own, spins on a
//     non-blocking recv(2);
//   - busypoll+ack (rttFloorMode): as busypoll, and every message is
//     acknowledged by a 20-byte datagram sent with the next message in
//     one sendmmsg, which the receiver reads and skips: the floor under
//     RCSendRecvRTT64 (4 datagrams per round trip, as RC's two SENDs and
//     two ACKs) with the CQ busy-polled;
//   - netpoll+ack (rttBlockingFloorMode): the same four datagrams and two
//     sendmmsg calls, each side a goroutine parked in the netpoller as in
//     netpoll: the floor under RCSendRecvRTT64/*/wait, whose goroutines
//     sleep in CQ.PollWait.
func BenchmarkUDPRoundTrip64(b *testing.B) {
	ha, hb := newVeth(b)
	for _, mode := range []string{"blocking", "netpoll", "busypoll", rttFloorMode, rttBlockingFloorMode} {
		b.Run(mode, func(b *testing.B) { benchUDPRTT(b, ha, hb, mode) })
	}
}

// udpSocket opens an IPv4 UDP socket in h's namespace, bound to
// h.IPv4:port and connected to peer:port.
func udpSocket(b *testing.B, h *nettest.Host, peer netip.Addr, port int, nonblock bool) int {
	b.Helper()
	fd := -1
	err := h.Do(func() error {
		typ := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
		if nonblock {
			typ |= unix.SOCK_NONBLOCK
		}
		var err error
		if fd, err = unix.Socket(unix.AF_INET, typ, 0); err != nil {
			return err
		}
		for _, o := range [][3]int{
			{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1},
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
			{unix.SOL_SOCKET, unix.SO_RCVBUF, 8 << 20},
			{unix.SOL_SOCKET, unix.SO_SNDBUF, 8 << 20},
		} {
			if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
				return err
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: h.IPv4.As4()}); err != nil {
			return err
		}
		return unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: peer.As4()})
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		b.Fatal(err)
	}
	return fd
}

func benchUDPThroughput(b *testing.B, ha, hb *nettest.Host, mode string, port int) {
	u := openUDPThroughput(b, ha, hb, mode, port)
	defer u.close()
	b.SetBytes(msgSize)
	var cpu0 time.Duration
	lost, err := u.run(b.N, func() { b.ResetTimer(); cpu0 = cpuTime() })
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	cpu := cpuTime() - cpu0
	record(b, msgSize, cpu)
	b.ReportMetric(100*lost, "lost%")
	if bad := u.r.badCRC.Load(); bad > 0 {
		b.Fatalf("%d datagrams arrived with a CRC-32 that does not match", bad)
	}
	if reads := u.r.reads.Load(); reads > 0 {
		b.ReportMetric(float64(u.r.bytes.Load())/dgramLen/float64(reads), "dgrams/read")
	}
}

// udpThroughput is a sender and a receiver socket and the receiving goroutine.
type udpThroughput struct {
	tx, rx int
	s      *udpSender
	r      *udpReceiver
	wg     sync.WaitGroup
}

func openUDPThroughput(b *testing.B, ha, hb *nettest.Host, mode string, port int) *udpThroughput {
	u := &udpThroughput{tx: udpSocket(b, ha, hb.IPv4, port, false), rx: udpSocket(b, hb, ha.IPv4, port, false)}
	// Wake the receiver now and then so it can stop.
	if err := unix.SetsockoptTimeval(u.rx, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 20000}); err != nil {
		b.Fatal(err)
	}
	if mode == "gso+gro" || isFloor(mode) {
		if err := unix.SetsockoptInt(u.rx, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
			b.Fatal(err)
		}
	}
	u.r = &udpReceiver{fd: u.rx, mode: mode, credits: make(chan struct{}, 4*window)}
	u.wg.Add(1)
	go func() { defer u.wg.Done(); u.r.run() }()
	u.s = newUDPSender(u.tx, mode)
	return u
}

func (u *udpThroughput) close() {
	u.r.stop.Store(true)
	u.wg.Wait()
	unix.Close(u.tx)
	unix.Close(u.rx)
}

// run sends n operations' datagrams, window operations in flight, and
// waits until the receiver has them all (or nothing more arrives for
// 200 ms). It calls start when the sending starts and returns the fraction
// of bytes lost.
func (u *udpThroughput) run(n int, start func()) (float64, error) {
	r := u.r
	base := r.bytes.Load()
	total := int64(n) * perMsg
	start()
	avail, sent := int64(window*perMsg), int64(0)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for sent < total {
		for avail == 0 {
			timer.Reset(200 * time.Millisecond)
			select {
			case <-r.credits:
				avail += perMsg
			case <-timer.C:
				avail += perMsg // assume a loss; lost% says how much
			}
		}
	drain:
		for {
			select {
			case <-r.credits:
				avail += perMsg
			default:
				break drain
			}
		}
		k := min(avail, total-sent)
		if err := u.s.send(int(k)); err != nil {
			return 0, err
		}
		avail -= k
		sent += k
	}
	want := total * dgramLen
	for last, at := r.bytes.Load()-base, time.Now(); r.bytes.Load()-base < want; {
		time.Sleep(20 * time.Microsecond)
		if v := r.bytes.Load() - base; v != last {
			last, at = v, time.Now()
		} else if time.Since(at) > 200*time.Millisecond {
			break
		}
	}
	// Let the next run start from a clean slate of credits.
	for len(r.credits) > 0 {
		<-r.credits
	}
	got := r.bytes.Load() - base
	return float64(want-got) / float64(want), nil
}

// udpSender sends n datagrams at a time in one of the modes.
type udpSender struct {
	fd    int
	mode  string
	buf   []byte
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	cmsgs []byte
	// floorMode: the source ring and the next offset in it.
	src    []byte
	srcOff int
}

func newUDPSender(fd int, mode string) *udpSender {
	s := &udpSender{fd: fd, mode: mode, buf: make([]byte, gsoSegs*dgramLen)}
	for i := range s.buf {
		s.buf[i] = byte(i)
	}
	s.hdrs = make([]unix.Mmsghdr, mmsgBatch)
	s.iovs = make([]unix.Iovec, mmsgBatch)
	cs := unix.CmsgSpace(2)
	s.cmsgs = make([]byte, mmsgBatch*cs)
	for i := range s.hdrs {
		s.iovs[i].Base = &s.buf[0]
		s.iovs[i].SetLen(dgramLen)
		s.hdrs[i].Hdr.Iov = &s.iovs[i]
		s.hdrs[i].Hdr.SetIovlen(1)
		if mode == "gso" || mode == "gso+gro" || isFloor(mode) {
			c := s.cmsgs[i*cs : (i+1)*cs]
			h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
			h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
			h.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], dgramLen)
			s.hdrs[i].Hdr.Control = &c[0]
			s.hdrs[i].Hdr.SetControllen(cs)
		}
	}
	if isFloor(mode) {
		s.buf = make([]byte, perMsg*dgramLen)
		s.src = make([]byte, window*msgSize)
		for i := range s.src {
			s.src[i] = byte(i * 7)
		}
	}
	return s
}

func (s *udpSender) send(n int) error {
	switch s.mode {
	case floorMode, floorImmMode:
		return s.sendFloor(n)
	case "plain":
		for range n {
			if _, err := unix.Write(s.fd, s.buf[:dgramLen]); err != nil {
				return err
			}
		}
		return nil
	case "sendmmsg":
		for n > 0 {
			k := min(n, mmsgBatch)
			m, err := sendmmsg(s.fd, s.hdrs[:k])
			if err != nil {
				return err
			}
			n -= m
		}
		return nil
	}
	for n > 0 { // GSO
		k := 0
		for n > 0 && k < len(s.hdrs) {
			segs := min(n, gsoSegs)
			s.iovs[k].SetLen(segs * dgramLen)
			n -= segs
			k++
		}
		for off := 0; off < k; {
			m, err := sendmmsg(s.fd, s.hdrs[off:k])
			if err != nil {
				return err
			}
			off += m
		}
	}
	return nil
}

// sendFloor sends n datagrams 64 KiB at a time: each datagram's payload
// copied from the source ring and its CRC-32 computed, then one sendmmsg
// of GSO messages (15 datagrams and 1).
func (s *udpSender) sendFloor(n int) error {
	for n > 0 {
		k := min(n, perMsg)
		for i := range k {
			d := s.buf[i*dgramLen : (i+1)*dgramLen]
			copy(d[wire.BTHLen:wire.BTHLen+pmtu], s.src[s.srcOff:s.srcOff+pmtu])
			s.srcOff = (s.srcOff + pmtu) % len(s.src)
			binary.BigEndian.PutUint32(d[dgramLen-wire.ICRCLen:], crc32.ChecksumIEEE(d[:dgramLen-wire.ICRCLen]))
		}
		m := 0
		for off := 0; off < k; {
			segs := min(k-off, gsoSegs)
			if s.mode == floorImmMode {
				// WRITE WITH IMMEDIATE's grouping: FIRST, the MIDDLEs,
				// LAST_WITH_IMMEDIATE (see floorImmMode).
				segs = 1
				if off > 0 && off < k-1 {
					segs = k - 1 - off
				}
			}
			s.iovs[m].Base = &s.buf[off*dgramLen]
			s.iovs[m].SetLen(segs * dgramLen)
			off += segs
			m++
		}
		for off := 0; off < m; {
			sent, err := sendmmsg(s.fd, s.hdrs[off:m])
			if err != nil {
				return err
			}
			off += sent
		}
		n -= k
	}
	return nil
}

func sendmmsg(fd int, hdrs []unix.Mmsghdr) (int, error) {
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return int(n), e
		}
		return int(n), nil
	}
}

func recvmmsg(fd int, hdrs []unix.Mmsghdr, flags int) (int, error) {
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// udpReceiver counts the bytes it reads and returns a credit per 64 KiB
// worth of datagrams.
type udpReceiver struct {
	fd      int
	mode    string
	credits chan struct{}
	stop    atomic.Bool
	bytes   atomic.Int64
	reads   atomic.Int64 // datagrams (or GRO batches) returned by the kernel
	badCRC  atomic.Int64 // floorMode: datagrams whose CRC-32 did not match
}

func (r *udpReceiver) run() {
	size, batch := vethMTU, mmsgBatch
	switch r.mode {
	case "plain":
		batch = 1
	case "gso+gro", floorMode, floorImmMode:
		size, batch = groBuf, 8
	}
	var dst []byte // floorMode: the destination ring
	dstOff := 0
	if isFloor(r.mode) {
		dst = make([]byte, window*msgSize)
	}
	bufs := make([]byte, size*batch)
	hdrs := make([]unix.Mmsghdr, batch)
	iovs := make([]unix.Iovec, batch)
	cs := unix.CmsgSpace(4)
	ctl := make([]byte, cs*batch)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*size]
		iovs[i].SetLen(size)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	per := int64(perMsg * dgramLen)
	var got, credited int64
	for !r.stop.Load() {
		var n int
		var err error
		if batch == 1 {
			var k int
			k, err = unix.Read(r.fd, bufs)
			if err == nil {
				got += int64(k)
				n = 1
			}
		} else {
			for i := range hdrs {
				hdrs[i].Hdr.Control = &ctl[i*cs]
				hdrs[i].Hdr.SetControllen(cs)
			}
			n, err = recvmmsg(r.fd, hdrs, 0)
			for i := range hdrs[:n] {
				got += int64(hdrs[i].Len)
				if dst == nil {
					continue
				}
				msg := bufs[i*size : i*size+int(hdrs[i].Len)]
				for ; len(msg) >= dgramLen; msg = msg[dgramLen:] {
					d := msg[:dgramLen]
					if crc32.ChecksumIEEE(d[:dgramLen-wire.ICRCLen]) != binary.BigEndian.Uint32(d[dgramLen-wire.ICRCLen:]) {
						r.badCRC.Add(1)
					}
					copy(dst[dstOff:dstOff+pmtu], d[wire.BTHLen:wire.BTHLen+pmtu])
					dstOff = (dstOff + pmtu) % len(dst)
				}
			}
		}
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		r.reads.Add(int64(n))
		for ; got-credited >= per; credited += per {
			select {
			case r.credits <- struct{}{}:
			default:
			}
		}
		r.bytes.Store(got) // after the credits: a sender that sees all bytes sees all credits

	}
}

func benchUDPRTT(b *testing.B, ha, hb *nettest.Host, mode string) {
	u := openUDPRTT(b, ha, hb, mode)
	defer u.close()
	var cpu0 time.Duration
	err := u.run(b.N, func() { b.ResetTimer(); cpu0 = cpuTime() })
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	record(b, 0, cpuTime()-cpu0)
}

// udpRTT is a pair of connected sockets and the echoing goroutine on B.
type udpRTT struct {
	ping         func([]byte) (int, error)
	sendA, sendB func([]byte) error
	closers      []func()
	done         chan error
	iters        chan int
	lock         bool // each side on an OS thread of its own
}

func openUDPRTT(b *testing.B, ha, hb *nettest.Host, mode string) *udpRTT {
	const port = basePort + 200
	u := &udpRTT{done: make(chan error, 1), iters: make(chan int)}
	var pong func([]byte) (int, error)
	switch mode {
	case "netpoll", rttBlockingFloorMode:
		dial := func(h *nettest.Host, peer netip.Addr) *net.UDPConn {
			var c *net.UDPConn
			err := h.Do(func() (err error) {
				c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(h.IPv4, port)),
					net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, port)))
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			u.closers = append(u.closers, func() { c.Close() })
			return c
		}
		ca, cb := dial(ha, hb.IPv4), dial(hb, ha.IPv4)
		u.ping, pong = ca.Read, cb.Read
		u.sendA = func(p []byte) error { _, err := ca.Write(p); return err }
		u.sendB = func(p []byte) error { _, err := cb.Write(p); return err }
		if mode == rttBlockingFloorMode {
			u.ping, pong = skipACKs(ca.Read), skipACKs(cb.Read)
			u.sendA, u.sendB = sendConnWithACK(b, ca), sendConnWithACK(b, cb)
		}
	default:
		nb := mode == "busypoll" || mode == rttFloorMode
		fa, fb := udpSocket(b, ha, hb.IPv4, port, nb), udpSocket(b, hb, ha.IPv4, port, nb)
		u.closers = append(u.closers, func() { unix.Close(fa); unix.Close(fb) })
		read := func(fd int) func([]byte) (int, error) {
			return func(p []byte) (int, error) {
				for {
					n, err := unix.Read(fd, p)
					if err == unix.EAGAIN || err == unix.EINTR {
						continue // busy-poll (or a signal)
					}
					if err == nil && n == rttACKLen && mode == rttFloorMode {
						continue // an ACK: wait for the message
					}
					return n, err
				}
			}
		}
		u.ping, pong = read(fa), read(fb)
		u.sendA = func(p []byte) error { _, err := unix.Write(fa, p); return err }
		u.sendB = func(p []byte) error { _, err := unix.Write(fb, p); return err }
		if mode == rttFloorMode {
			u.sendA, u.sendB = sendWithACK(fa), sendWithACK(fb)
		}
	}
	// B echoes n datagrams for every n it is told. Blocking and
	// busy-polling sides get an OS thread each; netpoll ones do not, as a
	// goroutine locked to a thread is woken through an extra hand-off.
	u.lock = mode != "netpoll" && mode != rttBlockingFloorMode
	go func() {
		if u.lock {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		buf := make([]byte, 2048)
		for n := range u.iters {
			var err error
			for range n {
				var k int
				if k, err = pong(buf); err != nil {
					break
				}
				if err = u.sendB(buf[:k]); err != nil {
					break
				}
			}
			u.done <- err
		}
	}()
	if err := u.run(10, func() {}); err != nil { // resolve neighbours before timing
		u.close()
		b.Fatal(err)
	}
	return u
}

// rttFloorMode is BenchmarkUDPRoundTrip64's busy-poll with the datagrams
// an RC SEND/RECV round trip cannot do without: each message is
// acknowledged, and each side sends its ACK of the message it received in
// the same sendmmsg as its next message (the cheapest an RC transport can
// do: no ACK on its own syscall). The floor under RCSendRecvRTT64.
const rttFloorMode = "busypoll+ack"

// rttBlockingFloorMode is rttFloorMode's datagrams with netpoll's waiting:
// the floor under a round trip whose two sides sleep until a packet comes
// (RCSendRecvRTT64's wait modes: CQ.PollWait).
const rttBlockingFloorMode = "netpoll+ack"

// skipACKs wraps a read function to skip the ACK-sized datagrams.
func skipACKs(read func([]byte) (int, error)) func([]byte) (int, error) {
	return func(p []byte) (int, error) {
		for {
			n, err := read(p)
			if err == nil && n == rttACKLen {
				continue
			}
			return n, err
		}
	}
}

// sendConnWithACK is sendWithACK on a Go UDP socket: the sendmmsg runs in
// the socket's RawConn.Write, which waits in the netpoller if the socket's
// buffer is full.
func sendConnWithACK(b *testing.B, c *net.UDPConn) func([]byte) error {
	rc, err := c.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var send func([]byte) error
	var msg []byte
	var serr error
	write := func(fd uintptr) bool {
		if send == nil {
			send = sendWithACK(int(fd))
		}
		serr = send(msg)
		return !errors.Is(serr, unix.EAGAIN)
	}
	return func(p []byte) error {
		msg = p
		if err := rc.Write(write); err != nil {
			return err
		}
		return serr
	}
}

// rttACKLen is the size of an RC ACK's UDP payload: BTH, AETH, ICRC.
const rttACKLen = wire.BTHLen + wire.AETHLen + wire.ICRCLen

// sendWithACK returns a send function that sends an ACK-sized datagram and
// then the message, in one sendmmsg.
func sendWithACK(fd int) func([]byte) error {
	ack := make([]byte, rttACKLen)
	hdrs := make([]unix.Mmsghdr, 2)
	iovs := make([]unix.Iovec, 2)
	iovs[0].Base = &ack[0]
	iovs[0].SetLen(len(ack))
	for i := range hdrs {
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
	}
	return func(p []byte) error {
		iovs[1].Base = &p[0]
		iovs[1].SetLen(len(p))
		for off := 0; off < 2; {
			n, err := sendmmsg(fd, hdrs[off:])
			if err != nil {
				return err
			}
			off += n
		}
		return nil
	}
}

func (u *udpRTT) close() {
	close(u.iters)
	for _, f := range u.closers {
		f()
	}
}

// run does n round trips from the calling goroutine, calling start before
// the first.
func (u *udpRTT) run(n int, start func()) error {
	if u.lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	msg, buf := make([]byte, rttSize), make([]byte, 2048)
	u.iters <- n
	start()
	for range n {
		if err := u.sendA(msg); err != nil {
			return err
		}
		if k, err := u.ping(buf); err != nil || k != rttSize {
			return fmt.Errorf("pong: %d bytes, %v", k, err)
		}
	}
	return <-u.done
}
