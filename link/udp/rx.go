package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktstat"
	"github.com/goroce/goroce/wire"
)

// Receiving: one recvmmsg(2) fills several messages; a message is one
// datagram, or a coalesced run of datagrams of one size (the last may be
// shorter) that the kernel hands over whole: a UDP GRO datagram, or a GSO
// superpacket seen by the AF_PACKET socket.
//
// So that the kernel's copy is the only one, each message's iovecs point
// into the caller's buffers: with segment size G expected, message j
// reserves k caller buffers and its iovecs are
//
//	[lead] buf[0][FH:FH+G] buf[1][FH:FH+G] … buf[k-1][FH:] overflow[j]
//
// (FH = link.FrameHeadroom; lead, on the AF_PACKET path only, receives the
// virtio-net, Ethernet, IP and UDP headers; overflow is the link's own). When
// the segments are G bytes long, segment s lands in buf[s] at FH, where the
// engine wants it, and is handed over by swapping buffers between the
// caller's slots (the caller's buffers all look alike). Anything else — a
// single datagram longer than G, a different segment size, a header of
// another length, more segments than reserved buffers — is put right by
// copying, and is rare while the traffic keeps its shape: G follows the
// largest segment size seen lately, and is 0 (one buffer per message, so
// small packets batch 64 to a call) while no coalesced message arrives.
// Segments that find no free buffer wait in a queue for the next Recv.
//
// The caller's buffers must have link.MaxFrameSize bytes of capacity, as
// link.Packet says.

const (
	fh          = link.FrameHeadroom
	maxDatagram = 1 << 16 // a coalesced message's payload is below this
	maxRes      = 64      // caller buffers one message may reserve
	maxIov      = maxRes + 2
	nameLen     = 32  // sockaddr_in6 or sockaddr_ll
	rxCtlLen    = 256 // the UDP socket's control messages
	vnetLen     = 10  // struct virtio_net_hdr
	leadMax     = vnetLen + wire.EthernetLen + 60 + wire.UDPLen
	// Virtio-net GSO types (linux/virtio_net.h).
	vnetGSONone  = 0
	vnetGSOUDPL4 = 5
)

// rxMeta is what the segments of one message share.
type rxMeta struct {
	addr link.Addr // UDP socket: from the source address and control messages
	// AF_PACKET: the IP and UDP headers as received, which each segment's
	// headers are rebuilt from.
	hdr  [60 + wire.UDPLen]byte
	hlen int
	v4   bool
	id0  uint16 // IPv4 ID of the first segment
}

// pendSeg is a segment waiting for a caller buffer.
type pendSeg struct{ off, n, s, meta int }

type rxState struct {
	raw  bool
	ring *rxRing // AF_PACKET: the socket's receive ring, if it has one (ring.go)
	// full counts the AF_PACKET socket's drops (RxSocketFull), read from
	// the kernel by drops (sampleDrops).
	full     *atomic.Uint64
	drops    pktstat.SocketDrops
	hdrs     []unix.Mmsghdr
	iovs     []unix.Iovec // maxIov per message
	names    []byte       // nameLen per message
	ctl      []byte       // rxCtlLen per message
	lead     []byte       // leadMax per message
	over     [][]byte     // per message
	first    []int        // per message: its first reserved caller buffer
	nres     []int        // per message: how many it reserves
	niov     []int        // per message: iovecs used
	leadLen  []int        // per message: bytes the lead iovec takes
	g        int          // the segment size the layout expects; 0: single datagrams
	gIdle    int          // reads in a row without a coalesced message
	hguess   int          // AF_PACKET: the IP+UDP header length expected
	scratch  []byte       // one message, gathered (maxDatagram+leadMax)
	meta     rxMeta       // of the message (or pending segment) being accepted
	pseudo   pseudoCache  // the headers the last datagram came with
	lastAddr shortAddr    // the addressing shortFrame derived last

	// lastRx is the nanotime of the last read that returned data; atomic,
	// as WaitRecv's spin reads it without rxMu.
	lastRx atomic.Int64

	planned  planKey // the layout the iovecs hold
	planBase []*byte // per caller slot: the buffer its iovec points into
	planCap  []int
	slotMsg  []int // per caller slot: the message that reserves it
	want     []int // per message: the buffers the next plan reserves
	filled   int   // messages the last recvmmsg filled

	// The segment counts of the latest messages, in arrival order (a
	// ring; histN counts from 0, kept between histLen and 2·histLen once
	// full), which counts reads the traffic's pattern from.
	hist  [histLen]uint8
	histN int
	same  int      // the latest counts that are equal, up to histLen
	spare [][]byte // borrow's scratch

	// The read in progress (see read, try). tryPkts are TryRecv's
	// buffers, which try lays out only once the ring has a frame.
	readFn  func(fd uintptr) bool
	tryFn   func(fd uintptr)
	tryPkts []link.Packet
	plans   uint64 // plan's calls (for tests)
	tries   uint64 // try's calls (for tests)
	m, n    int
	errno   unix.Errno
	// short: the read's messages were as many as the ring had frames,
	// fewer than the buffers allowed; filling them all is not a full
	// read (sampleDrops).
	short     bool
	spinUntil int64

	// RecvLocked's read in progress (see readLocked): the caller's lock,
	// and the link's rxMu, which readLocked takes and leaves held when it
	// returns true.
	lockedFn func(fd uintptr) bool
	lockMu   sync.Locker
	linkMu   *sync.Mutex
	lockPkts []link.Packet

	// How segments reached the caller's buffers (for tests): in place, by
	// a copy within the read, by way of the queue.
	nInPlace, nCopied, nQueued uint64

	pend     []pendSeg // segments that found no caller buffer, in order
	pendNext int
	pendBuf  []byte
	pendMeta []rxMeta
}

func (r *rxState) init(batch int, raw bool, full *atomic.Uint64) {
	r.raw = raw
	r.full = full
	r.readFn = r.read
	r.tryFn = r.try
	r.lockedFn = r.readLocked
	r.hdrs = make([]unix.Mmsghdr, batch)
	r.iovs = make([]unix.Iovec, batch*maxIov)
	r.names = make([]byte, batch*nameLen)
	r.ctl = make([]byte, batch*rxCtlLen)
	r.lead = make([]byte, batch*leadMax)
	r.over = make([][]byte, batch)
	for i := range r.over {
		// Only what the kernel writes becomes resident.
		r.over[i] = make([]byte, maxDatagram+leadMax)
	}
	r.first, r.nres, r.niov, r.leadLen = make([]int, batch), make([]int, batch), make([]int, batch), make([]int, batch)
	r.want = make([]int, batch)
	r.scratch = make([]byte, maxDatagram+leadMax)
	r.hguess = wire.IPv4MinLen + wire.UDPLen
}

// plan points the messages' iovecs at pkts' buffers and returns how many
// messages the call may fill. Message j reserves r.nres[j] buffers: as
// many as the message the traffic's pattern says comes j-th (see counts),
// or, with no pattern, as many as a message of segment size G can have.
// It rewrites only what changed since the last call (a full plan of 64
// messages costs about a microsecond, a tenth of a small packet's trip):
// the kernel writes back no iovec, only the lengths and flags of the
// messages it filled, and the caller passes the same buffers again, but
// for those emit swapped.
func (r *rxState) plan(pkts []link.Packet, limit int) int {
	r.plans++
	m := r.counts(len(pkts), limit)
	lead := 0
	if r.raw {
		lead = vnetLen + wire.EthernetLen + r.hguess
	}
	key := planKey{m: m, g: r.g, lead: lead, pkts: &pkts[0]}
	used := 0
	for _, c := range r.want[:m] {
		used += c
	}
	if key != r.planned || len(r.planBase) < used || !slices.Equal(r.want[:m], r.nres[:m]) {
		r.planFull(pkts, key)
		return m
	}
	base, caps := r.planBase[:used], r.planCap[:used]
	for i := range base {
		if b := pkts[i].Buf; unsafe.SliceData(b) != base[i] || cap(b) != caps[i] {
			r.planPiece(pkts, i)
		}
	}
	for j := range r.filled {
		r.resetHdr(j)
	}
	r.filled = 0
	return m
}

// counts fills r.want with the buffers each message of the next read
// reserves, out of n, and returns how many messages the read offers: at
// most limit.
//
// With segment size G, a message holds up to k = ⌈64 KiB / G⌉ segments;
// reserving k for each wastes most of them when the traffic mixes sizes.
// An RDMA WRITE of 64 KiB at path MTU 4096 arrives as two messages of 1
// and 15 segments, a WRITE WITH IMMEDIATE as three of 1, 14 and 1 (IBTA
// Vol 1 9.7.2: FIRST carries the RETH, the LAST the ImmDt, so neither can
// share a GSO message with the MIDDLEs), ACKs as one each: 16 reserved per
// message would take four messages per read, two WRITEs but 1⅓ WRITEs WITH
// IMMEDIATE. So when the recent messages' segment counts repeat with a
// short period, the next read reserves what that pattern predicts, message
// by message, continuing from where the last read ended: four of either
// per read. A message that brings more segments than predicted is put
// right by process (the extra segments are copied, into buffers borrowed
// from the read's unused tail, or queued).
func (r *rxState) counts(n, limit int) int {
	limit = min(limit, len(r.hdrs))
	if r.g == 0 {
		// Single datagrams: one buffer each.
		m := min(limit, n)
		for j := range m {
			r.want[j] = 1
		}
		return m
	}
	k := min(maxRes, (maxDatagram+r.g-1)/r.g, n)
	p := r.period()
	if p == 0 {
		m := min(limit, n/k)
		for j := range m {
			r.want[j] = k
		}
		return m
	}
	m, used := 0, 0
	for m < limit {
		c := min(max(int(r.histAt(p-1-m%p)), 1), k)
		if used+c > n {
			break
		}
		r.want[m] = c
		used += c
		m++
	}
	return m
}

const (
	histLen   = 64 // messages' segment counts remembered
	maxPeriod = 8  // the longest pattern looked for
	minRepeat = 8  // entries a pattern must have predicted right
)

// period returns the shortest period p ≤ maxPeriod with which the last
// p+max(p, minRepeat) messages' segment counts repeat, or 0.
func (r *rxState) period() int {
	if r.same >= 1+minRepeat {
		// The common pattern, one count repeated, without the search
		// (250 instructions a read in `roce perf send --lat`,
		// bench/callgrind.sh): p = 1 is the first period tried, and
		// the latest 1+minRepeat counts are equal.
		return 1
	}
	have := min(r.histN, histLen)
	for p := 1; p <= maxPeriod; p++ {
		w := max(p, minRepeat)
		if have < p+w {
			return 0
		}
		ok := true
		for i := range w {
			if r.histAt(i) != r.histAt(i+p) {
				ok = false
				break
			}
		}
		if ok {
			return p
		}
	}
	return 0
}

// histAt is the segment count of the i-th latest message (0: the last).
func (r *rxState) histAt(i int) uint8 {
	return r.hist[(r.histN-1-i)%histLen]
}

// record notes a message's segment count.
func (r *rxState) record(nseg int) {
	c := uint8(min(nseg, 255))
	if r.histN > 0 && r.histAt(0) == c {
		r.same = min(r.same+1, histLen)
	} else {
		r.same = 1
	}
	r.hist[r.histN%histLen] = c
	r.histN++
	if r.histN == 2*histLen {
		r.histN = histLen
	}
}

// planFull lays every message out anew, message j with r.want[j] buffers.
func (r *rxState) planFull(pkts []link.Packet, key planKey) {
	r.planned = key
	if len(r.planBase) < len(pkts) {
		r.planBase, r.planCap = make([]*byte, len(pkts)), make([]int, len(pkts))
		r.slotMsg = make([]int, len(pkts))
	}
	c0 := 0
	if r.raw {
		c0 = 1
	}
	at := 0
	for j := range key.m {
		k := r.want[j]
		iv := r.iovs[j*maxIov : (j+1)*maxIov]
		h := &r.hdrs[j].Hdr
		r.leadLen[j] = key.lead
		if r.raw {
			setIov(&iv[0], r.lead[j*leadMax:j*leadMax+key.lead])
		}
		setIov(&iv[c0+k], r.over[j])
		h.Name = &r.names[j*nameLen]
		h.Iov = &iv[0]
		h.SetIovlen(c0 + k + 1)
		h.Control = nil
		if !r.raw {
			h.Control = &r.ctl[j*rxCtlLen]
		}
		r.first[j], r.nres[j], r.niov[j] = at, k, c0+k+1
		for i := range k {
			r.slotMsg[at+i] = j
			r.planPiece(pkts, at+i)
		}
		at += k
		r.resetHdr(j)
	}
	r.filled = 0
}

// planPiece points the iovec for caller slot i at its buffer: G bytes at
// FH when a segment size is expected (so a message's segments beyond its
// reserved buffers land in its overflow at multiples of G), else the whole
// buffer from FH.
func (r *rxState) planPiece(pkts []link.Packet, i int) {
	j := r.slotMsg[i]
	p := i - r.first[j]
	b := pkts[i].Buf
	r.planBase[i], r.planCap[i] = unsafe.SliceData(b), cap(b)
	b = b[:cap(b)]
	if r.planned.g > 0 {
		b = b[fh : fh+r.planned.g]
	} else {
		b = b[fh:]
	}
	c0 := 0
	if r.raw {
		c0 = 1
	}
	setIov(&r.iovs[j*maxIov+c0+p], b)
}

// resetHdr restores what the kernel writes back into message j's header.
func (r *rxState) resetHdr(j int) {
	h := &r.hdrs[j].Hdr
	h.Namelen = nameLen
	if r.raw {
		h.SetControllen(0)
	} else {
		h.SetControllen(rxCtlLen)
	}
	h.Flags = 0
}

// planKey is what plan's layout depends on besides the buffers themselves.
type planKey struct {
	m, g, lead int
	pkts       *link.Packet
}

// gather copies bytes [from, to) of message j, as its iovecs hold them,
// into dst.
func (r *rxState) gather(j, from, to int, dst []byte) {
	off := 0
	for _, v := range r.iovs[j*maxIov : j*maxIov+r.niov[j]] {
		n := int(v.Len)
		if from < off+n && to > off {
			b := unsafe.Slice(v.Base, n)
			lo, hi := max(from, off), min(to, off+n)
			copy(dst[lo-from:], b[lo-off:hi-off])
		}
		off += n
		if off >= to {
			return
		}
	}
}

// piece0 is how many payload bytes message j's first buffer takes.
func (r *rxState) piece0(j int, pkts []link.Packet) int {
	if r.planned.g > 0 {
		return r.planned.g
	}
	return cap(pkts[r.first[j]].Buf) - fh
}

// read is rawConn.Read's callback (bound once as readFn: a closure would
// be allocated on every Recv). It reads into the first m messages.
func (r *rxState) read(fd uintptr) bool {
	for {
		r.n, r.errno = r.recv(fd)
		r.sampleDrops(fd)
		switch {
		case r.errno == unix.EINTR:
		case r.errno != unix.EAGAIN:
			return true
		case r.spinUntil == 0 || nanotime() > r.spinUntil:
			return false // sleep in the netpoller
		default:
			runtime.Gosched()
		}
	}
}

// recv fills up to r.m messages: from the ring, or with recvmmsg.
func (r *rxState) recv(fd uintptr) (int, unix.Errno) {
	if r.ring != nil {
		return r.ring.read(fd, r)
	}
	return recvmmsg(fd, r.hdrs[:r.m])
}

// try is TryRecv's callback (bound once as tryFn): one recvmmsg, which
// does not wait (MSG_DONTWAIT), into r.tryPkts. A ring with no frame for
// the program is an empty look without the layout of the read: plan
// took a sixth of a busy-polling client's CPU in the lab's VMs
// (`roce perf send --lat`, BENCHMARKS.md), almost all of it for looks
// that found nothing.
func (r *rxState) try(fd uintptr) {
	r.tries++
	if !r.planReady(r.tryPkts) {
		r.n, r.errno = 0, unix.EAGAIN
		r.sampleDrops(fd)
		return
	}
	for {
		r.n, r.errno = r.recv(fd)
		r.sampleDrops(fd)
		if r.errno != unix.EINTR {
			return
		}
	}
}

// planReady lays out the next read into pkts (plan) and reports whether
// there is one to make: false when the ring's head frame is empty. A
// ring's read fills a message per frame, so it lays out no more messages
// than the ring has frames ready: a look that finds one packet lays out
// one message, not 64. Planning 64 took 3,000 instructions per read in
// `roce perf send --lat`'s server (callgrind), about what the engine's
// handling of the SEND and the ACK the read found took (handleBatch).
func (r *rxState) planReady(pkts []link.Packet) bool {
	limit := len(r.hdrs)
	r.short = false
	if g := r.ring; g != nil && g.lateErr == 0 {
		k := g.ReadyUpTo(limit)
		if k == 0 {
			return false
		}
		r.short = k < limit
		limit = k
	}
	r.m = r.plan(pkts, limit)
	return true
}

// readLocked is RecvLocked's callback (bound once as lockedFn): read
// with the caller's lock and the link's rxMu held, which it keeps when a
// read returned data (or an error), and lets go of before the netpoller's
// wait, so that TryRecv runs meanwhile. It runs inside RawConn.Read, after
// the netpoller's readiness was reset: a datagram that arrives after the
// read that found none wakes the wait that follows a false.
func (r *rxState) readLocked(fd uintptr) bool {
	for {
		r.lockMu.Lock()
		r.linkMu.Lock()
		if r.pendNext < len(r.pend) {
			// Segments a TryRecv left queued while this goroutine
			// slept arrived before anything recvmmsg would return now:
			// RecvLocked delivers them first (link.Poller keeps the
			// link's order).
			r.n, r.errno = 0, 0
			return true
		}
		if r.planReady(r.lockPkts) {
			r.n, r.errno = r.recv(fd)
		} else {
			r.n, r.errno = 0, unix.EAGAIN
		}
		r.sampleDrops(fd)
		switch {
		case r.errno == unix.EINTR:
		case r.errno != unix.EAGAIN:
			return true
		case r.spinUntil == 0 || nanotime() > r.spinUntil:
			r.linkMu.Unlock()
			r.lockMu.Unlock()
			return false // sleep in the netpoller
		default:
			r.linkMu.Unlock()
			r.lockMu.Unlock()
			runtime.Gosched()
			continue
		}
		r.linkMu.Unlock()
		r.lockMu.Unlock()
	}
}

// sampleDrops counts the AF_PACKET socket's drops after a read
// (pktstat.SocketDrops). The UDP socket of an unprivileged link is not
// sampled: its drops would need SO_RXQ_OVFL's control message.
func (r *rxState) sampleDrops(fd uintptr) {
	if !r.raw || r.full == nil {
		return
	}
	r.drops.Read(fd, r.errno == 0 && r.n == r.m && !r.short, r.errno == 0 || r.errno == unix.EAGAIN, r.full)
}

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(epoch)) }

var epoch = time.Now()

// Recv receives a batch.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if len(pkts) == 0 {
		return 0, nil
	}
	if got := l.deliverPending(pkts); got > 0 {
		return got, nil
	}
	rc := l.rc
	if l.raw != nil {
		rc = l.raw.rc
	}
	r := &l.rx
	for {
		r.m = r.plan(pkts, len(r.hdrs))
		r.short = false
		// Busy-poll while a packet arrived within the last BusyPoll.
		r.spinUntil = 0
		if bp, last := l.busyPoll.Load(), r.lastRx.Load(); bp > 0 && last != 0 {
			r.spinUntil = last + bp
		}
		err := rc.Read(r.readFn)
		n, errno := r.n, r.errno
		if errno == 0 && err == nil && l.busyPoll.Load() > 0 {
			r.lastRx.Store(nanotime())
		}
		if err != nil {
			return 0, l.rxError(err)
		}
		if errno == unix.EINVAL && l.raw != nil {
			// An AF_PACKET socket with PACKET_VNET_HDR returns EINVAL, and
			// drops the packet, for a UDP GRO superpacket whose GSO type
			// the kernel cannot put in a virtio_net_hdr (Linux 6.1 cannot:
			// Debian 12's kernel). Seen in the lab's 6.1 guests, where it
			// ended the device. Count the drop, stop asking the kernel to
			// coalesce (UDP_GRO on the port-holding socket), and go on;
			// RC retransmits what was lost.
			l.stats.RxKernelRefused.Add(1)
			l.disableGRO()
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		r.filled = n
		if got := l.process(pkts, n); got > 0 {
			return got, nil
		}
		if got := l.deliverPending(pkts); got > 0 {
			return got, nil
		}
	}
}

// rxError maps a RawConn's error after Close to net.ErrClosed.
func (l *Link) rxError(err error) error {
	if l.raw != nil && l.raw.closed.Load() || errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
		return net.ErrClosed
	}
	return err
}

// rxConn is the socket packets arrive on.
func (l *Link) rxConn() syscall.RawConn {
	if l.raw != nil {
		return l.raw.rc
	}
	return l.rc
}

// TryRecv is Recv without the wait (link.Poller): one recvmmsg that does
// not block, or the queued segments of an earlier one.
func (l *Link) TryRecv(pkts []link.Packet) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if len(pkts) == 0 {
		return 0, nil
	}
	if got := l.deliverPending(pkts); got > 0 {
		return got, nil
	}
	rc := l.rxConn()
	r := &l.rx
	if l.emptyRing() {
		return 0, nil
	}
	for r.ring != nil {
		got, ok := l.ringDirect(pkts)
		if !ok {
			break // the general read below
		}
		if got > 0 {
			if l.busyPoll.Load() > 0 {
				r.lastRx.Store(nanotime())
			}
			return got, nil
		}
		if l.emptyRing() {
			return 0, nil
		}
	}
	for {
		// Control, not Read: Read holds the socket's read lock while
		// WaitRecv sleeps in it.
		r.tryPkts = pkts
		err := rc.Control(r.tryFn)
		r.tryPkts = nil
		n, errno := r.n, r.errno
		if err != nil {
			return 0, l.rxError(err)
		}
		if l.raw != nil && l.raw.closed.Load() {
			return 0, net.ErrClosed
		}
		switch {
		case errno == unix.EAGAIN:
			return 0, nil
		case errno == unix.EINVAL && l.raw != nil:
			l.stats.RxKernelRefused.Add(1) // as Recv
			l.disableGRO()
			continue
		case errno != 0:
			return 0, errno
		}
		if l.busyPoll.Load() > 0 {
			r.lastRx.Store(nanotime())
		}
		r.filled = n
		if got := l.process(pkts, n); got > 0 {
			return got, nil
		}
		if got := l.deliverPending(pkts); got > 0 {
			return got, nil
		}
	}
}

// emptyRing reports, with rxMu held, that the AF_PACKET socket's ring has
// no frame at its head and try would have nothing to do: no error owed, no
// drops to sample. A busy poller's looks nearly all end here, without the
// RawConn's file reference around try (RawControl: 24% of `roce perf send
// --lat`'s client samples in the lab's VMs). The ring may be read here
// because the socket's close unmaps it only under rxMu, after setting
// closed.
func (l *Link) emptyRing() bool {
	r := &l.rx
	g := r.ring
	return g != nil && !l.raw.closed.Load() && g.lateErr == 0 && !r.drops.Owed() && !g.Ready()
}

// RecvLocked is Recv that takes the packets with mu held (link.Poller):
// the caller's lock and rxMu are taken for each read and let go of while
// the socket is empty. One goroutine at a time calls it (the socket's
// read lock would serialize more).
func (l *Link) RecvLocked(pkts []link.Packet, mu sync.Locker) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	mu.Lock()
	l.rxMu.Lock()
	if got := l.deliverPending(pkts); got > 0 {
		l.rxMu.Unlock()
		return got, nil
	}
	l.rxMu.Unlock()
	mu.Unlock()
	rc := l.rxConn()
	r := &l.rx
	for {
		// Not under rxMu, but only this goroutine writes them, and
		// readLocked reads them.
		spin := int64(0)
		if bp, last := l.busyPoll.Load(), r.lastRx.Load(); bp > 0 && last != 0 {
			spin = last + bp
		}
		l.rxMu.Lock()
		r.spinUntil, r.lockMu, r.linkMu, r.lockPkts = spin, mu, &l.rxMu, pkts
		l.rxMu.Unlock()
		err := rc.Read(r.lockedFn)
		if err != nil {
			// readLocked returned false, or never ran: no lock is held.
			return 0, l.rxError(err)
		}
		// Both locks are held.
		n, errno := r.n, r.errno
		r.lockPkts = nil
		if l.raw != nil && l.raw.closed.Load() {
			l.rxMu.Unlock()
			mu.Unlock()
			return 0, net.ErrClosed
		}
		if errno == unix.EINVAL && l.raw != nil {
			l.stats.RxKernelRefused.Add(1) // as Recv
			l.disableGRO()
			l.rxMu.Unlock()
			mu.Unlock()
			continue
		}
		if errno != 0 {
			l.rxMu.Unlock()
			mu.Unlock()
			return 0, errno
		}
		if l.busyPoll.Load() > 0 {
			r.lastRx.Store(nanotime())
		}
		r.filled = n
		got := 0
		if n > 0 { // 0: readLocked found queued segments to deliver first
			got = l.process(pkts, n)
		}
		if got == 0 {
			got = l.deliverPending(pkts)
		}
		l.rxMu.Unlock()
		if got > 0 {
			return got, nil
		}
		mu.Unlock()
	}
}

// process turns the m messages recvmmsg filled into packets in pkts and
// returns how many.
func (l *Link) process(pkts []link.Packet, m int) int {
	defer l.noteQueue()
	r := &l.rx
	out, g := 0, 0
	queue := false // a segment found no buffer: the rest waits, in order
	// pkts[end:] hold no message's segments: the tail borrow lends from.
	end := 0
	if m > 0 {
		end = r.first[m-1] + r.nres[m-1]
	}
	// room makes pkts[out:out+want] free for message j's segments if it
	// can, borrowing from the tail, and returns how many are.
	room := func(j, want int) int {
		limit := len(pkts)
		if j+1 < m {
			limit = r.first[j+1]
			if short := want - (limit - out); short > 0 {
				limit += r.borrow(pkts, j, m, short, &end)
			}
		}
		return limit - out
	}
	for j := range m {
		h := &r.hdrs[j]
		n := int(h.Len)
		if h.Hdr.Flags&unix.MSG_TRUNC != 0 {
			l.stats.RxMalformed.Add(1)
			r.record(1)
			continue
		}
		var p, plen, segSize int
		var ok bool
		if r.raw {
			p, plen, segSize, ok = l.parseFrame(j, n)
		} else {
			p, plen, segSize, ok = l.parseDatagram(j, n)
		}
		if !ok {
			r.record(1)
			continue
		}
		var nseg int
		nseg, segSize = segments(plen, segSize)
		g = max(g, layoutSize(nseg, segSize))
		r.record(nseg)
		if queue {
			l.queueSegs(j, p, plen, segSize)
			continue
		}
		aligned := p == r.leadLen[j]
		capFH := cap(pkts[r.first[j]].Buf) - fh
		switch {
		case aligned && nseg == 1 && plen <= capFH:
			if p0 := r.piece0(j, pkts); plen > p0 {
				// Longer than the layout's segment: bring the rest back.
				b := pkts[r.first[j]].Buf[:cap(pkts[r.first[j]].Buf)]
				r.gather(j, p+p0, p+plen, b[fh+p0:fh+plen])
			}
			out = l.emit(pkts, out, r.first[j], plen, 0)
			r.nInPlace++
		case aligned && segSize == r.g && r.planned.g == r.g:
			// Every buffer took G bytes: segment s is in buffer s, and
			// those beyond the reserved ones are in the overflow, whence
			// they are copied to buffers the read left free.
			in := min(nseg, r.nres[j])
			for s := range in {
				out = l.emit(pkts, out, r.first[j]+s, min(segSize, plen-s*segSize), s)
			}
			r.nInPlace += uint64(in)
			if in == nseg {
				break
			}
			free := room(j, nseg-in)
			for s := in; s < nseg; s++ {
				lo, hi := p+s*segSize, p+min(plen, (s+1)*segSize)
				if free <= 0 {
					if !queue {
						queue = true
						r.pendMeta = append(r.pendMeta, r.meta)
					}
					seg := r.scratch[:hi-lo]
					r.gather(j, lo, hi, seg)
					l.queueSeg(seg, s)
					continue
				}
				pk := &pkts[out]
				r.gather(j, lo, hi, pk.Buf[fh:fh+hi-lo])
				if o := l.emit(pkts, out, out, hi-lo, s); o > out {
					out, free = o, free-1
				}
				r.nCopied++
			}
		default:
			b := r.scratch[:plen]
			r.gather(j, p, p+plen, b)
			free := room(j, nseg)
			for s := range nseg {
				seg := b[s*segSize : min(plen, (s+1)*segSize)]
				if len(seg) > capFH {
					l.stats.RxMalformed.Add(1)
					continue
				}
				if free > 0 {
					pk := &pkts[out]
					copy(pk.Buf[fh:cap(pk.Buf)], seg)
					if o := l.emit(pkts, out, out, len(seg), s); o > out {
						out, free = o, free-1
					}
					r.nCopied++
					continue
				}
				if !queue {
					queue = true
					r.pendMeta = append(r.pendMeta, r.meta)
				}
				l.queueSeg(seg, s)
			}
		}
	}
	r.follow(g)
	return out
}

// segments returns how many segments a message of plen bytes with segment
// size segSize (0: not coalesced) holds, and the size of all but the last
// (plen when there is one).
func segments(plen, segSize int) (n, size int) {
	if segSize > 0 && segSize < plen {
		return (plen + segSize - 1) / segSize, segSize
	}
	return 1, plen
}

// layoutSize is the segment size a message of n segments of size bytes
// asks the layout to follow (follow), 0 for none: a single datagram, or
// segments larger than a caller buffer holds, which cannot be a layout's.
func layoutSize(n, size int) int {
	if n > 1 && size <= link.MaxFrameSize-fh {
		return size
	}
	return 0
}

// follow updates the layout's segment size after a read whose largest
// coalesced message had segments of g bytes (0: none). It follows the
// largest segment size: a smaller one (or none) takes over only after 8
// reads without the larger, for a read may fall between two superpackets
// of a stream, and a segment smaller than the layout's costs a small copy
// while a larger one costs a large copy.
func (r *rxState) follow(g int) {
	switch {
	case g >= r.g:
		r.g, r.gIdle = g, 0
	case r.gIdle < 8:
		r.gIdle++
	default:
		r.g, r.gIdle = g, 0
	}
}

// borrow moves up to e free buffers to just after message j's, so that
// segments of message j which found no buffer of its own are copied there
// and handed over in order, rather than queued with all that follows them.
// Free are the buffers of a later message that the kernel did not write
// (it fills a message's iovecs in order, so they are the last of its
// reservation, past its length: a message that brought fewer segments than
// the plan reserved), nearest first, then those of the read's tail
// (pkts[*end:], which no message filled). The messages between move up by
// as many slots; the buffers are all alike, so only the slots change, and
// the next plan is a full one. It returns how many it moved.
func (r *rxState) borrow(pkts []link.Packet, j, m, e int, end *int) int {
	got := 0
	for d := j + 1; d <= m && got < e; d++ {
		var q, avail int // the donor's free run: pkts[q:q+avail]
		if d < m {
			used := 1
			if r.planned.g > 0 {
				used = (int(r.hdrs[d].Len) - r.leadLen[d] + r.planned.g - 1) / r.planned.g
			}
			used = min(max(used, 1), r.nres[d])
			q, avail = r.first[d]+used, r.nres[d]-used
		} else {
			q, avail = *end, len(pkts)-*end
		}
		t := min(avail, e-got)
		if t <= 0 {
			continue
		}
		lo := r.first[j+1]
		r.spare = r.spare[:0]
		for i := q; i < q+t; i++ {
			r.spare = append(r.spare, pkts[i].Buf)
		}
		for i := q - 1; i >= lo; i-- {
			pkts[i+t].Buf = pkts[i].Buf
		}
		for i, b := range r.spare {
			pkts[lo+i].Buf = b
		}
		for jj := j + 1; jj < min(d+1, m); jj++ {
			r.first[jj] += t
		}
		if d < m {
			r.nres[d] -= t
		} else {
			*end += t
		}
		got += t
	}
	if got > 0 {
		r.planned.pkts = nil // the next plan is a full one (planned.g stays: piece0 reads it)
	}
	return got
}

// emit hands the segment of n bytes at FH in pkts[src]'s buffer over as
// pkts[out] (out ≤ src; pkts[out]'s buffer is free) and returns the next out.
func (l *Link) emit(pkts []link.Packet, out, src, n, s int) int {
	if out != src {
		pkts[out].Buf, pkts[src].Buf = pkts[src].Buf, pkts[out].Buf
	}
	pk := &pkts[out]
	pk.Buf = pk.Buf[:fh+n]
	pk.Off, pk.Len = fh, n
	var ok bool
	if l.rx.raw {
		ok = l.acceptFrame(pk, s)
	} else {
		ok = l.acceptDatagram(pk)
	}
	if ok {
		return out + 1
	}
	return out
}

// queueSegs queues all segments of message j.
func (l *Link) queueSegs(j, p, plen, segSize int) {
	r := &l.rx
	r.pendMeta = append(r.pendMeta, r.meta)
	off := len(r.pendBuf)
	r.pendBuf = append(r.pendBuf, make([]byte, plen)...)
	r.gather(j, p, p+plen, r.pendBuf[off:])
	for s := 0; s*segSize < plen; s++ {
		r.pend = append(r.pend, pendSeg{off: off + s*segSize, n: min(segSize, plen-s*segSize), s: s, meta: len(r.pendMeta) - 1})
	}
}

// queueSeg queues one segment of the message whose meta was queued last.
func (l *Link) queueSeg(seg []byte, s int) {
	r := &l.rx
	off := len(r.pendBuf)
	r.pendBuf = append(r.pendBuf, seg...)
	r.pend = append(r.pend, pendSeg{off: off, n: len(seg), s: s, meta: len(r.pendMeta) - 1})
}

// Pending reports whether TryRecv would find segments (link.PendingReporter):
// queued ones, a frame in the AF_PACKET socket's ring, or a datagram in the
// socket (SIOCINQ: the size of the next one, 0 when the queue is empty, for
// a UDP and a packet socket alike). It waits for no lock and allocates
// nothing. An error (a closed socket) reports true, so that TryRecv returns
// it.
func (l *Link) Pending() bool {
	if l.queued.Load() {
		return true
	}
	if l.rx.ring != nil {
		return l.ringPending()
	}
	l.inqs.Add(1)
	if err := l.rxConn().Control(l.pendingFn); err != nil {
		return true
	}
	return l.inq.Load() != 0
}

// ringPending is Pending with a ring: a look at its head frame (which
// SIOCINQ does not count; the socket's queue holds only whole copies of
// frames in the ring) under rxMu, as emptyRing's, without the RawConn's
// file reference (in the lab's VMs, guarded pollers ask Pending on every
// empty look: 15% of `roce perf write`'s client samples went to it). When
// another goroutine holds rxMu, a read is in progress: true, and TryRecv
// tells.
func (l *Link) ringPending() bool {
	if !l.rxMu.TryLock() {
		return true
	}
	g := l.rx.ring
	p := l.raw.closed.Load() || g.lateErr != 0 || g.Ready()
	l.rxMu.Unlock()
	return p
}

// inqOf is pendingFn: the next datagram's size, or -1 when the socket
// cannot say. Goroutines that ask at once may read each other's answer:
// both are the same socket's, a moment apart.
func (l *Link) inqOf(fd uintptr) {
	n, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	if err != nil {
		n = -1
	}
	l.inq.Store(int64(n))
}

// noteQueue records whether segments are queued, for Pending. Called with
// rxMu held whenever the queue may have changed.
func (l *Link) noteQueue() {
	l.queued.Store(l.rx.pendNext < len(l.rx.pend))
}

// deliverPending hands queued segments over first.
func (l *Link) deliverPending(pkts []link.Packet) int {
	defer l.noteQueue()
	r := &l.rx
	out := 0
	for r.pendNext < len(r.pend) && out < len(pkts) {
		e := r.pend[r.pendNext]
		r.pendNext++
		r.meta = r.pendMeta[e.meta]
		pk := &pkts[out]
		if e.n > cap(pk.Buf)-fh {
			l.stats.RxMalformed.Add(1)
			continue
		}
		copy(pk.Buf[fh:cap(pk.Buf)], r.pendBuf[e.off:e.off+e.n])
		out = l.emit(pkts, out, out, e.n, e.s)
		r.nQueued++
	}
	if r.pendNext == len(r.pend) {
		r.pend, r.pendNext, r.pendBuf, r.pendMeta = r.pend[:0], 0, r.pendBuf[:0], r.pendMeta[:0]
		if cap(r.pendBuf) > 1<<20 {
			r.pendBuf = nil // a backlog's worth: let it go
		}
	}
	return out
}

// parseDatagram reads message j's source address and control messages (a
// datagram from the UDP socket) into r.meta and returns where its payload
// starts, its length and its segment size (0: not coalesced).
func (l *Link) parseDatagram(j, n int) (p, plen, segSize int, ok bool) {
	r := &l.rx
	h := &r.hdrs[j].Hdr
	ip, port, ok := parseSockaddr(r.names[j*nameLen : j*nameLen+int(h.Namelen)])
	if !ok {
		l.stats.RxMalformed.Add(1)
		return 0, 0, 0, false
	}
	r.meta.addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ip), UDPSrcPort: port, HopLimit: 64}
	segSize, ok = parseControl(r.ctl[j*rxCtlLen:j*rxCtlLen+int(h.Controllen)], &r.meta.addr)
	if !ok {
		l.stats.RxMalformed.Add(1)
		return 0, 0, 0, false
	}
	if !l.isLocal(r.meta.addr.DstGID) {
		l.stats.RxNotForUs.Add(1)
		return 0, 0, 0, false
	}
	return 0, n, segSize, true
}

// acceptDatagram verifies a datagram (or segment) from the UDP socket,
// whose addressing is r.meta.addr, by its ICRC.
func (l *Link) acceptDatagram(pk *link.Packet) bool {
	pk.Addr = l.rx.meta.addr
	if err := pk.Parsed.ParseTransport(pk.Transport(), wire.RoCEv2); err != nil {
		l.stats.RxMalformed.Add(1)
		return false
	}
	// Rebuild the headers in the headroom and check the ICRC.
	start, nlen := l.pseudoHeaders(&l.rx.pseudo, pk, pk.Addr.UDPSrcPort, 0)
	end := pk.Off + pk.Len
	rx := binary.LittleEndian.Uint32(pk.Buf[end-wire.ICRCLen:])
	c := wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2)
	if c != rx {
		if !pk.Addr.DstGID.Is4In6() {
			l.stats.RxBadICRC.Add(1)
			return false
		}
		// IPv4: the kernel hid the Identification; solve for it.
		if _, ok := l.ids.basis(end - wire.ICRCLen - (start + 6)).solve(c ^ rx); !ok {
			l.stats.RxBadICRC.Add(1)
			return false
		}
		l.IDSolved.Add(1)
	}
	l.stats.RxPackets.Add(1)
	l.stats.RxBytes.Add(uint64(pk.Len))
	return true
}

// parseControl reads the destination address, TOS/traffic class, TTL/hop
// limit and GRO segment size from a datagram's control messages, without
// allocating.
func parseControl(b []byte, a *link.Addr) (segSize int, ok bool) {
	for len(b) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		n := int(h.Len)
		if n < unix.SizeofCmsghdr || n > len(b) {
			return 0, false
		}
		d := b[unix.CmsgLen(0):n]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(d) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex, spec_dst, addr (the header's destination).
			a.DstGID = netip.AddrFrom16(netip.AddrFrom4([4]byte(d[8:12])).As16())
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(d) >= 16:
			if !a.DstGID.IsValid() {
				a.DstGID = netip.AddrFrom16([16]byte(d[:16]))
			}
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(d) >= 1:
			a.TrafficClass = d[0]
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TTL && len(d) >= 4:
			a.HopLimit = uint8(binary.NativeEndian.Uint32(d))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(d) >= 4:
			a.TrafficClass = uint8(binary.NativeEndian.Uint32(d))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(d) >= 4:
			a.HopLimit = uint8(binary.NativeEndian.Uint32(d))
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO && len(d) >= 2:
			if len(d) >= 4 {
				segSize = int(binary.NativeEndian.Uint32(d))
			} else {
				segSize = int(binary.NativeEndian.Uint16(d))
			}
		}
		sp := unix.CmsgSpace(n - unix.CmsgLen(0))
		if sp > len(b) {
			break
		}
		b = b[sp:]
	}
	return segSize, a.DstGID.IsValid()
}

// disableGRO turns UDP_GRO off on the link's UDP socket (once).
func (l *Link) disableGRO() {
	if !l.groOff.CompareAndSwap(false, true) {
		return
	}
	l.rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 0)
	})
}

var _ link.Poller = (*Link)(nil)
