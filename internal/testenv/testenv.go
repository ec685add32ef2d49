// Package testenv finds what tests need outside the repository (the shared
// traces and lab, tshark, root) and decides what a missing prerequisite
// means: on a developer machine the test is skipped with a message naming
// what is missing; in CI (CI=true) it fails, so CI never passes by skipping.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run in CI (the environment variable CI is "true").
func InCI() bool { return os.Getenv("CI") == "true" }

// Require fails (in CI) or skips (elsewhere) t when ok is false, naming what is missing.
func Require(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("prerequisite missing (CI=true, so this is a failure): %s", what)
	}
	t.Skipf("skipped: prerequisite missing: %s", what)
}

// RepoRoot returns the repository root: the nearest directory above the
// working directory that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// SharedDir returns ../shared relative to the repository root (the traces
// and the lab), or fails/skips when it is missing.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(filepath.Dir(RepoRoot(t)), "shared")
	_, err := os.Stat(filepath.Join(dir, "traces"))
	Require(t, err == nil, "the shared traces at "+dir+"/traces")
	return dir
}

// Traces returns the paths of every ../shared/traces/*.pcap.
func Traces(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(SharedDir(t), "traces", "*.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	Require(t, len(paths) > 0, "pcap files in ../shared/traces")
	return paths
}

// Tshark returns the path of tshark, or fails/skips when it is not installed
// (Debian package tshark; .ci/run installs it).
func Tshark(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	Require(t, err == nil, "tshark (apt-get install tshark)")
	return p
}

// Root fails/skips t unless it runs as root.
func Root(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "root privileges")
}

// Slow is the bound for waits on things that take a moment on an idle
// machine and seconds on a loaded one (a 2-core CI host shared with
// compiles, emulated VMs): a wait polls for its condition, and gives up
// only after Slow, a time no healthy run comes near.
const Slow = 2 * time.Minute

// FreeTCPPort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreeTCPPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Poll calls cond every 50 ms until it returns true or within has passed,
// and reports whether it returned true. For waits on a condition with no
// event to wait on (a file's contents, a process's output).
func Poll(within time.Duration, cond func() bool) bool {
	for end := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// SharedMountPoint returns an empty directory inside a bind mount of a
// temporary directory onto itself, made shared (MS_SHARED), unmounted when
// t ends: where a test mounts a FUSE file system. Other tests and tools on the machine run `ip netns exec`, which
// copies every mount into a new mount namespace and makes the copies
// slaves (MS_SLAVE|MS_REC on /): under a private parent the copy of the
// FUSE mount would keep its connection alive after this test's unmount,
// which configfs then reports (after 3 s) and aborts. Under a shared
// parent the unmount propagates to those copies, as it does on a
// systemd host, whose / is shared.
func SharedMountPoint(t testing.TB) string {
	t.Helper()
	base := t.TempDir()
	if err := unix.Mount(base, base, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount %s: %v", base, err)
	}
	t.Cleanup(func() { unix.Unmount(base, unix.MNT_DETACH) })
	if err := unix.Mount("", base, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", base, err)
	}
	mnt := filepath.Join(base, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}

// RootPortLock is the file whose lock the tests hold while they bind UDP
// port 4791 in the host's own network namespace (a device on lo, links on
// 127.0.0.x): go test runs several packages' test binaries at once, and
// two such binds collide (EADDRINUSE, seen in CI as a device that would
// not open on lo).
func RootPortLock() string { return filepath.Join(os.TempDir(), "goroce-test-root-port-4791.lock") }

// RunHoldingRootPort runs m's tests holding RootPortLock (HoldRootPort)
// and returns m.Run's code: the TestMain of a package whose tests bind the
// port is os.Exit(testenv.RunHoldingRootPort(m)).
func RunHoldingRootPort(m *testing.M) int {
	release := HoldRootPort()
	defer release()
	return m.Run()
}

// HoldRootPort takes RootPortLock, waiting for the test binary that holds
// it, and returns its release.
//
// A test binary that a holder runs as a child (a test re-executing itself)
// is under its parent's hold and takes nothing: waiting for its parent
// would never end.
func HoldRootPort() (release func()) {
	const held = "GOROCE_TEST_ROOT_PORT_HELD"
	if os.Getenv(held) == "1" {
		return func() {}
	}
	release = holdLock(RootPortLock())
	os.Setenv(held, "1")
	return release
}

// holdLock takes an exclusive flock on the file at path, waiting for its
// holder, and returns its release.
func holdLock(path string) (release func()) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			os.Stderr.WriteString("testenv: waiting for another package's tests to let go of " + path + "\n")
		}
	}()
	for unix.Flock(int(f.Fd()), unix.LOCK_EX) == unix.EINTR {
	}
	close(done)
	return func() { f.Close() }
}
