package udp

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/wire"
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

// frameSource is what the reads take frames from: an AF_PACKET socket's
// receive ring (*pktring.Ring), or an AF_XDP socket's (*xsk.Socket, which
// writes TPACKET_V2's headers into each frame it hands over, so both
// look alike from here on). The interface costs the ring's path what the
// calls it no longer inlines cost: in bench/callgrind.sh's census 27
// instructions of 8,030 a round trip and 4 call sites of 90 (8,003 and
// 86 before). Methods that pick the source with a branch measured no
// better (8,022 and 90: the branches keep them from being inlined).
type frameSource interface {
	Head() int32
	Status(i int32) uint32
	Frame(i int32) ([]byte, *unix.Tpacket2Hdr)
	After(i int32) int32
	Ready() bool
	ReadyUpTo(limit int) int
	Release(i int32)
	Unmap()
	Frames() int
	FrameSize() int
}

// rxRing is the receive ring of the link's privileged socket, and what
// the UDP link's reads keep beside it.
type rxRing struct {
	frameSource // its head is moved under the link's rxMu
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
	return &rxRing{frameSource: g}, nil
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
// ready at the ring's head as they lie there, each frame read in place
// (shortFrame, or generalFrame) and each segment copied once, to its
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
		got, nseg, lay, ok := l.shortFrame(pkts[out:], b, pktring.Name(f))
		if !ok {
			var stop bool
			got, nseg, lay, stop = l.generalFrame(pkts[out:], b, pktring.Name(f))
			if stop {
				break // for the next look, or the general read's queue
			}
		}
		taken++
		g.framed.Add(1)
		r.record(nseg)
		gmax = max(gmax, lay)
		out += got
		r.nInPlace += uint64(got) // one copy, the only one: in place
		g.Release(i)
	}
	if taken == 0 {
		return 0, false
	}
	r.follow(gmax)
	return out, true
}

// generalFrame is ringDirect's work for frame b, whose sockaddr_ll is name:
// its headers parsed in the frame (parseHeaders) and each segment copied
// once, to its buffer in pkts, and checked (acceptFrame). It returns how
// many it accepted, the frame's segment count (1 for a frame whose
// headers it drops it for, as the general read records such a frame) and
// layoutSize's figure for them; or stop, when pkts has too few buffers
// left for the frame's segments, which it leaves in the ring, untouched.
func (l *Link) generalFrame(pkts []link.Packet, b, name []byte) (got, nseg, lay int, stop bool) {
	p, plen, segSize, ok := l.parseHeaders(b[:min(len(b), frameHdrMax)], len(b), name)
	if !ok {
		return 0, 1, 0, false
	}
	nseg, segSize = segments(plen, segSize)
	if nseg > len(pkts) {
		return 0, 0, 0, true
	}
	for s := range nseg {
		pk := &pkts[got]
		if !l.takeSeg(pk, b[p+s*segSize:p+min(plen, (s+1)*segSize)]) {
			continue
		}
		if l.acceptFrame(pk, s) {
			got++
		}
	}
	return got, nseg, layoutSize(nseg, segSize), false
}

// takeSeg copies a segment of a frame into pk's buffer, at FH, as a
// packet received; or, too long for it, counts it malformed and reports
// false.
func (l *Link) takeSeg(pk *link.Packet, seg []byte) bool {
	if len(seg) > cap(pk.Buf)-fh {
		l.stats.RxMalformed.Add(1)
		return false
	}
	pk.Buf = pk.Buf[:fh+len(seg)]
	copy(pk.Buf[fh:], seg)
	pk.Off, pk.Len = fh, len(seg)
	return true
}

// shortFrame is generalFrame for the frame of the common case, in fewer
// steps: an IPv4 RoCE v2 datagram (or a UDP GSO message of them) without
// IP options or fragmentation, to the link's port and a local address,
// sent to this host, whose segments pkts has room for. Checked in that
// order, before anything changes; for any other frame it returns false,
// having changed nothing, and generalFrame takes it, which decides what
// is malformed or not for us and counts it. What it takes it delivers as
// generalFrame would: the same packets, addresses and counters, each
// segment's outcome (too long, malformed, ICRC wrong, accepted) decided
// in the same order.
//
// Where generalFrame copies each segment's headers to a stack buffer,
// masks them there and runs them through a CRC loop of its own before
// the segment (wire.ICRCv2), shortFrame writes them into the frame itself,
// just before the segment, as the segment's own sender would have sent
// them, and computes the ICRC over the frame in one pass (wire.ICRC); the
// frame is the link's until it is released. For segment 0 that is where
// the headers were; for a later one, the tail of the segments before it,
// already copied out. And it keeps the last addressing it derived, with
// the local addresses and groups it was checked against, so a run of
// frames from one peer converts and looks up no address.
func (l *Link) shortFrame(pkts []link.Packet, b, name []byte) (got, nseg, lay int, ok bool) {
	const (
		l2 = vnetLen + wire.EthernetLen
		p  = l2 + wire.IPv4MinLen + wire.UDPLen // the payload: the first segment
	)
	if len(b) < p || name[10] != unix.PACKET_HOST || l.generalOnly {
		return 0, 0, 0, false
	}
	ip := b[l2:p]
	gsoType, gsoSize := b[1], int(binary.NativeEndian.Uint16(b[4:]))
	plen := int(binary.BigEndian.Uint16(ip[2:])) - wire.IPv4MinLen - wire.UDPLen
	if gsoType != vnetGSONone && gsoType != vnetGSOUDPL4 ||
		binary.BigEndian.Uint16(b[vnetLen+12:]) != wire.EtherTypeIPv4 ||
		ip[0] != 0x45 || ip[9] != wire.IPProtocolUDP ||
		binary.BigEndian.Uint16(ip[6:])&0x3FFF != 0 || // MF, fragment offset
		binary.BigEndian.Uint16(ip[wire.IPv4MinLen+2:]) != l.cfg.Port ||
		plen < wire.BTHLen+wire.ICRCLen || p+plen > len(b) {
		return 0, 0, 0, false
	}
	sa := &l.rx.lastAddr
	local, groups := l.local.Load(), l.mc.groups.Load()
	if sa.local != local || sa.groups != groups || sa.ips != [8]byte(ip[12:20]) {
		src, dst := netip.AddrFrom16(netip.AddrFrom4([4]byte(ip[12:16])).As16()), netip.AddrFrom16(netip.AddrFrom4([4]byte(ip[16:20])).As16())
		if !l.isLocal(dst) {
			return 0, 0, 0, false
		}
		*sa = shortAddr{local: local, groups: groups, ips: [8]byte(ip[12:20]), src: src, dst: dst}
	}
	segSize := 0
	if gsoType == vnetGSOUDPL4 {
		segSize = gsoSize
	}
	nseg, segSize = segments(plen, segSize)
	if nseg > len(pkts) {
		return 0, 0, 0, false
	}
	// Taken: from here on the frame is shortFrame's.
	a := link.Addr{Version: wire.RoCEv2, UDPSrcPort: binary.BigEndian.Uint16(ip[wire.IPv4MinLen:]),
		SrcGID: sa.src, DstGID: sa.dst, TrafficClass: ip[1], HopLimit: ip[8]}
	hdr := [wire.IPv4MinLen + wire.UDPLen]byte(ip)
	id0 := binary.BigEndian.Uint16(ip[4:])
	l.rx.hguess = len(hdr)
	for s := range nseg {
		start := p + s*segSize
		seg := b[start : p+min(plen, (s+1)*segSize)]
		pk := &pkts[got]
		if !l.takeSeg(pk, seg) {
			continue
		}
		if err := pk.Parsed.ParseTransport(pk.Buf[fh:], wire.RoCEv2); err != nil {
			l.stats.RxMalformed.Add(1)
			continue
		}
		// The headers this segment's sender sent it with, before it.
		h := b[start-len(hdr) : start]
		*(*[len(hdr)]byte)(h) = hdr
		binary.BigEndian.PutUint16(h[2:], uint16(len(hdr)+len(seg)))
		binary.BigEndian.PutUint16(h[4:], id0+uint16(s))
		binary.BigEndian.PutUint16(h[wire.IPv4MinLen+4:], uint16(wire.UDPLen+len(seg)))
		end := start + len(seg) - wire.ICRCLen
		rx := binary.LittleEndian.Uint32(b[end:])
		if c := wire.ICRC(b[start-len(hdr):end], wire.IPv4MinLen, wire.RoCEv2); c != rx && !l.keptID(s, id0, len(hdr)+end-start-6, c^rx) {
			l.stats.RxBadICRC.Add(1)
			continue
		}
		pk.Addr = a
		l.stats.RxPackets.Add(1)
		l.stats.RxBytes.Add(uint64(len(hdr) + len(seg)))
		got++
	}
	return got, nseg, layoutSize(nseg, segSize), true
}

// shortAddr is the addressing shortFrame derived last: for the IPv4
// source and destination ips, the GIDs, found local in the sets of local
// addresses and joined groups named. The zero shortAddr names no set of
// local addresses, and a link always has one (New sets it), so it is
// never taken for one derived.
type shortAddr struct {
	local  *link.AddrSet
	groups *map[netip.Addr]bool
	ips    [8]byte
	src    netip.Addr
	dst    netip.Addr
}
