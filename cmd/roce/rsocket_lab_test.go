package main

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
)

// labRoce registers a goroce device rxe0 on the lab's bridge in a runtime
// directory of the test's own and returns it and a roce executable; roce
// commands then run in the lab's namespace as processes (labRoceStart).
func labRoce(t *testing.T, l *lab.Lab) (dir, bin string) {
	t.Helper()
	dir, bin = t.TempDir(), roceExecutable(t)
	err := l.Do(func() error {
		ns, err := host.CurrentNetns()
		if err != nil {
			return err
		}
		return host.NewRegistry(dir).Add(host.DeviceDef{Name: "rxe0", Type: "rxe", Netdev: lab.Bridge, Netns: ns, Versions: host.VersionsBoth})
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, bin
}

func labRoceStart(t *testing.T, dir, bin string, args ...string) *proc {
	t.Helper()
	return labRoceStartEcho(t, nil, dir, bin, args...)
}

// labRoceStartEcho is labRoceStart that also copies the process's stdout
// to echo as it comes (a run of hours shows its progress in go test -v).
func labRoceStartEcho(t *testing.T, echo io.Writer, dir, bin string, args ...string) *proc {
	t.Helper()
	return startNSProc(t, lab.Netns, dir, bin, echo, nil, args...)
}

// notListening is what a VM tool's failed connect says before the goroce
// server listens (rsockets' rconnect, or its rpoll on a nonblocking
// connect); runInVM retries it.
func notListening(out string) bool {
	return strings.Contains(out, "rconnect") || strings.Contains(out, "rpoll")
}

// runInVM runs cmd in vm until it no longer fails for want of a listening
// goroce server (notListening), while srv runs, for at most testenv.Slow,
// and returns its last output and status.
func runInVM(t *testing.T, l *lab.Lab, vm lab.VM, srv *proc, cmd string) (string, int) {
	t.Helper()
	var out string
	var rc int
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	lab.UntilListening(ctx, nil, "not listening yet", func() error {
		var err error
		if out, rc, err = l.Exec(vm, cmd); err != nil {
			t.Fatal(err)
		}
		if rc != 0 && notListening(out) && srv.running() {
			return fmt.Errorf("not listening yet: %s", out)
		}
		return nil
	})
	return out, rc
}

// startUntilAccepted starts roce with args until its connection to the VM
// tool job is no longer REJECTED (the tool does not listen yet), while the
// job runs, for at most testenv.Slow, and returns the last process, ended.
func startUntilAccepted(t *testing.T, job *lab.Job, dir, bin string, limit time.Duration, args ...string) (*proc, int) {
	t.Helper()
	return startUntilAcceptedEcho(t, nil, job, dir, bin, limit, args...)
}

// startUntilAcceptedEcho is startUntilAccepted with labRoceStartEcho's echo.
func startUntilAcceptedEcho(t *testing.T, echo io.Writer, job *lab.Job, dir, bin string, limit time.Duration, args ...string) (*proc, int) {
	t.Helper()
	var p *proc
	var code int
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	lab.UntilListening(ctx, job, "REJECTED", func() error {
		p = labRoceStartEcho(t, echo, dir, bin, args...)
		if code = p.exitWithin(t, limit); code != 0 {
			return fmt.Errorf("exit %d: %s", code, p.stderr.String())
		}
		return nil
	})
	return p, code
}

// rstreamLine checks that out has rstream's header and one "custom" line
// of size-byte transfers.
func rstreamLine(out, size string) bool {
	return strings.Contains(out, "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n") &&
		strings.Contains(out, "custom    "+size) && !strings.Contains(out, "verification failed")
}

// TestLabRstream runs roce rstream against Linux rstream on rxe, both
// roles, IPv4 and IPv6, with -T v (every byte checked both ways, rstream's
// pattern continuous across the tests): ping-pong of small transfers
// (inline, then not), transfers larger than a message (RS_MAX_TRANSFER)
// and than half the ring (6 MiB, rstream -S all's largest). rxe's error
// retries give up nowhere. (-S all itself runs each size at full count:
// 24.5 GB, half each way, at the lab's 0.03–0.16 Gb/s, hours; see
// TestLabRstreamAll.)
func TestLabRstream(t *testing.T) {
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rstream riostream rcopy 2>/dev/null; true")
	before := l.Counters(t, vm)
	cases := []struct{ size, args string }{
		{"64", "-S 64 -C 1 -I 500"},
		{"1.5k", "-S 1536 -C 1 -I 200"},
		{"96k", "-S 98304 -C 30"},
		{"6m", "-S 6291456 -C 2"},
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		for _, tc := range cases {
			t.Run(fam+"/"+tc.size+"/goroce-server", func(t *testing.T) {
				srv := labRoceStart(t, dir, bin, append([]string{"rstream", "-b", ours, "-T", "v"}, strings.Fields(tc.args)...)...)
				out, rc := runInVM(t, l, vm, srv, fmt.Sprintf("timeout 200 rstream -s %s %s -T v", ours, tc.args))
				if rc != 0 || !rstreamLine(out, tc.size) {
					t.Errorf("rstream -s %s %s -T v: exit %d\n%s", ours, tc.args, rc, out)
				}
				if code := srv.exitWithin(t, 3*time.Minute); code != 0 || !rstreamLine(srv.stdout.String(), tc.size) {
					t.Errorf("roce rstream server: exit %d\n%s%s", code, srv.stdout.String(), srv.stderr.String())
				}
				t.Logf("rstream (VM):\n%sroce rstream:\n%s", out, srv.stdout.String())
			})
			t.Run(fam+"/"+tc.size+"/goroce-client", func(t *testing.T) {
				job := l.Background(t, vm, "/tmp/rstream.log", 200*time.Second, fmt.Sprintf("rstream -b %s %s -T v", theirs, tc.args))
				cli, code := startUntilAccepted(t, job, dir, bin, 3*time.Minute, append([]string{"rstream", "-s", theirs, "-T", "v"}, strings.Fields(tc.args)...)...)
				if code != 0 || !rstreamLine(cli.stdout.String(), tc.size) {
					t.Errorf("roce rstream -s %s: exit %d\n%s%s", theirs, code, cli.stdout.String(), cli.stderr.String())
				}
				log := job.Wait()
				if !strings.Contains(log, "EXIT 0") || !rstreamLine(log, tc.size) {
					t.Errorf("rstream -b %s (VM):\n%s", theirs, log)
				}
				t.Logf("roce rstream:\n%srstream (VM):\n%s", cli.stdout.String(), log)
			})
		}
	}
	// The emulated VM drops packets when goroce's bulk transfers outrun it
	// (its retransmissions and out-of-sequence counts move): RC recovers,
	// and -T v checks the result. What must not happen is a connection
	// given up.
	after := l.Counters(t, vm)
	for _, k := range []string{"retry_exceeded_err", "rnr_nak_retry_err"} {
		if after[k] != before[k] {
			t.Errorf("rxe counter %s moved from %d to %d", k, before[k], after[k])
		}
	}
	for _, k := range []string{"completer_retry_err", "out_of_seq_request", "rcvd_seq_err", "rcvd_rnr_err", "duplicate_request"} {
		t.Logf("rxe %s: %d during the test", k, after[k]-before[k])
	}
}

// TestLabRstreamAll is the full run: rstream -S all -T v against
// roce rstream, both roles, IPv4 and IPv6 — every size of rstream's table
// at its full count, latency then bandwidth, two connections each.
//
// Nothing makes -S all shorter. rstream.c (rdma-core v44) gives each of
// its 33 sizes, 64 B to 6 MiB, size_to_count's count (common.c: 100,000
// below 1 KiB, 10,000 below 64 KiB, 1,000 below 1 MiB, 100 from 1 MiB),
// as the iterations of the latency test and the transfers of the
// bandwidth test; -I and -C set its "custom" flag, and then run() makes
// one test of the -S size (1000 bytes when -S all gave none) instead of
// the table, -S all only setting size_option. A run is 24.5 GB, half each
// way (rstream's "total" column summed), 20 minutes to two hours a role
// at the lab's 0.03–0.16 Gb/s; and the latency tests are 1.66 million
// transfers one at a time, over an hour a role at the 2570 µs per
// transfer measured: in a run begun 2026-12-01 21:55 UTC the first line,
// 64_lat (100,000 round trips), took 514 s (the test was stopped there).
// So it runs only with GOROCE_LAB_RSTREAM_ALL=1 (and a -timeout of hours),
// and TestLabRstream covers the table's extremes at short counts.
func TestLabRstreamAll(t *testing.T) {
	if os.Getenv("GOROCE_LAB_RSTREAM_ALL") == "" {
		t.Skip("the full -S all runs take hours at the lab's speed: set GOROCE_LAB_RSTREAM_ALL=1")
	}
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rstream riostream rcopy 2>/dev/null; true")
	const limit = 4 * time.Hour
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		t.Run(fam+"/goroce-server", func(t *testing.T) {
			srv := labRoceStartEcho(t, testLog{t}, dir, bin, "rstream", "-b", ours, "-S", "all", "-T", "v")
			out, rc := runInVM(t, l, vm, srv, fmt.Sprintf("timeout %d rstream -s %s -S all -T v", int(limit.Seconds()), ours))
			code := srv.exitWithin(t, limit)
			log := fmt.Sprintf("%sEXIT %d\n", out, rc)
			t.Logf("roce rstream:\n%s\nrstream (VM):\n%s", srv.stdout.String(), log)
			if code != 0 || !strings.Contains(log, "EXIT 0") || strings.Contains(log, "verification failed") ||
				strings.Count(srv.stdout.String(), "_bw ") != 33 || strings.Count(srv.stdout.String(), "_lat ") != 33 {
				t.Errorf("exit %d\n%s", code, srv.stderr.String())
			}
		})
		t.Run(fam+"/goroce-client", func(t *testing.T) {
			job := l.Background(t, vm, "/tmp/rstream.log", limit, fmt.Sprintf("rstream -b %s -S all -T v", theirs))
			cli, code := startUntilAcceptedEcho(t, testLog{t}, job, dir, bin, limit, "rstream", "-s", theirs, "-S", "all", "-T", "v")
			log := job.Wait()
			t.Logf("roce rstream:\n%s\nrstream (VM):\n%s", cli.stdout.String(), log)
			if code != 0 || !strings.Contains(log, "EXIT 0") || strings.Contains(log, "verification failed") ||
				strings.Count(cli.stdout.String(), "_bw ") != 33 || strings.Count(cli.stdout.String(), "_lat ") != 33 {
				t.Errorf("exit %d\n%s", code, cli.stderr.String())
			}
		})
	}
}

// testLog writes to the test's log (shown as it comes with go test -v).
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// TestLabRiostream: riostream (iomapped writes) against roce rstream, both
// roles. goroce advertises no iomap space, so riostream's riomap fails
// ("riomap: Cannot allocate memory") and it closes the connection; roce
// rstream then fails too, saying that the peer asked for iomapped buffers,
// which goroce does not implement. Neither hangs.
func TestLabRiostream(t *testing.T) {
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rstream riostream rcopy 2>/dev/null; true")
	const args = "-S 1000 -C 10 -T v"
	const hint = "the peer asked for iomapped buffers (target_iomap_size 1, as riostream's riomap and riowrite do), which goroce does not implement"
	t.Run("goroce-server", func(t *testing.T) {
		srv := labRoceStart(t, dir, bin, append([]string{"rstream", "-b", lab.HostIPv4}, strings.Fields(args)...)...)
		out, rc := runInVM(t, l, vm, srv, fmt.Sprintf("timeout 60 riostream -s %s %s", lab.HostIPv4, args))
		if rc == 0 || !strings.Contains(out, "riomap: Cannot allocate memory") {
			t.Errorf("riostream -s: exit %d\n%s", rc, out)
		}
		if code := srv.exitWithin(t, time.Minute); code == 0 || !strings.Contains(srv.stderr.String(), hint) {
			t.Errorf("roce rstream server: exit %d\n%s", code, srv.stderr.String())
		}
		t.Logf("riostream (VM): %sroce rstream: %s", out, srv.stderr.String())
	})
	t.Run("goroce-client", func(t *testing.T) {
		job := l.Background(t, vm, "/tmp/riostream.log", 60*time.Second, fmt.Sprintf("riostream -b %s %s", vm.IPv4, args))
		// goroce's client fails either way (the hint); it retries only
		// while riostream does not listen yet.
		cli, code := startUntilAccepted(t, job, dir, bin, time.Minute, append([]string{"rstream", "-s", vm.IPv4}, strings.Fields(args)...)...)
		// riostream sets its iomap size on the listening rsocket only after
		// rlisten, so a retry accepted in between gets a connection without
		// iomap (seen once in 2026-12 runs): riostream's riomap then fails
		// the same way and it closes, and roce rstream sees the close (EOF)
		// instead of the request it would refuse. Either ending is right;
		// a success is not.
		raced := strings.Contains(cli.stderr.String(), "EOF")
		if code == 0 || !strings.Contains(cli.stderr.String(), hint) && !raced {
			t.Errorf("roce rstream -s: exit %d\n%s", code, cli.stderr.String())
		}
		if raced {
			t.Logf("riostream accepted the connection before setting its iomap size; roce rstream saw the close")
		}
		log := job.Wait()
		if !strings.Contains(log, "riomap: Cannot allocate memory") || strings.Contains(log, "EXIT 0") {
			t.Errorf("riostream -b (VM):\n%s", log)
		}
		t.Logf("roce rstream: %sriostream (VM): %s", cli.stderr.String(), log)
	})
}

// TestLabRcopy copies a 10 MiB file of random bytes each way between roce
// rcopy and Linux rcopy; the copies' MD5 sums equal the originals'.
func TestLabRcopy(t *testing.T) {
	l := lab.Start(t)
	dir, bin := labRoce(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rstream riostream rcopy 2>/dev/null; true")
	const size = 10 << 20
	t.Run("to-goroce", func(t *testing.T) {
		dst := filepath.Join(t.TempDir(), "copy")
		srv := labRoceStart(t, dir, bin, "rcopy")
		sum := strings.Fields(l.MustExec(t, vm, fmt.Sprintf("head -c %d /dev/urandom > /tmp/rc.src && md5sum /tmp/rc.src", size)))[0]
		out, _ := runInVM(t, l, vm, srv, fmt.Sprintf("timeout 120 rcopy /tmp/rc.src %s:%s", lab.HostIPv4, dst))
		srv.cmd.Process.Signal(syscall.SIGTERM)
		if code := srv.exitWithin(t, time.Minute); code != 143 || !strings.Contains(srv.stderr.String(), "interrupted by SIGTERM after receiving 1 file") {
			t.Errorf("roce rcopy server: exit %d, want 143 after one file\n%s", code, srv.stderr.String())
		}
		got, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		h := md5.Sum(got)
		if len(got) != size || hex.EncodeToString(h[:]) != sum {
			t.Fatalf("copied %d bytes, MD5 %x; the VM's file has %d bytes, MD5 %s", len(got), h, size, sum)
		}
		want := fmt.Sprintf("opening: %s, transferring...%d bytes...closing...done", dst, size)
		if !strings.Contains(srv.stdout.String(), want) || !strings.Contains(out, "opening...transferring...closing...done") {
			t.Errorf("rcopy (VM): %s\nroce rcopy server: %s", out, srv.stdout.String())
		}
		t.Logf("rcopy (VM): %sroce rcopy: %s", out, srv.stdout.String())
	})
	t.Run("from-goroce", func(t *testing.T) {
		src := filepath.Join(t.TempDir(), "src")
		data := make([]byte, size)
		rand.Read(data)
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		h := md5.Sum(data)
		l.MustExec(t, vm, "rm -f /tmp/rc.dst")
		job := l.Background(t, vm, "/tmp/rcopy.log", 120*time.Second, "rcopy")
		cli, code := startUntilAccepted(t, job, dir, bin, 2*time.Minute, "rcopy", src, vm.IPv4+":/tmp/rc.dst")
		l.Exec(vm, "killall rcopy")
		if code != 0 || !strings.Contains(cli.stdout.String(), fmt.Sprintf("%d bytes in", size)) {
			t.Fatalf("roce rcopy: exit %d\n%s%s", code, cli.stdout.String(), cli.stderr.String())
		}
		sum := strings.Fields(l.MustExec(t, vm, "md5sum /tmp/rc.dst; rm -f /tmp/rc.dst /tmp/rc.src"))[0]
		if sum != hex.EncodeToString(h[:]) {
			t.Fatalf("the VM's copy has MD5 %s, the original %x", sum, h)
		}
		log := job.Wait()
		t.Logf("roce rcopy: %srcopy (VM): %s", cli.stdout.String(), log)
	})
}
