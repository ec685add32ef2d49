package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// readmeBlock returns the lines of the first ```sh block after heading in
// the repository's README.md.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q", heading)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatalf("no sh block after %q", heading)
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	return strings.Split(s[:end], "\n")
}

// TestReadmeWithoutRoot runs the README's "Without root" lines as a user
// without privileges would (nobody: no capabilities, no writable home),
// on host A and, without the peer's address, on host B, the two hosts
// being namespaces joined by a veth whose ends stand for eth0: both sides'
// pingpong exit 0. They once put the runtime directory in $HOME, which
// nobody cannot create (mkdir /nonexistent).
func TestReadmeWithoutRoot(t *testing.T) {
	testenv.Root(t)
	setpriv, err := exec.LookPath("setpriv")
	testenv.Require(t, err == nil, "setpriv (util-linux)")
	lines := readmeBlock(t, "### Without root")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "export GOROCE_RUNDIR=") {
		t.Fatalf("the block is not `export GOROCE_RUNDIR=...`, then the commands: %q", lines)
	}
	env, setup, last := lines[0], lines[1:len(lines)-1], lines[len(lines)-1]
	if !strings.HasSuffix(last, " 198.18.0.2") {
		t.Fatalf("the last line %q does not name B's address", last)
	}

	// roce where nobody can run it: a copy of this binary (go test's
	// build directory is root's alone) behind a script named roce.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.MkdirTemp("", "goroce-readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	os.Chmod(bin, 0o755)
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "roce.test"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\nGOROCE_TEST_ROCE=1 GORACE=atexit_sleep_ms=0 exec %s \"$@\"\n", filepath.Join(bin, "roce.test"))
	if err := os.WriteFile(filepath.Join(bin, "roce"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}

	ha, hb := nettest.VethPair(t, nettest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	asNobody := func(h *nettest.Host, tmp string, sh ...string) *proc {
		src := strings.ReplaceAll(strings.Join(sh, "\n"), " eth0 ", " "+h.Ifname+" ")
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.NSName, setpriv, "--reuid=65534", "--regid=65534",
			"--clear-groups", "--inh-caps=-all", "sh", "-c", src)
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=/nonexistent", "TMPDIR=" + tmp}
		return runProc(t, cmd, os.Kill, nil, nil)
	}
	ran := func(what string, p *proc) {
		t.Helper()
		if code := p.exitCode(t, ctx); code != 0 {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", what, code, p.stdout.String(), p.stderr.String())
		}
	}
	// Each host its own TMPDIR, as two machines have their own /tmp.
	tmps := map[*nettest.Host]string{}
	for _, h := range []*nettest.Host{ha, hb} {
		tmp, err := os.MkdirTemp("", "goroce-readme-tmp-") // where nobody can reach it, unlike t.TempDir's
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(tmp) })
		os.Chmod(tmp, 0o1777)
		tmps[h] = tmp
		ran("setup on "+h.NSName, asNobody(h, tmps[h], append([]string{env}, setup...)...))
	}
	srv := asNobody(hb, tmps[hb], env, strings.TrimSuffix(last, " 198.18.0.2"))
	srv.stdout.waitFor(t, ctx, "local address")
	var cli *proc
	for try := 0; ; try++ {
		cli = asNobody(ha, tmps[ha], env, strings.ReplaceAll(last, "198.18.0.2", hb.IPv4.String()))
		<-cli.done
		if cli.err == nil || !strings.Contains(cli.stderr.String(), "Couldn't connect") || try > 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	ran("client", cli)
	ran("server", srv)
	if !strings.Contains(cli.stdout.String(), "iters in") {
		t.Errorf("client output:\n%s", cli.stdout.String())
	}

	// A device that asks for the ring (AF_PACKET) cannot run without root;
	// the error says so and names the path that can.
	ring := asNobody(ha, tmps[ha], env, "roce link delete rxe0",
		"roce link add rxe0 type rxe netdev eth0 roce-versions v2 rx-path ring",
		strings.ReplaceAll(last, "198.18.0.2", hb.IPv4.String()))
	code := ring.exitCode(t, ctx)
	if stderr := ring.stderr.String(); code == 0 || !strings.Contains(stderr, "operation not permitted") ||
		!strings.Contains(stderr, "device rxe0 receives with rx-path ring, an AF_PACKET socket on "+ha.Ifname+": run as root") ||
		!strings.Contains(stderr, "rx-path socket") {
		t.Errorf("rx-path ring without root: exit %d, stderr %q", code, stderr)
	}
}
