package host_test

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
)

// TestRouteTo: a device answers rdma_resolve_addr's question from its
// namespace's routing table: the peer on its veth is reached with the
// netdev's address as the source (IPv4 and IPv6), its own address is its
// own source, a destination with no route is ENETUNREACH, and one routed
// through another interface is EHOSTUNREACH naming it.
func TestRouteTo(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	addDevice(t, host.NewRegistry(dir), ha, "rxe0", host.VersionsV2)
	d, err := host.Open("rxe0", host.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []struct{ dst, want netip.Addr }{
		{hb.IPv4, ha.IPv4}, {hb.IPv6, ha.IPv6}, {ha.IPv4, ha.IPv4}, {netip.AddrFrom16(hb.IPv4.As16()), ha.IPv4},
	} {
		if got, err := d.RouteTo(c.dst); err != nil || got != c.want {
			t.Errorf("RouteTo(%v) = %v, %v; want %v", c.dst, got, err, c.want)
		}
	}
	if _, err := d.RouteTo(netip.MustParseAddr("203.0.113.5")); !errors.Is(err, syscall.ENETUNREACH) {
		t.Errorf("RouteTo(an address with no route) = %v, want ENETUNREACH", err)
	}
	err = ha.Do(func() error {
		// Another interface of the namespace: a veth pair inside it (this
		// kernel has no dummy driver). It goes with the namespace.
		la := netlink.NewLinkAttrs()
		la.Name = "other0"
		other := &netlink.Veth{LinkAttrs: la, PeerName: "other1"}
		if err := netlink.LinkAdd(other); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.99.0.1/24")
		if err := netlink.AddrAdd(other, addr); err != nil {
			return err
		}
		return netlink.LinkSetUp(other)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.RouteTo(netip.MustParseAddr("10.99.0.2")); !errors.Is(err, syscall.EHOSTUNREACH) || !strings.Contains(err.Error(), "other0") {
		t.Errorf("RouteTo(an address behind other0) = %v, want EHOSTUNREACH naming other0", err)
	}
}
