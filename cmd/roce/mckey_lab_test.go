package main

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
)

// labMckeyStart runs roce mckey in the lab's namespace, its output
// readable while it runs.
func labMckeyStart(t *testing.T, dir, bin string, args ...string) *mckeyProc {
	t.Helper()
	p := &mckeyProc{done: make(chan error, 1)}
	p.cmd = exec.Command("ip", append([]string{"netns", "exec", lab.Netns, bin, "--rundir", dir, "mckey"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
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
// VM's mckey. Every side prints mckey's lines and exits 0.
func TestLabMckey(t *testing.T) {
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	killMckey(l)
	const group, mgid = "239.1.2.3", "::ffff:239.1.2.3"
	t.Run("IPv4/goroce-sender", func(t *testing.T) {
		defer killMckey(l)
		var jobs []*lab.Job
		for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
			j := l.Background(t, vm, "/tmp/mckey.log", 90*time.Second, fmt.Sprintf("mckey -m %s -b %s -C 3", group, vm.IPv4))
			joined(t, l, vm, j, group)
			jobs = append(jobs, j)
		}
		send := labMckeyStart(t, dir, bin, "-m", group, "-b", lab.HostIPv4, "-s", "-C", "3")
		if code := send.wait(t, testenv.Slow); code != 0 || send.stdout.String() != mckeyOut(true, mgid) {
			t.Errorf("roce mckey -s: exit %d\n%s\nstderr: %s", code, send.stdout.String(), send.stderr.String())
		}
		for i, j := range jobs {
			log := j.Wait()
			if log != mckeyOut(false, mgid)+"EXIT 0\n" {
				t.Errorf("mckey in vm%d:\n%s", i+1, log)
			}
		}
	})
	t.Run("IPv4/goroce-receiver", func(t *testing.T) {
		defer killMckey(l)
		recv := labMckeyStart(t, dir, bin, "-m", group, "-b", lab.HostIPv4, "-C", "3")
		if !testenv.Poll(testenv.Slow, func() bool { return strings.Contains(recv.stdout.String(), "joined dgid") }) {
			t.Fatalf("roce mckey did not join: %q %q", recv.stdout.String(), recv.stderr.String())
		}
		other := l.Background(t, lab.VM1, "/tmp/mckey.log", 90*time.Second, fmt.Sprintf("mckey -m %s -b %s -C 3", group, lab.VM1.IPv4))
		joined(t, l, lab.VM1, other, group)
		out, rc, err := l.Exec(lab.VM2, fmt.Sprintf("timeout 60 mckey -m %s -b %s -s -C 3", group, lab.VM2.IPv4))
		if err != nil || rc != 0 || out != mckeyOut(true, mgid) {
			t.Errorf("mckey -s in vm2: exit %d %v\n%s", rc, err, out)
		}
		if code := recv.wait(t, testenv.Slow); code != 0 || recv.stdout.String() != mckeyOut(false, mgid) {
			t.Errorf("roce mckey: exit %d\n%s\nstderr: %s", code, recv.stdout.String(), recv.stderr.String())
		}
		if log := other.Wait(); log != mckeyOut(false, mgid)+"EXIT 0\n" {
			t.Errorf("mckey in vm1:\n%s", log)
		}
	})
}

// killMckey ends any mckey left in the VMs.
func killMckey(l *lab.Lab) {
	for _, vm := range []lab.VM{lab.VM1, lab.VM2} {
		l.Exec(vm, "killall mckey 2>/dev/null; true")
	}
}
