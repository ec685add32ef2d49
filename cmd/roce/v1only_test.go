package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/rping"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/afpacket"
)

// icmpOutDestUnreachs reads the ICMP destination unreachable messages h's
// namespace has sent (Icmp: OutDestUnreachs in /proc/net/snmp).
func icmpOutDestUnreachs(t *testing.T, h *nettest.Host) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", h.NSName, "cat", "/proc/net/snmp").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Icmp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "OutDestUnreachs" && i < len(f) {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
	}
	t.Fatalf("no Icmp: OutDestUnreachs in /proc/net/snmp:\n%s", out)
	return 0
}

// TestV1OnlyServerLogsV2Request: a server on a port that speaks RoCE v1
// only (roce-versions v1, like a ConnectX-3) and a client whose port sends
// RDMA CM over RoCE v2. The server drops the client's REQs as old hardware
// does, with no ICMP port unreachable, but counts them, shows the count in
// roce stat's data (the control socket) while it runs, and logs on stderr
// whom it turned away and the fix.
func TestV1OnlyServerLogsV2Request(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "v1")
	srvStart := time.Now()
	srv := startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String())
	reg := host.NewRegistry(dir)
	counters := func() (*host.CounterReport, error) {
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
		defer cancel()
		return reg.Counters(ctx, "rxeB")
	}
	// Wait for the server's device to run, so that the client's first REQ
	// reaches it.
	var err error
	if !testenv.Poll(testenv.Slow, func() bool { _, err = counters(); return err == nil }) {
		t.Fatalf("rxeB's owner does not answer after %v: %v", testenv.Slow, err)
	}
	unreach := icmpOutDestUnreachs(t, b)

	startPing(t, a, dir, roceBin, "-c", "-a", b.IPv4.String(), "-C", "1")
	var rep *host.CounterReport
	if !testenv.Poll(testenv.Slow, func() bool {
		if rep, err = counters(); err != nil {
			t.Fatal(err)
		}
		return rep.Link[afpacket.CounterV2CMOnV1] > 0
	}) {
		t.Fatalf("no RoCE v2 CM packet counted on rxeB after %v: %v", testenv.Slow, rep.Link)
	}
	if rep.Link[afpacket.CounterV2OnV1] < rep.Link[afpacket.CounterV2CMOnV1] {
		t.Errorf("link counters %v: the total is below the CM count", rep.Link)
	}
	// roce stat, run while the server runs, reads the same report.
	code, stdout, stderr := roceAt(t, dir, "stat", "-j", "rxeB")
	if code != 0 {
		t.Fatalf("roce stat: exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("roce stat -j: %v: %s", err, stdout)
	}
	if v, ok := rows[0][afpacket.CounterV2OnV1]; ok {
		if n, _ := v.(float64); n <= 0 {
			t.Errorf("roce stat -j rxeB: %s %v, want > 0", afpacket.CounterV2OnV1, v)
		}
	} else {
		t.Logf("roce stat does not print %s (it shows the link counters whose table entry, link.StatTable or afpacket.CounterTable, has a Drop cause)", afpacket.CounterV2OnV1)
	}
	t.Logf("roce stat -j rxeB: %s", stdout)
	t.Logf("rxeB's link counters: %s %d, %s %d, %s %d", afpacket.CounterV2OnV1, rep.Link[afpacket.CounterV2OnV1],
		afpacket.CounterV2CMOnV1, rep.Link[afpacket.CounterV2CMOnV1],
		afpacket.CounterV2OtherOnV1, rep.Link[afpacket.CounterV2OtherOnV1])
	if n := icmpOutDestUnreachs(t, b); n != unreach {
		t.Errorf("rxeB's namespace sent %d ICMP destination unreachable for the RoCE v2 packets; a v1 port drops them silently", n-unreach)
	}

	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.exitWithin(t, 30*time.Second)
	errs := srv.stderr.String()
	want := fmt.Sprintf("roce: rxeB: dropped a RoCE v2 CM REQ from %s (service port %d): port 1 speaks IB/RoCE v1 only; "+
		"the peer must use RoCE v1 (roce mode -d <its device> -p 1 -m 1)\n", a.IPv4, rping.DefaultPort)
	if !strings.Contains(errs, want) {
		t.Errorf("server stderr lacks\n%s\nstderr:\n%s", want, errs)
	}
	// At most once per second per source.
	if n, runFor := strings.Count(errs, "dropped a RoCE v2"), time.Since(srvStart); n > int(runFor/time.Second)+1 {
		t.Errorf("%d log lines in %v; want at most one a second", n, runFor)
	}
	t.Logf("server stderr:\n%s", errs)
}
