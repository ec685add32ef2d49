package perftest

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Table text of perftest_parameters.h.
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	resultFmt    = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	resultFmtG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	resultFmtDur = " #bytes        #iterations       t_avg[usec]    tps average"
	waitBanner   = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
)

// cHex formats v as C's printf("%#0*x", width, v): zero-padded to width
// including the "0x", which C leaves out for 0.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, v)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

func (p *params) title() string {
	s := p.Verb.String() + " "
	if p.Verb == Atomic {
		s += p.Atomic + " "
	}
	switch {
	case p.Lat:
		s += "Latency "
	case p.Bidirectional:
		s += "Bidirectional BW "
	default:
		s += "BW "
	}
	return s + "Test"
}

// sends reports whether this side posts the verb: the client, and with -b
// the server too.
func (p *params) sends() bool { return p.client || p.Bidirectional }

// receives reports whether this side posts receives for SEND: the server,
// and with -b the client too.
func (p *params) receives() bool { return p.Verb == Send && (!p.client || p.Bidirectional) }

// banner is ctx_print_test_info.
func (p *params) banner(w io.Writer, mtu, gidIndex, outReads int) {
	fmt.Fprint(w, resultLine)
	fmt.Fprintf(w, "                    %s\n", p.title())
	if p.UseEvent {
		// The completion vector is always 0 (perftest's eq_num without -X).
		fmt.Fprintf(w, " Test with events. Using %s_comp0\n", p.Device)
	}
	fmt.Fprintf(w, " Dual-port       : OFF\t\tDevice         : %s\n", p.Device)
	fmt.Fprintf(w, " Number of qps   : %d\t\tTransport type : IB\n", p.NumQPs)
	fmt.Fprintf(w, " Connection type : %s\t\tUsing SRQ      : OFF\n", p.Connection)
	fmt.Fprintf(w, " PCIe relax order: %s\n", onOff(!p.RelaxedOrderingOff))
	fmt.Fprintf(w, " ibv_wr* API     : OFF\n")
	if p.sends() {
		fmt.Fprintf(w, " TX depth        : %d\n", p.TxDepth)
	}
	if p.receives() {
		fmt.Fprintf(w, " RX depth        : %d\n", p.RxDepth)
	}
	if !p.Lat {
		fmt.Fprintf(w, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(w, " Mtu             : %d[B]\n", mtu)
	fmt.Fprintf(w, " Link type       : Ethernet\n")
	fmt.Fprintf(w, " GID index       : %d\n", gidIndex)
	if p.Verb != Read && p.Verb != Atomic {
		fmt.Fprintf(w, " Max inline data : 0[B]\n")
	} else {
		fmt.Fprintf(w, " Outstand reads  : %d\n", outReads)
	}
	if p.RDMACM {
		// With -R the server's banner, printed once the QPs are connected,
		// still asks for the client as perftest's does.
		fmt.Fprintf(w, " rdma_cm QPs\t : ON\n")
		fmt.Fprintf(w, " Data ex. method : rdma_cm")
		if p.SetTOS {
			fmt.Fprintf(w, " \tTOS    : %d", p.TOS)
		}
		if !p.client {
			fmt.Fprintf(w, "\n%s Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP", resultLine)
		}
		fmt.Fprintf(w, "\n")
	} else {
		fmt.Fprintf(w, " rdma_cm QPs\t : OFF\n")
		fmt.Fprintf(w, " Data ex. method : Ethernet\n")
	}
	fmt.Fprint(w, resultLine)
}

// printDest is ctx_print_pingpong_data.
func (p *params) printDest(w io.Writer, side string, d Dest) {
	fmt.Fprintf(w, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	if p.Verb == Read {
		fmt.Fprintf(w, " OUT %s", cHex(uint64(d.OutReads), 4))
	}
	if p.Verb == Read || p.Verb == Write {
		fmt.Fprintf(w, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	fmt.Fprintln(w)
	g := d.GID.As16()
	var parts []string
	for _, b := range g {
		parts = append(parts, fmt.Sprintf("%02d", b))
	}
	fmt.Fprintf(w, " GID: %s\n", strings.Join(parts, ":"))
}

func (p *params) bwHeader(w io.Writer) {
	fmt.Fprint(w, resultLine)
	if p.ReportGbits {
		fmt.Fprintln(w, resultFmtG)
	} else {
		fmt.Fprintln(w, resultFmt)
	}
}

func (p *params) latHeader(w io.Writer) {
	fmt.Fprint(w, resultLine)
	if p.Duration > 0 {
		fmt.Fprintln(w, resultFmtDur)
	} else {
		fmt.Fprintln(w, resultFmtLat)
	}
}

// formatFactor is bytes per reported unit: MiB, or 10^9 bits.
func (p *params) formatFactor() float64 {
	if p.ReportGbits {
		return 125000000
	}
	return 0x100000
}

// bwSamples are one run's timestamps, as perftest's tposted/tcompleted:
// posted[i] when message i was posted; completed[k] when the (k+1)th
// message's completion was seen (set at signaled positions only).
type bwSamples struct {
	start, end time.Time
	posted     []time.Time
	completed  []time.Time
	iters      uint64 // messages counted
}

// bwReport is print_report_bw's arithmetic, in nanoseconds for cycles.
func (p *params) bwReport(size int, s *bwSamples) BWReport {
	n := float64(s.iters)
	total := float64(s.end.Sub(s.start).Nanoseconds())
	if total <= 0 {
		total = 1
	}
	ff := p.formatFactor()
	r := BWReport{Size: uint64(size), Iters: s.iters,
		BWAvg:   float64(size) * n * 1e9 / (total * ff),
		MsgRate: n * 1e3 / total}
	if !p.noPeak && len(s.posted) > 0 && len(s.completed) == len(s.posted) {
		opt := total
		cnt := len(s.posted)
		cqMod := p.CQMod
		// The loop below is perftest's, O(iterations² / cq_mod); in
		// nanoseconds since start rather than through time.Time.Sub it
		// takes a fraction of the CPU (0.5 s of the client's 2 s in a run
		// of 10,000 messages before).
		posted, completed := make([]int64, cnt), make([]int64, cnt)
		for i := range cnt {
			posted[i] = int64(s.posted[i].Sub(s.start))
			completed[i] = -1 // not set: perftest's zeroed tcompleted
			if !s.completed[i].IsZero() {
				completed[i] = int64(s.completed[i].Sub(s.start))
			}
		}
		try := func(i, j int) {
			if completed[j] < 0 {
				return
			}
			if t := float64(completed[j]-posted[i]) / float64(j-i+1); t < opt {
				opt = t
			}
		}
		for i := 0; i < cnt; i++ {
			for j := (i+cqMod)/cqMod*cqMod - 1; j < cnt; j += cqMod {
				try(i, j)
			}
			if cnt%cqMod != 0 {
				try(i, cnt-1)
			}
		}
		if opt > 0 {
			r.BWPeak = float64(size) * 1e9 / (opt * ff)
		}
	}
	return r
}

// printBW is print_full_bw_report's table line (and --out_json).
func (p *params) printBW(w io.Writer, r BWReport, mtu, gidIndex, outReads int) error {
	return p.printBWLine(w, r, r.BWAvg < 0.1 && p.ReportGbits, mtu, gidIndex, outReads)
}

// sumBW is the line print_full_bw_report prints with -b: this side's size
// and iterations, the two sides' peaks, averages and message rates added.
func sumBW(my, rem BWReport) BWReport {
	return BWReport{Size: my.Size, Iters: my.Iters, BWPeak: my.BWPeak + rem.BWPeak, BWAvg: my.BWAvg + rem.BWAvg,
		MsgRate: my.MsgRate + rem.MsgRate}
}

// printBWSum prints sumBW(my, rem); whether the line gets more decimals is
// decided on this side's average alone, as perftest decides it.
func (p *params) printBWSum(w io.Writer, my, rem BWReport, mtu, gidIndex, outReads int) error {
	return p.printBWLine(w, sumBW(my, rem), my.BWAvg < 0.1 && p.ReportGbits, mtu, gidIndex, outReads)
}

func (p *params) printBWLine(w io.Writer, r BWReport, inc bool, mtu, gidIndex, outReads int) error {
	if inc {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	} else {
		fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	}
	if !p.OutJSON {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("{\n")
	p.jsonInfo(&sb, mtu, gidIndex, outReads)
	sb.WriteString("results: {\n")
	if inc {
		fmt.Fprintf(&sb, "MsgSize: %d,\nn_iterations: %d,\nBW_peak: %.6f,\nBW_average: %.6f,\nMsgRate: %.6f,\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	} else {
		fmt.Fprintf(&sb, "MsgSize: %d,\nn_iterations: %d,\nBW_peak: %.2f,\nBW_average: %.2f,\nMsgRate: %.6f,\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	}
	sb.WriteString("},\n}\n")
	return p.writeJSON(sb.String())
}

// LatReport is one line of a latency table, in microseconds.
type LatReport struct {
	Size                          int
	Iters                         uint64
	Min, Max, Typical, Avg, Stdev float64
	P99, P999                     float64
	Duration                      bool // -D: only Avg and TPS are set
	TPS                           float64
}

// latReport is print_report_lat: deltas between consecutive posts, each
// halved for ping-pongs (SEND, WRITE), sorted, the slowest two left out;
// the standard deviation sums truncated integers, as perftest's does.
func (p *params) latReport(size int, posted []time.Time) LatReport {
	delta := p.latDeltas(posted)
	m := len(delta)
	slices.Sort(delta)
	m -= latTail
	var median float64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	sum := 0.0
	for _, d := range delta[:m] {
		sum += d
	}
	avg := sum / float64(m)
	var stdevSum float64
	for _, d := range delta[:m] {
		tv := int(avg - d)
		stdevSum += float64(int(math.Pow(float64(tv), 2)))
	}
	i99, i999 := int(math.Ceil(float64(m)*0.99)), int(math.Ceil(float64(m)*0.999))
	return LatReport{Size: size, Iters: uint64(len(posted)), Min: delta[0], Max: delta[m], Typical: median,
		Avg: avg, Stdev: math.Sqrt(stdevSum / float64(m)), P99: delta[i99], P999: delta[i999]}
}

// latDeltas are the latencies latReport measures, in the order measured:
// the time between consecutive posts, in µs, halved for ping-pongs.
func (p *params) latDeltas(posted []time.Time) []float64 {
	rtt := 2.0
	if p.Verb == Read || p.Verb == Atomic {
		rtt = 1
	}
	if len(posted) < 2 {
		return nil
	}
	delta := make([]float64, len(posted)-1)
	for i := range delta {
		delta[i] = float64(posted[i+1].Sub(posted[i]).Nanoseconds()) / 1e3 / rtt
	}
	return delta
}

// printSamples is print_report_lat's -H and -U output: every latency
// sample, "#, usec" then "N, value" lines (%g, as perftest prints them),
// sorted unless -U.
func (p *params) printSamples(w io.Writer, posted []time.Time) {
	delta := p.latDeltas(posted)
	if !p.Unsorted {
		slices.Sort(delta)
	}
	var sb strings.Builder
	sb.WriteString("#, usec\n")
	for i, d := range delta {
		fmt.Fprintf(&sb, "%d, %g\n", i+1, d)
	}
	io.WriteString(w, sb.String())
}

// latDurReport is print_report_lat_duration.
func (p *params) latDurReport(size int, iters uint64, sample time.Duration) LatReport {
	rtt := 2.0
	if p.Verb == Read || p.Verb == Atomic {
		rtt = 1
	}
	us := float64(sample.Nanoseconds()) / 1e3
	r := LatReport{Size: size, Iters: iters, Duration: true}
	if iters > 0 {
		r.Avg = us / rtt / float64(iters)
	}
	if us > 0 {
		r.TPS = float64(iters) / (us / 1e6)
	}
	return r
}

func (p *params) printLat(w io.Writer, r LatReport, mtu, gidIndex, outReads int) error {
	if r.Duration {
		fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", r.Size, r.Iters, r.Avg, r.TPS)
	} else {
		fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
			r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
	}
	if !p.OutJSON {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("{\n")
	p.jsonInfo(&sb, mtu, gidIndex, outReads)
	sb.WriteString("results: {\n")
	if r.Duration {
		fmt.Fprintf(&sb, "MsgSize: %d,\nn_iterations: %d,\nt_avg: %.2f,\ntps_average: %.2f,\n", r.Size, r.Iters, r.Avg, r.TPS)
	} else {
		fmt.Fprintf(&sb, "MsgSize: %d,\nn_iterations: %d,\nt_min: %.2f,\nt_max: %.2f,\nt_typical: %.2f,\nt_avg: %.2f,\nt_stdev: %.2f,\npercentile_99: %.2f,\npercentile_99.9: %.2f,\n",
			r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
	}
	sb.WriteString("},\n}\n")
	return p.writeJSON(sb.String())
}

// jsonInfo is write_test_info_to_file. perftest's --out_json file is not
// strict JSON (unquoted keys, trailing commas); goroce writes the same
// text so that whatever reads perftest's files reads goroce's.
func (p *params) jsonInfo(sb *strings.Builder, mtu, gidIndex, outReads int) {
	sb.WriteString("test_info: {\n")
	sb.WriteString("test: " + strings.ReplaceAll(p.title(), " ", "_") + ",\n")
	if p.UseEvent {
		fmt.Fprintf(sb, "Test with events: Using_%s_comp0,\n", p.Device)
	}
	fmt.Fprintf(sb, "Dual_port: OFF,\nDevice: %q,\n", p.Device)
	fmt.Fprintf(sb, "Number_of_qps: %d,\nTransport_type: IB,\n", p.NumQPs)
	fmt.Fprintf(sb, "Connection_type: %s,\nUsing_SRQ: OFF,\nPCIe_relax_order: %s,\nibv_wr_API: OFF,\n", p.Connection, onOff(!p.RelaxedOrderingOff))
	if p.sends() {
		fmt.Fprintf(sb, "TX_depth : %d,\n", p.TxDepth)
	}
	if p.receives() {
		fmt.Fprintf(sb, "RX_depth: %d,\n", p.RxDepth)
	}
	if !p.Lat {
		fmt.Fprintf(sb, "CQ_Moderation: %d,\n", p.CQMod)
	}
	fmt.Fprintf(sb, "Mtu: %d,\nLink_type: Ethernet,\nGID_index: %d,\n", mtu, gidIndex)
	if p.Verb != Read && p.Verb != Atomic {
		sb.WriteString("Max_inline_data: 0,\n")
	} else {
		fmt.Fprintf(sb, "Outstand_reads: %d,\n", outReads)
	}
	if p.RDMACM {
		sb.WriteString("rdma_cm_QPs: ON,\nData_ex_method: rdma_cm,\n")
		if p.SetTOS {
			fmt.Fprintf(sb, "TOS: %d,\n", p.TOS)
		}
		sb.WriteString("},\n")
	} else {
		sb.WriteString("rdma_cm_QPs: OFF,\nData_ex_method: Ethernet,\n},\n")
	}
}

func (p *params) writeJSON(s string) error {
	if err := os.WriteFile(p.JSONFile, []byte(s), 0o600); err != nil {
		return fmt.Errorf("failed to open %s: %w", p.JSONFile, err)
	}
	return nil
}

// onOff is perftest's "ON" or "OFF".
func onOff(on bool) string {
	if on {
		return "ON"
	}
	return "OFF"
}
