package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
)

// roceAt runs the CLI with --rundir dir.
func roceAt(t *testing.T, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return roce(t, append([]string{"--rundir", dir}, args...)...)
}

// wantRun checks a run's exit status, that stderr holds each of want (and
// is empty when want is), and returns stdout.
func wantRun(t *testing.T, dir string, code int, want []string, args ...string) string {
	t.Helper()
	c, stdout, stderr := roceAt(t, dir, args...)
	if c != code {
		t.Errorf("roce %s: exit %d, want %d\nstderr: %s", strings.Join(args, " "), c, code, stderr)
	}
	if len(want) == 0 && stderr != "" {
		t.Errorf("roce %s: stderr %q", strings.Join(args, " "), stderr)
	}
	for _, w := range want {
		if !strings.Contains(stderr, w) {
			t.Errorf("roce %s: stderr %q lacks %q", strings.Join(args, " "), stderr, w)
		}
	}
	return stdout
}

// loState is the link state rdma link show would print for a device on lo.
func loState(t *testing.T) linkState {
	t.Helper()
	ns, err := host.CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	nd, err := host.LookupNetdevIn(ns, "lo")
	if err != nil {
		t.Fatal(err)
	}
	return linkStateOf(nd)
}

func TestLinkAddArguments(t *testing.T) {
	dir := t.TempDir()
	const syntax = "roce link add NAME type rxe netdev NETDEV [roce-versions v1|v2|both] [rx-path ring|socket|xdp]"
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{}, exitUsage, []string{"the device name comes first: " + syntax, "Run 'roce link add --help' for usage."}},
		{[]string{"type", "rxe", "netdev", "lo"}, exitUsage, []string{"the device name comes first"}},
		{[]string{"rxe0"}, exitUsage, []string{`link add rxe0: missing "type rxe": ` + syntax}},
		{[]string{"rxe0", "type", "rxe"}, exitUsage, []string{`link add rxe0: missing "netdev NETDEV"`}},
		{[]string{"rxe0", "type", "rxe", "netdev"}, exitUsage, []string{`keyword "netdev" needs a value`}},
		{[]string{"rxe0", "tipe", "rxe", "netdev", "lo"}, exitUsage, []string{`link add rxe0: unknown keyword "tipe": ` + syntax}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "mtu", "1500"}, exitUsage, []string{`unknown keyword "mtu"`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "netdev", "eth0"}, exitUsage, []string{`keyword "netdev" given twice`}},
		{[]string{"rxe0", "type", "siw", "netdev", "lo"}, exitUsage, []string{`link add rxe0: Invalid argument: link type "siw"`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v3"}, exitUsage,
			[]string{`link add rxe0: Invalid argument: roce-versions "v3": valid values are v1, v2 and both`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", ""}, exitUsage,
			[]string{`Invalid argument: roce-versions "": valid values are v1, v2 and both`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "V2"}, exitUsage, []string{"valid values are v1, v2 and both"}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v2", "rx-path", "dpdk"}, exitUsage,
			[]string{`link add rxe0: Invalid argument: rx-path "dpdk": valid values are ring, socket and xdp`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v2", "rx-path", ""}, exitUsage,
			[]string{`Invalid argument: rx-path "": valid values are ring, socket and xdp`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "rx-path", "socket", "roce-versions", "v2", "rx-path", "ring"}, exitUsage,
			[]string{`keyword "rx-path" given twice`}},
		// The default versions (both) and v1 read every frame with AF_PACKET.
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "rx-path", "socket"}, exitUsage,
			[]string{"link add rxe0: Invalid argument: rx-path socket needs roce-versions v2: a port that speaks RoCE v1 (roce-versions both)"}},
		{[]string{"rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v1", "rx-path", "ring"}, exitUsage,
			[]string{"rx-path ring needs roce-versions v2", "(roce-versions v1)"}},
		{[]string{"9rxe", "type", "rxe", "netdev", "lo"}, exitUsage, []string{`link add: Invalid argument: device name "9rxe"`}},
		{[]string{"rxe0", "type", "rxe", "netdev", "nosuch0"}, exitError,
			[]string{"roce: link add rxe0: No such device: netdev nosuch0 not found in this network namespace"}},
		{[]string{"rxe0", "type", "rxe", "roce-versions", "v2", "netdev", "nosuch0"}, exitError, []string{"netdev nosuch0 not found"}},
	} {
		code, stdout, stderr := roceAt(t, dir, append([]string{"link", "add"}, tc.args...)...)
		if code != tc.code || stdout != "" {
			t.Errorf("link add %q: exit %d (want %d), stdout %q", tc.args, code, tc.code, stdout)
		}
		if !strings.HasPrefix(stderr, "roce: ") {
			t.Errorf("link add %q: stderr %q", tc.args, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("link add %q: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
	}
	// Nothing was recorded.
	if defs, err := host.NewRegistry(dir).List(); err != nil || len(defs) != 0 {
		t.Errorf("registry after failed adds: %v, %v", defs, err)
	}
}

// TestLinkLifecycle adds, shows and deletes a device on lo (no root
// needed): the runtime directory is created, a second device on lo and a
// second rxe0 are EEXIST, and delete of a missing device is ENODEV.
func TestLinkLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "goroce") // does not exist yet
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("runtime directory not created: %v", err)
	}
	def, err := host.NewRegistry(dir).Get("rxe0")
	cur, _ := host.CurrentNetns()
	if err != nil || def.Type != "rxe" || def.Netdev != "lo" || def.Versions != host.VersionsBoth || !def.Netns.Same(cur) ||
		time.Since(def.Created) > time.Hour {
		t.Errorf("recorded %+v, %v", def, err)
	}
	// What the kernel prints ("error: File exists"), then which device is in the way.
	wantRun(t, dir, exitError, []string{"roce: link add rxe1: File exists: netdev lo already has device rxe0\n"},
		"link", "add", "rxe1", "type", "rxe", "netdev", "lo", "roce-versions", "v2")
	wantRun(t, dir, exitError, []string{"roce: link add rxe0: File exists: device rxe0 already exists (on netdev lo)\n"},
		"link", "add", "rxe0", "type", "rxe", "netdev", "lo")

	st := loState(t)
	line := "link rxe0/1 state " + st.state + " physical_state " + st.physState + " netdev lo \n"
	for _, args := range [][]string{{"link"}, {"link", "show"}, {"link", "show", "rxe0"}} {
		if out := wantRun(t, dir, exitOK, nil, args...); out != line {
			t.Errorf("%q: %q, want %q", args, out, line)
		}
	}
	details := strings.TrimSuffix(line, "\n") + "netns " + cur.String() + " roce_versions both \n"
	for _, args := range [][]string{{"link", "-d"}, {"link", "show", "-d"}, {"link", "show", "--details", "rxe0"}, {"link", "-d", "show"}} {
		if out := wantRun(t, dir, exitOK, nil, args...); out != details {
			t.Errorf("%q: %q, want %q", args, out, details)
		}
	}
	// GOROCE_RUNDIR is --rundir's default.
	t.Setenv("GOROCE_RUNDIR", dir)
	if code, out, _ := roce(t, "link", "show"); code != 0 || out != line {
		t.Errorf("with GOROCE_RUNDIR: exit %d, %q", code, out)
	}

	wantRun(t, dir, exitError, []string{"roce: link show: No such device: no device rxe9 in " + dir + " (roce link show lists the devices there)\n"},
		"link", "show", "rxe9")
	wantRun(t, dir, exitError, []string{"roce: link delete rxe9: No such device: no device rxe9 in " + dir}, "link", "delete", "rxe9")
	wantRun(t, dir, exitUsage, []string{"accepts 1 arg(s), received 0"}, "link", "delete")
	wantRun(t, dir, exitUsage, []string{"accepts at most 1 arg(s)"}, "link", "show", "rxe0", "rxe1")
	wantRun(t, dir, exitUsage, []string{`unknown command "shwo" for "roce link"`, "did you mean show?"}, "link", "shwo")
	wantRun(t, dir, exitOK, nil, "link", "del", "rxe0")
	wantRun(t, dir, exitError, []string{"No such device"}, "link", "delete", "rxe0")
	if out := wantRun(t, dir, exitOK, nil, "link", "show"); out != "" {
		t.Errorf("link show after delete: %q", out)
	}
	// The netdev is free again.
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe1", "type", "rxe", "netdev", "lo", "roce-versions", "v1")
	if out := wantRun(t, dir, exitOK, nil, "link", "-d"); !strings.HasSuffix(out, " roce_versions v1 \n") {
		t.Errorf("link -d: %q", out)
	}
	wantRun(t, dir, exitOK, nil, "link", "delete", "rxe1")

	// rx-path is recorded and shown with the details (rdma -d, -j -d).
	for _, p := range []host.RxPath{host.RxSocket, host.RxRing, host.RxXDP} {
		wantRun(t, dir, exitOK, nil, "link", "add", "rxe2", "type", "rxe", "rx-path", string(p), "netdev", "lo", "roce-versions", "v2")
		if def, err := host.NewRegistry(dir).Get("rxe2"); err != nil || def.Rx != p || def.Versions != host.VersionsV2 {
			t.Errorf("rx-path %s: recorded %+v, %v", p, def, err)
		}
		if out := wantRun(t, dir, exitOK, nil, "link", "-d"); !strings.HasSuffix(out, " roce_versions v2 rx_path "+string(p)+" \n") {
			t.Errorf("rx-path %s: link -d: %q", p, out)
		}
		if out := wantRun(t, dir, exitOK, nil, "link", "-j", "-d"); !strings.Contains(out, `"roce_versions":"v2","rx_path":"`+string(p)+`"`) {
			t.Errorf("rx-path %s: link -j -d: %q", p, out)
		}
		wantRun(t, dir, exitOK, nil, "link", "delete", "rxe2")
	}
	// Without rx-path nothing is added to the line (as before it existed).
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe2", "type", "rxe", "netdev", "lo", "roce-versions", "v2")
	if out := wantRun(t, dir, exitOK, nil, "link", "-d"); !strings.HasSuffix(out, " roce_versions v2 \n") {
		t.Errorf("link -d without rx-path: %q", out)
	}
}

// A device whose netdev is gone stays listed, its port down, with a word on
// stderr; commands that need the netdev fail for it.
func TestLinkNetdevGone(t *testing.T) {
	dir := t.TempDir()
	cur, err := host.CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	reg := host.NewRegistry(dir)
	if err := reg.Add(host.DeviceDef{Name: "rxe9", Type: "rxe", Netdev: "gone0", Netns: cur, Versions: host.VersionsV2}); err != nil {
		t.Fatal(err)
	}
	out := wantRun(t, dir, exitOK, []string{"roce: rxe9: port down: netdev gone0 not found in network namespace " + cur.String()}, "link")
	if out != "link rxe9/1 state DOWN physical_state DISABLED netdev gone0 \n" {
		t.Errorf("link: %q", out)
	}
	for _, args := range [][]string{{"dev"}, {"dev", "-v"}, {"devices"}, {"gids"}} {
		wantRun(t, dir, exitError, []string{"roce: rxe9: netdev gone0 not found", "device rxe9 could not be read"}, args...)
	}
	wantRun(t, dir, exitOK, nil, "link", "delete", "rxe9")
}
