package udp

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSendAfterCloseNotOnReusedFD: sendMsgs tries the socket's descriptor
// number before rc.Write; once Close has run, the number may already be
// another socket's. A send then must fail with net.ErrClosed and reach
// nobody, not leave through the new socket: here a socket made after the
// Close takes the same number and waits for a datagram addressed to
// itself.
func TestSendAfterCloseNotOnReusedFD(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	l, err := New(Config{Bind: lo, Port: freeUDPPort(t), Addrs: []netip.Addr{lo}})
	if err != nil {
		t.Fatal(err)
	}
	old := int(l.fd)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel hands out the lowest free number: open sockets until
	// one has the closed socket's, keeping the rest open meanwhile.
	var held []int
	defer func() {
		for _, fd := range held {
			unix.Close(fd)
		}
	}()
	reused := -1
	for range 1024 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, fd)
		if fd == old {
			reused = fd
			break
		}
	}
	if reused < 0 {
		t.Fatalf("no new socket got descriptor %d", old)
	}
	if err := unix.Bind(reused, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(reused)
	if err != nil {
		t.Fatal(err)
	}
	to := unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: [4]byte{127, 0, 0, 1}}
	port := sa.(*unix.SockaddrInet4).Port
	to.Port = uint16(port>>8) | uint16(port&0xFF)<<8 // network order
	payload := []byte("after close")
	var iov unix.Iovec
	setIov(&iov, payload)
	m := make([]unix.Mmsghdr, 1)
	m[0].Hdr.Name, m[0].Hdr.Namelen = (*byte)(unsafe.Pointer(&to)), unix.SizeofSockaddrInet4
	m[0].Hdr.Iov, m[0].Hdr.Iovlen = &iov, 1
	l.txMu.Lock()
	n, err := l.sendMsgs(nil, m)
	l.txMu.Unlock()
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("a send after Close: %d sent, error %v; want net.ErrClosed", n, err)
	}
	buf := make([]byte, 64)
	if k, _, err := unix.Recvfrom(reused, buf, 0); err == nil {
		t.Errorf("the socket that took the closed one's descriptor received %q", buf[:k])
	}
}

// freeUDPPort returns a UDP port no socket on 127.0.0.1 has at the time.
func freeUDPPort(t *testing.T) uint16 {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}
