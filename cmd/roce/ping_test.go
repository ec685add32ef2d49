package main

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
)

// TestPingObserved: while a persistent roce ping server runs, roce res show
// cm_id (another process, through the owner's control socket) lists its
// listening CM ID, and after a client's pings the owner's counters hold the
// CM events of the connection.
func TestPingObserved(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "")
	srv := startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String(), "-P")
	var out string
	for i := 0; i < 100; i++ {
		_, out, _ = roceAt(t, dir, "res", "show", "cm_id", "rxeB")
		if strings.Contains(out, "LISTEN") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("roce res show cm_id rxeB:\n%s", out)
	if !strings.Contains(out, "LISTEN") || !strings.Contains(out, "ps TCP") || !strings.Contains(out, b.IPv4.String()+":7174") {
		t.Errorf("roce res show cm_id rxeB while the server listens:\n%s", out)
	}
	cli, code := clientPing(t, a, dir, roceBin, time.Minute, "-c", "-a", b.IPv4.String(), "-C", "2", "-V")
	if code != 0 {
		t.Fatalf("client: exit %d\n%s", code, cli.stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rep *host.CounterReport
	var err error
	for i := 0; i < 50; i++ { // the DISCONNECTED event may trail the client's exit
		rep, err = host.NewRegistry(dir).Counters(ctx, "rxeB")
		if err == nil && rep.CMEvents["RDMA_CM_EVENT_DISCONNECTED"] > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
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
