package link

import (
	"errors"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// A Multicaster is a link that can take in the packets of a multicast
// group: it joins the group on the network (IGMP for an IPv4 group, MLD
// for an IPv6 one, and the group's MAC on the netdev) and from then on
// delivers packets addressed to the group's GID as it delivers those to
// its own GIDs. The device calls JoinGroup when the first QP attaches to
// a group and LeaveGroup when the last one detaches (rxe does the same in
// rxe_mcast_add / rxe_mcast_del with dev_mc_add / dev_mc_del; the kernel's
// CM sends the IGMP report, cma_igmp_send); a link need not count joins.
type Multicaster interface {
	// JoinGroup joins the group of multicast GID mgid (MulticastGID).
	JoinGroup(mgid netip.Addr) error
	// LeaveGroup leaves it; leaving a group not joined is not an error.
	LeaveGroup(mgid netip.Addr) error
}

// MulticastGID reports whether g is a multicast GID: an IPv6 multicast
// address (ff00::/8, the IBTA's multicast GID prefix too, IBTA Vol 1
// §4.1.1) or the IPv4-mapped form of an IPv4 multicast address
// (::ffff:224.0.0.0/100), the MGID Linux's CM gives an IPv4 group on a
// RoCE v2 port (cma_iboe_set_mgid). rxe_chk_dgid accepts packets to such
// addresses without a GID table entry (rdma_is_multicast_addr).
func MulticastGID(g netip.Addr) bool {
	if g.Is4In6() || g.Is4() {
		return g.Unmap().IsMulticast()
	}
	return g.Is6() && g.IsMulticast()
}

// GroupAddr is the IP group a multicast GID stands for: the IPv4 address
// of an IPv4-mapped MGID, and an IPv6 multicast MGID itself.
func GroupAddr(mgid netip.Addr) netip.Addr { return mgid.Unmap() }

// MulticastMAC is the Ethernet destination of packets to multicast GID
// mgid: for an IPv4 group 01:00:5e and the low 23 bits of the address (RFC
// 1112 §6.4), for an IPv6 one 33:33 and its last 32 bits (RFC 2464 §7), as
// the kernel maps them (ip_eth_mc_map, ipv6_eth_mc_map; rxe through
// rdma_get_mcast_mac). mckey.pcap: 239.1.2.3 goes to 01:00:5e:01:02:03.
// ok is false when mgid is not a multicast GID.
func MulticastMAC(mgid netip.Addr) (mac wire.MAC, ok bool) {
	if !MulticastGID(mgid) {
		return mac, false
	}
	b := mgid.As16()
	if mgid.Is4In6() || mgid.Is4() {
		return wire.MAC{0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]}, true
	}
	return wire.MAC{0x33, 0x33, b[12], b[13], b[14], b[15]}, true
}

// ErrNoMulticast is returned by JoinGroupOf for a link that cannot join
// multicast groups.
var ErrNoMulticast = errors.New("the link does not join multicast groups")

// JoinGroupOf joins mgid on l if l is a Multicaster (decorators forward
// with it), else returns ErrNoMulticast.
func JoinGroupOf(l Link, mgid netip.Addr) error {
	if m, ok := l.(Multicaster); ok {
		return m.JoinGroup(mgid)
	}
	return ErrNoMulticast
}

// LeaveGroupOf leaves mgid on l if l is a Multicaster.
func LeaveGroupOf(l Link, mgid netip.Addr) error {
	if m, ok := l.(Multicaster); ok {
		return m.LeaveGroup(mgid)
	}
	return nil
}
