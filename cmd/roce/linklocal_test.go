package main

import (
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// TestLinkLocalGID: two RoCE v2 devices talk over their link-local GIDs
// (fe80::/10, index 0 of a roce-versions v2 port, which perftest's --ipv6
// picks by default): a link-local address means nothing without the
// interface, so the link must send out of its own netdev.
func TestLinkLocalGID(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "v2", "v2")
	srv := startRoce(t, b, dir, roceBin, "pingpong", "-d", "rxeB", "-g", "0", "-n", "20")
	var cli *proc
	var code int
	testenv.Poll(testenv.Slow, func() bool { // until the server listens
		cli = startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxeA", "-g", "0", "-n", "20", b.IPv4.String())
		code = cli.exitWithin(t, time.Minute)
		return code == 0 || !strings.Contains(cli.stderr.String(), "connect")
	})
	if code != 0 {
		t.Fatalf("client over link-local GIDs: exit %d\nstdout: %s\nstderr: %s", code, cli.stdout.String(), cli.stderr.String())
	}
	if !strings.Contains(cli.stdout.String(), "GID fe80::") {
		t.Errorf("client did not use a link-local GID:\n%s", cli.stdout.String())
	}
	if code := srv.exitWithin(t, time.Minute); code != 0 {
		t.Errorf("server: exit %d\n%s", code, srv.stderr.String())
	}
}
