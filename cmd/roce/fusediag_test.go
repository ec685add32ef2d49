package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stuckAfter bounds every wait on a FUSE mount in these tests: a server that
// stops answering must fail the test with a diagnosis, not hang go test
// until its timeout kills the binary and the evidence with it.
const stuckAfter = 3 * time.Minute

// fuseWatch watches over one FUSE mount and the processes that use it.
type fuseWatch struct {
	t      *testing.T
	mnt    string
	server *exec.Cmd    // the serving process, when it is one of its own
	stderr fmt.Stringer // where the server's stderr goes (goroutine dumps land here)
}

// within runs f and returns its error; if f has not returned after
// stuckAfter, it reports what every process involved is waiting on, aborts
// the FUSE connection (which fails the stuck calls), and fails the test.
func (w *fuseWatch) within(what string, f func() error) error {
	w.t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(stuckAfter):
	}
	diag := w.diagnose()
	w.abort()
	w.t.Fatalf("%s: stuck for %v on the FUSE mount %s\n%s", what, stuckAfter, w.mnt, diag)
	return nil
}

// diagnose describes the processes involved: this one's descendants and the
// server's, each with its state, wait channel and kernel stack, then the
// server's goroutines (SIGQUIT makes a Go process print them and exit).
func (w *fuseWatch) diagnose() string {
	var b strings.Builder
	fmt.Fprintf(&b, "processes:\n%s", describeTree(os.Getpid()))
	if w.server != nil && w.server.Process != nil {
		w.server.Process.Signal(syscall.SIGQUIT)
		w.server.Process.Signal(syscall.SIGCONT) // in case it was stopped
		time.Sleep(2 * time.Second)
		if w.stderr != nil {
			fmt.Fprintf(&b, "server stderr:\n%s\n", w.stderr.String())
		}
	}
	return b.String()
}

// abort ends the FUSE connection behind the mount, as
// echo 1 > /sys/fs/fuse/connections/N/abort does, and detaches the mount.
func (w *fuseWatch) abort() {
	// The device number comes from the mount table: stat(2) on the mount
	// point would wait for the very server that is stuck.
	if minor, ok := fuseMinor(w.mnt); ok {
		ctl := "/sys/fs/fuse/connections"
		if _, err := os.Stat(filepath.Join(ctl, minor)); err != nil {
			unix.Mount("fusectl", ctl, "fusectl", 0, "") // may be mounted already
		}
		os.WriteFile(filepath.Join(ctl, minor, "abort"), []byte("1"), 0)
	}
	syscall.Unmount(w.mnt, syscall.MNT_DETACH)
}

// fuseMinor returns the minor device number of the mount at dir, as
// /proc/self/mountinfo gives it ("0:52" is field 3).
func fuseMinor(dir string) (string, bool) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				return minor, true
			}
		}
	}
	return "", false
}

// stopServer ends the serving process: SIGTERM, then (if it is still there
// after stuckAfter) a diagnosis, an aborted connection and SIGKILL. It
// returns what Wait returned.
func (w *fuseWatch) stopServer() error {
	w.t.Helper()
	if w.server.ProcessState != nil {
		return nil
	}
	w.server.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- w.server.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(stuckAfter):
	}
	diag := w.diagnose()
	w.abort()
	w.server.Process.Kill()
	<-done
	w.t.Errorf("roce configfs mount did not exit within %v of SIGTERM\n%s", stuckAfter, diag)
	return nil
}

// describeTree lists pid's descendants with what the kernel says each is
// waiting on.
func describeTree(root int) string {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 {
				parent[pid], _ = strconv.Atoi(f[1])
			}
		}
	}
	in := func(pid int) bool {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				return true
			}
		}
		return false
	}
	var b strings.Builder
	for pid := range parent {
		if !in(pid) {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		fmt.Fprintf(&b, "  %d %q stat=%q wchan=%s\n", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}),
			strings.TrimSpace(string(stat)), wchan)
		// Every thread's kernel stack: the one stuck in fuse is the answer.
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stack", pid, task.Name())); err == nil &&
				bytes.Contains(st, []byte("fuse")) {
				fmt.Fprintf(&b, "    task %s:\n%s", task.Name(), st)
			}
		}
	}
	return b.String()
}
