package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// startIn runs roce ARGS... as a process in h's network namespace, as a
// user does with ip netns exec, its output collected as it comes.
func startIn(t *testing.T, ctx context.Context, h *nettest.Host, exe, dir string, args ...string) *proc {
	t.Helper()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NSName, exe, "--rundir", dir}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	cmd.WaitDelay = 10 * time.Second
	return runProc(t, cmd, os.Kill, nil, nil)
}

// freePort returns a TCP port nothing listens on now, as a flag's value.
func freePort(t *testing.T) string {
	t.Helper()
	return strconv.Itoa(testenv.FreeTCPPort(t))
}

// wantLastLine checks that a process interrupted by a signal exited with
// the shell's status for it and that its stderr ends with one line
// matching re (anchored at both ends).
func wantLastLine(t *testing.T, what string, code, want int, stderr, re string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if code != want || !strings.HasSuffix(stderr, "\n") || !regexp.MustCompile("^"+re+"$").MatchString(lines[len(lines)-1]) {
		t.Errorf("%s: exit %d, stderr %q; want exit %d and a last line matching %s", what, code, stderr, want, re)
	}
	if strings.Contains(stderr, "context canceled") || strings.Contains(stderr, "poll CQ failed") {
		t.Errorf("%s: stderr %q says more than that it was interrupted", what, stderr)
	}
}

// TestInterrupts: Ctrl-C (SIGINT) or SIGTERM sent to roce mid-run, as a
// user sends them, ends every command with the shell's status for the
// signal (130, 143) and one line saying it was interrupted and what had
// completed — where a perf client or server exited 0 with a table header
// and no row, a pingpong server exited 1 with "poll CQ failed: context
// canceled", ping -c exited 1 with "context canceled" and ping -s -P 0.
// A perf client whose server is killed ends with an error saying so,
// where it retransmitted forever (retry_cnt 7, as on rxe).
func TestInterrupts(t *testing.T) {
	a, b, dir, exe := pingHosts(t, "v2", "v2")
	server := b.IPv4.String()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("pingpong", func(t *testing.T) {
		port := freePort(t)
		srv := startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-g", "1", "-p", port)
		// The server waits for a client: SIGINT.
		srv.stdout.waitFor(t, ctx, "local address")
		srv.cmd.Process.Signal(syscall.SIGINT)
		wantLastLine(t, "pingpong server waiting", srv.exitCode(t, ctx), 130, srv.stderr.String(),
			`roce: pingpong: interrupted by SIGINT while waiting for a client on port `+port)

		// Mid-run: the client by SIGINT, then the server, whose peer is
		// gone (pingpong's exchange is over by then), by SIGTERM.
		srv = startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-g", "1", "-p", port, "-n", "100000000")
		srv.stdout.waitFor(t, ctx, "local address")
		var cli *proc
		for try := 0; ; try++ {
			// Until the server listens (it says its address first).
			cli = startIn(t, ctx, a, exe, dir, "pingpong", "-d", "rxeA", "-g", "1", "-p", port, "-n", "100000000", server)
			for !cli.exited() && !strings.Contains(cli.stdout.String(), "remote address") {
				time.Sleep(20 * time.Millisecond)
			}
			if !cli.exited() || try > 50 {
				break
			}
		}
		cli.stdout.waitFor(t, ctx, "remote address")
		waitCounter(t, ctx, dir, "rxeA", "rcvd_pkts") // iterations have begun
		cli.cmd.Process.Signal(syscall.SIGINT)
		wantLastLine(t, "pingpong client mid-run", cli.exitCode(t, ctx), 130, cli.stderr.String(),
			`roce: pingpong: interrupted by SIGINT after [1-9]\d* of 100000000 iterations \(\d+ received, \d+ sent\)`)
		srv.cmd.Process.Signal(syscall.SIGTERM)
		wantLastLine(t, "pingpong server mid-run", srv.exitCode(t, ctx), 143, srv.stderr.String(),
			`roce: pingpong: interrupted by SIGTERM after [1-9]\d* of 100000000 iterations \(\d+ received, \d+ sent\)`)
	})

	t.Run("perf", func(t *testing.T) {
		port := freePort(t)
		srv := startIn(t, ctx, b, exe, dir, "perf", "write", "-d", "rxeB", "-p", port)
		srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
		srv.cmd.Process.Signal(syscall.SIGINT)
		wantLastLine(t, "perf server waiting", srv.exitCode(t, ctx), 130, srv.stderr.String(),
			`roce: perf write: interrupted by SIGINT while waiting for a client on port `+port)

		// A client interrupted mid-run says how far it got; its server,
		// whose client is gone, ends with an error that says so.
		srv = startIn(t, ctx, b, exe, dir, "perf", "write", "-d", "rxeB", "-p", port)
		srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
		cli := startIn(t, ctx, a, exe, dir, "perf", "write", "-d", "rxeA", "-p", port, "-D", "60", server)
		cli.stderr.waitFor(t, ctx, "roce perf:   1 s of 60 s")
		cli.cmd.Process.Signal(syscall.SIGINT)
		wantLastLine(t, "perf client mid-run", cli.exitCode(t, ctx), 130, cli.stderr.String(),
			`roce: perf write: interrupted by SIGINT after [1-9]\d* messages of 65536 bytes \(-D 60\)`)
		if code := srv.exitCode(t, ctx); code != exitError || !strings.Contains(srv.stderr.String(), "Unable to read from socket: EOF") {
			t.Errorf("perf server whose client was interrupted: exit %d, stderr %q; want exit 1 and the closed socket", code, srv.stderr.String())
		}

		// A client whose server is killed mid-run ends with an error
		// that says so (the server is killed as SIGKILL kills: no word).
		srv = startIn(t, ctx, b, exe, dir, "perf", "write", "-d", "rxeB", "-p", port)
		srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
		cli = startIn(t, ctx, a, exe, dir, "perf", "write", "-d", "rxeA", "-p", port, "-D", "60", server)
		cli.stderr.waitFor(t, ctx, "roce perf:   1 s of 60 s")
		srv.cmd.Process.Kill()
		wantLastLine(t, "perf client whose server was killed", cli.exitCode(t, ctx), exitError, cli.stderr.String(),
			`roce: the peer closed the test's exchange connection \(it exited, or was killed\): (EOF|connection reset by peer) after [1-9]\d* messages of 65536 bytes \(-D 60\)`)
	})

	t.Run("metrics", func(t *testing.T) {
		m := startIn(t, ctx, a, exe, dir, "metrics", "--metrics-addr", "127.0.0.1:0")
		m.stderr.waitFor(t, ctx, "serving metrics at")
		m.cmd.Process.Signal(syscall.SIGINT)
		wantLastLine(t, "metrics", m.exitCode(t, ctx), 130, m.stderr.String(),
			`roce: metrics: interrupted by SIGINT after serving metrics for \d+s`)
	})
}

// waitCounter waits until dev's counter name is not 0.
func waitCounter(t *testing.T, ctx context.Context, dir, dev, name string) {
	t.Helper()
	for {
		_, out, _ := roceAt(t, dir, "stat", dev)
		f := strings.Fields(out)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == name && f[i+1] != "0" {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s's %s stayed 0: %s", dev, name, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestPerfDurationOneSide: -D on one side only, as a user runs it by
// mistake. perftest does not exchange -D, and with SEND both perftest
// sides then wait forever (measured in the lab: ib_send_bw -D 3 against
// a server without -D prints its row and hangs, and the server never
// prints; the reverse alike); goroce's client printed "631 s of 3 s:
// 0.00 MB/sec" and never stopped. goroce to goroce, the side without -D
// takes the other's and says so, and both end with a row.
func TestPerfDurationOneSide(t *testing.T) {
	a, b, dir, exe := pingHosts(t, "v2", "v2")
	server := b.IPv4.String()
	for _, c := range []struct {
		args     []string
		durOn    string // "client" or "server"
		lat, dur bool
	}{
		{[]string{"send"}, "client", false, true},
		{[]string{"send"}, "server", false, true},
		{[]string{"write"}, "client", false, true},
		{[]string{"send", "--lat"}, "client", true, true},
		{[]string{"send", "-R"}, "client", false, true},
	} {
		t.Run(strings.Join(c.args, "_")+"_-D_on_the_"+c.durOn, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := freePort(t)
			sargs := append(append([]string{"perf"}, c.args...), "-d", "rxeB", "-p", port)
			cargs := append(append([]string{"perf"}, c.args...), "-d", "rxeA", "-p", port)
			if c.durOn == "client" {
				cargs = append(cargs, "-D", "2")
			} else {
				sargs = append(sargs, "-D", "2")
			}
			srv := startIn(t, ctx, b, exe, dir, sargs...)
			srv.stdout.waitFor(t, ctx, "Waiting for client to connect")
			cli := startIn(t, ctx, a, exe, dir, append(cargs, server)...)
			for who, p := range map[string]*proc{"client": cli, "server": srv} {
				if code := p.exitCode(t, ctx); code != 0 {
					t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", who, code, p.stdout.String(), p.stderr.String())
				}
			}
			other, without := "client", srv
			if c.durOn == "server" {
				other, without = "server", cli
			}
			note := fmt.Sprintf("roce perf: the %s runs for 2 s (-D 2): so does this side, not -n ", other)
			if !strings.Contains(without.stderr.String(), note) {
				t.Errorf("the side without -D: stderr %q lacks %q", without.stderr.String(), note)
			}
			checkPerfTable(t, "client", cli.stdout.String(), c.lat, c.dur)
			checkPerfTable(t, "server", srv.stdout.String(), c.lat, c.dur)
		})
	}
}
