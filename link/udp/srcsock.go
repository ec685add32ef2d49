package udp

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pktring"
)

// Source sockets. The dual-stack socket on port 4791 sends every packet
// with its source in an IPV6_PKTINFO control message, to an IPv4-mapped
// sockaddr_in6 that the kernel turns into udp_sendmsg's IPv4 case; for
// each of the local IPv4 addresses it was given, a link also opens an
// AF_INET socket bound to that address (and a port of the kernel's
// choosing), and sends the unicast packets from that address through it,
// with no PKTINFO and a sockaddr_in: a shorter way through the kernel
// (no IPv6 entry point, no control message to parse for the source). In
// the lab's QEMU (TCG) guests a sendmsg of an 80- and a 20-byte GSO
// message took 3.5-5.8 µs less at the first quartile that way, in each of
// four runs of 2,000 of each kind interleaved (BENCHMARKS.md, "Source
// sockets"); each side of a latency test sends once a round trip.
//
// The socket stays unconnected, like the main one: a connected socket's
// IPv4 Identification is a per-socket counter from a random start
// (ip_select_ident_segs), which the ICRC covers and the link could not
// predict; unconnected with DF, the kernel writes 0 as before. Its
// packets leave from its port, not 4791 (receivers ignore the source
// port: rxe, and this package); the ICRC covers the port, so the header
// cache (pseudoCache) is built with it. Nothing is sent to that port,
// and a filter drops whatever comes. The sockets are opened by New, in
// the namespace New runs in: an address added later (SetAddrs) sends
// through the main socket, as every IPv6 or multicast packet does.

// maxSrcSocks bounds the source sockets a link opens.
const maxSrcSocks = 8

// srcSock is a socket bound to one local IPv4 address.
type srcSock struct {
	addr  netip.Addr // the source, IPv4-mapped as link.Addr's GIDs are
	conn  *net.UDPConn
	rc    syscall.RawConn
	fd    uintptr
	sport uint16
}

// openSrcSocks opens a source socket for each IPv4 unicast address of
// addrs (up to maxSrcSocks) with the main socket's options for sending
// (DF, the UDP checksum as noCheck says, the send buffer). An address the
// kernel will not bind (not local any more) gets none: its packets go
// through the main socket.
func openSrcSocks(addrs []netip.Addr, noCheck int) ([]*srcSock, error) {
	var socks []*srcSock
	for _, a := range addrs {
		a4 := a.Unmap()
		if !a4.Is4() || a4.IsUnspecified() || a4.IsMulticast() || len(socks) == maxSrcSocks || hasSrc(socks, a4) {
			continue
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: a4.AsSlice()})
		if err != nil {
			continue
		}
		s := &srcSock{addr: netip.AddrFrom16(a4.As16()), conn: c, sport: uint16(c.LocalAddr().(*net.UDPAddr).Port)}
		if err := s.setup(noCheck); err != nil {
			c.Close()
			closeSrcSocks(socks)
			return nil, err
		}
		socks = append(socks, s)
	}
	return socks, nil
}

func hasSrc(socks []*srcSock, a4 netip.Addr) bool {
	for _, s := range socks {
		if s.addr.Unmap() == a4 {
			return true
		}
	}
	return false
}

func (s *srcSock) setup(noCheck int) error {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return err
	}
	s.rc = rc
	o := sockOpts{prefix: fmt.Sprintf("source socket %v: ", s.addr.Unmap())}
	err = rc.Control(func(fd uintptr) {
		s.fd = fd
		o.f = int(fd)
		o.set(unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER")
		o.set(unix.SOL_SOCKET, unix.SO_NO_CHECK, noCheck, "SO_NO_CHECK")
		o.buf(unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF")
		if o.err == nil {
			if e := pktring.Attach(o.f, pktring.DropAll()); e != nil {
				o.err = fmt.Errorf("%sdrop filter: %w", o.prefix, e)
			}
		}
	})
	if err != nil {
		return err
	}
	return o.err
}

func closeSrcSocks(socks []*srcSock) {
	for _, s := range socks {
		s.conn.Close()
	}
}

// sockFor returns the source socket a packet with addresses a leaves
// through, nil for the main socket: a unicast IPv4 packet from an address
// with a source socket. Called with txMu held (srcs does not change after
// New).
func (l *Link) sockFor(a *link.Addr) *srcSock {
	if len(l.srcs) == 0 || !a.DstGID.Is4In6() || a.DstGID.Unmap().IsMulticast() || l.mainOnly {
		return nil
	}
	for _, s := range l.srcs {
		if s.addr == a.SrcGID {
			return s
		}
	}
	return nil
}

// sportOf is the UDP source port of packets sent through s.
func (l *Link) sportOf(s *srcSock) uint16 {
	if s == nil {
		return l.cfg.Port
	}
	return s.sport
}
