package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
)

// vmRun is one run of bench/vm.sh's JSON (-j).
type vmRun struct {
	Round    int      `json:"round"`
	Stack    string   `json:"stack"`
	Kind     string   `json:"kind"`
	Test     string   `json:"test"`
	Value    *float64 `json:"value"`
	TxPkts   *int     `json:"client_eth0_tx_packets"`
	RxPkts   *int     `json:"client_eth0_rx_packets"`
	ClientTS float64  `json:"client_seconds"`
	// rxe's and goroce's runs: each side's counters that say a packet
	// went missing or came twice, those not 0 (null: none read).
	Counters *struct {
		Server *map[string]int64 `json:"server"`
		Client *map[string]int64 `json:"client"`
	} `json:"counters"`
	// What the host's CPUs did while the client ran, seconds.
	Host *struct {
		VM1VCPU  float64 `json:"vm1_vcpu"`
		VM2VCPU  float64 `json:"vm2_vcpu"`
		HostBusy float64 `json:"host_busy"`
	} `json:"host_cpu_seconds"`
}

// vmHostCPU is a row of -H's table: a stack's host CPU per write_bw message.
type vmHostCPU struct {
	Stack      string   `json:"stack"`
	Kind       string   `json:"kind"`
	VM1VCPU    *float64 `json:"vm1_vcpu_ms"`
	VM2VCPU    *float64 `json:"vm2_vcpu_ms"`
	Other      *float64 `json:"qemu_other_ms"`
	All        *float64 `json:"all_ms"`
	AllOverRxe *float64 `json:"all_over_rxe"`
	Busy       *float64 `json:"host_busy_pct"`
	Rounds     int      `json:"rounds"`
}

// String gives the row's figures (NA for one missing).
func (h vmHostCPU) String() string {
	f := func(v *float64) string {
		if v == nil {
			return "NA"
		}
		return strconv.FormatFloat(*v, 'f', 3, 64)
	}
	return fmt.Sprintf("vm1 vCPU %s, vm2 vCPU %s, other %s, all %s, all/rxe %s, busy %s%%, rounds %d",
		f(h.VM1VCPU), f(h.VM2VCPU), f(h.Other), f(h.All), f(h.AllOverRxe), f(h.Busy), h.Rounds)
}

// checkHostCPU: every run says what the host's CPUs did while its client
// ran: the client's vCPU busy (it ran the tool), the host busy at least
// that, and no more than its CPUs over the client's time.
func checkHostCPU(t *testing.T, runs []vmRun) {
	t.Helper()
	ncpu := float64(runtime.NumCPU())
	for _, r := range runs {
		if h := r.Host; h == nil || h.VM2VCPU <= 0 || h.VM1VCPU < 0 || h.HostBusy < h.VM2VCPU || h.HostBusy > ncpu*(r.ClientTS+0.2) {
			t.Errorf("%s %s %s, round %d (client %.1f s): host CPU %+v", r.Stack, r.Kind, r.Test, r.Round, r.ClientTS, r.Host)
		}
	}
}

// checkCounters: rxe's and goroce's runs carry both sides' counters
// (goroce's GOROCE_STATS, rxe0's hw_counters over the run, read back from
// the VMs), the floor's none.
func checkCounters(t *testing.T, runs []vmRun) {
	t.Helper()
	for _, r := range runs {
		switch {
		case r.Stack != "floor" && (r.Counters == nil || r.Counters.Server == nil || r.Counters.Client == nil):
			t.Errorf("%s %s %s, round %d: no counters from both sides: %+v", r.Stack, r.Kind, r.Test, r.Round, r.Counters)
		case r.Stack == "floor" && r.Counters != nil:
			t.Errorf("floor %s: counters %+v", r.Test, r.Counters)
		case r.Stack != "floor":
			t.Logf("%s %s %s: counters of note: server %v, client %v", r.Stack, r.Kind, r.Test, *r.Counters.Server, *r.Counters.Client)
		}
	}
}

type vmFloor struct {
	Test            string   `json:"test"`
	Kind            string   `json:"kind"`
	RxeMedian       *float64 `json:"rxe_median"`
	FloorMedian     *float64 `json:"floor_median"`
	GoroceMedian    *float64 `json:"goroce_median"`
	FloorOverRxe    *float64 `json:"floor_over_rxe_median"`
	GoroceOverFloor *float64 `json:"goroce_over_floor_median"`
}

type vmSummary struct {
	Test        string   `json:"test"`
	Kind        string   `json:"kind"`
	RxeMedian   *float64 `json:"rxe_median"`
	GoroceMed   *float64 `json:"goroce_median"`
	RatioMedian *float64 `json:"ratio_median"`
}

// TestLabVMScript runs bench/vm.sh --quick -f -c -T -H (one round, few
// iterations, the UDP floors under the three tests, send_lat captured,
// the turnaround split and write_bw's host CPU per message) on the lab: it must boot or reuse the
// lab with this tree's roce and udpfloor in the VMs, run every test on rxe
// and on goroce and the floor, print the tables with a figure and a ratio
// in every cell, write each run to its JSON with the ratios the tables'
// figures give, and leave the VMs as the lab's README has them —
// rdma_rxe loaded, rxe0 on eth0 and working (an ibv_rc_pingpong between
// the VMs), nothing of its own left behind. No figure is judged: the
// lab's VMs are emulated, and only the side-by-side ratio means anything.
func TestLabVMScript(t *testing.T) {
	labDir := requireLab(t)
	jsonPath := filepath.Join(t.TempDir(), "runs.json")
	logs := t.TempDir()
	start := time.Now()
	stdout, stderr, err := runVMScript(t, labDir, 20*time.Minute, "--quick", "-f", "-c", "-T", "-H", "-n", "150,150,20", "-j", jsonPath, "-l", logs)
	t.Logf("bench/vm.sh --quick took %v; stderr:\n%s", time.Since(start).Round(time.Second), stderr)
	if err != nil {
		for _, f := range mustGlob(t, filepath.Join(logs, "*.log")) {
			b, _ := os.ReadFile(f)
			t.Logf("%s:\n%s", filepath.Base(f), b)
		}
		t.Fatalf("bench/vm.sh --quick: %v\nstdout:\n%s", err, stdout)
	}

	// The table: a header and one row per test, every cell filled.
	table := stdout
	t.Logf("stdout:\n%s", table)
	cell := `(\d+(\.\d+)? \[\d+(\.\d+)?–\d+(\.\d+)?\])`
	row := regexp.MustCompile(`(?m)^\| ` + "`" + `(ibv_rc_pingpong|ib_send_lat|ib_write_bw) [^|]+ \| ` + cell + ` \| ` + cell + ` \| \d+\.\d\d× \[\d+\.\d\d–\d+\.\d\d\] rxe's (time|latency|rate) \| [≤≥] 1\.[05]× \(met in [01] of 1\) \|$`)
	if !strings.Contains(table, "| test (client vm2 → server vm1) | rxe | goroce | goroce/rxe, paired rounds | goal |\n|---|---|---|---|---|\n") {
		t.Errorf("no table header on stdout")
	}
	if rows := row.FindAllStringSubmatch(table, -1); len(rows) != 3 || rows[0][1] != "ibv_rc_pingpong" || rows[1][1] != "ib_send_lat" || rows[2][1] != "ib_write_bw" {
		t.Errorf("want the three rows pingpong, send_lat, write_bw with figures in every cell; got %d rows matching", len(rows))
	}

	// The JSON: every run a figure and packets on eth0, the summary's
	// ratio that of the figures.
	var doc struct {
		Commit  string      `json:"commit"`
		Rounds  int         `json:"rounds"`
		Runs    []vmRun     `json:"runs"`
		Summary []vmSummary `json:"summary"`
		Floor   []vmFloor   `json:"floor"`
		HostCPU []vmHostCPU `json:"host_cpu"`
		// -c's captured send_lat runs.
		Captures []struct {
			Stack, Test string
			Turn1       float64 `json:"turnaround_vm1_us"`
			Turn2       float64 `json:"turnaround_vm2_us"`
			Wire        float64 `json:"wire_us"`
			Count1      int     `json:"turnarounds_vm1"`
			Count2      int     `json:"turnarounds_vm2"`
		} `json:"captures"`
	}
	b := readJSON(t, jsonPath, &doc)
	if doc.Rounds != 1 || doc.Commit == "" || doc.Commit == "unknown" {
		t.Errorf("JSON: rounds %d, commit %q", doc.Rounds, doc.Commit)
	}
	values := map[string]float64{}
	for _, r := range doc.Runs {
		if r.Value == nil || *r.Value <= 0 || r.TxPkts == nil || r.RxPkts == nil || *r.TxPkts <= 0 || *r.RxPkts <= 0 {
			t.Errorf("run %+v: no figure or no packets on eth0", r)
			continue
		}
		values[r.Stack+"/"+r.Test] = *r.Value
	}
	checkCounters(t, doc.Runs)
	checkHostCPU(t, doc.Runs)
	if len(doc.Runs) != 9 || len(values) != 9 {
		t.Errorf("want 9 runs (3 tests × rxe, goroce and the floor), got %d: %s", len(doc.Runs), b)
	}
	if len(doc.Summary) != 3 {
		t.Errorf("want 3 summary rows, got %d", len(doc.Summary))
	}
	for _, s := range doc.Summary {
		x, y := values["rxe/"+s.Test], values["goroce/"+s.Test]
		if s.Kind != "v2" || s.RatioMedian == nil || x == 0 || math.Abs(*s.RatioMedian-y/x) > 1e-3*y/x {
			t.Errorf("summary %s (%s): ratio %v, the runs give %g/%g", s.Test, s.Kind, s.RatioMedian, y, x)
		}
	}

	// The floors' table and JSON: a row per test, its figures, and the
	// ratios of the runs'.
	frow := regexp.MustCompile(`(?m)^\| ` + "`" + `(pingpong|send_lat|write_bw)` + "`" + ` [^|]+ \(goroce v2, 1 round\(s\)\) \| ` + cell + ` \| ` + cell + ` \| ` + cell + ` \| \d+\.\d\d× \[[^]]+\] \| \d+\.\d\d× \[[^]]+\] \|$`)
	if rows := frow.FindAllStringSubmatch(table, -1); !strings.Contains(table, "| test | rxe | UDP floor | goroce | floor/rxe | goroce/floor |\n") ||
		len(rows) != 3 || rows[0][1] != "pingpong" || rows[1][1] != "send_lat" || rows[2][1] != "write_bw" {
		t.Errorf("no floor table with the three tests' rows, figures in every cell")
	}
	if len(doc.Floor) != 3 {
		t.Errorf("JSON: want 3 floor rows, got %+v", doc.Floor)
	}
	for _, fl := range doc.Floor {
		x, f, y := values["rxe/"+fl.Test], values["floor/"+fl.Test], values["goroce/"+fl.Test]
		if fl.Kind != "v2" || fl.FloorOverRxe == nil || fl.GoroceOverFloor == nil || x == 0 || f == 0 ||
			math.Abs(*fl.FloorOverRxe-f/x) > 1e-3*f/x || math.Abs(*fl.GoroceOverFloor-y/f) > 1e-3*y/f {
			t.Errorf("JSON floor %s: %+v, the runs give rxe %g, floor %g, goroce %g", fl.Test, fl, x, f, y)
		}
	}

	// -H: each stack's write_bw made again with 5× the iterations (its
	// logs TAG-long), and a row per stack of what the host's CPUs spent
	// per message the longer run moved more: every part read (none
	// negative), the whole some and at least the two vCPUs', rxe's whole
	// over itself 1. A part may be 0: --quick's longer run moves 80
	// messages more, a tenth of a second or so of a vCPU, which the
	// kernel counts in 10 ms ticks, and a busy host moves it by more
	// (the floor's client vCPU read 0.000 ms in one CI run, 20:03 UTC
	// on 2026-12-06, with a stray lab's VMs on the host).
	hrow := regexp.MustCompile(`(?m)^\| (rxe|goroce v2|floor) \| ` + cell + ` \| ` + cell + ` \| ` + cell + ` \| ` + cell + ` \| \d+\.\d\d× \[[^]]+\] \| ` + cell + ` \| 1 \|$`)
	if rows := hrow.FindAllStringSubmatch(table, -1); !strings.Contains(table, "| write_bw, host CPU per 64 KiB message (-H: -n 100 less -n 20), ms | vm1 (server) vCPU | vm2 (client) vCPU |") || len(rows) != 3 {
		t.Errorf("no host CPU table with a row for rxe, goroce and the floor, figures in every cell (%d rows)", len(rows))
	}
	for _, st := range []string{"rxe", "goroce-v2", "floor"} {
		if b, err := os.ReadFile(filepath.Join(logs, "r1-"+st+"-write_bw-long.client.log")); err != nil || !strings.Contains(string(b), " 100 ") {
			t.Errorf("%s's longer write_bw run (-n 100): %v\n%s", st, err, b)
		}
	}
	if len(doc.HostCPU) != 3 {
		t.Errorf("JSON: want 3 host CPU rows, got %+v", doc.HostCPU)
	}
	for _, h := range doc.HostCPU {
		if h.VM1VCPU == nil || h.VM2VCPU == nil || h.Other == nil || h.All == nil || h.AllOverRxe == nil || h.Busy == nil || h.Rounds != 1 ||
			*h.VM1VCPU < 0 || *h.VM2VCPU < 0 || *h.Other < 0 || *h.All <= 0 || *h.All < *h.VM1VCPU+*h.VM2VCPU-0.2 || *h.Busy <= 0 ||
			h.Stack == "rxe" && *h.AllOverRxe != 1 {
			t.Errorf("JSON host CPU row %s %s: %s", h.Stack, h.Kind, h)
		}
	}

	// -c: the send_lat runs captured in both VMs, and a row per stack
	// of each side's turnaround and the wire, from those captures.
	trow := regexp.MustCompile(`(?m)^\| (rxe|goroce v2|floor) \| ` + cell + ` \| ` + cell + ` \| (-?\d+ \[-?\d+–-?\d+\]) \| 1 \|$`)
	if rows := trow.FindAllStringSubmatch(table, -1); !strings.Contains(table, "| send_lat, captured in both VMs (bench/cmd/turnaround) | vm1 (server) turnaround, µs |") || len(rows) != 3 {
		t.Errorf("no capture table with a row for rxe, goroce and the floor, figures in every cell")
	}
	for _, st := range []string{"rxe", "goroce-v2", "floor"} {
		for _, vm := range []string{"vm1", "vm2"} {
			if fi, err := os.Stat(filepath.Join(logs, "r1-"+st+"-send_lat."+vm+".pcap")); err != nil || fi.Size() < 1000 {
				t.Errorf("%s's send_lat capture in %s: %v", st, vm, err)
			}
		}
	}

	// -T: binaries built with the goroce_turn tag; each side of the
	// pingpong and send_lat runs of goroce and of the floor says where its
	// turnarounds went (150 round trips: the split prints from 100).
	srow := regexp.MustCompile(`(?m)^\| (goroce-v2|floor)-(pingpong|send_lat) \| (vm1 \(server\)|vm2 \(client\)) \| ` +
		`\d+\.\d \[[\d.]+–[\d.]+\] \| \d+\.\d \[[\d.]+–[\d.]+\] \| \d+\.\d \[[\d.]+–[\d.]+\] \| 1 \|$`)
	if rows := srow.FindAllStringSubmatch(table, -1); !strings.Contains(table, "| turnaround split (-T), per side, medians µs | side | wake | path | send (sendmmsg) | runs |\n") || len(rows) != 8 {
		t.Errorf("no turnaround split table with a row for each side of goroce's and the floor's pingpong and send_lat (%d rows)", len(rows))
	}

	if len(doc.Captures) != 3 {
		t.Errorf("JSON: want 3 captured runs (rxe, goroce, the floor), got %+v", doc.Captures)
	}
	for _, c := range doc.Captures {
		if c.Test != "send_lat" || c.Turn1 <= 0 || c.Turn2 <= 0 || c.Count1 <= 0 || c.Count2 <= 0 {
			t.Errorf("JSON capture %+v: want send_lat with both turnarounds", c)
		}
	}

	// The VMs as the README describes them, rxe working between them.
	l := lab.Start(t)
	for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
		out := l.MustExec(t, vm, "rdma link show; grep -c '^rdma_rxe ' /proc/modules; ss -uan | grep -c ':4791 '; ls -d /tmp/goroce-vmbench 2>&1; true")
		if !regexp.MustCompile(`(?m)^link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 $`).MatchString(out) ||
			!strings.Contains(out, "\n1\n2\n") || !strings.Contains(out, "No such file") {
			t.Errorf("%s after the script (want rxe0 on eth0, rdma_rxe loaded and on UDP 4791 twice, no /tmp/goroce-vmbench):\n%s", vm.Name, out)
		}
	}
	g1 := l.GIDIndex(t, lab.VM1, lab.VM1.IPv4)
	g2 := l.GIDIndex(t, lab.VM2, lab.VM2.IPv4)
	server := l.Background(t, lab.VM1, "/tmp/vmscript-pp.log", 100*time.Second, "ibv_rc_pingpong -d rxe0 -g "+strconv.Itoa(g1)+" -n 5")
	if ok := testenv.Poll(testenv.Slow, func() bool {
		out, _, _ := l.Exec(lab.VM1, "ss -tln | grep -c ':18515 '")
		_, _, exited := server.Log()
		return strings.TrimSpace(out) == "1" || exited
	}); !ok {
		t.Fatal("ibv_rc_pingpong's server in vm1 never listened")
	}
	if out, rc, err := l.Exec(lab.VM2, "timeout 100 ibv_rc_pingpong -d rxe0 -g "+strconv.Itoa(g2)+" -n 5 "+lab.VM1.Mgmt); err != nil || rc != 0 || !strings.Contains(out, "5 iters in") {
		t.Errorf("rxe after the script: ibv_rc_pingpong client: exit %d %v\n%s", rc, err, out)
	}
	if log := server.Wait(); !strings.Contains(log, "5 iters in") || !strings.HasSuffix(strings.TrimSpace(log), "EXIT 0") {
		t.Errorf("rxe after the script: ibv_rc_pingpong server:\n%s", log)
	}
}

// requireLab: root and the interop lab (../shared/lab), or the test
// cannot run; it returns the lab's directory.
func requireLab(t *testing.T) string {
	t.Helper()
	testenv.Root(t)
	labDir := filepath.Join(testenv.SharedDir(t), "lab")
	_, err := os.Stat(filepath.Join(labDir, "up"))
	testenv.Require(t, err == nil, "the interop lab at "+labDir)
	// As lab.Start: lab/setup installs qemu, which CI lets it do.
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil && !testenv.InCI() && os.Getenv("GOROCE_LAB") == "" {
		testenv.Require(t, false, "qemu (run ../shared/lab/setup, or set GOROCE_LAB=1 to let the tests run it)")
	}
	return labDir
}

// runVMScript runs bench/vm.sh with args, on the lab in labDir, until a
// minute before the test's deadline (without one, for limit). The script takes
// the lab's lock itself (lab.Start here would hold it against the
// script): it may wait for other tests' turns, up to five minutes before
// that end. Cancelled, it gets SIGINT, on which it restores the VMs.
func runVMScript(t *testing.T, labDir string, limit time.Duration, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	if d, ok := t.Deadline(); ok {
		deadline = d.Add(-time.Minute)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(t), "bench", "vm.sh"), args...)
	cmd.Env = append(os.Environ(), "ROCE_LAB_DIR="+labDir,
		"ROCE_LAB_LOCK_WAIT="+strconv.Itoa(int(time.Until(deadline).Seconds())-300))
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	// The script's own tools must not have failed along the way, even
	// where the run went on: an error of awk, sed, sort, join or bash's
	// own (vm.sh: line N:) is a bug in the script.
	if m := scriptErr.FindAllString(errOut.String(), -1); len(m) > 0 {
		t.Errorf("bench/vm.sh's stderr has errors of its tools: %q", m)
	}
	return out.String(), errOut.String(), err
}

var scriptErr = regexp.MustCompile(`(?m)^(awk|gawk|mawk|sed|sort|join|grep): .*$|vm\.sh: line \d+: .*$`)

// readJSON reads vm.sh's JSON (-j) at path into v, and returns it.
func readJSON(t *testing.T, path string, v any) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("the JSON: %v\n%s", err, b)
	}
	return b
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLabVMScriptMTU runs bench/vm.sh --quick -M 9000 -f: the lab's link
// at MTU 9000 for the run, so every tool's path MTU is 4096 — rxe's
// (its active_mtu follows eth0), goroce's and the floor's — which the
// packets on the wire show: a 64 KiB WRITE is 16 packets, not 64. After
// it, the link's MTU is the lab's again, in both VMs and in the lab's
// namespace. A link MTU the script cannot use is refused before the lab
// is touched. The run has a second goroce kind, v2@GODEBUG=inittrace=1: the
// same device, with that in its commands' environment only (their logs
// have the runtime's init lines, v2's none), not set up again.
func TestLabVMScriptMTU(t *testing.T) {
	labDir := requireLab(t)
	script := filepath.Join(testenv.RepoRoot(t), "bench", "vm.sh")
	for _, bad := range []struct{ args, want string }{
		{"-M 100", "-M: a link MTU from 1280 to 9000, not '100'"},
		{"-M 9000 -k v2,v2x", "-M 9000: rx-path xdp (-k v2x) takes a link MTU of at most 3826"},
		{"-M 9000 -k v2,v2x@A=1", "-M 9000: rx-path xdp (-k v2x) takes a link MTU of at most 3826"},
		{"-k v2@FOO", "-k v2@FOO: VAR=VALUE after each @, the value of letters, digits and _.,:/=+-, not 'FOO'"},
		{"-k v2@", "-k v2@: VAR=VALUE after @"},
		{"-k v3@A=1", "-k: device kinds are v2, v2s, v2x and both, not 'v3'"},
	} {
		out, err := exec.Command(script, strings.Fields(bad.args)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), bad.want) {
			t.Errorf("bench/vm.sh %s: %v, want exit 2 and %q:\n%s", bad.args, err, bad.want, out)
		}
	}

	const traced = "v2@GODEBUG=inittrace=1"
	jsonPath, logs := filepath.Join(t.TempDir(), "runs.json"), t.TempDir()
	stdout, stderr, err := runVMScript(t, labDir, 15*time.Minute, "--quick", "-M", "9000", "-f", "-n", "50,50,10", "-k", "v2,"+traced, "-j", jsonPath, "-l", logs)
	t.Logf("stderr:\n%s", stderr)
	if err != nil {
		t.Fatalf("bench/vm.sh --quick -M 9000: %v\nstdout:\n%s", err, stdout)
	}
	if !strings.Contains(stdout, "Both sides' path MTU 4096 (the link's MTU 9000).") ||
		!strings.Contains(stdout, "write_bw (least 160): rxe ") {
		t.Errorf("the table's notes do not name path MTU 4096 and its 160 packets for write_bw:\n%s", stdout)
	}
	var doc struct {
		LinkMTU int     `json:"link_mtu"`
		PathMTU int     `json:"path_mtu"`
		Runs    []vmRun `json:"runs"`
	}
	readJSON(t, jsonPath, &doc)
	checkCounters(t, doc.Runs)
	if doc.LinkMTU != 9000 || doc.PathMTU != 4096 {
		t.Errorf("JSON: link_mtu %d, path_mtu %d; want 9000, 4096", doc.LinkMTU, doc.PathMTU)
	}
	// 10 WRITEs of 64 KiB at path MTU 4096: 160 packets from the client,
	// retransmissions aside; at 1024 they would be 640.
	bw := 0
	for _, r := range doc.Runs {
		if r.Test != "write_bw" {
			continue
		}
		bw++
		if r.Value == nil || r.TxPkts == nil || *r.TxPkts < 160 || *r.TxPkts >= 320 {
			t.Errorf("%s write_bw: %v MB/s, %v packets sent; want 160 to 319 (16 a message)", r.Stack, r.Value, r.TxPkts)
		}
	}
	if bw != 4 {
		t.Errorf("want write_bw runs of rxe, goroce's two kinds and the floor, got %d", bw)
	}

	// The kind with @: its commands, and only its, ran with the variable,
	// on the device v2 set up.
	initLine := regexp.MustCompile(`(?m)^init [\w./-]+ @[\d.]+ ms`)
	for _, test := range []string{"pingpong", "send_lat", "write_bw"} {
		for kind, want := range map[string]bool{"v2": false, traced: true} {
			b, err := os.ReadFile(filepath.Join(logs, "r1-goroce-"+kind+"-"+test+".client.log"))
			if err != nil || initLine.Match(b) != want {
				t.Errorf("goroce %s %s: the client's log has the runtime's init lines: %v, want %v (%v)", kind, test, initLine.Match(b), want, err)
			}
		}
	}
	if strings.Contains(stderr, "kind "+traced+")") || !strings.Contains(stdout, traced+" = v2 with GODEBUG=inittrace=1 in goroce's commands' environment") {
		t.Errorf("the kind %s: set up anew (stderr), or not described (stdout)", traced)
	}

	// The link as the lab has it again.
	l := lab.Start(t)
	for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
		if out := strings.TrimSpace(l.MustExec(t, vm, "cat /sys/class/net/eth0/mtu")); out != "1500" {
			t.Errorf("%s's eth0 MTU after the script: %s, want 1500", vm.Name, out)
		}
	}
	out, err := exec.Command("ip", "netns", "exec", lab.Netns, "ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link in the lab's namespace: %v\n%s", err, out)
	}
	for _, dev := range []string{"tap-vm1", "tap-vm2", "br-roce"} {
		if !regexp.MustCompile(`(?m)^\d+: ` + dev + `: .* mtu 1500 `).Match(out) {
			t.Errorf("%s's MTU after the script is not 1500:\n%s", dev, out)
		}
	}
}
