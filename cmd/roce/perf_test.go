package main

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
)

func TestPerfUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"perf"},
		{"perf", "write", "-n", "2"},
		{"perf", "atomic", "-s", "64"},
		{"perf", "read", "-R", "-n", "1"},
		{"perf", "send", "--lat", "-q", "2"},
		{"perf", "write", "-m", "1000"},
		{"perf", "write", "a", "b"},
	} {
		if code, _, stderr := roceAt(t, dir, args...); code != exitUsage {
			t.Errorf("roce %s: exit %d, want %d: %s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
}

// TestPerfOverVeth runs roce perf as server and client in two network
// namespaces joined by a veth pair, on devices made by roce link add,
// for every test: both exit 0 and print perftest's table.
func TestPerfOverVeth(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	for _, l := range []struct {
		h            *nettest.Host
		name, netdev string
	}{{ha, "rxe0", "veth0"}, {hb, "rxe1", "veth1"}} {
		if code, _, stderr := roceIn(t, l.h, dir, "link", "add", l.name, "type", "rxe", "netdev", l.netdev, "roce-versions", "v2"); code != 0 {
			t.Fatalf("link add %s: exit %d: %s", l.name, code, stderr)
		}
	}
	cases := [][]string{
		{"write", "-s", "4096", "-n", "50"},
		{"read", "-s", "4096", "-n", "50", "-q", "2"},
		{"send", "-s", "2048", "-n", "50"},
		{"atomic", "-n", "50", "--report_gbits"},
		{"atomic", "-A", "CMP_AND_SWAP", "-n", "20"},
		{"write", "--lat", "-s", "64", "-n", "50"},
		{"read", "--lat", "-s", "64", "-n", "50"},
		{"send", "--lat", "-s", "64", "-n", "50"},
		{"atomic", "--lat", "-n", "50"},
		{"write", "-s", "65536", "-D", "2", "-q", "2"},
		// -R: the exchange and the QPs through RDMA CM.
		{"write", "-R", "-s", "4096", "-n", "50"},
		{"read", "-R", "-s", "4096", "-n", "50", "-q", "2"},
		{"send", "-R", "-s", "2048", "-n", "50"},
		{"write", "-R", "--lat", "-s", "64", "-n", "50"},
		{"read", "-R", "--lat", "-s", "64", "-n", "50"},
		{"send", "-R", "--lat", "-s", "64", "-n", "50"},
		// IPv6: the global IPv6 GID (-x 2, after the link-local and the
		// IPv4 GID), the exchange (TCP, or RDMA CM with -R) to the
		// server's IPv6 address.
		{"write", "--ipv6", "-x", "2", "-s", "4096", "-n", "50"},
		{"send", "--ipv6", "-x", "2", "--lat", "-s", "64", "-n", "50"},
		{"write", "-R", "--ipv6", "-s", "4096", "-n", "50"},
		{"read", "-R", "--ipv6", "--lat", "-s", "64", "-n", "50"},
		{"atomic", "-R", "-n", "50"},
	}
	for i, args := range cases {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			port := strconv.Itoa(18600 + i)
			sargs := append([]string{"perf"}, append(args, "-d", "rxe0", "-p", port)...)
			server := ha.IPv4.String()
			if slices.Contains(args, "--ipv6") {
				server = ha.IPv6.String()
			}
			cargs := append([]string{"perf"}, append(args, "-d", "rxe1", "-p", port, server)...)
			type ret struct {
				code           int
				stdout, stderr string
			}
			sc := make(chan ret, 1)
			listening := make(chan struct{})
			go func() {
				// In this process, so that the client starts once the
				// server says it waits: an RDMA CM request the server's
				// device is not yet open for is only sent again after
				// 4.3 s.
				var r ret
				out := &signalWriter{on: "Waiting for client to connect", ch: listening}
				var errb bytes.Buffer
				if err := ha.Do(func() error {
					r.code = run(append([]string{"--rundir", dir}, sargs...), out, &errb)
					return nil
				}); err != nil {
					r.code, r.stderr = -1, err.Error()
				}
				r.stdout, r.stderr = out.String(), r.stderr+errb.String()
				sc <- r
			}()
			var c ret
			var s ret
			select {
			case <-listening:
			case s = <-sc:
				t.Fatalf("server exit %d: %s\n%s", s.code, s.stderr, s.stdout)
			}
			for try := 0; try < 50; try++ {
				c.code, c.stdout, c.stderr = roceIn(t, hb, dir, cargs...)
				if c.code == 0 || !strings.Contains(c.stderr, "Couldn't connect") && !strings.Contains(c.stderr, "Unable to perform rdma_client function") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case s = <-sc:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the server has not exited 2 minutes after the client (exit %d: %s\n%s)", c.code, c.stderr, c.stdout)
			}
			if c.code != 0 || s.code != 0 {
				t.Fatalf("client exit %d: %s\n%s\nserver exit %d: %s\n%s", c.code, c.stderr, c.stdout, s.code, s.stderr, s.stdout)
			}
			lat := strings.Contains(strings.Join(args, " "), "--lat")
			dur := strings.Contains(strings.Join(args, " "), "-D")
			checkPerfTable(t, "client", c.stdout, lat, dur)
			if slices.Contains(args, "-R") {
				for who, out := range map[string]string{"client": c.stdout, "server": s.stdout} {
					if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm") {
						t.Errorf("%s: the banner does not say rdma_cm:\n%s", who, out)
					}
				}
			}
			if !(lat && (args[0] == "read" || args[0] == "atomic")) {
				checkPerfTable(t, "server", s.stdout, lat, dur)
			}
			if dur && !strings.Contains(c.stderr, "roce perf:   1 s of 2 s: ") {
				t.Errorf("no progress line on the client's stderr: %q", c.stderr)
			}
			t.Logf("server:\n%s%sclient:\n%s%s", s.stdout, s.stderr, c.stdout, c.stderr)
		})
	}
}

// signalWriter collects output and closes ch once it contains on.
type signalWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	on   string
	ch   chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if !w.done && strings.Contains(w.b.String(), w.on) {
		w.done = true
		close(w.ch)
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// checkPerfTable finds perftest's result header and checks the row under
// it has the right number of numeric columns, with a positive result.
func checkPerfTable(t *testing.T, who, out string, lat, dur bool) {
	t.Helper()
	if !strings.Contains(out, " Link type       : Ethernet\n") || !strings.Contains(out, " remote address: LID 0000 QPN 0x") {
		t.Errorf("%s: no banner or addresses:\n%s", who, out)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, " #bytes") || i+1 >= len(lines) {
			continue
		}
		f := strings.Fields(lines[i+1])
		want, col := 5, 3
		if lat {
			want, col = 9, 4
		}
		if lat && dur {
			want, col = 4, 2
		}
		if len(f) != want {
			t.Fatalf("%s: row %q: %d columns, want %d", who, lines[i+1], len(f), want)
		}
		v, err := strconv.ParseFloat(f[col], 64)
		if err != nil || !(v > 0) {
			t.Errorf("%s: row %q: column %d is %q", who, lines[i+1], col, f[col])
		}
		return
	}
	t.Errorf("%s: no result table:\n%s", who, out)
}
