package afpacket

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
)

// mcastState is the multicast groups the link has joined: for each, the
// datagram socket that holds its IGMP/MLD membership on the netdev.
type mcastState struct {
	mu     sync.Mutex                          // guards socks; serializes joins and leaves
	socks  map[netip.Addr]int                  // the membership socket per group
	groups atomic.Pointer[map[netip.Addr]bool] // read on the receive path
}

var _ link.Multicaster = (*Link)(nil)

func (l *Link) joined(a netip.Addr) bool {
	m := l.mc.groups.Load()
	return m != nil && (*m)[a]
}

// JoinGroup joins the group of multicast GID mgid: the packet socket adds
// the group's MAC to the netdev's filter (PACKET_ADD_MEMBERSHIP,
// PACKET_MR_MULTICAST, as rxe's rxe_mcast_add calls dev_mc_add), and a
// datagram socket joins the IP group on the netdev, so the kernel sends
// the IGMP (IPv4) or MLD (IPv6) report a switch with snooping needs (Linux's
// CM: cma_igmp_send). The membership socket receives nothing (port 0 is
// never a destination) and lives until LeaveGroup or Close.
func (l *Link) JoinGroup(mgid netip.Addr) error {
	mac, ok := link.MulticastMAC(mgid)
	if !ok {
		return fmt.Errorf("%v is not a multicast GID", mgid)
	}
	mgid = netip.AddrFrom16(mgid.As16())
	l.mc.mu.Lock()
	defer l.mc.mu.Unlock()
	if _, ok := l.mc.socks[mgid]; ok {
		return nil
	}
	mr := &unix.PacketMreq{Ifindex: int32(l.cfg.Ifindex), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
	copy(mr.Address[:], mac[:])
	if err := unix.SetsockoptPacketMreq(l.fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mr); err != nil {
		return fmt.Errorf("adding multicast MAC %v to ifindex %d: %w", mac, l.cfg.Ifindex, err)
	}
	fd, err := l.ipMembership(link.GroupAddr(mgid))
	if err != nil {
		_ = unix.SetsockoptPacketMreq(l.fd, unix.SOL_PACKET, unix.PACKET_DROP_MEMBERSHIP, mr)
		return err
	}
	if l.mc.socks == nil {
		l.mc.socks = make(map[netip.Addr]int)
	}
	l.mc.socks[mgid] = fd
	l.publishGroups()
	return nil
}

// ipMembership opens a datagram socket joined to group g on the netdev.
func (l *Link) ipMembership(g netip.Addr) (int, error) {
	fam := unix.AF_INET
	if !g.Is4() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("membership socket for %v: %w", g, err)
	}
	if g.Is4() {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &unix.IPMreqn{Multiaddr: g.As4(), Ifindex: int32(l.cfg.Ifindex)})
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(l.cfg.Ifindex)})
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("joining group %v on ifindex %d: %w", g, l.cfg.Ifindex, err)
	}
	return fd, nil
}

// LeaveGroup leaves it: the MAC comes off the netdev's filter and closing
// the membership socket sends the IGMP/MLD leave.
func (l *Link) LeaveGroup(mgid netip.Addr) error {
	mgid = netip.AddrFrom16(mgid.As16())
	l.mc.mu.Lock()
	defer l.mc.mu.Unlock()
	fd, ok := l.mc.socks[mgid]
	if !ok {
		return nil
	}
	delete(l.mc.socks, mgid)
	l.publishGroups()
	unix.Close(fd)
	mac, _ := link.MulticastMAC(mgid)
	mr := &unix.PacketMreq{Ifindex: int32(l.cfg.Ifindex), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
	copy(mr.Address[:], mac[:])
	_ = unix.SetsockoptPacketMreq(l.fd, unix.SOL_PACKET, unix.PACKET_DROP_MEMBERSHIP, mr)
	return nil
}

// publishGroups makes the receive path see socks' groups; mc.mu is held.
func (l *Link) publishGroups() {
	m := make(map[netip.Addr]bool, len(l.mc.socks))
	for g := range l.mc.socks {
		m[g] = true
	}
	l.mc.groups.Store(&m)
}

// closeGroups closes the membership sockets (Close; the packet socket's
// memberships end with it).
func (l *Link) closeGroups() {
	l.mc.mu.Lock()
	defer l.mc.mu.Unlock()
	for g, fd := range l.mc.socks {
		unix.Close(fd)
		delete(l.mc.socks, g)
	}
	l.publishGroups()
}
