package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/kernel/kerneltest"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// The roce the VMs run: a static build put into them (lab/up's
// ROCE_LAB_EXTRA).
const vmRoce = lab.ExtraDir + "/roce"

// staticRoce builds roce without cgo into a directory of its own.
func staticRoce(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "roce"), "./cmd/roce")
	cmd.Dir = testenv.RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("static build of roce: %v\n%s", err, out)
	}
	return dir
}

// vmRun runs roce ARGS in vm and returns its exit status, stdout and
// stderr (vm-exec merges the two: they go through files).
func vmRun(t *testing.T, l *lab.Lab, vm lab.VM, args ...string) (int, string, string) {
	t.Helper()
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	cmd := fmt.Sprintf("%s %s >/tmp/roce.out 2>/tmp/roce.err; rc=$?; cat /tmp/roce.out; printf '@@ROCE-STDERR@@'; cat /tmp/roce.err; exit $rc",
		vmRoce, strings.Join(q, " "))
	out, rc, err := l.Exec(vm, cmd)
	if err != nil {
		t.Fatalf("%s: roce %v: %v\n%s", vm.Name, args, err, out)
	}
	stdout, stderr, ok := strings.Cut(out, "@@ROCE-STDERR@@")
	if !ok {
		t.Fatalf("%s: roce %v: exit %d, no output markers:\n%s", vm.Name, args, rc, out)
	}
	return rc, stdout, stderr
}

// TestLabKernel runs goroce inside a lab VM on the kernel's own rxe0
// (Linux 6.1 rdma_rxe, rdma-core 44): links made and deleted over RDMA
// netlink, what dev, devices, gids and link show print against what
// ibv_devinfo, ibv_devices, sysfs and rdma print, the configfs procedure
// of roce mode and roce tos (and rping's packets carrying the ToS set),
// --persist's rule run as udev would, and roce probe against the kernel
// peer in vm2 and against a goroce RoCE v1-only device on the host.
func TestLabKernel(t *testing.T) {
	testenv.Root(t)
	extra := staticRoce(t)
	l := lab.StartWithExtra(t, extra)
	vm1 := lab.VM1

	t.Run("link", func(t *testing.T) {
		t.Cleanup(func() { l.Exec(vm1, "rdma link delete rxe9 2>/dev/null") })
		if code, _, stderr := vmRun(t, l, vm1, "link", "add", "rxe9", "type", "rxe", "netdev", "eth1", "--kernel"); code != 0 {
			t.Fatalf("link add rxe9 --kernel: exit %d: %s", code, stderr)
		}
		if out := l.MustExec(t, vm1, "ibv_devices"); !regexp.MustCompile(`(?m)^\s+rxe9\s+[0-9a-f]{16}$`).MatchString(out) {
			t.Errorf("ibv_devices does not list rxe9:\n%s", out)
		}
		_, stdout, _ := vmRun(t, l, vm1, "link", "show", "rxe9")
		rdma := l.MustExec(t, vm1, "rdma link show rxe9/1")
		if stdout != strings.TrimSuffix(rdma, "\n")+"kernel \n" {
			t.Errorf("roce link show rxe9: %q; rdma link show: %q", stdout, rdma)
		}
		_, stdout, _ = vmRun(t, l, vm1, "link", "show", "-j", "rxe9")
		var ours, theirs []map[string]any
		if err := json.Unmarshal([]byte(stdout), &ours); err != nil || len(ours) != 1 {
			t.Fatalf("roce link show -j: %v %q", err, stdout)
		}
		rdmaJ := l.MustExec(t, vm1, "rdma -j link show rxe9/1")
		if err := json.Unmarshal([]byte(rdmaJ), &theirs); err != nil || len(theirs) != 1 {
			t.Fatalf("rdma -j link show: %v %q", err, rdmaJ)
		}
		for k, v := range theirs[0] {
			if ours[0][k] != v {
				t.Errorf("link show -j %s: %v, rdma says %v", k, ours[0][k], v)
			}
		}
		if ours[0]["kernel"] != true || ours[0]["netdev"] != "eth1" {
			t.Errorf("link show -j: %v", ours[0])
		}
		code, _, stderr := vmRun(t, l, vm1, "link", "add", "rxe8", "type", "rxe", "netdev", "eth0", "--kernel")
		if code != 1 || !strings.Contains(stderr, "File exists: netdev eth0 carries the rxe device rxe0 already") {
			t.Errorf("a second rxe on eth0: exit %d %q", code, stderr)
		}
		if code, _, stderr := vmRun(t, l, vm1, "link", "delete", "rxe9", "--kernel"); code != 0 {
			t.Fatalf("link delete rxe9 --kernel: exit %d: %s", code, stderr)
		}
		if out := l.MustExec(t, vm1, "ibv_devices; rdma link show"); strings.Contains(out, "rxe9") {
			t.Errorf("rxe9 still there:\n%s", out)
		}
	})

	t.Run("dev-gids", func(t *testing.T) {
		_, stdout, stderr := vmRun(t, l, vm1, "dev", "-d", "rxe0")
		if want := l.MustExec(t, vm1, "ibv_devinfo -d rxe0"); stdout != want {
			t.Errorf("roce dev -d rxe0:\n%s\nibv_devinfo -d rxe0:\n%s\nstderr: %s", stdout, want, stderr)
		}
		_, stdout, _ = vmRun(t, l, vm1, "devices")
		if want := l.MustExec(t, vm1, "ibv_devices"); strings.ReplaceAll(stdout, "\tkernel\n", "\n") != want {
			t.Errorf("roce devices:\n%s\nibv_devices:\n%s", stdout, want)
		}
		code, stdout, stderr := vmRun(t, l, vm1, "gids", "-d", "rxe0")
		if code != 0 {
			t.Fatalf("gids -d rxe0: exit %d %s", code, stderr)
		}
		rows := parseGIDs(t, stdout)
		sysfs := l.MustExec(t, vm1, `cd /sys/class/infiniband/rxe0/ports/1 && for i in $(ls gids | sort -n); do g=$(cat gids/$i); `+
			`[ $g = 0000:0000:0000:0000:0000:0000:0000:0000 ] && continue; echo "$i $g $(cat gid_attrs/types/$i) $(cat gid_attrs/ndevs/$i)"; done`)
		lines := strings.Split(strings.TrimSpace(sysfs), "\n")
		if len(rows) != len(lines) {
			t.Fatalf("roce gids: %d lines, sysfs %d GIDs:\n%s\n%s", len(rows), len(lines), stdout, sysfs)
		}
		for i, r := range rows {
			f := strings.Fields(lines[i])
			typ := map[string]string{"v2": "RoCE v2", "v1": "IB/RoCE v1"}[r.ver]
			if r.dev != "rxe0" || r.port != "1" || r.index != f[0] || r.gid != f[1] || typ != f[2]+" "+f[3] || r.netdev != f[4] {
				t.Errorf("line %d: %v; sysfs: %q", i, r, lines[i])
			}
		}
		if !strings.Contains(stderr, "rxe0 (kernel) port 1: use GID index") {
			t.Errorf("gids' hint: %q", stderr)
		}
	})

	t.Run("mode", func(t *testing.T) {
		cm := "/sys/kernel/config/rdma_cm"
		code, stdout, stderr := vmRun(t, l, vm1, "mode", "-d", "rxe0")
		if code != 0 || stdout != "RoCE v2\n" {
			t.Errorf("mode -d rxe0: exit %d %q %q", code, stdout, stderr)
		}
		if out := l.MustExec(t, vm1, "ls "+cm); strings.Contains(out, "rxe0") {
			t.Errorf("the procedure left %s/rxe0 behind", cm)
		}
		code, stdout, stderr = vmRun(t, l, vm1, "mode", "-d", "rxe0", "-m", "1")
		if code != 1 || stdout != "" || !strings.Contains(stderr,
			"roce: mode: Invalid argument: rxe0 port 1 does not speak IB/RoCE v1: rxe speaks RoCE v2 only") {
			t.Errorf("mode -m 1 on rxe: exit %d %q %q", code, stdout, stderr)
		}
		code, stdout, _ = vmRun(t, l, vm1, "mode", "-d", "rxe0", "-m", "2", "-j")
		if code != 0 || stdout != `[{"ifname":"rxe0","port":1,"default_roce_mode":"RoCE v2","kernel":true}]`+"\n" {
			t.Errorf("mode -m 2 -j: exit %d %q", code, stdout)
		}
		code, _, stderr = vmRun(t, l, vm1, "mode", "-d", "rxe0", "-p", "2")
		if code != 1 || !strings.Contains(stderr, "No such file or directory: rxe0 has no port 2 (its ports: 1)") {
			t.Errorf("mode -p 2: exit %d %q", code, stderr)
		}
		// A directory the procedure did not make stays.
		l.MustExec(t, vm1, "mkdir "+cm+"/rxe0")
		vmRun(t, l, vm1, "mode", "-d", "rxe0")
		if out, _, _ := l.Exec(vm1, "ls "+cm+"; rmdir "+cm+"/rxe0"); !strings.Contains(out, "rxe0") {
			t.Errorf("the procedure removed a directory it did not make: %q", out)
		}
	})

	t.Run("tos-rping", func(t *testing.T) {
		t.Cleanup(func() { vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "0") })
		if code, stdout, stderr := vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "106"); code != 0 || stdout != "106\n" {
			t.Fatalf("tos -t 106: exit %d %q %q", code, stdout, stderr)
		}
		if _, stdout, _ := vmRun(t, l, vm1, "tos", "-d", "rxe0"); stdout != "106\n" {
			t.Errorf("tos after the directory went: %q", stdout)
		}
		h, err := netns.GetFromName(lab.Netns)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		pcapPath := filepath.Join(t.TempDir(), "rping_tos.pcap")
		capt := nettest.StartCapture(t, h, "tap-vm1", pcapPath)
		server := l.Background(t, lab.VM2, "/tmp/rping-s.log", 100*time.Second, "rping -s -a 192.0.2.12 -C 3 -v")
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
		defer cancel()
		err = lab.UntilListening(ctx, server, "rping -c: exit", func() error {
			if out, rc, _ := l.Exec(vm1, "rping -c -a 192.0.2.12 -C 3 -v"); rc != 0 {
				return fmt.Errorf("rping -c: exit %d\n%s", rc, out)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The server's end comes after the last frame of the connection.
		if log := server.Wait(); !strings.Contains(log, "EXIT 0") {
			t.Fatalf("rping -s:\n%s", log)
		}
		if _, err := capt.Stop(); err != nil {
			t.Fatal(err)
		}
		n, req := 0, false
		err = pcap.ReadFile(pcapPath, func(f pcap.Frame) error {
			var p wire.Packet
			if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil || p.IPVersion() != 4 {
				return nil
			}
			ip := p.IPv4()
			if ip.Src() != netip.MustParseAddr(lab.VM1.IPv4) && ip.Src() != netip.MustParseAddr(lab.VM2.IPv4) {
				return nil
			}
			n++
			if ip.TOS() != 106 {
				t.Errorf("frame %d %v→%v: TOS %#x, want 0x6a", f.Number, ip.Src(), ip.Dst(), ip.TOS())
			}
			if m, err := mad.Parse(p.Payload()); err == nil && p.BTH().DestQP() == 1 && m.Header().AttributeID() == mad.AttrREQ {
				req = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n < 10 || !req {
			t.Errorf("%d RoCE v2 frames between the VMs (a REQ among them: %v); want rping's connection", n, req)
		}
		t.Logf("%d RoCE v2 frames of rping, all with TOS 0x6a", n)
	})

	t.Run("persist", func(t *testing.T) {
		root := "/tmp/persist-root"
		t.Cleanup(func() {
			vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "0")
			l.Exec(vm1, "rm -rf "+root)
		})
		// Without udev or systemd (the VMs have neither), it says what to do.
		code, _, stderr := vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "106", "--persist")
		if code != 1 || !strings.Contains(stderr, "neither udev nor systemd on this host") ||
			!strings.Contains(stderr, vmRoce+" tos --kernel -d rxe0 -p 1 -t 106") {
			t.Errorf("--persist in a VM without udev: exit %d %q", code, stderr)
		}
		l.MustExec(t, vm1, "mkdir -p "+root+"/etc/udev/rules.d")
		code, _, stderr = vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "106", "--persist", "--persist-root", root)
		if code != 0 || !strings.Contains(stderr, "--persist: written") {
			t.Fatalf("tos --persist: exit %d %q", code, stderr)
		}
		rule := l.MustExec(t, vm1, "cat "+root+"/etc/udev/rules.d/90-roce-rxe0-port1-tos.rules")
		m := runKey.FindStringSubmatch(rule)
		if m == nil || !strings.Contains(stderr, rule) {
			t.Fatalf("rule (shown on stderr first?):\n%s\nstderr:\n%s", rule, stderr)
		}
		// Reboot: the kernel forgets the ToS. The rule's program, run as
		// udev runs it (no shell, the add event's environment), sets it again.
		vmRun(t, l, vm1, "tos", "-d", "rxe0", "-t", "0")
		out, rc, err := l.Exec(vm1, "env -i ACTION=add SUBSYSTEM=infiniband KERNEL=rxe0 DEVPATH=/devices/virtual/infiniband/rxe0 "+m[1])
		if err != nil || rc != 0 {
			t.Fatalf("the rule's program %q: exit %d %v\n%s", m[1], rc, err, out)
		}
		if got := l.MustExec(t, vm1, "mkdir /sys/kernel/config/rdma_cm/rxe0 && cat /sys/kernel/config/rdma_cm/rxe0/ports/1/default_roce_tos; "+
			"rmdir /sys/kernel/config/rdma_cm/rxe0"); got != "106\n" {
			t.Errorf("the kernel's default_roce_tos after the rule ran: %q, want 106", got)
		}
		code, _, stderr = vmRun(t, l, vm1, "tos", "-d", "rxe0", "--persist=false", "--persist-root", root)
		if code != 0 || !strings.Contains(stderr, "removed "+root+"/etc/udev/rules.d/90-roce-rxe0-port1-tos.rules") {
			t.Errorf("--persist=false: exit %d %q", code, stderr)
		}
	})

	t.Run("probe-kernel-peer", func(t *testing.T) {
		code, stdout, stderr := vmRun(t, l, vm1, "probe", lab.VM2.IPv4)
		if code != 0 {
			t.Errorf("probe %s: exit %d\n%s%s", lab.VM2.IPv4, code, stdout, stderr)
		}
		for _, want := range []string{
			"probe 192.0.2.12 from rxe0 port 1 (kernel; eth0, 192.0.2.11)\n",
			"by " + kerneltest.SysfsGID(lab.VM2.IPv4) + " (192.0.2.12)\n",
			"RoCE v1: no answer (3 tries, 1s each)\n",
			"rxe0 port 1 default_roce_mode: RoCE v2\n",
			"verdict: both speak RoCE v2\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("probe output lacks %q:\n%s", want, stdout)
			}
		}
		if !strings.Contains(stdout, "RoCE v2: answered in ") {
			t.Errorf("no RoCE v2 answer:\n%s", stdout)
		}
		t.Logf("roce probe in vm1:\n%s", stdout)
	})

	t.Run("probe-goroce-v1-peer", func(t *testing.T) {
		d := l.OpenDevice(t, host.VersionsV1)
		cm := rdmacm.New(rdmacm.Options{})
		defer cm.Close()
		if err := cm.AddDevice(d.Device); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := vmRun(t, l, vm1, "probe", "-j", lab.HostIPv4)
		if code != 1 {
			t.Errorf("probe of a v1-only peer from rxe: exit %d, want 1\n%s%s", code, stdout, stderr)
		}
		var rows []struct {
			V1 struct {
				Answered bool   `json:"answered"`
				GID      string `json:"gid"`
			} `json:"roce_v1"`
			V2 struct {
				Answered bool `json:"answered"`
			} `json:"roce_v2"`
			Verdict string `json:"verdict"`
			Match   bool   `json:"match"`
		}
		if err := json.Unmarshal([]byte(stdout), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("probe -j: %v %q %q", err, stdout, stderr)
		}
		r := rows[0]
		want := "peer answers RoCE v1 only, and rxe0 port 1 speaks RoCE v2 only (rxe): they cannot connect; the peer must speak RoCE v2"
		if !r.V1.Answered || r.V1.GID != kerneltest.SysfsGID(lab.HostIPv4) || r.V2.Answered || r.Match || r.Verdict != want {
			t.Errorf("probe -j %s from vm1: %+v", lab.HostIPv4, r)
		}
	})
}
