package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/verbs"
)

// controlTimeout bounds one request to a device's owner.
const controlTimeout = 10 * time.Second

// parseDevPort splits rdma's DEV[/PORT] (port 1 is the only one).
func parseDevPort(arg string) (string, error) {
	name, port, ok := strings.Cut(arg, "/")
	if ok {
		if n, err := strconv.Atoi(port); err != nil || n != 1 {
			return "", usageError{fmt.Errorf("%s: port %q: goroce devices have port 1 only", arg, port)}
		}
	}
	if name == "" {
		return "", usageError{fmt.Errorf("%q: no device name", arg)}
	}
	return name, nil
}

// devArgs takes rdma's optional keywords (e.g. "show", "link") before an
// optional DEV[/PORT].
func devArgs(args []string, keywords ...string) (string, error) {
	for len(args) > 0 && contains(keywords, args[0]) {
		args = args[1:]
	}
	switch len(args) {
	case 0:
		return "", nil
	case 1:
		return parseDevPort(args[0])
	}
	return "", usageError{fmt.Errorf("unexpected arguments %q", args[1:])}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// notRunningNote says why a device has no counters or resources to show.
func notRunningNote(cmd *cobra.Command, what, name string) {
	fmt.Fprintf(cmd.ErrOrStderr(), "roce: note: %s is not open by any process; %s exist only while a process runs it (roce pingpong, roce ping ...)\n", name, what)
}

func newStatCmd() *cobra.Command {
	var (
		qpn     int
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:     "stat [show] [link] [DEV[/PORT]] [--qp N] [-j]",
		Aliases: []string{"statistic"},
		Short:   "per-port and per-QP counters, as rdma statistic show prints them",
		Long: `stat prints each device's port counters on one line, as iproute2's
'rdma statistic show' does for rxe: rxe's counters, with rxe's names, then
goroce's, then the link's drops by cause (all listed below).

The counters live in the process running the device, which answers over its
control socket; a device nobody runs has no counters: stat prints them as 0
with a note on stderr. --qp N prints QP N's counters, as 'rdma statistic qp
show' does.

` + statCounterHelp(),
		Example: `  roce stat
  roce stat rxe0/1
  roce stat rxe0 --qp 17
  roce stat -j | jq .`,
		Args: usageArgs(cobra.MaximumNArgs(3)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := devArgs(args, "show", "link")
			if err != nil {
				return err
			}
			qp := -1
			if cmd.Flags().Changed("qp") {
				qp = qpn
			}
			return stat(cmd, name, qp, jsonOut)
		},
	}
	f := cmd.Flags()
	f.IntVar(&qpn, "qp", 0, "show QP `N`'s counters (rdma statistic qp show ... lqpn N)")
	f.BoolVarP(&jsonOut, "json", "j", false, "JSON output, as rdma -j prints it")
	flagRange(cmd, "qp", 0, 0xFFFFFF, "a QPN", "")
	return cmd
}

func stat(cmd *cobra.Command, name string, qp int, jsonOut bool) error {
	reg, dir := registryOf(cmd)
	defs, err := devicesOf(reg, dir, "stat", name)
	if err != nil {
		return err
	}
	var rows []jsonRow
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	foundQP := false
	for _, def := range defs {
		ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
		rep, err := reg.Counters(ctx, def.Name)
		cancel()
		if errors.Is(err, host.ErrNotRunning) {
			out.Flush()
			notRunningNote(cmd, "its counters", def.Name)
			if qp >= 0 {
				continue
			}
			rep = &host.CounterReport{Device: def.Name, Port: 1}
		} else if err != nil {
			return opError("stat "+def.Name, err)
		}
		if qp < 0 {
			row := portRow(rep)
			if jsonOut {
				rows = append(rows, row)
			} else {
				row.writeText(out)
			}
			continue
		}
		for _, q := range rep.QPs {
			if int(q.LQPN) != qp {
				continue
			}
			foundQP = true
			row := qpRow(rep, q)
			if jsonOut {
				rows = append(rows, row)
			} else {
				row.writeText(out)
			}
		}
	}
	if qp >= 0 && !foundQP {
		out.Flush()
		where := "any running device"
		if name != "" {
			where = name
		}
		return opError("stat", fmt.Errorf("no QP %d on %s", qp, where))
	}
	if jsonOut {
		return writeJSONRows(out, rows)
	}
	return nil
}

// jsonRow is one output line: ordered key/value pairs, printed as rdma
// prints them ("link rxe0/1 key value ...") or as one JSON object.
type jsonRow []kv

type kv struct {
	k string
	v any // string or uint64 or int
}

func (r jsonRow) writeText(w io.Writer) {
	var b bytes.Buffer
	for i, p := range r {
		if i > 0 {
			b.WriteByte(' ')
		}
		if p.k == "ifname" {
			fmt.Fprintf(&b, "link %v", p.v)
			continue
		}
		if p.k == "port" {
			b.Truncate(b.Len() - 1)
			fmt.Fprintf(&b, "/%v", p.v)
			continue
		}
		fmt.Fprintf(&b, "%s %v", p.k, p.v)
	}
	b.WriteString(" \n") // rdma ends its lines with a space
	io.WriteString(w, b.String())
}

func (r jsonRow) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range r {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(p.k)
		v, err := json.Marshal(p.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func writeJSONRows(w io.Writer, rows []jsonRow) error {
	if rows == nil {
		rows = []jsonRow{}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// statCounterHelp lists the counters stat prints, in its order, with what
// each counts: from the tables counterKVs reads, so the help cannot miss one.
func statCounterHelp() string {
	var rxe, own, drops [][2]string
	for _, c := range verbs.CounterTable {
		if c.Rxe {
			rxe = append(rxe, [2]string{c.Name, c.Help})
		} else {
			own = append(own, [2]string{c.Name, c.Help})
		}
	}
	for _, c := range link.StatTable {
		if c.Drop != "" {
			drops = append(drops, [2]string{c.Name, c.Help})
		}
	}
	for _, c := range afpacket.CounterTable {
		if c.Drop != "" {
			drops = append(drops, [2]string{c.Name, c.Help})
		}
	}
	width := 0
	for _, rows := range [][][2]string{rxe, own, drops} {
		for _, r := range rows {
			width = max(width, len(r[0]))
		}
	}
	var b strings.Builder
	b.WriteString("Counters, in the order stat prints them.\n")
	for _, sec := range []struct {
		title string
		rows  [][2]string
	}{{"rxe's (drivers/infiniband/sw/rxe/rxe_hw_counters.c)", rxe}, {"goroce's", own}, {"the link's drops", drops}} {
		b.WriteString("\n" + sec.title + ":\n")
		for _, r := range sec.rows {
			writeWrapped(&b, fmt.Sprintf("  %-*s  ", width, r[0]), r[1], 80)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// writeWrapped writes head then text, wrapped at width columns, its
// continuation lines indented as far as head.
func writeWrapped(b *strings.Builder, head, text string, width int) {
	b.WriteString(head)
	col := len(head)
	for i, w := range strings.Fields(text) {
		if i > 0 && col+1+len(w) > width {
			b.WriteString("\n" + strings.Repeat(" ", len(head)))
			col = len(head)
		} else if i > 0 {
			b.WriteByte(' ')
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	b.WriteByte('\n')
}

// counterKVs are a counter set in rdma's order: rxe's names first, then
// goroce's (verbs.CounterTable), then the link's drops by cause that the
// link, not the engine, counts (link.StatTable's and afpacket's with a Drop).
func counterKVs(c, l map[string]uint64) []kv {
	var out []kv
	for _, n := range verbs.CounterNames {
		out = append(out, kv{n, c[n]})
	}
	if l != nil {
		for _, c := range link.StatTable {
			if c.Drop != "" {
				out = append(out, kv{c.Name, l[c.Name]})
			}
		}
		// A v1-only port's RoCE v2 drops, on the devices that have them.
		for _, c := range afpacket.CounterTable {
			if v, ok := l[c.Name]; ok && c.Drop != "" {
				out = append(out, kv{c.Name, v})
			}
		}
	}
	return out
}

func portRow(rep *host.CounterReport) jsonRow {
	r := jsonRow{{"ifname", rep.Device}, {"port", 1}}
	l := rep.Link
	if l == nil {
		l = map[string]uint64{}
	}
	return append(r, counterKVs(rep.Counters, l)...)
}

func qpRow(rep *host.CounterReport, q host.QPCounters) jsonRow {
	r := jsonRow{{"ifname", rep.Device}, {"port", 1}, {"lqpn", q.LQPN}, {"qp-type", q.Type}, {"state", q.State},
		{"pid", rep.Owner.PID}, {"comm", rep.Owner.Comm}}
	return append(r, counterKVs(q.Counters, nil)...)
}
