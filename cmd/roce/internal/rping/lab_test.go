package rping_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/rping"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/rdmacm"
)

// labCM registers and opens a goroce device on the lab's bridge (192.0.2.1
// and fd00:c0:2::1 in roce-host) and returns an RDMA CM on it.
func labCM(t *testing.T, l *lab.Lab) (*rdmacm.CM, *host.Device) {
	d := l.OpenDevice(t, host.VersionsBoth)
	cm := rdmacm.New(rdmacm.Options{})
	if err := cm.AddDevice(d.Device); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	return cm, d
}

// pingLines is what rping -v prints for count pings of size bytes (prefix
// "ping data: " on the client, "server ping data: " on the server).
func pingLines(prefix string, count, size int) string {
	var b strings.Builder
	start := byte('A')
	for ping := 0; ping < count; ping++ {
		line := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		for ch := start; len(line) < size-1; {
			line = append(line, ch)
			if ch++; ch > 'z' {
				ch = 'A'
			}
		}
		if start++; start > 'z' {
			start = 'A'
		}
		fmt.Fprintf(&b, "%s%s\n", prefix, line)
	}
	return b.String()
}

// TestLabRping runs roce ping against Linux rping on rxe in both roles,
// over IPv4 and IPv6: RDMA CM connect, RDMA READ and WRITE of every ping,
// validated, and a clean disconnect; rxe's error counters stay still.
func TestLabRping(t *testing.T) {
	l := lab.Start(t)
	cm, d := labCM(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rping 2>/dev/null; true")
	before := l.Counters(t, vm)
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		for _, size := range []int{64, 4096} {
			t.Run(fmt.Sprintf("%s/%d/goroce-client", fam, size), func(t *testing.T) {
				goroceClient(t, l, vm, cm, theirs, size)
			})
			t.Run(fmt.Sprintf("%s/%d/goroce-server", fam, size), func(t *testing.T) {
				goroceServer(t, l, vm, cm, ours, size)
			})
		}
	}
	l.CheckRxeCounters(t, vm, before, d.Counters().Snapshot())
}

// labPings is how many pings each lab run sends (-C).
const labPings = 3

// rpingLimit bounds an rping's run in the VM (timeout(1)); goroce's side
// has a little longer.
const rpingLimit = 80 * time.Second

// goroceClient runs rping -s on theirs in vm and goroce's client against
// it, retrying while rping does not listen yet: both print every ping of
// size bytes, and rping exits 0.
func goroceClient(t *testing.T, l *lab.Lab, vm lab.VM, cm *rdmacm.CM, theirs string, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), rpingLimit+10*time.Second)
	defer cancel()
	l.Exec(vm, "killall rping 2>/dev/null; true")
	job := l.Background(t, vm, "/tmp/rping.log", rpingLimit,
		fmt.Sprintf("rping -s -a %s -v -S %d -C %d 2>/tmp/rping.err", theirs, size, labPings))
	var out, errs strings.Builder
	err := lab.UntilListening(ctx, job, "REJECTED", func() error {
		out.Reset()
		errs.Reset()
		return rping.Run(ctx, cm, rping.Config{Addr: netip.AddrPortFrom(netip.MustParseAddr(theirs), 0),
			Count: labPings, Size: size, Verbose: true, Validate: true, Out: &out, Err: &errs})
	})
	if err != nil {
		t.Fatalf("goroce client: %v\n%s", err, errs.String())
	}
	if want := pingLines("ping data: ", labPings, size); out.String() != want {
		t.Errorf("goroce client printed\n%s\nwant\n%s", out.String(), want)
	}
	log := job.Wait()
	if !strings.Contains(log, pingLines("server ping data: ", labPings, size)) || !strings.Contains(log, "EXIT 0") {
		stderr, _, _ := l.Exec(vm, "cat /tmp/rping.err")
		t.Errorf("rping -s printed:\n%s\nand on stderr:\n%s", log, stderr)
	}
}

// goroceServer runs goroce's server on ours and, once it listens, rping -c
// in vm against it: both print every ping of size bytes, and rping exits 0.
func goroceServer(t *testing.T, l *lab.Lab, vm lab.VM, cm *rdmacm.CM, ours string, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), rpingLimit+10*time.Second)
	defer cancel()
	var out, errs strings.Builder
	errc := make(chan error, 1)
	go func() {
		errc <- rping.Run(ctx, cm, rping.Config{Server: true, Addr: netip.AddrPortFrom(netip.MustParseAddr(ours), 0),
			Size: size, Verbose: true, Out: &out, Err: &errs})
	}()
	listening := func() bool {
		for _, id := range cm.IDs(nil) {
			if id.State == "LISTEN" && id.Src == netip.AddrPortFrom(netip.MustParseAddr(ours), rping.DefaultPort) {
				return true
			}
		}
		return false
	}
	for !listening() {
		select {
		case err := <-errc:
			t.Fatalf("goroce server ended before it listened: %v\n%s", err, errs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	log, rc, err := l.Exec(vm, fmt.Sprintf("timeout %d rping -c -a %s -v -V -S %d -C %d 2>/dev/null", int(rpingLimit.Seconds()), ours, size, labPings))
	if err != nil || rc != 0 || !strings.Contains(log, pingLines("ping data: ", labPings, size)) {
		t.Errorf("rping -c: exit %d %v\n%s", rc, err, log)
	}
	if err := <-errc; err != nil {
		t.Fatalf("goroce server: %v\n%s", err, errs.String())
	}
	if want := pingLines("server ping data: ", labPings, size); out.String() != want {
		t.Errorf("goroce server printed\n%s\nwant\n%s", out.String(), want)
	}
}
