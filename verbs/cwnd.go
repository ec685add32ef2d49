package verbs

// The RC requester's congestion window: how many PSNs it may have
// unacknowledged, per QP, from its own acknowledgements' round trips.

import "time"

// Congestion window parameters. The window is delay-based, in the manner of
// Swift (Kumar et al., SIGCOMM 2020, §3.1–3.2) and TIMELY (Mittal et al.,
// SIGCOMM 2015): the requester times its acknowledged packets (comp.go's
// RTT sample), keeps the smallest round trip it has seen as the path's base,
// and cuts the window multiplicatively when a round trip exceeds a target
// above that base — a queue is building somewhere on the path, most often
// in the peer's receive socket — and grows it otherwise. A timeout cuts it
// to the floor. IBTA leaves the pace of an RC requester to the
// implementation within the limit of outstanding PSNs (§9.7.7); Linux rxe
// has only its fixed RXE_MAX_UNACKED_PSNS (128).
//
// Why: `roce perf write -q 64` kept 512 PSNs in flight on each of 64 QPs, 32
// MiB in the server's packet socket, a queue that drained slower than the
// 67 ms ACK timeout: every QP timed out and resent its window (issue 15,
// BENCHMARKS.md "Many QPs"). Each QP's window depends only on its own
// round trips, so a slow peer slows only the QPs to it; and it is
// independent of the pacer (pace.go) and of DCQCN's rate (dcqcn.go), which
// limit when a packet may go, where the window limits how many may be
// unacknowledged.
const (
	// initialCwnd is a new QP's window (TCP's initial window is 10
	// segments, RFC 6928): small enough that many QPs starting at once
	// do not queue more than an ACK timeout's worth at a peer before the
	// first round trip tells them the queue is there. Slow start grows it
	// to maxUnackedPSNs in a few round trips on a quiet path.
	initialCwnd = 16
	// delayHeadroom is how far above the base round trip the target sits
	// at least: the queueing a QP tolerates before it backs off. It is
	// well under the ACK timeout's usual 67 ms (timeout 14), so a queue
	// the window lets build does not fire it, and well over the
	// scheduling jitter of user-space peers on a busy host.
	delayHeadroom = 5 * time.Millisecond
	// cwndBeta scales a cut by how far the sample is past the target
	// (Swift's β), cwndMaxCut bounds one cut (Swift's max_mdf): the
	// window shrinks to at least (1 − cwndMaxCut) of itself per cut.
	cwndBeta   = 0.8
	cwndMaxCut = 0.5
)

// cwnd is an RC requester's congestion window. Its rules take the time as
// an argument, so tests drive them with any clock. Guarded by the QP's mu
// (it lives in reqState).
type cwnd struct {
	n        int // PSNs that may be unacknowledged; 0: initialCwnd (a new QP)
	ssthresh int // slow start below it, additive increase above; 0: maxUnackedPSNs
	acc      int // PSNs acknowledged since the last additive step
	// over: the last round trip sampled was above the target; the window
	// does not grow until a sample is not.
	over   bool
	minRTT time.Duration // the base: the smallest round trip sampled; 0: none yet
	// cutAt is when the window was last cut. A sample of a packet sent
	// before it measured the queue the window had before the cut; it
	// does not cut again (Swift cuts at most once per round trip).
	cutAt   time.Time
	lastRTT time.Duration // the latest sample, for QPInfo
	cuts    uint64        // cuts for delay, for QPInfo
}

// size returns the window in PSNs.
func (c *cwnd) size() int {
	if c.n == 0 {
		return initialCwnd
	}
	return c.n
}

func (c *cwnd) thresh() int {
	if c.ssthresh == 0 {
		return maxUnackedPSNs
	}
	return c.ssthresh
}

// target returns the round trip above which the window shrinks: the base
// plus the larger of the base and delayHeadroom, so a path whose base is
// long (an emulated peer, a WAN) may double its round trip before the
// window backs off.
func (c *cwnd) target() time.Duration {
	return c.minRTT + max(c.minRTT, delayHeadroom)
}

// acked grows the window for d PSNs newly acknowledged: by d below
// ssthresh (slow start, doubling per round trip), by one PSN per window's
// worth acknowledged above it (additive increase, one PSN per round trip),
// never past maxUnackedPSNs, and not at all while the last round trip was
// above the target.
func (c *cwnd) acked(d int) {
	if d <= 0 || c.over {
		return
	}
	n := c.size()
	if n < c.thresh() {
		n = min(n+d, c.thresh())
	} else {
		c.acc += d
		for c.acc >= n && n < maxUnackedPSNs {
			c.acc -= n
			n++
		}
	}
	c.n = min(n, maxUnackedPSNs)
}

// sampled takes a round trip r, of a packet sent at sent, at now. Above the
// target it cuts the window by (1 − β·(r − target)/r), at most by
// cwndMaxCut, down to minUnackedPSNs, unless the window was cut after the
// packet was sent; ssthresh follows the window down, so it grows back
// additively. It reports whether it cut.
func (c *cwnd) sampled(r time.Duration, sent, now time.Time) bool {
	if r <= 0 {
		return false // a clock that did not move: no information
	}
	c.lastRTT = r
	if c.minRTT == 0 || r < c.minRTT {
		c.minRTT = r
	}
	tgt := c.target()
	c.over = r > tgt
	if !c.over || sent.Before(c.cutAt) {
		return false
	}
	f := max(1-cwndBeta*float64(r-tgt)/float64(r), 1-cwndMaxCut)
	n := max(int(float64(c.size())*f), minUnackedPSNs)
	c.n, c.ssthresh, c.acc, c.cutAt = n, n, 0, now
	c.cuts++
	return true
}

// lost halves the window on a go-back-N retry that a NAK started (a
// sequence error or an implicit NAK: a packet was lost), as TCP's fast
// recovery does; ssthresh follows it. The cut is the answer to the
// congestion seen so far: growth resumes (over is cleared), and the next
// sample, of a packet sent after the retry, decides again.
func (c *cwnd) lost(now time.Time) {
	n := max(c.size()/2, minUnackedPSNs)
	c.n, c.ssthresh, c.acc, c.cutAt, c.over = n, n, 0, now, false
}

// timedOut cuts the window to the floor on a local ACK timeout: nothing
// came back for a whole timeout, so the path holds more than it can
// return in time, and the retry resends only the floor's worth. ssthresh
// keeps half the window, which slow start climbs back to (RFC 5681 §3.1);
// growth resumes, as after lost.
func (c *cwnd) timedOut(now time.Time) {
	c.ssthresh = max(c.size()/2, minUnackedPSNs)
	c.n, c.acc, c.cutAt, c.over = minUnackedPSNs, 0, now, false
}
