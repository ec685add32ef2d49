package verbs

import (
	"fmt"
)

// The fuzzer's hooks into the engine's internals (fuzz_test.go), apart so
// the fuzzer can run against an older engine with hooks of its own.

// openFuzzDevice opens a device without its scheduler's goroutine.
func openFuzzDevice(cfg DeviceConfig) (*Device, error) { return openDevice(cfg, false) }

// fuzzPrepare readies the harness's transmit batch for one packet, as the
// receive goroutine readies its batch.
func fuzzPrepare(out *txBatch) { out.budget, out.unlimited = burstBytes, false }

// fuzzSettle serves the scheduler's turns until no QP has work; work that
// does not end (more turns than any READ of the harness's regions needs)
// is an error.
func fuzzSettle(d *Device) error {
	out := getTxBatch(d)
	defer putTxBatch(out)
	for range 100000 {
		if !d.serveTurn(out) {
			return nil
		}
	}
	return fmt.Errorf("the scheduler still has work after 100000 turns")
}

// fuzzDrainEvents empties the async event queue.
func fuzzDrainEvents(d *Device) {
	for d.events.len() > 0 {
		d.events.get(nil)
	}
}

// fuzzBounded checks that the state a peer can make the device hold stays
// within its bounds.
func fuzzBounded(d *Device) error {
	if n := d.events.len(); n > maxAsyncEvents {
		return fmt.Errorf("%d async events queued, bound %d", n, maxAsyncEvents)
	}
	qps := d.QPs()
	d.sched.mu.Lock()
	waiting := len(d.sched.fifo) - d.sched.head
	d.sched.mu.Unlock()
	if waiting > len(qps) {
		return fmt.Errorf("%d scheduler turns waiting for %d QPs", waiting, len(qps))
	}
	for _, q := range qps {
		q.mu.Lock()
		r := &q.resp
		err := error(nil)
		switch {
		case len(r.reads.recs) > maxReadRecords:
			err = fmt.Errorf("QP %#x remembers %d READs, bound %d", q.num, len(r.reads.recs), maxReadRecords)
		case r.pend.rdAtomic > maxPendingRdAtomic:
			err = fmt.Errorf("QP %#x holds %d READ/ATOMIC responses, bound %d", q.num, r.pend.rdAtomic, maxPendingRdAtomic)
		case r.pend.len() > 2*maxPendingRdAtomic+2:
			// Each response waiting is followed by at most one ACK or NAK (ACKs coalesce).
			err = fmt.Errorf("QP %#x holds %d responses", q.num, r.pend.len())
		case len(r.res) > MaxQPRdAtom:
			err = fmt.Errorf("QP %#x holds %d atomic results", q.num, len(r.res))
		case r.wqe.active && q.srq == nil && q.rq.n > q.rq.max:
			err = fmt.Errorf("QP %#x receive queue over its bound", q.num)
		}
		q.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// fuzzFireRetrans runs q's retransmit timer as if the local ACK timeout
// had expired with no progress since it was armed (the harness's QPs have
// timeout 0, so no timer of the runtime's fires on its own), when the
// timer would be running: packets outstanding, no RNR wait.
func fuzzFireRetrans(q *QP) {
	q.mu.Lock()
	fire := !q.destroyed && (q.state == QPSRTS || q.state == QPSSQD) && !q.comp.rnrWait &&
		(q.sq.head != q.sq.cur || q.req.off != 0)
	if fire {
		q.comp.timerArmed = true
		q.comp.armedAt = q.comp.progress
		q.comp.due = monoNow() - 1
	}
	q.mu.Unlock()
	if fire {
		q.onRetransTimer()
	}
}

// fuzzFireRNR runs q's RNR NAK timer now if it is running (the harness's
// RNR NAKs ask for 655 ms).
func fuzzFireRNR(q *QP) {
	q.mu.Lock()
	wait := q.comp.rnrWait
	if wait && q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	q.mu.Unlock()
	if wait {
		q.onRNRTimer()
	}
}
