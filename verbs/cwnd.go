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
	// initialCwnd is a new QP's window: small enough that many QPs
	// starting at once (64 of them: 1,024 packets) do not queue near an
	// ACK timeout's worth at one peer before their first round trips
	// tell them the queue is there (and set the timer's smoothed RTT:
	// comp.go's timer waits at least four of them), even after the one
	// doubling slow start makes before its samples come back (at 32,
	// TestCwndManyQPsOneSlowPeer's 16 QPs queued past the timeout).
	// Slow start grows it to maxUnackedPSNs in six round trips on a
	// quiet path. (TCP starts with ten segments, RFC 6928.)
	initialCwnd = 16
	// cwndFloor is the smallest window: four WRITEs of 4 KiB at path MTU
	// 1024. Smaller windows made `roce perf write -q 64` on a loaded
	// 2-vCPU host slower without shortening its round trips, which were
	// the processes' scheduling more than a queue.
	cwndFloor = 16
	// defaultDelayHeadroom is the queueing a QP whose ACK timeout is
	// infinite (timeout 0) tolerates above its base round trip; with a
	// timeout, the headroom is half of it (delayHeadroom), so the queue
	// the window lets build never fires the timer, with a margin for one
	// round trip's growth. It is far above a quiet path's round trip
	// (tens of µs on a veth), because on a busy host most of a user-space
	// peer's round trip is waiting to be scheduled: a target a few ms
	// above the base cut every window to the floor and halved the
	// throughput of 64 QPs, with no queue to drain.
	defaultDelayHeadroom = 32 * time.Millisecond
	// slowStartExit: slow start ends at a round trip this fraction of
	// the way from the base to the target (sampled).
	slowStartExit = 4
	// cwndAI is the additive increase: PSNs per window's worth
	// acknowledged (per round trip) above ssthresh.
	cwndAI = 8
	// cwndBeta scales a cut by how far the sample is past the target
	// (Swift's β), cwndMaxCut bounds one cut (Swift's max_mdf): the
	// window shrinks to at least (1 − cwndMaxCut) of itself per cut.
	cwndBeta   = 0.8
	cwndMaxCut = 0.5
)

// delayHeadroom returns the queueing above the base round trip the QP's
// window tolerates: half the local ACK timeout in force (retransTimeout:
// the timeout attribute, IBTA §9.7.6.1.3, or four smoothed round trips when
// longer), or defaultDelayHeadroom when the timeout is infinite. The
// window's job is to keep the queue from outrunning the timer, which is
// what set off the storm of resends; a fixed target of a few ms, or even
// half the attribute's 67 ms, held lone QPs at the floor on a host at load
// 20, where the round trip is mostly waiting to be scheduled and no
// smaller window shortens it (BENCHMARKS.md, "Many QPs"). Called with q.mu
// held.
func (q *QP) delayHeadroom() time.Duration {
	if d := q.retransTimeout(); d > 0 {
		return d / 2
	}
	return defaultDelayHeadroom
}

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
	// cutAt is when the window was last cut (monoNow's clock; 0: never). A
	// sample of a packet sent before it measured the queue the window had
	// before the cut; it does not cut again (Swift cuts at most once per
	// round trip).
	cutAt   int64
	lastRTT time.Duration // the latest sample, for QPInfo
	cuts    uint64        // cuts for delay, for QPInfo
	// undo is the window before a timeout cut it, until an
	// acknowledgement shows whether the timeout was spurious
	// (spuriousTimeout) or the retry has resent everything; 0: none.
	undo   int
	undone uint64 // timeouts found spurious, for QPInfo
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
// plus the larger of the base and headroom, so a path whose base is long
// (an emulated peer, a WAN) may double its round trip before the window
// backs off.
func (c *cwnd) target(headroom time.Duration) time.Duration {
	return c.minRTT + max(c.minRTT, headroom)
}

// acked grows the window for d PSNs newly acknowledged: by d below
// ssthresh (slow start, doubling per round trip), by cwndAI PSNs per
// window's worth acknowledged above it (additive increase, per round trip),
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
			n += cwndAI
		}
	}
	c.n = min(n, maxUnackedPSNs)
}

// sampled takes a round trip r, of a packet sent at sent, at now, with the
// QP's headroom (delayHeadroom). Above the target it cuts the window by (1 − β·(r − target)/r), at most by
// cwndMaxCut, down to cwndFloor, unless the window was cut after the
// packet was sent; ssthresh follows the window down, so it grows back
// additively. It reports whether it cut.
func (c *cwnd) sampled(r time.Duration, sent, now int64, headroom time.Duration) bool {
	if r <= 0 {
		return false // a clock that did not move: no information
	}
	c.lastRTT = r
	if c.minRTT == 0 || r < c.minRTT {
		c.minRTT = r
	}
	tgt := c.target(headroom)
	c.over = r > tgt
	if n := c.size(); n < c.thresh() && r > c.minRTT+max(c.minRTT, headroom)/slowStartExit {
		// Slow start ends when the round trip has grown a fraction of
		// the way to the target (HyStart's delay rule, Ha and Rhee
		// 2011): it doubles the window each round trip, and the sample
		// that shows the queue is a round trip old, so doubling on to
		// the target would overshoot it twofold — past the ACK timeout.
		c.ssthresh = n
	}
	if !c.over || sent < c.cutAt {
		return false
	}
	f := max(1-cwndBeta*float64(r-tgt)/float64(r), 1-cwndMaxCut)
	n := max(int(float64(c.size())*f), cwndFloor)
	c.n, c.ssthresh, c.acc, c.cutAt = n, n, 0, now
	c.cuts++
	return true
}

// lost halves the window on a go-back-N retry that a NAK started (a
// sequence error or an implicit NAK: a packet was lost), as TCP's fast
// recovery does; ssthresh follows it. The cut is the answer to the
// congestion seen so far: growth resumes (over is cleared), and the next
// sample, of a packet sent after the retry, decides again.
func (c *cwnd) lost(now int64) {
	c.undo = 0
	n := max(c.size()/2, cwndFloor)
	c.n, c.ssthresh, c.acc, c.cutAt, c.over = n, n, 0, now, false
}

// timedOut cuts the window to the floor on a local ACK timeout, so the
// go-back-N retry resends only the floor's worth (before the window, a
// timeout resent up to 512 PSNs on each of 64 QPs, into the queue that made
// them late). ssthresh keeps the window as it was, which slow start climbs
// back to in a few round trips, and undo remembers it for spuriousTimeout.
// A queue that persists is the delay rule's (sampled). Growth resumes, as
// after lost.
func (c *cwnd) timedOut(now int64) {
	c.undo = max(c.undo, c.size()) // a second timeout before the first is resolved keeps the larger
	c.ssthresh = max(c.size(), cwndFloor)
	c.n, c.acc, c.cutAt, c.over = cwndFloor, 0, now, false
}

// spuriousTimeout gives back the window a timeout cut: the caller saw an
// acknowledgement of PSNs the retry has not resent, so their first
// transmissions arrived and the timeout was spurious — on a busy host, the
// peer process or this one was not scheduled for longer than the timeout
// (RFC 5682's F-RTO and RFC 3522's Eifel undo a spurious timeout's cut the
// same way). Without it, 64 QPs at load 20 timed out about four times a
// second each and spent the run at the floor.
func (c *cwnd) spuriousTimeout() {
	if c.undo == 0 {
		return
	}
	c.n, c.undo = max(c.size(), c.undo), 0
	c.undone++
}
