package verbs

// The congestion window's rules (cwnd.go), driven with explicit times: no
// clock, no timing assert.

import (
	"testing"
	"testing/synctest"
	"time"
)

// cat is a time d after an arbitrary start, on monoNow's clock.
func cat(d time.Duration) int64 { return 1<<62 + int64(d) }

const ms = time.Millisecond

// TestCwndSlowStart: a new QP's window is initialCwnd; below ssthresh each
// PSN acknowledged adds one (doubling per round trip), up to
// maxUnackedPSNs and never past it.
func TestCwndSlowStart(t *testing.T) {
	var c cwnd
	if c.size() != initialCwnd {
		t.Fatalf("new window %d, want initialCwnd %d", c.size(), initialCwnd)
	}
	c.acked(initialCwnd)
	if c.size() != 2*initialCwnd {
		t.Errorf("a window's worth acknowledged: window %d, want %d", c.size(), 2*initialCwnd)
	}
	for range 100 {
		c.acked(c.size())
	}
	if c.size() != maxUnackedPSNs {
		t.Errorf("after many round trips: window %d, want maxUnackedPSNs %d", c.size(), maxUnackedPSNs)
	}
	c.acked(0)
	c.acked(-5)
	if c.size() != maxUnackedPSNs {
		t.Errorf("nothing acknowledged changed the window to %d", c.size())
	}
}

// TestCwndDelayCut: the base is the smallest sample; a sample above base +
// max(base, headroom) cuts by Swift's rule (1 − β·(rtt − target)/rtt, at most
// by half) and stops growth; a sample of a packet sent before that cut does
// not cut again; one sent after it does; a sample under the target lets the
// window grow again, additively (ssthresh followed the cut down).
func TestCwndDelayCut(t *testing.T) {
	const head = 10 * ms
	c := cwnd{n: 400}
	if c.sampled(1*ms, cat(0), cat(1*ms), head) || c.size() != 400 {
		t.Fatalf("a first sample cut the window to %d", c.size())
	}
	if c.minRTT != 1*ms || c.target(head) != 11*ms {
		t.Fatalf("base %v, target %v; want 1ms, 11ms", c.minRTT, c.target(head))
	}
	// 12 ms: 1 ms over the target: f = 1 − 0.8·1/12.
	if !c.sampled(12*ms, cat(2*ms), cat(14*ms), head) {
		t.Fatal("a sample 1 ms over the target did not cut")
	}
	if want := 373; /* int(400 · (1 − 0.8/12)) */ c.size() != want || c.thresh() != want {
		t.Errorf("window %d, ssthresh %d after a mild excess; want both %d", c.size(), c.thresh(), want)
	}
	n := c.size()
	c.acked(100)
	if c.size() != n {
		t.Errorf("the window grew to %d while the last round trip was over the target", c.size())
	}
	// Sent at 10 ms, before the cut at 14 ms: the old queue, no new cut.
	if c.sampled(100*ms, cat(10*ms), cat(110*ms), head) || c.size() != n {
		t.Errorf("a sample of a packet sent before the cut cut again: window %d, want %d", c.size(), n)
	}
	// Sent after the cut, 100 ms: far over, the cut is capped at half.
	if !c.sampled(100*ms, cat(15*ms), cat(115*ms), head) || c.size() != n/2 {
		t.Errorf("window %d after a large excess; want half of %d", c.size(), n)
	}
	// Down to the floor and no further.
	for i := range 20 {
		sent := time.Duration(200+100*i) * ms // after the last cut
		c.sampled(100*ms, cat(sent), cat(sent+100*ms), head)
	}
	if c.size() != cwndFloor {
		t.Errorf("window %d after many cuts; want the floor %d", c.size(), cwndFloor)
	}
	cuts := c.cuts
	// Under the target again: growth resumes, cwndAI per window's worth.
	if c.sampled(5*ms, cat(9000*ms), cat(9005*ms), head) {
		t.Error("a sample under the target cut")
	}
	c.acked(cwndFloor - 1)
	if c.size() != cwndFloor {
		t.Errorf("window %d before a window's worth was acknowledged", c.size())
	}
	c.acked(1)
	if c.size() != cwndFloor+cwndAI || c.cuts != cuts {
		t.Errorf("window %d (cuts %d) after a window's worth; want %d (%d)", c.size(), c.cuts, cwndFloor+cwndAI, cuts)
	}
}

// TestCwndLongBase: a path whose base round trip is longer than the headroom
// may double it before the window backs off.
func TestCwndLongBase(t *testing.T) {
	c := cwnd{n: 512}
	c.sampled(40*ms, cat(0), cat(40*ms), 5*ms)
	if c.sampled(79*ms, cat(50*ms), cat(129*ms), 5*ms) {
		t.Error("79 ms on a 40 ms path cut the window")
	}
	if !c.sampled(81*ms, cat(130*ms), cat(211*ms), 5*ms) {
		t.Error("81 ms on a 40 ms path did not cut the window")
	}
}

// TestCwndTimeout: a timeout cuts the window to the floor, whatever the
// round trips said, and slow start climbs back to the window it had; past
// it the growth is additive.
func TestCwndTimeout(t *testing.T) {
	c := cwnd{n: 300, over: true}
	c.timedOut(cat(0))
	if c.size() != cwndFloor || c.thresh() != 300 || c.over {
		t.Fatalf("after a timeout: window %d, ssthresh %d, over %v; want %d, 300, false", c.size(), c.thresh(), c.over, cwndFloor)
	}
	for c.size() < 300 {
		c.acked(c.size())
	}
	if c.size() != 300 {
		t.Errorf("slow start went past ssthresh to %d", c.size())
	}
	c.acked(299)
	if c.size() != 300 {
		t.Errorf("window %d before a window's worth past ssthresh", c.size())
	}
	c.acked(1)
	if c.size() != 300+cwndAI {
		t.Errorf("window %d past ssthresh; want %d", c.size(), 300+cwndAI)
	}
	// A timeout of a window at the floor keeps the floor as ssthresh.
	c = cwnd{n: cwndFloor}
	c.timedOut(cat(0))
	if c.size() != cwndFloor || c.thresh() != cwndFloor {
		t.Errorf("timeout at the floor: window %d, ssthresh %d", c.size(), c.thresh())
	}
}

// TestCwndLoss: a NAK's retry halves the window (not below the floor), and
// ssthresh follows it.
func TestCwndLoss(t *testing.T) {
	c := cwnd{n: 200}
	c.lost(cat(0))
	if c.size() != 100 || c.thresh() != 100 {
		t.Errorf("after a loss: window %d, ssthresh %d; want 100, 100", c.size(), c.thresh())
	}
	c = cwnd{n: cwndFloor + 2}
	c.lost(cat(0))
	if c.size() != cwndFloor {
		t.Errorf("a loss took the window to %d, below the floor %d", c.size(), cwndFloor)
	}
}

// TestDelayHeadroom: half the ACK timeout in force (the attribute, or four
// smoothed round trips when longer), or the default when it is infinite.
func TestDelayHeadroom(t *testing.T) {
	q := &QP{}
	q.attr.Timeout = 14
	if got, want := q.delayHeadroom(), TimeoutDuration(14)/2; got != want {
		t.Errorf("timeout 14: headroom %v, want %v", got, want)
	}
	q.comp.srtt = 50 * ms
	if got, want := q.delayHeadroom(), 100*ms; got != want {
		t.Errorf("timeout 14, SRTT 50 ms: headroom %v, want %v", got, want)
	}
	q.attr.Timeout = 0
	if got := q.delayHeadroom(); got != defaultDelayHeadroom {
		t.Errorf("timeout 0: headroom %v, want %v", got, defaultDelayHeadroom)
	}
}

// TestCwndSpuriousTimeout: an ACK of a PSN the retry has not resent gives
// the timeout's cut back (once); an ACK of resent PSNs does not; after the
// retry resent everything, the cut stands; a NAK's loss forgets it.
func TestCwndSpuriousTimeout(t *testing.T) {
	q := &QP{}
	q.req.win = cwnd{n: 300}
	q.req.sentAny, q.req.maxSent = true, 0x1000+299
	q.comp.psn = 0x1000
	q.req.win.timedOut(cat(0))
	q.req.psn = 0x1000 + cwndFloor // the retry resent the floor's worth
	q.checkSpurious(0x1000 + 3)    // resent: ambiguous
	if q.req.win.size() != cwndFloor || q.req.win.undo != 300 {
		t.Fatalf("an ACK of a resent PSN: window %d, undo %d; want %d, 300", q.req.win.size(), q.req.win.undo, cwndFloor)
	}
	q.checkSpurious(0x1000 + 40) // never resent: the original arrived
	if q.req.win.size() != 300 || q.req.win.undo != 0 || q.req.win.undone != 1 {
		t.Fatalf("an ACK of a PSN not resent: window %d, undo %d, undone %d; want 300, 0, 1", q.req.win.size(), q.req.win.undo, q.req.win.undone)
	}
	q.checkSpurious(0x1000 + 50)
	if q.req.win.undone != 1 {
		t.Error("a second ACK undid again")
	}

	// The retry resent all: the cut stands.
	q.req.win = cwnd{n: 300}
	q.req.win.timedOut(cat(0))
	q.req.psn = q.req.maxSent.Next()
	q.checkSpurious(q.req.maxSent)
	if q.req.win.size() != cwndFloor || q.req.win.undo != 0 {
		t.Errorf("after the retry resent everything: window %d, undo %d; want %d, 0", q.req.win.size(), q.req.win.undo, cwndFloor)
	}

	// A loss after the timeout: the cut stands.
	q.req.win = cwnd{n: 300}
	q.req.win.timedOut(cat(0))
	q.req.win.lost(cat(ms))
	q.req.psn = 0x1000
	q.checkSpurious(0x1000 + 100)
	if q.req.win.size() != cwndFloor || q.req.win.undone != 0 {
		t.Errorf("a loss after the timeout: window %d, undone %d; want %d, 0", q.req.win.size(), q.req.win.undone, cwndFloor)
	}
}

// TestRetransTimeoutVariance: the timer follows RFC 6298 — the first
// sample sets SRTT to it and RTTVAR to half of it; later ones move RTTVAR
// by a quarter of the deviation from the old SRTT and SRTT by an eighth —
// and waits the longest of the attribute, 4 × SRTT and SRTT + 4 × RTTVAR:
// round trips that swing (a peer scheduled late) lengthen it past 4 × SRTT.
func TestRetransTimeoutVariance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &QP{}
		q.attr.Timeout = 14 // 67 ms
		sample := func(r time.Duration) {
			q.comp.rttPSN, q.comp.rttSent, q.comp.rttValid = 10, monoNow()-int64(r), true
			q.comp.psn = 11
			q.sampleAcked()
		}
		sample(8 * ms)
		if q.comp.srtt != 8*ms || q.comp.rttvar != 4*ms || q.retransTimeout() != TimeoutDuration(14) {
			t.Fatalf("first sample 8 ms: SRTT %v, RTTVAR %v, timeout %v; want 8ms, 4ms, the attribute's %v",
				q.comp.srtt, q.comp.rttvar, q.retransTimeout(), TimeoutDuration(14))
		}
		sample(200 * ms) // a stall: deviation 192 ms
		wantVar, wantSRTT := (3*4*ms+192*ms)/4, (7*8*ms+200*ms)/8
		if q.comp.rttvar != wantVar || q.comp.srtt != wantSRTT {
			t.Fatalf("after 200 ms: SRTT %v, RTTVAR %v; want %v, %v", q.comp.srtt, q.comp.rttvar, wantSRTT, wantVar)
		}
		if got, want := q.retransTimeout(), wantSRTT+4*wantVar; got != want || want <= 4*wantSRTT {
			t.Errorf("timeout %v, want SRTT + 4 × RTTVAR = %v (4 × SRTT is %v)", got, want, 4*wantSRTT)
		}
	})
}

// TestMonoNowInBubble: the engine's clock (monoNow) stays positive inside
// a testing/synctest bubble, whose fake clock starts in 2000, before the
// process's epoch, and moves with it: the retransmit timer's fireAt of 0
// means "not set".
func TestMonoNowInBubble(t *testing.T) {
	outside := monoNow()
	synctest.Test(t, func(t *testing.T) {
		a := monoNow()
		time.Sleep(time.Second)
		b := monoNow()
		if a <= 0 || time.Duration(b-a) != time.Second {
			t.Errorf("in a bubble: %d, then %d a second later (outside: %d)", a, b, outside)
		}
	})
}
