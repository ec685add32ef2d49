package lab

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// A lab VM's test NIC can stop transmitting. The first time (clean-clone
// CI run 44, 2026-12-03), under QEMU's TCG, vm1's virtio-net transmit
// queue stopped being drained 904 s after boot: its kernel logged "virtio_net
// virtio0 eth0: NETDEV WATCHDOG: CPU: 0: transmit queue 0 timed out 5532
// ms" on the serial console, again every 5 s, and rxe could no longer
// resolve the host (ib_create_ah_from_wc error -110). Nothing reaches
// br-roce from that VM again until it reboots, while the management link
// (vm-exec) keeps working, so the lab looks up: the test then running
// waited out its limits, and so would every lab test after it.
//
// So Start reboots a lab whose VMs reported a stalled transmit queue since
// they booted, and watches the consoles while the test runs: a stall fails
// the test at once, with StallMarker at the start of the message, stops
// the commands running in the VMs and makes every later Exec fail with
// ErrStalled (the rest of the test's subtests fail at once instead of
// each waiting out its limits: in clean-clone CI run 50 the stall came
// again, in the same test, TestLabRstream, at 896 s of vm1's uptime
// against 904 s in run 44, and its IPv6 subtests would have waited
// minutes each), and Job.Wait stops waiting.

// StallMarker begins the error of a test during which a lab VM's NIC
// stalled; .ci/run looks for it to tell QEMU's fault from goroce's.
const StallMarker = "lab: NIC stalled:"

// watchEvery is how often the watcher reads the consoles: the guest
// kernel's watchdog itself reports 5 s after the queue stopped.
const watchEvery = 5 * time.Second

// runDir is lab/up's directory of pid files and console logs
// ($ROCE_LAB_CACHE/run, lab/README.md).
func runDir() string {
	cache := os.Getenv("ROCE_LAB_CACHE")
	if cache == "" {
		cache = "/var/cache/roce-lab"
	}
	return filepath.Join(cache, "run")
}

// txStall returns the first line of a VM's console log that reports a
// transmit queue timing out (the kernel's dev_watchdog: "NETDEV
// WATCHDOG: … transmit queue N timed out"), or "".
func txStall(console []byte) string {
	i := bytes.Index(console, []byte("NETDEV WATCHDOG"))
	if i < 0 {
		return ""
	}
	start := bytes.LastIndexByte(console[:i], '\n') + 1
	end := len(console)
	if j := bytes.IndexByte(console[i:], '\n'); j >= 0 {
		end = i + j
	}
	return strings.TrimSpace(string(console[start:end]))
}

// stalled returns the first VM whose console reports a stalled transmit
// queue, and the line, or "" when none does. lab/up starts each VM's
// console log afresh, so what it finds happened since the lab booted.
func stalled(dir string) (vm, line string) {
	for _, v := range []VM{VM1, VM2} {
		b, err := os.ReadFile(filepath.Join(dir, v.Name+".console.log"))
		if err != nil {
			continue
		}
		if s := txStall(b); s != "" {
			return v.Name, s
		}
	}
	return "", ""
}

// stallError is the message of a test during which vm's NIC stalled.
func stallError(vm, line string) string {
	return fmt.Sprintf("%s %s stopped transmitting on br-roce during this test (its console: %q): QEMU's emulated NIC, not the test; the next lab.Start reboots the lab", StallMarker, vm, line)
}

// watcher reports the first stall it sees in dir's consoles through
// errorf and sets broken, until stop is closed; done is closed when it
// has returned.
type watcher struct {
	dir    string
	every  time.Duration
	errorf func(format string, args ...any)
	broken *atomic.Bool
	halt   func() // stops the commands running in the VMs; nil: none
	stop   chan struct{}
	done   chan struct{}
}

func (w *watcher) run() {
	defer close(w.done)
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		if vm, line := stalled(w.dir); vm != "" {
			w.broken.Store(true)
			// Report before halting: the commands halt stops return
			// at once and their tests' failures follow, so the stall
			// is logged first, the cause ahead of its effects.
			w.errorf("%s", stallError(vm, line))
			if w.halt != nil {
				w.halt()
			}
			return
		}
	}
}

// watch starts a watcher of the lab's consoles for the rest of the test;
// cleanup (the test's Cleanup) stops it before the test ends.
func (l *Lab) watch(errorf func(string, ...any), cleanup func(func())) {
	w := &watcher{dir: runDir(), every: watchEvery, errorf: errorf, broken: &l.broken, halt: l.halt,
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	cleanup(func() {
		close(w.stop)
		<-w.done
	})
}
