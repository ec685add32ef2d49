package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/verbs"
)

// rxeCounters are the counters Linux rxe has (rxe_hw_counters.c in 6.1),
// in hw_counters and rdma statistic show.
var rxeCounters = map[string]bool{
	"sent_pkts": true, "rcvd_pkts": true, "duplicate_request": true, "out_of_seq_request": true,
	"rcvd_rnr_err": true, "send_rnr_err": true, "rcvd_seq_err": true, "ack_deferred": true,
	"retry_exceeded_err": true, "retry_rnr_exceeded_err": true, "completer_retry_err": true,
	"send_err": true, "link_downed": true, "rdma_sends": true, "rdma_recvs": true,
}

// TestMetricsHelp: each port counter's HELP says what it counts, and
// names rxe only for rxe's counters; goroce's own say rxe has none.
func TestMetricsHelp(t *testing.T) {
	for _, n := range verbs.CounterNames {
		d := descPort[n].String()
		rxe := strings.Contains(d, "as rxe's hw_counters name it: ")
		own := strings.Contains(d, "counter (rxe has none; roce stat shows it): ")
		if rxeCounters[n] && !rxe || !rxeCounters[n] && (rxe || !own) {
			t.Errorf("%s: %s", n, d)
		}
	}
}

// TestMetricsOneFamilyPerFigure: a port's scrape has each counter once:
// every value of a report with distinct counter values shows up in one
// series only (the retransmissions were goroce_port_retrans_pkts_total
// and goroce_port_retransmitted_packets_total, the RNR NAKs
// goroce_port_{rcvd,send}_rnr_err_total and goroce_port_rnr_naks_total).
func TestMetricsOneFamilyPerFigure(t *testing.T) {
	rep := &host.CounterReport{Device: "rxe0", Port: 1, Counters: map[string]uint64{}, Link: map[string]uint64{}}
	drops := map[string]bool{}
	for _, c := range dropCauses {
		drops[c.counter] = true
	}
	for i, n := range verbs.CounterNames {
		if !drops[n] {
			rep.Counters[n] = uint64(1000 + i) // the drop counters are in goroce_port_drops_total too, by design
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectFunc(func(ch chan<- prometheus.Metric) { collectPort(ch, rep) }))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[float64][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if v := m.GetCounter().GetValue(); v >= 1000 {
				seen[v] = append(seen[v], mf.GetName())
			}
		}
	}
	for v, descs := range seen {
		if len(descs) > 1 {
			t.Errorf("the value %v is in %d families: %v", v, len(descs), descs)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no counters collected")
	}
}

// TestMetricsUsage: roce metrics --help lists --metrics-addr, the flag it
// needs, among its own flags (it was only among the global ones, leaving
// the command's own Flags with --help alone).
func TestMetricsUsage(t *testing.T) {
	code, stdout, _ := roce(t, "metrics", "--help")
	flags := stdout[strings.Index(stdout, "\nFlags:\n")+1:]
	if code != 0 || !strings.Contains(stdout, "Usage:\n  roce metrics --metrics-addr ADDR [flags]\n") ||
		!strings.Contains(flags[:strings.Index(flags, "\n\n")], "--metrics-addr ADDR") {
		t.Errorf("roce metrics --help: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := roce(t, "metrics"); code != exitUsage || !strings.HasPrefix(stderr, "roce: --metrics-addr ADDR is required\n") {
		t.Errorf("roce metrics: exit %d, stderr %q", code, stderr)
	}
}

// TestHelpListsEveryCounter: roce stat --help lists every counter stat
// prints, with what it counts, and roce metrics --help every port counter
// family and drop cause the exporter has: the lists come from the counter
// tables (the hand-written ones missed the DCQCN counters).
func TestHelpListsEveryCounter(t *testing.T) {
	code, stat, _ := roce(t, "stat", "--help")
	if code != 0 {
		t.Fatalf("roce stat --help: exit %d", code)
	}
	code, metrics, _ := roce(t, "metrics", "--help")
	if code != 0 {
		t.Fatalf("roce metrics --help: exit %d", code)
	}
	statLine := func(name, help string) {
		t.Helper()
		first, _, _ := strings.Cut(help, " ")
		if !regexp.MustCompile(`\n  ` + regexp.QuoteMeta(name) + ` +` + regexp.QuoteMeta(first) + `\b`).MatchString(stat) {
			t.Errorf("roce stat --help does not list %s (%s)", name, help)
		}
	}
	for _, c := range verbs.CounterTable {
		statLine(c.Name, c.Help)
		if !strings.Contains(metrics, " goroce_port_"+c.Name+"_total") {
			t.Errorf("roce metrics --help does not list goroce_port_%s_total", c.Name)
		}
	}
	for _, c := range link.StatTable {
		if c.Drop != "" {
			statLine(c.Name, c.Help)
		}
	}
	for _, c := range afpacket.CounterTable {
		if c.Drop != "" {
			statLine(c.Name, c.Help)
		}
	}
	causes := metrics[strings.Index(metrics, "by cause:\n"):]
	for _, d := range dropCauses {
		if !regexp.MustCompile(`[ \n]` + regexp.QuoteMeta(d.cause) + `[ \n]`).MatchString(causes) {
			t.Errorf("roce metrics --help does not list the drop cause %s", d.cause)
		}
	}
}
