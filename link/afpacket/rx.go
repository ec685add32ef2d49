package afpacket

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktstat"
	"github.com/goroce/goroce/wire"
)

const (
	vnetLen = 10 // struct virtio_net_hdr
	// Virtio-net GSO types (linux/virtio_net.h).
	vnetGSONone  = 0
	vnetGSOUDPL4 = 5
	vnetGSOECN   = 0x80
	// maxSuper bounds a superpacket: one IP datagram and its Ethernet header.
	maxSuper = 1<<16 + wire.EthernetLen + wire.VLANTagLen
)

// noVnetHdr, set by tests, opens links without PACKET_VNET_HDR, as a
// kernel that cannot describe UDP GSO leaves them after its first refusal.
var noVnetHdr bool

// rxState is the receive side's scratch.
type rxState struct {
	msg  unix.Msghdr
	iov  [3]unix.Iovec
	name unix.RawSockaddrLinklayer
	vh   [vnetLen]byte
	over []byte // a superpacket's bytes beyond the caller's buffer
	big  []byte // a superpacket gathered whole
	seg  []byte // scratch for segment-size inference

	// Segments of a superpacket that found no free caller buffer, waiting
	// for the next Recv, in order.
	pend    []pendSeg
	pendBuf []byte
	next    int

	drops pktstat.SocketDrops // the socket's own drops, into RxSocketFull

	ring *rxRing // the socket's receive ring, or nil (ring.go)

	// queued says pend holds segments (for Pending, without the lock);
	// pending is pendingFn's answer.
	queued, pending atomic.Bool

	// The RawConn callbacks' arguments and results, bound once so that a
	// read allocates nothing: the packets to fill, and RecvLocked's lock
	// and packets; fill's results.
	pkts, lockPkts []link.Packet
	lockMu         sync.Locker
	got            int
	err            error
	done           bool

	readFn, lockedFn func(uintptr) bool
	tryFn, pendingFn func(uintptr)
}

func (l *Link) initRx() {
	r := &l.rx
	r.over = make([]byte, maxSuper)
	r.big = make([]byte, maxSuper)
	r.seg = make([]byte, 0, link.MaxFrameSize)
	r.readFn, r.lockedFn = l.read, l.readLocked
	r.tryFn, r.pendingFn = l.try, l.pendingOf
}

// recvmsg reads one frame (behind a virtio-net header into r.vh when vnet)
// into b, spilling into r.over, and returns its length (the header's not
// included; MSG_TRUNC: the whole frame's even when longer than both).
func (r *rxState) recvmsg(fd uintptr, b []byte, vnet bool) (int, unix.Errno) {
	n := 0
	if vnet {
		setIov(&r.iov[0], r.vh[:])
		n++
	}
	setIov(&r.iov[n], b)
	setIov(&r.iov[n+1], r.over)
	r.msg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&r.name)), Namelen: unix.SizeofSockaddrLinklayer, Iov: &r.iov[0]}
	r.msg.SetIovlen(n + 2)
	got, _, e := unix.Syscall(unix.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&r.msg)), unix.MSG_TRUNC|unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, e
	}
	if vnet {
		got -= vnetLen
	}
	return int(got), 0
}

// Recv reads frames until at least one RoCE packet for this port arrives.
// ARP and Neighbor Advertisements feed the resolver. A UDP GSO superpacket
// becomes its packets. On a v1-only link, RoCE v2 packets for this port
// are dropped, counted and reported (dropForeign), never delivered. Every
// frame dropped is counted by cause (link.Stats).
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil // nothing to fill: fill would report done, forever
	}
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	r := &l.rx
	for {
		if got := l.deliverPending(pkts); got > 0 {
			return got, nil
		}
		r.pkts = pkts
		err := l.rc.Read(r.readFn)
		r.pkts = nil
		if err != nil {
			return r.got, l.rxError(err)
		}
		if r.got > 0 || r.err != nil {
			return r.got, r.err
		}
		// Only a superpacket whose segments all wait in the queue, or only
		// drops: go on.
	}
}

// TryRecv is Recv without the wait (link.Poller): it returns 0 when
// nothing has arrived.
func (l *Link) TryRecv(pkts []link.Packet) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	r := &l.rx
	for {
		if got := l.deliverPending(pkts); got > 0 {
			return got, nil
		}
		r.pkts = pkts
		// Control, not Read: Read holds the socket's read lock while
		// RecvLocked sleeps in it.
		err := l.rc.Control(r.tryFn)
		r.pkts = nil
		if err != nil {
			return 0, l.rxError(err)
		}
		if r.got > 0 || r.err != nil || !r.done {
			return r.got, r.err
		}
	}
}

// RecvLocked is Recv that takes the packets with mu held (link.Poller):
// it holds mu and the link's receive lock while it reads, and neither
// while it sleeps, so TryRecv runs meanwhile. It returns with mu held if
// and only if err is nil.
func (l *Link) RecvLocked(pkts []link.Packet, mu sync.Locker) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	r := &l.rx
	for {
		l.rxMu.Lock()
		r.lockMu, r.lockPkts = mu, pkts
		l.rxMu.Unlock()
		err := l.rc.Read(r.lockedFn)
		if err != nil {
			// readLocked returned false, or never ran: no lock is held.
			return 0, l.rxError(err)
		}
		// Both locks are held.
		got, rerr := r.got, r.err
		r.lockMu, r.lockPkts = nil, nil
		l.rxMu.Unlock()
		if got > 0 {
			return got, nil
		}
		mu.Unlock()
		if rerr != nil {
			return 0, rerr
		}
	}
}

// Pending reports whether TryRecv would find something
// (link.PendingReporter): segments queued, a frame in the ring, a frame
// on the socket (without a ring).
func (l *Link) Pending() bool {
	if l.rx.queued.Load() {
		return true
	}
	if l.rc.Control(l.rx.pendingFn) != nil {
		return true
	}
	return l.rx.pending.Load()
}

func (l *Link) rxError(err error) error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	return err
}

// read is Recv's callback (bound once as readFn): false, to wait, when
// nothing has arrived.
func (l *Link) read(fd uintptr) bool {
	r := &l.rx
	r.got, r.err, r.done = l.fill(fd, r.pkts)
	return r.done
}

// try is TryRecv's callback (tryFn).
func (l *Link) try(fd uintptr) {
	r := &l.rx
	r.got, r.err, r.done = l.fill(fd, r.pkts)
}

// readLocked is RecvLocked's callback (lockedFn): it reads with the
// caller's lock and the link's receive lock held, keeps both when it has
// packets, segments queued by a TryRecv, or an error, and lets go of both
// before the netpoller's wait. It runs inside RawConn.Read, after the
// netpoller's readiness was reset: a frame that arrives after the look
// that found none wakes the wait that follows a false.
func (l *Link) readLocked(fd uintptr) bool {
	r := &l.rx
	r.lockMu.Lock()
	l.rxMu.Lock()
	if got := l.deliverPending(r.lockPkts); got > 0 {
		r.got, r.err = got, nil
		return true
	}
	r.got, r.err, r.done = l.fill(fd, r.lockPkts)
	if r.done {
		return true
	}
	l.rxMu.Unlock()
	r.lockMu.Unlock()
	return false
}

// pendingOf is Pending's callback (pendingFn).
func (l *Link) pendingOf(fd uintptr) {
	r := &l.rx
	if r.ring != nil {
		r.pending.Store(r.ring.Ready())
		return
	}
	n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	r.pending.Store(err != nil || n > 0)
}

// fill reads frames into pkts until they are full or nothing more has
// arrived, with rxMu held. done is false when it found nothing at all
// (the caller may wait); got counts the packets delivered, which may be
// 0 with done true (drops only, or segments queued).
func (l *Link) fill(fd uintptr, pkts []link.Packet) (got int, rerr error, done bool) {
	r := &l.rx
	for got < len(pkts) {
		pk := &pkts[got]
		b := pk.Buf[:cap(pk.Buf)]
		vnet := l.vnet.Load()
		n, errno := l.readFrame(fd, b, vnet)
		switch errno {
		case 0:
		case unix.EAGAIN:
			r.drops.Read(fd, false, true, &l.stats.RxSocketFull)
			return got, nil, got > 0
		case unix.EINTR:
			continue
		case unix.EINVAL:
			if vnet {
				// The kernel could not put a superpacket's GSO type in
				// a virtio_net_hdr (Linux < 6.2 knows no UDP_L4 there)
				// and dropped it. Count it, and read superpackets
				// whole from now on (the sender retransmits).
				l.stats.RxKernelRefused.Add(1)
				l.dropVnetHdr(fd)
				continue
			}
			return got, errno, true
		default:
			return got, errno, true
		}
		if n > len(b)+len(r.over) {
			l.stats.RxMalformed.Add(1) // longer than any IP datagram
			continue
		}
		frame := b[:min(n, len(b))]
		if n > len(b) {
			copy(r.big, b)
			copy(r.big[len(b):], r.over[:n-len(b)])
			frame = r.big[:n]
		}
		if l.res.Observe(frame) {
			continue // ARP or ND: resolver food
		}
		if t := r.name.Pkttype; t != unix.PACKET_HOST && t != unix.PACKET_MULTICAST && t != unix.PACKET_BROADCAST {
			continue
		}
		segSize, super := 0, n > len(b)
		if vnet && r.vh[1]&^vnetGSOECN != vnetGSONone {
			if r.vh[1]&^vnetGSOECN != vnetGSOUDPL4 {
				l.stats.RxMalformed.Add(1) // TCP or UFO: not RoCE
				continue
			}
			segSize, super = int(binary.NativeEndian.Uint16(r.vh[4:])), true
		}
		if !super {
			if l.accept(frame, pk, n, -1) {
				got++
			}
			if r.next < len(r.pend) {
				return got, nil, true // an inferred superpacket's segments wait
			}
			continue
		}
		if &frame[0] == &b[0] {
			// The segments are written into the callers' buffers, this
			// one first: read them from a copy.
			copy(r.big, frame)
			frame = r.big[:len(frame)]
		}
		got = l.split(frame, segSize, pkts, got)
		if r.next < len(r.pend) {
			return got, nil, true
		}
	}
	// Every buffer filled: the socket may hold a backlog, and drops.
	r.drops.Read(fd, true, true, &l.stats.RxSocketFull)
	return got, nil, true
}

// dropVnetHdr turns PACKET_VNET_HDR off, for sending as for receiving.
func (l *Link) dropVnetHdr(fd uintptr) {
	l.vnetMu.Lock()
	defer l.vnetMu.Unlock()
	if unix.SetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_VNET_HDR, 0) == nil {
		l.vnet.Store(false)
	}
}

// accept decapsulates frame (in pk.Buf) into pk and reports whether it is
// a packet to deliver; size is the frame's length, for the counters. seg is
// the frame's index in the superpacket it was cut from, or -1: segment s>0
// of an IPv4 superpacket carries the ID first+s, as Linux numbers the
// segments it cuts (inet_gso_segment), and if its ICRC fails with that one
// it is tried with the first's (a sender that kept the ID fixed).
func (l *Link) accept(frame []byte, pk *link.Packet, size, seg int) bool {
	pk.Buf = frame
	err := link.Decapsulate(frame, pk)
	if errors.Is(err, wire.ErrBadICRC) && seg > 0 && len(frame) >= wire.EthernetLen+wire.IPv4MinLen &&
		binary.BigEndian.Uint16(frame[12:]) == wire.EtherTypeIPv4 {
		ip := wire.IPv4(frame[wire.EthernetLen : wire.EthernetLen+int(frame[wire.EthernetLen]&0xf)*4])
		ip.SetID(ip.ID() - uint16(seg))
		ip.SetChecksum(ip.ComputeChecksum())
		err = link.Decapsulate(frame, pk)
	}
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrNotRoCE):
		case errors.Is(err, wire.ErrBadICRC):
			// Read without a virtio-net header, a superpacket looks like one
			// packet with a bad ICRC; its RoCE headers give it away.
			if seg < 0 && !l.vnet.Load() && l.splitInferred(frame) {
				return false
			}
			l.stats.RxBadICRC.Add(1)
		default:
			l.stats.RxMalformed.Add(1)
		}
		return false
	}
	if !l.local.Load().Contains(pk.Addr.DstGID) && !l.joined(pk.Addr.DstGID) {
		l.stats.RxNotForUs.Add(1)
		return false
	}
	if pk.Addr.Version == wire.RoCEv2 && !l.cfg.V2 {
		l.dropForeign(&pk.Parsed, &pk.Addr)
		return false
	}
	l.stats.RxPackets.Add(1)
	l.stats.RxBytes.Add(uint64(size))
	return true
}

// splitInferred queues the segments of a frame that failed its ICRC, if
// the segment size inference finds it is a superpacket (read without a
// virtio-net header), and reports whether it did.
func (l *Link) splitInferred(frame []byte) bool {
	r := &l.rx
	sp, err := link.ParseSuperpacket(frame)
	if err != nil {
		return false
	}
	g, ok := sp.InferSegmentSize(r.seg)
	if !ok {
		return false
	}
	if &frame[0] != &r.big[0] {
		copy(r.big, frame)
		sp, _ = link.ParseSuperpacket(r.big[:len(frame)])
	}
	// Recv delivers the queue before it reads again.
	l.queueSegments(&sp, g, 0)
	return true
}

// split cuts a superpacket into its segments of segSize bytes (0: infer
// the size), delivering them into pkts from got on and queueing what does
// not fit; it returns the new got. frame must not be in pkts' buffers.
func (l *Link) split(frame []byte, segSize int, pkts []link.Packet, got int) int {
	r := &l.rx
	sp, err := link.ParseSuperpacket(frame)
	if err != nil {
		l.stats.RxMalformed.Add(1)
		return got
	}
	if segSize <= 0 {
		// Read whole, without a size: a superpacket says its segment size
		// by its RoCE headers; a single packet too long for the caller's
		// buffer is malformed.
		g, ok := sp.InferSegmentSize(r.seg)
		if !ok {
			l.stats.RxMalformed.Add(1)
			return got
		}
		segSize = g
	}
	k := sp.Segments(segSize)
	for s := 0; s < k; s++ {
		if got == len(pkts) {
			l.queueSegments(&sp, segSize, s)
			break
		}
		pk := &pkts[got]
		f := sp.AppendSegment(pk.Buf[:0], segSize, s, false)
		if len(f) > cap(pk.Buf) {
			l.stats.RxMalformed.Add(1) // longer than a frame may be
			continue
		}
		if l.accept(f, pk, len(f), s) {
			got++
		}
	}
	return got
}

// pendSeg is a segment waiting for a caller buffer: its frame and its index
// in its superpacket.
type pendSeg struct {
	f []byte
	s int
}

// queueSegments copies segments from..end of sp into the pending queue.
func (l *Link) queueSegments(sp *link.Superpacket, segSize, from int) {
	r := &l.rx
	k := sp.Segments(segSize)
	for s := from; s < k; s++ {
		off := len(r.pendBuf)
		r.pendBuf = sp.AppendSegment(r.pendBuf, segSize, s, false)
		r.pend = append(r.pend, pendSeg{f: r.pendBuf[off:len(r.pendBuf):len(r.pendBuf)], s: s})
	}
	r.queued.Store(r.next < len(r.pend))
}

// deliverPending hands queued segments over first.
func (l *Link) deliverPending(pkts []link.Packet) int {
	r := &l.rx
	got := 0
	for r.next < len(r.pend) && got < len(pkts) {
		e := r.pend[r.next]
		r.next++
		pk := &pkts[got]
		if len(e.f) > cap(pk.Buf) {
			l.stats.RxMalformed.Add(1)
			continue
		}
		b := append(pk.Buf[:0], e.f...)
		if l.accept(b, pk, len(b), e.s) {
			got++
		}
	}
	if r.next == len(r.pend) {
		r.queued.Store(false)
		r.pend, r.next, r.pendBuf = r.pend[:0], 0, r.pendBuf[:0]
		if cap(r.pendBuf) > 1<<20 {
			r.pendBuf = nil // a backlog's worth: let it go
		}
	}
	return got
}
