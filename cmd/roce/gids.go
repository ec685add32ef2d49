package main

import (
	"bufio"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/verbs"
)

type gidsOptions struct {
	device string
	port   int
}

func newGIDsCmd() *cobra.Command {
	var o gidsOptions
	cmd := &cobra.Command{
		Use:   "gids [-d DEV] [-p PORT]",
		Short: "Show GID tables, as show_gids does, and which GID index to use",
		Long: `gids prints the ports' GID tables the way show_gids (mlnx-tools) does: a header
line, a separator line, one line per GID entry, then n_gids_found=N.

Every table line has exactly 7 whitespace-separated columns:

  DEV PORT INDEX GID IPv4 VER NETDEV

GID is in IPv6 notation (::ffff:192.0.2.1 for an IPv4 address). IPv4 is the
address of an IPv4-mapped GID, else "-" (show_gids leaves it empty; goroce
prints "-" so that awk '{print $3}' and friends always see 7 fields). VER is
v1 (RoCE v1) or v2 (RoCE v2).

After the table, a line per port on stderr (stdout stays parsable) says
which GID index to use: the one perftest takes with -x and the
ibv_*_pingpong examples with -g (rdma_cm applications choose by themselves).

While a process runs a device, its table is the one that process
publishes; otherwise it is computed from the netdev's addresses.`,
		Example: `  roce gids
  roce gids -d rxe0
  roce gids | awk '$6 == "v2" && $5 != "-" {print $3}'   # RoCE v2 over IPv4`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 { // show_gids DEV
				if o.device != "" && o.device != args[0] {
					return usageError{fmt.Errorf("gids: two devices, -d %s and %s", o.device, args[0])}
				}
				o.device = args[0]
			}
			if o.port < 0 {
				return usageError{fmt.Errorf("gids: -p %d: ports are numbered from 1", o.port)}
			}
			if o.port > 1 {
				return &errnoError{op: "gids", errno: syscall.EINVAL,
					detail: fmt.Sprintf("port %d: goroce devices have one port, port 1", o.port)}
			}
			return gids(cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.device, "device", "d", "", "show device `DEV` only (default: every device)")
	f.IntVarP(&o.port, "port", "p", 0, "show port `PORT` only (goroce devices have port 1)")
	return cmd
}

// gidVersion is show_gids' VER column.
func gidVersion(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "v1"
	}
	return "v2"
}

func gids(cmd *cobra.Command, o gidsOptions) error {
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	// One aligned block for all devices, as show_gids prints it (tabs, so
	// it reads like show_gids on a terminal); a device's error goes to
	// stderr before the table.
	tw := tabwriter.NewWriter(out, 0, 8, 1, '\t', 0)
	fmt.Fprintln(tw, "DEV\tPORT\tINDEX\tGID\tIPv4\tVER\tNETDEV")
	fmt.Fprintln(tw, "---\t----\t-----\t---\t------------\t---\t------")
	n := 0
	var hints []string
	err := eachDevice(cmd, "gids", o.device, out, true, func(def host.DeviceDef, nd host.Netdev, entries []verbs.GIDEntry) error {
		for i, e := range entries {
			if !e.GID.IsValid() {
				continue
			}
			ip4 := "-"
			if e.GID.Is4In6() {
				ip4 = e.GID.Unmap().String()
			}
			ndev := e.Netdev
			if ndev == "" {
				ndev = def.Netdev
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", def.Name, 1, i, e.GID, ip4, gidVersion(e.Type), ndev)
			n++
		}
		hints = append(hints, gidHint(def, entries))
		return nil
	})
	tw.Flush()
	fmt.Fprintf(out, "n_gids_found=%d\n", n)
	out.Flush()
	for _, h := range hints {
		fmt.Fprintln(cmd.ErrOrStderr(), h)
	}
	return err
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
