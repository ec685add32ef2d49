package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/verbs"
)

type gidsOptions struct {
	device string
	port   int
	json   bool
}

func newGIDsCmd() *cobra.Command {
	var o gidsOptions
	cmd := &cobra.Command{
		Use:   "gids [-d DEV] [-p PORT]",
		Short: "Show GID tables, as show_gids does, and which GID index to use",
		Long: `gids prints the ports' GID tables exactly as show_gids (mlnx-tools) does: its
header and separator lines, one line per GID entry, then n_gids_found=N, so
what parses show_gids' output parses this.

A line is DEV, PORT, INDEX, GID, IPv4, VER and DEV (the GID's netdev),
separated by tabs. GID is in the form sysfs gives it (gids/N:
0000:0000:0000:0000:0000:ffff:c000:0201 for 192.0.2.1). IPv4 is the address
of an IPv4-mapped GID followed by two spaces, and empty for other GIDs, as
show_gids prints them: split on whitespace, a line has 7 fields with an
IPv4 address and 6 without (VER is then the 5th). VER is v1 (RoCE v1) or v2
(RoCE v2).

After the table, a line per port on stderr (stdout stays parsable) says
which GID index to use: the one perftest takes with -x and the
ibv_*_pingpong examples with -g (rdma_cm applications choose by themselves).

While a process runs a device, its table is the one that process
publishes; otherwise it is computed from the netdev's addresses.

The kernel's RDMA devices (a NIC's, Linux rxe) follow goroce's, every port,
their tables read from sysfs as show_gids reads them (gids/N,
gid_attrs/types/N, gid_attrs/ndevs/N); their lines on stderr say "(kernel)".
--kernel shows the kernel's only, --kernel=false goroce's only.

-j prints a JSON array of the lines instead, one object each, keyed by
show_gids' columns (ifname, port, index, gid, ipv4, ver, netdev) with
"kernel" true or false.`,
		Example: `  roce gids
  roce gids -d rxe0
  roce gids | awk '$6 == "v2" {print $3}'      # RoCE v2 over IPv4, as with show_gids`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 { // show_gids DEV
				if o.device != "" && o.device != args[0] {
					return usageError{fmt.Errorf("gids: two devices, -d %s and %s", o.device, args[0])}
				}
				o.device = args[0]
			}
			return gids(cmd, o)
		},
	}
	addKernelFlag(cmd)
	f := cmd.Flags()
	f.StringVarP(&o.device, "device", "d", "", "show device `DEV` only (default: every device)")
	f.IntVarP(&o.port, "port", "p", 0, "show port `PORT` only (goroce devices have port 1)")
	f.BoolVarP(&o.json, "json", "j", false, "print the lines as a JSON array")
	flagRange(cmd, "port", 1, 255, "the port number", "(goroce devices have port 1)")
	return cmd
}

// gidVersion is show_gids' VER column.
func gidVersion(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "v1"
	}
	return "v2"
}

// show_gids' header and separator, byte for byte (mlnx-tools' show_gids
// prints them with echo -e): the last column, the GID's netdev, is named
// DEV too.
const (
	gidsHeader    = "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV"
	gidsSeparator = "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"
)

func gids(cmd *cobra.Command, o gidsOptions) error {
	// A device that does not exist is an error and nothing else: no empty
	// table on stdout before it.
	sel, err := selectDevices(cmd, "gids", o.device)
	if err != nil {
		return err
	}
	if o.port > 1 && sel.goroce {
		if sel.name != "" || len(sel.kdevs) == 0 {
			return &errnoError{op: "gids", errno: syscall.EINVAL,
				detail: fmt.Sprintf("port %d: goroce devices have one port, port 1", o.port)}
		}
		sel.goroce = false // -p 2 shows the kernel devices' ports 2
	}
	if o.port > 0 && o.device != "" && len(sel.kdevs) == 1 {
		if _, ok := sel.kdevs[0].Port(o.port); !ok {
			return &errnoError{op: "gids", errno: syscall.EINVAL,
				detail: fmt.Sprintf("%s has no port %d (its ports: %s)", o.device, o.port, sel.kdevs[0].PortNums())}
		}
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	var rows []jsonRow
	if !o.json {
		fmt.Fprintln(out, gidsHeader)
		fmt.Fprintln(out, gidsSeparator)
	}
	n := 0
	var hints []string
	if sel.goroce {
		err = eachDevice(cmd, "gids", sel.name, out, true, func(def host.DeviceDef, nd host.Netdev, entries []verbs.GIDEntry) error {
			for i, e := range entries {
				ndev := e.Netdev
				if ndev == "" {
					ndev = def.Netdev
				}
				if line, ok := gidLine(def.Name, 1, i, e, ndev); ok {
					if o.json {
						rows = append(rows, gidRowJSON(def.Name, 1, i, e.GID, e.Type, ndev, false))
					} else {
						fmt.Fprintln(out, line)
					}
					n++
				}
			}
			hints = append(hints, gidHint(def, entries))
			return nil
		})
	}
	sys := sysfsOf(cmd)
	for _, d := range sel.kdevs {
		for _, p := range d.Ports {
			if o.port > 0 && p.Num != o.port {
				continue
			}
			table, kerr := sys.GIDs(d.Name, p.Num)
			if kerr != nil {
				out.Flush()
				fmt.Fprintf(cmd.ErrOrStderr(), "roce: %s: %v\n", d.Name, kerr)
				if err == nil {
					err = fmt.Errorf("gids: the GID table of %s port %d could not be read", d.Name, p.Num)
				}
				continue
			}
			for _, g := range table {
				line, ok := gidLine(d.Name, p.Num, g.Index, verbs.GIDEntry{GID: g.GID, Type: g.Type}, g.Netdev)
				if !ok {
					continue
				}
				if o.json {
					rows = append(rows, gidRowJSON(d.Name, p.Num, g.Index, g.GID, g.Type, g.Netdev, true))
				} else {
					fmt.Fprintln(out, line)
				}
				n++
			}
			hints = append(hints, kernelGIDHint(d, p.Num, table))
		}
	}
	if o.json {
		if werr := writeJSONRows(out, rows); werr != nil {
			return werr
		}
	} else {
		fmt.Fprintf(out, "n_gids_found=%d\n", n)
	}
	out.Flush()
	for _, h := range hints {
		fmt.Fprintln(cmd.ErrOrStderr(), h)
	}
	return err
}

// gidLine is show_gids' line for GID index i of a port, and whether
// show_gids shows it at all: it skips the all-zero GID (an empty slot) and
// fe80:: with a zero interface ID. The GID is in the sysfs form
// (/sys/class/infiniband/DEV/ports/P/gids/N: 8 groups of 4 hex digits);
// an IPv4-mapped GID's address follows with two spaces, as show_gids
// prints it, while other GIDs leave the column empty. So the lines split
// as show_gids' do: on whitespace, 7 fields with an IPv4 address and 6
// without; on tabs, always 7 and 8. (show_gids takes any GID whose first
// group is 0000 for IPv4-mapped, so it shows ::1 as 0.0.0.1; goroce only
// IPv4-mapped ones.)
func gidLine(dev string, port, i int, e verbs.GIDEntry, ndev string) (string, bool) {
	g := sysfsGID(e.GID)
	if !e.GID.IsValid() || g == "0000:0000:0000:0000:0000:0000:0000:0000" || g == "fe80:0000:0000:0000:0000:0000:0000:0000" {
		return "", false
	}
	if e.GID.Is4In6() {
		return fmt.Sprintf("%s\t%d\t%d\t%s\t%s  \t%s\t%s", dev, port, i, g, e.GID.Unmap(), gidVersion(e.Type), ndev), true
	}
	return fmt.Sprintf("%s\t%d\t%d\t%s\t\t\t%s\t%s", dev, port, i, g, gidVersion(e.Type), ndev), true
}

// sysfsGID writes a GID as the kernel's sysfs gids/N attribute does
// (show_gid in drivers/infiniband/core/sysfs.c: "%pI6").
func sysfsGID(a netip.Addr) string {
	b := a.As16()
	var sb strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			sb.WriteByte(':')
		}
		fmt.Fprintf(&sb, "%02x%02x", b[i], b[i+1])
	}
	return sb.String()
}

// gidHint says which GID index to use on a device's port, best first: RoCE
// v2 over IPv4 (routable, what most peers use), over IPv6 (global
// addresses: a link-local GID reaches the same link only), then RoCE v1.
func gidHint(def host.DeviceDef, entries []verbs.GIDEntry) string {
	first := func(ok func(e verbs.GIDEntry) bool) int {
		for i, e := range entries {
			if e.GID.IsValid() && ok(e) {
				return i
			}
		}
		return -1
	}
	global := func(a netip.Addr) bool { return !a.IsLinkLocalUnicast() }
	v2v4 := first(func(e verbs.GIDEntry) bool { return e.Type == verbs.GIDTypeRoCEv2 && e.GID.Is4In6() })
	v2v6 := first(func(e verbs.GIDEntry) bool {
		return e.Type == verbs.GIDTypeRoCEv2 && !e.GID.Is4In6() && global(e.GID)
	})
	// RoCE v1 is not routed: any of its GIDs reaches the same link; prefer
	// the IPv4 one, which is what peers usually exchange.
	v1 := first(func(e verbs.GIDEntry) bool { return e.Type == verbs.GIDTypeRoCEv1 && e.GID.Is4In6() })
	if v1 < 0 {
		v1 = first(func(e verbs.GIDEntry) bool { return e.Type == verbs.GIDTypeRoCEv1 && global(e.GID) })
	}
	if v1 < 0 {
		v1 = first(func(e verbs.GIDEntry) bool { return e.Type == verbs.GIDTypeRoCEv1 })
	}
	addr := func(i int) string { return entries[i].GID.Unmap().String() }
	var uses []string
	for _, c := range []struct {
		i    int
		what string
	}{{v2v4, "RoCE v2 over IPv4"}, {v2v6, "RoCE v2 over IPv6"}, {v1, "RoCE v1"}} {
		if c.i < 0 {
			continue
		}
		uses = append(uses, fmt.Sprintf("%d for %s (%s)", c.i, c.what, addr(c.i)))
	}
	prefix := def.Name + " port 1: "
	if len(uses) == 0 {
		ll := first(func(verbs.GIDEntry) bool { return true })
		if ll < 0 {
			return prefix + "no GIDs"
		}
		return fmt.Sprintf("%sonly the link-local GID %d (%s), which reaches the same link only; "+
			"add an IP address to %s for a routable RoCE v2 GID", prefix, ll, addr(ll), def.Netdev)
	}
	return fmt.Sprintf("%suse GID index %s (the sgid_index: perftest's -x, ibv_*_pingpong's -g)",
		prefix, strings.Join(uses, ", "))
}
