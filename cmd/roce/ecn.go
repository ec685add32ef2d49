package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
)

// ecn is the operator's side of congestion control (ECN marking, CNPs and
// DCQCN, issue 16): MLNX_OFED's /sys/class/net/<if>/ecn/roce_np and
// roce_rp, for a goroce device. The settings live in the runtime
// directory's config tree (config.Tree.UpdateECN), where a device opened
// later finds them (host.Open), and the process that has the device open
// applies a change at once (the control socket's "ecn" request).

// ecnPoints are the points' words on the command line and their sysfs
// directories.
var ecnPoints = map[string]string{"np": "roce_np", "rp": "roce_rp"}

func newECNCmd() *cobra.Command {
	var p portFlags
	cmd := &cobra.Command{
		Use:   "ecn -d DEV [-p PORT] [np|rp] [PARAM [VALUE]]",
		Short: "Show or set a port's congestion control (ECN, CNPs, DCQCN), as MLNX_OFED's ecn sysfs does",
		Long: `ecn shows or sets the congestion control of a port of a goroce device, under
the names of MLNX_OFED's /sys/class/net/<if>/ecn: the notification point
(np, roce_np: answer packets marked ECN Congestion Experienced with CNPs)
and the reaction point (rp, roce_rp: mark request packets ECN-capable and
cut the rate on CNPs, by DCQCN).

Without a point it lists every setting, one "roce_np/NAME VALUE" or
"roce_rp/NAME VALUE" line each, NAME the sysfs file's (NVIDIA's documentation
has the parameters directly under roce_np/ and roce_rp/ in places, under
their params/ in others); with a point, that point's; with a parameter, its
value alone. With a
value it sets the parameter first and prints it. enable/PRIO enables a
point for priority PRIO (0-7) as MLNX_OFED's enable/<prio> does, a
packet's priority being its DSCP / 8 (mlx5's default dscp2prio under
"trust dscp"); enable, which MLNX_OFED does not have, sets all eight and
reads 1 when all eight are on.

Parameters and their values:
` + ecnParamHelp() + `
Enable both points on both ends, and only where the path marks ECN (a
switch or router with ECN marking on its queues): without marking there
are no CNPs, and with the RP on alone, packets claim ECN capability to
nobody's benefit. The counters np_cnp_sent, np_ecn_marked_roce_packets,
rp_cnp_handled and rp_cnp_ignored are in roce stat and the metrics; roce
res show qp -d shows each QP's DCQCN rate.

A setting is kept in the runtime directory until the device is deleted or
the host restarts; a device opened later starts with it, and the process
that has the device open applies it at once.`,
		Example: `  roce ecn -d rxe0                        # every setting
  roce ecn -d rxe0 rp enable 1            # DCQCN on for the port's QPs
  roce ecn -d rxe0 np enable 1            # answer CE marks with CNPs
  roce ecn -d rxe0 rp rpg_time_reset      # one value`,
		Args: argsWithFix(cobra.MaximumNArgs(3), "roce ecn -d DEV [-p PORT] [np|rp] [PARAM [VALUE]]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.check("ecn"); err != nil {
				return err
			}
			point := ""
			if len(args) > 0 {
				var ok bool
				if point, ok = ecnPoints[args[0]]; !ok {
					return usageError{&errnoError{op: "ecn", errno: syscall.EINVAL,
						detail: fmt.Sprintf("%q: the points are np (notification point, roce_np) and rp (reaction point, roce_rp)", args[0])}}
				}
			}
			var param host.ECNParam
			if len(args) > 1 {
				var err error
				if param, err = host.LookupECNParam(point, args[1]); err != nil {
					return usageError{&errnoError{op: "ecn", errno: syscall.EINVAL, detail: strings.TrimSuffix(err.Error(), ": "+syscall.EINVAL.Error())}}
				}
			}
			var value uint32
			if len(args) > 2 {
				v, err := strconv.ParseUint(args[2], 0, 32)
				if err == nil {
					err = param.Check(uint32(v))
				}
				if err != nil {
					return usageError{&errnoError{op: "ecn", errno: syscall.EINVAL,
						detail: fmt.Sprintf("%s %s %q: valid values are %s", point, param.Name, args[2], param.Valid())}}
				}
				value = uint32(v)
			}
			reg, dir := registryOf(cmd)
			tree := configTree(dir)
			if len(args) > 2 {
				err := tree.UpdateECN(p.device, p.port, func(m map[string]uint32) error {
					host.SetECNSetting(m, param, value)
					return nil
				})
				if err != nil {
					return treeError(cmd, "ecn", p.device, err)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
				err = reg.ApplyECN(ctx, p.device)
				cancel()
				if err != nil && !errors.Is(err, host.ErrNotRunning) {
					return opError("ecn", fmt.Errorf("stored in %s, but the running device did not apply it: %w", dir, err))
				}
			}
			m, err := tree.ECN(p.device, p.port)
			if err != nil {
				return treeError(cmd, "ecn", p.device, err)
			}
			c, err := host.ECNConfigOf(m)
			if err != nil {
				return opError("ecn", err)
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if len(args) > 1 {
				fmt.Fprintln(out, param.Get(&c))
				return nil
			}
			for _, q := range host.ECNParams() {
				if point == "" || q.Point == point {
					fmt.Fprintf(out, "%s %d\n", q.Key(), q.Get(&c))
				}
			}
			return nil
		},
	}
	p.add(cmd)
	return cmd
}

// ecnParamHelp lists the parameters and their values for --help.
func ecnParamHelp() string {
	var b strings.Builder
	for _, q := range host.ECNParams() {
		name, valid := q.Name, q.Valid()
		if strings.HasPrefix(name, "enable/") {
			if name != "enable/0" {
				continue
			}
			name, valid = "enable/PRIO", "0 to 1 (0 off, 1 on), priority PRIO 0 to 7 (DSCP / 8)"
		}
		fmt.Fprintf(&b, "  %-2s %-27s %s\n", strings.TrimPrefix(q.Point, "roce_"), name, valid)
	}
	return b.String()
}
