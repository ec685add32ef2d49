package udp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
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
// Frames are ringFrame bytes: small packets (ACKs, short SENDs, the
// latency path) fit. A longer one (a data packet, a GRO or GSO
// superpacket) reaches the ring truncated, and PACKET_COPY_THRESH has the
// kernel queue it whole on the socket as well (status TP_STATUS_COPY, queued before the status is
// set): the read takes it, and the run of such frames behind it, with one
// recvmmsg. A truncated frame the kernel could not also queue (the
// socket's receive buffer full) is a lost packet, counted as a socket
// drop; RC retransmits it.
//
// Every access to the ring's memory happens inside a callback of the
// socket's RawConn (Read, Control), so the mapping is released only after
// the socket's Close, which waits for those callbacks to return.
const (
	ringFrame  = 512       // a frame: the header, sockaddr_ll, vnet header and a small packet
	ringBlock  = 128 << 10 // a block: 256 frames (PAGE_SIZE << 5)
	ringFrames = 8192      // 4 MiB
	// Where TPACKET_V2 puts the sockaddr_ll: TPACKET_ALIGN(sizeof(struct
	// tpacket2_hdr)).
	ringSLL = unix.SizeofTpacket2Hdr
	// ringCheck: the bytes of a queued copy compared with its frame's
	// (Ethernet, IP and UDP headers, and the BTH).
	ringCheck = 96
)

// noRing, set by tests, opens privileged links without the ring, as a
// kernel that refuses PACKET_RX_RING leaves them.
var noRing bool

// rxRing is an AF_PACKET socket's receive ring.
type rxRing struct {
	mem  []byte
	next atomic.Int32 // the frame the next read looks at; written under the link's rxMu
	// lateErr: the error of a read of queued packets that followed
	// packets from frames, for the next read to return (under rxMu).
	lateErr unix.Errno
	// framed counts packets read from frames, copied those read from the
	// socket's queue (TP_STATUS_COPY), truncated those the kernel could
	// neither fit nor queue, mismatched queued packets that were not their
	// frame's (for tests).
	framed, copied, truncated, mismatched atomic.Uint64
}

// setupRing asks for the ring on fd, before it is bound. A kernel or a
// machine that cannot give it leaves the socket as it was (an error).
func setupRing(fd int) (*rxRing, error) {
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return nil, err
	}
	req := unix.TpacketReq{Block_size: ringBlock, Block_nr: ringFrames * ringFrame / ringBlock, Frame_size: ringFrame, Frame_nr: ringFrames}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, ringFrames*ringFrame, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		req = unix.TpacketReq{}
		_ = unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req)
		return nil, err
	}
	return &rxRing{mem: mem}, nil
}

// unmap releases the ring, once (rawRecv.close), after the socket's Close:
// no callback reads it then. g.mem keeps its value: the Close, not a
// write the race detector could pair with the last read, orders them.
func (g *rxRing) unmap() {
	_ = unix.Munmap(g.mem)
}

// status is the status word of frame i.
func (g *rxRing) status(i int32) *uint32 {
	return (*uint32)(unsafe.Pointer(&g.mem[int(i)*ringFrame]))
}

// frame is frame i and its header.
func (g *rxRing) frame(i int32) ([]byte, *unix.Tpacket2Hdr) {
	f := g.mem[int(i)*ringFrame : int(i+1)*ringFrame]
	return f, (*unix.Tpacket2Hdr)(unsafe.Pointer(&f[0]))
}

// after is the frame after frame i.
func after(i int32) int32 {
	if i++; i == ringFrames {
		return 0
	}
	return i
}

// lost counts a packet the kernel truncated into a frame and could not
// also queue: a socket drop.
func (g *rxRing) lost(r *rxState) {
	g.truncated.Add(1)
	if r.full != nil {
		r.full.Add(1)
	}
}

// ready reports whether the next frame holds a packet.
func (g *rxRing) ready() bool {
	return atomic.LoadUint32(g.status(g.next.Load()))&unix.TP_STATUS_USER != 0
}

// release gives frame i back to the kernel and moves on.
func (g *rxRing) release(i int32) {
	atomic.StoreUint32(g.status(i), unix.TP_STATUS_KERNEL)
	g.next.Store(after(i))
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
		i := g.next.Load()
		st := atomic.LoadUint32(g.status(i))
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
		f, h := g.frame(i)
		mac, snap, plen := int(h.Mac), int(h.Snaplen), int(h.Len)
		if snap < plen || mac < ringSLL+unix.SizeofSockaddrLinklayer+vnetLen || mac+snap > ringFrame {
			g.lost(r) // truncated and not queued
			g.release(i)
			continue
		}
		copy(r.names[n*nameLen:], f[ringSLL:ringSLL+unix.SizeofSockaddrLinklayer])
		trunc := !r.scatter(n, f[mac-vnetLen:mac+snap])
		hd := &r.hdrs[n]
		hd.Len = uint32(vnetLen + plen)
		if trunc {
			hd.Hdr.Flags |= unix.MSG_TRUNC
		}
		hd.Hdr.Namelen = unix.SizeofSockaddrLinklayer
		g.release(i)
		g.framed.Add(1)
		n++
	}
	if n == 0 {
		return 0, unix.EAGAIN
	}
	return n, 0
}

// readQueued takes the packets of the run of TP_STATUS_COPY frames at the
// ring's head from the socket's queue, into r's messages n, n+1, …, with
// one recvmmsg, and gives each its frame's sockaddr_ll (the queued copy's
// carries only the family). It returns how many it filled and the call's
// error.
func (g *rxRing) readQueued(fd uintptr, r *rxState, n int) (int, unix.Errno) {
	k := 0
	for i := g.next.Load(); n+k < r.m; i, k = after(i), k+1 {
		if st := atomic.LoadUint32(g.status(i)); st&unix.TP_STATUS_USER == 0 || st&unix.TP_STATUS_COPY == 0 {
			break
		}
	}
	got, e := recvmmsg(fd, r.hdrs[n:n+k])
	if e != 0 {
		// The kernel refused the packet at the head (EINVAL: a
		// superpacket it cannot describe in a virtio_net_hdr) and dropped
		// it, or its copy is gone (EAGAIN): its frame goes back.
		g.release(g.next.Load())
		if e == unix.EAGAIN {
			g.lost(r)
			return 0, 0
		}
		return 0, e
	}
	bad := 0
	for j := range got {
		var have, want [ringCheck]byte
		i := g.next.Load()
		f, h := g.frame(i)
		// The queued copy must be the frame's packet: the kernel queues
		// them in the frames' order, and one it refuses (EINVAL) it
		// consumes, with its frame released above (or on the next call,
		// when recvmmsg reports the error late). Should a copy not match
		// its frame all the same, it is dropped, never given another
		// packet's link-layer address, and the frame waits for the next.
		c := min(ringCheck, int(h.Snaplen), int(r.hdrs[n+j].Len)-vnetLen)
		if mac := int(h.Mac); c <= 0 || mac+c > ringFrame {
			c = 0
		} else {
			copy(want[:], f[mac:mac+c])
			r.gather(n+j, vnetLen, vnetLen+c, have[:c])
		}
		if c == 0 || have != want || atomic.LoadUint32(g.status(i))&unix.TP_STATUS_COPY == 0 {
			g.mismatched.Add(1)
			bad++
			r.hdrs[n+j].Hdr.Flags |= unix.MSG_TRUNC // process counts it malformed and drops it
			continue
		}
		copy(r.names[(n+j)*nameLen:], f[ringSLL:ringSLL+unix.SizeofSockaddrLinklayer])
		g.release(i)
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
