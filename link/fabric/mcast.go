package fabric

import (
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/link"
)

var _ link.Multicaster = (*Port)(nil)

// JoinGroup makes the port a member of multicast group mgid: packets other
// ports send to it are delivered here too (link.Multicaster).
func (p *Port) JoinGroup(mgid netip.Addr) error {
	if !link.MulticastGID(mgid) {
		return fmt.Errorf("fabric: %v is not a multicast GID", mgid)
	}
	mgid = netip.AddrFrom16(mgid.As16())
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || p.isClosed() {
		return fmt.Errorf("fabric: port %q is closed", p.cfg.Name)
	}
	if f.groups == nil {
		f.groups = make(map[netip.Addr]map[*Port]bool)
	}
	m := f.groups[mgid]
	if m == nil {
		m = make(map[*Port]bool)
		f.groups[mgid] = m
	}
	m[p] = true
	return nil
}

// LeaveGroup ends the port's membership of mgid.
func (p *Port) LeaveGroup(mgid netip.Addr) error {
	mgid = netip.AddrFrom16(mgid.As16())
	f := p.fab
	f.mu.Lock()
	defer f.mu.Unlock()
	if m := f.groups[mgid]; m != nil {
		delete(m, p)
		if len(m) == 0 {
			delete(f.groups, mgid)
		}
	}
	return nil
}

// leaveAllLocked removes a closing port from every group; f.mu is held.
func (f *Fabric) leaveAllLocked(p *Port) {
	for g, m := range f.groups {
		delete(m, p)
		if len(m) == 0 {
			delete(f.groups, g)
		}
	}
}

// members appends to dsts the members of mgid other than the sender.
func (f *Fabric) members(mgid netip.Addr, sender *Port, dsts []*Port) []*Port {
	f.mu.Lock()
	defer f.mu.Unlock()
	for p := range f.groups[netip.AddrFrom16(mgid.As16())] {
		if p != sender {
			dsts = append(dsts, p)
		}
	}
	return dsts
}

// isMember reports whether p has joined mgid.
func (f *Fabric) isMember(mgid netip.Addr, p *Port) bool {
	if !link.MulticastGID(mgid) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.groups[netip.AddrFrom16(mgid.As16())][p]
}
