package host

import (
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// This file answers the control commands (roce link show, roce dev, roce
// gids) without opening a device's data path: what ibv_query_device and
// ibv_query_port would report is a function of the netdev alone, so it is
// computed here from the netdev, and works while another process has the
// device open.

// LookupNetdevIn reads the netdev name of the namespace ns (entering it
// when it is not the caller's).
func LookupNetdevIn(ns Netns, name string) (Netdev, error) {
	var nd Netdev
	err := InNetns(ns, func() error {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer nl.Close()
		nd, err = LookupNetdev(nl, name)
		return err
	})
	return nd, err
}

// PortUp reports whether a port on nd is ACTIVE: rxe's port follows its
// netdev's carrier (rxe_port_up/rxe_port_down on NETDEV_UP, NETDEV_DOWN,
// NETDEV_CHANGE), so the port is active when the netdev is up and running.
func PortUp(nd Netdev) bool { return nd.Up && nd.Running }

// NodeGUID is the node GUID a device on a netdev with this MAC has: the
// EUI-64 of the MAC (52:54:00:c0:02:0b → 0x505400fffec0020b).
func NodeGUID(mac wire.MAC) uint64 { return verbs.NodeGUIDFromMAC(mac) }

// DeviceAttrOf returns the device attributes (ibv_query_device) of a
// device on a netdev with this MAC: what a running device's Query returns.
func DeviceAttrOf(mac wire.MAC) verbs.DeviceAttr { return verbs.DeviceAttrFor(NodeGUID(mac)) }

// PortAttrOf returns port 1's attributes (ibv_query_port) of a device on
// nd: what a running device's QueryPort returns.
func PortAttrOf(nd Netdev) verbs.PortAttr {
	return verbs.PortAttrFor(ActiveMTU(nd.MTU), PortUp(nd))
}
