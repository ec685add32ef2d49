package afpacket

import (
	"bytes"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/wire"
)

// The link reads its socket's receive ring (link/pktring) instead of
// making a recvmsg(2) per frame and one more per look that finds nothing.
// Its frames hold a whole RoCE packet of the netdev's MTU (at most a
// 4096-byte path MTU's, whatever the netdev's), so that every packet
// but a superpacket is read with no system call at all; a superpacket
// (a peer's GSO message over a veth) reaches its frame truncated and,
// queued whole on the socket as well (TP_STATUS_COPY), is read with
// recvmsg as before. A look at an empty link is a load of the next
// frame's status word: a CQ poller spinning on it (perftest's way) costs
// nothing while nothing arrives, and the device's work runs on the
// poller's goroutine (link.Poller).
//
// Each packet is copied out of its frame into the caller's buffer before
// the frame goes back to the kernel, and the ICRC is verified on that
// copy: the kernel may reuse a frame as soon as it is released, and a
// packet handed on inside a frame could change after its check.
const (
	// ringFrames: the ring holds about as many packets as the socket's
	// 16 MiB receive buffer (8 MiB forced, doubled) held without it
	// (4,096 frames), within ringMaxSize bytes of kernel memory.
	ringFrames  = 4096
	ringMaxSize = 16 << 20
	// ringMaxPacket: the longest frame a RoCE packet makes (a 4096-byte
	// path MTU's packet behind the largest headers), the frames' bound on
	// a netdev whose MTU is larger (loopback's 65536).
	ringMaxPacket = 4096 + 128 + wire.IPv6Len + wire.UDPLen + wire.EthernetLen + wire.VLANTagLen
	// ringCheck: the bytes of a queued copy compared with its frame's.
	ringCheck = 96
)

// noRing, set by tests, opens links without the ring, as a kernel that
// refuses PACKET_RX_RING leaves them.
var noRing bool

// frameFor is the ring's frame size for a netdev of MTU mtu.
func frameFor(mtu int) int {
	n := pktring.Headroom + min(mtu+wire.EthernetLen+wire.VLANTagLen, ringMaxPacket)
	return (n + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
}

// ringSizeFor is the ring's size in bytes for frames of frame bytes.
func ringSizeFor(frame int) int { return min(ringFrames*frame, ringMaxSize) }

// rxRing is the ring and its counts: packets read from frames (framed),
// from the socket's queue (copied), truncated and not queued (truncated:
// lost, counted as socket drops), and queued copies that were not their
// frame's packet (mismatched: dropped).
type rxRing struct {
	*pktring.Ring
	framed, copied, truncated, mismatched atomic.Uint64
}

// readFrame reads the next frame into b, spilling into r.over, with its
// sockaddr_ll in r.name and, when vnet, its virtio-net header in r.vh, as
// r.recvmsg does: from the ring when the link has one. It returns the
// frame's length, or EAGAIN when nothing has arrived.
func (l *Link) readFrame(fd uintptr, b []byte, vnet bool) (int, unix.Errno) {
	r := &l.rx
	g := r.ring
	if g == nil {
		return r.recvmsg(fd, b, vnet)
	}
	vn := 0
	if vnet {
		vn = vnetLen
	}
	for {
		i := g.Head()
		st := g.Status(i)
		if st&unix.TP_STATUS_USER == 0 {
			return 0, unix.EAGAIN
		}
		f, h := g.Frame(i)
		if st&unix.TP_STATUS_COPY != 0 {
			n, e := r.recvmsg(fd, b, vnet)
			switch e {
			case 0:
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				// The copy is gone: the packet is lost.
				g.truncated.Add(1)
				l.stats.RxSocketFull.Add(1)
				g.Release(i)
				continue
			default:
				// The kernel refused the copy (EINVAL: a superpacket it
				// cannot describe) and dropped it; its frame goes back.
				g.Release(i)
				return 0, e
			}
			if !r.copyOf(f, h, b, n) {
				// Never seen: the kernel queues the copies in the frames'
				// order. Should one not be its frame's packet all the same,
				// it is dropped, never given another frame's address, and
				// the frame waits for the next copy.
				g.mismatched.Add(1)
				l.stats.RxMalformed.Add(1)
				continue
			}
			copy(r.nameBytes(), pktring.Name(f))
			g.Release(i)
			g.copied.Add(1)
			return n, 0
		}
		d, whole := pktring.Data(f, h, vn)
		if !whole {
			// Truncated and not queued (the socket's buffer was full).
			g.truncated.Add(1)
			l.stats.RxSocketFull.Add(1)
			g.Release(i)
			continue
		}
		copy(r.nameBytes(), pktring.Name(f))
		copy(r.vh[:], d[:vn])
		d = d[vn:]
		c := copy(b, d)
		copy(r.over, d[c:])
		g.Release(i)
		g.framed.Add(1)
		return len(d), 0
	}
}

// copyOf reports whether the n-byte packet just read into b (and r.over)
// is frame f's: its first bytes are the frame's.
func (r *rxState) copyOf(f []byte, h *unix.Tpacket2Hdr, b []byte, n int) bool {
	c := min(ringCheck, int(h.Snaplen), n)
	mac := int(h.Mac)
	if c <= 0 || mac+c > len(f) {
		return false
	}
	var have [ringCheck]byte
	k := copy(have[:c], b[:min(len(b), n)])
	copy(have[k:c], r.over)
	return bytes.Equal(have[:c], f[mac:mac+c])
}

// nameBytes is r.name's memory, for the frame's sockaddr_ll.
func (r *rxState) nameBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&r.name)), unix.SizeofSockaddrLinklayer)
}
