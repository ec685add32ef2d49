package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// consoleStalled is vm1's serial console from clean-clone CI run 44 (the
// first lines of the stall, as the console wrote them, with CRs).
const consoleStalled = "ROCE-LAB-READY vm1 4.62\r\n" +
	"# [  864.843877] infiniband rxe0: ib_create_ah_from_wc error -110\r\n" +
	"[  904.138474] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5532 ms\r\n" +
	"[  904.139801] virtio_net virtio0 eth0: TX timeout on queue: 0, sq: output.0, vq: 0x1, name: output.0, 5532000 usecs ago\r\n" +
	"[  909.259490] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 10652 ms\r\n"

const consoleClean = "ROCE-LAB-READY vm1 4.62\r\n# [  864.843877] infiniband rxe0: ib_create_ah_from_wc error -110\r\n"

// TestTxStall: the first watchdog line, whole and without its CR; nothing
// in a console without one, or in an empty one.
func TestTxStall(t *testing.T) {
	want := "[  904.138474] virtio_net virtio0 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5532 ms"
	if got := txStall([]byte(consoleStalled)); got != want {
		t.Errorf("txStall = %q, want %q", got, want)
	}
	unterminated := consoleStalled[:strings.Index(consoleStalled, "5532 ms")+len("5532 ms")]
	if got := txStall([]byte(unterminated)); got != want {
		t.Errorf("txStall of a console ending inside the line = %q, want %q", got, want)
	}
	for _, c := range []string{consoleClean, ""} {
		if got := txStall([]byte(c)); got != "" {
			t.Errorf("txStall(%q) = %q, want none", c, got)
		}
	}
}

func writeConsoles(t *testing.T, dir string, vm1, vm2 string) {
	t.Helper()
	for name, c := range map[string]string{"vm1": vm1, "vm2": vm2} {
		if err := os.WriteFile(filepath.Join(dir, name+".console.log"), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStalled: the VM whose console has the watchdog line, whichever it
// is; none when both are clean or the logs are missing (a lab never booted).
func TestStalled(t *testing.T) {
	dir := t.TempDir()
	if vm, line := stalled(dir); vm != "" {
		t.Errorf("no consoles: stalled = %s %q", vm, line)
	}
	writeConsoles(t, dir, consoleClean, consoleClean)
	if vm, line := stalled(dir); vm != "" {
		t.Errorf("clean consoles: stalled = %s %q", vm, line)
	}
	writeConsoles(t, dir, consoleClean, strings.ReplaceAll(consoleStalled, "vm1", "vm2"))
	if vm, line := stalled(dir); vm != "vm2" || !strings.Contains(line, "transmit queue 0 timed out") {
		t.Errorf("vm2 stalled: stalled = %s %q", vm, line)
	}
}

// recorder collects a watcher's errors.
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// TestWatcherReportsStall: a stall that begins while the watcher runs is
// reported once, with StallMarker first and the VM and line named, and
// marks the lab broken; a watcher that saw none stops when told, silent.
func TestWatcherReportsStall(t *testing.T) {
	dir := t.TempDir()
	writeConsoles(t, dir, consoleClean, consoleClean)
	l := &Lab{Dir: dir}
	var r recorder
	w := &watcher{dir: dir, every: 10 * time.Millisecond, errorf: r.errorf, broken: &l.broken,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	time.Sleep(50 * time.Millisecond) // a few clean looks
	if got := r.got(); len(got) != 0 || l.broken.Load() {
		t.Fatalf("clean consoles: errors %q, broken %v", got, l.broken.Load())
	}
	writeConsoles(t, dir, consoleStalled, consoleClean)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not report the stall within 10 s")
	}
	close(w.stop)
	got := r.got()
	if len(got) != 1 || !strings.HasPrefix(got[0], StallMarker+" vm1 ") || !strings.Contains(got[0], "NETDEV WATCHDOG") {
		t.Errorf("errors %q, want one starting %q naming vm1 and its console line", got, StallMarker)
	}
	if !l.broken.Load() {
		t.Error("the lab is not marked broken")
	}

	var quiet recorder
	w = &watcher{dir: t.TempDir(), every: 10 * time.Millisecond, errorf: quiet.errorf, broken: &l.broken,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	time.Sleep(30 * time.Millisecond)
	close(w.stop)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher did not stop within 10 s")
	}
	if got := quiet.got(); len(got) != 0 {
		t.Errorf("no consoles: errors %q", got)
	}
}

// TestWaitStopsWhenBroken: a job whose VM's NIC stalled is waited for no
// longer (the test has failed, and Exec reads no log any more); without
// the stall, Wait would read the log until the job's limit and exitGrace
// had passed.
func TestWaitStopsWhenBroken(t *testing.T) {
	dir := t.TempDir()
	// A vm-exec whose job never writes its EXIT line.
	if err := os.WriteFile(filepath.Join(dir, "vm-exec"), []byte("#!/bin/sh\necho still running\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &Lab{Dir: dir}
	l.broken.Store(true)
	j := &Job{l: l, vm: VM1, log: "/tmp/job.log", limit: time.Hour, start: time.Now()}
	done := make(chan string, 1)
	go func() { done <- j.Wait() }()
	select {
	case log := <-done:
		if strings.Contains(log, "EXIT") {
			t.Errorf("Wait returned %q, a log with an EXIT line", log)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait still waits 30 s after the lab broke")
	}
}

// TestCIKnowsStallMarker: .ci/run reruns failed packages only when their
// output has StallMarker; the two must agree.
func TestCIKnowsStallMarker(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `grep -q "`+StallMarker+`"`) {
		t.Errorf(".ci/run does not look for %q", StallMarker)
	}
}

// TestExecStopsWhenBroken: a command running in a VM when the watcher
// finds a stall is stopped, and Exec returns ErrStalled; later Execs run
// nothing. Without it, each of a test's later subtests waited out its own
// limits on a lab that could no longer answer.
func TestExecStopsWhenBroken(t *testing.T) {
	dir := t.TempDir()
	ran := filepath.Join(dir, "ran")
	// A vm-exec whose command hangs, as one whose VM cannot reach the host.
	script := "#!/bin/sh\necho x >> " + ran + "\nexec sleep 60\n"
	if err := os.WriteFile(filepath.Join(dir, "vm-exec"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	writeConsoles(t, dir, consoleClean, consoleClean)
	l := &Lab{Dir: dir}
	var halt func()
	l.ctx, halt = context.WithCancel(context.Background())
	l.halt = halt
	defer halt()
	var r recorder
	w := &watcher{dir: dir, every: 10 * time.Millisecond, errorf: r.errorf, broken: &l.broken, halt: l.halt,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	defer func() { close(w.stop); <-w.done }()
	type result struct {
		err error
		at  time.Duration
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		_, _, err := l.Exec(VM1, "rstream -s 192.0.2.1")
		res <- result{err, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	writeConsoles(t, dir, consoleStalled, consoleClean)
	select {
	case got := <-res:
		if !errors.Is(got.err, ErrStalled) {
			t.Errorf("Exec running when the NIC stalled: %v, want ErrStalled", got.err)
		}
		t.Logf("Exec returned %v after the stall was written", got.at)
	case <-time.After(30 * time.Second):
		t.Fatal("Exec still runs 30 s after the stall")
	}
	if _, _, err := l.Exec(VM1, "true"); !errors.Is(err, ErrStalled) {
		t.Errorf("Exec after the stall: %v, want ErrStalled", err)
	}
	if b, _ := os.ReadFile(ran); strings.Count(string(b), "x") != 1 {
		t.Errorf("vm-exec ran %d times, want 1 (none after the stall)", strings.Count(string(b), "x"))
	}
	// The watcher returns once it has reported; wait for that rather
	// than assume the report came before Exec returned.
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		t.Fatal("watcher still runs 30 s after the stall")
	}
	if got := r.got(); len(got) != 1 {
		t.Errorf("watcher errors %q, want one", got)
	}
}
