package host

import (
	"net/netip"

	"github.com/goroce/goroce/link"
)

// JoinGroup joins a multicast group on the device's link (link.Multicaster):
// link/udp on its socket, link/afpacket with the group's MAC and an
// IGMP/MLD membership on the netdev.
func (t *tap) JoinGroup(mgid netip.Addr) error { return link.JoinGroupOf(t.Link, mgid) }

// LeaveGroup leaves it.
func (t *tap) LeaveGroup(mgid netip.Addr) error { return link.LeaveGroupOf(t.Link, mgid) }
