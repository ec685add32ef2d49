package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/afpacket"
)

// TestPerfMetrics runs roce perf write -D 3 as a server and a client,
// processes of their own, on devices joined by a veth pair, the server
// with --metrics-addr 127.0.0.1:0, and scrapes the server's /metrics over
// HTTP twice while the test runs (after the client's first and second
// progress lines): both devices are running, each has its RC QP in RTS,
// and the packet counters of both are there and grow between the
// scrapes. Once the server has exited, nothing answers at the address.
func TestPerfMetrics(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	for _, h := range []struct {
		h    *nettest.Host
		name string
	}{{ha, "rxe0"}, {hb, "rxe1"}} {
		if code, _, stderr := roceIn(t, h.h, dir, "link", "add", h.name, "type", "rxe", "netdev", h.h.Ifname, "roce-versions", "v2"); code != 0 {
			t.Fatalf("link add %s: %s", h.name, stderr)
		}
	}
	exe := roceExecutable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	// The processes run in this namespace (the devices' data paths in
	// theirs), so the exchange goes over 127.0.0.1.
	// 10 s (-D): each scrape must come while both still run, and on a
	// loaded machine a scrape after the "2 s" line may take seconds.
	args := []string{"perf", "write", "-s", "65536", "-D", "10", "-p", port}
	srv := startProc(t, ctx, exe, dir, append(args, "-d", "rxe0", "--metrics-addr", "127.0.0.1:0")...)
	line := srv.stderr.waitFor(t, ctx, "/metrics\n")
	m := regexp.MustCompile(`roce: serving metrics at (http://\S+/metrics)\n`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("server's stderr: %q", line)
	}
	url := m[1]
	srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
	cli := startProc(t, ctx, exe, dir, append(args, "-d", "rxe1", "127.0.0.1")...)
	began := time.Now()

	var scrapes [2]map[string]float64
	for i := range scrapes {
		cli.stderr.waitFor(t, ctx, fmt.Sprintf("roce perf:   %d s of 10 s: ", i+1))
		scrapes[i] = scrape(t, ctx, url)
		if cli.exited() || srv.exited() {
			t.Fatalf("scrape %d: the test has ended already\nserver: %s%s\nclient: %s%s", i+1, srv.stdout, srv.stderr, cli.stdout, cli.stderr)
		}
	}
	for _, k := range []string{
		`goroce_device_running{device="rxe0"}`,
		`goroce_device_running{device="rxe1"}`,
		`goroce_qps{device="rxe0",state="RTS",type="RC"}`,
		`goroce_qps{device="rxe1",state="RTS",type="RC"}`,
	} {
		for i, s := range scrapes {
			if s[k] != 1 {
				t.Errorf("scrape %d: %s is %v, want 1", i+1, k, s[k])
			}
		}
	}
	for _, k := range []string{
		`goroce_port_sent_pkts_total{device="rxe1",port="1"}`, // the WRITEs
		`goroce_port_rcvd_pkts_total{device="rxe0",port="1"}`,
		`goroce_port_sent_pkts_total{device="rxe0",port="1"}`, // the ACKs
		`goroce_port_rcvd_pkts_total{device="rxe1",port="1"}`,
		`goroce_port_link_packets_total{device="rxe1",direction="tx",port="1"}`,
		`goroce_port_link_bytes_total{device="rxe0",direction="rx",port="1"}`,
	} {
		a, ok1 := scrapes[0][k]
		b, ok2 := scrapes[1][k]
		switch {
		case !ok1 || !ok2:
			t.Errorf("%s missing from a scrape", k)
		case !(a > 0 && b > a):
			t.Errorf("%s: %v, a second later %v: does not grow", k, a, b)
		default:
			t.Logf("%s: %v, then %v", k, a, b)
		}
	}
	for k := range scrapes[1] {
		if strings.HasPrefix(k, "goroce_port_drops_total{cause=\"bad_icrc\"") && scrapes[1][k] != 0 {
			t.Errorf("%s = %v", k, scrapes[1][k])
		}
		// Only a v1-only port has this cause (TestMetricsV1OnlyDrops).
		if strings.HasPrefix(k, "goroce_port_drops_total{cause=\"v2_on_v1_port\"") {
			t.Errorf("%s on a RoCE v2 device", k)
		}
	}
	for _, dev := range []string{"rxe0", "rxe1"} {
		if _, ok := scrapes[1][`goroce_port_drops_total{cause="not_for_us",device="`+dev+`",port="1"}`]; !ok {
			t.Errorf("no drops by cause for %s", dev)
		}
	}

	for _, p := range []*proc{cli, srv} {
		if err := p.wait(ctx); err != nil {
			t.Fatalf("%s: %v\n%s%s", p.cmd.Args, err, p.stdout, p.stderr)
		}
	}
	t.Logf("the client ran for %v", time.Since(began).Round(time.Millisecond))
	checkPerfTable(t, "client", cli.stdout.String(), false, true)
	checkPerfTable(t, "server", srv.stdout.String(), false, true)
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(url); err == nil {
		t.Errorf("%s still answers after the server exited", url)
	}
	t.Logf("server:\n%s%sclient:\n%s%s", srv.stdout, srv.stderr, cli.stdout, cli.stderr)
}

// metricLine is a sample line of Prometheus' text format.
var metricLine = regexp.MustCompile(`^(goroce_\S+) (\S+)$`)

// scrape GETs url and returns its goroce_* samples by name and labels.
func scrape(t *testing.T, ctx context.Context, url string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", url, resp.Status, err, body)
	}
	m := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		if f := metricLine.FindStringSubmatch(l); f != nil {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				t.Fatalf("GET %s: %q: %v", url, l, err)
			}
			m[f[1]] = v
		}
	}
	if len(m) == 0 {
		t.Fatalf("GET %s: no goroce_ samples:\n%s", url, body)
	}
	return m
}

// TestMetricsV1OnlyDrops: a v1-only port's RoCE v2 drops (its link's
// rcvd_v2_on_v1_port) are goroce_port_drops_total{cause="v2_on_v1_port"};
// a port without that counter has no such series.
func TestMetricsV1OnlyDrops(t *testing.T) {
	reps := []*host.CounterReport{
		{Device: "rxeB", Port: 1, Counters: map[string]uint64{"rcvd_bad_icrc": 2},
			Link: map[string]uint64{afpacket.CounterV2OnV1: 7, afpacket.CounterV2CMOnV1: 3, afpacket.CounterV2OtherOnV1: 4}},
		{Device: "rxeA", Port: 1, Counters: map[string]uint64{}, Link: map[string]uint64{"rx_drop_not_for_us": 1}},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectFunc(func(ch chan<- prometheus.Metric) {
		for _, r := range reps {
			collectPort(ch, r)
		}
	}))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{} // device/cause -> drops
	for _, f := range fams {
		if f.GetName() != "goroce_port_drops_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			got[l["device"]+"/"+l["cause"]] = m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{"rxeB/v2_on_v1_port": 7, "rxeB/bad_icrc": 2, "rxeA/not_for_us": 1, "rxeA/bad_icrc": 0} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("drops %s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if _, ok := got["rxeA/v2_on_v1_port"]; ok {
		t.Errorf("rxeA, which speaks RoCE v2, has a v2_on_v1_port series")
	}
}

// collectFunc is an unchecked prometheus.Collector.
type collectFunc func(ch chan<- prometheus.Metric)

func (collectFunc) Describe(chan<- *prometheus.Desc)      {}
func (f collectFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// TestPerfInterrupt: Ctrl-C on a roce perf server waiting for its client,
// over the TCP exchange or with -R, ends it with exit 130 and one line on
// stderr saying what it was doing, as it ends every roce command.
func TestPerfInterrupt(t *testing.T) {
	ha, _ := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	if code, _, stderr := roceIn(t, ha, dir, "link", "add", "rxe0", "type", "rxe", "netdev", ha.Ifname, "roce-versions", "v2"); code != 0 {
		t.Fatalf("link add: %s", stderr)
	}
	exe := roceExecutable(t)
	for _, extra := range [][]string{nil, {"-R"}} {
		t.Run(strings.Join(append([]string{"write"}, extra...), "_"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
			srv := startProc(t, ctx, exe, dir, append([]string{"perf", "write", "-d", "rxe0", "-p", port}, extra...)...)
			srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
			if err := srv.cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			want := "roce: perf write: interrupted by SIGINT while waiting for a client on port " + port + "\n"
			if len(extra) > 0 {
				want = "roce: perf write: interrupted by SIGINT while waiting for a client on port " + port + " (RDMA CM)\n"
			}
			if code := srv.exitCode(t, ctx); code != 130 || srv.stderr.String() != want {
				t.Errorf("after Ctrl-C: exit %d, stderr %q; want exit 130 and %q", code, srv.stderr, want)
			}
		})
	}
}
