package verbs

import (
	"net/netip"
	"slices"
	"syscall"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// MulticastQPN is the destination QPN of a multicast packet (IBTA Vol 1
// §10.5.2.1, the permissive QPN 0xFFFFFF): the packet goes to every QP
// attached to its destination GID (rxe_rcv_mcast_pkt). A UD send reaches a
// group with this remote QPN and an AH whose DGID is the group's MGID.
const MulticastQPN = 0xFFFFFF

// mcastState is a device's multicast groups (rxe's mcg pool): which QPs
// are attached to each MGID. Bounded by MaxMcastGrp groups,
// MaxMcastQPAttach QPs per group and MaxTotalMcastQPAttach attachments.
type mcastState struct {
	groups   map[netip.Addr][]*QP // guarded by Device.mcMu; in attach order
	attached int                  // guarded by Device.mcMu: attachments over all groups
	scratch  []*QP                // the receive goroutine's: a group's QPs for one packet
}

// AttachMcast attaches the QP to multicast group gid, like
// ibv_attach_mcast: UD packets to the group (destination QPN
// MulticastQPN, destination GID gid) are delivered to it, as to every
// other QP attached. lid is the group's MLID; RoCE has none and ignores it
// (the CM's join event gives 0). The first attachment to a group joins it
// on the network (the link's IGMP/MLD join and multicast MAC).
//
// Errors, as ib_attach_mcast and rxe_attach_mcast give them: EINVAL for a
// QP that is not UD or a gid that is not a multicast GID (ff00::/8, or
// ::ffff:224.0.0.0/100 for an IPv4 group); ENOMEM past MaxMcastGrp groups,
// MaxMcastQPAttach QPs in the group or MaxTotalMcastQPAttach attachments on
// the device. Attaching a QP twice to one group is not an error.
func (q *QP) AttachMcast(gid netip.Addr, lid uint16) error {
	d := q.dev
	const op = "attach_mcast"
	if q.typ != UD {
		return errorf(op, d.name, q.num, syscall.EINVAL, "QP type %v: only UD QPs attach to multicast groups", q.typ)
	}
	if !link.MulticastGID(gid) {
		return errorf(op, d.name, q.num, syscall.EINVAL, "gid %v is not a multicast GID (ff00::/8, or ::ffff:224.0.0.0/100 for an IPv4 group)", gid)
	}
	gid = netip.AddrFrom16(gid.As16())
	q.mu.Lock()
	gone := q.destroyed
	q.mu.Unlock()
	if gone {
		return errorf(op, d.name, q.num, syscall.EINVAL, "QP is destroyed")
	}
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	m := &d.mcast
	qps, exists := m.groups[gid]
	if slices.Contains(qps, q) {
		return nil
	}
	switch {
	case !exists && len(m.groups) >= MaxMcastGrp:
		return errorf(op, d.name, q.num, syscall.ENOMEM, "the device has %d multicast groups, max_mcast_grp", MaxMcastGrp)
	case len(qps) >= MaxMcastQPAttach:
		return errorf(op, d.name, q.num, syscall.ENOMEM, "group %v has %d QPs attached, max_mcast_qp_attach", gid, MaxMcastQPAttach)
	case m.attached >= MaxTotalMcastQPAttach:
		return errorf(op, d.name, q.num, syscall.ENOMEM, "the device has %d multicast attachments, max_total_mcast_qp_attach", MaxTotalMcastQPAttach)
	}
	if !exists {
		if mc, ok := d.link.(link.Multicaster); ok {
			if err := mc.JoinGroup(gid); err != nil {
				return errorf(op, d.name, q.num, syscall.EADDRNOTAVAIL, "joining group %v on the network: %v", gid, err)
			}
		}
		if m.groups == nil {
			m.groups = make(map[netip.Addr][]*QP)
		}
	}
	m.groups[gid] = append(qps, q)
	m.attached++
	return nil
}

// DetachMcast detaches the QP from multicast group gid, like
// ibv_detach_mcast; EINVAL if it is not attached. The last detachment
// from a group leaves it on the network.
func (q *QP) DetachMcast(gid netip.Addr, lid uint16) error {
	d := q.dev
	gid = netip.AddrFrom16(gid.As16())
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if !d.detachLocked(q, gid) {
		return errorf("detach_mcast", d.name, q.num, syscall.EINVAL, "the QP is not attached to group %v", gid)
	}
	return nil
}

// detachLocked detaches q from gid and reports whether it was attached;
// d.mcMu is held.
func (d *Device) detachLocked(q *QP, gid netip.Addr) bool {
	m := &d.mcast
	qps := m.groups[gid]
	i := slices.Index(qps, q)
	if i < 0 {
		return false
	}
	qps = slices.Delete(qps, i, i+1)
	m.attached--
	if len(qps) > 0 {
		m.groups[gid] = qps
		return true
	}
	delete(m.groups, gid)
	if mc, ok := d.link.(link.Multicaster); ok {
		_ = mc.LeaveGroup(gid) // the group is gone here whatever the network says
	}
	return true
}

// detachAll detaches a QP being destroyed from every group. (Linux
// refuses to destroy a QP still attached, EBUSY; goroce detaches it, so a
// destroyed QP holds no group and no packet is delivered to it.)
func (d *Device) detachAll(q *QP) {
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	for gid, qps := range d.mcast.groups {
		if slices.Contains(qps, q) {
			d.detachLocked(q, gid)
		}
	}
}

// McastGroups returns the number of multicast groups with QPs attached and
// the number of attachments, for diagnostics and tests.
func (d *Device) McastGroups() (groups, attached int) {
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	return len(d.mcast.groups), d.mcast.attached
}

// dispatchMcast delivers a packet to destination QPN MulticastQPN to every
// QP attached to its destination GID, each QP checking it as its own
// (type, state, P_Key, Q_Key: rxe_rcv_mcast_pkt's check_type_state and
// check_keys), so a copy with a wrong Q_Key is dropped and counted in
// rcvd_bad_qkey by every QP it fails. A packet to a group with no QP
// attached (or to a unicast GID) is dropped, counted in rcvd_bad_qp.
func (d *Device) dispatchMcast(pk *link.Packet, p *wire.Packet, out *txBatch) {
	m := &d.mcast
	d.mcMu.Lock()
	m.scratch = append(m.scratch[:0], m.groups[pk.Addr.DstGID]...)
	d.mcMu.Unlock()
	if len(m.scratch) == 0 {
		d.counters[RcvdBadQP].Add(1)
		return
	}
	for i, q := range m.scratch {
		q.receive(p, &pk.Addr, out)
		m.scratch[i] = nil
	}
}
