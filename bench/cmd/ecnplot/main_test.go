package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeRun makes a run directory as bench/ecn.sh leaves it: flows with
// the given perftest averages (Gb/s), a probe with the given samples, and
// the bottleneck's counters at 1 s intervals from start.
func writeRun(t *testing.T, dir string, start float64, avgs []float64, probe []float64, q [][3]float64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w("start.txt", fmt.Sprintf("%.3f\n", start))
	for i, a := range avgs {
		w(fmt.Sprintf("flow%d.out", i+1), " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"+
			"roce perf:   1 s of 8 s: 0.10 Gb/sec, 0.000190 Mpps\n"+
			"roce perf: QP 17: 15 messages still outstanding 1s after the end of -D\n"+
			fmt.Sprintf(" 65536      255           0.000000            %f            0.000128\n", a)+
			"---------------------------------------------------------------------------------------\n")
	}
	var p strings.Builder
	p.WriteString(" #bytes        #iterations       t_avg[usec]    tps average\n#, usec\n")
	for i, v := range probe {
		fmt.Fprintf(&p, "%d, %g\n", i+1, v)
	}
	p.WriteString(" 64            4006            124.81         4006.00\n")
	w("probe.out", p.String())
	var qs strings.Builder
	for i, x := range q { // bytes, drops, backlog bytes
		ts := start + float64(i)
		// As qdiscstat writes it: tc's format, the backlog in bytes.
		fmt.Fprintf(&qs, "%.3f %.3f qdisc pfifo 10: parent 1:10 Sent %.0f bytes 1 pkt (dropped %.0f, overlimits 0 requeues 0) backlog %.0fb %.0fp requeues 0\n",
			ts-0.01, ts+0.01, x[0], x[1], x[2], math.Ceil(x[2]/4154))
	}
	w("qdisc.txt", qs.String())
	w("stat.txt", "t 1\nlink rxea1/1 sent_pkts 5 retrans_pkts 7 rp_cnp_handled 3\nlink rxeap/1 retrans_pkts 100\nt 2\nlink rxea1/1 sent_pkts 9 retrans_pkts 11 rp_cnp_handled 4\nlink rxea2/1 retrans_pkts 2\n")
	w("nft-before.txt", "\t\toifname \"b\" ip ecn { ect1, ect0 } limit rate over 5416/second burst 32 packets ip ecn set ce counter packets 10 bytes 1\n")
	w("nft.txt", "\t\toifname \"b\" ip ecn { ect1, ect0 } limit rate over 5416/second burst 32 packets ip ecn set ce counter packets 50 bytes 1\n"+
		"\t\toifname \"b\" ip6 ecn { ect1, ect0 } limit rate over 5416/second burst 32 packets ip6 ecn set ce counter packets 2 bytes 1\n")
}

// The figures of a run, from files whose numbers are known: utilisation
// over the middle half (bytes 2 s → 6 s of an 8 s run at 100 Mbit/s), the
// drops in and around that window, the senders' counters (the probe's
// retransmissions are not the flows'), Jain's index, nearest-rank
// percentiles, the queue's delay from its backlog in the window; the floor
// run's probe against the DCQCN-on run's; and the table and picture name
// them.
func TestMetrics(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "meta.txt"), []byte("rate_mbit: 100\nseconds: 8\ncommit: abc\n"), 0o644)
	writeRun(t, filepath.Join(dir, "idle"), 1000, nil, []float64{10, 20, 30, 40}, [][3]float64{{0, 0, 0}, {0, 0, 0}})
	// 12.5 MB/s = 100 Mbit/s for 1 s; drops at 1 s (before the window) and at 4 s (in it).
	// The backlog in the window (2 s to 6 s): 1, 2, 4.096, 10 and 0 ms at the rate.
	backlog := []float64{99e3, 99e3, 12500, 25000, 51200, 125000, 0, 99e3, 99e3}
	var q [][3]float64
	drops := 0.0
	for i := 0; i <= 8; i++ {
		if i == 1 || i == 4 {
			drops += 5
		}
		q = append(q, [3]float64{float64(i) * 12.5e6 * 0.9, drops, backlog[i]})
	}
	probe := make([]float64, 100)
	for i := range probe {
		probe[i] = float64(i + 1)
	}
	writeRun(t, filepath.Join(dir, "n2-on-1"), 2000, []float64{0.06, 0.02}, probe, q)
	writeRun(t, filepath.Join(dir, "n2-off-1"), 3000, []float64{0.04, 0.04}, probe, q)
	writeRun(t, filepath.Join(dir, "n2-floor-1"), 4000, []float64{0.04, 0.04}, []float64{66, 66, 66}, q)
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Runs) != 3 || b.Runs[0].Mode != "off" || b.Runs[1].Mode != "on" || b.Runs[2].Mode != "floor" {
		t.Fatalf("runs %v", b.Runs)
	}
	m := b.Metrics(b.Runs[1])
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(m.Util, 0.9) || m.Drops != 5 || m.DropsAll != 10 || m.Retrans != 13 || m.CNPs != 4 || m.CE != 42 {
		t.Errorf("metrics %+v: want util 0.9, drops 5 of 10, retrans 13, CNPs 4, CE 42", m)
	}
	if want := 0.8 * 0.8 / (2 * (0.6*0.6 + 0.2*0.2)); !near(m.Jain, want) || !near(m.Goodput, 0.8) {
		t.Errorf("Jain %v goodput %v, want %v and 0.8", m.Jain, m.Goodput, want)
	}
	if m.P50 != 50 || m.P99 != 99 {
		t.Errorf("p50 %v p99 %v, want 50 and 99", m.P50, m.P99)
	}
	if m.QP50 != 2000 || m.QP99 != 10000 {
		t.Errorf("queue p50 %v p99 %v µs, want 2000 and 10000", m.QP50, m.QP99)
	}
	if off := b.Metrics(b.Runs[0]); !near(off.Jain, 1) {
		t.Errorf("equal flows: Jain %v", off.Jain)
	}
	tab := b.Table()
	for _, want := range []string{
		"| 2 | on | 90% | 80% | 5 / 10 | 13 | 42 | 4 | 0.800 | 60, 20 | 2000 / 10000 | 50 / 99 | 2.5× | 1.5× |",
		"| 2 | off | 90% | 80% | 5 / 10 | 13 | 42 | 4 | 1.000 | 40, 40 | 2000 / 10000 | 50 / 99 | 2.5× | — |",
		"| 2 | on, floor | 90% | 80% | 5 / 10 | 13 | 42 | 4 | 1.000 | 40, 40 | 2000 / 10000 | 66 / 66 | 1.6× | — |",
		"| 2 | 1 | **not met** (5) | met (90%) | **not met** (0.800) | **not met** (2.5×) | met (1.5×) |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if svg := b.SVG(); strings.Count(svg, "<polyline") != 4 || !strings.Contains(svg, "2 senders, DCQCN on") {
		t.Errorf("picture: %d polylines, want 4:\n%s", strings.Count(svg, "<polyline"), svg)
	}
	md := filepath.Join(dir, "B.md")
	os.WriteFile(md, []byte("a\n"+beginMark+"\nold\n"+endMark+"\nz\n"), 0o644)
	if err := updateFile(md, "new\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(md); string(got) != "a\n"+beginMark+"\nnew\n"+endMark+"\nz\n" {
		t.Errorf("updated file:\n%s", got)
	}
}
