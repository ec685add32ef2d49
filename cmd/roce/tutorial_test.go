package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// runExe runs the roce executable exe with args and returns its exit
// status and stderr.
func runExe(t *testing.T, exe string, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(exe, args...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s %s: %v", exe, strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestRundirNotWritableSaysFix is the tutorial's first step as a user
// without root who did not set GOROCE_RUNDIR: `roce link add` failed with
// "Permission denied: mkdir /run/goroce" and no word of what to do. It now
// says to run as root or give a runtime directory the user can create,
// and still exits 1.
func TestRundirNotWritableSaysFix(t *testing.T) {
	bin, nobody := asNobody(t)
	rundir := filepath.Join(bin, "run")
	code, stderr := nobody("--rundir", rundir, "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v2")
	if code != exitError {
		t.Errorf("exit %d, want %d\nstderr: %s", code, exitError, stderr)
	}
	for _, want := range []string{"Permission denied: mkdir " + rundir,
		"run as root, or pass --rundir DIR or set GOROCE_RUNDIR to a directory this user can create"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if n := strings.Count(stderr, "\n"); n != 1 {
		t.Errorf("stderr has %d lines, want 1: %q", n, stderr)
	}
}

// TestV1WithoutRootSaysFix: the tutorial's default device (roce-versions
// both) run by a user without root said "run as root" and nothing of the
// other way, the "Without root" section's RoCE v2 device.
func TestV1WithoutRootSaysFix(t *testing.T) {
	_, nobody := asNobody(t)
	tmp, err := os.MkdirTemp("", "goroce-tutorial-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o1777)
	rundir := filepath.Join(tmp, "run")
	if code, stderr := nobody("--rundir", rundir, "link", "add", "rxe0", "type", "rxe", "netdev", "lo"); code != 0 {
		t.Fatalf("link add: exit %d: %s", code, stderr)
	}
	code, stderr := nobody("--rundir", rundir, "pingpong", "-g", "1", "-p", freePort(t), "127.0.0.1")
	if code != exitError {
		t.Errorf("exit %d, want %d\nstderr: %s", code, exitError, stderr)
	}
	want := "needs raw Ethernet (AF_PACKET): run as root, or without root use a RoCE v2 device (roce link add NAME type rxe netdev lo roce-versions v2)"
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q lacks %q", stderr, want)
	}
}

// asNobody copies the test binary where nobody can run it (go test's
// build directory is root's alone) and returns that root-owned directory
// and a function that runs roce as nobody, without capabilities, and
// returns its exit status and stderr.
func asNobody(t *testing.T) (string, func(args ...string) (int, string)) {
	t.Helper()
	testenv.Root(t)
	setpriv, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv (util-linux)")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "goroce-tutorial-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	os.Chmod(bin, 0o755) // root's, which nobody can read but not write
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	test := filepath.Join(bin, "roce.test")
	if err := os.WriteFile(test, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, func(args ...string) (int, string) {
		t.Helper()
		var stderr bytes.Buffer
		cmd := exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", test}, args...)...)
		cmd.Env = []string{"GOROCE_TEST_ROCE=1", "GORACE=atexit_sleep_ms=0", "PATH=/usr/bin:/bin", "HOME=/nonexistent"}
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
}

// TestPerfBadGIDIndexSaysFix: `roce perf write -x 9` on a device with
// fewer GIDs said "GID index 9: the port has 2 GIDs", naming neither the
// flag nor where to find a valid index.
func TestPerfBadGIDIndexSaysFix(t *testing.T) {
	_, b, roceA := tutorialHosts(t)
	code, stderr := roceA("perf", "write", "-x", "9", b.IPv4.String())
	if code != exitError {
		t.Errorf("exit %d, want %d\nstderr: %s", code, exitError, stderr)
	}
	if !regexp.MustCompile(`-x 9: no such GID index: the port has \d+ GIDs, 0 to \d+ \(roce gids shows which to use\)`).MatchString(stderr) {
		t.Errorf("stderr %q does not name the flag, the valid indexes and roce gids", stderr)
	}
}

// TestStrayArgumentSaysFix: the newcomer's `roce ping -c 198.18.0.2` (the
// address without -a), `roce mode rxe0` (the device without -d) and
// `roce configfs mount` (no directory) got cobra's "unknown command
// "198.18.0.2" for "roce ping"" or "accepts 1 arg(s), received 0". Each
// now says what is wrong and how the command is written, on stderr, and
// exits 2 with nothing on stdout.
func TestStrayArgumentSaysFix(t *testing.T) {
	exe := roceExecutable(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ping", "-c", "198.18.0.2"}, `roce ping takes no arguments, and was given "198.18.0.2": the address goes with -a: roce ping -s -a ADDR (server), roce ping -c -a ADDR (client)`},
		{[]string{"mode", "rxe0"}, `roce mode takes no arguments, and was given "rxe0": the device goes with -d: roce mode -d DEV`},
		{[]string{"tos", "rxe0", "106"}, `roce tos takes no arguments, and was given "rxe0 106": the device goes with -d: roce tos -d DEV`},
		{[]string{"capture", "rxe0"}, `roce capture takes no arguments, and was given "rxe0": the device goes with -d and the file with -w`},
		{[]string{"configfs", "mount"}, `accepts 1 arg(s), received 0: name the directory to serve the tree in: roce configfs mount DIR`},
	} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(exe, append([]string{"--rundir", dir}, tc.args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		line := strings.Join(tc.args, " ")
		if code := cmd.ProcessState.ExitCode(); code != exitUsage {
			t.Errorf("roce %s: exit %d, want %d", line, code, exitUsage)
		}
		if stdout.Len() != 0 {
			t.Errorf("roce %s: stdout %q", line, stdout.String())
		}
		if !strings.Contains(stderr.String(), "roce: "+tc.want) {
			t.Errorf("roce %s: stderr %q lacks %q", line, stderr.String(), tc.want)
		}
	}
}

// TestNoServerSaysFix: the tutorial's client started before its server
// (or with another -p) got only "Couldn't connect to ADDR:PORT: ...
// connection refused", and `pingpong --ud` with a size over the MTU only
// "Requested size larger than port MTU (N)". Both keep rdma-core's words
// first and now say what to do; both exit 1.
func TestNoServerSaysFix(t *testing.T) {
	_, b, roceA := tutorialHosts(t)
	peer := regexp.QuoteMeta(b.IPv4.String())
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pingpong", "-g", "1", b.IPv4.String()},
			`^roce: Couldn't connect to ` + peer + `:\d+: .*connection refused: no server listens there: start it first \(roce pingpong -g N, without an address, on that host\) with the same -p\n$`},
		{[]string{"perf", "write", b.IPv4.String()},
			`^roce: Couldn't connect to ` + peer + `:\d+: .*connection refused: no server listens there: start it first \(the same roce perf test, without an address, on that host\) with the same -p\n$`},
		{[]string{"pingpong", "--ud", "-g", "1", "-s", "2048"},
			`^roce: Requested size larger than port MTU \((\d+)\): pass -s (\d+) or less \(UD sends one packet per message\)\n$`},
	} {
		code, stderr := roceA(tc.args...)
		line := strings.Join(tc.args, " ")
		if code != exitError {
			t.Errorf("roce %s: exit %d, want %d\nstderr: %s", line, code, exitError, stderr)
		}
		if !regexp.MustCompile(tc.want).MatchString(stderr) {
			t.Errorf("roce %s: stderr %q does not match %s", line, stderr, tc.want)
		}
	}
}

// tutorialHosts is the tutorial's "On one machine": two namespaces joined
// by a veth (1500-byte MTU: the active MTU is 1024), a RoCE v2 device on
// A's end, and nothing running on B. It returns A, B and a function that
// runs the roce executable in A's namespace with A's runtime directory.
func tutorialHosts(t *testing.T) (a, b *nettest.Host, roceA func(args ...string) (int, string)) {
	t.Helper()
	a, b = nettest.VethPair(t, nettest.Options{})
	exe := roceExecutable(t)
	dir := t.TempDir()
	roceA = func(args ...string) (int, string) {
		t.Helper()
		return runExe(t, "ip", append([]string{"netns", "exec", a.NSName, exe, "--rundir", dir}, args...)...)
	}
	if code, stderr := roceA("link", "add", "rxe0", "type", "rxe", "netdev", a.Ifname, "roce-versions", "v2"); code != 0 {
		t.Fatalf("link add: exit %d: %s", code, stderr)
	}
	return a, b, roceA
}
