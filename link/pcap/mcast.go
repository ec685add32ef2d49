package pcap

import (
	"net/netip"

	"github.com/goroce/goroce/link"
)

// JoinGroup forwards to the wrapped link (link.Multicaster).
func (l *Link) JoinGroup(mgid netip.Addr) error { return link.JoinGroupOf(l.Link, mgid) }

// LeaveGroup forwards to the wrapped link.
func (l *Link) LeaveGroup(mgid netip.Addr) error { return link.LeaveGroupOf(l.Link, mgid) }
