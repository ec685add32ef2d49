// Package lab drives the shared interop lab (../shared/lab, see its
// README): two QEMU VMs running Linux's real rxe driver with rdma-core and
// perftest, on the bridge br-roce inside the network namespace roce-host.
// Tests call Start, which boots the lab if it is not up and holds a lock
// for the rest of the test (the namespace and VMs are shared by every test
// process), then run goroce in roce-host as 192.0.2.1 / fd00:c0:2::1.
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// Addresses of the lab (lab/README.md).
const (
	Netns    = "roce-host"
	Bridge   = "br-roce"
	HostIPv4 = "192.0.2.1"
	HostIPv6 = "fd00:c0:2::1"
	HostMgmt = "198.51.100.1"
)

// VM describes one lab VM.
type VM struct {
	Name string // vm1, vm2
	IPv4 string // on br-roce
	IPv6 string
	Mgmt string // management address: perftest and pingpong exchange QP data here
}

// VMs of a two-VM lab.
var (
	VM1 = VM{"vm1", "192.0.2.11", "fd00:c0:2::11", "198.51.100.11"}
	VM2 = VM{"vm2", "192.0.2.12", "fd00:c0:2::12", "198.51.100.12"}
)

// Lab is a running lab, locked for the calling test.
type Lab struct {
	Dir    string      // the lab's scripts
	broken atomic.Bool // a VM's NIC stalled during the test (health.go)
	// ctx ends when broken is set: the commands in the VMs are stopped.
	// nil: never.
	ctx  context.Context
	halt context.CancelFunc
}

// lockPath is shared by every process on the machine that uses the lab.
const lockPath = "/run/roce-lab.lock"

// Start makes sure the lab is up (running lab/setup and lab/up when it is
// not) and holds the lab's lock until the test ends. Missing root or lab:
// skip locally, fail in CI.
func Start(t testing.TB) *Lab {
	t.Helper()
	testenv.Root(t)
	dir := filepath.Join(testenv.SharedDir(t), "lab")
	_, err := os.Stat(filepath.Join(dir, "up"))
	testenv.Require(t, err == nil, "the interop lab at "+dir)
	_, err = exec.LookPath("qemu-system-x86_64")
	if err != nil && !testenv.InCI() && os.Getenv("GOROCE_LAB") == "" {
		testenv.Require(t, false, "qemu (run ../shared/lab/setup, or set GOROCE_LAB=1 to let the tests run it)")
	}
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the lock, saying so, and give up a minute before go test's
	// timeout (20 minutes without one) rather than be killed by it without
	// a word: the lab tests of several packages, and other users, queue for
	// the lab, and the queue can be long. (A process started under the lock
	// that daemonizes, such as `flock LOCK lab/up`, keeps it: lab.Start's own
	// children do not inherit it, the file being close-on-exec.)
	deadline := time.Now().Add(20 * time.Minute)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			deadline = end.Add(-time.Minute)
		}
	}
	waitStart := time.Now()
	for next := time.Now(); ; time.Sleep(time.Second) {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			f.Close()
			t.Fatalf("gave up waiting for the lab lock %s, held by other processes for %v (lsof %s shows which)",
				lockPath, time.Since(waitStart).Round(time.Second), lockPath)
		}
		if time.Now().After(next) {
			t.Logf("waiting for the lab lock %s, held by another test or tool", lockPath)
			next = time.Now().Add(30 * time.Second)
		}
	}
	t.Cleanup(func() { f.Close() })
	l := &Lab{Dir: dir}
	up := l.up()
	if vm, line := stalled(runDir()); up && vm != "" {
		// Up, but deaf on br-roce for good (health.go): boot it again.
		t.Logf("lab: %s stopped transmitting on br-roce since the lab booted (its console: %q): taking the lab down to boot it again", vm, line)
		if out, err := exec.Command(filepath.Join(dir, "down")).CombinedOutput(); err != nil {
			t.Fatalf("lab/down: %v\n%s", err, tail(out, 4000))
		}
		up = false
	}
	if !up {
		// lab/up runs `ip netns add roce-host`: with /run/netns a mount
		// point already, it binds nothing over the namespaces other tests
		// have there (nettest.PrepareNetnsDir says why that matters).
		if err := nettest.PrepareNetnsDir(); err != nil {
			t.Fatal(err)
		}
		env := append(os.Environ(), "ROCE_LAB_TRACES="+t.TempDir())
		for _, step := range [][]string{{"setup"}, {"up", "2"}} {
			cmd := exec.Command(filepath.Join(dir, step[0]), step[1:]...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("lab/%s: %v\n%s", strings.Join(step, " "), err, tail(out, 4000))
			}
			t.Logf("lab/%s: %s", strings.Join(step, " "), tail(out, 300))
		}
		if !l.up() {
			t.Fatal("the lab did not come up")
		}
	}
	l.ensureRXE(t)
	l.ctx, l.halt = context.WithCancel(context.Background())
	t.Cleanup(l.halt)
	l.watch(t.Errorf, t.Cleanup)
	return l
}

// rxeCheck exits 0 when a VM is in the lab README's state: rdma_rxe's
// rxe0 on eth0 (with the VM's IPv4 GID, which takes a moment after
// rdma link add).
const rxeCheck = `rdma link show 2>/dev/null | grep -q '^link rxe0/' && grep -qx "$(ip -4 -o addr show dev eth0 | awk '{split($4, a, "/"); split(a[1], b, "."); printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", b[1], b[2], b[3], b[4]}')" /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null`

// rxeRestore puts a VM back in that state: what a tool left running
// there that holds UDP 4791 (bench/vm.sh's goroce rounds unload rdma_rxe
// and restore it when they end; one stopped by hand, or a probe run by
// hand, may not), then rdma_rxe and rxe0, and a wait for the GID.
const rxeRestore = `for p in $(pidof roce udpfloor 2>/dev/null); do kill $p; done
grep -q '^rdma_rxe ' /proc/modules || modprobe rdma_rxe || exit 1
rdma link show | grep -q '^link rxe0/' || rdma link add rxe0 type rxe netdev eth0 || exit 1
i=0
until ` + rxeCheck + `; do
  i=$((i + 1)); if [ $i -ge 150 ]; then rdma link show; exit 1; fi
  sleep 0.2
done`

// ensureRXE makes sure each VM has rxe0, as every lab test expects:
// something run in the VMs may have left them without it (the symptom:
// ucmatose's "No RDMA devices were detected", and tests that wait out
// their limits). It says what it restored.
func (l *Lab) ensureRXE(t testing.TB) {
	t.Helper()
	for _, vm := range []VM{VM1, VM2} {
		if _, rc, err := l.Exec(vm, rxeCheck); err == nil && rc == 0 {
			continue
		}
		t.Logf("lab: %s had no rxe0 with its IPv4 GID (something run there removed it): restoring rdma_rxe and rxe0", vm.Name)
		if out, rc, err := l.Exec(vm, rxeRestore); err != nil || rc != 0 {
			t.Fatalf("lab: %s: restoring rxe0: exit %d %v\n%s", vm.Name, rc, err, out)
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// up reports whether both VMs answer. The probe of a lab that is down
// fails within seconds (no namespace, or no host at the address); a VM
// that is up may take seconds to answer on a loaded host, and taking it
// for down would run lab/setup and lab/up, and fail if it answered late
// again.
func (l *Lab) up() bool {
	for _, vm := range []VM{VM1, VM2} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := exec.CommandContext(ctx, filepath.Join(l.Dir, "vm-exec"), vm.Name, "true").Run()
		cancel()
		if err != nil {
			return false
		}
	}
	return true
}

// ErrStalled is what Exec returns once a VM's NIC has stalled during the
// test (health.go): the test has failed, and what it runs in the VMs
// would only wait out its limits.
var ErrStalled = errors.New(StallMarker + " a lab VM stopped transmitting during this test; no more commands in the VMs for it")

// Exec runs cmd with /bin/sh in vm and returns its output and exit status.
// Once a VM's NIC has stalled it runs nothing and returns ErrStalled, and
// a command running then is stopped with the same error.
func (l *Lab) Exec(vm VM, cmd string) (string, int, error) {
	if l.broken.Load() {
		return "", -1, ErrStalled
	}
	ctx := l.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	c := exec.CommandContext(ctx, filepath.Join(l.Dir, "vm-exec"), vm.Name, cmd)
	c.WaitDelay = 5 * time.Second // vm-exec's children may hold its output open
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	if l.broken.Load() {
		return out.String(), -1, ErrStalled
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return out.String(), -1, err
	}
	return out.String(), 0, nil
}

// MustExec runs cmd in vm and fails t unless it exits 0.
func (l *Lab) MustExec(t testing.TB, vm VM, cmd string) string {
	t.Helper()
	out, rc, err := l.Exec(vm, cmd)
	if err != nil || rc != 0 {
		t.Fatalf("%s: %q: exit %d %v\n%s", vm.Name, cmd, rc, err, out)
	}
	return out
}

// Counters reads rxe0's hw_counters in vm.
func (l *Lab) Counters(t testing.TB, vm VM) map[string]uint64 {
	t.Helper()
	out := l.MustExec(t, vm, "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *")
	m := map[string]uint64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err == nil {
			m[k] = n
		}
	}
	return m
}

// GIDIndex returns the index of gid in vm's rxe0 GID table.
func (l *Lab) GIDIndex(t testing.TB, vm VM, gid string) int {
	t.Helper()
	out := l.MustExec(t, vm, "cd /sys/class/infiniband/rxe0/ports/1 && for i in $(ls gids | sort -n); do echo $i $(cat gids/$i); done")
	want := expand(gid)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == want {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	t.Fatalf("%s has no GID %s:\n%s", vm.Name, gid, out)
	return -1
}

// expand writes a GID as sysfs does: 8 groups of 4 hex digits.
func expand(gid string) string {
	ip := netipParse(gid)
	b := ip.As16()
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(parts, ":")
}

// Do runs fn on a thread inside the lab's namespace (sockets fn opens stay there).
func (l *Lab) Do(fn func() error) error {
	h, err := netns.GetFromName(Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	return nettest.Do(h, fn)
}

// Command returns an exec.Cmd that runs name inside the lab's namespace.
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", Netns, name}, args...)...)
}
