package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/wire"
)

// labMckeyStart runs roce mckey in the lab's namespace, its output
// readable while it runs.
func labMckeyStart(t *testing.T, dir, bin string, args ...string) *proc {
	t.Helper()
	return startRoceIn(t, lab.Netns, dir, bin, nil, "mckey", args...)
}

// joined polls until mckey in vm has joined group: its stdout goes to a
// file, fully buffered until it exits, so the sign is the kernel's: the
// CM's IGMP membership on eth0 (cma_igmp_send), which ip maddr lists.
func joined(t *testing.T, l *lab.Lab, vm lab.VM, job *lab.Job, group string) {
	t.Helper()
	var out, log string
	var exited bool
	testenv.Poll(testenv.Slow, func() bool {
		out, _, _ = l.Exec(vm, "ip maddr show dev eth0")
		if strings.Contains(out, " "+group+"\n") || strings.Contains(out, " "+group+" ") {
			return true
		}
		log, _, exited = job.Log()
		return exited
	})
	if exited {
		t.Fatalf("mckey in %s ended before joining %s:\n%s", vm.Name, group, log)
	}
}

// TestLabMckey runs roce mckey against rdma-core's mckey on Linux rxe,
// both directions: roce mckey -s sending to mckey receivers on both VMs,
// and mckey -s in a VM sending to a roce mckey receiver and the other
// VM's mckey. Every side prints mckey's lines and exits 0; goroce's
// datagrams, captured on the bridge, verify and carry what rxe's carry in
// mckey.pcap (TTL 64, the group MAC, UDP source port 0xC000 + hash(QPN)).
// IPv6: Linux 6.1's CM refuses an IPv6 group on a RoCE v2 port
// (cma_iboe_join_multicast: -ENOTSUPP), so mckey cannot join one on rxe;
// the subtest checks that refusal and runs the rest only if the VM joins.
func TestLabMckey(t *testing.T) {
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	killMckey(l)
	for _, fam := range []struct {
		name, group, mgid, host string
		addr                    func(lab.VM) string
	}{
		{"IPv4", "239.1.2.3", "::ffff:239.1.2.3", lab.HostIPv4, func(v lab.VM) string { return v.IPv4 }},
		{"IPv6", "ff0e::1:2:3", "ff0e::1:2:3", lab.HostIPv6, func(v lab.VM) string { return v.IPv6 }},
	} {
		group, mgid := fam.group, fam.mgid
		if fam.name == "IPv6" {
			out, rc, err := l.Exec(lab.VM1, fmt.Sprintf("timeout 60 mckey -m %s -b %s -C 0", group, lab.VM1.IPv6))
			if err != nil {
				t.Fatal(err)
			}
			if rc != 0 {
				if !strings.Contains(out, "mckey: failure joining") {
					t.Errorf("mckey -m %s in vm1: exit %d, not the CM's refusal:\n%s", group, rc, out)
				}
				t.Logf("Linux's mckey cannot join IPv6 group %s on rxe (RoCE v2): exit %d\n%s", group, rc, out)
				continue
			}
		}
		t.Run(fam.name+"/goroce-sender", func(t *testing.T) {
			defer killMckey(l)
			var jobs []*lab.Job
			for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
				j := l.Background(t, vm, "/tmp/mckey.log", 90*time.Second, fmt.Sprintf("mckey -m %s -b %s -C 3", group, fam.addr(vm)))
				joined(t, l, vm, j, group)
				jobs = append(jobs, j)
			}
			file := filepath.Join(t.TempDir(), "mckey.pcap")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			dump := l.Command(ctx, "tcpdump", "-i", lab.Bridge, "-s", "0", "-U", "-w", file, "udp port 4791")
			if err := dump.Start(); err != nil {
				t.Fatal(err)
			}
			send := labMckeyStart(t, dir, bin, "-m", group, "-b", fam.host, "-s", "-C", "3")
			if code := send.exitWithin(t, testenv.Slow); code != 0 || send.stdout.String() != mckeyOut(true, mgid) {
				t.Errorf("roce mckey -s: exit %d\n%s\nstderr: %s", code, send.stdout.String(), send.stderr.String())
			}
			for i, j := range jobs {
				log := j.Wait()
				if log != mckeyOut(false, mgid)+"EXIT 0\n" {
					t.Errorf("mckey in vm%d:\n%s", i+1, log)
				}
			}
			// tcpdump -U writes each packet as it sees it: stop it once the
			// three are in the file.
			testenv.Poll(testenv.Slow, func() bool {
				out, _ := exec.Command(testenv.Tshark(t), "-r", file, "-Y", "infiniband").Output()
				return strings.Count(string(out), "\n") >= 3
			})
			dump.Process.Signal(syscall.SIGTERM)
			dump.Wait()
			checkLabMckeyCapture(t, file, fam.name == "IPv4")
		})
		t.Run(fam.name+"/goroce-receiver", func(t *testing.T) {
			defer killMckey(l)
			recv := labMckeyStart(t, dir, bin, "-m", group, "-b", fam.host, "-C", "3")
			if !testenv.Poll(testenv.Slow, func() bool { return strings.Contains(recv.stdout.String(), "joined dgid") }) {
				t.Fatalf("roce mckey did not join: %q %q", recv.stdout.String(), recv.stderr.String())
			}
			other := l.Background(t, lab.VM1, "/tmp/mckey.log", 90*time.Second, fmt.Sprintf("mckey -m %s -b %s -C 3", group, fam.addr(lab.VM1)))
			joined(t, l, lab.VM1, other, group)
			out, rc, err := l.Exec(lab.VM2, fmt.Sprintf("timeout 60 mckey -m %s -b %s -s -C 3", group, fam.addr(lab.VM2)))
			if err != nil || rc != 0 || out != mckeyOut(true, mgid) {
				t.Errorf("mckey -s in vm2: exit %d %v\n%s", rc, err, out)
			}
			if code := recv.exitWithin(t, testenv.Slow); code != 0 || recv.stdout.String() != mckeyOut(false, mgid) {
				t.Errorf("roce mckey: exit %d\n%s\nstderr: %s", code, recv.stdout.String(), recv.stderr.String())
			}
			if log := other.Wait(); log != mckeyOut(false, mgid)+"EXIT 0\n" {
				t.Errorf("mckey in vm1:\n%s", log)
			}
		})
	}
}

// checkLabMckeyCapture checks goroce's three datagrams on the bridge: every
// ICRC right (roce decode --verify), and as rxe sends them in mckey.pcap:
// to the group's MAC, TTL (hop limit) 64, IPv4 DF, and the UDP source port
// of a UD QP, 0xC000 + hash_32(QPN, 14) (wire.UDSport).
func checkLabMckeyCapture(t *testing.T, file string, v4 bool) {
	t.Helper()
	code, _, stderr := roce(t, "decode", "--verify", file)
	if m := statsLine.FindStringSubmatch(strings.TrimSpace(stderr)); code != 0 || m == nil || m[2] != "3" || m[3] != m[2] {
		t.Errorf("roce decode --verify: exit %d, %.2000q; want 3 RoCE packets, every ICRC ok", code, stderr)
	}
	out, err := exec.Command(testenv.Tshark(t), "-r", file, "-Y", "infiniband", "-T", "fields", "-e", "eth.dst", "-e", "ip.ttl", "-e", "ipv6.hlim",
		"-e", "ip.flags.df", "-e", "udp.srcport", "-e", "infiniband.deth.srcqp", "-e", "infiniband.bth.destqp").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	t.Logf("tshark:\n%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d RoCE packets on the bridge, want 3", len(lines))
	}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) < 7 {
			t.Fatalf("tshark line %q", l)
		}
		qpn, _ := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 32)
		sport := strconv.Itoa(int(wire.UDSport(uint32(qpn))))
		mac, hop, df := "33:33:00:02:00:03", f[2], ""
		if v4 {
			mac, hop, df = "01:00:5e:01:02:03", f[1], f[3]
		}
		if f[0] != mac || hop != "64" || v4 && df != "1" && df != "True" || f[4] != sport || f[6] != "0xffffff" {
			t.Errorf("tshark: %q; want to %s, TTL 64, DF, UDP source port %s, QP 0xffffff", l, mac, sport)
		}
	}
}

// killMckey ends any mckey left in the VMs.
func killMckey(l *lab.Lab) {
	for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
		l.Exec(vm, "killall mckey 2>/dev/null; true")
	}
}
