package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link/pktring"
	"github.com/goroce/goroce/link/xsk"
)

// rxRing reads the UDP datagrams to one port from an AF_PACKET socket's
// receive ring (PACKET_RX_RING), as goroce's privileged link does: an empty
// look is a load from memory, not a recvfrom(2) that finds nothing. Under
// TCG every system call costs the emulated CPU much, and a busy poll that
// makes one per look is no floor under one that makes none. The UDP socket
// bound to the port stays, for sending and so that the kernel does not
// answer the datagrams with ICMP; a filter drops what reaches it.
type rxRing struct {
	fd    int
	ring  frames
	xs    *xsk.Socket // -rx xdp: the AF_XDP socket ring reads (fd its descriptor)
	cur   int32
	from4 unix.SockaddrInet4 // the last datagram's sender, reused
	from6 unix.SockaddrInet6
	turn  turnSplit // empty but with the goroce_turn build tag (turn_on.go)
}

// frames is what next reads: an AF_PACKET socket's ring (*pktring.Ring)
// or an AF_XDP socket's (*xsk.Socket, which writes a TPACKET_V2 frame's
// headers into each frame it hands over), as goroce's link reads them.
type frames interface {
	Head() int32
	Status(i int32) uint32
	Frame(i int32) ([]byte, *unix.Tpacket2Hdr)
	Release(i int32)
	Unmap()
}

// newRxXSK is newRxRing with an AF_XDP socket and its XDP program on the
// netdev (link/xsk), as goroce's rx-path xdp: the datagrams to local's
// port skip the kernel's receive path.
func newRxXSK(udp int, local netip.AddrPort) (*rxRing, error) {
	ifindex, err := ifindexOf(local.Addr())
	if err != nil {
		return nil, err
	}
	s, err := xsk.Open(ifindex, local.Port(), 0)
	if err != nil {
		return nil, err
	}
	r := &rxRing{fd: s.Fd(), ring: s, xs: s}
	if err := pktring.Attach(udp, pktring.DropAll()); err != nil {
		r.close()
		return nil, fmt.Errorf("the UDP socket's filter: %w", err)
	}
	return r, nil
}

// ringFrame holds a whole 64-byte SEND and its headers (-lat's packets).
const ringFrame = 2048

// newRxRing opens the ring on the netdev that holds local's address, for
// the datagrams to local's port, and makes udp (bound to local) drop what
// it receives.
func newRxRing(udp int, local netip.AddrPort) (*rxRing, error) {
	ifindex, err := ifindexOf(local.Addr())
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket (root only): %w", err)
	}
	r := &rxRing{fd: fd}
	var g *pktring.Ring
	fail := func(err error) (*rxRing, error) { unix.Close(fd); return nil, err }
	if err := pktring.Attach(fd, pktring.UDPPortFilter(local.Port())); err != nil {
		return fail(fmt.Errorf("the ring's filter: %w", err))
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	if g, err = pktring.Setup(fd, ringFrame, 1<<20); err != nil {
		return fail(fmt.Errorf("PACKET_RX_RING: %w", err))
	}
	r.ring = g
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		r.close()
		return nil, err
	}
	if err := pktring.Attach(udp, pktring.DropAll()); err != nil {
		r.close()
		return nil, fmt.Errorf("the UDP socket's filter: %w", err)
	}
	return r, nil
}

func (r *rxRing) close() {
	r.turn.flush()
	if r.xs != nil {
		r.xs.Detach()
	}
	unix.Close(r.fd)
	r.ring.Unmap()
}

// next spins on the ring's head frame until it holds a datagram for the
// port and returns its UDP payload and its sender.
func (r *rxRing) next(stop *atomic.Bool) ([]byte, unix.Sockaddr, error) {
	for polls := 1; ; polls++ {
		i := r.ring.Head()
		if r.ring.Status(i)&unix.TP_STATUS_USER == 0 {
			if polls%yieldEvery == 0 {
				if stop != nil && stop.Load() {
					return nil, nil, errStopped
				}
				runtime.Gosched()
			}
			continue
		}
		r.cur = i
		f, h := r.ring.Frame(i)
		b, whole := pktring.Data(f, h, 0)
		if d, from := r.udpPayload(b); whole && d != nil {
			if len(d) != ackLen {
				r.turn.seen(h.Sec, h.Nsec) // a message, not an ACK
			}
			return d, from, nil
		}
		r.ring.Release(i) // not ours after all (the filter lets only ours in)
	}
}

func (r *rxRing) done() { r.ring.Release(r.cur) }

// udpPayload parses an Ethernet frame of an IPv4 (no options needed) or
// IPv6 UDP datagram: its payload and its sender (r's, until the next);
// nil if it is neither.
func (r *rxRing) udpPayload(b []byte) ([]byte, unix.Sockaddr) {
	if len(b) < 14 {
		return nil, nil
	}
	ip := b[14:]
	var udp []byte
	var from unix.Sockaddr
	switch binary.BigEndian.Uint16(b[12:]) {
	case unix.ETH_P_IP:
		if len(ip) < 20 || ip[9] != unix.IPPROTO_UDP || len(ip) < int(ip[0]&0xf)*4+8 {
			return nil, nil
		}
		udp = ip[int(ip[0]&0xf)*4:]
		r.from4 = unix.SockaddrInet4{Addr: [4]byte(ip[12:16]), Port: int(binary.BigEndian.Uint16(udp))}
		from = &r.from4
	case unix.ETH_P_IPV6:
		if len(ip) < 48 || ip[6] != unix.IPPROTO_UDP {
			return nil, nil
		}
		udp = ip[40:]
		r.from6 = unix.SockaddrInet6{Addr: [16]byte(ip[8:24]), Port: int(binary.BigEndian.Uint16(udp))}
		from = &r.from6
	default:
		return nil, nil
	}
	n := int(binary.BigEndian.Uint16(udp[4:]))
	if n < 8 || n > len(udp) {
		return nil, nil
	}
	return udp[8:n], from
}

// ifindexOf is the netdev with address a.
func ifindexOf(a netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, x := range addrs {
			if p, err := netip.ParsePrefix(x.String()); err == nil && p.Addr() == a.Unmap() {
				return ifc.Index, nil
			}
		}
	}
	return 0, errors.New("no netdev has " + a.String())
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// localOf is the address fd is bound to.
func localOf(fd int) (netip.AddrPort, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}, err
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), nil
	}
	return netip.AddrPort{}, fmt.Errorf("socket address %v", sa)
}

// sourceFor is the source address the kernel's route to dst gives (a
// connected socket's, read and closed), port 0.
func sourceFor(dst netip.AddrPort) (netip.AddrPort, error) {
	fam := unix.AF_INET
	if !dst.Addr().Unmap().Is4() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer unix.Close(fd)
	if err := unix.Connect(fd, sockaddr(dst)); err != nil {
		return netip.AddrPort{}, err
	}
	a, err := localOf(fd)
	return netip.AddrPortFrom(a.Addr(), 0), err
}
