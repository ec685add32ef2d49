package perftest

import (
	"math"
	"testing"
	"time"
)

// TestBWPeak checks bwReport's peak, perftest's search over posted and
// completed stamps, on stamps worked out by hand: 4 messages posted 10 ns
// apart, a CQE every 2 (completions of the 2nd at 100 ns and the 4th at
// 130 ns); the best is the 4 messages from the first post to the last
// completion, 130/4 = 32.5 ns each.
func TestBWPeak(t *testing.T) {
	p, err := Config{Verb: Write, Size: 65536, CQMod: 2, TxDepth: 4}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	base := time.Unix(1000, 0)
	at := func(ns int) time.Time { return base.Add(time.Duration(ns)) }
	s := &bwSamples{start: at(0), end: at(130), iters: 4,
		posted:    []time.Time{at(0), at(10), at(20), at(30)},
		completed: []time.Time{{}, at(100), {}, at(130)}}
	r := p.bwReport(65536, s)
	if want := 65536 * 1e9 / (32.5 * 0x100000); math.Abs(r.BWPeak-want) > 1e-9*want {
		t.Errorf("peak %v MB/sec, want %v", r.BWPeak, want)
	}
	if want := 4 * 65536 * 1e9 / (130.0 * 0x100000); math.Abs(r.BWAvg-want) > 1e-9*want {
		t.Errorf("average %v MB/sec, want %v", r.BWAvg, want)
	}
}
