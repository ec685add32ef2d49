// Package afpacket is the raw Ethernet link: RoCE v1 (Ethertype 0x8915,
// GRH + IBA transport) and, optionally, RoCE v2 built down to the Ethernet
// header, sent and received on a netdev with an AF_PACKET socket (root or
// CAP_NET_RAW). Because the link writes every header itself, it sends what
// Linux rxe sends: the UDP source port of the flow, a changing IPv4
// Identification, DSCP/ECN and the flow label, with the ICRC over all of
// it; and it verifies every received ICRC over the real headers.
//
// Destination MACs come from the next-hop resolver (link/neigh): a RoCE v2
// packet goes to the MAC of its route's next hop in the netdev's namespace
// (the gateway, or the destination when on-link), as the kernel would send
// it; a RoCE v1 frame to its destination on this Ethernet segment, and a v1
// destination behind a router is refused and explained (PathError). A
// link-local GID built from a MAC (EUI-64, as RoCE v1 GIDs are) gives the
// MAC directly; otherwise the kernel's neighbour table (netlink), and if it
// has no entry, an ARP request or IPv6 Neighbor Solicitation of the
// kernel's and of our own.
//
// Receiving, the socket asks for a virtio-net header (PACKET_VNET_HDR) with
// each frame: a UDP GSO superpacket (several RoCE v2 packets behind one set
// of headers, as a peer's link/udp sends them over a veth) comes with its
// segment size, and the link splits it (link.Superpacket). A kernel that
// cannot describe one (Linux < 6.2) refuses it with EINVAL; the link counts
// that drop, stops asking for the header and from then on finds the
// segments of a superpacket from the RoCE headers themselves.
//
// The socket has a receive ring (ring.go, link/pktring) whose frames hold
// any RoCE packet whole: a packet is read without a system call, and a
// look that finds nothing is a load from memory. The link is a
// link.Poller: a goroutine polling a CQ receives and handles the device's
// packets itself (run to completion) instead of waiting for the device's
// receive goroutine. On a kernel that cannot describe a UDP superpacket in
// a virtio-net header (Linux < 6.2), the ring's socket has no such header
// and superpackets' segments are found from their RoCE headers.
package afpacket

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/neigh"
	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/wire"
)

// Config configures a raw Ethernet link.
type Config struct {
	Ifindex int
	MAC     wire.MAC
	// GIDs are this port's GIDs (RoCE v1 GIDs and the addresses of RoCE
	// v2 GIDs); frames to other GIDs are dropped as not for us.
	GIDs []netip.Addr
	// V2 also carries RoCE v2 (UDP port 4791) on this link; otherwise only
	// RoCE v1 frames are sent and delivered, and the RoCE v2 packets to this
	// port's addresses are dropped, counted (Counters) and reported to
	// OnForeign: a v1-only port, like a ConnectX-3, never accepts RoCE v2.
	V2        bool
	MTU       int // largest transport packet; default netdev MTU - 40 (GRH)
	BatchSize int // default 64
	// Resolver finds next-hop MACs; nil makes one on this netdev (closed
	// with the link). A given one stays the caller's to close, after the link.
	Resolver *neigh.Resolver
	// OnForeign, if set, is called for each RoCE v2 packet a v1-only link
	// (V2 false) drops, after counting it. It runs on the receive path with
	// the link's receive lock held: it must not block nor call Recv.
	OnForeign func(Foreign)
}

// Link is a raw Ethernet RoCE link.
type Link struct {
	cfg    Config
	f      *os.File
	rc     syscall.RawConn
	fd     int
	local  atomic.Pointer[link.AddrSet]
	stats  link.Stats
	res    *neigh.Resolver
	ownRes bool
	closed atomic.Bool

	txMu sync.Mutex
	ipID uint16  // guarded by txMu
	mm   txBatch // guarded by txMu

	// vnet says whether the socket has PACKET_VNET_HDR, which changes how
	// frames are sent as well as received: a send holds vnetMu's read
	// lock, the switch (Recv, once) its write lock.
	vnetMu sync.RWMutex
	vnet   atomic.Bool

	rxMu sync.Mutex
	rx   rxState // guarded by rxMu

	foreign foreignStats // RoCE v2 dropped by a v1-only link (foreign.go)

	hold holdState // packets waiting for their next hop's MAC (hold.go)

	mc mcastState // multicast groups joined (mcast.go)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// filterProg accepts RoCE v1 frames, ARP, ICMPv6 (for Neighbor
// Advertisements) and UDP to port 4791 over IPv4 and IPv6 — over raw frames
// (the data starts at the Ethernet header). A v1-only link takes RoCE v2 in
// too, only to count, report and drop it (Recv); the destination address is
// checked there, against the port's GIDs, which change. Jumps are counted
// by hand; afpacket_test.go runs the program in x/net/bpf's VM.
func filterProg() []bpf.Instruction {
	accept, drop := bpf.RetConstant{Val: 0x40000}, bpf.RetConstant{Val: 0}
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2},
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire.EtherTypeRoCE, SkipTrue: 15},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire.EtherTypeARP, SkipTrue: 14},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire.EtherTypeIPv4, SkipFalse: 7},
		/* 4 */ bpf.LoadAbsolute{Off: 14 + 9, Size: 1},
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 12},
		/* 6 */ bpf.LoadAbsolute{Off: 14 + 6, Size: 2},
		/* 7 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1FFF, SkipTrue: 10},
		/* 8 */ bpf.LoadMemShift{Off: 14},
		/* 9 */ bpf.LoadIndirect{Off: 14 + 2, Size: 2},
		/* 10 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire.RoCEv2Port, SkipTrue: 6, SkipFalse: 7},
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: wire.EtherTypeIPv6, SkipTrue: 6},
		/* 12 */ bpf.LoadAbsolute{Off: 14 + 6, Size: 1},
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_ICMPV6, SkipTrue: 3},
		/* 14 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 3},
		/* 15 */ bpf.LoadAbsolute{Off: 14 + 42, Size: 2},
		/* 16 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: wire.RoCEv2Port, SkipFalse: 1},
		/* 17 */ accept,
		/* 18 */ drop,
	}
}

// New opens the link on cfg.Ifindex (in the calling thread's network namespace).
func New(cfg Config) (*Link, error) {
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 64
	}
	ifc, err := net.InterfaceByIndex(cfg.Ifindex)
	if err != nil {
		return nil, fmt.Errorf("netdev index %d: %w", cfg.Ifindex, err)
	}
	if cfg.MTU == 0 {
		cfg.MTU = ifc.MTU - wire.GRHLen
		if cfg.V2 {
			cfg.MTU = ifc.MTU - wire.IPv6Len - wire.UDPLen
		}
	}
	if cfg.MAC == (wire.MAC{}) {
		copy(cfg.MAC[:], ifc.HardwareAddr)
	}
	// Protocol 0: the socket sees no frame until bind names the protocol
	// and the netdev, after its filter and ring are in place (a frame
	// queued before the ring would be read as the whole copy of a
	// truncated one, link/pktring).
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket (needs root or CAP_NET_RAW): %w", err)
	}
	prog, err := bpf.Assemble(filterProg())
	if err == nil {
		p := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
		err = unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &p)
	}
	vnet := false
	var ring *rxRing
	if err == nil {
		// A ring's frames describe a UDP superpacket only where the kernel
		// can (Linux 6.2): an older one cannot give it to the ring at all
		// behind a virtio-net header, so there the link reads without one
		// and finds superpackets' segments by inference. Without a ring,
		// best effort: a refusal (EINVAL) turns the header off (Recv).
		useRing := !noRing
		vnet = !noVnetHdr && (!useRing || pktring.DescribesUSO()) &&
			unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1) == nil
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		// Buffers past net.core.[rw]mem_max (208 KiB by default), as
		// link/udp's sockets take them; AF_PACKET needs root anyway. The
		// receive buffer holds the whole copies of superpackets, and of
		// every frame without a ring.
		for _, o := range [][2]int{{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF}, {unix.SO_SNDBUFFORCE, unix.SO_SNDBUF}} {
			if unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[0], 8<<20) != nil {
				_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, o[1], 8<<20)
			}
		}
		if useRing {
			// After PACKET_VNET_HDR, which a socket with a ring refuses.
			// Without one (an old kernel, no memory for it) the socket is
			// read with recvmsg.
			if g, err := pktring.Setup(fd, frameFor(ifc.MTU), ringSizeFor(frameFor(ifc.MTU))); err == nil {
				ring = &rxRing{Ring: g}
			}
		}
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: cfg.Ifindex})
	}
	if err != nil {
		if ring != nil {
			ring.Unmap()
		}
		unix.Close(fd)
		return nil, fmt.Errorf("AF_PACKET on %s: %w", ifc.Name, err)
	}
	f := os.NewFile(uintptr(fd), "af_packet:"+ifc.Name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		if ring != nil {
			ring.Unmap()
		}
		return nil, err
	}
	l := &Link{cfg: cfg, f: f, rc: rc, fd: fd}
	l.vnet.Store(vnet)
	l.rx.ring = ring
	l.initRx()
	l.SetGIDs(cfg.GIDs)
	l.res = cfg.Resolver
	if l.res == nil {
		if l.res, err = neigh.New(neigh.Config{Ifindex: cfg.Ifindex, MAC: cfg.MAC}); err != nil {
			f.Close()
			return nil, err
		}
		l.ownRes = true
	}
	l.res.SetSender(l.sendFrame)
	l.hold.init()
	return l, nil
}

var _ link.Link = (*Link)(nil)

// SetGIDs replaces the set of local GIDs (as the netdev's addresses change).
func (l *Link) SetGIDs(gids []netip.Addr) {
	set := link.NewAddrSet(gids)
	l.local.Store(&set)
}

func (l *Link) BatchSize() int     { return l.cfg.BatchSize }
func (l *Link) Headroom() int      { return link.FrameHeadroom }
func (l *Link) MTU() int           { return l.cfg.MTU }
func (l *Link) Stats() *link.Stats { return &l.stats }

// Resolver returns the link's next-hop resolver.
func (l *Link) Resolver() *neigh.Resolver { return l.res }

// PathError says why packets of version v to dst could not be sent, as the
// resolver knows it (link.PathReporter): no route, a route through another
// netdev, a RoCE v1 peer behind a router, a next hop that does not answer.
func (l *Link) PathError(dst netip.Addr, v wire.Version) error {
	if v == wire.RoCEv2 && !l.cfg.V2 {
		return nil
	}
	return l.res.PathError(dst, v)
}

// Close closes the socket; Recv returns net.ErrClosed.
func (l *Link) Close() error {
	first := !l.closed.Swap(true)
	l.hold.close()
	l.closeGroups()
	l.res.SetSender(nil)
	if l.ownRes {
		l.res.Close()
	}
	err := l.f.Close()
	if first && l.rx.ring != nil {
		// After the socket's Close, which waits for the RawConn callbacks
		// that read the ring.
		l.rx.ring.Unmap()
	}
	return err
}

// txScratch is what one sendmsg(2) needs, kept to send without allocating.
type txScratch struct {
	vh  [vnetLen]byte
	iov [2]unix.Iovec
	msg unix.Msghdr
	sa  unix.RawSockaddrLinklayer
}

// txBatch is what one sendmmsg(2) of a Send's frames needs, kept from call
// to call: a message header, two iovecs (the virtio-net header, the frame)
// and a destination per frame.
type txBatch struct {
	vh   [vnetLen]byte
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	sas  []unix.RawSockaddrLinklayer
	lens []int // each frame's length, for TxBytes
	// The current sendmmsg, for write (rawConn.Write's callback).
	done  int
	errno unix.Errno
}

// add queues frame, to go with the next sendmmsg.
func (b *txBatch) add(ifindex int, frame []byte, vnet bool) {
	i := len(b.hdrs)
	b.hdrs = append(b.hdrs, unix.Mmsghdr{})
	b.iovs = append(b.iovs, unix.Iovec{}, unix.Iovec{})
	b.sas = append(b.sas, unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: int32(ifindex), Halen: 6})
	b.lens = append(b.lens, len(frame))
	copy(b.sas[i].Addr[:], frame[0:6])
	if vnet {
		setIov(&b.iovs[2*i], b.vh[:])
		setIov(&b.iovs[2*i+1], frame)
	} else {
		setIov(&b.iovs[2*i], frame)
	}
}

// headers points each message header at its iovecs and destination, once
// the slices no longer grow.
func (b *txBatch) headers(vnet bool) {
	for i := range b.hdrs {
		h := &b.hdrs[i].Hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&b.sas[i])), Namelen: unix.SizeofSockaddrLinklayer, Iov: &b.iovs[2*i]}
		if vnet {
			h.SetIovlen(2)
		} else {
			h.SetIovlen(1)
		}
	}
}

func (b *txBatch) reset() {
	clear(b.iovs) // no frame kept alive
	b.hdrs, b.iovs, b.sas, b.lens = b.hdrs[:0], b.iovs[:0], b.sas[:0], b.lens[:0]
	b.done, b.errno = 0, 0
}

// write sends b's messages from done on with sendmmsg(2): rawConn.Write's
// callback, which waits for room in the socket while it returns false. It
// stops at a message the kernel refuses (errno, done at that message).
func (b *txBatch) write(fd uintptr) bool {
	for b.done < len(b.hdrs) {
		n, e := sendmmsg(fd, b.hdrs[b.done:])
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return false
		case e != 0:
			b.errno = e
			return true
		}
		b.done += int(n)
	}
	return true
}

// sendmmsg is a variable so tests can count the calls and make the kernel
// refuse a frame.
var sendmmsg = sendmmsgSyscall

func sendmmsgSyscall(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	return int(n), e
}

// sendFrame sends one frame (the resolver's ARP and ND).
func (l *Link) sendFrame(frame []byte) error { return l.sendWith(new(txScratch), frame) }

// sendWith sends one frame with t's message header, behind an empty
// virtio-net header while the socket has PACKET_VNET_HDR (a packet socket
// then takes one before each frame it sends, too).
func (l *Link) sendWith(t *txScratch, frame []byte) error {
	t.sa = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: int32(l.cfg.Ifindex), Halen: 6}
	copy(t.sa.Addr[:], frame[0:6])
	t.msg = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&t.sa)), Namelen: unix.SizeofSockaddrLinklayer, Iov: &t.iov[0]}
	l.vnetMu.RLock()
	defer l.vnetMu.RUnlock()
	n := 0
	if l.vnet.Load() {
		setIov(&t.iov[0], t.vh[:])
		n++
	}
	setIov(&t.iov[n], frame)
	t.msg.SetIovlen(n + 1)
	var serr unix.Errno
	err := l.rc.Write(func(fd uintptr) bool {
		_, _, serr = unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&t.msg)), unix.MSG_DONTWAIT)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	if serr != 0 {
		return serr
	}
	return nil
}

func setIov(v *unix.Iovec, b []byte) {
	if len(b) == 0 {
		v.Base, v.Len = nil, 0
		return
	}
	v.Base = &b[0]
	v.SetLen(len(b))
}

// Send encapsulates each packet in a frame, resolving the next hop, and
// sends the frames with one sendmmsg(2) (more only when the kernel refuses
// one), not one sendmsg(2) each: the link's lock is held for the batch,
// and every other sender (with many QPs, the other QPs' batches, the
// retransmit timers, the ACKs) waits for it, so the shorter it is held the
// sooner their packets leave (issue 15, BENCHMARKS.md).
//
// Packets whose next hop's MAC is being asked for are held, as the kernel
// queues them while ARP runs, and sent when it answers (hold.go); Send
// counts them as handed to the network. Packets with no route, or whose
// next hop has not answered, are dropped and counted (tx_drop_no_route;
// the transport retransmits). Send never waits for the network:
// it used to wait for the resolution (up to a second for a next hop that
// never answers) holding the link's lock, and every QP of the device, its
// ACKs and its CM waited with it; a peer could make that happen at will by
// sending from an address nobody answers ARP for.
func (l *Link) Send(pkts []link.Packet) (int, error) { return l.send(pkts, false) }

// send is Send; held says pkts are packets held for their next hop
// (resolveHeld), which go out now or are dropped, never held again.
func (l *Link) send(pkts []link.Packet, held bool) (int, error) {
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	l.vnetMu.RLock()
	defer l.vnetMu.RUnlock()
	vnet := l.vnet.Load()
	b := &l.mm
	defer b.reset()
	nheld := 0
	for i := range pkts {
		pk := &pkts[i]
		if pk.Len > l.cfg.MTU || pk.Addr.Version == wire.RoCEv2 && !l.cfg.V2 {
			l.stats.TxBadAddress.Add(1)
			continue
		}
		if !held {
			if handled, ok := l.holdBehind(pk); handled {
				if ok {
					nheld++
				} else {
					l.stats.TxNoRoute.Add(1)
				}
				continue
			}
		}
		var next neigh.Next
		var err error
		if mac, ok := link.MulticastMAC(pk.Addr.DstGID); ok {
			// A group's packets go to its MAC, no neighbour to resolve.
			next.MAC = mac
		} else if next, err = l.res.Lookup(pk.Addr.DstGID, pk.Addr.Version); err != nil {
			if !held && neigh.IsPending(err) && l.holdFor(pk) {
				nheld++
			} else {
				l.stats.TxNoRoute.Add(1)
			}
			continue
		}
		hops := pk.Addr.HopLimit
		if next.HopLimit != 0 {
			// The route's, as Linux gives RoCE packets (neigh.Lookup).
			pk.Addr.HopLimit = next.HopLimit
		}
		l.ipID++
		frame, err := link.Encapsulate(pk, l.cfg.MAC, next.MAC, l.ipID)
		pk.Addr.HopLimit = hops // the caller's packet is as it was
		if err != nil {
			l.stats.TxBadAddress.Add(1)
			continue
		}
		b.add(l.cfg.Ifindex, frame, vnet)
	}
	if len(b.hdrs) == 0 {
		return nheld, nil
	}
	b.headers(vnet)
	sent := nheld
	for b.done < len(b.hdrs) {
		from := b.done
		if err := l.rc.Write(b.write); err != nil {
			return sent, net.ErrClosed
		}
		for _, n := range b.lens[from:b.done] {
			l.stats.TxPackets.Add(1)
			l.stats.TxBytes.Add(uint64(n))
		}
		sent += b.done - from
		if b.errno != 0 {
			// The kernel refused the frame at done (sendWith's case):
			// count it, go on with the rest.
			if l.closed.Load() {
				return sent, net.ErrClosed
			}
			l.stats.TxNoRoute.Add(1)
			b.done++
			b.errno = 0
		}
	}
	return sent, nil
}
