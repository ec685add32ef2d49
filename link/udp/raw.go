package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/link/xsk"
	"github.com/goroce/goroce/wire"
)

// rawRecv reads RoCE v2 packets, Ethernet header included, from a netdev
// with an AF_PACKET socket, each behind a virtio-net header (PACKET_VNET_HDR)
// that gives the segment size of a GSO or GRO superpacket.
type rawRecv struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
	ring   *rxRing     // nil: read with recvmmsg (ring.go)
	xsk    *xsk.Socket // an AF_XDP socket (Config.XDP), whose rings ring reads
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// newRawRecv opens the AF_PACKET socket on ifindex for the datagrams to
// port, with a ring whose frames hold frame bytes (ringFrameFor).
func newRawRecv(ifindex int, port uint16, frame int) (*rawRecv, error) {
	// Protocol 0: the socket sees no packet until bind names the
	// protocol and the netdev, after its filter and ring are in place
	// (a packet queued on the socket before the ring would be read as
	// the whole copy of a truncated frame, ring.go).
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: %v", errNotPrivileged, err)
		}
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	var ring *rxRing
	// Only the datagrams to port, so the socket copies nothing else.
	err = pktring.Attach(fd, pktring.UDPPortFilter(port))
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1)
	}
	if err == nil {
		// Our own transmissions would otherwise come back (Linux ≥ 4.20).
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		}
		if !noRing {
			// After PACKET_VNET_HDR, which a socket with a ring refuses.
			// Without it (an old kernel, no memory for it) the socket is
			// read with recvmmsg.
			ring, _ = setupRing(fd, frame)
		}
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	}
	if err != nil {
		if ring != nil {
			ring.Unmap()
		}
		unix.Close(fd)
		return nil, fmt.Errorf("AF_PACKET on ifindex %d: %w", ifindex, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("af_packet:%d", ifindex))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		if ring != nil {
			ring.Unmap()
		}
		return nil, err
	}
	return &rawRecv{f: f, rc: rc, ring: ring}, nil
}

// newXSKRecv opens an AF_XDP socket and its XDP program on ifindex (of
// MTU mtu) for the datagrams to port (link/xsk), read as a ring.
func newXSKRecv(ifindex int, port uint16, mtu int) (*rawRecv, error) {
	s, err := xsk.Open(ifindex, port, mtu)
	if err != nil {
		return nil, fmt.Errorf("rx-path xdp: %w", err)
	}
	f := os.NewFile(uintptr(s.Fd()), fmt.Sprintf("af_xdp:%d", ifindex))
	rc, err := f.SyscallConn()
	if err != nil {
		s.Detach()
		f.Close()
		s.Unmap()
		return nil, err
	}
	return &rawRecv{f: f, rc: rc, ring: &rxRing{frameSource: s}, xsk: s}, nil
}

// close closes the socket, then releases the ring: Close waits for the
// RawConn callbacks in progress, and rxMu (the link's) for TryRecv's look
// at the ring's head, which checks closed under it; those are the only
// places the ring is read.
func (r *rawRecv) close(rxMu *sync.Mutex) {
	if r.closed.Swap(true) {
		return
	}
	if r.xsk != nil {
		r.xsk.Detach() // the netdev's packets to the kernel again
	}
	r.f.Close()
	if r.ring != nil {
		rxMu.Lock()
		r.ring.Unmap()
		rxMu.Unlock()
	}
}

// dropAll attaches a filter that drops every datagram to the UDP socket:
// in privileged mode it only holds the port.
func dropAll(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = pktring.Attach(int(fd), pktring.DropAll()) }); err != nil {
		return err
	}
	return ferr
}

// parseFrame reads message j's virtio-net, Ethernet, IP and UDP headers
// (an AF_PACKET read) into r.meta and returns where its UDP payload starts,
// its length and its segment size (0: one datagram).
func (l *Link) parseFrame(j, n int) (p, plen, segSize int, ok bool) {
	r := &l.rx
	var hb [frameHdrMax]byte
	h := hb[:min(n, len(hb))]
	r.gather(j, 0, len(h), h)
	return l.parseHeaders(h, n, r.names[j*nameLen:])
}

// frameHdrMax bounds the headers parseHeaders reads: virtio-net, Ethernet,
// IPv4 with options, UDP.
const frameHdrMax = vnetLen + wire.EthernetLen + 60 + wire.UDPLen

// parseHeaders is parseFrame's, for a message of n bytes whose first
// bytes (up to frameHdrMax) are h and whose sockaddr_ll is name.
func (l *Link) parseHeaders(h []byte, n int, name []byte) (p, plen, segSize int, ok bool) {
	r := &l.rx
	// struct sockaddr_ll: family, protocol, ifindex, hatype, pkttype, …
	// PACKET_MULTICAST: a group's packets (JoinGroup; the group check is
	// isLocal's, after the headers are read).
	if t := name[10]; t != unix.PACKET_HOST && t != unix.PACKET_MULTICAST {
		return 0, 0, 0, false // another host's traffic (a promiscuous bridge), or our own
	}
	const l2 = vnetLen + wire.EthernetLen
	if len(h) < l2+wire.IPv4MinLen+wire.UDPLen {
		l.stats.RxMalformed.Add(1)
		return 0, 0, 0, false
	}
	gsoType, gsoSize := h[1], int(binary.NativeEndian.Uint16(h[4:]))
	ip := h[l2:]
	m := &r.meta
	switch binary.BigEndian.Uint16(h[vnetLen+12:]) {
	case wire.EtherTypeIPv4:
		ihl := int(ip[0]&0xF) * 4
		if ip[0]>>4 != 4 || ihl < wire.IPv4MinLen || len(ip) < ihl+wire.UDPLen {
			l.stats.RxMalformed.Add(1)
			return 0, 0, 0, false
		}
		m.v4, m.hlen, m.id0 = true, ihl+wire.UDPLen, binary.BigEndian.Uint16(ip[4:])
		plen = int(binary.BigEndian.Uint16(ip[2:])) - m.hlen
	case wire.EtherTypeIPv6:
		if ip[0]>>4 != 6 || len(ip) < wire.IPv6Len+wire.UDPLen {
			l.stats.RxMalformed.Add(1)
			return 0, 0, 0, false
		}
		m.v4, m.hlen = false, wire.IPv6Len+wire.UDPLen
		plen = int(binary.BigEndian.Uint16(ip[4:])) - wire.UDPLen
	default:
		return 0, 0, 0, false
	}
	wire.CopyHeaders(m.hdr[:], ip[:m.hlen])
	p = l2 + m.hlen
	// The IP length, not the frame's: Ethernet pads short frames.
	if plen < wire.BTHLen+wire.ICRCLen || p+plen > n {
		l.stats.RxMalformed.Add(1)
		return 0, 0, 0, false
	}
	segs := 1
	if gsoType == vnetGSOUDPL4 {
		segs, _ = segments(plen, gsoSize)
	}
	if !l.frameAddr(m, segs) {
		return 0, 0, 0, false
	}
	r.hguess = m.hlen
	switch gsoType {
	case vnetGSONone:
		return p, plen, 0, true
	case vnetGSOUDPL4:
		return p, plen, gsoSize, true
	}
	l.stats.RxMalformed.Add(1)
	return 0, 0, 0, false
}

// frameAddr reads, once per message, what its IP and UDP headers (r.meta's
// hdr) say of all its segments: that they are RoCE v2 (UDP to the link's
// port, not a fragment) to one of the host's addresses, and their
// addressing, into m.addr. segs is how many segments the message holds,
// for the counters.
func (l *Link) frameAddr(m *rxMeta, segs int) bool {
	ipLen := m.hlen - wire.UDPLen
	u := wire.UDP(m.hdr[ipLen:m.hlen])
	a := link.Addr{Version: wire.RoCEv2, UDPSrcPort: u.SrcPort()}
	if m.v4 {
		ip := wire.IPv4(m.hdr[:ipLen])
		if ip.Protocol() != wire.IPProtocolUDP || ip.FragOffset() != 0 {
			return false // not RoCE; a later fragment's port is unknown
		}
		if ip.Flags()&1 != 0 {
			// A first fragment (more fragments set).
			if u.DstPort() == l.cfg.Port {
				l.stats.RxMalformed.Add(uint64(segs))
			}
			return false
		}
		a.SrcGID, a.DstGID = netip.AddrFrom16(ip.Src().As16()), netip.AddrFrom16(ip.Dst().As16())
		a.TrafficClass, a.HopLimit = ip.TOS(), ip.TTL()
	} else {
		ip := wire.IPv6(m.hdr[:ipLen])
		if ip.NextHeader() != wire.IPProtocolUDP {
			return false
		}
		a.SrcGID, a.DstGID = ip.Src(), ip.Dst()
		a.TrafficClass, a.FlowLabel, a.HopLimit = ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit()
	}
	if u.DstPort() != l.cfg.Port {
		return false
	}
	if !l.isLocal(a.DstGID) {
		l.stats.RxNotForUs.Add(uint64(segs))
		return false
	}
	m.addr = a
	return true
}

// acceptFrame checks segment s of the message r.meta describes, whose
// transport packet pk holds: its transport headers (parsed into
// pk.Parsed), and its ICRC over the IP and UDP headers the kernel would
// have sent it with on its own (r.meta's, with this segment's lengths and
// IPv4 ID), which are not written anywhere: the message's headers were
// read and checked once (parseFrame, frameAddr).
func (l *Link) acceptFrame(pk *link.Packet, s int) bool {
	m := &l.rx.meta
	t := pk.Transport()
	if err := pk.Parsed.ParseTransport(t, wire.RoCEv2); err != nil {
		l.stats.RxMalformed.Add(1)
		return false
	}
	var hb [60 + wire.UDPLen]byte
	h := hb[:m.hlen]
	copy(h, m.hdr[:m.hlen])
	ipLen := m.hlen - wire.UDPLen
	id := m.id0 + uint16(s)
	if m.v4 {
		binary.BigEndian.PutUint16(h[2:], uint16(m.hlen+pk.Len))
		binary.BigEndian.PutUint16(h[4:], id)
	} else {
		binary.BigEndian.PutUint16(h[4:], uint16(wire.UDPLen+pk.Len))
	}
	binary.BigEndian.PutUint16(h[ipLen+4:], uint16(wire.UDPLen+pk.Len))
	end := len(t) - wire.ICRCLen
	rx := binary.LittleEndian.Uint32(t[end:])
	if c := wire.ICRCv2(h, ipLen, t[:end]); c != rx && !(m.v4 && l.keptID(s, m.id0, m.hlen+end-6, c^rx)) {
		l.stats.RxBadICRC.Add(1)
		return false
	}
	pk.Addr = m.addr
	l.stats.RxPackets.Add(1)
	l.stats.RxBytes.Add(uint64(m.hlen + pk.Len))
	return true
}

// keptID reports whether an ICRC computed with segment s's own IPv4 ID
// (id0+s) and found diff away from the one received is right for the ID
// id0: segment s (not the first) of a superpacket GRO built from a sender
// that kept the ID fixed, its segments all carrying the first one's ID.
// Exactly that ID is accepted. tail is the number of bytes the ICRC covers
// after the ID (idSolver.basis).
func (l *Link) keptID(s int, id0 uint16, tail int, diff uint32) bool {
	if s == 0 {
		return false // no ID but its own can pass
	}
	d, ok := l.ids.basis(tail).solve(diff)
	return ok && (id0+uint16(s))^d == id0
}

// HoldPort binds the RoCE v2 UDP port with a socket that drops everything,
// so the kernel sends no ICMP port unreachable for RoCE v2 packets another
// reader (an AF_PACKET link) takes from the netdev. Close it to release the port.
func HoldPort(port uint16) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv6unspecified, Port: int(port)})
	if err != nil {
		return nil, fmt.Errorf("RoCE v2 UDP port %d: %w", port, err)
	}
	if err := dropAll(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
