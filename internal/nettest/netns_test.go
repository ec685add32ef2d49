package nettest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testenv"
)

// privateEnv names the test a child process of privateRun runs.
const privateEnv = "GOROCE_NETTEST_PRIVATE_RUN"

// privateRun runs the calling test again in a child process with a mount
// namespace of its own and an empty tmpfs on /run, where /run/netns is a
// plain directory as on a freshly booted host, and reports whether this is
// that child (which then runs the test's body). So the test can let
// `ip netns add` bind /run/netns onto itself without touching the host's,
// where other tests and the lab keep their namespaces.
func privateRun(t *testing.T) bool {
	t.Helper()
	testenv.Root(t)
	_, err := exec.LookPath("ip")
	testenv.Require(t, err == nil, "ip (iproute2)")
	if os.Getenv(privateEnv) == t.Name() {
		if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=755"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(netnsDir, 0o755); err != nil {
			t.Fatal(err)
		}
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), privateEnv+"="+t.Name())
	// A new mount namespace, made private (os/exec does so for CLONE_NEWNS):
	// nothing mounted in it propagates to the host.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
	}
	t.Logf("in a mount namespace of its own:\n%s", out)
	return false
}

// ipNetns runs `ip netns ARGS`.
func ipNetns(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNamed mounts a new network namespace on netnsDir/name as
// netns.NewNamed does (and VethPair did before PrepareNetnsDir): on a file
// of the directory, whatever the directory is.
func newNamed(t *testing.T, name string) {
	t.Helper()
	err := Do(netns.None(), func() error {
		ns, err := netns.NewNamed(name)
		if err == nil {
			ns.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// leftovers returns what is left of the named namespaces: their files in
// netnsDir and their mounts, hidden or not.
func leftovers(t *testing.T, names ...string) []string {
	t.Helper()
	ms, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, n := range names {
		p := filepath.Join(netnsDir, n)
		if _, err := os.Lstat(p); err == nil {
			left = append(left, "file "+p)
		}
		for _, m := range ms {
			if m.mountPoint == p {
				left = append(left, "mount "+p)
			}
		}
	}
	return left
}

// TestVethPairThenIPNetnsAdd reproduces the order that leaked two
// namespaces after a green CI run: VethPair makes its namespaces while
// /run/netns is a plain directory, then `ip netns add` (the lab's up
// script, a CLI test) makes another, which binds /run/netns onto itself
// and hid VethPair's mounts; at the end of the test both namespaces were
// still there, unremovable. Now they are gone, and the other one works.
func TestVethPairThenIPNetnsAdd(t *testing.T) {
	if !privateRun(t) {
		return
	}
	var names []string
	t.Run("pair", func(t *testing.T) {
		a, b := VethPair(t, Options{})
		names = []string{a.NSName, b.NSName}
		ipNetns(t, "add", "probe")
		ipNetns(t, "exec", a.NSName, "ip", "link", "show", a.Ifname)
	})
	if left := leftovers(t, names...); len(left) != 0 {
		t.Errorf("after the test, left behind: %v", left)
	}
	ipNetns(t, "exec", "probe", "true")
	ipNetns(t, "del", "probe")
	if left := leftovers(t, "probe"); len(left) != 0 {
		t.Errorf("ip netns del probe left %v", left)
	}
}

// TestDeleteHiddenNamespace: a namespace mounted on the plain directory,
// then hidden by `ip netns add` (as by a process that does not prepare the
// directory), is deleted all the same: the copy the bind shows and the
// mount beneath it, then the file; the other namespace keeps working.
func TestDeleteHiddenNamespace(t *testing.T) {
	if !privateRun(t) {
		return
	}
	const name = "goroce-hidden"
	newNamed(t, name)
	ipNetns(t, "add", "probe")
	if left := leftovers(t, name); len(left) != 3 { // the file, the hidden mount and its copy
		t.Fatalf("before: %v, want the file and two mounts", left)
	}
	if err := deleteNamed(name); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, name); len(left) != 0 {
		t.Errorf("deleteNamed left %v", left)
	}
	ipNetns(t, "exec", "probe", "true")
	ipNetns(t, "del", "probe")
}

// TestReapStaleHidden: reapStale deletes a dead process's namespaces when
// they are hidden under a bind of the directory too, and leaves a live
// process's and other names alone.
func TestReapStaleHidden(t *testing.T) {
	if !privateRun(t) {
		return
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := vethPairName(dead.Process.Pid, 1, "a")
	live := vethPairName(os.Getppid(), 1, "a")
	newNamed(t, stale)
	newNamed(t, live)
	ipNetns(t, "add", "probe")
	if errs := reapStale(); len(errs) != 0 {
		t.Fatal(errs)
	}
	if left := leftovers(t, stale); len(left) != 0 {
		t.Errorf("reapStale left %v", left)
	}
	for _, n := range []string{live, "probe"} {
		ipNetns(t, "exec", n, "true")
	}
	if err := deleteNamed(live); err != nil {
		t.Error(err)
	}
	ipNetns(t, "del", "probe")
}

// TestPrepareNetnsDir: preparing the directory after a namespace was
// mounted on it plain makes /run/netns a shared mount point (so a later
// `ip netns add` binds nothing over it) and leaves no hidden mount behind:
// iproute2 then deletes that namespace completely.
func TestPrepareNetnsDir(t *testing.T) {
	if !privateRun(t) {
		return
	}
	const name = "goroce-before"
	newNamed(t, name)
	if err := PrepareNetnsDir(); err != nil {
		t.Fatal(err)
	}
	if err := PrepareNetnsDir(); err != nil { // a second time: nothing to do
		t.Fatal(err)
	}
	ms, err := readMountinfo()
	if err != nil {
		t.Fatal(err)
	}
	var run unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, "/run", 0, unix.STATX_MNT_ID, &run); err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, m := range ms {
		parent[m.id] = m.parent
	}
	above := func(id int) bool { // on the private /run, not the host's beneath it
		for i := 0; i < len(ms) && id != 0; i++ {
			if id = parent[id]; id == int(run.Mnt_id) {
				return true
			}
		}
		return false
	}
	binds := 0
	for _, m := range ms {
		if m.mountPoint == netnsDir && above(m.id) {
			binds++
		}
	}
	if binds != 1 {
		t.Errorf("%d mounts on %s, want 1", binds, netnsDir)
	}
	if left := leftovers(t, name); len(left) != 2 { // the file and one mount
		t.Errorf("after PrepareNetnsDir: %v, want the file and one mount", left)
	}
	ipNetns(t, "exec", name, "true")
	ipNetns(t, "add", "probe")
	ipNetns(t, "del", name)
	ipNetns(t, "del", "probe")
	if left := leftovers(t, name, "probe"); len(left) != 0 {
		t.Errorf("ip netns del left %v", left)
	}
}
