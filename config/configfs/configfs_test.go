package configfs_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/config/configfs"
	"github.com/goroce/goroce/config/configtest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/wire"
)

// requireFUSE fails (CI) or skips (elsewhere) without root and /dev/fuse.
func requireFUSE(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	_, err := os.Stat("/dev/fuse")
	testenv.Require(t, err == nil, "/dev/fuse (modprobe fuse)")
}

// The devices: rxe0 speaks RoCE v2 only, like the lab's Linux rxe0; rxe1
// both versions; rxe2 RoCE v1 only.
var devs = []config.Device{
	{Name: "rxe0", RoCEv2: true},
	{Name: "rxe1", RoCEv1: true, RoCEv2: true},
	{Name: "rxe2", RoCEv1: true},
}

// mounted reports whether dir is a mount point (/proc/self/mountinfo).
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 4 && fields[4] == dir {
			return true
		}
	}
	return false
}

// mountTree registers devs in a fresh runtime directory and mounts its
// tree; it is unmounted when the test ends, whatever happened.
func mountTree(t *testing.T) (mnt string, tree *config.Tree, reg *configtest.Registry) {
	t.Helper()
	return mountTreeWith(t, configfs.Options{})
}

// mountTreeWith is mountTree with options.
func mountTreeWith(t *testing.T, o configfs.Options) (mnt string, tree *config.Tree, reg *configtest.Registry) {
	t.Helper()
	requireFUSE(t)
	rundir := t.TempDir()
	reg = configtest.NewRegistry(devs...)
	tree = config.Open(rundir, reg)
	mnt = testenv.SharedMountPoint(t) // removed after the unmount below: cleanups run last-first
	srv, err := configfs.MountWith(mnt, tree, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		if mounted(t, mnt) {
			t.Errorf("%s is still mounted", mnt)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
	})
	if srv.Dir() != mnt || !mounted(t, mnt) {
		t.Fatalf("%s is not mounted (Dir %s)", mnt, srv.Dir())
	}
	return mnt, tree, reg
}

// newShell returns a runner of scripts with bash -c, as the lab ran them,
// in the C locale, with BusyBox's mkdir, rmdir, ls and cat first in PATH
// when BusyBox is installed (the lab's VM had those; coreutils word their
// messages differently, which normalize allows for). It returns stdout and
// stderr together, and the exit status.
func newShell(t *testing.T) func(script string) (string, int) {
	t.Helper()
	env := append(os.Environ(), "LC_ALL=C")
	if bb, err := exec.LookPath("busybox"); err == nil {
		dir := t.TempDir()
		for _, applet := range []string{"mkdir", "rmdir", "ls", "cat"} {
			if err := os.Symlink(bb, filepath.Join(dir, applet)); err != nil {
				t.Fatal(err)
			}
		}
		env = append(env, "PATH="+dir+":"+os.Getenv("PATH"))
	}
	return func(script string) (string, int) {
		t.Helper()
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("%s: %v", script, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
}

var (
	lsLong    = regexp.MustCompile(`^([-dl][-rwxsStT]{9})\s+(\d+)\s+(\S+)\s+(\S+)\s+(\d+)\s+\w{3}\s+\d+\s+[\d:]+\s+(.*)$`)
	toolError = regexp.MustCompile(`^(mkdir|rmdir|cat|ls|dd): .*: ([^:]+)$`)
)

// normalize keeps what the kernel decides from a command's output: ls -l
// lines without their dates, and of a tool's error message only its errno
// text (BusyBox and coreutils word the rest differently).
func normalize(out string) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if m := lsLong.FindStringSubmatch(l); m != nil {
			l = strings.Join(m[1:], " ")
		} else if m := toolError.FindStringSubmatch(l); m != nil {
			l = m[1] + ": …: " + m[2]
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

type labStep struct {
	cmd, out string
	status   int
}

// labProcedure is the configfs section of the lab's transcript of Linux
// 6.1 (KERNEL-BEHAVIOUR.md): the Red Hat procedure on rxe0, each command
// with its output and exit status.
func labProcedure(t *testing.T) []labStep {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.SharedDir(t), "lab", "KERNEL-BEHAVIOUR.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## configfs:")
	if start < 0 {
		t.Fatal("KERNEL-BEHAVIOUR.md has no configfs section")
	}
	s = s[start+1:]
	if end := strings.Index(s, "\n## "); end >= 0 {
		s = s[:end]
	}
	var steps []labStep
	block := regexp.MustCompile("(?s)```\n# ([^\n]*)\n(.*?)\\[exit status (\\d+)\\]\n```")
	for _, m := range block.FindAllStringSubmatch(s, -1) {
		var st int
		fmt.Sscan(m[3], &st)
		steps = append(steps, labStep{cmd: m[1], out: strings.TrimSuffix(m[2], "\n"), status: st})
	}
	if len(steps) < 30 {
		t.Fatalf("the configfs section has only %d commands", len(steps))
	}
	return steps
}

// TestLabProcedure runs the lab's configfs procedure verbatim, with a real
// shell, on the goroce device rxe0 (RoCE v2 only, like rxe), with the mount
// point for /sys/kernel/config, and compares every output and exit status
// with Linux's: mkdir, ls -R and ls -la, the modes, "IB/RoCE v1" → Invalid
// argument, the ToS syntax and its ERANGE, EEXIST, ENODEV, EPERM, and the
// values surviving rmdir.
func TestLabProcedure(t *testing.T) {
	steps := labProcedure(t)
	mnt, _, _ := mountTree(t)
	shell := newShell(t)
	for i, s := range steps {
		cmd := strings.ReplaceAll(s.cmd, "/sys/kernel/config", mnt)
		out, status := shell(cmd)
		out = strings.ReplaceAll(out, mnt, "/sys/kernel/config")
		if s.cmd == "mount | grep configfs" {
			// The kernel's configfs is "none on /sys/kernel/config type configfs".
			if status != 0 || !strings.Contains(out, "on /sys/kernel/config type fuse.configfs") {
				t.Errorf("step %d: %s: exit %d\n%s", i, s.cmd, status, out)
			}
			continue
		}
		if got, want := normalize(out), normalize(s.out); got != want || status != s.status {
			t.Errorf("step %d: # %s\ngot (exit %d):\n%s\nwant (exit %d):\n%s", i, s.cmd, status, got, s.status, want)
		}
	}
}

// TestOtherPorts: what the lab's rxe could not show — a port that speaks
// RoCE v1 takes "IB/RoCE v1", a v1-only port refuses "RoCE v2" — and the
// rest of the configfs contract through the shell.
func TestOtherPorts(t *testing.T) {
	mnt, tree, reg := mountTree(t)
	shell := newShell(t)
	rc := mnt + "/rdma_cm"
	mode1 := rc + "/rxe1/ports/1/default_roce_mode"
	tos1 := rc + "/rxe1/ports/1/default_roce_tos"
	mode2 := rc + "/rxe2/ports/1/default_roce_mode"
	for i, s := range []labStep{
		{"mkdir " + rc + "/rxe1/ " + rc + "/rxe2", "", 0},
		{"cat " + mode1, "RoCE v2", 0},
		{`echo "IB/RoCE v1" > ` + mode1, "", 0},
		{"cat " + mode1, "IB/RoCE v1", 0},
		{`echo "IB/RoCE v1" > ` + mode1 + "; echo $?; cat " + mode1, "0\nIB/RoCE v1", 0},
		// One write(2) of "RoCE v2\n\n" is EINVAL and changes nothing ...
		{`printf 'RoCE v2\n\n' | dd of=` + mode1 + ` bs=64 count=1 iflag=fullblock status=none`, "dd: …: Invalid argument", 1},
		{"cat " + mode1, "IB/RoCE v1", 0},
		// ... but bash's printf writes line by line: "RoCE v2\n" is
		// taken, then "\n" alone is EINVAL — as on Linux.
		{`printf 'RoCE v2\n\n' > ` + mode1, "bash: line 1: printf: write error: Invalid argument", 1},
		{"cat " + mode1, "RoCE v2", 0},
		{`echo "IB/RoCE v1" > ` + mode1, "", 0},
		{"cat " + mode2, "IB/RoCE v1", 0},
		{`echo "RoCE v2" > ` + mode2, "bash: line 1: echo: write error: Invalid argument", 1},
		{"cat " + mode2, "IB/RoCE v1", 0},
		{`echo "IB/RoCE v1" > ` + mode2 + " && cat " + mode2, "IB/RoCE v1", 0},
		// O_TRUNC and truncate(2) change nothing.
		{"echo 106 > " + tos1 + "; : > " + tos1 + "; truncate -s 0 " + tos1 + "; cat " + tos1, "106", 0},
		{"stat -c '%s %A %h' " + tos1 + " " + rc + "/rxe1/ports/1", "4096 -rw-r--r-- 1\n0 drwxr-xr-x 2", 0},
		{"echo 7 >> " + tos1 + "; cat " + tos1, "7", 0},
		// A write(2) stores its first 4095 bytes (the value 0) and says so;
		// dd writes the rest, "9", in a second store.
		{"printf '%04096d' 9 | dd of=" + tos1 + " bs=8192 count=1 iflag=fullblock status=none; cat " + tos1, "9", 0},
		// Written, then fsync: configfs has none (EINVAL).
		{"echo 5 | dd of=" + tos1 + " conv=fsync status=none; cat " + tos1, "dd: …: Invalid argument\n5", 0},
		{"echo 0 > " + tos1, "", 0},
		// What configfs has no use for.
		{"echo x > " + rc + "/rxe1/ports/1/other", "bash: line 1: " + rc + "/rxe1/ports/1/other: Permission denied", 1},
		{"rm " + tos1 + " 2>&1 | sed 's/.*: //'", "Operation not permitted", 0},
		{"mv " + tos1 + " " + rc + "/rxe1/ports/1/x 2>&1 | sed 's/.*: //'", "Operation not permitted", 0},
		{"ln -s x " + rc + "/rxe1/ports/1/x 2>&1 | sed 's/.*: //'", "Operation not permitted", 0},
		{"chmod 600 " + tos1 + " 2>&1 | sed 's/.*: //'", "Operation not permitted", 0},
		{"mkdir " + rc + "/rxe1/ports/1/x", "mkdir: …: Operation not permitted", 1},
		{"mkdir " + rc + "/rxe1/ports/1", "mkdir: …: File exists", 1},
		{"mkdir " + rc + "/rxe1/foo", "mkdir: …: Operation not permitted", 1},
		{"mkdir " + mnt + "/foo", "mkdir: …: Operation not permitted", 1},
		{"rmdir " + rc, "rmdir: …: Operation not permitted", 1},
		{"rmdir " + rc + "/rxe1/ports", "rmdir: …: Operation not permitted", 1},
		{"rmdir " + rc + "/rxe1/ports/2", "rmdir: …: No such file or directory", 1},
		{"ls " + rc, "rxe1\nrxe2", 0},
		{"ls " + mnt, "rdma_cm", 0},
		// An open attribute dies with its directory, even when it is made
		// again (configfs: a dead fragment).
		{"exec 3>" + tos1 + "; rmdir " + rc + "/rxe1; echo 5 >&3; mkdir " + rc + "/rxe1; echo 5 >&3; echo 6 > " + tos1 + "; cat " + tos1,
			"bash: line 1: echo: write error: No such file or directory\nbash: line 1: echo: write error: No such file or directory\n6", 0},
	} {
		out, status := shell(s.cmd)
		if got := normalize(out); got != s.out || status != s.status {
			t.Errorf("step %d: # %s\ngot (exit %d):\n%s\nwant (exit %d):\n%s", i, s.cmd, status, got, s.status, s.out)
		}
	}

	// No caching: what another writer sets is what the next read shows,
	// both ways.
	for _, tos := range []uint8{1, 77, 255} {
		if err := tree.SetDefaultTOS("rxe1", 1, tos); err != nil {
			t.Fatal(err)
		}
		if out, _ := shell("cat " + tos1); out != fmt.Sprintf("%d\n", tos) {
			t.Errorf("after SetDefaultTOS(%d): cat shows %q", tos, out)
		}
	}
	if out, st := shell("echo 0x40 > " + tos1); st != 0 {
		t.Fatalf("echo 0x40: %s", out)
	}
	if tos, err := tree.DefaultTOS("rxe1", 1); err != nil || tos != 64 {
		t.Errorf("DefaultTOS after echo 0x40 = %d, %v", tos, err)
	}
	if err := tree.SetDefaultMode("rxe1", 1, wire.RoCEv2); err != nil {
		t.Fatal(err)
	}
	if out, _ := shell("cat " + mode1); out != "RoCE v2\n" {
		t.Errorf("after SetDefaultMode: cat shows %q", out)
	}

	// A deleted device's directory stays, and its attributes say ENODEV.
	reg.Delete("rxe2")
	out, status := shell("ls " + rc + "; cat " + mode2)
	if got := normalize(out); got != "rxe1\nrxe2\ncat: …: No such device" || status != 1 {
		t.Errorf("deleted device: exit %d\n%s", status, got)
	}
	if out, status := shell("rmdir " + rc + "/rxe2 && ls " + rc); out != "rxe1\n" || status != 0 {
		t.Errorf("rmdir of a deleted device's directory: exit %d %q", status, out)
	}
}

// TestConcurrentShells: one shell process writes the mode through the mount
// as fast as it can while another reads it and this process reads it
// through the tree: every read is a whole valid value, and the last write
// wins.
func TestConcurrentShells(t *testing.T) {
	mnt, tree, _ := mountTree(t)
	shell := newShell(t)
	mode := mnt + "/rdma_cm/rxe1/ports/1/default_roce_mode"
	if out, st := shell("mkdir " + mnt + "/rdma_cm/rxe1"); st != 0 {
		t.Fatal(out)
	}
	writer := exec.Command("bash", "-c", `for i in $(seq 200); do echo "IB/RoCE v1" > `+mode+` && echo "RoCE v2" > `+mode+` || exit 1; done`)
	reader := exec.Command("bash", "-c", `for i in $(seq 400); do cat `+mode+` || exit 1; done`)
	var wout, rout strings.Builder
	writer.Stdout, writer.Stderr = &wout, &wout
	reader.Stdout, reader.Stderr = &rout, &rout
	if err := writer.Start(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		m, err := tree.DefaultMode("rxe1", 1)
		if err != nil || (m != wire.RoCEv1 && m != wire.RoCEv2) {
			t.Errorf("DefaultMode = %v, %v", m, err)
			break
		}
	}
	werr, rerr := writer.Wait(), reader.Wait()
	if werr != nil || rerr != nil {
		t.Fatalf("writer: %v %s\nreader: %v %s", werr, wout.String(), rerr, rout.String()[:min(200, rout.Len())])
	}
	lines := strings.Split(strings.TrimSuffix(rout.String(), "\n"), "\n")
	seen := map[string]int{}
	for _, l := range lines {
		seen[l]++
	}
	if len(lines) != 400 || seen["RoCE v2"]+seen["IB/RoCE v1"] != 400 {
		t.Errorf("the reader saw %d lines: %v", len(lines), seen)
	}
	t.Logf("reader saw %v", seen)
	if out, _ := shell("cat " + mode); out != "RoCE v2\n" {
		t.Errorf("after the writer: %q", out)
	}
}

// TestRefused: Options.Refused hears the tree's error for each refused
// write(2) — the message that names the valid values, which the writer
// cannot see — while the writer still gets the kernel's errno, and
// accepted writes and refused mkdirs are not reported.
func TestRefused(t *testing.T) {
	var (
		mu  sync.Mutex
		got []error
	)
	mnt, _, _ := mountTreeWith(t, configfs.Options{Refused: func(err error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, err)
	}})
	shell := newShell(t)
	port := mnt + "/rdma_cm/rxe1/ports/1/"
	for i, s := range []labStep{
		{"mkdir " + mnt + "/rdma_cm/rxe1 " + mnt + "/rdma_cm/nosuchdev", "mkdir: …: No such device", 1},
		{`echo "IB/RoCE v1" > ` + port + "default_roce_mode", "", 0},
		{`echo "RoCE v3" > ` + port + "default_roce_mode", "bash: line 1: echo: write error: Invalid argument", 1},
		{"echo 256 > " + port + "default_roce_tos", "bash: line 1: echo: write error: Numerical result out of range", 1},
		{"echo 7 > " + port + "default_roce_tos", "", 0},
		{"cat " + port + "default_roce_mode " + port + "default_roce_tos", "IB/RoCE v1\n7", 0},
	} {
		out, status := shell(s.cmd)
		if got := normalize(out); got != s.out || status != s.status {
			t.Errorf("step %d: # %s\ngot (exit %d):\n%s\nwant (exit %d):\n%s", i, s.cmd, status, got, s.status, s.out)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		path  string
		errno syscall.Errno
		msg   string
	}{
		{"rdma_cm/rxe1/ports/1/default_roce_mode", syscall.EINVAL,
			`write rdma_cm/rxe1/ports/1/default_roce_mode: "RoCE v3\n" is not a RoCE mode: rxe1 port 1: it takes "IB/RoCE v1" or "RoCE v2": invalid argument`},
		{"rdma_cm/rxe1/ports/1/default_roce_tos", syscall.ERANGE, "default_roce_tos takes 0..255"},
	}
	if len(got) != len(want) {
		t.Fatalf("Refused heard %d errors, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		var ce *config.Error
		if !errors.As(got[i], &ce) || ce.Op != "write" || ce.Path != w.path || config.Errno(got[i]) != w.errno ||
			!strings.Contains(got[i].Error(), w.msg) {
			t.Errorf("Refused heard %T %q; want a *config.Error of write %s, %v, saying %q", got[i], got[i], w.path, w.errno, w.msg)
		}
	}
}

// TestOtherUsers: the tree root mounts is readable by every user, as the
// kernel's configfs is (0755 directories, 0644 attributes, all root's),
// and writable by root only: another user's mkdir, write and rmdir are
// refused by the kernel's permission check (default_permissions) and
// change nothing.
func TestOtherUsers(t *testing.T) {
	testenv.Root(t)
	mnt, tree, _ := mountTree(t)
	for p := filepath.Dir(mnt); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755) // let uid 65534 reach the mount point
	}
	attr := mnt + "/rdma_cm/rxe0/ports/1/default_roce_mode"
	if err := os.Mkdir(mnt+"/rdma_cm/rxe0", 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(script string) (string, error) {
		cmd := exec.Command("bash", "-c", script)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := asNobody("cat " + attr); err != nil || out != "RoCE v2\n" {
		t.Errorf("uid 65534 reading %s: %q, %v", attr, out, err)
	}
	for _, script := range []string{
		"echo 'IB/RoCE v1' > " + attr,
		"mkdir " + mnt + "/rdma_cm/rxe1",
		"rmdir " + mnt + "/rdma_cm/rxe0",
	} {
		out, err := asNobody(script)
		if err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("uid 65534: %s: %q, %v; want Permission denied", script, out, err)
		}
	}
	if b, err := os.ReadFile(attr); err != nil || string(b) != "RoCE v2\n" {
		t.Errorf("after uid 65534's attempts: %q, %v", b, err)
	}
	if ents, err := tree.ReadDir(""); err != nil || len(ents) != 1 {
		t.Errorf("rdma_cm holds %v, %v; want rxe0 alone", ents, err)
	}
}
