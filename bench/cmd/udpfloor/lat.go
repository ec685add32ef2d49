package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// The latency floor (-lat): the floor under `ib_send_lat -s 64` and
// `ibv_rc_pingpong -s 64` between two machines, as bench/'s
// UDPRoundTrip64/busypoll+ack is inside one process. A round trip is the
// four datagrams an RC SEND/RECV ping-pong cannot do without: the client's
// SEND, the server's ACK of it, the server's SEND back and the client's ACK
// of that. Each side sends its ACK of the message it received in the same
// sendmmsg(2) as its next message (the cheapest an RC transport can do), and
// busy-polls for the next datagram, as perftest and ibv_rc_pingpong poll
// their CQs: by default an AF_PACKET receive ring (ring.go), as goroce's
// link, so that an empty look is a load from memory; with -rx socket a
// recvfrom(2) on the UDP socket per look; with -block both wait in
// recvfrom(2) instead. The ACK and the next message leave as one UDP GSO
// message (the message first, the shorter ACK its last segment), as
// goroce's link sends an answer and the ACK it holds: one trip through the
// kernel's stack for both; with -gso=false as two datagrams of one
// sendmmsg; with -acknow each ACK leaves alone the moment its message
// arrives and the next message alone after it, two sendmmsg calls per
// side and round trip, as Linux rxe acknowledges (from the kernel, before
// the program sees the message). With one P (GOMAXPROCS 1, as in the
// lab's one-vCPU VMs) the sendmmsg is a raw system call, as goroce's link
// makes it (link/udp, mmsg.go): an ordinary one tells the scheduler, and
// sysmon hands the P to another thread whenever a send outlasts its tick,
// which under TCG most do; -entersyscall sends the ordinary way. A reader
// that gets them unsegmented (over loopback or a veth, which carry GSO
// packets whole) splits them at the message's length, the segment size.
// Per datagram each side computes a CRC-32 (the ICRC) when it sends and
// checks it when it receives, and copies a message's payload out of a
// source buffer and into a destination one (the MRs). No PSNs checked, no
// retransmission (a datagram lost ends the run with an error), no verbs.
//
// The client prints both tools' reports: perftest's latency table (the time
// between consecutive posts, halved, as ib_send_lat's t_typical) and
// ibv_rc_pingpong's "iters in" line (the whole run over the iterations).

const (
	opSendOnly = 0x04 // BTH opcode of an RC SEND ONLY
	opAck      = 0x11 // and of an RC ACKNOWLEDGE
	aethLen    = 4
	ackLen     = bthLen + aethLen + icrcLen
	// latTail is how many of the slowest samples perftest leaves out of
	// its latency report (print_report_lat: LAT_MEASURE_TAIL).
	latTail = 2
	// yieldEvery empty polls the spinner yields, so that the control
	// connection's goroutine runs on a machine of one vCPU. The spinner
	// is not locked to its thread: a locked goroutine's yield hands the P
	// to another thread and back (two context switches), which made the
	// floor's round trips in the lab's one-vCPU VMs slower than goroce's.
	yieldEvery = 256
)

// latPeer is one side of the ping-pong: its socket, the datagrams it sends
// (an ACK and a message, one sendmmsg) and what it has received.
type latPeer struct {
	fd       int
	size     int
	src, dst []byte
	ack, msg []byte
	rbuf     []byte
	hdrs     [2]unix.Mmsghdr
	iovs     [2]unix.Iovec
	psn      uint32
	block    bool // wait in recvfrom(2) rather than spin
	ring     *rxRing
	raw4     unix.RawSockaddrInet4 // the server's peer, as sendmmsg takes it
	raw6     unix.RawSockaddrInet6
	to       unix.Sockaddr // -pktinfo's client: the server, named in every datagram
	cmsg     []byte        // -pktinfo: IP_PKTINFO or IPV6_PKTINFO with the source
	acks     int64         // ACKs received
	badCRC   int64
	gsoSent  int64 // messages sent with their ACK as one GSO message
	rawSent  int64 // sendmmsg calls made raw
	// rawSend: sendmmsg is a raw system call (one P, unless
	// -entersyscall), as goroce's link makes it: an ordinary one lets
	// sysmon hand the P to another thread while a long send lasts.
	rawSend bool
	// ackNow: each ACK leaves alone the moment its message arrives, the
	// next message alone after it (-acknow), as rxe's responder ACKs.
	ackNow bool
	// gso: the ACK and the message go as one UDP GSO message, gsoHdr,
	// whose control holds UDP_SEGMENT (and IP_PKTINFO with -pktinfo).
	gso     bool
	gsoHdr  [1]unix.Mmsghdr
	gsoIovs [2]unix.Iovec
	gsoCmsg []byte
	// rest is what is left of the datagram or GSO packet read last (its
	// segments not yet taken), from its sender; held: its ring frame is
	// not released yet.
	rest []byte
	from unix.Sockaddr
	held bool
}

func newLatPeer(fd, size int) *latPeer {
	l := &latPeer{fd: fd, size: size, src: make([]byte, size), dst: make([]byte, size),
		ack: make([]byte, ackLen), msg: make([]byte, bthLen+size+icrcLen), rbuf: make([]byte, 1<<16)}
	for i := range l.src {
		l.src[i] = byte(i * 7)
	}
	l.ack[0], l.msg[0] = opAck, opSendOnly
	for i, b := range [][]byte{l.ack, l.msg} {
		l.iovs[i].Base = &b[0]
		l.iovs[i].SetLen(len(b))
		l.hdrs[i].Hdr.Iov = &l.iovs[i]
		l.hdrs[i].Hdr.SetIovlen(1)
	}
	return l
}

// sendAckAndMsg sends the ACK of the peer's last message (when ack) and the
// next message, built from src, in one sendmmsg to the socket's peer (to,
// when the socket is not connected).
func (l *latPeer) sendAckAndMsg(ack bool, to unix.Sockaddr) error {
	first := 0
	if ack {
		l.sealAck()
	} else {
		first = 1
	}
	l.psn++
	binary.BigEndian.PutUint32(l.msg[8:], l.psn)
	copy(l.msg[bthLen:], l.src)
	binary.BigEndian.PutUint32(l.msg[bthLen+l.size:], wire.UpdateCRC32(0, l.msg[:bthLen+l.size]))
	hdrs, last := l.hdrs[:], 2
	if ack && l.gso {
		hdrs, first, last = l.gsoHdr[:], 0, 1
		l.gsoSent++
	}
	return l.send(hdrs[first:last], to)
}

// sendAck sends the ACK of the peer's last message alone, to the socket's
// peer (to, when the socket is not connected).
func (l *latPeer) sendAck(to unix.Sockaddr) error {
	l.sealAck()
	return l.send(l.hdrs[:1], to)
}

// send sends hdrs in sendmmsg calls, each naming to (or l.to) when the
// socket is not connected, and counts the raw calls.
func (l *latPeer) send(hdrs []unix.Mmsghdr, to unix.Sockaddr) error {
	if to == nil {
		to = l.to
	}
	if to != nil {
		name, n, err := l.raw(to)
		if err != nil {
			return err
		}
		for i := range hdrs {
			hdrs[i].Hdr.Name, hdrs[i].Hdr.Namelen = (*byte)(name), n
		}
	}
	var t0 int64
	if l.ring != nil {
		t0 = l.ring.turn.start()
	}
	calls, err := sendAll(l.fd, hdrs, l.rawSend, 0)
	if l.ring != nil {
		l.ring.turn.sent(t0)
	}
	if l.rawSend {
		l.rawSent += int64(calls)
	}
	return err
}

// sealAck puts l's PSN count in its ACK (nothing checks it: the floor
// checks no PSNs) and the ACK's CRC-32.
func (l *latPeer) sealAck() {
	binary.BigEndian.PutUint32(l.ack[8:], l.psn)
	binary.BigEndian.PutUint32(l.ack[bthLen+aethLen:], wire.UpdateCRC32(0, l.ack[:bthLen+aethLen]))
}

// awaitMsg waits for the next message, counting and checking the ACKs on
// the way, and returns the sender's address, or errStopped when stop is set
// while it waits. It reads the socket (spinning on a non-blocking one, or
// waiting in recvfrom with -block), or the ring when the peer has one.
func (l *latPeer) awaitMsg(stop *atomic.Bool) (unix.Sockaddr, error) {
	for {
		if err := l.fill(stop); err != nil {
			return nil, err
		}
		// The next segment: a GSO packet that arrived whole holds
		// segments of the message's length, the last maybe shorter (the
		// ACK); a datagram is one segment.
		d := l.segment()
		if d == nil { // an ACK, counted, or a bad CRC-32
			continue
		}
		if n := len(d); n != len(l.msg) {
			return nil, fmt.Errorf("a message of %d bytes, want %d", n, len(l.msg))
		}
		copy(l.dst, d[bthLen:bthLen+l.size])
		return l.from, nil
	}
}

// fill reads the next datagram into rest when all of the last is taken.
func (l *latPeer) fill(stop *atomic.Bool) error {
	if len(l.rest) > 0 {
		return nil
	}
	l.release()
	d, from, err := l.next(stop)
	if err != nil {
		return err
	}
	l.rest, l.from, l.held = d, from, true
	return nil
}

// segment takes the next segment of rest: it counts an ACK or a bad CRC-32
// and returns nil, or returns a message.
func (l *latPeer) segment() []byte {
	n := min(len(l.rest), len(l.msg))
	d := l.rest[:n]
	l.rest = l.rest[n:]
	if n < bthLen+icrcLen || wire.UpdateCRC32(0, d[:n-icrcLen]) != binary.BigEndian.Uint32(d[n-icrcLen:]) {
		l.badCRC++
		return nil
	}
	if d[0] == opAck {
		l.acks++
		return nil
	}
	return d
}

// awaitAcks takes datagrams until want ACKs have come, for at most a
// second: the ACK of the client's last message comes after the server's
// last message, in the same GSO packet or the datagram after it.
func (l *latPeer) awaitAcks(want int64) error {
	var stop atomic.Bool
	t := time.AfterFunc(time.Second, func() { stop.Store(true) })
	defer t.Stop()
	for l.acks < want {
		if err := l.fill(&stop); errors.Is(err, errStopped) {
			return fmt.Errorf("%d of %d ACKs came", l.acks, want)
		} else if err != nil {
			return err
		}
		if l.segment() != nil {
			return errors.New("a message after the last")
		}
	}
	l.release()
	return nil
}

// latCounts is what a side counted in a run.
type latCounts struct{ acks, badCRC, gsoSent, rawSent int64 }

func (l *latPeer) counts() latCounts { return latCounts{l.acks, l.badCRC, l.gsoSent, l.rawSent} }

// release gives back the datagram next returned, once all of it is taken.
func (l *latPeer) release() {
	if l.held {
		l.rest, l.held = nil, false
		l.done()
	}
}

// next is the next datagram's UDP payload, the reader's until done.
func (l *latPeer) next(stop *atomic.Bool) ([]byte, unix.Sockaddr, error) {
	if l.ring != nil {
		return l.ring.next(stop)
	}
	var name unix.RawSockaddrInet6
	flags := uintptr(unix.MSG_DONTWAIT)
	if l.block {
		flags = 0
	}
	for polls := 1; ; polls++ {
		nl := uint32(unsafe.Sizeof(name))
		n, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(l.fd), uintptr(unsafe.Pointer(&l.rbuf[0])), uintptr(len(l.rbuf)),
			flags, uintptr(unsafe.Pointer(&name)), uintptr(unsafe.Pointer(&nl)))
		if e == unix.EAGAIN || e == unix.EINTR {
			if l.block || polls%yieldEvery == 0 {
				if stop != nil && stop.Load() {
					return nil, nil, errStopped
				}
				runtime.Gosched()
			}
			continue
		}
		if e != 0 {
			return nil, nil, fmt.Errorf("recvfrom: %w", e)
		}
		return l.rbuf[:n], peerOf(&name), nil
	}
}

// done releases the datagram next returned.
func (l *latPeer) done() {
	if l.ring != nil {
		l.ring.done()
	}
}

var errStopped = errors.New("stopped")

// newLatPeerFor is the peer on fd as p asks: waiting in recvfrom (-block),
// spinning on the socket (-rx socket) or on a ring (-rx ring).
func newLatPeerFor(fd int, p params) (*latPeer, error) {
	l := newLatPeer(fd, p.size)
	l.block = p.block
	l.ackNow = p.ackNow
	l.rawSend = runtime.GOMAXPROCS(0) == 1 && !p.entersyscall
	local, err := localOf(fd)
	if err != nil {
		return nil, err
	}
	if p.pktinfo {
		l.setPktinfo(local.Addr())
	}
	if p.gso {
		if err := l.setGSO(); err != nil {
			return nil, err
		}
	}
	if p.block || p.rx == "socket" {
		return l, nil
	}
	if p.rx == "xdp" {
		if l.ring, err = newRxXSK(fd, local); err != nil {
			return nil, fmt.Errorf("-rx xdp: %w", err)
		}
		return l, nil
	}
	if l.ring, err = newRxRing(fd, local); err != nil {
		return nil, fmt.Errorf("-rx ring: %w", err)
	}
	return l, nil
}

// setPktinfo gives each datagram l sends a control message naming src as
// its source, as goroce's UDP link does (link/udp txControl): the kernel
// then routes each datagram by its own addresses.
func (l *latPeer) setPktinfo(src netip.Addr) {
	var lvl, typ, n int
	if src.Unmap().Is4() {
		lvl, typ, n = unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo
	} else {
		lvl, typ, n = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo
	}
	sp := unix.CmsgSpace(n)
	l.cmsg = make([]byte, 2*sp)
	for i := range l.hdrs {
		c := l.cmsg[i*sp : (i+1)*sp]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level, h.Type = int32(lvl), int32(typ)
		h.SetLen(unix.CmsgLen(n))
		d := c[unix.CmsgLen(0):]
		if src.Unmap().Is4() {
			a := src.Unmap().As4()
			copy(d[4:8], a[:]) // in_pktinfo's ipi_spec_dst
		} else {
			a := src.As16()
			copy(d[0:16], a[:])
		}
		l.hdrs[i].Hdr.Control = &c[0]
		l.hdrs[i].Hdr.SetControllen(sp)
	}
}

// setGSO makes l send the ACK and the message as one UDP GSO message: the
// message first (the segment size), the ACK after it, with the control
// message the two datagrams had (IP_PKTINFO, -pktinfo) and UDP_SEGMENT.
func (l *latPeer) setGSO() error {
	if _, err := unix.GetsockoptInt(l.fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT); err != nil {
		return fmt.Errorf("-gso: this kernel has no UDP GSO (UDP_SEGMENT, Linux 4.18): %w; run with -gso=false", err)
	}
	var pk []byte
	if l.cmsg != nil {
		pk = l.cmsg[:len(l.cmsg)/2] // the message's IP_PKTINFO
	}
	sp := unix.CmsgSpace(2)
	l.gsoCmsg = make([]byte, len(pk)+sp)
	copy(l.gsoCmsg, pk)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&l.gsoCmsg[len(pk)]))
	h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(l.gsoCmsg[len(pk)+unix.CmsgLen(0):], uint16(len(l.msg)))
	for i, b := range [][]byte{l.msg, l.ack} {
		l.gsoIovs[i].Base = &b[0]
		l.gsoIovs[i].SetLen(len(b))
	}
	m := &l.gsoHdr[0].Hdr
	m.Iov = &l.gsoIovs[0]
	m.SetIovlen(2)
	m.Control = &l.gsoCmsg[0]
	m.SetControllen(len(l.gsoCmsg))
	l.gso = true
	return nil
}

func (l *latPeer) close() {
	l.release()
	if l.ring != nil {
		l.ring.close()
	}
}

// setWait makes fd non-blocking for a busy poll, or blocking with a
// receive timeout (so that a waiting server sees its stop) for -block.
func setWait(fd int, block bool) error {
	if err := unix.SetNonblock(fd, !block); err != nil || !block {
		return err
	}
	return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
}

// raw is what sendmmsg takes for a peer's address, in l's own memory (no
// allocation per message).
func (l *latPeer) raw(sa unix.Sockaddr) (unsafe.Pointer, uint32, error) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		l.raw4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&l.raw4.Port))[:], uint16(a.Port))
		return unsafe.Pointer(&l.raw4), uint32(unsafe.Sizeof(l.raw4)), nil
	case *unix.SockaddrInet6:
		l.raw6 = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr, Scope_id: a.ZoneId}
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&l.raw6.Port))[:], uint16(a.Port))
		return unsafe.Pointer(&l.raw6), uint32(unsafe.Sizeof(l.raw6)), nil
	}
	return nil, 0, fmt.Errorf("address %v: not IPv4 or IPv6", sa)
}

// latServe answers every message with its ACK and a message of the same
// size until stop is set; it returns how many it answered.
func latServe(l *latPeer, stop *atomic.Bool) (answered int64, badCRC int64, err error) {
	for {
		from, err := l.awaitMsg(stop)
		if errors.Is(err, errStopped) {
			return answered, l.badCRC, nil
		}
		if err != nil {
			return answered, l.badCRC, err
		}
		if l.ackNow {
			if err := l.sendAck(from); err != nil {
				return answered, l.badCRC, err
			}
		}
		if err := l.sendAckAndMsg(!l.ackNow, from); err != nil {
			return answered, l.badCRC, err
		}
		answered++
	}
}

// latClient makes p.n round trips on the connected socket fd and returns
// the time of each post and of the end.
func latClient(fd int, p params, to unix.Sockaddr) (posted []time.Time, end time.Time, c latCounts, err error) {
	if err := setWait(fd, p.block); err != nil {
		return nil, end, c, err
	}
	l, err := newLatPeerFor(fd, p)
	if err != nil {
		return nil, end, c, err
	}
	defer l.close()
	l.to = to
	posted = make([]time.Time, 0, p.n)
	for i := range p.n {
		posted = append(posted, time.Now())
		if err := l.sendAckAndMsg(i > 0 && !l.ackNow, nil); err != nil {
			return posted, end, l.counts(), err
		}
		// A lost datagram would spin here for ever: the run's caller
		// bounds it (bench/vm.sh runs the client under timeout(1)).
		if _, err := l.awaitMsg(nil); err != nil {
			return posted, end, l.counts(), err
		}
		if l.ackNow {
			if err := l.sendAck(nil); err != nil {
				return posted, end, l.counts(), err
			}
		}
	}
	end = time.Now()
	if err := l.awaitAcks(int64(p.n)); err != nil {
		return posted, end, l.counts(), err
	}
	if l.ackNow {
		return posted, end, l.counts(), nil // its ACK left on arrival
	}
	// The server's last message is ACKed, as an RC peer would.
	l.sealAck()
	if l.to != nil {
		unix.Sendto(fd, l.ack, 0, l.to)
	} else {
		unix.Write(fd, l.ack)
	}
	return posted, end, l.counts(), nil
}

// latReport prints perftest's latency table (print_report_lat: the time
// between consecutive posts, halved, sorted, the slowest latTail left out)
// and ibv_rc_pingpong's "iters in" line.
func latReport(out io.Writer, size int, posted []time.Time, end time.Time) {
	n := len(posted)
	all := append(slices.Clone(posted), end)
	delta := make([]float64, n)
	for i := range delta {
		delta[i] = float64(all[i+1].Sub(all[i]).Nanoseconds()) / 1e3 / 2
	}
	slices.Sort(delta)
	m := max(n-latTail, 1)
	if m == n {
		m = n - 1
	}
	median := delta[m/2]
	if m%2 == 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	}
	sum := 0.0
	for _, d := range delta[:m] {
		sum += d
	}
	avg := sum / float64(m)
	var sq float64
	for _, d := range delta[:m] {
		sq += (d - avg) * (d - avg)
	}
	pct := func(q float64) float64 { return delta[min(int(math.Ceil(float64(m)*q)), n-1)] }
	fmt.Fprintln(out, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
	fmt.Fprintf(out, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, n, delta[0], delta[m], median, avg, math.Sqrt(sq/float64(m)), pct(0.99), pct(0.999))
	secs := end.Sub(posted[0]).Seconds()
	usec := secs * 1e6
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", int64(2*n*size), secs, float64(2*n*size)*8/usec)
	fmt.Fprintf(out, "%d iters in %.2f seconds = %.2f usec/iter\n", n, secs, usec/float64(n))
}

// serveLat answers the client's messages on fd until its "end" line, then
// tells it how many it answered and how many datagrams failed their CRC.
func serveLat(c io.Writer, rd *bufio.Reader, fd int, p params) error {
	// The peer, its ring and its socket's filter in place before the
	// client is told to go: a datagram that came before them would be in
	// the socket's queue, not the ring.
	if err := setWait(fd, p.block); err != nil {
		return err
	}
	l, err := newLatPeerFor(fd, p)
	if err != nil {
		return err
	}
	defer l.close()
	var stop atomic.Bool
	type result struct {
		answered, bad int64
		err           error
	}
	done := make(chan result, 1)
	go func() {
		a, b, err := latServe(l, &stop)
		done <- result{a, b, err}
	}()
	if _, err := io.WriteString(c, "go\n"); err != nil {
		return err
	}
	rd.ReadString('\n')
	stop.Store(true)
	r := <-done
	if r.err != nil {
		return r.err
	}
	_, err = fmt.Fprintf(c, "%d %d %d %d\n", r.answered, r.bad, l.gsoSent, l.rawSent)
	return err
}

// clientLat runs the ping-pong, tells the server it is over and prints the
// reports.
func clientLat(c io.Writer, rd *bufio.Reader, fd int, p params, data netip.AddrPort, out io.Writer) error {
	var to unix.Sockaddr
	if p.pktinfo {
		to = sockaddr(data)
	}
	posted, end, cc, err := latClient(fd, p, to)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(c, "end\n"); err != nil {
		return err
	}
	var answered int64
	var sc latCounts
	if _, err := fmt.Fscanln(rd, &answered, &sc.badCRC, &sc.gsoSent, &sc.rawSent); err != nil {
		return fmt.Errorf("the server's report: %w", err)
	}
	latReport(out, p.size, posted, end)
	fmt.Fprintf(out, "udpfloor: sent as one GSO message with their ACK: %d messages of the client's, %d of the server's\n", cc.gsoSent, sc.gsoSent)
	fmt.Fprintf(out, "udpfloor: sendmmsg calls made raw (no entersyscall): %d of the client's, %d of the server's\n", cc.rawSent, sc.rawSent)
	acks, bad, sbad := cc.acks, cc.badCRC, sc.badCRC
	fmt.Fprintf(out, "udpfloor: %d round trips of %d bytes; the server answered %d; %d ACKs received; %d datagrams with a bad CRC-32\n",
		len(posted), p.size, answered, acks, bad+sbad)
	switch {
	case bad+sbad > 0:
		return fmt.Errorf("%d datagrams arrived with a CRC-32 that does not match", bad+sbad)
	case answered != int64(p.n) || acks != int64(p.n):
		return fmt.Errorf("the server answered %d messages and ACKed %d, want %d", answered, acks, p.n)
	}
	return nil
}
