package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/kernel/kerneltest"
)

// waitRunning waits until the process running dev in dir answers on its
// control socket.
func waitRunning(t *testing.T, dir, dev string) {
	t.Helper()
	reg := host.NewRegistry(dir)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := reg.Counters(ctx, dev)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's owner does not answer after 30 s: %v", dev, err)
		}
	}
}

// TestProbeV1OnlyPeer: roce probe from a goroce device against a goroce
// server whose port speaks RoCE v1 only. The peer's CM answers over RoCE
// v1 alone, from its GID; the verdict names the fix (roce mode … -m 1) and
// exits 1; once the fix is applied the probe agrees, exit 0; -j says the
// same as JSON.
func TestProbeV1OnlyPeer(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "v1")
	startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String())
	waitRunning(t, dir, "rxeB")

	peerGID := kerneltest.SysfsGID(b.IPv4.String())
	code, stdout, stderr := roceIn(t, a, dir, "probe", "-t", "500ms", "-c", "2", b.IPv4.String())
	if code != 1 {
		t.Errorf("probe of a v1-only peer from a v2 port: exit %d, want 1\nstderr: %s", code, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("probe %s from rxeA port 1 (goroce; %s, %s)\n", b.IPv4, a.Ifname, a.IPv4),
		"RoCE v2: no answer (2 tries, 500ms each)\n",
		"by " + peerGID + " (" + b.IPv4.String() + ")\n",
		"rxeA port 1 default_roce_mode: RoCE v2\n",
		"verdict: peer answers RoCE v1 only: set rxeA port 1 to IB/RoCE v1: roce mode -d rxeA -p 1 -m 1\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("probe output lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stdout, "RoCE v1: answered in ") {
		t.Errorf("no RoCE v1 answer:\n%s", stdout)
	}
	if !strings.Contains(stderr, "roce: probe "+b.IPv4.String()+": peer answers RoCE v1 only") {
		t.Errorf("stderr %q does not give the verdict", stderr)
	}

	if code, _, stderr := roceIn(t, a, dir, "mode", "-d", "rxeA", "-m", "1"); code != 0 {
		t.Fatalf("roce mode -m 1: exit %d: %s", code, stderr)
	}
	code, stdout, stderr = roceIn(t, a, dir, "probe", "-j", "-t", "500ms", "-c", "2", b.IPv4.String())
	if code != 0 {
		t.Errorf("probe after the fix: exit %d\n%s%s", code, stdout, stderr)
	}
	var rows []struct {
		Addr    string `json:"addr"`
		Ifname  string `json:"ifname"`
		Kernel  bool   `json:"kernel"`
		Mode    string `json:"default_roce_mode"`
		Verdict string `json:"verdict"`
		Match   bool   `json:"match"`
		V1      struct {
			Answered bool   `json:"answered"`
			GID      string `json:"gid"`
			RTT      int64  `json:"rtt_us"`
		} `json:"roce_v1"`
		V2 struct {
			Answered bool `json:"answered"`
			Tries    int  `json:"tries"`
		} `json:"roce_v2"`
	}
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("probe -j: %v\n%s", err, stdout)
	}
	r := rows[0]
	if r.Addr != b.IPv4.String() || r.Ifname != "rxeA" || r.Kernel || r.Mode != "IB/RoCE v1" || !r.Match ||
		r.Verdict != "both speak RoCE v1" || !r.V1.Answered || r.V1.GID != peerGID || r.V1.RTT <= 0 || r.V2.Answered || r.V2.Tries != 2 {
		t.Errorf("probe -j: %+v", r)
	}
}

// TestProbeBothVersions: a peer that speaks both versions answers over
// each, as asked.
func TestProbeBothVersions(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "v2", "")
	startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String())
	waitRunning(t, dir, "rxeB")
	code, stdout, stderr := roceIn(t, a, dir, "probe", "-t", "2s", b.IPv4.String())
	if code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
	if strings.Count(stdout, ": answered in ") != 2 ||
		!strings.Contains(stdout, "verdict: peer answers RoCE v2 and RoCE v1: rxeA port 1's RoCE v2 works\n") {
		t.Errorf("probe of a dual-version peer:\n%s", stdout)
	}
}

// TestProbeErrors: what probe says where it cannot run.
func TestProbeErrors(t *testing.T) {
	a, b, dir, _ := pingHosts(t, "", "")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"probe", "nohost"}, exitUsage, `"nohost" is not an IP address`},
		{[]string{"probe", "-t", "0s", b.IPv4.String()}, exitUsage, "-t 0s: the wait for an answer must be positive"},
		{[]string{"probe", "-c", "0", b.IPv4.String()}, exitUsage, "-c"},
		{[]string{"probe", "-d", "rxeA", "-p", "2", b.IPv4.String()}, exitError, "port 2: goroce devices have one port"},
		{[]string{"probe", "-d", "rxeB", b.IPv4.String()}, exitError, "leaves by " + a.Ifname + ", not by rxeB's netdev " + b.Ifname},
		{[]string{"probe", "127.0.0.1"}, exitError, "the route to 127.0.0.1 leaves by lo, which carries no RDMA device"},
	} {
		code, _, stderr := roceIn(t, a, dir, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("roce %v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// TestProbeNIC: a NIC's kernel device keeps its RoCE traffic in the NIC:
// probe refuses to run from it and says why.
func TestProbeNIC(t *testing.T) {
	a, b := nettest.VethPair(t, nettest.Options{})
	dir := t.TempDir()
	tr := kerneltest.NewTree(t)
	tr.AddDevice(kerneltest.MLX5("mlx5_0", a.Ifname))
	code, _, stderr := roceIn(t, a, dir, "--sysfs", tr.Root, "probe", "-d", "mlx5_0", b.IPv4.String())
	if code != exitError {
		t.Errorf("probe from a NIC: exit %d", code)
	}
	for _, want := range []string{"Operation not supported", "mlx5_0 (driver mlx5_core) terminates RoCE in the NIC",
		"ib_umad"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("probe from a NIC: stderr %q lacks %q", stderr, want)
		}
	}
}
