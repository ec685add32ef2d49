package main

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/wire"
)

// mode and tos are mlnx-tools' cma_roce_mode and cma_roce_tos: they show
// or set what RDMA CM uses on a port (the rdma_cm configfs attributes
// default_roce_mode and default_roce_tos), without the configfs directory
// the scripts make and remove around it.

// portFlags are the -d and -p of cma_roce_mode and cma_roce_tos.
type portFlags struct {
	device string
	port   int
}

func (p *portFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&p.device, "device", "d", "", "use device `DEV` (required; roce link show lists them)")
	cmd.Flags().IntVarP(&p.port, "port", "p", 1, "use port `PORT` of the device (goroce devices have port 1)")
	flagRange(cmd, "port", 1, 255, "the port number", "(goroce devices have port 1)")
}

func (p *portFlags) check(op string) error {
	if p.device == "" {
		return usageError{fmt.Errorf("%s: which device? -d DEV is required (roce link show lists the devices)", op)}
	}
	if p.port < 1 {
		return usageError{fmt.Errorf("%s: -p %d: ports are numbered from 1", op, p.port)}
	}
	return nil
}

// treeError reports a config error of op on device dev: the kernel's
// errno first, then goroce's explanation.
func treeError(cmd *cobra.Command, op, dev string, err error) error {
	if errors.Is(err, syscall.ENODEV) {
		_, dir := registryOf(cmd)
		return noDevice(op, dev, dir)
	}
	return opError(op, err)
}

func newModeCmd() *cobra.Command {
	var (
		p    portFlags
		mode string
	)
	cmd := &cobra.Command{
		Use:   "mode -d DEV [-p PORT] [-m 1|2]",
		Short: "Show or set the RoCE mode RDMA CM uses on a port, as cma_roce_mode does",
		Long: `mode shows the RoCE mode rdma_cm applications use on a port of a device — the
rdma_cm configfs attribute default_roce_mode — as mlnx-tools' cma_roce_mode
does: "RoCE v2" or "IB/RoCE v1". With -m it sets it first: -m 1 for
IB/RoCE v1, -m 2 for RoCE v2; a port takes only a version it speaks (roce link
add … roce-versions): a v2-only port, like Linux rxe, refuses -m 1.

A port starts in RoCE v2 if it speaks it, else in RoCE v1, and keeps what is
set until the device is deleted or the host restarts. No configfs directory
is needed (roce configfs mount shows the same value).

On a kernel device (a NIC's, Linux rxe: roce dev --kernel lists them) mode
performs the kernel's procedure, as cma_roce_mode does: it mounts configfs at
/sys/kernel/config if it is not, loads rdma_cm if its tree is missing (saying
so), makes rdma_cm/DEV if missing, writes and reads back
ports/PORT/default_roce_mode, and removes rdma_cm/DEV only if it made it (the
kernel keeps the value). A refusal says why: rxe speaks RoCE v2 only, the
port does not exist, root is needed. The kernel keeps the value until the
host restarts; --persist also writes what sets it again at boot — a udev
rule on the device's add event where udev runs, else an enabled systemd
unit — showing it first; --persist=false removes it. Without udev or
systemd it says what to run at boot.

-j prints [{"ifname":…,"port":…,"default_roce_mode":…,"kernel":…}].`,
		Example: `  roce mode -d rxe0           # RoCE v2
  roce mode -d rxe0 -p 1 -m 1 # use RoCE v1 for new rdma_cm connections
  roce mode -d mlx5_0 -m 1 --persist   # the kernel's device, also after reboots`,
		Args: argsWithFix(cobra.NoArgs, "the device goes with -d: roce mode -d DEV [-p PORT] [-m 1|2]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.check("mode"); err != nil {
				return err
			}
			var m wire.Version
			set := cmd.Flags().Changed("mode")
			if set {
				switch mode {
				case "1":
					m = wire.RoCEv1
				case "2":
					m = wire.RoCEv2
				default:
					return usageError{fmt.Errorf("mode: -m %q: the modes are 1 (IB/RoCE v1) and 2 (RoCE v2)", mode)}
				}
			}
			isKernel, err := resolveDevice(cmd, "mode", p.device)
			if err != nil {
				return err
			}
			if isKernel {
				return kernelMode(cmd, p, set, m)
			}
			if err := goroceNoPersist(cmd, "mode"); err != nil {
				return err
			}
			_, dir := registryOf(cmd)
			tree := configTree(dir)
			if set {
				if err := tree.SetDefaultMode(p.device, p.port, m); err != nil {
					if errors.Is(err, syscall.EINVAL) && p.port == 1 {
						return modeRefused(cmd, p.device, m, err)
					}
					return treeError(cmd, "mode", p.device, err)
				}
			}
			m, err = tree.DefaultMode(p.device, p.port)
			if err != nil {
				return treeError(cmd, "mode", p.device, err)
			}
			return printSetting(cmd, p, config.AttrMode, config.FormatMode(m), config.ModeName(m), false)
		},
	}
	p.add(cmd)
	cmd.Flags().StringVarP(&mode, "mode", "m", "", "set `MODE` first: 1 (IB/RoCE v1) or 2 (RoCE v2)")
	addSettingFlags(cmd)
	return cmd
}

// modeRefused says which -m a port takes when it refuses m.
func modeRefused(cmd *cobra.Command, dev string, m wire.Version, err error) error {
	reg, _ := registryOf(cmd)
	def, gerr := reg.Get(dev)
	v, verr := host.ParseVersions(string(def.Versions))
	if gerr != nil || verr != nil {
		return treeError(cmd, "mode", dev, err)
	}
	valid := "its only mode is 2 (RoCE v2)"
	switch {
	case v.V1() && v.V2():
		valid = "its modes are 1 (IB/RoCE v1) and 2 (RoCE v2)"
	case v.V1():
		valid = "its only mode is 1 (IB/RoCE v1)"
	}
	return &errnoError{op: "mode", errno: syscall.EINVAL,
		detail: fmt.Sprintf("%s port 1 does not speak %s (roce-versions %s): %s", dev, config.ModeName(m), v, valid)}
}

func newTOSCmd() *cobra.Command {
	var (
		p   portFlags
		tos string
	)
	cmd := &cobra.Command{
		Use:   "tos -d DEV [-p PORT] [-t TOS]",
		Short: "Show or set the IP ToS RDMA CM uses on a port, as cma_roce_tos does",
		Long: `tos shows the type of service rdma_cm applications give new connections on a
port of a device — the rdma_cm configfs attribute default_roce_tos — as
mlnx-tools' cma_roce_tos does. With -t it sets it first: 0 to 255, in decimal,
hex (0x6a) or octal (0152), as the kernel reads the attribute; 106 (0x6a) is
DSCP 26 (AF31) with ECN ECT(0).

The ToS starts at 0 and keeps what is set until the device is deleted or the
host restarts. No configfs directory is needed.

On a kernel device tos performs the kernel's configfs procedure, as
cma_roce_tos does, and takes --persist, as roce mode does (see roce mode
--help).`,
		Example: `  roce tos -d rxe0            # 0
  roce tos -d rxe0 -t 106     # DSCP 26 (AF31), ECT(0)`,
		Args: argsWithFix(cobra.NoArgs, "the device goes with -d: roce tos -d DEV [-p PORT] [-t TOS]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.check("tos"); err != nil {
				return err
			}
			set := cmd.Flags().Changed("tos")
			var v uint8
			if set {
				var err error
				v, err = config.ParseTOS([]byte(tos))
				if err != nil {
					return usageError{&errnoError{op: "tos", errno: config.Errno(err),
						detail: fmt.Sprintf("-t %q: the ToS is 0..255, in decimal, 0x hex or 0 octal", tos)}}
				}
			}
			isKernel, err := resolveDevice(cmd, "tos", p.device)
			if err != nil {
				return err
			}
			if isKernel {
				return kernelTOS(cmd, p, set, v)
			}
			if err := goroceNoPersist(cmd, "tos"); err != nil {
				return err
			}
			_, dir := registryOf(cmd)
			tree := configTree(dir)
			if set {
				if err := tree.SetDefaultTOS(p.device, p.port, v); err != nil {
					return treeError(cmd, "tos", p.device, err)
				}
			}
			v, err = tree.DefaultTOS(p.device, p.port)
			if err != nil {
				return treeError(cmd, "tos", p.device, err)
			}
			return printSetting(cmd, p, config.AttrTOS, config.FormatTOS(v), v, false)
		},
	}
	p.add(cmd)
	cmd.Flags().StringVarP(&tos, "tos", "t", "", "set the ToS first: `TOS` is 0..255 (decimal, 0x hex or 0 octal)")
	addSettingFlags(cmd)
	return cmd
}

// configTree is the rdma_cm tree of the runtime directory dir, whose
// device registry says which devices exist.
func configTree(dir string) *config.Tree { return config.Open(dir, host.NewRegistry(dir)) }
