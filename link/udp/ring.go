package udp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktring"
)

// The privileged receive path reads from a ring the kernel fills
// (PACKET_RX_RING, TPACKET_V2) instead of with a recvmmsg(2) per look.
//
// A busy-polling CQ (perftest's default, `roce perf`, the ACK hold's
// poller) looks at the link between packets, and nearly every look finds
// it empty: with a socket that is a system call returning EAGAIN, 1.9 µs
// on this host (BenchmarkTryRecvEmpty, two thirds of it the call itself),
// far longer in the lab's emulated VMs, where such calls were a third of
// `roce perf send --lat`'s samples. A look at the ring is a load of the
// next frame's status word, and the copy that recvmmsg made in the kernel
// is made here, from the ring into the same iovecs plan laid out, so the
// rest of the receive path (process, parseFrame) sees what recvmmsg would
// have given it: the virtio-net header, then the frame; the sockaddr_ll;
// the message's length.
//
// Frames hold a whole packet of the netdev's MTU when it is at most
// ringFrameWhole−ringFrameOverhead (1,952: Ethernet's 1,500), else
// ringFrame bytes, where small packets (ACKs, short SENDs, the latency
// path) fit. A longer one (a data packet beyond a small frame, a GRO or
// GSO superpacket) reaches the ring truncated, and PACKET_COPY_THRESH has
// the kernel queue it whole on the socket as well (status TP_STATUS_COPY,
// queued before the status is set): the read takes it, and the run of
// such frames behind it, with one recvmmsg. Before Linux 6.2 the kernel
// cannot give this socket a UDP GRO superpacket (disableGRO), so there
// every data packet comes alone: in a frame of its own it costs the
// kernel one copy, truncated it costs a copy into the frame, a queued
// clone and its read (the lab's VMs, MTU 1500: write_bw's server moved
// 1.17× the bytes with whole frames in 12 paired rounds, and round trips
// measured alike; BENCHMARKS.md). A truncated frame the kernel could not
// also queue (the socket's receive buffer full) is a lost packet, counted
// as a socket drop; RC retransmits it.
//
// Every access to the ring's memory happens inside a callback of the
// socket's RawConn (Read, Control), or under the link's rxMu after a check
// that the socket is open (TryRecv's look at the head): the mapping is
// released after the socket's Close, which waits for those callbacks to
// return, and under rxMu.
const (
	ringFrame  = 512  // a frame: the header, sockaddr_ll, vnet header and a small packet
	ringFrames = 8192 // 4 MiB of ringFrame, 16 of ringFrameWhole
	// ringFrameWhole is a frame that holds a whole packet of an Ethernet
	// MTU; ringFrameOverhead what comes before the packet's IP header in
	// a frame (TPACKET_V2: the header and sockaddr_ll, 52 bytes, the
	// Ethernet header aligned to 80, the virtio-net header: 90), with a
	// margin.
	ringFrameWhole    = 2048
	ringFrameOverhead = 96
	// ringCheck: the bytes of a queued copy compared with its frame's
	// (Ethernet, IP and UDP headers, and the BTH).
	ringCheck = 96
)

// noRing, set by tests, opens privileged links without the ring, as a
// kernel that refuses PACKET_RX_RING leaves them.
var noRing bool

// rxRing is an AF_PACKET socket's receive ring (link/pktring), and what
// the UDP link's reads keep beside it.
type rxRing struct {
	*pktring.Ring // its head is moved under the link's rxMu
	// lateErr: the error of a read of queued packets that followed
	// packets from frames, for the next read to return (under rxMu).
	lateErr unix.Errno
	// framed counts packets read from frames, copied those read from the
	// socket's queue (TP_STATUS_COPY), truncated those the kernel could
	// neither fit nor queue, mismatched queued packets that were not their
	// frame's (for tests).
	framed, copied, truncated, mismatched atomic.Uint64
}

// ringFrameFor returns the frame size of a ring on a netdev of MTU mtu
// (0: unknown).
func ringFrameFor(mtu int) int {
	if mtu > 0 && mtu+ringFrameOverhead <= ringFrameWhole {
		return ringFrameWhole
	}
	return ringFrame
}

// setupRing asks for the ring on fd, before it is bound, in frames of
// frame bytes. A kernel or a machine that cannot give it leaves the
// socket as it was (an error).
func setupRing(fd, frame int) (*rxRing, error) {
	g, err := pktring.Setup(fd, frame, ringFrames*frame)
	if err != nil {
		return nil, err
	}
	return &rxRing{Ring: g}, nil
}

// lost counts a packet the kernel truncated into a frame and could not
// also queue: a socket drop.
func (g *rxRing) lost(r *rxState) {
	g.truncated.Add(1)
	if r.full != nil {
		r.full.Add(1)
	}
}

// read fills up to r.m of r's messages from the ring, as recvmmsg on the
// socket would: the number filled, or EAGAIN when there was none.
func (g *rxRing) read(fd uintptr, r *rxState) (int, unix.Errno) {
	if e := g.lateErr; e != 0 {
		g.lateErr = 0
		return 0, e
	}
	n := 0
	for n < r.m {
		i := g.Head()
		st := g.Status(i)
		if st&unix.TP_STATUS_USER == 0 {
			break
		}
		if st&unix.TP_STATUS_COPY != 0 {
			got, e := g.readQueued(fd, r, n)
			n += got
			if e != 0 {
				if n == 0 {
					return 0, e
				}
				g.lateErr = e // returned by the next read, as recvmmsg does
				break
			}
			continue
		}
		f, b, ok := g.frameData(i, r)
		if !ok {
			continue
		}
		copy(r.names[n*nameLen:], pktring.Name(f))
		trunc := !r.scatter(n, b)
		hd := &r.hdrs[n]
		hd.Len = uint32(len(b))
		if trunc {
			hd.Hdr.Flags |= unix.MSG_TRUNC
		}
		hd.Hdr.Namelen = unix.SizeofSockaddrLinklayer
		g.Release(i)
		g.framed.Add(1)
		n++
	}
	if n == 0 {
		return 0, unix.EAGAIN
	}
	return n, 0
}

// frameData returns frame i and its packet, virtio-net header first; a
// frame truncated and not queued it counts lost and releases (false).
func (g *rxRing) frameData(i int32, r *rxState) (f, b []byte, ok bool) {
	f, h := g.Frame(i)
	b, whole := pktring.Data(f, h, vnetLen)
	if !whole {
		g.lost(r) // truncated and not queued
		g.Release(i)
		return nil, nil, false
	}
	return f, b, true
}

// readQueued takes the packets of the run of TP_STATUS_COPY frames at the
// ring's head from the socket's queue, into r's messages n, n+1, …, with
// one recvmmsg, and gives each its frame's sockaddr_ll (the queued copy's
// carries only the family). It returns how many it filled and the call's
// error.
func (g *rxRing) readQueued(fd uintptr, r *rxState, n int) (int, unix.Errno) {
	k := 0
	for i := g.Head(); n+k < r.m; i, k = g.After(i), k+1 {
		if st := g.Status(i); st&unix.TP_STATUS_USER == 0 || st&unix.TP_STATUS_COPY == 0 {
			break
		}
	}
	got, e := recvmmsg(fd, r.hdrs[n:n+k])
	if e != 0 {
		// The kernel refused the packet at the head (EINVAL: a
		// superpacket it cannot describe in a virtio_net_hdr) and dropped
		// it, or its copy is gone (EAGAIN): its frame goes back.
		g.Release(g.Head())
		if e == unix.EAGAIN {
			g.lost(r)
			return 0, 0
		}
		return 0, e
	}
	bad := 0
	for j := range got {
		var have, want [ringCheck]byte
		i := g.Head()
		f, h := g.Frame(i)
		// The queued copy must be the frame's packet: the kernel queues
		// them in the frames' order, and one it refuses (EINVAL) it
		// consumes, with its frame released above (or on the next call,
		// when recvmmsg reports the error late). Should a copy not match
		// its frame all the same, it is dropped, never given another
		// packet's link-layer address, and the frame waits for the next.
		c := min(ringCheck, int(h.Snaplen), int(r.hdrs[n+j].Len)-vnetLen)
		if mac := int(h.Mac); c <= 0 || mac+c > len(f) {
			c = 0
		} else {
			copy(want[:], f[mac:mac+c])
			r.gather(n+j, vnetLen, vnetLen+c, have[:c])
		}
		if c == 0 || have != want || g.Status(i)&unix.TP_STATUS_COPY == 0 {
			g.mismatched.Add(1)
			bad++
			r.hdrs[n+j].Hdr.Flags |= unix.MSG_TRUNC // process counts it malformed and drops it
			continue
		}
		copy(r.names[(n+j)*nameLen:], pktring.Name(f))
		g.Release(i)
	}
	g.copied.Add(uint64(got - bad))
	return got, 0
}

// scatter copies b into message j's iovecs, as the kernel would, and
// reports whether all of it fit.
func (r *rxState) scatter(j int, b []byte) bool {
	for _, v := range r.iovs[j*maxIov : j*maxIov+r.niov[j]] {
		if len(b) == 0 {
			return true
		}
		c := copy(unsafe.Slice(v.Base, int(v.Len)), b)
		b = b[c:]
	}
	return len(b) == 0
}

// ringDirect is TryRecv's common case with a ring: it takes the frames
// ready at the ring's head as they lie there, each frame's headers parsed
// in the frame (parseHeaders) and each segment copied once, to its
// caller buffer at FH, where the general read lays out a read (plan),
// copies the frames into it (read, scatter), gathers the headers back
// out and then delivers the segments (process): 2,000 instructions per
// round trip of roce perf send --lat (bench/callgrind.sh) went to that
// machinery. It reports false, having taken nothing, when the general read
// is wanted: a look that may fill every buffer (the general read samples
// the socket's drops after full reads), a drop sample owed, a frame whose
// packet waits in the socket's queue (TP_STATUS_COPY), an error to
// report, a closed socket, or a first frame with more segments than
// pkts has room for. Called with rxMu held, which keeps the ring mapped
// while the socket is open (rawRecv.close).
func (l *Link) ringDirect(pkts []link.Packet) (int, bool) {
	r := &l.rx
	g := r.ring
	if l.raw.closed.Load() || g.lateErr != 0 || r.drops.Owed() {
		return 0, false
	}
	k := g.ReadyUpTo(len(r.hdrs))
	if k == 0 || k >= len(r.hdrs) {
		return 0, false
	}
	out, taken, gmax := 0, 0, 0
	for range k {
		i := g.Head()
		if g.Status(i)&unix.TP_STATUS_COPY != 0 {
			break
		}
		f, b, ok := g.frameData(i, r)
		if !ok {
			taken++
			continue
		}
		l.turn.seen(g, i)
		p, plen, segSize, ok := l.parseHeaders(b[:min(len(b), frameHdrMax)], len(b), pktring.Name(f))
		if !ok {
			g.framed.Add(1)
			r.record(1)
			g.Release(i)
			taken++
			continue
		}
		nseg, segSize := segments(plen, segSize)
		if nseg > len(pkts)-out {
			break // for the next look, or the general read's queue
		}
		taken++
		g.framed.Add(1)
		r.record(nseg)
		gmax = max(gmax, layoutSize(nseg, segSize))
		r.meta.gso = nseg > 1
		for s := range nseg {
			seg := b[p+s*segSize : p+min(plen, (s+1)*segSize)]
			pk := &pkts[out]
			if len(seg) > cap(pk.Buf)-fh {
				l.stats.RxMalformed.Add(1)
				continue
			}
			pk.Buf = pk.Buf[:fh+len(seg)]
			copy(pk.Buf[fh:], seg)
			pk.Off, pk.Len = fh, len(seg)
			if l.acceptFrame(pk, s) {
				out++
				r.nInPlace++ // one copy, the only one: in place
			}
		}
		g.Release(i)
	}
	if taken == 0 {
		return 0, false
	}
	r.follow(gmax)
	return out, true
}
