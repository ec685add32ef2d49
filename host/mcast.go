package host

import (
	"net/netip"

	"github.com/goroce/goroce/link"
)

// JoinGroup joins a multicast group on the device's link (link.Multicaster),
// under the capture tap (link/pcap forwards it):
// link/udp on its socket, link/afpacket with the group's MAC and an
// IGMP/MLD membership on the netdev.
func (p pathLink) JoinGroup(mgid netip.Addr) error { return link.JoinGroupOf(p.Link, mgid) }

// LeaveGroup leaves it.
func (p pathLink) LeaveGroup(mgid netip.Addr) error { return link.LeaveGroupOf(p.Link, mgid) }
