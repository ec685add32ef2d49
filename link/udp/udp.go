// Package udp is the RoCE v2 link over the host's UDP/IP stack: one
// dual-stack UDP socket on port 4791 sends and receives IPv4 and IPv6 RoCE
// v2 packets in batches (sendmmsg/recvmmsg through golang.org/x/net).
//
// ICRC, sending: the kernel writes the IP and UDP headers, so the link
// predicts them. With IP_PMTUDISC_DO the kernel sets DF and, on an
// unconnected socket, IPv4 Identification 0 (ip_select_ident); every other
// covered field is known (addresses, lengths, protocol, ports) or masked
// (TOS, TTL, checksums). The ICRC on the wire is therefore exact.
//
// ICRC, receiving — what each mode verifies:
//   - Privileged (Config.Ifindex set and CAP_NET_RAW): packets are read from
//     the netdev with an AF_PACKET socket that sees the real IP header, and
//     all 32 bits of every ICRC are verified, IPv4 and IPv6 alike. The UDP
//     socket stays bound (so the kernel sends no ICMP port unreachable) with
//     a filter that drops its copy.
//   - Unprivileged: packets come from the UDP socket. IPv6: the header is
//     rebuilt from the socket's control messages and the ICRC fully
//     verified. IPv4: the socket never shows the Identification field, so
//     the link solves for the one ID that makes the ICRC right (idsolve.go):
//     corruption is still caught, except with probability 2^-16.
//
// The UDP source port: the socket is bound to 4791, so every packet leaves
// from 4791, where Linux varies it per flow (wire.FlowLabelToUDPSport).
// Receivers ignore it; ECMP hashing sees one flow. link/afpacket sends the
// exact Linux ports.
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Config configures a UDP link.
type Config struct {
	// Addrs are the local addresses (the IPs of the device's RoCE v2
	// GIDs); packets to other addresses are dropped as not for us.
	Addrs []netip.Addr
	Port  uint16 // default 4791
	// MTU is the largest transport packet (BTH..ICRC); default the netdev's
	// MTU minus the IPv6 and UDP headers when Ifindex is set, else 4096+64.
	MTU       int
	BatchSize int // default 64
	// Ifindex is the netdev to read packets from with AF_PACKET
	// (privileged mode, full ICRC verification). 0: unprivileged mode.
	Ifindex int
	// Bind is the address to bind; unset binds the wildcard with one
	// dual-stack socket. Binding an address lets several links share a host
	// (e.g. 127.0.0.1 and 127.0.0.2 on loopback, each on port 4791).
	Bind netip.Addr
}

// batchConn is what ipv4.PacketConn and ipv6.PacketConn both offer
// (their Message types are the same type).
type batchConn interface {
	ReadBatch(ms []ipv6.Message, flags int) (int, error)
	WriteBatch(ms []ipv6.Message, flags int) (int, error)
}

// Link is a RoCE v2 link over UDP.
type Link struct {
	cfg   Config
	conn  *net.UDPConn
	pc    batchConn
	v4    bool     // an IPv4-only socket (Config.Bind is an IPv4 address)
	raw   *rawRecv // nil in unprivileged mode
	local atomic.Pointer[map[netip.Addr]bool]
	stats link.Stats
	ids   idSolver

	// IDSolved counts unprivileged IPv4 receives whose ICRC was verified
	// with the IP ID solved for (see the package comment).
	IDSolved atomic.Uint64

	txMu    sync.Mutex
	txMsgs  []ipv6.Message
	txOOB   [][]byte
	txAddrs map[netip.Addr]*net.UDPAddr

	rxMu   sync.Mutex
	rxMsgs []ipv6.Message
	rxOOB  [][]byte
	rxPkt  wire.Packet
	rxHdr  []byte
}

// New opens the link's sockets (in the calling thread's network namespace).
func New(cfg Config) (*Link, error) {
	if cfg.Port == 0 {
		cfg.Port = wire.RoCEv2Port
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 64
	}
	if cfg.MTU == 0 {
		cfg.MTU = 4096 + 64
		if cfg.Ifindex > 0 {
			if ifc, err := net.InterfaceByIndex(cfg.Ifindex); err == nil {
				cfg.MTU = ifc.MTU - wire.IPv6Len - wire.UDPLen
			}
		}
	}
	l := &Link{cfg: cfg, txAddrs: make(map[netip.Addr]*net.UDPAddr)}
	l.SetAddrs(cfg.Addrs)
	network, bind := "udp", &net.UDPAddr{IP: net.IPv6unspecified, Port: int(cfg.Port)}
	if cfg.Bind.IsValid() {
		b := cfg.Bind.Unmap()
		bind.IP = b.AsSlice()
		network = "udp6"
		if b.Is4() {
			network, l.v4 = "udp4", true
		}
	}
	conn, err := net.ListenUDP(network, bind)
	if err != nil {
		return nil, fmt.Errorf("RoCE v2 UDP port %d: %w", cfg.Port, err)
	}
	l.conn = conn
	if err := l.setup(); err != nil {
		conn.Close()
		return nil, err
	}
	if l.v4 {
		l.pc = ipv4.NewPacketConn(conn)
	} else {
		l.pc = ipv6.NewPacketConn(conn)
	}
	if cfg.Ifindex > 0 {
		if l.raw, err = newRawRecv(cfg.Ifindex, cfg.Port); err != nil {
			conn.Close()
			return nil, err
		}
		if err := dropAll(conn); err != nil {
			l.raw.close()
			conn.Close()
			return nil, err
		}
	}
	n := cfg.BatchSize
	l.txMsgs, l.txOOB = make([]ipv6.Message, n), make([][]byte, n)
	l.rxMsgs, l.rxOOB = make([]ipv6.Message, n), make([][]byte, n)
	for i := 0; i < n; i++ {
		l.txOOB[i] = make([]byte, 0, 128)
		l.rxOOB[i] = make([]byte, 256)
		l.rxMsgs[i].Buffers = make([][]byte, 1)
		l.txMsgs[i].Buffers = make([][]byte, 1)
	}
	l.rxHdr = make([]byte, 0, 64)
	return l, nil
}

// setup sets the socket options rxe's traffic needs.
func (l *Link) setup() error {
	rc, err := l.conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		f := int(fd)
		set := func(level, opt, v int, what string) {
			if serr == nil {
				if e := unix.SetsockoptInt(f, level, opt, v); e != nil {
					serr = fmt.Errorf("setsockopt %s: %w", what, e)
				}
			}
		}
		v6 := !l.v4 // Go's "udp" wildcard listener is already dual-stack (IPV6_V6ONLY 0)
		// DF on IPv4, and with it IP ID 0 on an unconnected socket.
		set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER")
		set(unix.SOL_SOCKET, unix.SO_NO_CHECK, 1, "SO_NO_CHECK")
		// Control messages: destination address and TOS/traffic class.
		set(unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO")
		set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS")
		set(unix.IPPROTO_IP, unix.IP_RECVTTL, 1, "IP_RECVTTL")
		if v6 {
			set(unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER")
			// rxe sends UDP checksum 0; Linux drops zero-checksum UDP/IPv6 without this.
			set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX")
			set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1, "UDP_NO_CHECK6_TX")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT")
		}
		set(unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20, "SO_RCVBUF")
		set(unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20, "SO_SNDBUF")
	})
	if err != nil {
		return err
	}
	return serr
}

var _ link.Link = (*Link)(nil)

// SetAddrs replaces the set of local addresses (as the netdev's change).
func (l *Link) SetAddrs(addrs []netip.Addr) {
	m := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		m[netip.AddrFrom16(a.As16())] = true
	}
	l.local.Store(&m)
}

func (l *Link) isLocal(a netip.Addr) bool { return (*l.local.Load())[a] }

func (l *Link) BatchSize() int     { return l.cfg.BatchSize }
func (l *Link) Headroom() int      { return link.FrameHeadroom }
func (l *Link) MTU() int           { return l.cfg.MTU }
func (l *Link) Stats() *link.Stats { return &l.stats }

// Privileged reports whether received ICRCs are verified over the real IP header.
func (l *Link) Privileged() bool { return l.raw != nil }

// Close closes the sockets; Recv and Send return net.ErrClosed.
func (l *Link) Close() error {
	err := l.conn.Close()
	if l.raw != nil {
		l.raw.close()
	}
	return err
}

// pseudoHeaders writes into the headroom before pk's transport packet the
// IP and UDP headers the kernel will send, and returns the offset where
// they start and the IP header length.
func (l *Link) pseudoHeaders(pk *link.Packet, sport uint16) (int, int) {
	a := &pk.Addr
	if a.DstGID.Is4In6() {
		start := pk.Off - wire.IPv4MinLen - wire.UDPLen
		h := pk.Buf[start:pk.Off]
		h[0], h[1] = 0x45, 0
		binary.BigEndian.PutUint16(h[2:], uint16(wire.IPv4MinLen+wire.UDPLen+pk.Len))
		binary.BigEndian.PutUint32(h[4:], 0x00004000) // ID 0, DF
		h[8], h[9] = 0, wire.IPProtocolUDP
		h[10], h[11] = 0, 0
		s, d := a.SrcGID.Unmap().As4(), a.DstGID.Unmap().As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		putUDPHdr(h[20:], sport, l.cfg.Port, wire.UDPLen+pk.Len)
		return start, wire.IPv4MinLen
	}
	start := pk.Off - wire.IPv6Len - wire.UDPLen
	h := pk.Buf[start:pk.Off]
	binary.BigEndian.PutUint32(h, 6<<28)
	binary.BigEndian.PutUint16(h[4:], uint16(wire.UDPLen+pk.Len))
	h[6], h[7] = wire.IPProtocolUDP, 0
	s, d := a.SrcGID.As16(), a.DstGID.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	putUDPHdr(h[40:], sport, l.cfg.Port, wire.UDPLen+pk.Len)
	return start, wire.IPv6Len
}

func putUDPHdr(u []byte, sport, dport uint16, n int) {
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(n))
	binary.BigEndian.PutUint16(u[6:], 0)
}

// Send computes each packet's ICRC over the headers the kernel will write
// and sends the batch with one sendmmsg.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	sent := 0
	for len(pkts) > 0 {
		n := 0
		for n < len(pkts) && n < len(l.txMsgs) {
			pk := &pkts[n]
			m := &l.txMsgs[n]
			m.Buffers[0], m.Addr, m.OOB = nil, nil, nil
			if pk.Addr.Version != wire.RoCEv2 || pk.Addr.SrcGID.Is4In6() != pk.Addr.DstGID.Is4In6() || l.v4 && !pk.Addr.DstGID.Is4In6() ||
				pk.Len < wire.BTHLen+wire.ICRCLen || pk.Off < link.FrameHeadroom || pk.Len > l.cfg.MTU {
				l.stats.TxBadAddress.Add(1)
			} else {
				start, nlen := l.pseudoHeaders(pk, l.cfg.Port)
				end := pk.Off + pk.Len
				c := wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2)
				binary.LittleEndian.PutUint32(pk.Buf[end-wire.ICRCLen:], c)
				m.Buffers[0] = pk.Buf[pk.Off:end]
				m.Addr = l.udpAddr(pk.Addr.DstGID)
				m.OOB = l.txControl(l.txOOB[n][:0], &pk.Addr)
			}
			n++
		}
		// Compact out the dropped ones.
		msgs := l.txMsgs[:0]
		for i := 0; i < n; i++ {
			if l.txMsgs[i].Addr != nil {
				msgs = append(msgs, l.txMsgs[i])
			}
		}
		for off := 0; off < len(msgs); {
			k, err := l.pc.WriteBatch(msgs[off:], 0)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return sent, net.ErrClosed
				}
				// A send error (no route, EMSGSIZE) loses one packet, like a wire would.
				l.stats.TxNoRoute.Add(1)
				k = 1
			} else {
				for _, m := range msgs[off : off+k] {
					l.stats.TxBytes.Add(uint64(len(m.Buffers[0])))
				}
				l.stats.TxPackets.Add(uint64(k))
				sent += k
			}
			off += k
		}
		pkts = pkts[n:]
	}
	return sent, nil
}

func (l *Link) udpAddr(g netip.Addr) *net.UDPAddr {
	if a := l.txAddrs[g]; a != nil {
		return a
	}
	ip := g.Unmap()
	a := &net.UDPAddr{IP: ip.AsSlice(), Port: int(l.cfg.Port)}
	if len(l.txAddrs) > 4096 {
		clear(l.txAddrs)
	}
	l.txAddrs[g] = a
	return a
}

// txControl appends the control messages for a: the source address
// (IPV6_PKTINFO; for IPv4-mapped destinations Linux takes it as IP_PKTINFO)
// and the traffic class (IP_TOS or IPV6_TCLASS).
func (l *Link) txControl(b []byte, a *link.Addr) []byte {
	if l.v4 {
		b = appendCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, func(d []byte) {
			// struct in_pktinfo: ifindex, spec_dst (the source to use), addr.
			s := a.SrcGID.Unmap().As4()
			copy(d[4:8], s[:])
		}, unix.SizeofInet4Pktinfo)
	} else {
		b = appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, func(d []byte) {
			s := a.SrcGID.As16()
			copy(d[0:16], s[:])
		}, unix.SizeofInet6Pktinfo)
	}
	if a.TrafficClass != 0 {
		if a.DstGID.Is4In6() {
			b = appendCmsg(b, unix.IPPROTO_IP, unix.IP_TOS, func(d []byte) { d[0] = a.TrafficClass }, 1)
		} else {
			b = appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, func(d []byte) {
				binary.NativeEndian.PutUint32(d, uint32(a.TrafficClass))
			}, 4)
		}
	}
	return b
}

func appendCmsg(b []byte, level, typ int, fill func([]byte), n int) []byte {
	space := unix.CmsgSpace(n)
	off := len(b)
	for i := 0; i < space; i++ {
		b = append(b, 0)
	}
	h := (*unix.Cmsghdr)(unsafePointer(&b[off]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(n))
	fill(b[off+unix.CmsgLen(0) : off+unix.CmsgLen(n)])
	return b
}

// Recv receives a batch.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	if l.raw != nil {
		return l.raw.recv(l, pkts)
	}
	for {
		n := min(len(pkts), len(l.rxMsgs))
		for i := 0; i < n; i++ {
			b := pkts[i].Buf[:cap(pkts[i].Buf)]
			// Leave headroom so the packet can be re-sent or rebuilt in place.
			l.rxMsgs[i].Buffers[0] = b[link.FrameHeadroom:]
			l.rxMsgs[i].OOB = l.rxOOB[i][:cap(l.rxOOB[i])]
		}
		k, err := l.pc.ReadBatch(l.rxMsgs[:n], 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return 0, net.ErrClosed
			}
			return 0, err
		}
		got := 0
		for i := 0; i < k; i++ {
			m := &l.rxMsgs[i]
			pk := &pkts[got]
			if l.acceptUDP(pk, m) {
				got++
			}
		}
		if got > 0 {
			return got, nil
		}
	}
}

// acceptUDP turns one datagram from the socket into a packet for the
// engine, verifying its ICRC; it reports false for a dropped datagram.
func (l *Link) acceptUDP(pk *link.Packet, m *ipv6.Message) bool {
	src, ok := m.Addr.(*net.UDPAddr)
	if !ok {
		l.stats.RxMalformed.Add(1)
		return false
	}
	sa, _ := netip.AddrFromSlice(src.IP)
	a := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(sa.As16()), UDPSrcPort: uint16(src.Port), HopLimit: 64}
	if !parseControl(m.OOB[:m.NN], &a) {
		l.stats.RxMalformed.Add(1)
		return false
	}
	pk.Buf = pk.Buf[:link.FrameHeadroom+m.N]
	pk.Off, pk.Len, pk.Addr = link.FrameHeadroom, m.N, a
	if !l.isLocal(a.DstGID) {
		l.stats.RxNotForUs.Add(1)
		return false
	}
	if err := l.rxPkt.ParseTransport(pk.Transport(), wire.RoCEv2); err != nil {
		l.stats.RxMalformed.Add(1)
		return false
	}
	// Rebuild the headers in the headroom and check the ICRC.
	start, nlen := l.pseudoHeaders(pk, a.UDPSrcPort)
	end := pk.Off + pk.Len
	rx := binary.LittleEndian.Uint32(pk.Buf[end-wire.ICRCLen:])
	c := wire.ICRC(pk.Buf[start:end-wire.ICRCLen], nlen, wire.RoCEv2)
	if c != rx {
		if !a.DstGID.Is4In6() {
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
	l.stats.RxBytes.Add(uint64(m.N))
	return true
}

// parseControl reads the destination address, TOS/traffic class and TTL/hop
// limit from a datagram's control messages.
func parseControl(oob []byte, a *link.Addr) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, c := range msgs {
		switch {
		case c.Header.Level == unix.IPPROTO_IP && c.Header.Type == unix.IP_PKTINFO && len(c.Data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex, spec_dst, addr (the header's destination).
			a.DstGID = netip.AddrFrom16(netip.AddrFrom4([4]byte(c.Data[8:12])).As16())
		case c.Header.Level == unix.IPPROTO_IPV6 && c.Header.Type == unix.IPV6_PKTINFO && len(c.Data) >= 16:
			if !a.DstGID.IsValid() {
				a.DstGID = netip.AddrFrom16([16]byte(c.Data[:16]))
			}
		case c.Header.Level == unix.IPPROTO_IP && c.Header.Type == unix.IP_TOS && len(c.Data) >= 1:
			a.TrafficClass = c.Data[0]
		case c.Header.Level == unix.IPPROTO_IP && c.Header.Type == unix.IP_TTL && len(c.Data) >= 4:
			a.HopLimit = uint8(binary.NativeEndian.Uint32(c.Data))
		case c.Header.Level == unix.IPPROTO_IPV6 && c.Header.Type == unix.IPV6_TCLASS && len(c.Data) >= 4:
			a.TrafficClass = uint8(binary.NativeEndian.Uint32(c.Data))
		case c.Header.Level == unix.IPPROTO_IPV6 && c.Header.Type == unix.IPV6_HOPLIMIT && len(c.Data) >= 4:
			a.HopLimit = uint8(binary.NativeEndian.Uint32(c.Data))
		}
	}
	return a.DstGID.IsValid()
}

var errNotPrivileged = errors.New("AF_PACKET needs CAP_NET_RAW (run as root, or without an ifindex for unprivileged mode)")
