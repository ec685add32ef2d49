package udp

import (
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestKernelRefusedGRO: on Linux 6.1 an AF_PACKET socket with
// PACKET_VNET_HDR answers recvmmsg with EINVAL (and drops the packet) for a
// UDP GRO superpacket; it used to end the device's receive path. Here the
// kernel's refusal is simulated once: Recv counts it, turns UDP_GRO off on
// the port-holding socket, and goes on receiving.
//
// The links read with recvmmsg, not from their rings: a ring takes only
// superpackets (too long for its frames) through recvmmsg, and
// TestRingKernelRefused covers that path.
func TestKernelRefusedGRO(t *testing.T) {
	noRing = true
	t.Cleanup(func() { noRing = false })
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	a, b := openOn(t, ha, true), openOn(t, hb, true)
	var refused atomic.Int32
	real := recvmmsg
	recvmmsg = func(fd uintptr, hdrs []unix.Mmsghdr) (int, unix.Errno) {
		if refused.Add(1) == 1 {
			return -1, unix.EINVAL
		}
		return real(fd, hdrs)
	}
	t.Cleanup(func() { recvmmsg = real })
	gro := func() int {
		v := -1
		b.rc.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO) })
		return v
	}
	if g := gro(); g != 1 {
		t.Fatalf("UDP_GRO %d before, want 1", g)
	}
	pk := linktest.TransportPacket(a.Headroom(), 0x11, 5, []byte("after the refusal"))
	pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()),
		HopLimit: 64, UDPSrcPort: wire.UDSport(2)}
	if n, err := a.Send([]link.Packet{pk}); err != nil || n != 1 {
		t.Fatalf("Send: %d, %v", n, err)
	}
	bufs := linktest.NewBuffers(b.BatchSize())
	n, err := b.Recv(bufs)
	if err != nil || n != 1 {
		t.Fatalf("Recv after a refusal: %d, %v", n, err)
	}
	if got := b.Stats().RxKernelRefused.Load(); got != 1 {
		t.Errorf("rx_drop_kernel_refused %d, want 1", got)
	}
	if g := gro(); g != 0 {
		t.Errorf("UDP_GRO %d after the refusal, want 0", g)
	}
}
