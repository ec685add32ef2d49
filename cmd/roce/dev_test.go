package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// kernelOutput returns the output of command in the lab transcript of Linux
// rxe (../shared/lab/KERNEL-BEHAVIOUR.md), as printed there: the transcript
// keeps trailing spaces but, like $(...), drops trailing newlines.
func kernelOutput(t *testing.T, command string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.SharedDir(t), "lab", "KERNEL-BEHAVIOUR.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "```\n# "+command+"\n")
	if start < 0 {
		t.Fatalf("KERNEL-BEHAVIOUR.md has no %q", command)
	}
	s = s[start+len("```\n# "+command+"\n"):]
	end := strings.Index(s, "[exit status 0]\n```")
	if end < 0 {
		t.Fatalf("KERNEL-BEHAVIOUR.md: %q does not end in exit status 0", command)
	}
	return strings.TrimSuffix(s[:end], "\n")
}

// The lab's rxe0 (KERNEL-BEHAVIOUR.md): eth0 52:54:00:c0:02:0b, MTU 1500,
// 192.0.2.11 and fd00:c0:2::11.
var (
	labMAC    = wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}
	labNetdev = host.Netdev{Name: "eth0", MAC: labMAC, MTU: 1500, Up: true, Running: true,
		Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("fd00:c0:2::11")}}
)

func labGIDs(v host.Versions) []verbs.GIDEntry {
	tab := host.GIDTable{Versions: v, Netdev: "eth0"}
	tab.Update(labNetdev)
	return tab.Entries()
}

// goroceDiffers are the ibv_devinfo -v lines where goroce differs from
// rxe on purpose (max_mw and the multicast limits are rxe's since goroce
// has memory windows and multicast): it implements packet pacing
// (IBV_QP_RATE_LIMIT) on RC, UC and UD QPs, which rxe does not, and
// ibv_devinfo names UD and shows RC and UC (1<<2 | 1<<3) as unknown flags.
var goroceDiffers = map[string]string{
	"\t\tqp_rate_limit_min:\t0kbps": "\t\tqp_rate_limit_min:\t1kbps",
	"\t\tqp_rate_limit_max:\t0kbps": "\t\tqp_rate_limit_max:\t100000000kbps\n" +
		"\t\tsupported_qp:\n\t\t\t\t\tSUPPORT_UD\n\t\t\t\t\tUnknown flags: 0xC",
}

// kernelDevinfo is the lab's ibv_devinfo [-v] output with goroce's known
// differences applied and the blank line that ends each port (which the
// transcript drops), for device name with node GUID guid; gidLines, if
// set, replace the lab's GID lines.
func kernelDevinfo(t *testing.T, verbose bool, name string, guid uint64, gidLines []string) string {
	t.Helper()
	cmd := "ibv_devinfo"
	if verbose {
		cmd += " -v"
	}
	var lines []string
	for _, l := range strings.Split(kernelOutput(t, cmd), "\n") {
		if d, ok := goroceDiffers[l]; ok {
			l = d
		}
		switch {
		case l == "hca_id:\trxe0":
			l = "hca_id:\t" + name
		case strings.HasPrefix(l, "\tnode_guid:") || strings.HasPrefix(l, "\tsys_image_guid:"):
			l = strings.Replace(l, "5054:00ff:fec0:020b", guidString(guid), 1)
		case strings.HasPrefix(l, "\t\t\tGID[") && gidLines != nil:
			continue
		}
		lines = append(lines, l)
	}
	lines = append(lines, gidLines...)
	return strings.Join(lines, "\n") + "\n\n"
}

// TestDevinfoMatchesKernel: roce dev [-v] prints, byte for byte, what
// ibv_devinfo [-v] prints for Linux rxe in the lab, but for the known
// differences; ibv_devices and rdma link show likewise.
func TestDevinfoMatchesKernel(t *testing.T) {
	attr, port := host.DeviceAttrOf(labMAC), host.PortAttrOf(labNetdev)
	for _, verbose := range []bool{false, true} {
		var b bytes.Buffer
		writeDevinfo(&b, "rxe0", attr, port, labGIDs(host.VersionsV2), verbose)
		want := kernelDevinfo(t, verbose, "rxe0", 0x505400fffec0020b, nil)
		if got := b.String(); got != want {
			t.Errorf("verbose=%v:\n%s", verbose, lineDiff(got, want))
		}
	}
	// The kernel lines goroce changes are there to change (a stale table would hide a difference).
	v := kernelOutput(t, "ibv_devinfo -v")
	for k := range goroceDiffers {
		if !strings.Contains(v, k+"\n") {
			t.Errorf("the transcript has no line %q", k)
		}
	}

	var b bytes.Buffer
	writeLink(&b, host.DeviceDef{Name: "rxe0", Netdev: "eth0"}, linkStateOf(labNetdev), false, nil)
	if want := kernelOutput(t, "rdma link show") + "\n"; b.String() != want {
		t.Errorf("rdma link show: %q, want %q", b.String(), want)
	}
}

// RoCE v1 GIDs print as ibv_devinfo prints them: 16 hex bytes, "RoCE v1".
func TestDevinfoV1GIDsAndPortDown(t *testing.T) {
	nd := labNetdev
	nd.Running = false
	var b bytes.Buffer
	writeDevinfo(&b, "rxe0", host.DeviceAttrOf(labMAC), host.PortAttrOf(nd), labGIDs(host.VersionsBoth), true)
	want := kernelDevinfo(t, true, "rxe0", 0x505400fffec0020b, []string{
		"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:5054:00ff:fec0:020b, RoCE v1",
		"\t\t\tGID[  1]:\t\tfe80::5054:ff:fec0:20b, RoCE v2",
		"\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c000:020b, RoCE v1",
		"\t\t\tGID[  3]:\t\t::ffff:192.0.2.11, RoCE v2",
		"\t\t\tGID[  4]:\t\tfd00:00c0:0002:0000:0000:0000:0000:0011, RoCE v1",
		"\t\t\tGID[  5]:\t\tfd00:c0:2::11, RoCE v2",
	})
	want = strings.Replace(want, "PORT_ACTIVE (4)", "PORT_DOWN (1)", 1)
	want = strings.Replace(want, "LINK_UP (5)", "DISABLED (3)", 1)
	if got := b.String(); got != want {
		t.Errorf("\n%s", lineDiff(got, want))
	}
	b.Reset()
	writeLink(&b, host.DeviceDef{Name: "rxe0", Netdev: "eth0"}, linkStateOf(nd), false, nil)
	if want := "link rxe0/1 state DOWN physical_state DISABLED netdev eth0 \n"; b.String() != want {
		t.Errorf("link: %q", b.String())
	}
}

// lineDiff shows the first lines where got and want differ.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var out []string
	for i := 0; i < max(len(g), len(w)) && len(out) < 10; i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			out = append(out, fmt.Sprintf("line %d:\n  got  %q\n  want %q", i+1, gl, wl))
		}
	}
	return strings.Join(out, "\n")
}

func TestDevOnLoopback(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	ns, _ := host.CurrentNetns()
	nd, err := host.LookupNetdevIn(ns, "lo")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeDevinfo(&b, "rxe0", host.DeviceAttrOf(nd.MAC), host.PortAttrOf(nd), nil, false)
	for _, args := range [][]string{{"dev"}, {"dev", "-d", "rxe0"}, {"dev", "--ib-dev=rxe0", "-i", "1"}} {
		if out := wantRun(t, dir, exitOK, nil, args...); out != b.String() {
			t.Errorf("%q:\n%s", args, lineDiff(out, b.String()))
		}
	}
	out := wantRun(t, dir, exitOK, nil, "dev", "-v")
	if !strings.Contains(out, "\tmax_qp:\t\t\t\t1048560\n") || !strings.Contains(out, "\t\t\tGID[  1]:\t\tfe80::200:ff:fe00:0, RoCE v2\n") {
		t.Errorf("dev -v:\n%s", out)
	}
	devs := "    device          \t   node GUID\n    ------          \t----------------\n" +
		fmt.Sprintf("    rxe0            \t%016x\n", host.NodeGUID(nd.MAC))
	for _, args := range [][]string{{"devices"}, {"dev", "-l"}} {
		if out := wantRun(t, dir, exitOK, nil, args...); out != devs {
			t.Errorf("%q: %q, want %q", args, out, devs)
		}
	}
}

func TestDevErrors(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitError, []string{"roce: dev: No such device: no devices in " + dir + " (add one: roce link add NAME"}, "dev")
	if out := wantRun(t, dir, exitOK, nil, "devices"); out != "    device          \t   node GUID\n    ------          \t----------------\n" {
		t.Errorf("devices with no device: %q", out)
	}
	wantRun(t, dir, exitError, []string{"roce: dev: No such device: no device rxe7 in " + dir}, "dev", "-d", "rxe7")
	wantRun(t, dir, exitError, []string{"roce: dev: Invalid argument: port 2: goroce devices have one port, port 1"}, "dev", "-i", "2")
	wantRun(t, dir, exitUsage, []string{"roce: dev: Invalid argument: -i -1: the port number should be between 1 and 255 (goroce devices have port 1)"}, "dev", "-i", "-1")
	wantRun(t, dir, exitUsage, []string{"roce: dev: Invalid argument: -i 0: the port number should be between 1 and 255"}, "dev", "-i", "0")
	wantRun(t, dir, exitUsage, []string{`unknown command "rxe0" for "roce dev"`}, "dev", "rxe0")
	wantRun(t, dir, exitUsage, []string{"unknown shorthand flag: 'x'"}, "dev", "-x")
	wantRun(t, dir, exitUsage, []string{"unknown command"}, "devices", "rxe0")
}
