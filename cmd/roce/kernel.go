package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/verbs"
)

// The kernel's own RDMA devices (Mellanox, Broadcom, QLogic NICs, Linux
// rxe and siw) beside goroce's: dev, devices, gids and link show list both,
// the kernel's marked as such; mode and tos perform the rdma_cm configfs
// procedure on them; link add and delete make and remove kernel rxe links
// with --kernel; probe runs from them.

// addKernelRootFlags adds the roots the kernel's devices are read from.
// They are hidden: only tests, with trees of their own, change them.
func addKernelRootFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.String("sysfs", "/sys", "where sysfs is mounted (tests)")
	f.String("configfs", "/sys/kernel/config", "where configfs is (to be) mounted (tests)")
	f.MarkHidden("sysfs")
	f.MarkHidden("configfs")
}

func sysfsOf(cmd *cobra.Command) kernel.Sysfs {
	root, _ := cmd.Flags().GetString("sysfs")
	return kernel.Sysfs{Root: root}
}

// realSysfs reports whether the kernel's devices are read from the real
// /sys, where RDMA netlink describes the same devices.
func realSysfs(cmd *cobra.Command) bool {
	root, _ := cmd.Flags().GetString("sysfs")
	return root == "" || root == "/sys"
}

// configfsOf returns the configfs procedure for op; what it does beyond
// reading and writing (mounting configfs, loading rdma_cm) goes to stderr.
func configfsOf(cmd *cobra.Command, op string) *kernel.Configfs {
	root, _ := cmd.Flags().GetString("configfs")
	w := cmd.ErrOrStderr()
	return &kernel.Configfs{Root: root, Sysfs: sysfsOf(cmd),
		Logf: func(format string, args ...any) { fmt.Fprintf(w, "roce: %s: %s\n", op, fmt.Sprintf(format, args...)) }}
}

// stack is which devices a command works on.
type stack int

const (
	stackBoth   stack = iota // no --kernel: goroce's and the kernel's
	stackKernel              // --kernel
	stackGoroce              // --kernel=false
)

const kernelFlagUsage = "the kernel's RDMA devices only (--kernel=false: goroce's only); default both"

func addKernelFlag(cmd *cobra.Command) {
	cmd.Flags().Bool("kernel", false, kernelFlagUsage)
}

func stackOf(cmd *cobra.Command) stack {
	f := cmd.Flags().Lookup("kernel")
	if f == nil || !f.Changed {
		return stackBoth
	}
	if f.Value.String() == "true" {
		return stackKernel
	}
	return stackGoroce
}

// kernelNoDevice is ENODEV for a name the kernel does not have.
func kernelNoDevice(op, name string) error {
	return &errnoError{op: op, errno: syscall.ENODEV,
		detail: fmt.Sprintf("the kernel has no RDMA device %s (roce dev --kernel lists them)", name)}
}

// resolveDevice says whether name is a kernel device (true) or goroce's
// (false), as --kernel asks; without --kernel a name both have is
// ambiguous, and one neither has is ENODEV naming where it was looked for.
func resolveDevice(cmd *cobra.Command, op, name string) (bool, error) {
	reg, dir := registryOf(cmd)
	_, gerr := reg.Get(name)
	if gerr != nil && !errors.Is(gerr, syscall.ENODEV) {
		return false, opError(op, gerr)
	}
	inGoroce := gerr == nil
	sys := sysfsOf(cmd)
	inKernel := sys.Has(name)
	switch stackOf(cmd) {
	case stackKernel:
		if !inKernel {
			return false, kernelNoDevice(op, name)
		}
		return true, nil
	case stackGoroce:
		if !inGoroce {
			return false, noDevice(op, name, dir)
		}
		return false, nil
	}
	switch {
	case inGoroce && inKernel:
		return false, usageError{&errnoError{op: op, errno: syscall.EINVAL,
			detail: fmt.Sprintf("%s names a goroce device (in %s) and a kernel device: say which with --kernel or --kernel=false", name, dir)}}
	case inGoroce:
		return false, nil
	case inKernel:
		return true, nil
	}
	err := noDevice(op, name, dir)
	if devs, _ := sys.Devices(); len(devs) > 0 {
		var names []string
		for _, d := range devs {
			names = append(names, d.Name)
		}
		e := err.(*errnoError)
		e.detail += "; nor has the kernel (its devices: " + strings.Join(names, ", ") + ")"
	}
	return false, err
}

// kernelDevicesOf returns the kernel device name, or all of them.
func kernelDevicesOf(cmd *cobra.Command, op, name string) ([]kernel.Device, error) {
	sys := sysfsOf(cmd)
	if name != "" {
		d, err := sys.Device(name)
		if err != nil {
			return nil, kernelNoDevice(op, name)
		}
		return []kernel.Device{d}, nil
	}
	devs, err := sys.Devices()
	if err != nil {
		return nil, opError(op, err)
	}
	return devs, nil
}

// kernelIndexes maps the kernel's device names to the indexes rdma shows
// ("0: rxe0"): RDMA netlink's, on the real sysfs; else (a test's tree, or
// a kernel without RDMA netlink) their order.
func kernelIndexes(cmd *cobra.Command, devs []kernel.Device) map[string]uint32 {
	if realSysfs(cmd) {
		if m, err := kernel.DeviceIndexes(); err == nil {
			return m
		}
	}
	m := map[string]uint32{}
	for i, d := range devs {
		m[d.Name] = uint32(i)
	}
	return m
}

// kernelErr reports a kernel.Error as errnoError: the errno first, then
// the explanation.
func kernelErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return opError(op, err)
}

// writeKernelDevice writes an ibv_devices line for a kernel device; the
// third column marks it.
func writeKernelDevice(w io.Writer, d kernel.Device) {
	fmt.Fprintf(w, "    %-16s\t%016x\tkernel\n", d.Name, d.NodeGUID)
}

// kernelGIDHint is gidHint for a kernel port.
func kernelGIDHint(d kernel.Device, port int, gids []kernel.GID) string {
	// gidHint indexes by slice position: lay the table out by index.
	max := -1
	for _, g := range gids {
		if g.Index > max {
			max = g.Index
		}
	}
	entries := make([]verbs.GIDEntry, max+1)
	for _, g := range gids {
		entries[g.Index] = verbs.GIDEntry{GID: g.GID, Type: g.Type, Netdev: g.Netdev}
	}
	p, _ := d.Port(port)
	h := gidHint(host.DeviceDef{Name: d.Name, Netdev: p.Netdev}, entries)
	// gidHint says "NAME port 1: ..."; this port's number, and the mark.
	rest := strings.TrimPrefix(h, d.Name+" port 1: ")
	return fmt.Sprintf("%s (kernel) port %d: %s", d.Name, port, rest)
}

// transportName is ibv_devinfo's transport of a node type.
func transportName(nodeType int) (string, int) {
	if nodeType == 4 {
		return "iWARP", 1
	}
	return "InfiniBand", 0
}

// ibv_devinfo's names of port states and physical states (devinfo.c).
func ibvPortState(s int) string {
	names := []string{"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"}
	if s >= 0 && s < len(names) {
		return names[s]
	}
	return "invalid state"
}

func ibvPhysState(s int) string {
	names := map[int]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 4: "PORT_CONFIGURATION TRAINING", 5: "LINK_UP",
		6: "LINK_ERROR_RECOVERY", 7: "PHY TEST"}
	if n, ok := names[s]; ok {
		return n
	}
	return "invalid physical state"
}

// rateWidthSpeed splits sysfs' rate ("25 Gb/sec (1X EDR)") into
// ibv_devinfo's active_width and active_speed and their codes.
func rateWidthSpeed(rate string) (width string, wcode int, speed string, scode int) {
	_, inner, ok := strings.Cut(rate, "(")
	inner, _, _ = strings.Cut(inner, ")")
	f := strings.Fields(inner)
	if !ok || len(f) < 1 {
		return "", 0, "", 0
	}
	width = f[0]
	wcode = activeWidthCodes[width]
	gen := ""
	if len(f) > 1 {
		gen = f[1]
	}
	// ibv_devinfo's speed per lane by code (speed_str); sysfs names the
	// generation (ib_port's rate_show).
	for _, s := range []struct {
		gen   string
		speed string
		code  int
	}{{"SDR", "2.5 Gbps", 1}, {"DDR", "5.0 Gbps", 2}, {"QDR", "10.0 Gbps", 4}, {"FDR10", "10.0 Gbps", 8},
		{"FDR", "14.0 Gbps", 16}, {"EDR", "25.0 Gbps", 32}, {"HDR", "50.0 Gbps", 64}, {"NDR", "100.0 Gbps", 128}} {
		if s.gen == gen {
			return width, wcode, s.speed, s.code
		}
	}
	return width, wcode, "", 0
}

// writeKernelDevinfo writes what ibv_devinfo [-v] writes for a kernel
// device, from sysfs; port 0 means every port. The device attributes
// ibv_devinfo -v adds come from ibv_query_device, which sysfs does not
// show: they are left out (the caller says so).
func writeKernelDevinfo(w io.Writer, sys kernel.Sysfs, d kernel.Device, port int, verbose bool) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	tr, code := transportName(d.NodeType)
	pf("hca_id:\t%s\n", d.Name)
	pf("\ttransport:\t\t\t%s (%d)\n", tr, code)
	fw := d.FWVer
	if fw == "" {
		// ibv_query_device formats the raw firmware version, 0 for rxe and
		// siw, as "0.0.0"; sysfs' fw_ver is the driver's string, empty.
		fw = "0.0.0"
	}
	pf("\tfw_ver:\t\t\t\t%s\n", fw)
	pf("\tnode_guid:\t\t\t%s\n", guidString(d.NodeGUID))
	pf("\tsys_image_guid:\t\t\t%s\n", guidString(d.SysImageGUID))
	pf("\tvendor_id:\t\t\t0x%04x\n", d.VendorID)
	pf("\tvendor_part_id:\t\t\t%d\n", d.PartID)
	pf("\thw_ver:\t\t\t\t0x%X\n", 0)
	pf("\tphys_port_cnt:\t\t\t%d\n", len(d.Ports))
	for _, p := range d.Ports {
		if port != 0 && p.Num != port {
			continue
		}
		mtu, _ := sys.NetdevMTU(p.Netdev)
		active := d.ActiveMTU(mtu)
		pf("\t\tport:\t%d\n", p.Num)
		pf("\t\t\tstate:\t\t\t%s (%d)\n", ibvPortState(p.State), p.State)
		pf("\t\t\tmax_mtu:\t\t%s (%d)\n", verbs.MTU4096, uint8(verbs.MTU4096))
		if p.LinkLayer == "Ethernet" && mtu > 0 {
			pf("\t\t\tactive_mtu:\t\t%s (%d)\n", active, uint8(active))
		}
		pf("\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
		pf("\t\t\tport_lid:\t\t%d\n", p.LID)
		pf("\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
		pf("\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
		if !verbose {
			continue
		}
		pf("\t\t\tport_cap_flags:\t\t0x%08x\n", p.CapMask)
		pf("\t\t\tsm_sl:\t\t\t%d\n", p.SMSL)
		pf("\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTableLen)
		pf("\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTableLen)
		if wd, wc, sp, sc := rateWidthSpeed(p.Rate); wd != "" {
			pf("\t\t\tactive_width:\t\t%s (%d)\n", wd, wc)
			if sp != "" {
				pf("\t\t\tactive_speed:\t\t%s (%d)\n", sp, sc)
			}
		}
		pf("\t\t\tphys_state:\t\t%s (%d)\n", ibvPhysState(p.PhysState), p.PhysState)
		gids, _ := sys.GIDs(d.Name, p.Num)
		for _, g := range gids {
			if g.Type == verbs.GIDTypeRoCEv1 {
				b := g.GID.As16()
				pf("\t\t\tGID[%3d]:\t\t%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x, %s\n", g.Index,
					b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
					gidTypeString(g.Type))
				continue
			}
			pf("\t\t\tGID[%3d]:\t\t%s, %s\n", g.Index, g.GID, gidTypeString(g.Type))
		}
	}
	pf("\n")
}

// kernelLink is one port of a kernel device as rdma link show shows it.
type kernelLink struct {
	devIndex    uint32
	dev         string
	port        int
	state       string
	physState   string
	netdev      string
	netdevIndex int
	driver      string
}

// kernelLinks reads the kernel devices' ports: over RDMA netlink, as rdma
// link show does, on the real sysfs; from sysfs otherwise (a test's tree,
// or netlink unavailable).
func kernelLinks(cmd *cobra.Command, devs []kernel.Device) []kernelLink {
	sys := sysfsOf(cmd)
	drivers := map[string]string{}
	for _, d := range devs {
		drivers[d.Name] = d.Driver
	}
	if realSysfs(cmd) {
		if ports, err := kernel.Links(); err == nil && len(ports) > 0 {
			var out []kernelLink
			for _, p := range ports {
				if _, ok := drivers[p.Dev]; !ok {
					continue // not asked for
				}
				out = append(out, kernelLink{devIndex: p.DevIndex, dev: p.Dev, port: p.Port,
					state: kernel.PortStateName(p.State), physState: kernel.PhysStateName(p.PhysState),
					netdev: p.Netdev, netdevIndex: p.NetdevIndex, driver: drivers[p.Dev]})
			}
			return out
		}
	}
	all, _ := sys.Devices()
	idx := kernelIndexes(cmd, all)
	var out []kernelLink
	for _, d := range devs {
		for _, p := range d.Ports {
			ni, _ := sys.NetdevIndex(p.Netdev)
			out = append(out, kernelLink{devIndex: idx[d.Name], dev: d.Name, port: p.Num, state: p.StateName,
				physState: p.PhysStateName, netdev: p.Netdev, netdevIndex: ni, driver: d.Driver})
		}
	}
	return out
}

// writeKernelLink writes rdma link show's line for a kernel port, marked
// "kernel"; with details, the driver and the netdev's index follow.
func writeKernelLink(w io.Writer, l kernelLink, details bool) {
	fmt.Fprintf(w, "link %s/%d state %s physical_state %s ", l.dev, l.port, l.state, l.physState)
	if l.netdev != "" {
		fmt.Fprintf(w, "netdev %s ", l.netdev)
	}
	fmt.Fprint(w, "kernel ")
	if details {
		if l.netdev != "" {
			fmt.Fprintf(w, "netdev_index %d ", l.netdevIndex)
		}
		if l.driver != "" {
			fmt.Fprintf(w, "driver %s ", l.driver)
		}
	}
	fmt.Fprintln(w)
}

func kernelLinkRow(l kernelLink) jsonRow {
	r := jsonRow{{"ifindex", l.devIndex}, {"ifname", l.dev}, {"port", l.port}, {"state", l.state},
		{"physical_state", l.physState}}
	if l.netdev != "" {
		r = append(r, kv{"netdev", l.netdev}, kv{"netdev_index", l.netdevIndex})
	}
	r = append(r, kv{"kernel", true})
	if l.driver != "" {
		r = append(r, kv{"driver", l.driver})
	}
	return r
}

// kernelDevRow is rdma -j dev show's object for a kernel device, marked.
func kernelDevRow(idx uint32, d kernel.Device) jsonRow {
	nt := strings.ToLower(d.NodeTypeName)
	return jsonRow{{"ifindex", idx}, {"ifname", d.Name}, {"node_type", nt}, {"node_guid", guidString(d.NodeGUID)},
		{"sys_image_guid", guidString(d.SysImageGUID)}, {"kernel", true}, {"driver", d.Driver}}
}

// gidRowJSON is a GID table line as a JSON object, keyed by show_gids'
// columns.
func gidRowJSON(dev string, port, index int, g netip.Addr, t verbs.GIDType, ndev string, isKernel bool) jsonRow {
	r := jsonRow{{"ifname", dev}, {"port", port}, {"index", index}, {"gid", sysfsGID(g)}}
	if g.Is4In6() {
		r = append(r, kv{"ipv4", g.Unmap().String()})
	}
	return append(r, kv{"ver", gidVersion(t)}, kv{"netdev", ndev}, kv{"kernel", isKernel})
}

const kernelLinkAddSyntax = "roce link add NAME type rxe|siw netdev NETDEV --kernel"

// kernelLinkAdd is rdma link add NAME type TYPE netdev NETDEV: the
// keywords after NAME in any order, each once.
func kernelLinkAdd(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || args[0] == "type" || args[0] == "netdev" {
		return usageError{fmt.Errorf("link add: the device name comes first: %s", kernelLinkAddSyntax)}
	}
	name := args[0]
	op := "link add " + name
	vals := map[string]string{}
	for i := 1; i < len(args); i += 2 {
		kw := args[i]
		switch kw {
		case "type", "netdev":
		case "roce-versions":
			return usageError{&errnoError{op: op, errno: syscall.EINVAL,
				detail: "roce-versions is goroce's: the kernel's rxe speaks RoCE v2 only"}}
		case "rx-path":
			return usageError{&errnoError{op: op, errno: syscall.EINVAL,
				detail: "rx-path is goroce's: the kernel's rxe receives in the kernel"}}
		default:
			return usageError{fmt.Errorf("%s: unknown keyword %q: %s", op, kw, kernelLinkAddSyntax)}
		}
		if _, dup := vals[kw]; dup {
			return usageError{fmt.Errorf("%s: keyword %q given twice", op, kw)}
		}
		if i+1 == len(args) {
			return usageError{fmt.Errorf("%s: keyword %q needs a value: %s", op, kw, kernelLinkAddSyntax)}
		}
		vals[kw] = args[i+1]
	}
	for _, kw := range []string{"type", "netdev"} {
		if _, ok := vals[kw]; !ok {
			return usageError{fmt.Errorf("%s: missing %q: %s", op, kw, kernelLinkAddSyntax)}
		}
	}
	if err := kernel.LinkAdd(sysfsOf(cmd), name, vals["type"], vals["netdev"]); err != nil {
		return kernelErr(op, err)
	}
	return nil
}
