package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteTo asks the kernel's routing table in the device's network
// namespace how dst is reached, as Linux's rdma_resolve_addr does: it
// returns the source address the route gives (or, when it names none, the
// netdev's first address of dst's family) if the route leaves through the
// device's netdev. A route through another interface is EHOSTUNREACH
// naming that interface; no route at all is the kernel's error
// (ENETUNREACH). A destination that is the netdev's own address is
// reached through loopback, and is its own source.
func (d *Device) RouteTo(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap()
	d.mu.Lock()
	nd := d.Netdev
	d.mu.Unlock()
	for _, a := range nd.Addrs {
		if a.Unmap() == dst {
			return dst, nil
		}
	}
	var src netip.Addr
	err := InNetns(d.Def.Netns, func() error {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer nl.Close()
		routes, err := nl.RouteGet(net.IP(dst.AsSlice()))
		if err != nil {
			return err
		}
		if len(routes) == 0 {
			return syscall.ENETUNREACH
		}
		r := routes[0]
		if r.LinkIndex != nd.Index {
			name := fmt.Sprintf("ifindex %d", r.LinkIndex)
			if l, err := nl.LinkByIndex(r.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			return fmt.Errorf("the route to %v leaves through %s, not %s: %w", dst, name, nd.Name, syscall.EHOSTUNREACH)
		}
		if s, ok := netip.AddrFromSlice(r.Src); ok {
			src = s.Unmap()
		}
		return nil
	})
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) && err == error(errno) {
			err = fmt.Errorf("no route to %v in %s's namespace: %w", dst, nd.Name, errno)
		}
		return netip.Addr{}, err
	}
	if !src.IsValid() {
		for _, a := range nd.Addrs {
			if a.Unmap().Is4() == dst.Is4() && !a.IsLinkLocalUnicast() {
				src = a.Unmap()
				break
			}
		}
	}
	if !src.IsValid() {
		return netip.Addr{}, fmt.Errorf("%s has no address to reach %v from: %w", nd.Name, dst, syscall.EADDRNOTAVAIL)
	}
	return src, nil
}
