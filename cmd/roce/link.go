package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/verbs"
)

// The control commands (link, dev, devices, gids) read the registry in
// --rundir and the netdevs; they never open a device's data path, so they
// work while another process runs the device.

// registryOf returns the registry in the --rundir directory.
func registryOf(cmd *cobra.Command) (*host.Registry, string) {
	dir, err := cmd.Flags().GetString("rundir")
	if err != nil || dir == "" {
		dir = host.RunDir()
	}
	return host.NewRegistry(dir), dir
}

// errnoError is a control-path failure told the way the kernel's tools
// tell it — the errno in strerror's words first (rdma link add: "error:
// File exists") — followed by goroce's explanation. It unwraps to the errno.
type errnoError struct {
	op     string // e.g. "link add rxe1"
	errno  syscall.Errno
	detail string
	cause  error // the error explained, when there was one: errors.As still finds its *os.PathError
}

func (e *errnoError) Error() string {
	s := e.op + ": " + strerror(e.errno)
	if e.detail != "" {
		s += ": " + e.detail
	}
	return s
}

func (e *errnoError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.errno}
	}
	return []error{e.errno, e.cause}
}

// strerror is the C library's message for an errno ("No such device").
func strerror(e syscall.Errno) string {
	s := e.Error()
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// opError reports err of op: an error that carries an errno becomes an
// errnoError (the errno moves to the front, explain gives the rest);
// others are prefixed with op.
func opError(op string, err error) error {
	errno, detail, ok := explain(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &errnoError{op: op, errno: errno, detail: detail, cause: err}
}

// explain returns the errno err carries and what it says besides, read
// from the fields of the typed errors on its chain, never from its text:
// a *verbs.Error (package verbs, host, rdmacm) gives its Detail; a
// *config.Error its Detail, else its operation and path; a *kernel.Error
// its Detail, else its operation; an *os.PathError its operation and
// path; an *os.SyscallError its system call; a *rundir.UnsafeError its
// message (which holds no errno); an error that joins several
// (errors.Join) each non-errno member's message. ok is false when the
// chain holds no errno, or passes through an error of another type (a fmt
// wrapper), whose message is all that is known of the rest: the caller
// then shows err whole.
func explain(err error) (errno syscall.Errno, detail string, ok bool) {
	var parts []string
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	for err != nil {
		switch e := err.(type) {
		case syscall.Errno:
			return e, strings.Join(parts, ": "), true
		case *verbs.Error:
			add(e.Detail)
			err = e.Err
		case *config.Error:
			add(cmp.Or(e.Detail, e.Op+" "+e.Path))
			err = e.Err
		case *kernel.Error:
			add(cmp.Or(e.Detail, e.Op))
			err = e.Err
		case *os.PathError:
			add(e.Op + " " + e.Path)
			err = e.Err
		case *os.SyscallError:
			add(e.Syscall)
			err = e.Err
		case *rundir.UnsafeError:
			add(e.Error())
			var x syscall.Errno
			errors.As(e, &x) // EPERM
			return x, strings.Join(parts, ": "), x != 0
		case *errnoError:
			return 0, "", false // already told: the caller shows it whole
		case interface{ Unwrap() []error }:
			var found syscall.Errno
			for _, m := range e.Unwrap() {
				if x, isErrno := m.(syscall.Errno); isErrno && found == 0 {
					found = x
				} else {
					add(m.Error())
				}
			}
			return found, strings.Join(parts, ": "), found != 0
		default:
			return 0, "", false
		}
	}
	return 0, "", false
}

// noDevice is the error for a device name the registry does not hold; it
// names the runtime directory, the usual culprit (sudo drops GOROCE_RUNDIR).
func noDevice(op, name, dir string) error {
	return &errnoError{op: op, errno: syscall.ENODEV,
		detail: fmt.Sprintf("no device %s in %s (roce link show lists the devices there)", name, dir)}
}

// getDevice returns the definition of name, or noDevice.
func getDevice(reg *host.Registry, dir, op, name string) (host.DeviceDef, error) {
	def, err := reg.Get(name)
	if errors.Is(err, syscall.ENODEV) {
		return def, noDevice(op, name, dir)
	}
	if err != nil {
		return def, opError(op, err)
	}
	return def, nil
}

// devicesOf returns the device name, or every device when name is empty.
func devicesOf(reg *host.Registry, dir, op, name string) ([]host.DeviceDef, error) {
	if name != "" {
		def, err := getDevice(reg, dir, op, name)
		if err != nil {
			return nil, err
		}
		return []host.DeviceDef{def}, nil
	}
	defs, err := reg.List()
	if err != nil {
		return nil, opError(op, err)
	}
	return defs, nil
}

const linkAddSyntax = "roce link add NAME type rxe netdev NETDEV [roce-versions v1|v2|both] [rx-path ring|socket|xdp]"

func newLinkCmd() *cobra.Command {
	var details, jsonOut bool
	cmd := &cobra.Command{
		Use:   "link",
		Short: "Add, delete and show RDMA links (soft RoCE devices on netdevs), like rdma link",
		Long: `link manages goroce's soft RoCE devices the way iproute2's rdma link manages
Linux Soft-RoCE: a device is bound to a netdev of a network namespace and
speaks RoCE over it. The definitions live in the runtime directory (--rundir);
a device's data path runs in the process that opens it.

With --kernel, add and delete make and remove the kernel's own Soft-RoCE
(rdma_rxe) links instead, over RDMA netlink as rdma link add/delete does.
show lists the kernel's links after goroce's, each line ending "kernel".

Without a subcommand, link shows the links.`,
		Example: `  roce link add rxe0 type rxe netdev eth0
  roce link add rxe1 type rxe netdev eth1 roce-versions v2
  roce link add rxe2 type rxe netdev eth2 roce-versions v2 rx-path socket
  roce link                      # = roce link show
  roce link show -d rxe0         # with netns, RoCE versions and the owning process
  roce link delete rxe0
  roce link add rxe9 type rxe netdev eth1 --kernel   # = rdma link add rxe9 type rxe netdev eth1`,
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			return linkShow(cmd, "", details, jsonOut)
		},
	}
	detailsFlag := func(c *cobra.Command) {
		c.Flags().BoolVarP(&details, "details", "d", false,
			"show goroce's extras at the end of each line: netns, roce_versions, rx_path (when set) and owner (the PID running the device); "+
				"for a kernel device, netdev_index and driver")
		c.Flags().BoolVarP(&jsonOut, "json", "j", false, "print rdma -j link show's JSON objects, with \"kernel\" true or false")
		addKernelFlag(c)
	}
	detailsFlag(cmd)

	add := &cobra.Command{
		Use:   "add NAME type rxe netdev NETDEV [roce-versions v1|v2|both] [rx-path ring|socket|xdp]",
		Short: "Add a soft RoCE device on a netdev of this network namespace",
		Long: `add records a soft RoCE device NAME bound to NETDEV, a netdev of the
caller's network namespace (run it inside the namespace: ip netns exec NS
roce link add ...). The arguments are keywords, as rdma link add takes them.

roce-versions says which RoCE versions the port speaks: v2 (RoCE v2 over
UDP port 4791, like Linux rxe), v1 (RoCE v1, Ethertype 0x8915, like an mlx4
port) or both (the default): the port's GID table then holds a RoCE v1 and a
RoCE v2 entry per address, as on mlx5. RoCE v1 needs root to run.

rx-path says how a RoCE v2-only port (roce-versions v2) reads its packets:
ring (the default as root) reads them from the netdev with an AF_PACKET
socket and its ring, where a busy-polling program's look is a load, not a
system call: the lowest latency. socket (the default, and the only path,
without root) reads them from the port's UDP socket with UDP GRO; but a
UDP socket never shows a packet's IPv4 Identification, which the ICRC
covers, so over IPv4 socket verifies the ICRC to 16 of its 32 bits, where
ring verifies all of them. Before Linux 6.2 the kernel cannot give a packet
socket a GRO superpacket: on a netdev of Ethernet's MTU the ring's frames
hold each packet whole and both paths moved bulk data alike in the lab's
6.1 VMs; on a jumbo MTU there only socket coalesces. xdp (root only) reads
them through an AF_XDP socket that an XDP program on NETDEV feeds: the
packet skips the kernel's receive path up to the taps, the least kernel
time per packet (halved against ring's in the lab's virtio-net VMs), and
a look is a load, as with ring; but the program owns NETDEV's XDP hook
(one process per netdev), reads its receive queue 0 (ethtool -L NETDEV
combined 1), holds frames of MTU 3826 at most, and puts the driver in XDP
mode for all of NETDEV's traffic; on a driver without XDP (the kernel's
generic mode) a GSO or GRO superpacket fits no frame and is dropped
(rx_drop_socket_full in roce stat). The ports of one connection may differ.

A netdev has at most one device (the kernel: "rdma_rxe: already configured
on eth0"), and names are unique: either is EEXIST. The runtime directory is
created if missing.`,
		Example: `  roce link add rxe0 type rxe netdev eth0
  ip netns exec blue roce link add rxe1 type rxe netdev veth1 roce-versions v2
  roce link add rxe2 type rxe netdev eth2 roce-versions v2 rx-path socket
  roce link add rxe3 type rxe netdev eth3 roce-versions v2 rx-path xdp`,
		Args: usageArgs(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stackOf(cmd) == stackKernel {
				return kernelLinkAdd(cmd, args)
			}
			a, err := parseLinkAdd(args)
			if err != nil {
				return usageError{err}
			}
			return linkAdd(cmd, a)
		},
	}
	add.Flags().Bool("kernel", false, "add a link of the kernel (rdma_rxe or siw) over RDMA netlink, as rdma link add does")
	del := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"del"},
		Short:   "Delete a soft RoCE device",
		Long: `delete removes the device NAME from the registry. It refuses (EBUSY) while a
process runs the device, and names that process.`,
		Example: "  roce link delete rxe0\n  roce link delete rxe9 --kernel   # = rdma link delete rxe9",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if stackOf(cmd) == stackKernel {
				return kernelErr("link delete "+args[0], kernel.LinkDelete(sysfsOf(cmd), args[0]))
			}
			return linkDelete(cmd, args[0])
		},
	}
	del.Flags().Bool("kernel", false, "delete a link of the kernel (rdma_rxe or siw) over RDMA netlink, as rdma link delete does")
	show := &cobra.Command{
		Use:   "show [NAME]",
		Short: "Show links, as rdma link show prints them",
		Long: `show prints one line per device, as rdma link show does for Linux rxe:

  link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0

The port is ACTIVE (LINK_UP) while its netdev is up and running, else DOWN
(DISABLED), read from the netdev in the device's namespace. With -d the line
ends with goroce's extras: netns NAME roce_versions v1|v2|both, rx_path
ring|socket|xdp when the device was added with one and, while a process runs
the device, owner PID.`,
		Example: `  roce link show
  roce link show -d rxe0`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return linkShow(cmd, name, details, jsonOut)
		},
	}
	detailsFlag(show)
	cmd.AddCommand(add, del, show)
	return cmd
}

type linkAddArgs struct {
	name     string
	typ      string
	netdev   string
	versions host.Versions
	rx       host.RxPath
}

// parseLinkAdd parses NAME type rxe netdev NETDEV [roce-versions V] [rx-path P]; the
// keywords may come in any order after NAME, each once.
func parseLinkAdd(args []string) (linkAddArgs, error) {
	var a linkAddArgs
	isKeyword := func(s string) bool {
		return s == "type" || s == "netdev" || s == "roce-versions" || s == "rx-path"
	}
	if len(args) == 0 || isKeyword(args[0]) {
		return a, fmt.Errorf("link add: the device name comes first: %s", linkAddSyntax)
	}
	a.name = args[0]
	if err := host.ValidName(a.name); err != nil {
		return a, opError("link add", err)
	}
	seen := map[string]bool{}
	for i := 1; i < len(args); i += 2 {
		kw := args[i]
		if !isKeyword(kw) {
			return a, fmt.Errorf("link add %s: unknown keyword %q: %s", a.name, kw, linkAddSyntax)
		}
		if seen[kw] {
			return a, fmt.Errorf("link add %s: keyword %q given twice", a.name, kw)
		}
		seen[kw] = true
		if i+1 == len(args) {
			return a, fmt.Errorf("link add %s: keyword %q needs a value: %s", a.name, kw, linkAddSyntax)
		}
		v := args[i+1]
		switch kw {
		case "type":
			if v != "rxe" {
				return a, &errnoError{op: "link add " + a.name, errno: syscall.EINVAL,
					detail: fmt.Sprintf("link type %q: goroce makes soft RoCE devices, type rxe", v)}
			}
			a.typ = v
		case "netdev":
			a.netdev = v
		case "roce-versions":
			ver, err := host.ParseVersions(v)
			if v == "" { // ParseVersions takes "" for the default; a keyword needs a value
				return a, &errnoError{op: "link add " + a.name, errno: syscall.EINVAL,
					detail: fmt.Sprintf("roce-versions %q: valid values are v1, v2 and both", v)}
			}
			if err != nil {
				return a, opError("link add "+a.name, err)
			}
			a.versions = ver
		case "rx-path":
			p, err := host.ParseRxPath(v)
			if err != nil {
				return a, opError("link add "+a.name, err)
			}
			a.rx = p
		}
	}
	switch {
	case !seen["type"]:
		return a, fmt.Errorf("link add %s: missing \"type rxe\": %s", a.name, linkAddSyntax)
	case !seen["netdev"]:
		return a, fmt.Errorf("link add %s: missing \"netdev NETDEV\": %s", a.name, linkAddSyntax)
	}
	if a.versions == "" {
		a.versions = host.VersionsBoth
	}
	if err := host.CheckRxPath(a.versions, a.rx); err != nil {
		return a, opError("link add "+a.name, err)
	}
	return a, nil
}

func linkAdd(cmd *cobra.Command, a linkAddArgs) error {
	op := "link add " + a.name
	reg, _ := registryOf(cmd)
	ns, err := host.CurrentNetns()
	if err != nil {
		return opError(op, fmt.Errorf("reading this thread's network namespace: %w", err))
	}
	if _, err := host.LookupNetdevIn(ns, a.netdev); err != nil {
		if errors.Is(err, syscall.ENODEV) {
			return &errnoError{op: op, errno: syscall.ENODEV,
				detail: fmt.Sprintf("netdev %s not found in this network namespace (%v); ip link lists its netdevs", a.netdev, ns)}
		}
		return opError(op, err)
	}
	def := host.DeviceDef{Name: a.name, Type: a.typ, Netdev: a.netdev, Netns: ns, Versions: a.versions, Rx: a.rx, Created: time.Now()}
	if err := reg.Add(def); err != nil {
		return opError(op, err)
	}
	return nil
}

func linkDelete(cmd *cobra.Command, name string) error {
	op := "link delete " + name
	reg, dir := registryOf(cmd)
	if _, err := getDevice(reg, dir, op, name); err != nil {
		if stackOf(cmd) != stackGoroce && sysfsOf(cmd).Has(name) {
			return &errnoError{op: op, errno: syscall.ENODEV,
				detail: fmt.Sprintf("no goroce device %s in %s; %s is the kernel's: roce link delete %s --kernel", name, dir, name, name)}
		}
		return err
	}
	if ow, busy := reg.OwnerOf(name); busy {
		who := fmt.Sprintf("process %d", ow.PID)
		if ow.Command != "" {
			who += " (" + ow.Command + ")"
		}
		return &errnoError{op: op, errno: syscall.EBUSY,
			detail: fmt.Sprintf("%s runs %s; stop it first", who, name)}
	}
	if err := reg.Delete(name); err != nil {
		if errors.Is(err, syscall.ENODEV) {
			return noDevice(op, name, dir)
		}
		return opError(op, err)
	}
	return nil
}

// linkState is what rdma link show says of a port.
type linkState struct {
	state, physState string
}

func linkStateOf(nd host.Netdev) linkState {
	if host.PortUp(nd) {
		return linkState{"ACTIVE", "LINK_UP"}
	}
	return linkState{"DOWN", "DISABLED"}
}

// writeLink writes one line of rdma link show (with its trailing space, as
// iproute2 prints it); with details, goroce's extras end the line.
func writeLink(w io.Writer, def host.DeviceDef, st linkState, details bool, owner *host.Owner) {
	fmt.Fprintf(w, "link %s/1 state %s physical_state %s netdev %s ", def.Name, st.state, st.physState, def.Netdev)
	if details {
		fmt.Fprintf(w, "netns %v roce_versions %s ", def.Netns, def.Versions)
		if def.Rx != host.RxDefault {
			fmt.Fprintf(w, "rx_path %s ", def.Rx)
		}
		if owner != nil {
			fmt.Fprintf(w, "owner %d ", owner.PID)
		}
	}
	fmt.Fprintln(w)
}

func linkShow(cmd *cobra.Command, name string, details, jsonOut bool) error {
	sel, err := selectDevices(cmd, "link show", name)
	if err != nil {
		return err
	}
	reg, dir := registryOf(cmd)
	var defs []host.DeviceDef
	if sel.goroce {
		if defs, err = devicesOf(reg, dir, "link show", sel.name); err != nil {
			return err
		}
	}
	all, _ := reg.List()
	pos := map[string]int{}
	for i, d := range all {
		pos[d.Name] = i
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	var rows []jsonRow
	for _, def := range defs {
		st := linkState{"DOWN", "DISABLED"}
		nd, err := host.LookupNetdevIn(def.Netns, def.Netdev)
		if err == nil {
			st = linkStateOf(nd)
		} else {
			// The device stays listed (so it can be deleted); its port is down.
			out.Flush()
			fmt.Fprintf(cmd.ErrOrStderr(), "roce: %s: port down: %v\n", def.Name, netdevError(def, err))
		}
		var owner *host.Owner
		if ow, ok := reg.OwnerOf(def.Name); ok {
			owner = &ow
		}
		if !jsonOut {
			writeLink(out, def, st, details, owner)
			continue
		}
		r := jsonRow{{"ifindex", pos[def.Name]}, {"ifname", def.Name}, {"port", 1}, {"state", st.state},
			{"physical_state", st.physState}, {"netdev", def.Netdev}, {"netdev_index", nd.Index}, {"kernel", false}}
		if details {
			r = append(r, kv{"netns", def.Netns.String()}, kv{"roce_versions", string(def.Versions)})
			if def.Rx != host.RxDefault {
				r = append(r, kv{"rx_path", string(def.Rx)})
			}
			if owner != nil {
				r = append(r, kv{"owner", owner.PID})
			}
		}
		rows = append(rows, r)
	}
	for _, l := range kernelLinks(cmd, sel.kdevs) {
		if jsonOut {
			rows = append(rows, kernelLinkRow(l))
		} else {
			writeKernelLink(out, l, details)
		}
	}
	if jsonOut {
		return writeJSONRows(out, rows)
	}
	return nil
}

// netdevError explains why a device's netdev could not be read.
func netdevError(def host.DeviceDef, err error) error {
	if errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("netdev %s not found in network namespace %v: %w", def.Netdev, def.Netns, syscall.ENODEV)
	}
	return err
}
