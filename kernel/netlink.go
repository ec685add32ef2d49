package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// RDMA netlink (include/uapi/rdma/rdma_netlink.h) beyond what
// vishvananda/netlink v1.3.1 names: it has the device dump, NEWLINK and
// DELLINK (RdmaLinkList, RdmaLinkAdd, RdmaLinkDel), not the port dump that
// rdma link show reads, nor the attributes of a port.
const (
	nldevCmdPortGet  = 5  // RDMA_NLDEV_CMD_PORT_GET
	nldevAttrNdevIdx = 50 // RDMA_NLDEV_ATTR_NDEV_INDEX (u32)
)

// LinkPort is a port as RDMA netlink shows it (rdma link show).
type LinkPort struct {
	DevIndex    uint32 // the kernel's device index (rdma -j's "ifindex")
	Dev         string
	Port        int
	State       int // 1 DOWN … 4 ACTIVE
	PhysState   int // 5 LinkUp …
	Netdev      string
	NetdevIndex int
}

// netlinkErr turns an RDMA netlink failure into an Error; a kernel without
// RDMA netlink (no ib_core) cannot open the socket at all.
func netlinkErr(op, dev string, err error) error {
	if errors.Is(err, syscall.EPROTONOSUPPORT) {
		return &Error{Op: op, Dev: dev, Err: syscall.EPROTONOSUPPORT,
			Detail: "this kernel has no RDMA netlink (is ib_core loaded? modprobe ib_core)"}
	}
	return &Error{Op: op, Dev: dev, Err: err}
}

// Links dumps the kernel's RDMA ports over netlink, as rdma link show
// does (RDMA_NLDEV_CMD_PORT_GET with NLM_F_DUMP).
func Links() ([]LinkPort, error) {
	req := nl.NewNetlinkRequest(nl.RDMA_NL_NLDEV<<nl.RDMA_NL_GET_CLIENT_SHIFT|nldevCmdPortGet,
		unix.NLM_F_ACK|unix.NLM_F_DUMP)
	msgs, err := req.Execute(unix.NETLINK_RDMA, 0)
	if err != nil && !errors.Is(err, nl.ErrDumpInterrupted) {
		return nil, netlinkErr("link show", "", err)
	}
	var out []LinkPort
	for _, m := range msgs {
		attrs, err := nl.ParseRouteAttr(m)
		if err != nil {
			return nil, netlinkErr("link show", "", err)
		}
		var p LinkPort
		for _, a := range attrs {
			v := a.Value
			switch a.Attr.Type {
			case nl.RDMA_NLDEV_ATTR_DEV_INDEX:
				p.DevIndex = u32(v)
			case nl.RDMA_NLDEV_ATTR_DEV_NAME:
				p.Dev = cString(v)
			case nl.RDMA_NLDEV_ATTR_PORT_INDEX:
				p.Port = int(u32(v))
			case nl.RDMA_NLDEV_ATTR_PORT_STATE:
				if len(v) > 0 {
					p.State = int(v[0])
				}
			case nl.RDMA_NLDEV_ATTR_PORT_PHYS_STATE:
				if len(v) > 0 {
					p.PhysState = int(v[0])
				}
			case nl.RDMA_NLDEV_ATTR_NDEV_NAME:
				p.Netdev = cString(v)
			case nldevAttrNdevIdx:
				p.NetdevIndex = int(u32(v))
			}
		}
		if p.Dev != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

func u32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.NativeEndian.Uint32(b)
}

func cString(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\x00")
	return s
}

// DeviceIndexes maps the kernel's RDMA device names to their indexes
// (rdma dev show's "0: rxe0"), over netlink.
func DeviceIndexes() (map[string]uint32, error) {
	links, err := netlink.RdmaLinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, netlinkErr("dev show", "", err)
	}
	m := map[string]uint32{}
	for _, l := range links {
		m[l.Attrs.Name] = l.Attrs.Index
	}
	return m, nil
}

// LinkTypes are the link types rdma link add knows: Soft-RoCE and
// Soft-iWARP.
var LinkTypes = []string{"rxe", "siw"}

// LinkAdd creates a software RDMA device name of type typ (rxe or siw) on
// netdev, over RDMA netlink as rdma link add does (RDMA_NLDEV_CMD_NEWLINK;
// the kernel loads rdma_rxe or siw itself). s is read first so that the
// usual refusals are explained: a name taken (the kernel says ENFILE:
// rxe_register_device fails), a netdev that already carries an rxe device
// (EEXIST, "rdma_rxe: already configured on eth0").
func LinkAdd(s Sysfs, name, typ, netdev string) error {
	op := "link add " + name
	if name == "" || strings.ContainsAny(name, "%/") || len(name) >= 64 {
		return &Error{Op: op, Dev: name, Err: syscall.EINVAL,
			Detail: fmt.Sprintf("device name %q: 1 to 63 characters, no %% or /", name)}
	}
	if typ != "rxe" && typ != "siw" {
		return &Error{Op: op, Dev: name, Err: syscall.EINVAL,
			Detail: fmt.Sprintf("link type %q: the kernel's are rxe (Soft-RoCE) and siw (Soft-iWARP)", typ)}
	}
	if s.Has(name) {
		return &Error{Op: op, Dev: name, Err: syscall.EEXIST,
			Detail: fmt.Sprintf("the kernel has an RDMA device %s already (roce link show --kernel lists them)", name)}
	}
	if typ == "rxe" {
		devs, _ := s.OnNetdev(netdev)
		for _, d := range devs {
			if d.Driver == "rxe" {
				return &Error{Op: op, Dev: name, Err: syscall.EEXIST,
					Detail: fmt.Sprintf("netdev %s carries the rxe device %s already, and rdma_rxe takes one per netdev", netdev, d.Name)}
			}
		}
	}
	err := netlink.RdmaLinkAdd(name, typ, netdev)
	if err == nil {
		return nil
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		return netlinkErr(op, name, err)
	}
	ke := &Error{Op: op, Dev: name, Err: e}
	switch e {
	case syscall.ENODEV:
		ke.Detail = fmt.Sprintf("no netdev %s in this network namespace (ip link lists them)", netdev)
	case syscall.EEXIST:
		ke.Detail = fmt.Sprintf("netdev %s carries an %s device already (dmesg: \"already configured\")", netdev, typ)
	case syscall.ENFILE:
		// rxe_register_device → ib_register_device fails with -ENFILE for
		// a name in use (assign_name), which strerror calls "Too many
		// open files in system".
		ke.Detail = fmt.Sprintf("the kernel refused the name %s: a device of that name exists", name)
	case syscall.EOPNOTSUPP, syscall.EINVAL:
		ke.Detail = fmt.Sprintf("the kernel has no %s link type (is its module there? modprobe rdma_%s), or %s cannot carry it", typ, typ, netdev)
	case syscall.EPERM, syscall.EACCES:
		ke.Detail = "adding an RDMA link needs CAP_NET_ADMIN: run as root"
	}
	return ke
}

// LinkDelete removes the software RDMA device name, as rdma link delete
// does (RDMA_NLDEV_CMD_DELLINK). A device that is not the kernel's is
// ENODEV; one the kernel cannot unlink (a NIC's, not a link) EOPNOTSUPP.
func LinkDelete(s Sysfs, name string) error {
	op := "link delete " + name
	if !s.Has(name) {
		return &Error{Op: op, Dev: name, Err: syscall.ENODEV,
			Detail: fmt.Sprintf("the kernel has no RDMA device %s (roce link show --kernel lists them)", name)}
	}
	err := netlink.RdmaLinkDel(name)
	if err == nil {
		return nil
	}
	var e syscall.Errno
	if !errors.As(err, &e) {
		// RdmaLinkDel looks the name up itself and says "Rdma device %v
		// not found" without an errno: removed meanwhile.
		if strings.Contains(err.Error(), "not found") {
			return &Error{Op: op, Dev: name, Err: syscall.ENODEV, Detail: "the device went away meanwhile"}
		}
		return netlinkErr(op, name, err)
	}
	ke := &Error{Op: op, Dev: name, Err: e}
	switch e {
	case syscall.EOPNOTSUPP, syscall.EINVAL:
		// nldev_dellink refuses a device without IB_DEVICE_ALLOW_USER_UNREG.
		ke.Detail = fmt.Sprintf("%s is not a software link (rxe, siw): its driver owns it", name)
	case syscall.EPERM, syscall.EACCES:
		ke.Detail = "deleting an RDMA link needs CAP_NET_ADMIN: run as root"
	}
	return ke
}
