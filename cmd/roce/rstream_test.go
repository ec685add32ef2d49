package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRstreamFormat: the table's strings are rstream's (common.c's
// size_str and cnt_str; test names truncated to rstream's 5-byte buffer).
func TestRstreamFormat(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		max  int
		want string
	}{
		{64, 31, "64"}, {1536, 4, "1.5k"}, {98304, 31, "96k"}, {1 << 20, 31, "1m"}, {6291456, 4, "6m"},
		{3 << 19, 31, "1.5m"}, {12 << 20, 31, "12m"}, {25 * 1 << 20, 31, "25m"}, {3 << 29, 31, "1.5g"},
		{12800000, 31, "12m"}, {200 * 2, 31, "400"}, {1000, 31, "1000"},
	} {
		if got := sizeStr(tc.n, tc.max); got != tc.want {
			t.Errorf("sizeStr(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		n    int64
		want string
	}{{1, "1"}, {999, "999"}, {1000, "1k"}, {100000, "100k"}, {2500000, "2m"}, {3000000000, "3b"}} {
		if got := cntStr(tc.n); got != tc.want {
			t.Errorf("cntStr(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	// -S all: the 33 sizes of rstream's table, 64 B to 6 MiB.
	if n := len(rstreamSizes); n != 33 || rstreamSizes[0].size != 64 || rstreamSizes[32].size != 6<<20 {
		t.Errorf("%d sizes, from %d to %d", n, rstreamSizes[0].size, rstreamSizes[n-1].size)
	}
	var opt0 []int
	for _, s := range rstreamSizes {
		if s.option == 0 {
			opt0 = append(opt0, s.size)
		}
	}
	if len(opt0) != 4 || opt0[0] != 64 || opt0[1] != 4096 || opt0[2] != 65536 || opt0[3] != 1<<20 {
		t.Errorf("sizes without -S all: %v, want rstream's 64, 4k, 64k, 1m", opt0)
	}
}

// TestRstreamUsage: bad options are usage errors naming the valid values.
func TestRstreamUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rstream", "-T", "f"}, "-T f: fork is not supported"},
		{[]string{"rstream", "-T", "x"}, `-T "x": s|sockets, a|async, b|blocking, n|nonblocking, r|resolve or v|verify`},
		{[]string{"rstream", "-S", "0"}, `-S "0": a transfer size in bytes (1 or more) or all`},
		{[]string{"rstream", "-f", "gid"}, "-f gid: AF_IB addresses are not supported"},
		{[]string{"rstream", "-p", "0"}, `-p "0": a port number 1-65535`},
		{[]string{"rstream", "-B", "100"}, "-B 100: a buffer size of 2048 to"},
		{[]string{"rstream", "-i", "300"}, "-i 300: the inline size should be between 0 and 256 bytes"},
		{[]string{"rstream", "-C", "0"}, "-C 0: the transfer count should be between 1 and 2147483647"},
		{[]string{"rcopy", "onlyone"}, "rcopy takes no arguments (server) or a source file and server[:destination] (client), not 1"},
		{[]string{"rcopy", "-p", "x"}, `-p "x": a port number 1-65535`},
	} {
		wantRun(t, dir, exitUsage, []string{tc.want}, tc.args...)
	}
}

func TestSplitRcopyDest(t *testing.T) {
	for _, tc := range []struct{ arg, host, file string }{
		{"192.0.2.1", "192.0.2.1", "src"},
		{"192.0.2.1:/tmp/x", "192.0.2.1", "/tmp/x"},
		{"host:", "host", "src"},
		{"[fd00::1]:/tmp/y", "fd00::1", "/tmp/y"},
		{"[fd00::1]", "fd00::1", "src"},
	} {
		if h, f := splitRcopyDest(tc.arg, "src"); h != tc.host || f != tc.file {
			t.Errorf("splitRcopyDest(%q) = %q, %q; want %q, %q", tc.arg, h, f, tc.host, tc.file)
		}
	}
}

var rstreamLineRE = regexp.MustCompile(`(?m)^custom    (\S+) +(\S+) +(\S+) +(\S+) +\d+\.\d\ds +\d+\.\d\d +\d+\.\d\d$`)

// TestRstreamVeth: roce rstream against itself between two network
// namespaces, rsockets and TCP (-T s), with -T v; then roce rcopy of a
// 1 MiB file; then a server waiting for a connection ends on SIGTERM.
func TestRstreamVeth(t *testing.T) {
	a, b, dir, bin := pingHosts(t, "", "")
	for _, tc := range []struct {
		args []string
		line []string // bytes, xfers, iters, total
	}{
		{[]string{"-S", "65536", "-C", "100", "-T", "v"}, []string{"64k", "100", "1", "12m"}},
		{[]string{"-S", "100", "-C", "1", "-I", "300", "-T", "v"}, []string{"100", "1", "300", "58k"}},
		{[]string{"-S", "3000000", "-C", "3", "-T", "v", "-B", "4096"}, []string{"2.8m", "3", "1", "17m"}},
		{[]string{"-S", "65536", "-C", "50", "-T", "s", "-T", "v"}, []string{"64k", "50", "1", "6.2m"}},
	} {
		srv := startRoce(t, b, dir, bin, "rstream", append([]string{"-b", b.IPv4.String()}, tc.args...)...)
		var cli *proc
		for try := 0; try < 50; try++ { // until the server listens
			cli = startRoce(t, a, dir, bin, "rstream", append([]string{"-s", b.IPv4.String()}, tc.args...)...)
			if code := cli.exitWithin(t, 2*time.Minute); code == 0 || !strings.Contains(cli.stderr.String(), "REJECTED") && !strings.Contains(cli.stderr.String(), "refused") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		for name, p := range map[string]*proc{"client": cli, "server": srv} {
			if code := p.exitWithin(t, 2*time.Minute); code != 0 {
				t.Errorf("rstream %v %s: exit %d\n%s%s", tc.args, name, code, p.stdout.String(), p.stderr.String())
				continue
			}
			m := rstreamLineRE.FindStringSubmatch(p.stdout.String())
			if m == nil || strings.Join(m[1:], " ") != strings.Join(tc.line, " ") {
				t.Errorf("rstream %v %s printed\n%s\nwant a custom line of %v", tc.args, name, p.stdout.String(), tc.line)
			}
		}
	}

	src := filepath.Join(t.TempDir(), "src")
	dst := filepath.Join(t.TempDir(), "dst")
	data := make([]byte, 1<<20+5)
	rand.Read(data)
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	srv := startRoce(t, b, dir, bin, "rcopy")
	var cli *proc
	for try := 0; try < 50; try++ {
		cli = startRoce(t, a, dir, bin, "rcopy", src, b.IPv4.String()+":"+dst)
		if code := cli.exitWithin(t, time.Minute); code == 0 || !strings.Contains(cli.stderr.String(), "REJECTED") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := cli.exitWithin(t, time.Second); code != 0 {
		t.Fatalf("rcopy: exit %d\n%s", code, cli.stderr.String())
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the copy: %d bytes, %v; want the %d of the source", len(got), err, len(data))
	}
	if st, err := os.Stat(dst); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("the copy's mode: %v, %v; want the source's 0640", st.Mode(), err)
	}
	if !strings.Contains(cli.stdout.String(), "opening...transferring...closing...done\n1048581 bytes in ") {
		t.Errorf("rcopy printed %q", cli.stdout.String())
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if code := srv.exitWithin(t, 30*time.Second); code != 143 || !strings.HasSuffix(srv.stderr.String(), "roce: rcopy: interrupted by SIGTERM after receiving 1 file\n") {
		t.Errorf("rcopy server after SIGTERM: exit %d, want 143 and what it did\n%s", code, srv.stderr.String())
	}
	if want := "waiting for connection...client: " + a.IPv4.String() + "\nopening: " + dst + ", transferring...1048581 bytes...closing...done\nwaiting for connection..."; !strings.Contains(srv.stdout.String(), want) {
		t.Errorf("rcopy server printed %q, want %q", srv.stdout.String(), want)
	}

	// A server (of the default tests, two connections) ends on SIGTERM
	// while it waits.
	// Once its device answers on the control socket the process is past
	// its start, signal handling included (a fixed 300 ms was not, on a
	// loaded CI machine: SIGTERM's default action killed it).
	srv = startRoce(t, b, dir, bin, "rstream")
	waitRunning(t, dir, "rxeB")
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if code := srv.exitWithin(t, 30*time.Second); code != 143 || !strings.HasSuffix(srv.stderr.String(), "roce: rstream: interrupted by SIGTERM after 0 tests\n") {
		t.Errorf("rstream server after SIGTERM: exit %d, want 143 and the interruption reported\n%s", code, srv.stderr.String())
	}
}
