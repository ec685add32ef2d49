// Package udp is the RoCE v2 link over the host's UDP/IP stack: one
// dual-stack UDP socket on port 4791 sends and receives IPv4 and IPv6 RoCE
// v2 packets in batches, with sendmmsg(2) and recvmmsg(2) on message
// headers the link keeps (mmsg.go).
//
// Segmentation offload, sending: consecutive packets of a batch to the same
// destination, of one size (the last may be shorter), go to the kernel as
// one UDP GSO message (UDP_SEGMENT, Linux ≥ 4.18): one trip down the stack
// and, over a veth, one skb to the peer instead of up to 64. The kernel
// refuses GSO on a socket that sends UDP checksum 0, so with GSO the link
// lets the kernel fill the UDP checksum (rxe sends 0; the ICRC masks the
// field and receivers accept either). Config.NoGSO restores checksum 0 and
// one datagram per message.
//
// Coalesced receive: the socket sets UDP_GRO, so a GSO message that reaches
// it whole (as over a veth) arrives as one datagram and a control message
// with its segment size, and the link splits it; in privileged mode the
// AF_PACKET socket reads such superpackets with a virtio-net header
// (PACKET_VNET_HDR) that says the same. The receive buffers are the
// caller's: the kernel scatters each segment into a buffer of its own
// (rx.go), so a received packet is copied once, by the kernel. In
// privileged mode the AF_PACKET socket has a receive ring (ring.go): a
// look that finds nothing is a load from memory instead of a system call,
// and a packet is copied twice, into the ring by the kernel and from it
// into the caller's buffers (a superpacket, too long for a frame, is
// read whole from the socket, once).
//
// ICRC, sending: the kernel writes the IP and UDP headers, so the link
// predicts them. With IP_PMTUDISC_DO the kernel sets DF and, on an
// unconnected socket, IPv4 Identification 0 (ip_select_ident); the segments
// of a GSO message carry IDs 0, 1, 2, … (inet_gso_segment numbers them from
// the message's ID; gso_test.go checks it on this kernel). Every other
// covered field is known (addresses, lengths, protocol, ports) or masked
// (TOS, TTL, checksums). The ICRC on the wire is therefore exact where the
// kernel segments (software GSO) or the message crosses a veth whole and
// its receiver rebuilds the IDs the same way (the privileged path below; a
// kernel UDP socket gets the kernel's own segmentation). A NIC that
// segments in hardware (USO) writes the IDs itself: it must number them as
// the kernel does, as NICs do for TSO; if one does not, NoGSO is the cure.
//
// ICRC, receiving — what each mode verifies:
//   - Privileged (Config.Ifindex set and CAP_NET_RAW): packets are read from
//     the netdev with an AF_PACKET socket that sees the real IP header, and
//     all 32 bits of every ICRC are verified, IPv4 and IPv6 alike; segments
//     split from a superpacket get the headers the kernel would have given
//     them (lengths, and IPv4 ID first+k, or first when the sender kept it
//     fixed). The UDP socket stays bound (so the kernel sends no ICMP port
//     unreachable) with a filter that drops its copy.
//   - Unprivileged: packets come from the UDP socket. IPv6: the header is
//     rebuilt from the socket's control messages and the ICRC fully
//     verified. IPv4: the socket never shows the Identification field, so
//     the link solves for the one ID that makes the ICRC right (idsolve.go):
//     corruption is still caught, except with probability 2^-16.
//
// Source sockets (srcsock.go): a link opened without Bind also has an
// AF_INET socket bound to each of its IPv4 addresses, and sends unicast
// IPv4 packets through the one of their source, without the IP_PKTINFO
// that the dual-stack socket needs (a shorter trip through the kernel).
//
// The UDP source port: the main socket is bound to 4791 and a source
// socket to a port of the kernel's choosing, so a packet leaves from one
// of those, where Linux varies it per flow (wire.FlowLabelToUDPSport).
// Receivers ignore it; ECMP hashing sees one flow per socket. link/afpacket
// sends the exact Linux ports.
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktring"
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
	// XDP reads Ifindex's packets through an AF_XDP socket that an XDP
	// program feeds (link/xsk) instead of an AF_PACKET socket's ring: the
	// packet skips the kernel's receive path up to the taps. One link per
	// netdev, a netdev of one receive queue, an MTU of at most
	// xsk.MaxMTU; on a driver without XDP (the generic mode) a GSO or GRO
	// superpacket is dropped (rx_drop_socket_full).
	XDP bool
	// Zone is the netdev's interface index, the scope of its link-local
	// addresses (fe80::/10): a packet to or from one leaves through this
	// netdev (sin6_scope_id, ipi6_ifindex). 0: link-local GIDs are not
	// reachable.
	Zone int
	// Bind is the address to bind; unset binds the wildcard with one
	// dual-stack socket. Binding an address lets several links share a host
	// (e.g. 127.0.0.1 and 127.0.0.2 on loopback, each on port 4791).
	Bind netip.Addr
	// NoGSO sends one datagram per message with UDP checksum 0, exactly as
	// rxe does, instead of UDP GSO messages with checksums (see the package
	// comment). GSO is also off when the kernel lacks it.
	NoGSO bool
	// BusyPoll is how long Recv keeps polling the socket, yielding the
	// processor between polls, after the last packet arrived, before it
	// sleeps in the Go netpoller: a packet that arrives meanwhile costs no
	// wake-up (the Go counterpart of SO_BUSY_POLL, and like it off by
	// default: 0). It trades CPU for latency: on the veth benchmark, 50µs
	// takes about a tenth off the SEND/RECV round trip and costs half
	// again as much CPU (BENCHMARKS.md). See also SetBusyPoll.
	BusyPoll time.Duration
}

const (
	// maxGSOSegs bounds the segments of one GSO message (the kernel's
	// UDP_MAX_SEGMENTS is 64 on older kernels, 128 on newer).
	maxGSOSegs = 64
	// maxGSOBytes bounds a GSO message's payload: one UDP datagram over
	// IPv4 (65535 - 20 - 8), which fits IPv6 too.
	maxGSOBytes = 65507
	txCtlLen    = 128
)

// Link is a RoCE v2 link over UDP.
type Link struct {
	cfg  Config
	conn *net.UDPConn
	rc   syscall.RawConn
	v4   bool // an IPv4-only socket (Config.Bind is an IPv4 address)
	gso  bool // send GSO messages
	// groOff is set once the kernel refused a coalesced packet on the
	// AF_PACKET socket and UDP_GRO was turned off (see Recv).
	groOff atomic.Bool
	raw    *rawRecv // nil in unprivileged mode
	local  atomic.Pointer[link.AddrSet]
	mc     mcastState // multicast groups joined (mcast.go)
	turn   turnSplit  // empty but with the goroce_turn build tag (turn_on.go)
	stats  link.Stats
	ids    idSolver
	// generalOnly sends every frame received and every batch sent
	// through the general path (generalFrame, Send's loop), never the
	// short ones (shortFrame, shortMsg): for the tests that hold the ones
	// to the others. Set before the link is used.
	generalOnly bool
	shortMsgs   uint64 // batches shortMsg sent (for tests; under txMu)
	// srcs are the source sockets (srcsock.go), opened by New; mainOnly,
	// set by tests before the link is used, sends everything through the
	// main socket as before them.
	srcs     []*srcSock
	mainOnly bool

	// IDSolved counts unprivileged IPv4 receives whose ICRC was verified
	// with the IP ID solved for (see the package comment).
	IDSolved atomic.Uint64
	// GSOMessages counts the GSO messages (of two segments or more) sent.
	GSOMessages atomic.Uint64
	// GSOFallbacks counts GSO messages the kernel refused and the link
	// resent as single datagrams (after the first, the link stops using GSO).
	GSOFallbacks atomic.Uint64

	txMu    sync.Mutex
	txHdrs  []unix.Mmsghdr // guarded by txMu, as are the rest of tx*
	txIovs  []unix.Iovec
	txNames []byte  // SizeofSockaddrInet6 per message
	txKeys  []txKey // per message: what its name and control messages were made for
	txCtl   []byte  // txCtlLen per message
	txFirst []int   // per message: index of its first packet in the batch
	txPkts  []int   // packets per message
	txBytes []int   // bytes per message
	gsoOff  atomic.Bool
	// The socket's descriptor, for sendMsgs's first try without the
	// poller; fdMu's read side covers each such use, and Close sets
	// fdClosed under its write side before the socket closes, so a
	// descriptor number never outlives its socket (and is never another's).
	fd       uintptr
	fdMu     sync.RWMutex
	fdClosed bool
	// The sendmmsg in progress (see write).
	writeFn  func(fd uintptr) bool
	txMsgs   []unix.Mmsghdr
	txN      int
	txErrno  unix.Errno
	txPseudo pseudoCache

	busyPoll atomic.Int64 // Config.BusyPoll, in nanoseconds

	dstMu sync.Mutex
	dsts  map[netip.Addr]*dstTally // guarded by dstMu: how packets left, per destination
	// The last destination tallied and its entry in dsts (guarded by
	// dstMu): a run of sends to one peer looks the map up once.
	lastDst   netip.Addr
	lastTally *dstTally

	rxMu sync.Mutex
	rx   rxState // guarded by rxMu

	// Pending's state, read and written without rxMu: whether rx holds
	// queued segments (set under rxMu whenever the queue changes), and
	// the socket's answer (see pendingFn).
	queued    atomic.Bool
	pendingFn func(fd uintptr)
	inq       atomic.Int64
	inqs      atomic.Uint64 // Pending's looks through the socket (for tests)
}

// New opens the link's sockets (in the calling thread's network namespace).
func New(cfg Config) (*Link, error) {
	rawMmsg.Store(runtime.GOMAXPROCS(0) == 1) // see sendmmsg
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
	l := &Link{cfg: cfg}
	l.writeFn = l.write
	l.SetAddrs(cfg.Addrs)
	l.SetBusyPoll(cfg.BusyPoll)
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
	if l.rc, err = conn.SyscallConn(); err == nil {
		err = l.rc.Control(func(fd uintptr) { l.fd = fd })
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := l.setup(); err != nil {
		conn.Close()
		return nil, err
	}
	if !cfg.Bind.IsValid() {
		if l.srcs, err = openSrcSocks(cfg.Addrs, l.noCheck()); err != nil {
			conn.Close()
			return nil, err
		}
	}
	if cfg.Ifindex > 0 {
		// cfg.MTU leaves room for IPv6 and UDP: the netdev's MTU is the
		// largest IP packet a frame must hold.
		if cfg.XDP {
			l.raw, err = newXSKRecv(cfg.Ifindex, cfg.Port, cfg.MTU+wire.IPv6Len+wire.UDPLen)
		} else {
			l.raw, err = newRawRecv(cfg.Ifindex, cfg.Port, ringFrameFor(cfg.MTU+wire.IPv6Len+wire.UDPLen))
		}
		if err != nil {
			closeSrcSocks(l.srcs)
			conn.Close()
			return nil, err
		}
		if err := dropAll(conn); err != nil {
			l.raw.close(&l.rxMu)
			closeSrcSocks(l.srcs)
			conn.Close()
			return nil, err
		}
		if !pktring.DescribesUSO() || cfg.XDP {
			// The kernel would coalesce for the UDP socket and then refuse
			// the superpacket to the AF_PACKET socket (EINVAL, packet
			// lost): measured in the lab's 6.1 guests as a lost first
			// burst and a go-back-N of 1,024 packets in every 64 KiB
			// write_bw run. Do not ask it to coalesce at all. Nor with
			// XDP: in generic mode the program sees packets after GRO, and
			// a superpacket fits no chunk.
			l.disableGRO()
		}
	}
	n := cfg.BatchSize
	l.txHdrs, l.txIovs = make([]unix.Mmsghdr, n), make([]unix.Iovec, n)
	l.txNames, l.txCtl = make([]byte, n*unix.SizeofSockaddrInet6), make([]byte, n*txCtlLen)
	l.txKeys = make([]txKey, n)
	l.txFirst, l.txPkts, l.txBytes = make([]int, n), make([]int, n), make([]int, n)
	l.rx.init(n, l.raw != nil, &l.stats.RxSocketFull)
	if l.raw != nil {
		l.rx.ring = l.raw.ring
		if s := l.raw.xsk; s != nil {
			l.rx.drops.Count = func(uintptr) uint64 { return s.Drops() }
		}
	}
	l.pendingFn = l.inqOf
	return l, nil
}

// noCheck is SO_NO_CHECK's value for the link's sockets: rxe sends UDP
// checksum 0, but the kernel refuses GSO without a checksum.
func (l *Link) noCheck() int {
	if l.gso {
		return 0
	}
	return 1
}

// sockOpts sets integer socket options on one socket, keeping the first
// error (after which it sets nothing more).
type sockOpts struct {
	f      int
	prefix string // before "setsockopt" in the error
	err    error
}

func (o *sockOpts) set(level, opt, v int, what string) {
	if o.err == nil {
		if e := unix.SetsockoptInt(o.f, level, opt, v); e != nil {
			o.err = fmt.Errorf("%ssetsockopt %s: %w", o.prefix, what, e)
		}
	}
}

// buf sets a buffer of 8 MiB: as root past net.core.[rw]mem_max (force),
// else as far as the limit allows (opt).
func (o *sockOpts) buf(force, opt int, what string) {
	if unix.SetsockoptInt(o.f, unix.SOL_SOCKET, force, 8<<20) != nil {
		o.set(unix.SOL_SOCKET, opt, 8<<20, what)
	}
}

// setup sets the socket options rxe's traffic needs.
func (l *Link) setup() error {
	var o sockOpts
	err := l.rc.Control(func(fd uintptr) {
		f := int(fd)
		o.f = f
		set := o.set
		// GSO where the kernel has it (UDP_SEGMENT is readable since 4.18).
		if !l.cfg.NoGSO {
			_, e := unix.GetsockoptInt(f, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
			l.gso = e == nil
		}
		noCheck := l.noCheck()
		v6 := !l.v4 // Go's "udp" wildcard listener is already dual-stack (IPV6_V6ONLY 0)
		// DF on IPv4, and with it IP ID 0 on an unconnected socket.
		set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER")
		set(unix.SOL_SOCKET, unix.SO_NO_CHECK, noCheck, "SO_NO_CHECK")
		// Control messages: destination address and TOS/traffic class.
		set(unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO")
		set(unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS")
		set(unix.IPPROTO_IP, unix.IP_RECVTTL, 1, "IP_RECVTTL")
		if v6 {
			set(unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER")
			// rxe sends UDP checksum 0; Linux drops zero-checksum UDP/IPv6 without this.
			set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX")
			set(unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, noCheck, "UDP_NO_CHECK6_TX")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS")
			set(unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT")
		}
		// Coalesced receive (Linux ≥ 5.0; older kernels just segment). In
		// privileged mode it also spares the kernel segmenting superpackets
		// only for the drop filter to discard them.
		_ = unix.SetsockoptInt(f, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
		// Buffers: as root, past net.core.[rw]mem_max.
		o.buf(unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF/SO_SNDBUF")
		o.buf(unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_RCVBUF/SO_SNDBUF")
	})
	if err != nil {
		return err
	}
	return o.err
}

var _ link.Link = (*Link)(nil)

// SetAddrs replaces the set of local addresses (as the netdev's change).
func (l *Link) SetAddrs(addrs []netip.Addr) {
	set := link.NewAddrSet(addrs)
	l.local.Store(&set)
}

// isLocal reports whether a packet to a is for this link: one of its
// addresses or a group it joined.
func (l *Link) isLocal(a netip.Addr) bool { return l.local.Load().Contains(a) || l.joined(a) }

// SetBusyPoll changes Config.BusyPoll (d ≤ 0: off); it takes effect at
// the next Recv.
func (l *Link) SetBusyPoll(d time.Duration) { l.busyPoll.Store(max(int64(d), 0)) }

func (l *Link) BatchSize() int     { return l.cfg.BatchSize }
func (l *Link) Headroom() int      { return link.FrameHeadroom }
func (l *Link) MTU() int           { return l.cfg.MTU }
func (l *Link) Stats() *link.Stats { return &l.stats }

// Privileged reports whether received ICRCs are verified over the real IP header.
func (l *Link) Privileged() bool { return l.raw != nil }

// GSO reports whether the link sends UDP GSO messages.
func (l *Link) GSO() bool { return l.gso && !l.gsoOff.Load() }

// Close closes the sockets; Recv and Send return net.ErrClosed.
func (l *Link) Close() error {
	l.fdMu.Lock()
	l.fdClosed = true
	l.fdMu.Unlock()
	err := l.conn.Close()
	closeSrcSocks(l.srcs)
	if l.raw != nil {
		l.raw.close(&l.rxMu)
	}
	l.turn.closed(&l.txMu)
	return err
}

// pseudoHeaders writes into the headroom before pk's transport packet the
// IP and UDP headers the kernel will send (IPv4 Identification id), and
// returns the offset where they start and the IP header length. c holds
// the last headers built: a run of packets to (or from) one peer and port
// runs wire's encoder once (see wire.HeaderTemplate).
func (l *Link) pseudoHeaders(c *pseudoCache, pk *link.Packet, sport uint16, id uint16) (int, int) {
	a := &pk.Addr
	if !c.ok || c.sport != sport || c.src != a.SrcGID || c.dst != a.DstGID {
		c.set(a, sport, l.cfg.Port)
	}
	nlen := wire.IPv6Len
	if a.DstGID.Is4In6() {
		nlen = wire.IPv4MinLen
	}
	start := pk.Off - nlen - wire.UDPLen
	if c.ok {
		c.t.Put(pk.Buf[start:pk.Off], pk.Len, id)
	}
	return start, nlen
}

// pseudoCache is the IP and UDP headers pseudoHeaders built last, and
// whom they were for.
type pseudoCache struct {
	ok       bool
	src, dst netip.Addr
	sport    uint16
	t        wire.HeaderTemplate
}

// set builds the headers for a's addresses and sport with wire's encoder,
// masked: the fields the ICRC masks (TOS, TTL, flow label, the IPv4
// header checksum) are left zero, as the kernel's are unknown here.
func (c *pseudoCache) set(a *link.Addr, sport, dport uint16) {
	h := wire.Headers{Version: wire.RoCEv2, UDP: wire.UDPFields{SrcPort: sport, DstPort: dport}}
	var ip4 wire.IPv4Fields
	var ip6 wire.IPv6Fields
	if a.DstGID.Is4In6() {
		ip4 = wire.IPv4Fields{Flags: 2, Protocol: wire.IPProtocolUDP, Src: a.SrcGID, Dst: a.DstGID} // DF
		h.IPv4 = &ip4
	} else {
		ip6 = wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, Src: a.SrcGID, Dst: a.DstGID}
		h.IPv6 = &ip6
	}
	// Send checked pk's addresses (sendable) and the kernel gave the
	// receive path's: one family, so the encoder has no error to return.
	// Were it to, the headroom keeps stale bytes and the ICRC fails.
	c.ok = c.t.Set(&h, true) == nil
	c.src, c.dst, c.sport = a.SrcGID, a.DstGID, sport
}

// sendable reports whether the link can send pk: a RoCE v2 packet to a
// destination GID (not the zero netip.Addr, which no header cache or
// message slot is for until it is set: shortMsg relies on that) of the
// source's family.
func (l *Link) sendable(pk *link.Packet) bool {
	a := &pk.Addr
	return a.Version == wire.RoCEv2 && a.DstGID.IsValid() && a.SrcGID.Is4In6() == a.DstGID.Is4In6() && (!l.v4 || a.DstGID.Is4In6()) &&
		pk.Len >= wire.BTHLen+wire.ICRCLen && pk.Off >= link.FrameHeadroom && pk.Len <= l.cfg.MTU && pk.Off+pk.Len <= len(pk.Buf)
}

// sameMessage reports whether q may follow p in one GSO message: the same
// addresses and traffic class (one set of control messages).
func sameMessage(p, q *link.Addr) bool {
	return p.DstGID == q.DstGID && p.SrcGID == q.SrcGID && p.TrafficClass == q.TrafficClass
}

// Send computes each packet's ICRC over the headers the kernel will write
// and sends the batch with sendmmsg, runs of same-size packets to one
// destination as GSO messages; the common batch (a packet, or an answer
// and its ACK, to the last message's peer) in one step (shortMsg).
func (l *Link) Send(pkts []link.Packet) (int, error) {
	l.txMu.Lock()
	defer l.txMu.Unlock()
	if n, err, ok := l.shortMsg(pkts); ok {
		return n, err
	}
	gso := l.GSO()
	sent := 0
	for len(pkts) > 0 {
		nm, used, iov := 0, 0, 0
		var bs *srcSock // the socket of the sendmmsg: one for all its messages
		for used < len(pkts) && nm < len(l.txHdrs) && iov < len(l.txIovs) {
			pk := &pkts[used]
			if !l.sendable(pk) {
				l.stats.TxBadAddress.Add(1)
				used++
				continue
			}
			s := l.sockFor(&pk.Addr)
			if nm > 0 && s != bs {
				break
			}
			bs = s
			// The message: pk and what may join it.
			segs, total := 1, pk.Len
			for gso && used+segs < len(pkts) && segs < maxGSOSegs && iov+segs < len(l.txIovs) {
				q := &pkts[used+segs]
				if q.Len > pk.Len || total+q.Len > maxGSOBytes || !sameMessage(&pk.Addr, &q.Addr) || !l.sendable(q) {
					break
				}
				if q.Len < pk.Len {
					// A shorter segment ends a GSO message; but if it starts
					// a run of its size (a WRITE's FIRST, longer by its RETH,
					// before the MIDDLEs), the run makes a better message, and
					// the receiver sees one segment size.
					if r := used + segs + 1; r < len(pkts) && pkts[r].Len == q.Len {
						break
					}
					segs++
					total += q.Len
					break
				}
				segs++
				total += q.Len
			}
			for s := range segs {
				q := &pkts[used+s]
				start, nlen := l.pseudoHeaders(&l.txPseudo, q, l.sportOf(bs), uint16(s))
				putICRC(q.Buf[start:q.Off+q.Len], nlen)
				setIov(&l.txIovs[iov+s], q.Transport())
			}
			l.prepareMsg(nm, iov, segs, pk, bs)
			l.txFirst[nm], l.txPkts[nm], l.txBytes[nm] = used, segs, total
			nm++
			iov += segs
			used += segs
		}
		for off := 0; off < nm; {
			k, err := l.sendMsgs(bs, l.txHdrs[off:nm])
			if err != nil {
				n, err := l.sendFailed(pkts, off, err)
				sent += n
				if err != nil {
					return sent, err
				}
				k = 1
			} else {
				for i := off; i < off+k; i++ {
					sent += l.sent(pkts, i)
				}
			}
			off += k
		}
		pkts = pkts[used:]
	}
	return sent, nil
}

// putICRC writes the ICRC at the end of b, a RoCE v2 packet from its IP
// header (of nlen bytes) through its ICRC.
func putICRC(b []byte, nlen int) {
	end := len(b) - wire.ICRCLen
	binary.LittleEndian.PutUint32(b[end:], wire.ICRC(b[:end], nlen, wire.RoCEv2))
}

// sendFailed handles sendMsgs' error err about message m (of the batch
// pkts, as txFirst and txPkts describe it), the first it did not send:
// the link closed (returned), or the kernel refusing GSO (its packets
// resent as single datagrams, and the link sends no more GSO messages),
// or the message lost as a wire would lose it. It returns how many of
// the message's packets it sent.
func (l *Link) sendFailed(pkts []link.Packet, m int, err error) (int, error) {
	if errors.Is(err, net.ErrClosed) {
		return 0, net.ErrClosed
	}
	if l.txPkts[m] > 1 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EIO) || errors.Is(err, unix.EOPNOTSUPP)) {
		// The kernel refused GSO for this route or device: resend
		// the message's packets one by one, and stop using GSO.
		l.GSOFallbacks.Add(1)
		l.gsoOff.Store(true)
		return l.resendSingly(pkts[l.txFirst[m] : l.txFirst[m]+l.txPkts[m]])
	}
	// A send error (no route, EMSGSIZE) loses the packets, like a wire would.
	l.stats.TxNoRoute.Add(uint64(l.txPkts[m]))
	return 0, nil
}

// sent counts message m of the batch pkts, sent, and returns its packets.
func (l *Link) sent(pkts []link.Packet, m int) int {
	if l.txPkts[m] > 1 {
		l.GSOMessages.Add(1)
	}
	l.tally(pkts[l.txFirst[m]].Addr.DstGID, l.txPkts[m])
	l.stats.TxPackets.Add(uint64(l.txPkts[m]))
	l.stats.TxBytes.Add(uint64(l.txBytes[m]))
	return l.txPkts[m]
}

// shortMsg is Send for the batch of the common case, in fewer steps: one
// packet, or two that make one GSO message (the second no longer than the
// first, to the same peer: an answer and the ACK it carries), to the
// peer the last message went to, from the same source
// and with the same traffic class, so that the IP and UDP headers the
// ICRC covers (txPseudo) and message slot 0's name and control messages
// (txKeys) are already those it needs. It checks that, then writes each
// packet's headers and ICRC, points slot 0 at the packets and sends it.
// It reports false, having changed nothing, for any other batch, which
// Send's general loop then sends (and makes the next such batch
// shortMsg's). Called with txMu held.
func (l *Link) shortMsg(pkts []link.Packet) (int, error, bool) {
	if len(pkts) == 0 || len(pkts) > 2 || l.generalOnly {
		return 0, nil, false
	}
	pk := &pkts[0]
	a := &pk.Addr
	c, k := &l.txPseudo, &l.txKeys[0]
	total := pk.Len
	var gso uint16
	if len(pkts) == 2 {
		q := &pkts[1]
		if !l.GSO() || q.Len > pk.Len || !sameMessage(a, &q.Addr) || !l.sendable(q) {
			return 0, nil, false
		}
		gso, total = uint16(pk.Len), total+q.Len
	}
	// c.ok and k.ok are implied: a cache or slot not yet set is for the
	// zero Addr, which sendable refuses, and set cannot fail for a
	// sendable packet's addresses.
	// Slot 0's socket is sockFor's for its addresses (a function of
	// them); the cache's port must be that socket's (resendSingly builds
	// the cache for the main socket's).
	if !l.sendable(pk) || c.src != a.SrcGID || c.dst != a.DstGID || c.sport != l.sportOf(k.sock) ||
		k.dst != a.DstGID || k.src != a.SrcGID || k.tc != a.TrafficClass || k.gso != gso {
		return 0, nil, false
	}
	for s := range pkts {
		q := &pkts[s]
		start := q.Off - c.t.Len()
		putICRC(q.Buf[start:q.Off+q.Len], c.t.Put(q.Buf[start:q.Off], q.Len, uint16(s)))
		setIov(&l.txIovs[s], q.Transport())
	}
	h := &l.txHdrs[0].Hdr
	h.Iov = &l.txIovs[0]
	h.SetIovlen(len(pkts))
	l.txFirst[0], l.txPkts[0], l.txBytes[0] = 0, len(pkts), total
	l.shortMsgs++
	if _, err := l.sendMsgs(k.sock, l.txHdrs[:1]); err != nil {
		n, err := l.sendFailed(pkts, 0, err)
		return n, err, true
	}
	return l.sent(pkts, 0), nil, true
}

// dstTally counts how the packets to one destination left: in GSO
// messages (superpackets, over a veth) or on their own.
type dstTally struct {
	gsoPkts, gsoMsgs, single uint64
}

// tally records a message of segs packets to dst.
func (l *Link) tally(dst netip.Addr, segs int) {
	l.dstMu.Lock()
	t := l.lastTally
	if t == nil || l.lastDst != dst {
		if l.dsts == nil || len(l.dsts) >= 1024 {
			l.dsts = map[netip.Addr]*dstTally{} // a bound; what is in use comes back
		}
		if t = l.dsts[dst]; t == nil {
			t = &dstTally{}
			l.dsts[dst] = t
		}
		l.lastDst, l.lastTally = dst, t
	}
	if segs > 1 {
		t.gsoPkts += uint64(segs)
		t.gsoMsgs++
	} else {
		t.single++
	}
	l.dstMu.Unlock()
}

// PathError (link.PathReporter) explains a destination that never
// answered when every packet sent to it left inside a UDP GSO superpacket:
// a receiver that reads the netdev with a packet socket (AF_PACKET) gets
// such a superpacket whole over a veth or a router, and unless it splits
// it (goroce's raw links do) it drops every multi-packet message while the
// single packets get through. A kernel UDP socket (rxe, link/udp without
// privileges) receives them split. nil otherwise: the kernel routes and
// resolves this link's packets (see link/neigh for what it knows).
func (l *Link) PathError(dst netip.Addr, v wire.Version) error {
	l.dstMu.Lock()
	t := l.dsts[dst]
	var c dstTally
	if t != nil {
		c = *t
	}
	l.dstMu.Unlock()
	if v != wire.RoCEv2 || c.gsoMsgs == 0 || c.single > 0 {
		return nil
	}
	return fmt.Errorf("every packet sent to %v left in a UDP GSO superpacket (%d packets in %d GSO messages, none on its own): "+
		"a receiver reading its netdev with a packet socket gets each whole, and one that does not split them drops them all; "+
		"if messages of one packet (no larger than the path MTU) get through, that is it (link/udp's NoGSO sends no superpackets); "+
		"if not, check the remote QPN, the destination GID and that both sides use the same RoCE version",
		dst.Unmap(), c.gsoPkts, c.gsoMsgs)
}

// prepareMsg fills message m, to be sent through s (nil: the main
// socket): destination, control messages, and segs iovecs from txIovs[iov:].
func (l *Link) prepareMsg(m, iov, segs int, pk *link.Packet, s *srcSock) {
	h := &l.txHdrs[m].Hdr
	h.Iov = &l.txIovs[iov]
	h.SetIovlen(segs)
	var gso uint16
	if segs > 1 {
		gso = uint16(pk.Len)
	}
	a := &pk.Addr
	k := &l.txKeys[m]
	if k.ok && k.dst == a.DstGID && k.src == a.SrcGID && k.tc == a.TrafficClass && k.gso == gso && k.sock == s {
		// The name and control messages slot m's last message left
		// are this one's: a stream, or a round trip, to one peer (the
		// sockaddr and the cmsgs cost 530 instructions a message,
		// bench/callgrind.sh).
		return
	}
	*k = txKey{ok: true, src: a.SrcGID, dst: a.DstGID, tc: a.TrafficClass, gso: gso, sock: s}
	name := l.txNames[m*unix.SizeofSockaddrInet6 : (m+1)*unix.SizeofSockaddrInet6]
	h.Name = &name[0]
	h.Namelen = uint32(putSockaddr(name, pk.Addr.DstGID.As16(), l.cfg.Port, l.v4 || s != nil))
	ctl := l.txCtl[m*txCtlLen : m*txCtlLen : (m+1)*txCtlLen]
	if s == nil {
		l.setScope(name, &pk.Addr)
		ctl = l.txControl(ctl, &pk.Addr)
	} else if pk.Addr.TrafficClass != 0 {
		// The source is the socket's own: only the TOS goes along.
		var d []byte
		ctl, d = appendCmsg(ctl, unix.IPPROTO_IP, unix.IP_TOS, 1)
		d[0] = pk.Addr.TrafficClass
	}
	if segs > 1 {
		var d []byte
		ctl, d = appendCmsg(ctl, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 2)
		binary.NativeEndian.PutUint16(d, uint16(pk.Len))
	}
	if len(ctl) > 0 {
		h.Control = &ctl[0]
	} else {
		h.Control = nil
	}
	h.SetControllen(len(ctl))
	h.Flags = 0
}

// txKey is what prepareMsg made a message slot's name and control
// messages for.
type txKey struct {
	ok       bool
	src, dst netip.Addr
	tc       uint8
	gso      uint16   // the UDP_SEGMENT size, 0 for none
	sock     *srcSock // the socket (nil: the main one)
}

// sendMsgs sends messages with sendmmsg through s (nil: the main socket),
// waiting for room in the socket's buffer; an error is about the first
// message.
func (l *Link) sendMsgs(s *srcSock, hdrs []unix.Mmsghdr) (int, error) {
	l.txMsgs = hdrs
	t0 := l.turn.start()
	// First on the descriptor itself: most sends find room in the
	// socket's buffer, and rc.Write's way there (the descriptor's lock,
	// the poller's reset, the callback) is nine calls, which in the lab's
	// QEMU VMs cost 15-150 ns each, by how much of the rest of a round trip
	// runs them too (BENCHMARKS.md, "What the VMs charge for"). Only a full
	// buffer (EAGAIN) waits in rc.Write.
	fd, rc := l.fd, l.rc
	if s != nil {
		fd, rc = s.fd, s.rc
	}
	l.fdMu.RLock()
	closed := l.fdClosed
	if !closed {
		l.write(fd)
	}
	l.fdMu.RUnlock()
	var err error
	if closed {
		err = net.ErrClosed
	} else if l.txErrno == unix.EAGAIN {
		err = rc.Write(l.writeFn)
	}
	l.turn.sent(t0)
	l.txMsgs = nil
	if err != nil {
		return 0, net.ErrClosed
	}
	if l.txErrno != 0 {
		return 0, l.txErrno
	}
	return l.txN, nil
}

// write is rawConn.Write's callback for sendMsgs (bound once as writeFn:
// a closure would be allocated on every Send).
func (l *Link) write(fd uintptr) bool {
	for {
		l.txN, l.txErrno = sendmmsg(fd, l.txMsgs)
		if l.txErrno != unix.EINTR {
			return l.txErrno != unix.EAGAIN
		}
	}
}

// resendSingly sends pkts, the packets of a GSO message the kernel
// refused, as single datagrams, each with the ICRC for IPv4 ID 0.
func (l *Link) resendSingly(pkts []link.Packet) (int, error) {
	sent := 0
	var iov unix.Iovec
	var name [unix.SizeofSockaddrInet6]byte
	ctl := make([]byte, 0, txCtlLen)
	for i := range pkts {
		q := &pkts[i]
		start, nlen := l.pseudoHeaders(&l.txPseudo, q, l.cfg.Port, 0)
		putICRC(q.Buf[start:q.Off+q.Len], nlen)
		setIov(&iov, q.Transport())
		ctl = l.txControl(ctl[:0], &q.Addr)
		var m [1]unix.Mmsghdr
		h := &m[0].Hdr
		h.Name, h.Namelen = &name[0], uint32(putSockaddr(name[:], q.Addr.DstGID.As16(), l.cfg.Port, l.v4))
		l.setScope(name[:], &q.Addr)
		h.Iov = &iov
		h.SetIovlen(1)
		h.Control = &ctl[0]
		h.SetControllen(len(ctl))
		k, err := l.sendMsgs(nil, m[:])
		if errors.Is(err, net.ErrClosed) {
			return sent, err
		}
		if err != nil || k != 1 {
			l.stats.TxNoRoute.Add(1)
			continue
		}
		l.stats.TxPackets.Add(1)
		l.stats.TxBytes.Add(uint64(q.Len))
		l.tally(q.Addr.DstGID, 1)
		sent++
	}
	return sent, nil
}

// txControl appends the control messages for a: the source address
// (IPV6_PKTINFO; for IPv4-mapped destinations Linux takes it as IP_PKTINFO)
// and the traffic class (IP_TOS or IPV6_TCLASS).
func (l *Link) txControl(b []byte, a *link.Addr) []byte {
	var d []byte
	if l.v4 {
		// struct in_pktinfo: ifindex, spec_dst (the source to use), addr.
		b, d = appendCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, unix.SizeofInet4Pktinfo)
		s := a.SrcGID.Unmap().As4()
		copy(d[4:8], s[:])
	} else {
		// struct in6_pktinfo: the source address, then the interface.
		b, d = appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, unix.SizeofInet6Pktinfo)
		s := a.SrcGID.As16()
		copy(d[0:16], s[:])
		if l.linkLocal(a) {
			binary.NativeEndian.PutUint32(d[16:20], uint32(l.cfg.Zone))
		}
	}
	if a.TrafficClass != 0 {
		if a.DstGID.Is4In6() {
			b, d = appendCmsg(b, unix.IPPROTO_IP, unix.IP_TOS, 1)
			d[0] = a.TrafficClass
		} else {
			b, d = appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 4)
			binary.NativeEndian.PutUint32(d, uint32(a.TrafficClass))
		}
	}
	return b
}

var errNotPrivileged = errors.New("AF_PACKET needs CAP_NET_RAW (run as root, or without an ifindex for unprivileged mode)")

// linkLocal reports whether a packet to or from a link-local address
// (fe80::/10) is to leave through the link's netdev.
func (l *Link) linkLocal(a *link.Addr) bool {
	return l.cfg.Zone != 0 && !l.v4 && (a.DstGID.IsLinkLocalUnicast() || a.SrcGID.IsLinkLocalUnicast())
}

// setScope puts the netdev's index in a sockaddr_in6 for a link-local
// destination: without it the kernel cannot tell which link fe80::… is on
// (EINVAL, or the wrong interface).
func (l *Link) setScope(name []byte, a *link.Addr) {
	if l.linkLocal(a) && a.DstGID.IsLinkLocalUnicast() {
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&name[0]))
		sa.Scope_id = uint32(l.cfg.Zone)
	}
}
