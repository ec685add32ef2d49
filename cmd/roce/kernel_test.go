package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/config/configfs"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/kernel/kerneltest"
)

// transcript returns the output of cmd as lab/KERNEL-BEHAVIOUR.md records
// it from the lab's kernel (a "# cmd" line opening a ``` block).
func transcript(t *testing.T, cmd string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.SharedDir(t), "lab", "KERNEL-BEHAVIOUR.md"))
	testenv.Require(t, err == nil, "../shared/lab/KERNEL-BEHAVIOUR.md")
	i := strings.Index(string(b), "```\n# "+cmd+"\n")
	if i < 0 {
		t.Fatalf("KERNEL-BEHAVIOUR.md has no transcript of %q", cmd)
	}
	rest := string(b)[i+len("```\n# "+cmd+"\n"):]
	end := strings.Index(rest, "[exit status")
	return rest[:end]
}

// labTree is a fake sysfs holding vm1's rxe0 on eth0 (MTU 1500) as the
// lab's kernel shows it, and a ConnectX-like mlx5_0 on ens1f0.
func labTree(t *testing.T) *kerneltest.Tree {
	tr := kerneltest.NewTree(t)
	tr.AddDevice(kerneltest.LabRXE())
	tr.AddDevice(kerneltest.MLX5("mlx5_0", "ens1f0"))
	tr.AddNetdev("eth0", 2, 1500)
	tr.AddNetdev("ens1f0", 4, 9000)
	return tr
}

// TestKernelDevInfo: roce dev shows a kernel rxe device as the lab's
// ibv_devinfo does, byte for byte, and -v adds the port's GIDs as
// ibv_devinfo -v prints them; stderr marks the device as the kernel's.
func TestKernelDevInfo(t *testing.T) {
	tr := labTree(t)
	dir := t.TempDir()
	code, stdout, stderr := roceAt(t, dir, "--sysfs", tr.Root, "dev", "-d", "rxe0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// The transcript lost the empty line ibv_devinfo ends each device
	// with (print_hca_cap's last printf("\n")), as $(...) drops it.
	if want := transcript(t, "ibv_devinfo"); stdout != want+"\n" {
		t.Errorf("roce dev -d rxe0:\n%s\nibv_devinfo in the lab:\n%s", stdout, want)
	}
	if !strings.Contains(stderr, "roce: dev: rxe0 is the kernel's (driver rxe)") {
		t.Errorf("stderr %q does not mark rxe0 as the kernel's", stderr)
	}
	_, stdout, stderr = roceAt(t, dir, "--sysfs", tr.Root, "dev", "-v", "-d", "rxe0")
	lab := transcript(t, "ibv_devinfo -v")
	for _, l := range strings.Split(lab, "\n") {
		if strings.Contains(l, "GID[") || strings.Contains(l, "gid_tbl_len") || strings.Contains(l, "pkey_tbl_len") ||
			strings.Contains(l, "port_cap_flags:") || strings.Contains(l, "active_width") || strings.Contains(l, "active_speed") ||
			strings.Contains(l, "phys_state") {
			if !strings.Contains(stdout, l+"\n") {
				t.Errorf("roce dev -v lacks ibv_devinfo -v's line %q", l)
			}
		}
	}
	if !strings.Contains(stderr, "not in sysfs: ibv_devinfo -v shows them") {
		t.Errorf("-v does not say what it leaves out: %q", stderr)
	}
	// The NIC: 9000-byte netdev, 4096 active MTU, its PCI IDs, both GID types.
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "dev", "-v", "-d", "mlx5_0")
	for _, want := range []string{"\tfw_ver:\t\t\t\t16.35.2000\n", "\tvendor_id:\t\t\t0x15b3\n", "\tvendor_part_id:\t\t\t4119\n",
		"\t\t\tactive_mtu:\t\t4096 (5)\n", "\t\t\tactive_speed:\t\t25.0 Gbps (32)\n",
		"\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c000:0205, RoCE v1\n",
		"\t\t\tGID[  3]:\t\t::ffff:192.0.2.5, RoCE v2\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("roce dev -v -d mlx5_0 lacks %q:\n%s", want, stdout)
		}
	}
	// Devices of both stacks; ibv_devices' columns, kernel ones marked.
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "devices")
	want := "    device          \t   node GUID\n    ------          \t----------------\n" +
		"    mlx5_0          \tb8599f0300d42e6a\tkernel\n    rxe0            \t505400fffec0020b\tkernel\n"
	if stdout != want {
		t.Errorf("roce devices:\n%q\nwant\n%q", stdout, want)
	}
	code, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "dev", "-j", "--kernel")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil || code != 0 || len(rows) != 2 {
		t.Fatalf("dev -j: exit %d %v: %s", code, err, stdout)
	}
	if rows[1]["ifname"] != "rxe0" || rows[1]["node_guid"] != "5054:00ff:fec0:020b" || rows[1]["node_type"] != "ca" ||
		rows[1]["kernel"] != true || rows[1]["driver"] != "rxe" {
		t.Errorf("dev -j: %v", rows[1])
	}
	wantRun(t, dir, exitError, []string{"roce: dev: Invalid argument: rxe0 has no port 2 (its ports: 1)"},
		"--sysfs", tr.Root, "dev", "-d", "rxe0", "-i", "2")
}

// TestKernelGIDs: roce gids lists the kernel devices' tables as show_gids
// does from sysfs — the lab's rxe0 line for line as the lab's sysfs gives
// it — after goroce's, each port's hint on stderr marked "(kernel)".
func TestKernelGIDs(t *testing.T) {
	tr := labTree(t)
	dir := t.TempDir()
	code, stdout, stderr := roceAt(t, dir, "--sysfs", tr.Root, "gids", "-d", "rxe0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	rows := parseGIDs(t, stdout)
	// KERNEL-BEHAVIOUR.md's loop over sysfs: "INDEX GID TYPE NDEV".
	var lab []string
	for _, l := range strings.Split(strings.TrimSpace(transcript(t,
		`cd /sys/class/infiniband/rxe0/ports/1 && for i in $(ls gids | sort -n); do g=$(cat gids/$i); [ $g = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue; echo "$i $g $(cat gid_attrs/types/$i) $(cat gid_attrs/ndevs/$i)"; done`)), "\n") {
		lab = append(lab, l)
	}
	if len(rows) != len(lab) {
		t.Fatalf("%d lines, sysfs has %d GIDs:\n%s", len(rows), len(lab), stdout)
	}
	for i, r := range rows {
		f := strings.Fields(lab[i])
		typ := map[string]string{"v2": "RoCE v2", "v1": "IB/RoCE v1"}[r.ver]
		if r.dev != "rxe0" || r.port != "1" || r.index != f[0] || r.gid != f[1] || typ != f[2]+" "+f[3] || r.netdev != f[4] {
			t.Errorf("line %d %v, sysfs %q", i, r, lab[i])
		}
	}
	if !strings.Contains(stderr, "rxe0 (kernel) port 1: use GID index 1 for RoCE v2 over IPv4 (192.0.2.11), 2 for RoCE v2 over IPv6 (fd00:c0:2::11)") {
		t.Errorf("hint: %q", stderr)
	}
	// Every device: mlx5_0's four entries, then rxe0's three.
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "gids")
	all := parseGIDs(t, stdout)
	if len(all) != 7 || all[2].ver != "v1" || all[2].ipv4 != "192.0.2.5" || all[3].ver != "v2" || all[0].dev != "mlx5_0" {
		t.Errorf("roce gids:\n%s", stdout)
	}
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "gids", "-j", "-d", "rxe0")
	var js []map[string]any
	if err := json.Unmarshal([]byte(stdout), &js); err != nil || len(js) != 3 {
		t.Fatalf("gids -j: %v %s", err, stdout)
	}
	if js[1]["gid"] != "0000:0000:0000:0000:0000:ffff:c000:020b" || js[1]["ipv4"] != "192.0.2.11" || js[1]["ver"] != "v2" ||
		js[1]["index"] != 1.0 || js[1]["netdev"] != "eth0" || js[1]["kernel"] != true {
		t.Errorf("gids -j: %v", js[1])
	}
	if _, ok := js[0]["ipv4"]; ok {
		t.Errorf("gids -j: the link-local GID has an ipv4: %v", js[0])
	}
	wantRun(t, dir, exitError, []string{"roce: gids: Invalid argument: mlx5_0 has no port 2 (its ports: 1)"},
		"--sysfs", tr.Root, "gids", "-d", "mlx5_0", "-p", "2")
}

// TestKernelLinkShow: roce link show prints a kernel port as rdma link
// show does, ending "kernel"; -j as rdma -j does, with "kernel": true.
func TestKernelLinkShow(t *testing.T) {
	tr := labTree(t)
	dir := t.TempDir()
	_, stdout, _ := roceAt(t, dir, "--sysfs", tr.Root, "link", "show", "rxe0")
	lab := strings.TrimSuffix(transcript(t, "rdma link show"), "\n")
	if stdout != lab+"kernel \n" {
		t.Errorf("roce link show rxe0: %q, want rdma's %q then \"kernel \"", stdout, lab)
	}
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "link", "-d", "--kernel")
	if want := "link rxe0/1 state ACTIVE physical_state LINK_UP netdev eth0 kernel netdev_index 2 driver rxe \n"; !strings.Contains(stdout, want) {
		t.Errorf("roce link -d --kernel:\n%s\nlacks %q", stdout, want)
	}
	_, stdout, _ = roceAt(t, dir, "--sysfs", tr.Root, "link", "show", "-j", "rxe0")
	want := `[{"ifindex":1,"ifname":"rxe0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"eth0","netdev_index":2,"kernel":true,"driver":"rxe"}]` + "\n"
	if stdout != want {
		t.Errorf("link show -j rxe0:\n%s\nwant\n%s", stdout, want)
	}
}

// TestKernelNames: a name both stacks have needs --kernel or
// --kernel=false; a kernel device is not deleted without --kernel; link
// add --kernel refuses what the kernel would, and says why, before asking
// it.
func TestKernelNames(t *testing.T) {
	tr := labTree(t)
	dir := configDevs(t) // goroce's rxe0, rxe1, rxe2
	wantRun(t, dir, exitUsage, []string{"rxe0 names a goroce device (in " + dir + ") and a kernel device: say which with --kernel or --kernel=false"},
		"--sysfs", tr.Root, "gids", "-d", "rxe0")
	if _, out, _ := roceAt(t, dir, "--sysfs", tr.Root, "gids", "-d", "rxe0", "--kernel"); !strings.Contains(out, "rxe0\t1\t2\tfd00:00c0:0002:0000:0000:0000:0000:0011\t\t\tv2\teth0\n") {
		t.Errorf("gids --kernel -d rxe0:\n%s", out)
	}
	if c, _, errs := roceAt(t, dir, "--sysfs", tr.Root, "gids", "-d", "rxe0", "--kernel=false"); c != 1 || !strings.Contains(errs, "roce: gids: device rxe0 could not be read") {
		t.Errorf("gids --kernel=false -d rxe0 reads goroce's rxe0 (on a netdev this host lacks): exit %d %q", c, errs)
	}
	wantRun(t, dir, exitError, []string{"roce: gids: No such device: no device mlx9 in " + dir +
		" (roce link show lists the devices there); nor has the kernel (its devices: mlx5_0, rxe0)"},
		"--sysfs", tr.Root, "gids", "-d", "mlx9")
	wantRun(t, dir, exitError, []string{"roce: gids: No such device: the kernel has no RDMA device rxe1 (roce dev --kernel lists them)"},
		"--sysfs", tr.Root, "gids", "-d", "rxe1", "--kernel")

	wantRun(t, dir, exitError, []string{"roce: link delete mlx5_0: No such device: no goroce device mlx5_0 in " + dir +
		"; mlx5_0 is the kernel's: roce link delete mlx5_0 --kernel"}, "--sysfs", tr.Root, "link", "delete", "mlx5_0")
	wantRun(t, dir, exitError, []string{"roce: link add rxe9: File exists: netdev eth0 carries the rxe device rxe0 already, and rdma_rxe takes one per netdev"},
		"--sysfs", tr.Root, "link", "add", "rxe9", "type", "rxe", "netdev", "eth0", "--kernel")
	wantRun(t, dir, exitError, []string{"roce: link add mlx5_0: File exists: the kernel has an RDMA device mlx5_0 already"},
		"--sysfs", tr.Root, "link", "add", "mlx5_0", "type", "rxe", "netdev", "eth1", "--kernel")
	wantRun(t, dir, exitUsage, []string{"roce-versions is goroce's: the kernel's rxe speaks RoCE v2 only"},
		"--sysfs", tr.Root, "link", "add", "rxe9", "type", "rxe", "netdev", "eth1", "roce-versions", "v1", "--kernel")
	wantRun(t, dir, exitUsage, []string{"rx-path is goroce's: the kernel's rxe receives in the kernel"},
		"--sysfs", tr.Root, "link", "add", "rxe9", "type", "rxe", "netdev", "eth1", "rx-path", "socket", "--kernel")
	wantRun(t, dir, exitError, []string{`link type "foo": the kernel's are rxe (Soft-RoCE) and siw (Soft-iWARP)`},
		"--sysfs", tr.Root, "link", "add", "rxe9", "type", "foo", "netdev", "eth1", "--kernel")
	wantRun(t, dir, exitError, []string{"roce: link delete rxe9: No such device: the kernel has no RDMA device rxe9"},
		"--sysfs", tr.Root, "link", "delete", "rxe9", "--kernel")
}

// kernelConfig serves a configfs that behaves as the kernel's (goroce's
// FUSE tree, for a v2-only rxe0) at a directory of the test's, beside the
// lab tree's sysfs, and returns the roce arguments that point there (the
// runtime directory apart, so rxe0 is the kernel's alone).
func kernelConfig(t *testing.T) (args []string, rundir string) {
	t.Helper()
	requireFUSE(t)
	tr := labTree(t)
	srvDir := t.TempDir()
	if err := host.NewRegistry(srvDir).Add(host.DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "eth0",
		Netns: host.Netns{Inode: 1, Dev: 1}, Versions: host.VersionsV2}); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	// Other users may reach it (the rule's command runs as root anyway).
	os.Chmod(filepath.Dir(mnt), 0o755)
	srv, err := configfs.Mount(mnt, configTree(srvDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	rundir = t.TempDir()
	return []string{"--rundir", rundir, "--sysfs", tr.Root, "--configfs", mnt}, rundir
}

// TestKernelModeTOS: roce mode and roce tos on a kernel device perform
// the configfs procedure: the value read back, a refused -m 1 explained as
// rxe's RoCE v2, a ToS kept after the directory goes, a missing port, -j.
func TestKernelModeTOS(t *testing.T) {
	args, _ := kernelConfig(t)
	for _, c := range []struct {
		args   string
		code   int
		stdout string
		stderr string
	}{
		{"mode -d rxe0", 0, "RoCE v2\n", ""},
		{"mode -d rxe0 -m 1", 1, "", "roce: mode: Invalid argument: rxe0 port 1 does not speak IB/RoCE v1: rxe speaks RoCE v2 only " +
			"(its GID table holds RoCE v2 GIDs alone), so its only mode is 2 (RoCE v2); a peer that speaks only RoCE v1 cannot be reached from it\n"},
		{"mode -d rxe0 -m 2", 0, "RoCE v2\n", ""},
		{"tos -d rxe0 -t 106", 0, "106\n", ""},
		{"tos -d rxe0", 0, "106\n", ""},
		{"tos -d rxe0 -t 0x20", 0, "32\n", ""},
		{"tos -d rxe0 -t 256", exitUsage, "", "roce: tos: Numerical result out of range: -t \"256\""},
		{"tos -d rxe0 -t 0", 0, "0\n", ""},
		{"mode -d rxe0 -p 2", 1, "", "roce: mode: No such file or directory: rxe0 has no port 2 (its ports: 1)\n"},
		{"mode -d rxe0 -j", 0, `[{"ifname":"rxe0","port":1,"default_roce_mode":"RoCE v2","kernel":true}]` + "\n", ""},
		{"tos -d rxe0 -j", 0, `[{"ifname":"rxe0","port":1,"default_roce_tos":0,"kernel":true}]` + "\n", ""},
	} {
		code, stdout, stderr := roce(t, append(args, strings.Fields(c.args)...)...)
		if code != c.code || stdout != c.stdout || (c.stderr == "" && stderr != "") || !strings.Contains(stderr, c.stderr) {
			t.Errorf("roce %s: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, stdout, stderr, c.code, c.stdout, c.stderr)
		}
	}
}

// runKey finds a udev rule's RUN+= program.
var runKey = regexp.MustCompile(`RUN\+="([^"]*)"`)

// TestKernelPersist: --persist shows, then writes, a udev rule under the
// given root, idempotently; the rule's command, run as udev runs it,
// applies the value again after the kernel forgot it; --persist=false
// removes it. Without udev or systemd it says what to do; goroce devices
// refuse it.
func TestKernelPersist(t *testing.T) {
	args, rundir := kernelConfig(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/udev/rules.d"), 0o755)
	// The roce the rule runs: this test binary as roce, with the test's
	// trees.
	exe := filepath.Join(t.TempDir(), "roce")
	script := "#!/bin/sh\nexec " + roceExecutable(t) + " " + strings.Join(args, " ") + " \"$@\"\n"
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := append(args, "--persist-root", root, "--persist-exe", exe)
	code, stdout, stderr := roce(t, append(p, "tos", "-d", "rxe0", "-t", "106", "--persist")...)
	rule := filepath.Join(root, "etc/udev/rules.d/90-roce-rxe0-port1-tos.rules")
	if code != 0 || stdout != "106\n" {
		t.Fatalf("tos --persist: exit %d %q %q", code, stdout, stderr)
	}
	b, err := os.ReadFile(rule)
	if err != nil {
		t.Fatal(err)
	}
	shown := strings.Index(stderr, string(b))
	written := strings.Index(stderr, "roce: tos: --persist: written\n")
	if shown < 0 || written < shown || !strings.Contains(stderr, "a udev rule sets the value again at boot, "+rule+":\n") {
		t.Errorf("the rule was not shown before it was written:\n%s", stderr)
	}
	_, _, stderr = roce(t, append(p, "tos", "-d", "rxe0", "--persist")...)
	if !strings.Contains(stderr, "already in place, nothing written") {
		t.Errorf("second --persist: %q", stderr)
	}

	// Reboot: the kernel forgets. The rule, run as udev would, sets it again.
	roce(t, append(args, "tos", "-d", "rxe0", "-t", "0")...)
	m := runKey.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no RUN+= in the rule:\n%s", b)
	}
	argv := strings.Fields(string(m[1]))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"ACTION=add", "SUBSYSTEM=infiniband", "DEVPATH=/devices/virtual/infiniband/rxe0", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the rule's command %q: %v\n%s", m[1], err, out)
	}
	if _, out, _ := roce(t, append(args, "tos", "-d", "rxe0")...); out != "106\n" {
		t.Errorf("after the rule's command the ToS reads %q, want 106", out)
	}

	_, _, stderr = roce(t, append(p, "tos", "-d", "rxe0", "-t", "0", "--persist=false")...)
	if !strings.Contains(stderr, "roce: tos: removed "+rule+"\n") {
		t.Errorf("--persist=false: %q", stderr)
	}
	if _, err := os.Stat(rule); err == nil {
		t.Error("the rule is still there")
	}
	_, _, stderr = roce(t, append(p, "tos", "-d", "rxe0", "--persist=false")...)
	if !strings.Contains(stderr, "nothing to remove") {
		t.Errorf("second --persist=false: %q", stderr)
	}

	// No udev, no systemd.
	bare := t.TempDir()
	code, _, stderr = roce(t, append(args, "--persist-root", bare, "--persist-exe", exe, "mode", "-d", "rxe0", "--persist")...)
	if code != 1 || !strings.Contains(stderr, "Operation not supported: --persist: neither udev nor systemd on this host") ||
		!strings.Contains(stderr, exe+" mode --kernel -d rxe0 -p 1 -m 2") {
		t.Errorf("--persist without udev or systemd: exit %d %q", code, stderr)
	}
	// goroce's own devices.
	dir := configDevs(t)
	wantRun(t, dir, exitError, []string{"--persist is for the kernel's devices: goroce's live in " + dir},
		"mode", "-d", "rxe1", "--persist")
	_ = rundir
}
