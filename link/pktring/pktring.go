// Package pktring is an AF_PACKET socket's receive ring (PACKET_RX_RING,
// TPACKET_V2), for the links that receive through such a socket
// (link/udp's privileged mode, link/afpacket).
//
// A busy-polling CQ looks at its link between packets, and nearly every
// look finds nothing: on a socket that is a system call returning EAGAIN
// (1.9 µs on the development host, far more in an emulated VM). A look at
// the ring is a load of the next frame's status word. The kernel copies
// each packet into the next free frame (truncated to the frame) and, with
// PACKET_COPY_THRESH, queues a packet it had to truncate whole on the
// socket as well, marking its frame TP_STATUS_COPY; the reader takes that
// copy with recvmsg or recvmmsg. The links keep their own read logic; this
// package holds the ring's layout and its ownership protocol.
//
// The socket must get its ring before it is bound to a protocol (open it
// with protocol 0): a packet queued on the socket before the ring exists
// would later be read as the whole copy of some truncated frame.
//
// Every access to the ring's memory must happen inside a callback of the
// socket's RawConn (Read, Control), and Unmap only after the socket's
// Close, which waits for those callbacks to return.
package pktring

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SLL is where TPACKET_V2 puts a frame's sockaddr_ll:
// TPACKET_ALIGN(sizeof(struct tpacket2_hdr)).
const SLL = unix.SizeofTpacket2Hdr

// Headroom is how far into a frame the kernel starts the link-layer
// header at most, for an Ethernet frame behind a virtio-net header: the
// frame header and sockaddr_ll, aligned, with room for a VLAN tag (a
// frame of Headroom+n bytes holds n bytes of packet).
const Headroom = 128

// block is the size of one of the ring's blocks. A frame never straddles
// two: a block holds block/frame frames.
const block = 128 << 10

// Ring is a socket's receive ring.
type Ring struct {
	mem      []byte
	frame    int   // bytes per frame
	perBlock int32 // frames per block
	frames   int32
	next     atomic.Int32 // the frame the next read looks at
}

// Setup gives fd, not yet bound, a ring of about size bytes in frames of
// frame bytes (a multiple of 16, at most 128 KiB). A kernel or a machine
// that cannot give it leaves the socket without one (an error).
func Setup(fd, frame, size int) (*Ring, error) {
	if frame <= 0 || frame%unix.TPACKET_ALIGNMENT != 0 || frame > block {
		return nil, fmt.Errorf("pktring: frame size %d: want a multiple of %d up to %d", frame, unix.TPACKET_ALIGNMENT, block)
	}
	blocks := max(size/block, 1)
	per := block / frame
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return nil, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return nil, err
	}
	req := unix.TpacketReq{Block_size: block, Block_nr: uint32(blocks), Frame_size: uint32(frame), Frame_nr: uint32(per * blocks)}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, blocks*block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		req = unix.TpacketReq{}
		_ = unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req)
		return nil, err
	}
	return &Ring{mem: mem, frame: frame, perBlock: int32(per), frames: int32(per * blocks)}, nil
}

// Unmap releases the ring, once, after the socket's Close: no callback
// reads it then. g.mem keeps its value: the Close, not a write the race
// detector could pair with the last read, orders them.
func (g *Ring) Unmap() { _ = unix.Munmap(g.mem) }

// Frames is the number of frames; FrameSize their size.
func (g *Ring) Frames() int    { return int(g.frames) }
func (g *Ring) FrameSize() int { return g.frame }

func (g *Ring) off(i int32) int {
	return int(i/g.perBlock)*block + int(i%g.perBlock)*g.frame
}

// Head is the frame the next read looks at.
func (g *Ring) Head() int32 { return g.next.Load() }

// Status is frame i's status word, read atomically (TP_STATUS_*).
func (g *Ring) Status(i int32) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&g.mem[g.off(i)])))
}

// Frame is frame i and its header. Its bytes are the reader's only while
// its status says TP_STATUS_USER, until Release.
func (g *Ring) Frame(i int32) ([]byte, *unix.Tpacket2Hdr) {
	o := g.off(i)
	f := g.mem[o : o+g.frame : o+g.frame]
	return f, (*unix.Tpacket2Hdr)(unsafe.Pointer(&f[0]))
}

// After is the frame after frame i.
func (g *Ring) After(i int32) int32 {
	if i++; i == g.frames {
		return 0
	}
	return i
}

// Ready reports whether the head frame holds a packet.
func (g *Ring) Ready() bool { return g.Status(g.Head())&unix.TP_STATUS_USER != 0 }

// ReadyUpTo counts the frames from the head on that hold packets, up to
// limit: a read that takes a message per frame has no use for more.
func (g *Ring) ReadyUpTo(limit int) int {
	limit = min(limit, int(g.frames))
	n := 0
	for i := g.Head(); n < limit && g.Status(i)&unix.TP_STATUS_USER != 0; i = g.After(i) {
		n++
	}
	return n
}

// Release gives frame i, the head, back to the kernel and moves the head
// on.
func (g *Ring) Release(i int32) {
	o := g.off(i)
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&g.mem[o])), unix.TP_STATUS_KERNEL)
	g.next.Store(g.After(i))
}

// Data is frame f's packet as the kernel placed it, behind vnet bytes (a
// virtio-net header's room, 0 without one), and whether all of it is
// there: false when the packet was truncated (h.Snaplen < h.Len) or the
// header's offsets do not fit the frame (never from a working kernel; the
// frame is then unusable, b nil).
func Data(f []byte, h *unix.Tpacket2Hdr, vnet int) (b []byte, whole bool) {
	mac, snap := int(h.Mac), int(h.Snaplen)
	if mac < SLL+unix.SizeofSockaddrLinklayer+vnet || mac+snap > len(f) {
		return nil, false
	}
	return f[mac-vnet : mac+snap], snap >= int(h.Len)
}

// Name is frame f's sockaddr_ll, as the kernel wrote it.
func Name(f []byte) []byte { return f[SLL : SLL+unix.SizeofSockaddrLinklayer] }

// DescribesUSO reports whether the running kernel can put a UDP GSO or
// GRO superpacket's GSO type in an AF_PACKET socket's virtio_net_hdr
// (VIRTIO_NET_HDR_GSO_UDP_L4, Linux 6.2). Older kernels answer recvmsg
// with EINVAL and drop the packet; into a ring they cannot put it at all.
func DescribesUSO() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return ReleaseAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 2)
}

// ReleaseAtLeast reports whether a kernel release string ("6.1.0-57-amd64",
// "6.18.44-fc") is major.minor or later; false when it does not parse.
func ReleaseAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
