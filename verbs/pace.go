package verbs

import (
	"time"
)

// A Pacer decides when a QP's requester may send its next packet: it is
// the requester's place for rate limiting. The rate limit of ibv_modify_qp
// (IBV_QP_RATE_LIMIT, QPAttr.RateLimit) installs a token bucket; congestion
// control (DCQCN, lowering the rate on CNPs and raising it again) is meant
// to be another Pacer. It covers every packet the requester sends,
// retransmissions included, not the responder's ACKs and READ responses.
//
// A Pacer is called with the QP's lock held, from one goroutine at a time.
type Pacer interface {
	// Delay returns how long the requester must wait, from now, before
	// it sends its next packet; 0 means at once.
	Delay(now time.Time) time.Duration
	// Sent accounts a packet of n bytes (the transport packet, BTH to
	// ICRC) sent at now.
	Sent(now time.Time, n int)
}

// Rate limits, as ibv_query_device_ex's packet_pacing_caps report them.
const (
	RateLimitMinKbps = 1           // qp_rate_limit_min
	RateLimitMaxKbps = 100_000_000 // qp_rate_limit_max: 100 Gb/s
)

// tokenBucket paces to a rate in kb/s (1 kb = 1000 bits, as ibverbs'
// rate_limit): tokens, in bytes, accrue at the rate up to a burst; a
// packet may go while the bucket is not empty, and may take it below
// zero, so the average rate holds whatever the packet sizes.
type tokenBucket struct {
	bytesPerSec float64
	burst       float64 // bytes
	tokens      float64 // bytes; negative: owed
	last        time.Time
}

// minBurst: the bucket always holds at least two full packets at path MTU
// 4096, so pacing never stalls a message on rounding.
const minBurst = 2 * (4096 + 64)

// newTokenBucket returns a bucket for kbps, full. Its burst is 1 ms at
// the rate (at least minBurst): the timers that resume a paced QP fire
// with about that granularity, and a smaller bucket would lose the rate
// to their lateness.
func newTokenBucket(kbps uint32, now time.Time) *tokenBucket {
	b := &tokenBucket{bytesPerSec: float64(kbps) * 1000 / 8, last: now}
	b.burst = max(b.bytesPerSec/1000, minBurst)
	b.tokens = b.burst
	return b
}

func (b *tokenBucket) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt.Seconds()*b.bytesPerSec)
		b.last = now
	}
}

func (b *tokenBucket) Delay(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens > 0 {
		return 0
	}
	// Until the bucket holds a byte again.
	return time.Duration((1 - b.tokens) / b.bytesPerSec * float64(time.Second))
}

func (b *tokenBucket) Sent(now time.Time, n int) {
	b.refill(now)
	b.tokens -= float64(n)
}

// setRateLimit installs a token bucket for kbps, or none for 0, and lets
// the requester go on at the new rate. Called with q.mu held.
func (q *QP) setRateLimit(kbps uint32) {
	if kbps == 0 {
		q.pacer = nil
	} else {
		q.pacer = newTokenBucket(kbps, time.Now())
	}
	if q.paceTimer != nil {
		q.paceTimer.Stop()
	}
	q.kick()
}

// SetPacer installs p as the QP's pacer (nil: none), replacing the one
// its rate limit installed. It is the hook for congestion control.
func (q *QP) SetPacer(p Pacer) {
	q.mu.Lock()
	q.pacer = p
	if q.paceTimer != nil {
		q.paceTimer.Stop()
	}
	q.kick()
	q.mu.Unlock()
	q.resumeKicked()
}

// paced reports whether the pacer holds the requester back now; if so it
// arms the timer that resumes it. The rate limit's pacer and the DCQCN
// reaction point (dcqcn.go) both hold it back. Called with q.mu held.
func (q *QP) paced() bool {
	var cc *dcqcnRP
	if c := q.dev.ecn.Load(); q.cc != nil || c != nil && c.RPEnable != 0 && q.typ != GSI {
		cc = q.ccFor(c) // made now, or the port's RP may be off now, or reconfigured
	}
	if q.pacer == nil && cc == nil {
		return false
	}
	now := time.Now()
	var d time.Duration
	if q.pacer != nil {
		d = q.pacer.Delay(now)
	}
	if cc != nil {
		d = max(d, cc.Delay(now))
	}
	if d <= 0 {
		return false
	}
	if q.paceTimer == nil {
		q.paceTimer = time.AfterFunc(d, q.onPaceTimer)
	} else {
		q.paceTimer.Reset(d)
	}
	return true
}

// onPaceTimer resumes a requester its pacer held back.
func (q *QP) onPaceTimer() {
	q.mu.Lock()
	if q.destroyed || q.state != QPSRTS && q.state != QPSSQD {
		q.mu.Unlock()
		return
	}
	out := getTxBatch(q.dev)
	q.reqRun(out)
	q.mu.Unlock()
	putTxBatch(out)
}
