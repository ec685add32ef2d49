package host

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// RouteTo asks the kernel's routing table in the device's network
// namespace how dst is reached, as Linux's rdma_resolve_addr does: it
// returns the source address the route gives (or, when it names none, the
// netdev's first address of dst's family) if the route leaves through the
// device's netdev. A route through another interface is EHOSTUNREACH
// naming that interface; no route at all is the kernel's error
// (ENETUNREACH). A destination that is the netdev's own address is
// reached through loopback, and is its own source. The answer is the
// device's next-hop resolver's (link/neigh), which the raw link and
// ResolveNextHop share.
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
	hop, err := d.res.Route(dst)
	if err != nil {
		return netip.Addr{}, err
	}
	src := hop.Src
	if !src.IsValid() {
		for _, a := range nd.Addrs {
			if a.Unmap().Is4() == dst.Is4() && !a.IsLinkLocalUnicast() {
				src = a.Unmap()
				break
			}
		}
	}
	if !src.IsValid() {
		return netip.Addr{}, &verbs.Error{Op: "route", Device: d.Def.Name, Err: syscall.EADDRNOTAVAIL,
			Detail: fmt.Sprintf("%s has no address to reach %v from", nd.Name, dst)}
	}
	return src, nil
}

// ResolveNextHop is rdma_resolve_addr's second step (addr_resolve_neigh in
// the kernel): the MAC of the next hop toward dst — the route's gateway, or
// dst itself on-link — asked for until ctx ends. It returns the gateway
// (invalid when dst is on-link). A next hop that never answers is a
// neigh.Error (ETIMEDOUT) naming the route: "198.18.2.1 is reached via
// 198.18.1.254 on rt-a0: no ARP reply from 198.18.1.254".
func (d *Device) ResolveNextHop(ctx context.Context, dst netip.Addr) (gateway netip.Addr, err error) {
	hop, err := d.res.Resolve(ctx, dst)
	return hop.Gateway, err
}

// PathError says why packets of version v to dst could not be sent, as the
// device's next-hop resolver knows it, or nil (see neigh.Resolver.PathError).
func (d *Device) PathError(dst netip.Addr, v wire.Version) error { return d.res.PathError(dst, v) }
