package udp

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The data path calls sendmmsg(2) and recvmmsg(2) itself, on message
// headers it keeps from call to call: x/net's batch I/O allocates a
// net.UDPAddr per received datagram and cannot describe a datagram spread
// over several buffers, which GSO sends and GRO receives need.

// Both calls pass MSG_DONTWAIT, so neither blocks. With one P
// (GOMAXPROCS 1, as on a one-CPU machine) they are raw system calls: the
// goroutine does not tell the scheduler it enters a system call
// (entersyscall), which would let sysmon take its P away for another
// thread once the call has lasted a sysmon tick (20 µs at first). In the
// lab's VMs (QEMU TCG, one vCPU) most of these calls last longer than
// that, so nearly every one handed the P off: another thread woken
// (futex) to look for work there is none of, on the same CPU, and the
// caller's way back through exitsyscall's slow path; the CPU profiles in
// the VMs showed runtime.futex, findRunnable and exitsyscall at 5-15% of
// the samples (BENCHMARKS.md, "Where goroce's time goes inside the
// VMs"). With more Ps the hand-off lets the peer's goroutines run on
// another CPU while a long sendmmsg delivers to it (a veth runs the
// receiver's softirq inside the sender's call): raw calls there made the
// 64-byte round trip waiting in PollWait slower in 5 of 6 paired rounds
// (median 1.12×), so they stay ordinary system calls. The netpoller's
// waits, which do block, are RawConn.Read and Write's either way.
func sendmmsg(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	return mmsg(unix.SYS_SENDMMSG, fd, hdrs)
}

// mmsg makes system call trap, sendmmsg or recvmmsg, on hdrs without
// waiting: raw or not as rawMmsg says (see sendmmsg).
func mmsg(trap, fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	var n uintptr
	var e unix.Errno
	if rawMmsg.Load() {
		n, _, e = unix.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	} else {
		n, _, e = unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&hdrs[0])), uintptr(len(hdrs)), unix.MSG_DONTWAIT, 0, 0)
	}
	return int(n), e
}

// rawMmsg: sendmmsg and recvmmsg are raw system calls. New sets it from
// GOMAXPROCS at the time (1: raw).
var rawMmsg atomic.Bool

// recvmmsg is a variable so tests can make the kernel refuse a packet.
var recvmmsg = recvmmsgSyscall

func recvmmsgSyscall(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
	return mmsg(unix.SYS_RECVMMSG, fd, hdrs)
}

func setIov(v *unix.Iovec, b []byte) {
	if len(b) == 0 {
		v.Base, v.Len = nil, 0
		return
	}
	v.Base = &b[0]
	v.SetLen(len(b))
}

// appendCmsg appends a control message of n data bytes and returns the
// buffer and the data to fill.
func appendCmsg(b []byte, level, typ, n int) ([]byte, []byte) {
	off := len(b)
	space := unix.CmsgSpace(n)
	b = append(b, zeros[:space]...) // b's capacity is preallocated: no allocation
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[off]))
	h.Level, h.Type = int32(level), int32(typ)
	h.SetLen(unix.CmsgLen(n))
	return b, b[off+unix.CmsgLen(0) : off+unix.CmsgLen(n)]
}

// putSockaddr writes the socket address of ip:port into b (at least
// SizeofSockaddrInet6 bytes) and returns its length: a sockaddr_in6 with
// an IPv4-mapped address on a dual-stack socket, a sockaddr_in on an
// IPv4 socket.
func putSockaddr(b []byte, ip [16]byte, port uint16, v4sock bool) int {
	clear(b[:unix.SizeofSockaddrInet6])
	if v4sock {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b[0]))
		sa.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
		copy(sa.Addr[:], ip[12:])
		return unix.SizeofSockaddrInet4
	}
	sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(&b[0]))
	sa.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], port)
	sa.Addr = ip
	return unix.SizeofSockaddrInet6
}

// parseSockaddr reads the address and port of a sockaddr_in or sockaddr_in6
// as an IPv6 (or IPv4-mapped) address.
func parseSockaddr(b []byte) (ip [16]byte, port uint16, ok bool) {
	if len(b) < 2 {
		return ip, 0, false
	}
	switch binary.NativeEndian.Uint16(b) {
	case unix.AF_INET:
		if len(b) < unix.SizeofSockaddrInet4 {
			return ip, 0, false
		}
		ip[10], ip[11] = 0xff, 0xff
		copy(ip[12:], b[4:8])
		return ip, binary.BigEndian.Uint16(b[2:]), true
	case unix.AF_INET6:
		if len(b) < unix.SizeofSockaddrInet6 {
			return ip, 0, false
		}
		copy(ip[:], b[8:24])
		return ip, binary.BigEndian.Uint16(b[2:]), true
	}
	return ip, 0, false
}
