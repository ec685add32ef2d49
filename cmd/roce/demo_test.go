package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// TestDemo runs `roce demo` as a newcomer would: exit 0, nothing on
// stderr, and a line for each step. The numbers must be there; their
// values are the machine's, so they are not checked.
func TestDemo(t *testing.T) {
	code, stdout, stderr := roce(t, "demo")
	t.Logf("roce demo:\n%s", stdout)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	num := `[0-9]+(\.[0-9]+)?`
	for _, want := range []string{
		`connected in ` + num + ` ms: demo0 QP 0x[0-9a-f]+ <-> demo1 QP 0x[0-9a-f]+`,
		`SEND +demo0 -> demo1 .* landed in a receive buffer demo1 had posted +ok`,
		`WRITE +demo0 -> demo1 +4096 B placed in demo1's memory .* +ok`,
		`READ +demo0 <- demo1 +4096 B fetched from demo1's memory .* +ok`,
		`FETCH_ADD .* demo0 got the old value 100, the counter is now 123 +ok`,
		`CMP_SWAP .* demo0 got 123 \(it matched\), the counter is now 7 +ok`,
		`Loopback numbers .*not a network measurement`,
		`RDMA WRITE +64 KiB +bandwidth +` + num + ` MB/s`,
		`SEND/RECV +64 B +round trip +` + num + ` µs median`,
		`10% injected loss`,
		`RDMA WRITE +1 MiB .* every byte arrived intact +ok`,
		`the links dropped [1-9][0-9]* of [0-9]+ packets`,
		`demo0 retrans_pkts [0-9]+ `,
		`in-memory fabric \(RoCE v1 is raw Ethernet, which needs root`,
		`goroce's diagnosis \(rdmacm Options.Logf\) at ` + num + ` s: peer 192.0.2.2 answers RoCE v1 only`,
		`connect failed after ` + num + ` s: rdmacm: RDMA_CM_EVENT_UNREACHABLE`,
		`SetDefaultMode\("demoA", 1, wire.RoCEv1\)`,
		`demoA's default_roce_mode is now "IB/RoCE v1"`,
		`connected in ` + num + ` ms over RoCE v1: demoA QP`,
		`Every check passed`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("demo output lacks %s", want)
		}
	}
	if strings.Index(stdout, "answers RoCE v1 only") > strings.Index(stdout, "connect failed") {
		t.Error("the diagnosis does not come before the failed connect")
	}
}

// TestDemoPcap: --pcap writes a capture that roce decode verifies.
func TestDemoPcap(t *testing.T) {
	f := filepath.Join(t.TempDir(), "demo.pcap")
	code, stdout, stderr := roce(t, "demo", "--pcap", f)
	if code != 0 || !strings.Contains(stdout, "Wrote "+f) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, stdout, stderr = roce(t, "decode", "--verify", f)
	if code != 0 {
		t.Fatalf("decode: exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"CM REQ", "CM REP", "CM RTU", "RC_SEND_ONLY", "RC_RDMA_WRITE", "RC_RDMA_READ_REQUEST",
		"RC_FETCH_ADD", "RC_COMPARE_SWAP", "CM DREQ"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the capture's decode lacks %q", want)
		}
	}
	if m := statsLine.FindStringSubmatch(strings.TrimSpace(stderr)); m == nil || m[2] != m[3] || m[2] == "0" {
		t.Errorf("decode --verify: %q", stderr)
	}
}

// TestDemoRping: --rping shows the bundled capture of Linux rxe's rping.
func TestDemoRping(t *testing.T) {
	code, stdout, stderr := roce(t, "demo", "--rping")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"A real capture of Linux Soft-RoCE running rping, decoded by goroce's wire\nlayer, with every ICRC verified.",
		"RoCE v2", "rping -s -a 192.0.2.11 -v -C 10",
		"CM REQ", "CM REP", "CM RTU", "RC_RDMA_READ_REQUEST", "RC_RDMA_WRITE_ONLY", "RC_ACKNOWLEDGE", "CM DREQ", "CM DREP",
		"rping.pcap: 125 RoCE packets (125 ICRC ok), 2 other frames skipped.",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if n := strings.Count(stdout, " RoCEv2 "); n != 17 {
		t.Errorf("%d packet lines, want 17", n)
	}
	_, all, _ := roce(t, "demo", "--rping", "--all")
	if n := strings.Count(all, " RoCEv2 "); n != 125 {
		t.Errorf("demo --rping --all: %d packet lines, want 125", n)
	}
	if code, _, stderr := roce(t, "demo", "--all"); code == 0 || !strings.Contains(stderr, "--all goes with --rping") {
		t.Errorf("demo --all: exit %d, stderr %q", code, stderr)
	}
}

// TestDemoAsNobody runs roce demo as a user without privileges (nobody,
// with no capabilities and no writable home), as the README's first
// command runs on a fresh machine: exit 0 and every check passed. It needs
// root to become nobody.
func TestDemoAsNobody(t *testing.T) {
	testenv.Root(t)
	setpriv, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv (util-linux)")
	// A copy of this binary where nobody can run it (go test's build
	// directory is root's alone).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "goroce-demo-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "roce")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
		bin, "demo")
	cmd.Env = []string{"GOROCE_TEST_ROCE=1", "GORACE=atexit_sleep_ms=0", "HOME=/nonexistent", "PATH=/usr/bin:/bin"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	t.Logf("roce demo as nobody: %v in %v", err, time.Since(start).Round(time.Millisecond))
	if err != nil || !strings.Contains(stdout.String(), "Every check passed") {
		t.Fatalf("exit: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
}
