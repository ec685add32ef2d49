package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/xsk"
)

// TestRxPathXDP: devices added with rx-path xdp on the two ends of a veth
// pair, run by the built roce as users run it: `roce link show -d` says
// rx_path xdp; pingpong, perf write (64 KiB) and send --lat (busy-polling
// and, -e, waiting for CQ events) complete
// between them; while one process holds a device's netdev through XDP, a
// second device on the same netdev (another rundir, as another user's
// goroce) fails to open with a sentence naming the cause, on stderr, with
// a non-zero exit.
func TestRxPathXDP(t *testing.T) {
	testenv.Root(t)
	a, b := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir, roceBin := t.TempDir(), roceExecutable(t)
	for _, d := range []struct {
		h    *nettest.Host
		name string
	}{{a, "rxeA"}, {b, "rxeB"}} {
		if code, _, stderr := roceIn(t, d.h, dir, "link", "add", d.name, "type", "rxe", "netdev", d.h.Ifname, "roce-versions", "v2", "rx-path", "xdp"); code != 0 {
			t.Fatalf("link add %s: exit %d: %s", d.name, code, stderr)
		}
	}
	if code, out, stderr := roceIn(t, a, dir, "link", "show", "-d", "rxeA"); code != 0 || !strings.Contains(out, "rx_path xdp") {
		t.Fatalf("link show -d rxeA: exit %d: %s%s", code, out, stderr)
	}
	gid := func(dev string, h *nettest.Host) string {
		return strconv.Itoa(gidIndexOf(t, dir, dev, h.IPv4))
	}
	t.Run("pingpong", func(t *testing.T) {
		_, cli := runPair(t, a, b, dir, roceBin, "pingpong",
			[]string{"-d", "rxeB", "-g", gid("rxeB", b), "-p", "19401", "-n", "200", "-s", "4096"},
			[]string{"-d", "rxeA", "-g", gid("rxeA", a), "-p", "19401", "-n", "200", "-s", "4096", b.IPv4.String()},
			"Couldn't connect")
		if !strings.Contains(cli.stdout.String(), "iters in") {
			t.Errorf("client output:\n%s", cli.stdout.String())
		}
	})
	for i, args := range [][]string{{"write", "-s", "65536", "-n", "200"}, {"send", "--lat", "-s", "64", "-n", "200"},
		{"send", "--lat", "-e", "-s", "64", "-n", "200"}} { // -e: asleep in the netpoller on the AF_XDP socket
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			port := strconv.Itoa(19402 + i)
			_, cli := runPair(t, a, b, dir, roceBin, "perf",
				append(append([]string{}, args...), "-d", "rxeB", "-p", port),
				append(append([]string{}, args...), "-d", "rxeA", "-p", port, b.IPv4.String()),
				"Couldn't connect")
			checkPerfTable(t, "client", cli.stdout.String(), args[1] == "--lat", false)
		})
	}
	t.Run("hook", func(t *testing.T) {
		// The program is on the netdev while a process runs the device,
		// and leaves with the process, killed (a bpf_link).
		xdpOn := func() bool {
			out, err := exec.Command("ip", "-n", b.NSName, "link", "show", "dev", b.Ifname).CombinedOutput()
			if err != nil {
				t.Fatalf("ip link show: %v: %s", err, out)
			}
			return strings.Contains(string(out), "prog/xdp")
		}
		if xdpOn() {
			t.Fatal("an XDP program on the netdev before any process runs the device")
		}
		srv := startRoce(t, b, dir, roceBin, "pingpong", "-d", "rxeB", "-g", gid("rxeB", b), "-p", "19409")
		srv.stdout.waitWithin(t, "local address", time.Minute)
		if !xdpOn() {
			t.Error("no XDP program on the netdev while the device runs")
		}
		srv.cmd.Process.Kill()
		srv.exitWithin(t, time.Minute)
		if !testenv.Poll(10*time.Second, func() bool { return !xdpOn() }) {
			t.Error("the XDP program stayed on the netdev after its process was killed")
		}
	})
	t.Run("netdev-taken", func(t *testing.T) {
		// Another program's AF_XDP socket on a netdev (a veth pair of its
		// own), then a device there.
		_, c := nettest.VethPair(t, nettest.Options{MTU: 1500})
		var s *xsk.Socket
		if err := c.Do(func() (err error) { s, err = xsk.Open(c.Ifindex, 4791, 0); return err }); err != nil {
			t.Fatal(err)
		}
		defer func() { s.Close(); s.Unmap() }()
		if code, _, stderr := roceIn(t, c, dir, "link", "add", "rxeC", "type", "rxe", "netdev", c.Ifname, "roce-versions", "v2", "rx-path", "xdp"); code != 0 {
			t.Fatalf("link add rxeC: exit %d: %s", code, stderr)
		}
		p := startRoce(t, c, dir, roceBin, "pingpong", "-d", "rxeC", "-g", "1", "-p", "19411")
		code := p.exitWithin(t, 30*time.Second)
		if code == 0 || !strings.Contains(p.stderr.String(), "rx-path xdp: "+c.Ifname+": AF_XDP socket: queue 0 already has an AF_XDP socket: another process reads the netdev with AF_XDP (ss -a --xdp shows it)") {
			t.Fatalf("a device on a netdev another socket reads: exit %d, stderr %q", code, p.stderr.String())
		}
		t.Logf("stderr: %s", p.stderr.String())
	})
}
