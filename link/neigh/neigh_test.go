package neigh

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/wire"
)

func TestEUI64(t *testing.T) {
	m, ok := eui64MAC(netip.MustParseAddr("fe80::5054:ff:fec0:20b"))
	if !ok || m != (wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}) {
		t.Errorf("eui64MAC = %v %v", m, ok)
	}
	if _, ok := eui64MAC(netip.MustParseAddr("fe80::1")); ok {
		t.Error("fe80::1 taken for an EUI-64 address")
	}
}

// TestErrorMessages pins each reason's wording and errno: the words users
// read in rdma_cm's ADDR_ERROR, a QP's retry-exceeded Detail and the link's
// counters' explanation.
func TestErrorMessages(t *testing.T) {
	a := netip.MustParseAddr
	for _, c := range []struct {
		err   *Error
		want  string
		errno syscall.Errno
	}{
		{&Error{Reason: NoReply, Dst: a("198.18.2.1"), Gateway: a("198.18.1.254"), Netdev: "rt-a0", Errno: syscall.ETIMEDOUT},
			"198.18.2.1 is reached via 198.18.1.254 on rt-a0: no ARP reply from 198.18.1.254", syscall.ETIMEDOUT},
		{&Error{Reason: NoReply, Dst: a("198.18.2.1"), Gateway: a("198.18.1.254"), Netdev: "rt-a0", Waited: 2 * time.Second, Errno: syscall.ETIMEDOUT},
			"198.18.2.1 is reached via 198.18.1.254 on rt-a0: no ARP reply from 198.18.1.254 in 2s", syscall.ETIMEDOUT},
		{&Error{Reason: NoReply, Dst: a("fd00:2::1"), Gateway: a("fe80::1"), Netdev: "rt-a0", Errno: syscall.ETIMEDOUT},
			"fd00:2::1 is reached via fe80::1 on rt-a0: no Neighbor Advertisement from fe80::1", syscall.ETIMEDOUT},
		{&Error{Reason: NoReply, Dst: a("198.18.0.9"), Netdev: "veth0", Errno: syscall.ETIMEDOUT},
			"198.18.0.9 is on-link on veth0: no ARP reply from 198.18.0.9", syscall.ETIMEDOUT},
		{&Error{Reason: OtherNetdev, Dst: a("10.99.0.2"), Netdev: "veth0", Other: "other0", Errno: syscall.EHOSTUNREACH},
			"the route to 10.99.0.2 leaves through other0, not veth0", syscall.EHOSTUNREACH},
		{&Error{Reason: NoRoute, Dst: a("203.0.113.5"), Netdev: "veth0", Errno: syscall.ENETUNREACH},
			"no route to 203.0.113.5 in veth0's namespace: network is unreachable", syscall.ENETUNREACH},
		{&Error{Reason: V1OffLink, Dst: a("198.18.2.1"), Gateway: a("198.18.1.254"), Netdev: "rt-a0", Errno: syscall.ENETUNREACH},
			"198.18.2.1 is reached via 198.18.1.254 on rt-a0, but RoCE v1 (Ethertype 0x8915) stays on one Ethernet segment: " +
				"no router forwards it; reach 198.18.2.1 with RoCE v2 (a RoCE v2 GID, or roce mode -m 2 for RDMA CM)", syscall.ENETUNREACH},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
		if !errors.Is(c.err, c.errno) {
			t.Errorf("%q does not unwrap to %v", c.want, c.errno)
		}
	}
}
