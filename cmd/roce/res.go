package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
)

func newResCmd() *cobra.Command {
	var jsonOut, details bool
	cmd := &cobra.Command{
		Use:   "res [show] [qp|cm_id] [DEV[/PORT]] [-j] [-d]",
		Short: "QPs and RDMA CM IDs of running devices, as rdma res show prints them",
		Long: `res shows the resources of the devices processes are running, as iproute2's
'rdma res show' does: without a type, one summary line per device; 'qp' one
line per QP (local and remote QPN, type, state, receive and send PSNs, PD,
and the process that owns it); 'cm_id' one line per RDMA CM ID. With -d, a
QP's line also shows its path MTU and, while the port's congestion control
reaction point is on (roce ecn -d DEV rp enable 1), dcqcn-rate: its current
DCQCN rate in Mb/s, and dcqcn-limited yes when a CNP holds it below the line
rate.

A device nobody runs has no resources: it is skipped with a note on stderr.`,
		Example: `  roce res
  roce res show qp
  roce res show qp rxe0
  roce res show qp -d         # with each QP's DCQCN rate
  roce res show cm_id -j`,
		Args: usageArgs(cobra.MaximumNArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 && args[0] == "show" {
				args = args[1:]
			}
			kind := ""
			if len(args) > 0 && (args[0] == "qp" || args[0] == "cm_id") {
				kind, args = args[0], args[1:]
			}
			name, err := devArgs(args)
			if err != nil {
				return err
			}
			return resShow(cmd, kind, name, jsonOut, details)
		},
	}
	cmd.Flags().BoolVarP(&jsonOut, "json", "j", false, "JSON output, as rdma -j prints it")
	cmd.Flags().BoolVarP(&details, "details", "d", false, "details, as rdma -d prints them: an RC QP's congestion window (cwnd, unacked PSNs, round trips in µs, cuts, spurious ACK timeouts), a QP's path MTU and DCQCN rate")
	return cmd
}

func resShow(cmd *cobra.Command, kind, name string, jsonOut, details bool) error {
	reg, dir := registryOf(cmd)
	defs, err := devicesOf(reg, dir, "res show", name)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	var rows []jsonRow
	emit := func(r jsonRow) {
		if jsonOut {
			rows = append(rows, r)
		} else {
			r.writeText(out)
		}
	}
	for i, def := range defs {
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		rep, err := reg.Resources(ctx, def.Name)
		cancel()
		if errors.Is(err, host.ErrNotRunning) {
			out.Flush()
			notRunningNote(cmd, "its resources", def.Name)
			if kind == "" {
				rep = &host.ResourceReport{Device: def.Name}
			} else {
				continue
			}
		} else if err != nil {
			return opError("res show "+def.Name, err)
		}
		switch kind {
		case "":
			if jsonOut {
				emit(jsonRow{{"ifindex", i}, {"ifname", rep.Device}, {"qp", len(rep.QPs)}, {"cm_id", len(rep.CMIDs)}})
			} else {
				fmt.Fprintf(out, "%d: %s: qp %d cm_id %d \n", i, rep.Device, len(rep.QPs), len(rep.CMIDs))
			}
		case "qp":
			for _, q := range rep.QPs {
				emit(qpResRow(rep, q, details))
			}
		case "cm_id":
			for _, c := range rep.CMIDs {
				emit(cmIDRow(rep, c))
			}
		}
	}
	if jsonOut {
		return writeJSONRows(out, rows)
	}
	return nil
}

// qpResRow is rdma res show qp's line; connected QPs show their peer and
// receive PSN, datagram QPs only the send PSN (as the kernel prints them).
// With details it adds the path MTU, while the port's RP is on the QP's
// DCQCN rate, and an RC QP's congestion window.
func qpResRow(rep *host.ResourceReport, q host.QPResource, details bool) jsonRow {
	r := jsonRow{{"ifname", rep.Device}, {"port", q.Port}, {"lqpn", q.LQPN}}
	connected := q.Type == "RC" || q.Type == "UC"
	if connected {
		r = append(r, kv{"rqpn", q.RQPN})
	}
	r = append(r, kv{"type", q.Type}, kv{"state", q.State})
	if connected {
		r = append(r, kv{"rq-psn", q.RQPSN})
	}
	r = append(r, kv{"sq-psn", q.SQPSN})
	if connected {
		r = append(r, kv{"path-mig-state", "MIGRATED"})
	}
	r = append(r, kv{"pdn", q.PDN})
	if details {
		if q.Cwnd != 0 {
			// The RC requester's congestion window, as ss -i prints
			// TCP's (cwnd, unacked, rtt, minrtt), the round trips in µs.
			r = append(r, kv{"cwnd", q.Cwnd}, kv{"unacked", q.InFlight}, kv{"rtt-us", math.Round(q.RTTUs)},
				kv{"minrtt-us", math.Round(q.MinRTTUs)}, kv{"cwnd-cuts", q.CwndCuts}, kv{"spurious-timeouts", q.Spurious})
		}
		if q.PathMTU != 0 {
			r = append(r, kv{"path-mtu", q.PathMTU})
		}
		if q.DCQCNRate != nil {
			limited := "no"
			if q.DCQCNLimited {
				limited = "yes"
			}
			r = append(r, kv{"dcqcn-rate", math.Round(*q.DCQCNRate*10) / 10}, kv{"dcqcn-limited", limited})
		}

	}
	return append(r, kv{"pid", rep.Owner.PID}, kv{"comm", rep.Owner.Comm})
}

func cmIDRow(rep *host.ResourceReport, c host.CMID) jsonRow {
	r := jsonRow{{"ifname", rep.Device}, {"port", c.Port}, {"cm-idn", c.ID}}
	if c.LQPN != 0 {
		r = append(r, kv{"lqpn", c.LQPN})
	}
	if c.QPType != "" {
		r = append(r, kv{"qp-type", c.QPType})
	}
	r = append(r, kv{"state", c.State}, kv{"ps", c.PS}, kv{"pid", rep.Owner.PID}, kv{"comm", rep.Owner.Comm})
	if c.SrcAddr != "" {
		r = append(r, kv{"src-addr", c.SrcAddr})
	}
	if c.DstAddr != "" {
		r = append(r, kv{"dst-addr", c.DstAddr})
	}
	return r
}
