package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

func TestStatResNotRunning(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v2")
	note := "roce: note: rxe0 is not open by any process"
	out := wantRun(t, dir, exitOK, []string{note}, "stat")
	if !strings.HasPrefix(out, "link rxe0/1 sent_pkts 0 rcvd_pkts 0 duplicate_request 0 out_of_seq_request 0 ") ||
		!strings.Contains(out, " retrans_pkts 0 np_cnp_sent 0 np_ecn_marked_roce_packets 0 rp_cnp_handled 0 rp_cnp_ignored 0 rx_drop_not_for_us 0 rx_drop_kernel_refused 0 rx_drop_socket_full 0 tx_drop_no_route 0 tx_drop_bad_address 0 \n") {
		t.Errorf("stat of an idle device: %q", out)
	}
	if out := wantRun(t, dir, exitOK, []string{note}, "stat", "show", "link", "rxe0/1", "-j"); !strings.HasPrefix(out, `[{"ifname":"rxe0","port":1,"sent_pkts":0,`) {
		t.Errorf("stat -j: %q", out)
	}
	if out := wantRun(t, dir, exitOK, []string{note}, "res", "show", "qp"); out != "" {
		t.Errorf("res show qp of an idle device: %q", out)
	}
	if out := wantRun(t, dir, exitOK, []string{note}, "res"); out != "0: rxe0: qp 0 cm_id 0 \n" {
		t.Errorf("res: %q", out)
	}
	wantRun(t, dir, exitError, []string{"roce: stat: No such device: no device rxe7 in " + dir}, "stat", "rxe7")
	wantRun(t, dir, exitError, []string{"roce: res show: No such device: no device rxe7"}, "res", "show", "qp", "rxe7")
	wantRun(t, dir, exitError, []string{"roce: capture: No such device: no device rxe7"}, "capture", "-d", "rxe7", "-w", filepath.Join(dir, "x.pcap"))
	wantRun(t, dir, exitError, []string{"rxe0 is not open by any process"}, "capture", "-d", "rxe0", "-w", filepath.Join(dir, "x.pcap"))
	wantRun(t, dir, exitUsage, []string{"port \"2\": goroce devices have port 1 only"}, "stat", "rxe0/2")
	wantRun(t, dir, exitUsage, []string{"-w FILE is required"}, "capture", "-d", "rxe0")
	wantRun(t, dir, exitUsage, []string{"--metrics-addr ADDR is required"}, "metrics")
}

// roceProc starts roce as a process of its own, ended when the test ends.
func roceProc(t *testing.T, ctx context.Context, exe, dir string, args ...string) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, append([]string{"--rundir", dir}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	return cmd, stderr, &stdout
}

var sentPkts = regexp.MustCompile(`^link rxe0/1 sent_pkts (\d+) `)

// TestStatResCaptureMetrics runs a pingpong server and client as processes
// on two devices joined by a veth pair and, while they ping, reads the
// server's counters (roce stat, stat --qp), its QP (roce res show qp), 10
// of its packets (roce capture -c 10, checked by roce decode --verify and
// tshark) and its Prometheus metrics (--metrics-addr on the server).
func TestStatResCaptureMetrics(t *testing.T) {
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
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	_, srvErr, _ := roceProc(t, ctx, exe, dir, "pingpong", "-d", "rxe0", "-g", "1", "-n", "1000000", "-p", port, "--metrics-addr", "127.0.0.1:0")
	srvLog := &lockedBuffer{} // all of the server's stderr, for a failure's message
	line := firstLine(t, io.TeeReader(srvErr, srvLog))
	m := regexp.MustCompile(`serving metrics at (http://\S+/metrics)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("server's first line: %q", line)
	}
	metricsURL := m[1]

	// The server runs rxe0 once stat stops saying nobody does.
	var stderr string
	if !testenv.Poll(testenv.Slow, func() bool {
		var c int
		c, _, stderr = roceAt(t, dir, "stat", "rxe0")
		return c == 0 && stderr == ""
	}) {
		t.Fatalf("the pingpong server never opened rxe0: %s\nserver stderr:\n%s", stderr, srvLog)
	}
	pcapFile := filepath.Join(dir, "rxe0.pcap")
	capCmd, capErr, _ := roceProc(t, ctx, exe, dir, "capture", "-d", "rxe0", "-w", pcapFile, "-c", "10")
	capLines := make(chan string, 1)
	go func() { b, _ := io.ReadAll(capErr); capLines <- string(b) }()
	roceProc(t, ctx, exe, dir, "pingpong", "-d", "rxe1", "-g", "1", "-n", "1000000", "-p", port, "127.0.0.1")

	// The counters move.
	var first, n uint64
	if !testenv.Poll(testenv.Slow, func() bool {
		out := wantRun(t, dir, exitOK, nil, "stat", "rxe0/1")
		mm := sentPkts.FindStringSubmatch(out)
		if mm == nil {
			t.Fatalf("stat: %q", out)
		}
		n, _ = strconv.ParseUint(mm[1], 10, 64)
		if first == 0 {
			first = n
		}
		return n > first
	}) {
		t.Fatalf("sent_pkts stays at %d", n)
	}

	// The QP is in RTS, connected to rxe1's.
	out := wantRun(t, dir, exitOK, nil, "res", "show", "qp", "rxe0")
	qp := regexp.MustCompile(`^link rxe0/1 lqpn (\d+) rqpn \d+ type RC state RTS rq-psn \d+ sq-psn \d+ path-mig-state MIGRATED pdn \d+ pid \d+ comm \S+ \n$`).FindStringSubmatch(out)
	if qp == nil {
		t.Fatalf("res show qp: %q", out)
	}
	out = wantRun(t, dir, exitOK, nil, "stat", "rxe0", "--qp", qp[1])
	if !strings.HasPrefix(out, "link rxe0/1 lqpn "+qp[1]+" qp-type RC state RTS pid ") || !strings.Contains(out, " sent_pkts ") {
		t.Errorf("stat --qp %s: %q", qp[1], out)
	}
	wantRun(t, dir, exitError, []string{"roce: stat: no QP 9999 on rxe0"}, "stat", "rxe0", "--qp", "9999")

	// The capture stops after 10 packets, and they decode. Its stderr is
	// read to the end before Wait, which closes the pipe (a summary line
	// still unread would be lost).
	s := <-capLines
	if err := capCmd.Wait(); err != nil {
		t.Fatalf("capture: %v\n%s", err, s)
	}
	if !strings.Contains(s, "\n10 packets captured\n") || !strings.Contains(s, "packets dropped by rxe0") {
		t.Errorf("capture's summary: %q", s)
	}
	code, stdout, stderr := roce(t, "decode", "--verify", pcapFile)
	if code != 0 || strings.Count(stdout, "RoCEv2") != 10 || !strings.Contains(stderr, "10 RoCE packets (10 ICRC ok)") {
		t.Errorf("decode --verify: exit %d\n%s%s", code, stdout, stderr)
	}
	tshark := testenv.Tshark(t)
	ts, err := exec.CommandContext(ctx, tshark, "-r", pcapFile).CombinedOutput()
	if err != nil || strings.Count(string(ts), "RRoCE") != 10 || strings.Contains(string(ts), "Malformed") {
		t.Errorf("tshark -r: %v\n%s", err, ts)
	}

	// A capture without -c ends on SIGTERM, cleanly, with its summary.
	sigFile := filepath.Join(dir, "sig.pcap")
	sigCmd, sigErr, _ := roceProc(t, ctx, exe, dir, "capture", "-d", "rxe0", "-w", sigFile)
	sigLines := make(chan string, 1)
	go func() { b, _ := io.ReadAll(sigErr); sigLines <- string(b) }()
	for {
		// Wait for the listening line's effect: records after the header.
		if st, err := os.Stat(sigFile); err == nil && st.Size() > 24 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the second capture wrote nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	sigCmd.Process.Signal(syscall.SIGTERM)
	if err := sigCmd.Wait(); sigCmd.ProcessState.ExitCode() != 143 {
		t.Errorf("capture ended by SIGTERM: %v, want exit status 143", err)
	}
	if s := <-sigLines; !regexp.MustCompile(`\n([1-9]\d*) packets captured\n(.|\n)*\nroce: capture: interrupted by SIGTERM after capturing [1-9]\d* packets\n$`).MatchString(s) {
		t.Errorf("capture ended by SIGTERM: %q", s)
	}
	if code, _, stderr := roce(t, "decode", "--verify", sigFile); code != 0 {
		t.Errorf("decode --verify of the SIGTERM capture: %s", stderr)
	}

	// The server's exporter shows its counters.
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, re := range []string{
		`(?m)^goroce_device_running\{device="rxe0"\} 1$`,
		`(?m)^goroce_device_running\{device="rxe1"\} 1$`,
		`(?m)^goroce_port_sent_pkts_total\{device="rxe0",port="1"\} [1-9]`,
		`(?m)^goroce_port_drops_total\{cause="bad_icrc",device="rxe0",port="1"\} 0$`,
		`(?m)^goroce_port_retrans_pkts_total\{device="rxe0",port="1"\} \d`,
		`(?m)^# HELP goroce_port_rcvd_rnr_err_total The port's rcvd_rnr_err counter, as rxe's hw_counters name it: RNR NAKs received`,
		`(?m)^# HELP goroce_port_retrans_pkts_total goroce's retrans_pkts counter \(rxe has none; roce stat shows it\)`,
		`(?m)^# HELP goroce_port_rcvd_bad_icrc_total goroce's rcvd_bad_icrc counter \(rxe has none`,
		`(?m)^goroce_qps\{device="rxe0",state="RTS",type="RC"\} 1$`,
	} {
		if !regexp.MustCompile(re).Match(body) {
			t.Errorf("/metrics lacks %s", re)
		}
	}
	// One family per figure: the retransmissions and RNR NAKs are
	// goroce_port_retrans_pkts_total and goroce_port_{rcvd,send}_rnr_err_total,
	// not those again under other names.
	for _, dup := range []string{"goroce_port_retransmitted_packets_total", "goroce_port_rnr_naks_total"} {
		if strings.Contains(string(body), dup) {
			t.Errorf("/metrics has %s, a second family of the same figure", dup)
		}
	}
	if resp.StatusCode != http.StatusOK || t.Failed() {
		t.Logf("/metrics: %s\n%s", resp.Status, fmt.Sprint(string(body[:min(len(body), 4000)])))
	}
}
