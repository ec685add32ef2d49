package verbs

// The completer: responses → completions, retransmission and RNR retry
// (rxe_comp.c's role).

import (
	"fmt"
	"time"

	"net/netip"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// compState is the completer's progress.
type compState struct {
	psn        wire.PSN // the oldest PSN not yet acknowledged
	retryLeft  int      // retransmissions left (retry_cnt)
	rnrLeft    int      // RNR retries left (rnr_retry; 7 = infinite)
	timerArmed bool
	// retrying: a go-back-N retry has started and no response has made
	// forward progress since. Every response after a gap reveals the same
	// gap, so NAKs and implicit NAKs start no further retry until then; the
	// timer still does (rxe: comp.started_retry).
	retrying bool
	rnrWait  bool   // an RNR NAK timer runs; the requester waits
	progress uint64 // bumped on every acknowledgement, so a timer can tell it made none
	armedAt  uint64 // progress when the timer was armed
	// due is when the timer as last armed expires (monoNow): a callback
	// that runs before it waits the rest (onRetransTimer).
	due int64
	// fireAt is when the runtime's timer is set to fire, 0 once it has
	// fired (its callback clears it under q.mu) or was stopped before.
	// Arming does not reset a timer that fires no later than the new due
	// (armRetrans): Reset and Stop cost some 350 instructions per round
	// trip (bench/callgrind.sh), and while the requester keeps making
	// progress the timer then fires about once per timeout, not never.
	fireAt int64
	// For the words an error completion carries.
	heard    bool   // any response ever arrived from the peer QP
	short    uint64 // ACKs shortACK took, for tests to see that it ran
	seqNAKs  int    // PSN sequence error NAKs in a row
	rnrNAKs  int    // RNR NAKs in a row
	rnrSince time.Time
	timeouts int // retransmit timeouts in a row
	// Round-trip time, sampled on one AckReq packet at a time and never on
	// a retransmission (Karn's rule), so the timer does not fire before a
	// slow peer could have answered.
	rttPSN   wire.PSN
	rttSent  int64 // monoNow's clock
	rttValid bool
	// rttUnsent: the sample's packet is built but its batch has not gone
	// to the link yet; rttSent is stamped when it has (onSent).
	rttUnsent bool
	srtt      time.Duration
	rttvar    time.Duration // the round trips' mean deviation (RFC 6298 §2)
}

// retransTimeout is the local ACK timeout in force: the QP's timeout
// attribute, or four smoothed round trips when the peer is slower than
// that, or the smoothed round trip plus four mean deviations when the round
// trips vary more than that (RFC 6298 §2's SRTT + 4·RTTVAR): on a busy host
// the round trip is mostly the peer's scheduling, and a timer at the
// attribute fired on every stall longer than it while the congestion
// window (cwnd.go) kept the queue, and with it SRTT, short. IBTA §9.7.6.1.3 makes the attribute a minimum, so waiting longer
// keeps the requester compliant while sparing a slow responder (rxe in an
// emulated VM answers a 64-packet WRITE in more than the 67 ms of
// timeout 14) a flood of duplicates.
func (q *QP) retransTimeout() time.Duration {
	d := TimeoutDuration(q.attr.Timeout)
	if d == 0 {
		return 0
	}
	return max(d, 4*q.comp.srtt, q.comp.srtt+4*q.comp.rttvar)
}

// sampleSent starts an RTT sample on a first transmission that asks for an
// acknowledgement of PSN last. Its clock starts when the packet has gone to
// the link (onSent), not here: a clock read now would only be replaced, and
// each costs some 180 ns in the lab's VMs (bench/cmd/opcost).
func (q *QP) sampleSent(last wire.PSN) {
	if !q.comp.rttValid {
		q.comp.rttPSN, q.comp.rttValid, q.comp.rttUnsent = last, true, true
	}
}

// onSent is the requester's step once the packets its run built have gone
// to the link (txBatch.release, kick): the RTT sample begun in them starts
// its clock now, not when the packet was built, since the batch may have
// waited for the link behind other QPs' (with 64 QPs, for longer than a
// round trip), and the congestion window (cwnd.go) would read that wait as
// a queue at the peer; and the local ACK timer starts, as IBTA §9.7.6.1.3
// times the wait for a response to a packet sent. Called with q.mu held.
func (q *QP) onSent() {
	q.req.armOnSend = false
	var now int64 // one clock read for the sample and the timer
	if q.comp.rttValid && q.comp.rttUnsent {
		now = monoNow()
		q.comp.rttSent = now
	}
	q.comp.rttUnsent = false
	if !q.destroyed {
		q.armRetransAt(now)
	}
}

// sampleAcked ends the RTT sample when the acknowledged PSNs pass it.
func (q *QP) sampleAcked() {
	if q.comp.rttValid && q.comp.psn.After(q.comp.rttPSN) {
		if q.comp.rttUnsent {
			// Acknowledged before its batch went to the link (a forged
			// or stale ACK can be): the sample has no start; drop it.
			q.comp.rttValid = false
			return
		}
		now := monoNow()
		r := time.Duration(now - q.comp.rttSent)
		q.req.win.sampled(r, q.comp.rttSent, now, q.delayHeadroom())
		if q.comp.srtt == 0 {
			q.comp.srtt, q.comp.rttvar = r, r/2
		} else {
			// RFC 6298 §2.3: the deviation from the old SRTT first.
			q.comp.rttvar = (3*q.comp.rttvar + (q.comp.srtt - r).Abs()) / 4
			q.comp.srtt = (7*q.comp.srtt + r) / 8
		}
		q.comp.rttValid = false
	}
}

func addrOf(p *path, sport uint16) link.Addr {
	return link.Addr{Version: p.version, SrcGID: p.sgid, DstGID: p.dgid, TrafficClass: p.tc,
		FlowLabel: p.flow, HopLimit: p.hop, UDPSrcPort: sport}
}

// armRetrans starts the retransmit timer if packets are outstanding and it
// is not running (IBTA §9.7.6.1.1: the local ACK timeout).
//
// While packets the requester built wait in its batch (armOnSend), it does
// nothing: the batch arms the timer once they have gone to the link
// (release, onSent). IBTA §9.7.6.1.3 times the wait for a response to a
// packet sent, and a batch may wait for the link behind other QPs' longer
// than the timeout; armed now, the timer would spend a retry on packets
// not yet sent. Every caller that has just run the requester (the ACK's
// afterProgress, the NAK's lossRetry, the RNR timer's resend) relies on
// this, not on a check of its own.
func (q *QP) armRetrans() { q.armRetransAt(0) }

// armRetransAt is armRetrans with the clock already read (monoNow), or 0
// to read it if the timer is armed.
func (q *QP) armRetransAt(now int64) {
	d := q.retransTimeout()
	if d == 0 || q.comp.timerArmed || q.comp.rnrWait || q.req.armOnSend || q.sq.head == q.sq.cur && q.req.off == 0 {
		return
	}
	q.comp.timerArmed = true
	q.comp.armedAt = q.comp.progress
	if now == 0 {
		now = monoNow()
	}
	q.comp.due = now + int64(d)
	if q.comp.fireAt != 0 && q.comp.fireAt <= q.comp.due {
		return // it fires first and waits the rest (onRetransTimer)
	}
	q.setRetransTimer(d)
}

// setRetransTimer sets the retransmit timer to fire in d, at the deadline
// (comp.due), making it the timer's next firing; the first call makes the
// timer. Called with q.mu held.
func (q *QP) setRetransTimer(d time.Duration) {
	q.comp.fireAt = q.comp.due
	if q.retrans == nil { // also a callback not the timer's (the fuzzer's fuzzFireRetrans)
		q.retrans = time.AfterFunc(d, q.onRetransTimer)
	} else {
		q.retrans.Reset(d)
	}
}

// stopRetrans stops the retransmit timer. A callback already started
// finds it disarmed.
func (q *QP) stopRetrans() {
	q.comp.timerArmed = false
	if q.retrans != nil && q.retrans.Stop() {
		q.comp.fireAt = 0
	}
}

// monoEpoch and monoNow are the engine's clock for its timers' deadlines,
// in nanoseconds: time.Since of a monotonic time reads only the monotonic
// clock, where time.Now reads the wall clock too. Inside a
// testing/synctest bubble, whose clock starts in 2000, Since counts from
// monoEpoch's wall time instead, some -8e17 ns: the offset keeps every
// reading positive, so 0 stays "never" (fireAt) all the same.
var monoEpoch = time.Now()

func monoNow() int64 { return int64(time.Since(monoEpoch)) + 1<<62 }

// timerRxBatches bounds the batches the retransmit timer takes from the
// link before it decides (onRetransTimer): enough for what queued while the
// process was not running, not a receive loop of its own under a steady
// stream.
const timerRxBatches = 16

// onRetransTimer runs when the local ACK timeout expires.
//
// Before it decides, it takes what the link has received (run to
// completion, as a CQ poller does in pollLink), waiting for a batch
// another goroutine is handling (receiveNow): the ACK it waits for may
// already be in the socket, or in that batch. A goroutine busy-polling a
// CQ takes the device's receive lock for each look (until the guard of
// device.go's rxGuard), and a thread the OS preempted while holding it
// kept every ACK unread for as long as it was off the CPU (66 ms in a
// trace of bench/ecn.sh's senders; the responder then counted every
// packet resent as duplicate_request); a timer that found the lock taken
// resent at once.
//
// A process that the OS did not run for longer than the timeout (a busy
// machine) resumes with the timer and the receive goroutine runnable at
// once, and the timer may run first: bench/'s
// RCWrite64K, one QP over a veth, logged the Go process not running for
// 197 ms, the responder's ACKs sent on resumption, and the requester's
// timer firing 20 µs later, before its receive goroutine took those ACKs
// from the socket: a go-back-N resend of the whole window (256 packets)
// that the responder counted as duplicate_request 256. IBTA §9.7.6.1.3
// times the wait for a response to arrive at the requester; one that has
// arrived, unread, is not missing.
func (q *QP) onRetransTimer() {
	q.mu.Lock()
	q.comp.fireAt = 0
	if !q.retransDue() {
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	q.dev.receiveNow(timerRxBatches)
	q.mu.Lock()
	if !q.retransDue() {
		// While this goroutine received, an ACK made progress and
		// re-armed the timer.
		q.mu.Unlock()
		return
	}
	q.comp.timerArmed = false
	if q.comp.progress != q.comp.armedAt {
		// Progress since the timer was armed: wait a full timeout again.
		q.armRetrans()
		q.mu.Unlock()
		return
	}
	q.comp.timeouts++
	if q.comp.retryLeft == 0 {
		q.count(RetryExceededErr)
		q.failOldest(WCRetryExcErr, q.retryDetail())
		q.mu.Unlock()
		return
	}
	q.spendRetry()
	q.req.win.timedOut(monoNow())
	q.saveResume()
	out := getTxBatch(q.dev)
	q.retry(out)
	q.mu.Unlock()
	putTxBatch(out)
}

// retransDue reports whether the retransmit timer, having fired, is armed
// and due; armed and not yet due (armRetrans did not reset it, or a
// callback started before an ACK re-armed it: Stop cannot recall one), it
// sets the timer for the rest. Called with q.mu held.
func (q *QP) retransDue() bool {
	if q.destroyed || !q.comp.timerArmed || q.state != QPSRTS && q.state != QPSSQD {
		return false
	}
	wait := q.comp.due - monoNow()
	if wait <= 0 {
		return true
	}
	if q.comp.fireAt == 0 || q.comp.fireAt > q.comp.due {
		q.setRetransTimer(time.Duration(wait))
	}
	return false
}

// spendRetry uses one transport retry. retry_cnt 7 retries forever once
// the peer has answered, as on Linux rxe (rxe_comp.c: "if
// (qp->comp.retry_cnt != 7) retry_cnt--"), which ibverbs users tuned on rxe
// rely on (IBTA gives 7 no such meaning). Unlike rxe, a peer that never
// answered at all still exhausts the 7 retries: the usual cause is a wrong
// QPN, GID or RoCE version, and the user gets IBV_WC_RETRY_EXC_ERR saying so
// instead of a QP that hangs forever.
func (q *QP) spendRetry() {
	if q.attr.RetryCnt != infiniteRetry || !q.comp.heard {
		q.comp.retryLeft--
	}
}

// retryDetail explains a transport retry counter exceeded error.
func (q *QP) retryDetail() string {
	to := q.retransTimeout() // the QP's timeout, or 4 × SRTT when longer: what the timer waited
	peer := fmt.Sprintf("QP %#x at %v (%v)", q.attr.DestQPN, unmap(q.path.dgid), q.path.version)
	switch {
	case !q.comp.heard:
		// The link may know why nothing came: no route, a next hop that
		// never answered ARP, a RoCE v1 peer behind a router (link/neigh).
		if err := link.PathErrorOf(q.dev.link, q.path.dgid, q.path.version); err != nil {
			return fmt.Sprintf("no response ever arrived from %s (%d retransmissions %v apart): %v", peer, q.attr.RetryCnt, to, err)
		}
		return fmt.Sprintf("no response ever arrived from %s: %d retransmissions %v apart went unanswered. "+
			"Check the remote QPN, the destination GID and the source GID index (%d), that the peer QP is in RTR or RTS, "+
			"and that both sides use the same RoCE version", peer, q.attr.RetryCnt, to, q.attr.AH.GRH.SGIDIndex)
	case q.comp.seqNAKs > 0:
		return fmt.Sprintf("%s kept answering with PSN sequence error NAKs (%d in a row): its expected PSN and our sq_psn "+
			"disagree, or packets keep getting lost", peer, q.comp.seqNAKs)
	default:
		why := ""
		if attr := TimeoutDuration(q.attr.Timeout); to > attr {
			why = fmt.Sprintf(" (from the round trips: smoothed %v, mean deviation %v; above the QP's timeout of %v)", q.comp.srtt, q.comp.rttvar, attr)
		}
		return fmt.Sprintf("%s answered before but stopped acknowledging PSN %v: %d timeouts of %v%s, retry_cnt %d exhausted",
			peer, q.comp.psn, q.comp.timeouts, to, why, q.attr.RetryCnt)
	}
}

func unmap(a netip.Addr) netip.Addr { return a.Unmap() }

// failOldest completes the oldest outstanding WQE with status, flushes the
// rest and moves the QP to ERR.
func (q *QP) failOldest(status WCStatus, detail string) {
	q.enterError(int64(q.sq.head), status, detail)
}

// retry goes back to the oldest unacknowledged PSN and sends again from
// there (go-back-N, IBTA §9.7.5.1.1 and rxe's req_retry), up to the
// window, which the caller has cut (cwnd.go: a timeout to the floor, a NAK
// by half).
func (q *QP) retry(out *txBatch) {
	q.comp.retrying = true
	q.count(CompleterRetryErr)
	q.comp.rttValid = false // Karn: no sample across a retransmission
	q.rewind()
	q.reqRun(out)
}

// lossRetry is the retry a NAK starts (a sequence error, or an implicit
// NAK): a packet was lost, and the window halves first.
func (q *QP) lossRetry(out *txBatch) {
	q.req.win.lost(monoNow())
	q.req.resume = resumePoint{} // a loss: what follows it goes again
	q.retry(out)
}

// saveResume keeps the requester's position before a timeout's rewind
// (resumeAfterSpurious). A second timeout before the first is resolved
// keeps the first's, the further. Not with a READ or atomic outstanding
// (rdAtomic): the rewind sends those again to have their responses, and
// skipping them would leave the completer waiting.
func (q *QP) saveResume() {
	if q.req.resume.valid || q.req.rdAtomic != 0 {
		return
	}
	q.req.resume = resumePoint{valid: true, cur: q.sq.cur, off: q.req.off, psn: q.req.psn}
}

// resumeAfterSpurious ends a go-back-N retry that the ACK being handled
// has shown spurious (checkSpurious: it acknowledged first transmissions
// the retry had not resent): the requester goes back to where the timeout found it
// instead of resending, behind the ACKs of the originals, every packet it
// had sent — as TCP sends new data once F-RTO has found a timeout
// spurious (RFC 5682, §2.1 step 2b). In the lab's VMs a responder that
// ran late by more than the 67 ms timeout saw 264–451 packets again, all
// duplicate_request (BENCHMARKS.md). A packet of those that was in fact
// lost is found as any other: the responder's sequence-error NAK when a
// later one arrives, or the timer. The ACK has been handled (completions,
// comp.psn, fastForward) before.
func (q *QP) resumeAfterSpurious() {
	r := &q.req.resume
	if !r.valid {
		return
	}
	r.valid = false
	if r.psn.Diff(q.req.psn) <= 0 || q.sq.cur > r.cur || q.sq.head > r.cur || q.comp.psn.Diff(r.psn) > 0 || q.req.rdAtomic != 0 {
		return // the requester is there already, or the ACKs are past it
	}
	q.sq.cur, q.req.off, q.req.psn, q.req.noack = r.cur, r.off, r.psn, 0
}

// rewind points the requester at comp.psn: the WQE holding it and the
// offset of that PSN within it.
func (q *QP) rewind() {
	psn := q.comp.psn
	q.req.rdAtomic = 0
	q.req.noack = 0
	for i := q.sq.head; i < q.sq.tail; i++ {
		w := q.sq.at(i)
		if !w.started {
			q.sq.cur, q.req.off = i, 0
			q.req.psn = psn
			return
		}
		if psn.Diff(w.lastPSN) <= 0 {
			// psn lies in w: resend from it. WQEs keep the PSNs they
			// were first sent with, so every retransmitted packet has
			// its original PSN, and an ACK for PSNs sent before the
			// rewind still completes them (completeThrough).
			q.sq.cur = i
			if psn.Diff(w.firstPSN) <= 0 {
				q.req.off = 0
				q.req.psn = w.firstPSN
			} else {
				k := uint64(psn.Diff(w.firstPSN))
				q.req.off = k * uint64(q.pmtu)
				q.req.psn = psn
			}
			return
		}
	}
	q.sq.cur, q.req.off, q.req.psn = q.sq.tail, 0, psn
}

// receiveResponse handles an ACK, NAK, READ response or atomic ACK (the
// completer). Called with q.mu held.
func (q *QP) receiveResponse(p *wire.Packet, out *txBatch) {
	if q.state != QPSRTS && q.state != QPSSQD {
		return
	}
	psn := p.BTH().PSN()
	info := p.Info
	q.comp.heard = true
	progress := q.comp.progress
	if q.sq.head == q.sq.cur && q.req.off == 0 && !q.resendDue() {
		// Nothing outstanding: a stray or duplicate response. (With
		// req.off > 0 the WQE at cur is partly sent: its ACKs open the
		// window for the rest.)
		return
	}
	// A response for a PSN never sent is bogus. (Not req.psn: after a
	// rewind the responder still acknowledges PSNs sent before it.)
	if !q.req.sentAny || psn.Diff(q.req.maxSent) > 0 {
		return
	}
	aeth := p.AETH()
	if aeth != nil {
		syn := aeth.Syndrome()
		switch {
		case syn.IsNAK():
			q.onNAK(psn, syn, out)
			return
		case syn.IsRNRNAK():
			q.onRNRNAK(psn, syn, out)
			return
		}
	}
	switch {
	case info.Is(wire.FlagReadResponse):
		q.onReadResponse(p, psn, out)
	case info.Is(wire.FlagAtomicAck):
		q.onAtomicAck(p, psn, out)
	default:
		q.onACK(psn, out)
	}
	q.comp.seqNAKs, q.comp.rnrNAKs = 0, 0
	if q.comp.progress != progress {
		// Timeouts count those in a row without progress: a response
		// that moves nothing on (a duplicate, a replay the requester
		// no longer needs) does not end the run.
		q.comp.timeouts = 0
	}
}

// shortACK is the completer's short path for the common case (issue 15;
// shortSend is the responder's): a positive ACK, on an RC QP in RTS from its
// peer's address, of the last PSN of the only WQE outstanding — sent in
// full, a SEND, WRITE or ATOMIC_WRITE, no timeout's cut of the window to
// settle (cwnd.undo), no batch of another goroutine's holding the QP's
// packets. It checks all of that before it changes anything and reports
// false, having changed nothing, when a check fails: the general path
// (receiveResponse) then takes the packet. What it takes it leaves as
// receiveResponse, onACK, completeThrough and afterProgress would (the
// completion, the completer's PSN, window and RTT sample, the retry
// counters; with nothing left to send, the requester's run and the timer's
// arming do nothing), in one function and three calls (TestShortACK,
// FuzzShortACKDiff). Called with q.mu held.
//
// Checks the others imply are left out: head+1 == tail and cur == tail make
// the WQE at the head the only one outstanding, sent in full (so started,
// req.off 0, its last PSN sent: maxSent) and make a UC or UD QP, which
// completes its WQEs when sent, fail; an ACK of its last PSN is no
// duplicate (comp.psn stays at or before it until it completes); an RNR
// wait changes nothing the general path would do here.
func (q *QP) shortACK(p *wire.Packet, a *link.Addr) bool {
	psn, head := p.BTH().PSN(), q.sq.head
	if q.state != QPSRTS || head+1 != q.sq.tail || q.sq.cur != q.sq.tail || a.SrcGID != q.path.dgid ||
		q.req.win.undo != 0 || q.reqBatch != nil || q.dev.generalOnly {
		return false
	}
	if aeth := p.AETH(); aeth == nil || !aeth.Syndrome().IsACK() {
		return false
	}
	w := q.sq.at(head)
	if w.isRdAtom || psn != w.lastPSN {
		return false
	}
	q.counters[RcvdPkts].Add(1)
	q.comp.short++
	q.comp.heard = true
	q.completeSend(w, WCSuccess, "")
	q.sq.head++
	q.advanceCompPSN(psn.Next())
	q.progress()
	q.comp.timerArmed = false
	q.comp.seqNAKs, q.comp.rnrNAKs, q.comp.timeouts = 0, 0, 0
	return true
}

// resendDue reports whether the WQE at the requester's position was sent
// before a rewind and waits to be sent again: a go-back-N retry that the
// window or the pacer stopped at a message boundary leaves head == cur and
// off 0, with that WQE and those after it outstanding, and the responses
// to their first transmission still on their way. Those complete them
// (completeThrough, up to tail): taken for strays, they were dropped, and
// every WQE after the rewind was sent twice (a trace of bench/ecn.sh's
// senders: 27 ACKs in a row ignored after one timeout).
func (q *QP) resendDue() bool {
	return q.sq.cur < q.sq.tail && q.sq.at(q.sq.cur).started
}

// completeThrough completes, in order, the WQEs acknowledged by an ACK of
// psn: every WQE whose last PSN is at or before psn, stopping at a READ or
// atomic whose response has not arrived (an ACK past it means its response
// was lost: the caller retries). It reports whether it stopped at such a WQE.
func (q *QP) completeThrough(psn wire.PSN) (stuckAtRdAtomic bool) {
	// Up to tail, not cur: WQEs past cur were sent before a rewind, and
	// an ACK that covers them means the responder executed them.
	for q.sq.head < q.sq.tail {
		w := q.sq.at(q.sq.head)
		if !w.started || w.lastPSN.Diff(psn) > 0 {
			break
		}
		if w.isRdAtom {
			return true
		}
		q.completeSend(w, WCSuccess, "")
		q.sq.head++
		// Its PSNs are acknowledged. comp.psn must not lag behind a
		// completed WQE: a rewind to it would resend the next WQE from
		// a PSN the responder gave this one (rxe: complete_wqe).
		q.advanceCompPSN(w.lastPSN.Next())
		q.progress()
		if q.sq.head > q.sq.cur {
			// Skip what was acknowledged without being resent.
			q.sq.cur, q.req.off = q.sq.head, 0
			if q.req.psn.Diff(q.comp.psn) < 0 {
				q.req.psn = q.comp.psn
			}
		}
	}
	return false
}

// progressed restarts the timer and the requester if acknowledgements
// moved the completer on since it was at progress.
func (q *QP) progressed(progress uint64, out *txBatch) {
	if q.comp.progress != progress {
		q.afterProgress(out)
	}
}

// insideRdAtom reports whether moving comp.psn to psn would take it past
// the first PSN of the READ at the head of the send queue, which only that
// READ's responses may do (onReadResponse), one at a time as they place
// their data. No responder ACKs, NAKs or RNR NAKs a PSN inside a READ: it
// answers the READ with responses, and its expected PSN moves past all of
// the READ's PSNs at once. Taken from an ACK, a PSN sequence error NAK or
// an RNR NAK of such a PSN, the completer moved past response data never
// placed; the response for that PSN was then dropped as a duplicate, and
// the READ completed IBV_WC_SUCCESS with a hole in its buffer
// (FuzzRCResponses; TestACKInsideReadCompletesNothing). (An atomic has one
// PSN: a response beyond it is an implicit NAK, laterResponse.)
func (q *QP) insideRdAtom(psn wire.PSN) bool {
	if q.sq.head == q.sq.tail {
		return false
	}
	w := q.sq.at(q.sq.head)
	return w.started && w.isRdAtom && psn.Diff(w.firstPSN) > 0
}

// nakRetry retries on a NAK or an implicit NAK unless a retry is under way.
func (q *QP) nakRetry(out *txBatch) {
	if !q.comp.retrying {
		q.lossRetry(out)
	}
}

func (q *QP) progress() {
	q.comp.retrying = false
	q.comp.progress++
	q.comp.retryLeft = int(q.attr.RetryCnt)
	if q.attr.RNRRetry != infiniteRNRRetry {
		q.comp.rnrLeft = int(q.attr.RNRRetry)
	}
}

// advanceCompPSN moves the oldest unacknowledged PSN forward. Forward
// progress reloads the transport retry counter: retry_cnt bounds the
// retries without progress (IBTA §9.7.6.1.3), so a long message under heavy
// loss, NAKed again and again but moving on each time, is not given up.
func (q *QP) advanceCompPSN(psn wire.PSN) {
	if d := psn.Diff(q.comp.psn); d > 0 {
		q.comp.psn = psn
		q.req.win.acked(int(d))
		q.comp.progress++
		q.comp.retrying = false
		q.comp.retryLeft = int(q.attr.RetryCnt)
		q.sampleAcked()
	}
}

func (q *QP) onACK(psn wire.PSN, out *txBatch) {
	if psn.Diff(q.comp.psn) < 0 {
		return // duplicate ACK
	}
	spurious := q.checkSpurious(psn)
	progress := q.comp.progress
	if q.completeThrough(psn) {
		q.laterResponse(out)
		return
	}
	if q.insideRdAtom(psn.Next()) {
		// An ACK of a PSN inside the READ at the head (its last PSN or
		// beyond is an implicit NAK, above). It acknowledges the WQEs
		// before the READ, no more.
		q.progressed(progress, out)
		return
	}
	q.advanceCompPSN(psn.Next())
	q.fastForward()
	if spurious {
		q.resumeAfterSpurious()
	}
	q.afterProgress(out)
}

// checkSpurious resolves a timeout's cut of the window (cwnd.undo) on an
// ACK of psn: an ACK of a PSN the retry has not resent yet (at or after
// req.psn, which the rewind set back) acknowledges first transmissions,
// and the timeout was spurious; once the retry has resent all it had sent
// (req.psn past maxSent), an ACK can no longer tell, and the cut stands.
// It reports whether it found the timeout spurious.
func (q *QP) checkSpurious(psn wire.PSN) bool {
	w := &q.req.win
	switch {
	case w.undo == 0:
	case psn.Diff(q.req.psn) >= 0:
		w.spuriousTimeout()
		return true
	case q.req.psn.After(q.req.maxSent):
		w.undo = 0
		q.req.resume = resumePoint{}
	}
	return false
}

// laterResponse handles a response (ACK, NAK, READ response or atomic ACK) for
// a PSN beyond the READ or atomic at the head of the send queue, which is
// still waiting for (the rest of) its own: those responses were lost, since
// a responder answers in PSN order. The requester goes back to the first
// missing PSN at once (IBTA §9.7.5.1.3, implicit NAK; rxe's check_psn
// answers COMPST_ERROR_RETRY), rather than wait for the local ACK timer,
// which a QP with timeout 0 does not have.
func (q *QP) laterResponse(out *txBatch) {
	q.advanceCompPSN(q.sq.at(q.sq.head).firstPSN)
	q.nakRetry(out)
}

// awaitedHead starts handling a READ response or atomic ACK for psn: the
// response acknowledges every request before it (completeThrough), and
// awaitedHead returns the WQE at the head of the send queue, which the
// response may answer, or nil when it has handled the response itself:
//   - a response beyond the READ or atomic at the head is an implicit NAK
//     (laterResponse);
//   - with the requester at the head (head == cur) nothing is outstanding
//     and the response is stray; unless a go-back-N retry that the window
//     stopped before a READ or atomic sent earlier was overtaken by the late
//     response of the original transmission: it acknowledged the WQEs
//     before that READ, and completeThrough moved the requester up to it:
//     started, not resent since, its own response not taken here (the
//     requester's state says it was not sent). It must go again now, and
//     the timer wait for it: nothing else would send it, since with
//     head == cur the timer finds nothing outstanding and every later
//     response is ignored as stray (TestResponseUpToHeadRunsRequester;
//     TestFaultsRCExactlyOnce deadlocked so about once in a hundred runs).
//     The responder answers the repeat from its record of what it
//     executed.
func (q *QP) awaitedHead(psn wire.PSN, out *txBatch) *sendWQE {
	if q.completeThrough(psn.Add(-1)) {
		q.laterResponse(out)
		return nil
	}
	if q.sq.head == q.sq.cur {
		if q.sq.head != q.sq.tail && q.sq.at(q.sq.head).started {
			q.afterProgress(out)
		}
		return nil
	}
	return q.sq.at(q.sq.head)
}

// fastForward moves the requester to comp.psn when the responder
// acknowledged part of the WQE at cur that has not been resent since a
// rewind.
func (q *QP) fastForward() {
	if q.comp.psn.Diff(q.req.psn) <= 0 || q.sq.head != q.sq.cur || q.sq.cur == q.sq.tail {
		return
	}
	w := q.sq.at(q.sq.cur)
	if !w.started || w.isRdAtom || q.comp.psn.Diff(w.firstPSN) < 0 || q.comp.psn.Diff(w.lastPSN) > 0 {
		return
	}
	q.req.off = uint64(q.comp.psn.Diff(w.firstPSN)) * uint64(q.pmtu)
	q.req.psn = q.comp.psn
}

// afterProgress restarts the timer and the requester after acknowledgements.
func (q *QP) afterProgress(out *txBatch) {
	// The timer is left running: armRetrans below, or the callback when
	// it finds the timer disarmed, deals with it.
	q.comp.timerArmed = false
	q.reqRun(out)
	q.armRetrans()
	if q.state == QPSSQD {
		q.checkDrained()
	}
}

func (q *QP) onReadResponse(p *wire.Packet, psn wire.PSN, out *txBatch) {
	w := q.awaitedHead(psn, out)
	if w == nil {
		return
	}
	if w.wr.Opcode != WRRDMARead && w.wr.Opcode != WRFlush || psn.Diff(w.firstPSN) < 0 || psn.Diff(w.lastPSN) > 0 {
		return // not the response we wait for: a duplicate
	}
	if psn != q.comp.psn {
		if psn.Diff(q.comp.psn) > 0 {
			// A response is missing: ask again from the first missing PSN.
			q.nakRetry(out)
		}
		return
	}
	data := p.Payload()
	off := uint64(psn.Diff(w.firstPSN)) * uint64(q.pmtu)
	info := p.Info
	last := info.Is(wire.FlagLast)
	want := uint64(q.pmtu)
	if last {
		want = w.length - off
	}
	if w.wr.Opcode == WRFlush {
		want = 0
	}
	if uint64(len(data)) != want || last != (psn == w.lastPSN) {
		q.failOldest(WCBadRespErr, fmt.Sprintf("RDMA READ response PSN %v carries %d bytes (%v), expected %d", psn, len(data), p.Opcode(), want))
		return
	}
	if len(data) > 0 {
		if err := q.scatter(&q.keySend, w.sge, off, data); err != nil {
			q.failOldest(WCLocProtErr, fmt.Sprintf("RDMA READ target of wr_id %d: %v", w.wr.WRID, err))
			return
		}
	}
	q.advanceCompPSN(psn.Next())
	if last {
		q.completeSend(w, WCSuccess, "")
		q.sq.head++
		q.req.rdAtomic--
		q.progress()
	}
	q.afterProgress(out)
}

func (q *QP) onAtomicAck(p *wire.Packet, psn wire.PSN, out *txBatch) {
	w := q.awaitedHead(psn, out)
	if w == nil {
		return
	}
	if w.wr.Opcode != WRAtomicCmpAndSwp && w.wr.Opcode != WRAtomicFetchAndAdd || psn != w.firstPSN {
		return
	}
	if err := q.putU64(w.sge, p.AtomicAckETH().OrigData()); err != nil {
		q.failOldest(WCLocProtErr, fmt.Sprintf("atomic result buffer of wr_id %d: %v", w.wr.WRID, err))
		return
	}
	q.advanceCompPSN(psn.Next())
	q.completeSend(w, WCSuccess, "")
	q.sq.head++
	q.req.rdAtomic--
	q.progress()
	q.afterProgress(out)
}

func (q *QP) onNAK(psn wire.PSN, syn wire.Syndrome, out *txBatch) {
	if psn.Diff(q.comp.psn) < 0 {
		// A NAK for a PSN already acknowledged answers a stale duplicate
		// of a request that has completed (a late sequence-error NAK, or
		// a responder NAKing a late copy of an ATOMIC whose saved result
		// it no longer holds): a ghost response, dropped as rxe's
		// completer drops a response older than the PSN it expects;
		// going back to resend would only repeat what was acknowledged.
		// A sequence-error NAK is still counted: if they keep coming,
		// the responder expects a PSN we are past (its rq_psn and our
		// sq_psn disagree), and the Detail of the retry-exceeded error
		// the timer ends with says so.
		if syn.Value() == wire.NAKPSNSequenceError {
			q.count(RcvdSeqErr)
			q.comp.seqNAKs++
		}
		return
	}
	// A NAK acknowledges every PSN before it, as an ACK does: the completer
	// retires the WQEs before the NAK's PSN first (rxe_comp.c check_ack).
	progress := q.comp.progress
	if q.completeThrough(psn.Add(-1)) {
		q.laterResponse(out)
		return
	}
	if syn.Value() == wire.NAKPSNSequenceError {
		q.count(RcvdSeqErr)
		if q.insideRdAtom(psn) {
			q.progressed(progress, out)
			return
		}
		if q.comp.rnrWait && psn == q.comp.psn {
			return // the RNR timer already sends us back to psn
		}
		q.comp.seqNAKs++
		q.advanceCompPSN(psn)
		if q.comp.retrying {
			return // the retry under way covers this gap
		}
		if q.comp.retryLeft == 0 {
			q.count(RetryExceededErr)
			q.failOldest(WCRetryExcErr, q.retryDetail())
			return
		}
		q.spendRetry()
		q.lossRetry(out)
		q.armRetrans()
		return
	}
	// Fatal NAKs: the WQE holding psn fails, the QP goes to ERR.
	var status WCStatus
	var what string
	switch syn.Value() {
	case wire.NAKInvalidRequest:
		status, what = WCRemInvReqErr, "rejected the request as invalid (an opcode it does not support, a misaligned atomic, a length beyond its buffers or the DMA length, a SEND_WITH_INV naming an rkey it may not invalidate, or, for a READ or ATOMIC, more of them outstanding than its max_dest_rd_atomic allows: keep this QP's max_rd_atomic at most the peer's max_dest_rd_atomic)"
	case wire.NAKRemoteAccessError:
		status, what = WCRemAccessErr, "denied access"
	case wire.NAKRemoteOperationalError:
		status, what = WCRemOpErr, "could not complete the operation (for a SEND: it could not place the data in its receive buffer, e.g. the receive's lkey was bad)"
	default:
		status, what = WCRemInvRDReqErr, "sent "+syn.String()
	}
	idx := q.sq.head
	for i := q.sq.head; i < q.sq.cur; i++ {
		w := q.sq.at(i)
		if w.started && psn.Diff(w.firstPSN) >= 0 && psn.Diff(w.lastPSN) <= 0 {
			idx = i
			break
		}
	}
	w := q.sq.at(idx)
	detail := fmt.Sprintf("QP %#x at %v %s for %v wr_id %d (PSN %v)", q.attr.DestQPN, unmap(q.path.dgid), what, w.wr.Opcode, w.wr.WRID, psn)
	switch w.wr.Opcode {
	case WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite:
		detail += fmt.Sprintf(": rkey %#x, remote addr %#x, length %d", w.wr.RKey, w.wr.RemoteAddr, w.length)
		if status == WCRemAccessErr {
			detail += " (unknown or invalidated rkey, range outside the region, region of another PD, or the region or QP lacks the access right)"
		}
	}
	q.enterError(int64(idx), status, detail)
}

func (q *QP) onRNRNAK(psn wire.PSN, syn wire.Syndrome, out *txBatch) {
	if psn.Diff(q.comp.psn) < 0 {
		// An RNR NAK of a PSN already acknowledged: a ghost, as in onNAK
		// (a late answer to a request that has completed since, e.g. the
		// first of two copies of a SEND the responder NAKed twice).
		// Taken, it stopped the requester for the RNR timer, sent it back
		// over PSNs the responder had acknowledged, and spent rnr_retry,
		// so that late NAKs alone could end a QP with
		// IBV_WC_RNR_RETRY_EXC_ERR.
		return
	}
	progress := q.comp.progress
	if q.completeThrough(psn.Add(-1)) {
		q.count(RcvdRNRErr)
		q.laterResponse(out)
		return
	}
	if q.insideRdAtom(psn) {
		q.progressed(progress, out)
		return
	}
	q.count(RcvdRNRErr)
	if q.comp.rnrNAKs == 0 {
		q.comp.rnrSince = time.Now()
	}
	q.comp.rnrNAKs++
	q.advanceCompPSN(psn)
	if q.attr.RNRRetry != infiniteRNRRetry {
		if q.comp.rnrLeft == 0 {
			q.count(RetryRNRExceededErr)
			q.failOldest(WCRNRRetryExcErr, fmt.Sprintf(
				"receiver not ready: QP %#x at %v had no receive posted for %v (%d RNR NAKs, rnr_retry %d exhausted); "+
					"post receives before the peer sends, or raise rnr_retry (7 = retry forever)",
				q.attr.DestQPN, unmap(q.path.dgid), time.Since(q.comp.rnrSince).Round(time.Microsecond), q.comp.rnrNAKs, q.attr.RNRRetry))
			return
		}
		q.comp.rnrLeft--
	}
	// Wait the timer the responder asked for, then go back to psn.
	if q.comp.timerArmed {
		q.stopRetrans()
	}
	q.comp.rnrWait = true
	d := wire.RNRTimer(syn.Value())
	if q.rnrTimer == nil {
		q.rnrTimer = time.AfterFunc(d, q.onRNRTimer)
	} else {
		q.rnrTimer.Reset(d)
	}
}

func (q *QP) onRNRTimer() {
	q.mu.Lock()
	if q.destroyed || !q.comp.rnrWait {
		q.mu.Unlock()
		return
	}
	q.comp.rnrWait = false
	if q.state != QPSRTS && q.state != QPSSQD {
		q.mu.Unlock()
		return
	}
	out := getTxBatch(q.dev)
	q.rewind()
	q.reqRun(out)
	q.armRetrans() // once the resend has gone, if it waits in a batch
	q.mu.Unlock()
	putTxBatch(out)
}
