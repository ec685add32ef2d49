package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

func unsafePointer(b *byte) unsafe.Pointer { return unsafe.Pointer(b) }

// rawRecv reads RoCE v2 packets, IP header included, from a netdev with an
// AF_PACKET socket (cooked mode: the data starts at the IP header).
type rawRecv struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// roceFilter accepts IPv4 and IPv6 UDP datagrams to port (and not IPv4
// fragments after the first), so the socket copies nothing else.
func roceFilter(port uint16) ([]bpf.RawInstruction, error) {
	return bpf.Assemble(roceFilterProg(port))
}

// roceFilterProg is the filter over a cooked packet (the data starts at the
// IP header). The jumps are counted by hand: raw_test.go runs the program
// in x/net/bpf's VM over real packets.
func roceFilterProg(port uint16) []bpf.Instruction {
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 0, Size: 1},
		/* 1 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xF0},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 7}, // IPv4, else 10
		/* 3 */ bpf.LoadAbsolute{Off: 9, Size: 1}, // protocol
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 11},
		/* 5 */ bpf.LoadAbsolute{Off: 6, Size: 2}, // flags + fragment offset
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1FFF, SkipTrue: 9}, // a later fragment
		/* 7 */ bpf.LoadMemShift{Off: 0}, // X = IHL*4
		/* 8 */ bpf.LoadIndirect{Off: 2, Size: 2}, // UDP destination port
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipTrue: 5, SkipFalse: 6},
		/* 10 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0x60, SkipTrue: 5},
		/* 11 */ bpf.LoadAbsolute{Off: 6, Size: 1}, // IPv6 next header
		/* 12 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 3},
		/* 13 */ bpf.LoadAbsolute{Off: 42, Size: 2}, // UDP destination port
		/* 14 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipFalse: 1},
		/* 15 */ bpf.RetConstant{Val: 0x40000},
		/* 16 */ bpf.RetConstant{Val: 0},
	}
}

func attachFilter(fd int, prog []bpf.RawInstruction) error {
	p := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &p)
}

func newRawRecv(ifindex int, port uint16) (*rawRecv, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		if errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("%w: %v", errNotPrivileged, err)
		}
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	prog, err := roceFilter(port)
	if err == nil {
		err = attachFilter(fd, prog)
	}
	if err == nil {
		// Our own transmissions would otherwise come back (Linux ≥ 4.20).
		_ = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
		err = unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex})
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("AF_PACKET on ifindex %d: %w", ifindex, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("af_packet:%d", ifindex))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &rawRecv{f: f, rc: rc}, nil
}

func (r *rawRecv) close() {
	r.closed.Store(true)
	r.f.Close()
}

// dropAll attaches a filter that drops every datagram to the UDP socket:
// in privileged mode it only holds the port.
func dropAll(c *net.UDPConn) error {
	prog, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = attachFilter(int(fd), prog) }); err != nil {
		return err
	}
	return ferr
}

// recv reads at least one packet for this host, verifying ICRCs over the
// real headers.
func (r *rawRecv) recv(l *Link, pkts []link.Packet) (int, error) {
	got := 0
	var rerr error
	err := r.rc.Read(func(fd uintptr) bool {
		for got < len(pkts) {
			pk := &pkts[got]
			b := pk.Buf[:cap(pk.Buf)]
			// Read at the start of the headroom's end minus the largest IP+UDP header,
			// so the transport packet lands at a known offset after parsing.
			n, from, err := unix.Recvfrom(int(fd), b[link.FrameHeadroom-wire.IPv6Len-wire.UDPLen:], unix.MSG_TRUNC)
			if err != nil {
				if err == unix.EAGAIN || err == unix.EWOULDBLOCK {
					return got > 0
				}
				if err == unix.EINTR {
					continue
				}
				rerr = err
				return true
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype != unix.PACKET_HOST {
				continue // another host's traffic (a promiscuous bridge), or our own
			}
			start := link.FrameHeadroom - wire.IPv6Len - wire.UDPLen
			if n > len(b)-start {
				l.stats.RxMalformed.Add(1) // truncated by our buffer
				continue
			}
			if l.acceptRaw(pk, b[start:start+n]) {
				got++
			}
		}
		return true
	})
	if err != nil {
		if r.closed.Load() || errors.Is(err, os.ErrClosed) {
			return got, net.ErrClosed // rawConn.Read reports "use of closed file"
		}
		return got, err
	}
	if rerr != nil {
		return got, rerr
	}
	return got, nil
}

// acceptRaw checks one IP packet and points pk at its transport packet.
func (l *Link) acceptRaw(pk *link.Packet, ip []byte) bool {
	p := &l.rxPkt
	if err := p.ParseIP(ip, l.cfg.Port); err != nil {
		if !errors.Is(err, wire.ErrNotRoCE) {
			l.stats.RxMalformed.Add(1)
		}
		return false
	}
	a := link.Addr{Version: wire.RoCEv2, UDPSrcPort: p.UDP().SrcPort()}
	if h := p.IPv4(); h != nil {
		a.SrcGID, a.DstGID = netip.AddrFrom16(h.Src().As16()), netip.AddrFrom16(h.Dst().As16())
		a.TrafficClass, a.HopLimit = h.TOS(), h.TTL()
	} else {
		h := p.IPv6()
		a.SrcGID, a.DstGID = h.Src(), h.Dst()
		a.TrafficClass, a.FlowLabel, a.HopLimit = h.TrafficClass(), h.FlowLabel(), h.HopLimit()
	}
	if !l.isLocal(a.DstGID) {
		l.stats.RxNotForUs.Add(1)
		return false
	}
	if err := p.VerifyICRC(); err != nil {
		l.stats.RxBadICRC.Add(1)
		return false
	}
	t := p.Transport()
	pk.Off = cap(pk.Buf[:0]) - cap(t)
	pk.Len = len(t)
	pk.Buf = pk.Buf[:pk.Off+pk.Len]
	pk.Addr = a
	l.stats.RxPackets.Add(1)
	l.stats.RxBytes.Add(uint64(len(ip)))
	return true
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
