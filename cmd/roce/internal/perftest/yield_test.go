package perftest

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestBusyPollYields checks when the busy-polling loop gives up its P:
// waitCQ, on an empty CQ, polls exactly 1024 times before it first looks
// at its deadline (here one already past), and yields after each of those
// polls but the last while the process's busy polls hold every P, and
// never while a P is left over (then every spinYield polls:
// runtime.Gosched wakes an idle P's thread, which made one poller keep
// two CPUs busy, issue 15). Other busy polls of the process (other QPs'
// goroutines, the other side of a test) are stood for by counting them in
// spinners. The latency tests yield after every poll whatever the Ps, but
// with one P every loop yields every busypoll.OnePYield polls.
func TestBusyPollYields(t *testing.T) {
	pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	cq := pair.A.CQ
	bw, err := Config{Verb: Write}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	lat, err := Config{Verb: Send, Lat: true}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	var yields int
	prev := gosched
	gosched = func() { yields++; runtime.Gosched() }
	defer func() { gosched = prev }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	if n := spinners.Load(); n != 0 {
		t.Fatalf("%d busy polls before the test", n)
	}
	for _, c := range []struct {
		name   string
		procs  int
		others int32 // other busy polls in the process
		lat    bool
		yields int
	}{
		{"one P", 1, 0, false, 1023 / busypoll.OnePYield},
		{"one P, latency", 1, 0, true, 1023 / busypoll.OnePYield},
		{"one P, two polls", 1, 1, false, 1023 / busypoll.OnePYield},
		{"two Ps, one poll", 2, 0, false, 0},
		{"two Ps, two polls", 2, 1, false, 1023},
		{"four Ps, three polls", 4, 2, false, 0},
		{"four Ps, five polls", 4, 4, false, 1023},
		{"two Ps, one poll, latency", 2, 0, true, 1023},
	} {
		t.Run(c.name, func(t *testing.T) {
			runtime.GOMAXPROCS(c.procs)
			spinners.Add(c.others)
			defer spinners.Add(-c.others)
			p := bw
			if c.lat {
				p = lat
			}
			yields = 0
			n, err := p.waitCQ(context.Background(), cq, make([]verbs.WC, 4), time.Now().Add(-time.Second))
			if n != 0 || err != nil {
				t.Fatalf("waitCQ on an empty CQ: %d, %v", n, err)
			}
			if yields != c.yields {
				t.Errorf("%d yields in 1024 empty polls, want %d", yields, c.yields)
			}
			if n := spinners.Load(); n != c.others {
				t.Errorf("%d busy polls counted after waitCQ returned, want %d", n, c.others)
			}
			// Past the first 1024 polls, the same rhythm: spinYield polls
			// per yield with a P left over, one per poll without.
			y := newYielder(c.lat)
			yields = 0
			for range 4 * spinYield {
				y.spin()
			}
			y.done()
			want := 4 // every spinYield polls
			switch {
			case c.procs == 1:
				want = 4 * spinYield / busypoll.OnePYield
			case c.yields != 0:
				want = 4 * spinYield // every poll
			}
			if yields != want {
				t.Errorf("%d yields in %d spins, want %d", yields, 4*spinYield, want)
			}
		})
	}
}
