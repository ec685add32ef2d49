package udp

import (
	"net"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMmsgCallsStayInGo: sendmmsg and recvmmsg pass MSG_DONTWAIT and are
// raw system calls, so the goroutine making them never shows as "in a
// system call" to the scheduler (which would let sysmon hand its P to
// another thread: on the lab VMs' one vCPU, a futex wake-up and a thread
// switch for most calls). While this goroutine sends datagrams to itself
// and reads them back, and reads an empty socket, another samples
// /sched/goroutines/not-in-go (goroutines in a system call, read from
// the scheduler's state) and must never see one. With Syscall6 it sees
// one within the first few calls.
func TestMmsgCallsStayInGo(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	defer rawMmsg.Store(rawMmsg.Load())
	rawMmsg.Store(true) // as New sets it with one P; the sampler needs a second
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	if err := rc.Control(func(f uintptr) { fd = f }); err != nil {
		t.Fatal(err)
	}
	self := c.LocalAddr().(*net.UDPAddr)
	var name unix.RawSockaddrInet4
	name.Family = unix.AF_INET
	name.Port = uint16(self.Port>>8) | uint16(self.Port&0xff)<<8 // network order
	copy(name.Addr[:], self.IP.To4())
	out, in := []byte("goroce"), make([]byte, 64)
	var tx, rx [1]unix.Mmsghdr
	var txv, rxv unix.Iovec
	setIov(&txv, out)
	setIov(&rxv, in)
	tx[0].Hdr.Name, tx[0].Hdr.Namelen = (*byte)(unsafe.Pointer(&name)), unix.SizeofSockaddrInet4
	tx[0].Hdr.Iov, tx[0].Hdr.Iovlen = &txv, 1
	rx[0].Hdr.Iov, rx[0].Hdr.Iovlen = &rxv, 1

	var stop, seen atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/sched/goroutines/not-in-go:goroutines"}}
		for !stop.Load() {
			metrics.Read(s)
			if s[0].Value.Kind() == metrics.KindUint64 && s[0].Value.Uint64() > 0 {
				seen.Store(true)
			}
		}
	})
	const rounds = 20000
	got := 0
	for i := 0; i < rounds && !seen.Load(); i++ {
		if n, e := sendmmsg(fd, tx[:]); n != 1 || e != 0 {
			t.Fatalf("sendmmsg to itself: %d, %v", n, e)
		}
		if n, e := recvmmsgSyscall(fd, rx[:]); n == 1 && e == 0 && string(in[:rx[0].Len]) == "goroce" {
			got++
		}
		if n, e := recvmmsgSyscall(fd, rx[:]); n != -1 || e != unix.EAGAIN {
			t.Fatalf("recvmmsg of an empty socket: %d, %v; want -1, EAGAIN", n, e)
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen.Load() {
		t.Fatalf("a goroutine was seen in a system call while only sendmmsg and recvmmsg ran (after %d datagrams): they must be raw system calls", got)
	}
	if got == 0 {
		t.Fatal("no datagram came back")
	}
}

// TestMmsgRawWithOneP: a link opened with one P makes sendmmsg and
// recvmmsg raw system calls, and one opened with more makes them ordinary
// ones (with more Ps the hand-off lets other goroutines run meanwhile).
func TestMmsgRawWithOneP(t *testing.T) {
	defer rawMmsg.Store(rawMmsg.Load())
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		l, err := New(Config{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.97")}}) // an address no other test binds
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if got := rawMmsg.Load(); got != (procs == 1) {
			t.Errorf("GOMAXPROCS %d: raw system calls %v, want %v", procs, got, procs == 1)
		}
	}
}
