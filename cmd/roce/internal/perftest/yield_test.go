package perftest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestBusyPollYields checks when the busy-polling loops give up their P:
// waitCQ, on an empty CQ, polls exactly 1024 times before it first looks
// at its deadline (here one already past), and yields after each of those
// polls but the last when the run's pollers take every P, and never when
// a P is left over (every spinYield polls: runtime.Gosched wakes an idle
// P's thread, which made one poller keep two CPUs busy, issue 15).
func TestBusyPollYields(t *testing.T) {
	pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	cq := pair.A.CQ
	var yields int
	prev := gosched
	gosched = func() { yields++; runtime.Gosched() }
	defer func() { gosched = prev }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		name   string
		procs  int
		cfg    Config
		yields int
	}{
		{"one P, one QP", 1, Config{Verb: Write}, 1023},
		{"two Ps, one QP", 2, Config{Verb: Write}, 0},
		{"two Ps, two QPs", 2, Config{Verb: Write, NumQPs: 2}, 1023},
		{"two Ps, send -b", 2, Config{Verb: Send, Bidirectional: true}, 1023},
		{"two Ps, write -b", 2, Config{Verb: Write, Bidirectional: true}, 0},
		{"four Ps, three QPs", 4, Config{Verb: Read, NumQPs: 3}, 0},
		{"one P, latency", 1, Config{Verb: Send, Lat: true}, 1023},
		{"two Ps, latency", 2, Config{Verb: Send, Lat: true}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(c.procs)
			p, err := c.cfg.resolve()
			if err != nil {
				t.Fatal(err)
			}
			yields = 0
			n, err := p.waitCQ(context.Background(), cq, make([]verbs.WC, 4), time.Now().Add(-time.Second))
			if n != 0 || err != nil {
				t.Fatalf("waitCQ on an empty CQ: %d, %v", n, err)
			}
			if yields != c.yields {
				t.Errorf("%d yields in 1024 empty polls, want %d", yields, c.yields)
			}
			// Past the first 1024 polls, the same rhythm: spinYield polls
			// per yield with a P left over, one per poll without.
			y := p.newYielder()
			yields = 0
			for range 4 * spinYield {
				y.spin()
			}
			want := 4
			if c.yields != 0 {
				want = 4 * spinYield
			}
			if yields != want {
				t.Errorf("%d yields in %d spins, want %d", yields, 4*spinYield, want)
			}
		})
	}
}
