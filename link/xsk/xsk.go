// Package xsk reads a netdev's RoCE v2 packets through an AF_XDP socket
// (copy mode) that an XDP program feeds, for link/udp's `rx-path xdp`.
//
// Why: in the lab's VMs (virtio-net, Linux 6.1) the guest kernel's work
// per received packet is where a RoCE stack over kernel sockets spends
// its time. With an AF_PACKET ring (`rx-path ring`) each packet still
// passes the netdev's receive path up to the taps (an skb, GRO, the
// packet socket's filter and its copy into the ring); with the virtio-net
// driver's own XDP hook the packet is redirected into this socket's
// memory before an skb exists. Measured with a throwaway probe in the
// lab (BENCHMARKS.md, "AF_XDP in the VMs"): softirq time per packet at
// 8,000/s 2.5–7.2 µs against the ring's 6.6–12.5, and 1.16–1.74× the
// ring's packets a second from a saturating sender.
//
// What it costs: the XDP program owns the netdev's receive hook, so one
// process per netdev (a second gets EBUSY, named in the error); it reads
// queue 0 only, so the netdev must have one receive queue (ethtool -L
// DEV combined 1); a frame must fit a UMEM chunk (4,096 bytes less the
// kernel's 256 of headroom: MTU ≤ 3,826); and the driver runs in XDP
// mode for all of the netdev's traffic (virtio-net turns off its receive
// offloads). Everything the program does not take (other protocols,
// other ports, IPv4 fragments after the first) goes on to the kernel as
// before. The program is attached with a bpf_link where the kernel has
// them (5.9), so a process that dies takes it with it. In the driver's
// XDP mode the program sees each packet as it came off the wire (an XDP
// program on a veth or a virtio-net device has the sender segment what
// it sends); in the generic mode, for drivers without XDP, it sees what
// the kernel made of it, and a GSO or GRO superpacket (a local sender's
// GSO message over a veth, say) fits no chunk: the kernel drops it, and
// Drops counts it.
//
// The reader sees the socket's receive ring as it sees an AF_PACKET ring
// (link/pktring): frame i, its status, its release. Each frame is a UMEM
// chunk, and before handing it over Frame writes, in the chunk's
// headroom, what TPACKET_V2 would have put there — the frame header
// (length, offset of the Ethernet header), the sockaddr_ll (ifindex,
// protocol, the packet type from the destination MAC, the source MAC) and
// an empty virtio-net header (XDP runs before GRO: one packet per frame)
// — so the link's frame parsing, its short path and its fuzzers serve
// both sources unchanged.
//
// As with pktring, every access to the rings and the UMEM must happen
// inside a callback of the socket's RawConn or under a lock that the
// owner's Close takes before Unmap.
package xsk

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	ebpflink "github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const (
	// kernelHeadroom is what the kernel leaves before a packet in its
	// chunk in copy mode (XDP_PACKET_HEADROOM).
	kernelHeadroom = 256
	// slots is the number of UMEM chunks, and of the fill and receive
	// rings' entries: every chunk fits the fill ring. As many as the
	// AF_PACKET ring's frames on an Ethernet MTU (link/udp, ring.go):
	// perftest's write_bw keeps 128 WRITEs of 64 KiB in flight, 8,192
	// packets at path MTU 1024.
	slots = 8192
	// cqSlots: the completion ring, which bind requires and a socket that
	// never transmits never uses.
	cqSlots = 64
	// sll is where TPACKET_V2 puts a frame's sockaddr_ll.
	sll = unix.SizeofTpacket2Hdr
	// minOffset is the least room before a packet the synthesized
	// headers need: the frame header, the sockaddr_ll and a virtio-net
	// header.
	minOffset = sll + unix.SizeofSockaddrLinklayer + VnetLen
	// VnetLen is the size of the (empty) virtio-net header in front of
	// each packet, as an AF_PACKET socket with PACKET_VNET_HDR gives.
	VnetLen = 10
)

// MaxMTU is the largest netdev MTU a socket takes: an Ethernet frame of
// it, behind the kernel's headroom, fits the largest chunk.
const MaxMTU = 4096 - kernelHeadroom - 14

// ErrQueues is returned for a netdev with more than one receive queue.
var ErrQueues = errors.New("more than one receive queue")

// Socket is an AF_XDP socket bound to queue 0 of a netdev, its UMEM and
// rings, and the XDP program that feeds it.
type Socket struct {
	fd      int
	ifindex int32
	mac     [6]byte
	chunk   uint64
	umem    []byte
	rxm     []byte // the receive ring's mapping
	fqm     []byte // the fill ring's
	cqm     []byte // the completion ring's
	rxProd  *uint32
	rxCons  *uint32
	fqProd  *uint32
	rxDesc  []unix.XDPDesc
	fqDesc  []uint64
	cons    uint32 // the receive ring's consumer, free-running (ours)
	prod    uint32 // the producer as last loaded
	fqTail  uint32 // the fill ring's producer, free-running (ours)
	mode    string
	prog    *ebpf.Program
	xmap    *ebpf.Map
	lnk     ebpflink.Link
	dropped uint64 // XDP_STATISTICS' drops as last read
}

// Open opens the socket on netdev ifindex (whose MTU is mtu) for the
// UDP datagrams to port and attaches the program: in the driver's XDP
// mode where it has one, else in the generic mode.
func Open(ifindex int, port uint16, mtu int) (*Socket, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, err
	}
	if mtu <= 0 {
		mtu = ifi.MTU
	}
	if mtu > MaxMTU {
		return nil, fmt.Errorf("%s: MTU %d: AF_XDP frames hold an MTU of at most %d (ip link set %s mtu %d)", ifi.Name, mtu, MaxMTU, ifi.Name, MaxMTU)
	}
	if q, err := rxQueues(ifi.Name); err != nil {
		return nil, fmt.Errorf("%s: its receive queues: %w", ifi.Name, err)
	} else if q > 1 {
		return nil, fmt.Errorf("%s has %d receive queues: %w, and AF_XDP reads queue 0 only (ethtool -L %s combined 1)", ifi.Name, q, ErrQueues, ifi.Name)
	}
	s := &Socket{ifindex: int32(ifindex), chunk: 2048, fd: -1}
	copy(s.mac[:], ifi.HardwareAddr)
	if mtu+14+kernelHeadroom > int(s.chunk) {
		s.chunk = 4096
	}
	if err := s.open(); err != nil {
		s.Close()
		s.Unmap()
		return nil, fmt.Errorf("%s: AF_XDP socket: %w", ifi.Name, err)
	}
	if err := s.attach(port); err != nil {
		s.Close()
		s.Unmap()
		return nil, fmt.Errorf("%s: XDP program: %w", ifi.Name, err)
	}
	return s, nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
		return e
	}
	return nil
}

// open makes the socket, registers the UMEM, maps the rings, fills the
// fill ring with every chunk and binds to queue 0 in copy mode.
func (s *Socket) open() (err error) {
	if s.fd, err = unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		s.fd = -1
		return err
	}
	if s.umem, err = unix.Mmap(-1, 0, int(s.chunk)*slots, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE); err != nil {
		return err
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.umem[0]))), Len: uint64(len(s.umem)), Size: uint32(s.chunk)}
	if err := setsockopt(s.fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	for _, o := range []struct {
		opt, n int
	}{{unix.XDP_UMEM_FILL_RING, slots}, {unix.XDP_UMEM_COMPLETION_RING, cqSlots}, {unix.XDP_RX_RING, slots}} {
		n := uint32(o.n)
		if err := setsockopt(s.fd, o.opt, unsafe.Pointer(&n), 4); err != nil {
			return fmt.Errorf("ring size (option %d): %w", o.opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(s.fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("XDP_MMAP_OFFSETS: %w", err)
	}
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	if s.rxm, err = unix.Mmap(s.fd, unix.XDP_PGOFF_RX_RING, int(off.Rx.Desc)+slots*int(unsafe.Sizeof(unix.XDPDesc{})), prot, flags); err != nil {
		return err
	}
	if s.fqm, err = unix.Mmap(s.fd, unix.XDP_UMEM_PGOFF_FILL_RING, int(off.Fr.Desc)+slots*8, prot, flags); err != nil {
		return err
	}
	if s.cqm, err = unix.Mmap(s.fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, int(off.Cr.Desc)+cqSlots*8, prot, flags); err != nil {
		return err
	}
	s.rxProd = (*uint32)(unsafe.Pointer(&s.rxm[off.Rx.Producer]))
	s.rxCons = (*uint32)(unsafe.Pointer(&s.rxm[off.Rx.Consumer]))
	s.fqProd = (*uint32)(unsafe.Pointer(&s.fqm[off.Fr.Producer]))
	s.rxDesc = unsafe.Slice((*unix.XDPDesc)(unsafe.Pointer(&s.rxm[off.Rx.Desc])), slots)
	s.fqDesc = unsafe.Slice((*uint64)(unsafe.Pointer(&s.fqm[off.Fr.Desc])), slots)
	for i := range slots {
		s.fqDesc[i] = uint64(i) * s.chunk
	}
	s.fqTail = slots
	atomic.StoreUint32(s.fqProd, s.fqTail)
	err = unix.Bind(s.fd, &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(s.ifindex), QueueID: 0})
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("queue 0 already has an AF_XDP socket: another process reads the netdev with AF_XDP (ss -a --xdp shows it): %w", err)
	}
	return err
}

// program returns the XDP program: an Ethernet frame carrying IPv4 (any
// header length, not a fragment after the first) or IPv6 (UDP the next
// header) and a UDP datagram to port goes to the socket in the map's
// entry for its receive queue, or, without one, on to the kernel
// (bpf_redirect_map's fallback action); every other frame goes on to the
// kernel (XDP_PASS).
func program(m *ebpf.Map, port uint16) asm.Instructions {
	const pass = 2 // XDP_PASS
	p := int32(port>>8 | port<<8)
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),              // r6 = ctx
		asm.LoadMem(asm.R2, asm.R6, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R6, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+8), // the shortest frame taken
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),  // Ethertype
		asm.JEq.Imm(asm.R5, 0x0008, "ipv4"),        // 0x0800, as loaded
		asm.JNE.Imm(asm.R5, int32(0xDD86), "pass"), // 0x86DD
		asm.Mov.Reg(asm.R4, asm.R2),                // IPv6
		asm.Add.Imm(asm.R4, 14+40+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+6, asm.Byte), // next header
		asm.JNE.Imm(asm.R5, 17, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+40+2, asm.Half), // UDP destination port
		asm.JNE.Imm(asm.R5, p, "pass"),
		asm.Ja.Label("take"),
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte).WithSymbol("ipv4"), // protocol
		asm.JNE.Imm(asm.R5, 17, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+6, asm.Half), // flags, fragment offset
		asm.And.Imm(asm.R5, 0xFF1F),                 // the offset, as loaded
		asm.JNE.Imm(asm.R5, 0, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte), // version, IHL
		asm.And.Imm(asm.R5, 0x0F),
		asm.LSh.Imm(asm.R5, 2), // the IPv4 header's length
		asm.JLT.Imm(asm.R5, 20, "pass"),
		asm.Add.Reg(asm.R2, asm.R5), // r2: the UDP header, less 14
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+2, asm.Half), // UDP destination port
		asm.JNE.Imm(asm.R5, p, "pass"),
		asm.LoadMapPtr(asm.R1, m.FD()).WithSymbol("take"),
		asm.LoadMem(asm.R2, asm.R6, 16, asm.Word), // rx_queue_index
		asm.Mov.Imm(asm.R3, pass),                 // without a socket there
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, pass).WithSymbol("pass"),
		asm.Return(),
	}
}

// attachModes are the XDP modes attach tries, in order (a test may
// leave one).
var attachModes = []struct {
	flags ebpflink.XDPAttachFlags
	name  string
}{{ebpflink.XDPDriverMode, "driver"}, {ebpflink.XDPGenericMode, "generic"}}

// attach loads the program with the socket in its map and attaches it.
func (s *Socket) attach(port uint16) (err error) {
	if s.xmap, err = ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1}); err != nil {
		return err
	}
	if err := s.xmap.Put(uint32(0), uint32(s.fd)); err != nil {
		return err
	}
	if s.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, Instructions: program(s.xmap, port), License: "GPL"}); err != nil {
		return err
	}
	var drvErr error
	for _, m := range attachModes {
		s.lnk, err = ebpflink.AttachXDP(ebpflink.XDPOptions{Program: s.prog, Interface: int(s.ifindex), Flags: m.flags})
		if err == nil {
			s.mode = m.name
			return nil
		}
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("the netdev already has an XDP program: another process holds its XDP hook (ip link show shows it as xdp): %w", err)
		}
		if drvErr == nil {
			drvErr = err
		}
	}
	return fmt.Errorf("driver mode: %v; generic mode: %w", drvErr, err)
}

// Mode is the XDP mode the program runs in: "driver" or "generic".
func (s *Socket) Mode() string { return s.mode }

// Fd is the socket's descriptor, for the caller's poller (os.NewFile):
// it reads ready when the receive ring holds a frame.
func (s *Socket) Fd() int { return s.fd }

// Detach takes the program off the netdev and closes it and its map;
// after it the netdev's packets go to the kernel again. The caller closes
// the socket's descriptor (Close, or its os.File).
func (s *Socket) Detach() {
	if s.lnk != nil {
		_ = s.lnk.Close()
		s.lnk = nil
	}
	if s.prog != nil {
		_ = s.prog.Close()
		s.prog = nil
	}
	if s.xmap != nil {
		_ = s.xmap.Close()
		s.xmap = nil
	}
}

// Close detaches the program and closes the descriptor, for a socket
// whose descriptor no os.File took over.
func (s *Socket) Close() {
	s.Detach()
	if s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}

// Unmap releases the rings and the UMEM, once, after the descriptor's
// close.
func (s *Socket) Unmap() {
	for _, m := range [][]byte{s.rxm, s.fqm, s.cqm, s.umem} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
}

// Frames is the number of the receive ring's entries (the frames of
// pktring's ring); FrameSize the size of a chunk.
func (s *Socket) Frames() int    { return slots }
func (s *Socket) FrameSize() int { return int(s.chunk) }

// Head is the entry the next read looks at.
func (s *Socket) Head() int32 { return int32(s.cons & (slots - 1)) }

// After is the entry after i.
func (s *Socket) After(i int32) int32 { return (i + 1) & (slots - 1) }

// ready is the number of entries from the head on that hold a frame.
func (s *Socket) ready() uint32 {
	if s.prod == s.cons {
		s.prod = atomic.LoadUint32(s.rxProd)
	}
	return s.prod - s.cons
}

// Status is entry i's status as TPACKET_V2 gives a frame's:
// TP_STATUS_USER when it holds a frame, TP_STATUS_KERNEL when not.
func (s *Socket) Status(i int32) uint32 {
	d := uint32(i-s.Head()) & (slots - 1)
	if d < s.ready() || d < s.reload() {
		return unix.TP_STATUS_USER
	}
	return unix.TP_STATUS_KERNEL
}

// reload loads the producer again: the frames ready now.
func (s *Socket) reload() uint32 {
	s.prod = atomic.LoadUint32(s.rxProd)
	return s.prod - s.cons
}

// Ready reports whether the head entry holds a frame.
func (s *Socket) Ready() bool { return s.ready() != 0 }

// ReadyUpTo counts the entries from the head on that hold frames, up to
// limit.
func (s *Socket) ReadyUpTo(limit int) int {
	n := int(s.ready())
	if n < limit {
		n = int(s.reload())
	}
	return min(n, limit)
}

// Frame is entry i's chunk, with a TPACKET_V2 frame header, a sockaddr_ll
// and an empty virtio-net header written before its packet, and the
// frame header. A descriptor that does not leave room for them or does
// not fit its chunk (never from a working kernel) gets a header whose
// offsets pktring.Data refuses.
func (s *Socket) Frame(i int32) ([]byte, *unix.Tpacket2Hdr) {
	d := s.rxDesc[i]
	base := d.Addr &^ (s.chunk - 1)
	f := s.umem[base : base+s.chunk : base+s.chunk]
	h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&f[0]))
	off, n := d.Addr-base, uint64(d.Len)
	*h = unix.Tpacket2Hdr{Status: unix.TP_STATUS_USER, Len: d.Len, Snaplen: d.Len}
	if off < minOffset || off+n > s.chunk || n < 14 {
		return f, h // Mac 0: refused
	}
	h.Mac, h.Net = uint16(off), uint16(off+14)
	eth := f[off : off+14]
	t := uint8(unix.PACKET_OTHERHOST)
	switch {
	case [6]byte(eth[:6]) == s.mac:
		t = unix.PACKET_HOST
	case [6]byte(eth[:6]) == [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}:
		t = unix.PACKET_BROADCAST
	case eth[0]&1 != 0:
		t = unix.PACKET_MULTICAST
	}
	a := (*unix.RawSockaddrLinklayer)(unsafe.Pointer(&f[sll]))
	*a = unix.RawSockaddrLinklayer{Family: unix.AF_PACKET, Ifindex: s.ifindex, Hatype: unix.ARPHRD_ETHER, Pkttype: t, Halen: 6}
	a.Protocol = *(*uint16)(unsafe.Pointer(&eth[12])) // network order, as the kernel's
	copy(a.Addr[:6], eth[6:12])
	clear(f[off-VnetLen : off])
	return f, h
}

// Release gives entry i, the head, and its chunk back to the kernel and
// moves the head on.
func (s *Socket) Release(i int32) {
	s.fqDesc[s.fqTail&(slots-1)] = s.rxDesc[i].Addr &^ (s.chunk - 1)
	s.fqTail++
	atomic.StoreUint32(s.fqProd, s.fqTail)
	s.cons++
	atomic.StoreUint32(s.rxCons, s.cons)
}

// Drops returns the packets the kernel dropped at the socket since the
// last call (XDP_STATISTICS, copy mode: rx_dropped counts a packet too
// long for a chunk or without a chunk to go to, the fill ring empty, which
// rx_fill_ring_empty_descs counts again; rx_ring_full one with no room in
// the receive ring).
func (s *Socket) Drops() uint64 {
	var st unix.XDPStatistics
	if getsockopt(s.fd, unix.XDP_STATISTICS, unsafe.Pointer(&st), unsafe.Sizeof(st)) != nil {
		return 0
	}
	t := st.Rx_dropped + st.Rx_ring_full
	d := t - s.dropped
	s.dropped = t
	return d
}

// ethtool is rxQueues' request: a global, so that the address the ioctl
// is given (inside ifr) stays where it is (a stack may move).
var ethtool struct {
	sync.Mutex
	ch struct {
		Cmd, MaxRx, MaxTx, MaxOther, MaxCombined, Rx, Tx, Other, Combined uint32
	}
	ifr struct {
		Name [unix.IFNAMSIZ]byte
		Data uintptr
		_    [16]byte
	}
}

// rxQueues is the number of receive queues of netdev name
// (ETHTOOL_GCHANNELS); a driver that cannot say has one.
func rxQueues(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	e := &ethtool
	e.Lock()
	defer e.Unlock()
	clear(unsafe.Slice((*byte)(unsafe.Pointer(&e.ch)), unsafe.Sizeof(e.ch)))
	e.ch.Cmd = unix.ETHTOOL_GCHANNELS
	e.ifr.Name = [unix.IFNAMSIZ]byte{}
	copy(e.ifr.Name[:], name)
	e.ifr.Data = uintptr(unsafe.Pointer(&e.ch))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&e.ifr))); errno != 0 {
		if errno == unix.EOPNOTSUPP {
			return 1, nil
		}
		return 0, errno
	}
	return max(int(e.ch.Rx+e.ch.Combined), 1), nil
}
