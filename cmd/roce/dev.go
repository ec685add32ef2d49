package main

import (
	"bufio"
	"fmt"
	"io"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/verbs"
)

type devOptions struct {
	verbose bool
	list    bool
	json    bool
	device  string
	port    int
}

func newDevCmd() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev [-v] [-d NAME] [-i PORT]",
		Short: "Show devices and their port, as ibv_devinfo prints them",
		Long: `dev prints what ibv_devinfo prints for a Linux Soft-RoCE (rxe) device, in the
same format: the device attributes (-v: all of them, ibv_query_device), then
its port's (ibv_query_port): state PORT_ACTIVE while the netdev is up and
running, else PORT_DOWN, and the active MTU the netdev's MTU allows (1500 →
1024). With -v the port's GID table follows, one "GID[  i]:" line per entry:
RoCE v2 entries in IPv6 notation, RoCE v1 entries as 16 hex bytes, as
ibv_devinfo shows them. The node GUID is the EUI-64 of the netdev's MAC.

Attributes goroce does not implement read 0 (multicast limits, memory
windows), so the numbers say what a goroce device accepts.

dev reads the registry and the netdevs only: it works while another process
runs the device.

The kernel's RDMA devices (a NIC's, Linux rxe) follow goroce's, read from
sysfs (/sys/class/infiniband) as ibv_devinfo would show them, with a line on
stderr marking each as the kernel's; -v adds their ports' attributes and GID
tables, but not the device attributes ibv_devinfo -v gets from the driver
(ibv_query_device), which sysfs does not hold. --kernel shows the kernel's
only, --kernel=false goroce's only.

-j prints rdma -j dev show's objects instead, with "kernel" true or false.`,
		Example: `  roce dev
  roce dev -v -d rxe0
  roce dev -l                # like ibv_devices
  roce dev -j --kernel       # like rdma -j dev show`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.list {
				return devices(cmd, o.device)
			}
			if o.json {
				return devJSON(cmd, o.device)
			}
			return devinfo(cmd, o)
		},
	}
	addKernelFlag(cmd)
	f := cmd.Flags()
	f.BoolVarP(&o.json, "json", "j", false, "print rdma -j dev show's JSON objects")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "print all the attributes of the device(s) and the GID table")
	f.StringVarP(&o.device, "ib-dev", "d", "", "show device `NAME` only (default: every device)")
	f.IntVarP(&o.port, "ib-port", "i", 0, "show port `PORT` only (goroce devices have port 1)")
	f.BoolVarP(&o.list, "list", "l", false, "list the devices and their node GUIDs, as ibv_devices does")
	flagRange(cmd, "ib-port", 1, 255, "the port number", "(goroce devices have port 1)")
	return cmd
}

func newDevicesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List devices and their node GUIDs, as ibv_devices prints them",
		Long: `devices lists goroce's devices and then the kernel's, as ibv_devices does: the
name and the node GUID; a kernel device's line ends with a third column,
"kernel".`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return devices(cmd, "")
		},
	}
	addKernelFlag(cmd)
	return cmd
}

// selection is what a listing command works on: goroce's devices (all,
// or the one named) and kernel devices.
type selection struct {
	goroce bool   // list goroce's devices
	name   string // the goroce device named, "" for all
	kdevs  []kernel.Device
}

// selectDevices resolves a command's -d NAME and --kernel.
func selectDevices(cmd *cobra.Command, op, name string) (selection, error) {
	if name != "" {
		isKernel, err := resolveDevice(cmd, op, name)
		if err != nil {
			return selection{}, err
		}
		if !isKernel {
			return selection{goroce: true, name: name}, nil
		}
		kd, err := kernelDevicesOf(cmd, op, name)
		return selection{kdevs: kd}, err
	}
	st := stackOf(cmd)
	sel := selection{goroce: st != stackKernel}
	if st != stackGoroce {
		var err error
		if sel.kdevs, err = kernelDevicesOf(cmd, op, ""); err != nil {
			return sel, err
		}
	}
	return sel, nil
}

// eachDevice calls fn for the device name (every device when name is
// empty) with its netdev, read in the device's namespace. A device whose
// netdev cannot be read is reported on stderr and skipped; the error
// returned then counts them. Output to out is flushed before stderr is
// written, so the two stay in order on a terminal.
func eachDevice(cmd *cobra.Command, op, name string, out *bufio.Writer, withGIDs bool,
	fn func(def host.DeviceDef, nd host.Netdev, gids []verbs.GIDEntry) error) error {
	reg, dir := registryOf(cmd)
	defs, err := devicesOf(reg, dir, op, name)
	if err != nil {
		return err
	}
	failed := 0
	for _, def := range defs {
		var (
			nd   host.Netdev
			gids []verbs.GIDEntry
			err  error
		)
		if withGIDs {
			gids, nd, err = reg.GIDTableOf(def)
		} else {
			nd, err = host.LookupNetdevIn(def.Netns, def.Netdev)
		}
		if err == nil {
			err = fn(def, nd, gids)
		}
		if err != nil {
			out.Flush()
			fmt.Fprintf(cmd.ErrOrStderr(), "roce: %s: %v\n", def.Name, netdevError(def, err))
			failed++
		}
	}
	if failed > 0 {
		if len(defs) == 1 {
			return fmt.Errorf("%s: device %s could not be read", op, defs[0].Name)
		}
		return fmt.Errorf("%s: %d of %d devices could not be read", op, failed, len(defs))
	}
	return nil
}

func devinfo(cmd *cobra.Command, o devOptions) error {
	sel, err := selectDevices(cmd, "dev", o.device)
	if err != nil {
		return err
	}
	if o.port > 1 && sel.goroce {
		if sel.name != "" || len(sel.kdevs) == 0 {
			return &errnoError{op: "dev", errno: syscall.EINVAL,
				detail: fmt.Sprintf("port %d: goroce devices have one port, port 1", o.port)}
		}
		sel.goroce = false // -i 2 shows the kernel devices that have a port 2
	}
	reg, dir := registryOf(cmd)
	if sel.goroce && sel.name == "" {
		if defs, err := reg.List(); err == nil && len(defs) == 0 {
			sel.goroce = false
		}
	}
	if !sel.goroce && len(sel.kdevs) == 0 {
		// ibv_devinfo: "No IB devices found".
		return &errnoError{op: "dev", errno: syscall.ENODEV,
			detail: fmt.Sprintf("no devices in %s (add one: %s)", dir, linkAddSyntax)}
	}
	if o.port > 0 && o.device != "" && len(sel.kdevs) == 1 {
		if _, ok := sel.kdevs[0].Port(o.port); !ok {
			return &errnoError{op: "dev", errno: syscall.EINVAL,
				detail: fmt.Sprintf("%s has no port %d (its ports: %s)", o.device, o.port, sel.kdevs[0].PortNums())}
		}
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	if sel.goroce {
		err = eachDevice(cmd, "dev", sel.name, out, o.verbose, func(def host.DeviceDef, nd host.Netdev, gids []verbs.GIDEntry) error {
			writeDevinfo(out, def.Name, host.DeviceAttrOf(nd.MAC), host.PortAttrOf(nd), gids, o.verbose)
			return nil
		})
	}
	sys := sysfsOf(cmd)
	for _, d := range sel.kdevs {
		if _, ok := d.Port(o.port); o.port > 0 && !ok {
			continue
		}
		writeKernelDevinfo(out, sys, d, o.port, o.verbose)
		out.Flush()
		note := fmt.Sprintf("roce: dev: %s is the kernel's (driver %s), read from %s", d.Name, d.Driver, sys.ClassDir())
		if o.verbose {
			note += "; its device attributes (ibv_query_device) are not in sysfs: ibv_devinfo -v shows them"
		}
		fmt.Fprintln(cmd.ErrOrStderr(), note)
	}
	return err
}

func devices(cmd *cobra.Command, name string) error {
	sel, err := selectDevices(cmd, "devices", name)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	// ibv_devices: printf("    %-16s\t   node GUID\n", "device") ...
	fmt.Fprintf(out, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(out, "    %-16s\t----------------\n", "------")
	if sel.goroce {
		err = eachDevice(cmd, "devices", sel.name, out, false, func(def host.DeviceDef, nd host.Netdev, _ []verbs.GIDEntry) error {
			fmt.Fprintf(out, "    %-16s\t%016x\n", def.Name, host.NodeGUID(nd.MAC))
			return nil
		})
	}
	for _, d := range sel.kdevs {
		writeKernelDevice(out, d)
	}
	return err
}

// devJSON prints rdma -j dev show's objects: goroce's devices (ifindex
// their place in the registry), then the kernel's (the kernel's index).
func devJSON(cmd *cobra.Command, name string) error {
	sel, err := selectDevices(cmd, "dev", name)
	if err != nil {
		return err
	}
	var rows []jsonRow
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	if sel.goroce {
		reg, _ := registryOf(cmd)
		all, _ := reg.List()
		pos := map[string]int{}
		for i, d := range all {
			pos[d.Name] = i
		}
		err = eachDevice(cmd, "dev", sel.name, out, false, func(def host.DeviceDef, nd host.Netdev, _ []verbs.GIDEntry) error {
			g := guidString(host.NodeGUID(nd.MAC))
			rows = append(rows, jsonRow{{"ifindex", pos[def.Name]}, {"ifname", def.Name}, {"node_type", "ca"},
				{"node_guid", g}, {"sys_image_guid", g}, {"kernel", false}})
			return nil
		})
	}
	all, _ := kernelDevicesOf(cmd, "dev", "")
	idx := kernelIndexes(cmd, all)
	for _, d := range sel.kdevs {
		rows = append(rows, kernelDevRow(idx[d.Name], d))
	}
	if werr := writeJSONRows(out, rows); werr != nil {
		return werr
	}
	return err
}

// guidString formats a GUID as ibv_devinfo does: 5054:00ff:fec0:020b.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// deviceCapFlagNames are the IBV_DEVICE_* flags, in the order ibv_devinfo prints them.
var deviceCapFlagNames = []struct {
	bit  uint64
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"}, {1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"}, {1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"}, {1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

func atomicCapString(c int) string {
	switch c {
	case 0:
		return "ATOMIC_NONE"
	case 1:
		return "ATOMIC_HCA"
	case 2:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

// The numbers ibv_devinfo prints beside the port's physical state, width and speed.
var (
	physStateCodes   = map[string]int{"SLEEP": 1, "POLLING": 2, "DISABLED": 3, "LINK_UP": 5, "LINK_ERROR_RECOVERY": 6}
	activeWidthCodes = map[string]int{"1X": 1, "4X": 2, "8X": 4, "12X": 8, "2X": 16}
	activeSpeedCodes = map[string]int{"2.5 Gbps": 1, "5.0 Gbps": 2, "10.0 Gbps": 4, "14.0 Gbps": 16, "25.0 Gbps": 32, "50.0 Gbps": 64}
)

// gidTypeString is how ibv_devinfo names a GID type on an Ethernet port.
func gidTypeString(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "RoCE v1"
	}
	return "RoCE v2"
}

// writeDevinfo writes what ibv_devinfo [-v] writes for one device: the
// format strings are rdma-core's (libibverbs/examples/devinfo.c), checked
// against ibv_devinfo -v on Linux rxe in KERNEL-BEHAVIOUR.md.
func writeDevinfo(w io.Writer, name string, a verbs.DeviceAttr, p verbs.PortAttr, gids []verbs.GIDEntry, verbose bool) {
	pf := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	pf("hca_id:\t%s\n", name)
	pf("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	if a.FWVer != "" {
		pf("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	pf("\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	pf("\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	pf("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	pf("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	pf("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	pf("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		pf("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		pf("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		pf("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		pf("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		pf("\tdevice_cap_flags:\t\t0x%08x\n", a.DeviceCapFlags)
		known := uint64(0)
		for _, f := range deviceCapFlagNames {
			known |= f.bit
			if a.DeviceCapFlags&f.bit != 0 {
				pf("\t\t\t\t\t%s\n", f.name)
			}
		}
		if u := a.DeviceCapFlags & 0xffffffff &^ known; u != 0 {
			pf("\t\t\t\t\tUnknown flags: 0x%X\n", u)
		}
		pf("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		pf("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERD)
		pf("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		pf("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		pf("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		pf("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		pf("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		pf("\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEERdAtom)
		pf("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		pf("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		pf("\tmax_ee_init_rd_atom:\t\t%d\n", a.MaxEEInitRdAtom)
		pf("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapString(a.AtomicCap), a.AtomicCap)
		pf("\tmax_ee:\t\t\t\t%d\n", a.MaxEE)
		pf("\tmax_rdd:\t\t\t%d\n", a.MaxRDD)
		pf("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		// goroce has no raw QPs: these read 0.
		pf("\tmax_raw_ipv6_qp:\t\t%d\n", 0)
		pf("\tmax_raw_ethy_qp:\t\t%d\n", 0)
		pf("\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
		pf("\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
		pf("\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
		pf("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		pf("\tmax_fmr:\t\t\t%d\n", 0)
		pf("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			pf("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			pf("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		pf("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		pf("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCAAckDelay)
		pf("\tgeneral_odp_caps:\n")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			pf("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
		}
		pf("\tcompletion_timestamp_mask not supported\n")
		pf("\tcore clock not supported\n")
		pf("\tdevice_cap_flags_ex:\t\t0x%X\n", a.DeviceCapFlags)
		pf("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n")
		pf("\trss_caps:\n")
		pf("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
		pf("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		pf("\t\trx_hash_function:\t\t\t\t0x0\n")
		pf("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		pf("\tmax_wq_type_rq:\t\t\t0\n")
		// ibv_devinfo names UD and raw-packet QPs and prints the rest of
		// supported_qpts as unknown flags: here RC and UC (1<<2 | 1<<3).
		pf("\tpacket_pacing_caps:\n\t\tqp_rate_limit_min:\t%dkbps\n\t\tqp_rate_limit_max:\t%dkbps\n",
			verbs.RateLimitMinKbps, verbs.RateLimitMaxKbps)
		pf("\t\tsupported_qp:\n\t\t\t\t\tSUPPORT_UD\n\t\t\t\t\tUnknown flags: 0xC\n")
		pf("\ttag matching not supported\n")
		pf("\tnum_comp_vectors:\t\t%d\n", 1)
	}
	pf("\t\tport:\t%d\n", 1)
	pf("\t\t\tstate:\t\t\t%s (%d)\n", p.State, uint8(p.State))
	pf("\t\t\tmax_mtu:\t\t%s (%d)\n", p.MaxMTU, uint8(p.MaxMTU))
	pf("\t\t\tactive_mtu:\t\t%s (%d)\n", p.ActiveMTU, uint8(p.ActiveMTU))
	pf("\t\t\tsm_lid:\t\t\t%d\n", 0)
	pf("\t\t\tport_lid:\t\t%d\n", 0)
	pf("\t\t\tport_lmc:\t\t0x%02x\n", 0)
	pf("\t\t\tlink_layer:\t\t%s\n", p.LinkLayer)
	if verbose {
		pf("\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSize)
		pf("\t\t\tport_cap_flags:\t\t0x%08x\n", p.PortCapFlags)
		pf("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
		pf("\t\t\tmax_vl_num:\t\t%s (%d)\n", "1", 1)
		pf("\t\t\tbad_pkey_cntr:\t\t0x%x\n", 0)
		pf("\t\t\tqkey_viol_cntr:\t\t0x%x\n", 0)
		pf("\t\t\tsm_sl:\t\t\t%d\n", 0)
		pf("\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTableLen)
		pf("\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTableLen)
		pf("\t\t\tsubnet_timeout:\t\t%d\n", 0)
		pf("\t\t\tinit_type_reply:\t%d\n", 0)
		pf("\t\t\tactive_width:\t\t%s (%d)\n", p.ActiveWidth, activeWidthCodes[p.ActiveWidth])
		pf("\t\t\tactive_speed:\t\t%s (%d)\n", p.ActiveSpeed, activeSpeedCodes[p.ActiveSpeed])
		pf("\t\t\tphys_state:\t\t%s (%d)\n", p.PhysState, physStateCodes[p.PhysState])
		for i, g := range gids {
			if !g.GID.IsValid() {
				continue
			}
			if g.Type == verbs.GIDTypeRoCEv1 {
				// devinfo.c prints RoCE v1 GIDs as raw bytes, v2 with inet_ntop.
				b := g.GID.As16()
				pf("\t\t\tGID[%3d]:\t\t%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x, %s\n", i,
					b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
					gidTypeString(g.Type))
				continue
			}
			pf("\t\t\tGID[%3d]:\t\t%s, %s\n", i, g.GID, gidTypeString(g.Type))
		}
	}
	pf("\n")
}
