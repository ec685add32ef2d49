package udp

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
)

// mcastState is the multicast groups the link has joined.
type mcastState struct {
	mu     sync.Mutex                          // serializes joins and leaves
	groups atomic.Pointer[map[netip.Addr]bool] // read on the receive path
}

var _ link.Multicaster = (*Link)(nil)

// joined reports whether the link has joined the group of multicast GID a.
func (l *Link) joined(a netip.Addr) bool {
	m := l.mc.groups.Load()
	return m != nil && (*m)[a]
}

// JoinGroup joins the IP group of multicast GID mgid on the link's socket
// (IP_ADD_MEMBERSHIP or IPV6_JOIN_GROUP on the netdev, Config.Zone): the
// kernel sends the IGMP or MLD report and adds the group's MAC to the
// netdev, and the socket (or, privileged, the AF_PACKET socket on the
// netdev) receives the group's RoCE packets, which the link then delivers
// as addressed to a GID of its own. Linux's CM joins the same way for RoCE
// v2 (cma_iboe_join_multicast → cma_igmp_send → ip_mc_inc_group).
func (l *Link) JoinGroup(mgid netip.Addr) error { return l.membership(mgid, true) }

// LeaveGroup leaves it (IGMP/MLD leave report).
func (l *Link) LeaveGroup(mgid netip.Addr) error { return l.membership(mgid, false) }

func (l *Link) membership(mgid netip.Addr, join bool) error {
	if !link.MulticastGID(mgid) {
		return fmt.Errorf("%v is not a multicast GID", mgid)
	}
	mgid = netip.AddrFrom16(mgid.As16())
	g := link.GroupAddr(mgid)
	if l.v4 && !g.Is4() {
		return fmt.Errorf("group %v: the link's socket is IPv4 only (bound to %v)", g, l.cfg.Bind)
	}
	l.mc.mu.Lock()
	defer l.mc.mu.Unlock()
	old := l.mc.groups.Load()
	if old != nil && (*old)[mgid] == join {
		return nil
	}
	ifindex := l.cfg.Zone
	if ifindex == 0 {
		ifindex = l.cfg.Ifindex
	}
	var serr error
	err := l.rc.Control(func(fd uintptr) {
		f := int(fd)
		if g.Is4() {
			mr := &unix.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(ifindex)}
			opt := unix.IP_ADD_MEMBERSHIP
			if !join {
				opt = unix.IP_DROP_MEMBERSHIP
			}
			serr = unix.SetsockoptIPMreqn(f, unix.IPPROTO_IP, opt, mr)
			if serr == nil && join {
				// rxe's packets to a group leave with TTL 64 (mckey.pcap;
				// the CM's hop limit, IPV6_DEFAULT_HOPLIMIT), not the
				// socket default of 1; and through the group's netdev.
				_ = unix.SetsockoptInt(f, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 64)
				if ifindex != 0 {
					_ = unix.SetsockoptIPMreqn(f, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifindex)})
				}
			}
			return
		}
		mr := &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(ifindex)}
		opt := unix.IPV6_JOIN_GROUP
		if !join {
			opt = unix.IPV6_LEAVE_GROUP
		}
		serr = unix.SetsockoptIPv6Mreq(f, unix.IPPROTO_IPV6, opt, mr)
		if serr == nil && join {
			_ = unix.SetsockoptInt(f, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 64)
			if ifindex != 0 {
				_ = unix.SetsockoptInt(f, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex)
			}
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil && join {
		return fmt.Errorf("joining group %v: %w", g, err)
	}
	m := make(map[netip.Addr]bool)
	if old != nil {
		for k := range *old {
			m[k] = true
		}
	}
	if join {
		m[mgid] = true
	} else {
		delete(m, mgid)
	}
	l.mc.groups.Store(&m)
	return nil
}
