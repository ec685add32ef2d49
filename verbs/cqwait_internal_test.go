package verbs

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// TestCQWaitWakes: push skips the notify channel while no goroutine is in
// Wait (cq.go's waiters), so a completion pushed at any moment of a Wait —
// before it counts itself, between its look and its sleep, while it sleeps
// — must still wake it. Each round races one push against one Wait; a lost
// wakeup leaves Wait to its deadline. The pushes in between, with nobody
// waiting, must not leave a token that wakes a later Wait with nothing to
// poll either way (Wait looks again; it does not return on a stale token).
func TestCQWaitWakes(t *testing.T) {
	d, err := openDevice(DeviceConfig{Name: "cqwait0", Link: &fuzzLink{closed: make(chan struct{})}, ActiveMTU: MTU1024,
		GIDs: []GIDEntry{{GID: netip.MustParseAddr("::ffff:192.0.2.1"), Type: GIDTypeRoCEv2}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	wc := make([]WC, 4)
	for round := range 3000 {
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- cq.Wait(ctx)
		}()
		for range round % 4 {
			runtime.Gosched()
		}
		if !cq.push(WC{WRID: uint64(round)}) {
			t.Fatal("push refused")
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: Wait: %v (a lost wakeup)", round, err)
		}
		if n, err := cq.poll(wc); n != 1 || err != nil || wc[0].WRID != uint64(round) {
			t.Fatalf("round %d: poll: %d, %v", round, n, err)
		}
	}
	// Nobody waits: the pushes leave no token; a Wait then sleeps until
	// the next push.
	for i := range 3 {
		cq.push(WC{WRID: uint64(i)})
	}
	if n, _ := cq.poll(wc); n != 3 {
		t.Fatalf("polled %d of 3", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := cq.Wait(ctx); err != context.DeadlineExceeded {
		t.Fatalf("Wait on an empty CQ: %v, want the deadline", err)
	}
}
