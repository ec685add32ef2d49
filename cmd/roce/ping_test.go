package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/testenv"
)

// TestPingObserved: while a persistent roce ping server runs, roce res show
// cm_id (another process, through the owner's control socket) lists its
// listening CM ID, and after a client's pings the owner's counters hold the
// CM events of the connection.
func TestPingObserved(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "")
	srv := startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String(), "-P")
	var out string
	testenv.Poll(testenv.Slow, func() bool {
		_, out, _ = roceAt(t, dir, "res", "show", "cm_id", "rxeB")
		return strings.Contains(out, "LISTEN")
	})
	t.Logf("roce res show cm_id rxeB:\n%s", out)
	if !strings.Contains(out, "LISTEN") || !strings.Contains(out, "ps TCP") || !strings.Contains(out, b.IPv4.String()+":7174") {
		t.Errorf("roce res show cm_id rxeB while the server listens:\n%s", out)
	}
	cli, code := clientPing(t, a, dir, roceBin, time.Minute, "-c", "-a", b.IPv4.String(), "-C", "2", "-V")
	if code != 0 {
		t.Fatalf("client: exit %d\n%s", code, cli.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	var rep *host.CounterReport
	var err error
	testenv.Poll(testenv.Slow, func() bool { // the DISCONNECTED event may trail the client's exit
		rep, err = host.NewRegistry(dir).Counters(ctx, "rxeB")
		return err == nil && rep.CMEvents["RDMA_CM_EVENT_DISCONNECTED"] > 0
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []string{"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED"} {
		if rep.CMEvents[ev] == 0 {
			t.Errorf("server's CM events %v lack %s", rep.CMEvents, ev)
		}
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.wait(t, 30*time.Second)
}
