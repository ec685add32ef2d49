package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProfileEnv: GOROCE_CPUPROFILE and GOROCE_TRACE make any command
// write a CPU profile (gzip, as runtime/pprof writes it) and an execution
// trace (its "go 1.N trace" header) of its run; an unwritable file is
// reported on stderr and the command still runs.
func TestProfileEnv(t *testing.T) {
	dir := t.TempDir()
	prof, tr := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "exec.trace")
	t.Setenv(envCPUProfile, prof)
	t.Setenv(envTrace, tr)
	if code, stdout, stderr := roce(t, "--version"); code != 0 || stderr != "" || stdout == "" {
		t.Fatalf("roce --version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if b, err := os.ReadFile(prof); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("%s: %v, %d bytes, want a gzipped profile", envCPUProfile, err, len(b))
	}
	if b, err := os.ReadFile(tr); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("%s: %v, %.12q, want an execution trace", envTrace, err, b)
	}
	t.Setenv(envCPUProfile, filepath.Join(dir, "no", "such", "dir", "cpu.prof"))
	t.Setenv(envTrace, "")
	if code, _, stderr := roce(t, "--version"); code != 0 || !bytes.Contains([]byte(stderr), []byte("roce: "+envCPUProfile+": ")) {
		t.Errorf("unwritable profile: exit %d, stderr %q; want 0 and the variable named", code, stderr)
	}
}

// TestStatsEnv: GOROCE_STATS makes a command that opened a device write
// its port counters to the file when it closes it, as roce stat show
// prints them, so that they outlive the process (the lab tests judge rxe's
// duplicates against goroce's retransmissions with them).
func TestStatsEnv(t *testing.T) {
	a, b, dir, exe := pingHosts(t, "v2", "v2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	files := map[string]string{"server": filepath.Join(t.TempDir(), "server.stats"), "client": filepath.Join(t.TempDir(), "client.stats")}
	port := freePort(t)
	t.Setenv(envStats, files["server"])
	srv := startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-g", "1", "-n", "5", "-p", port)
	srv.stdout.waitFor(t, ctx, "local address")
	t.Setenv(envStats, files["client"])
	cli := startIn(t, ctx, a, exe, dir, "pingpong", "-d", "rxeA", "-g", "1", "-n", "5", "-p", port, b.IPv4.String())
	for who, p := range map[string]*proc{"server": srv, "client": cli} {
		if code := p.exitCode(t, ctx); code != 0 {
			t.Fatalf("%s: exit %d: %s", who, code, p.stderr.String())
		}
		c, err := readStatsFile(files[who])
		if err != nil {
			t.Fatal(err)
		}
		// Five SENDs each way and their ACKs: at least ten packets sent.
		if c["sent_pkts"] < 10 || c["rcvd_pkts"] < 10 {
			t.Errorf("%s's %s: sent_pkts %d, rcvd_pkts %d; want at least 10 each", who, envStats, c["sent_pkts"], c["rcvd_pkts"])
		}
		if _, ok := c["retrans_pkts"]; !ok {
			t.Errorf("%s's %s has no retrans_pkts: %v", who, envStats, c)
		}
	}
}

// readStatsFile reads a GOROCE_STATS file: one line, "link DEV/PORT" and
// then counter names and values.
func readStatsFile(name string) (map[string]uint64, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0] != "link" || len(f)%2 != 0 {
		return nil, fmt.Errorf("%s: %q is not a roce stat show line", name, b)
	}
	c := map[string]uint64{}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			continue // not a counter (e.g. a state)
		}
		c[f[i]] = v
	}
	return c, nil
}
