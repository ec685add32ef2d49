package rdmacm

import (
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// maxMcastPerID bounds the groups one ID joins (a group per join, as the
// kernel's ID list; the device's max_mcast_grp bounds them all).
const maxMcastPerID = verbs.MaxMcastGrp

// McastGID is the multicast GID Linux's CM gives IP group addr on a port
// of GID type t (cma_iboe_set_mgid): an IPv4 group's IPv4-mapped address
// on RoCE v2 (mckey: "joined dgid: ::ffff:239.1.2.3"), ff0e::ffff:a.b.c.d
// on RoCE v1, and an IPv6 group's own address.
func McastGID(addr netip.Addr, t verbs.GIDType) netip.Addr {
	addr = addr.Unmap()
	if !addr.Is4() {
		return addr
	}
	b := netip.AddrFrom16(addr.As16()).As16()
	if t == verbs.GIDTypeRoCEv1 {
		b[0], b[1] = 0xff, 0x0e
	}
	return netip.AddrFrom16(b)
}

// JoinMulticast is rdma_join_multicast: the ID joins IP multicast group
// addr on its device. MULTICAST_JOIN follows, with the group's UD
// parameters in Event.UD as the kernel's cma_make_mc_event gives them:
// remote QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY (0x01234567), and an AH to the
// group's MGID (McastGID) from the ID's source GID, hop limit 64 for an
// IPv4 group on RoCE v2 (IPV6_DEFAULT_HOPLIMIT) and 1 otherwise
// (cma_iboe_join_multicast). If the ID has a QP it is attached to the
// group first, as librdmacm's ucma_process_join does on the event; the
// device's first attachment joins the group on the network (IGMP/MLD). An
// attach that fails is MULTICAST_ERROR with the errno as its status.
//
// Unlike Linux 6.1, which refuses an IPv6 group on a RoCE v2 port
// (ENOTSUPP), goroce joins it: the MGID is the group's address.
//
// Errors: EINVAL for an ID without a device (bind or resolve an address
// first), of port space TCP, or an addr that is not a multicast address;
// EADDRINUSE if the ID already joined addr.
func (id *ID) JoinMulticast(addr netip.Addr) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	addr = addr.Unmap()
	switch {
	case id.state == stDestroyed:
		return id.errorf("join_multicast", syscall.EINVAL, "ID destroyed")
	case id.ps == PSTCP:
		return id.errorf("join_multicast", syscall.EINVAL, "port space %v: multicast is UD, port space UDP or IB", id.ps)
	case !addr.IsValid() || !addr.IsMulticast():
		return id.errorf("join_multicast", syscall.EINVAL, "%v is not a multicast address (224.0.0.0/4 or ff00::/8)", addr)
	case id.ag == nil:
		return id.errorf("join_multicast", syscall.EINVAL, "ID has no device: bind it or resolve an address first")
	case id.mcasts[addr].IsValid():
		return id.errorf("join_multicast", syscall.EADDRINUSE, "ID already joined %v", addr)
	case len(id.mcasts) >= maxMcastPerID:
		return id.errorf("join_multicast", syscall.ENOMEM, "ID joined %d groups", len(id.mcasts))
	}
	mode, _, err := cm.defaults(id.ag)
	if err != nil {
		return id.errorf("join_multicast", syscall.EINVAL, "%v", err)
	}
	src := id.src.Addr()
	if !src.IsValid() || src.IsUnspecified() {
		src = srcOf(id.ag, addr)
	}
	sgid, ok := id.ag.gidIndex(gidOf(src), mode)
	if !ok {
		return id.errorf("join_multicast", syscall.EINVAL, "device %s has no %v GID for %v", id.ag.dev.Name(), mode, src)
	}
	mgid := McastGID(addr, mode)
	hop := uint8(1)
	if addr.Is4() && mode == verbs.GIDTypeRoCEv2 {
		hop = hopLimit
	}
	if id.mcasts == nil {
		id.mcasts = make(map[netip.Addr]netip.Addr)
	}
	id.mcasts[addr] = mgid
	ud := UDParam{QPNum: verbs.MulticastQPN, QKey: udpQKey, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: mgid, SGIDIndex: sgid, HopLimit: hop}}}
	if id.qp != nil {
		if err := id.qp.AttachMcast(mgid, 0); err != nil {
			status := -int(syscall.EINVAL)
			var errno syscall.Errno
			if e, ok := err.(*verbs.Error); ok {
				errno, _ = e.Err.(syscall.Errno)
			}
			if errno != 0 {
				status = -int(errno)
			}
			delete(id.mcasts, addr)
			id.emit(Event{Type: EventMulticastError, ID: id, Status: status, Err: err, Group: addr})
			return nil
		}
	}
	id.emit(Event{Type: EventMulticastJoin, ID: id, UD: ud, Group: addr})
	return nil
}

// LeaveMulticast is rdma_leave_multicast: the ID's QP, if any, is
// detached from the group (the device's last detachment leaves it on the
// network). EADDRNOTAVAIL if the ID has not joined addr.
func (id *ID) LeaveMulticast(addr netip.Addr) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	addr = addr.Unmap()
	mgid, ok := id.mcasts[addr]
	if !ok {
		return id.errorf("leave_multicast", syscall.EADDRNOTAVAIL, "ID has not joined %v", addr)
	}
	delete(id.mcasts, addr)
	if id.qp != nil {
		return id.qp.DetachMcast(mgid, 0)
	}
	return nil
}

// leaveAll leaves every group (Destroy, as cma_leave_mc_groups). Called
// with cm.mu held.
func (id *ID) leaveAll() {
	for addr, mgid := range id.mcasts {
		if id.qp != nil {
			_ = id.qp.DetachMcast(mgid, 0)
		}
		delete(id.mcasts, addr)
	}
}
