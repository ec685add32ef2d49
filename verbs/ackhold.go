package verbs

// The answer's ACK: a goroutine that polls a CQ and handles what the link
// received itself (pollLink, run to completion) holds the positive ACKs
// that batch produced instead of sending them at once, and the device's
// next send of anything carries them in the same link.Send: most often
// the answer the program posts on seeing the completion, as `roce
// pingpong`, `roce perf send --lat` and every request/response protocol
// do. Each side of a round trip then makes one sendmmsg(2) where it made
// two, the ACK's and the answer's.
//
// Why: inside the lab's VMs a send costs per call, not per packet (the
// kick of the virtio queue, an exit to QEMU; BENCHMARKS.md, "Where
// goroce's time goes inside the VMs"), and both calls were on the round
// trip's path: the peer needs the ACK to complete its SEND and the answer
// to complete its receive. Linux rxe cannot do this: its responder
// acknowledges from the kernel's softirq before the program has seen the
// message. IBTA lets a responder acknowledge late (coalesced
// acknowledgements, Vol 1 §9.7.5.1.2) as long as the requester's local ACK
// timer does not expire first.
//
// What bounds the hold, whichever comes first:
//   - any send of the device (a PostSend's packets, the receive
//     goroutine's or the scheduler's responses): the held ACKs go first, in
//     the same link.Send when they fit in its batch (txBatch.flush);
//   - the poller's next empty look (pollLink), and CQ.Wait before it
//     sleeps;
//   - ackHoldFor, on a timer (a program that polled a completion and then
//     went on with other work, posting nothing);
//   - Close.
//
// Only a batch of positive ACKs is held, one at a time, and only when
// every QP acknowledging has nothing in its own send queue (answerable):
// a NAK, an atomic or READ response, a requester's packets, or the ACKs
// of a QP that is itself sending go as before. While a
// QP's ACK is held its later responses wait for it (txBatch.ownResp and
// respond's respBatch), so they never overtake it.

import (
	"time"

	"github.com/goroce/goroce/wire"
)

// ackHoldFor bounds how long held ACKs wait for a send to ride with. A
// program that answers does so within microseconds of its Poll; the
// requester's local ACK timer is at least milliseconds (timeout 8: 1 ms).
// When the process's other Ps are idle the runtime's timers fire to the
// millisecond, so this is at most about 1 ms in practice.
const ackHoldFor = 200 * time.Microsecond

// onlyACKs reports whether b, a batch a receive produced, holds positive
// ACKs and nothing else: no other response, no requester packets, no run
// of a requester deferred to its release. Called by the goroutine that
// filled b.
func (b *txBatch) onlyACKs() bool {
	if len(b.pkts) == 0 || len(b.cuts) > 0 || b.reqOwned {
		return false
	}
	for i := range b.pkts {
		t := b.pkts[i].Transport()
		if len(t) < wire.BTHLen+wire.AETHLen || wire.BTH(t).Opcode() != wire.OpcodeRCAcknowledge ||
			wire.AETH(t[wire.BTHLen:]).Syndrome() != wire.SyndromeACK {
			return false
		}
	}
	return true
}

// holdACKs holds out, a batch of positive ACKs a CQ poller's receive
// produced, for the device's next send; it reports whether it did (else
// the caller sends out as usual).
func (d *Device) holdACKs(out *txBatch) bool {
	if !out.onlyACKs() || d.isClosed() || !out.answerable() || !d.held.Put(out) {
		return false
	}
	d.heldDue.Store(monoNow() + int64(ackHoldFor))
	if !d.heldTimerOn.Load() && d.heldTimerOn.CompareAndSwap(false, true) {
		d.heldTimer.Reset(ackHoldFor)
	}
	return true
}

// onHeldTimer is heldTimer's function. holdACKs does not reset a timer
// that is set (a Reset per hold cost 280 instructions per round trip,
// bench/callgrind.sh): when it fires, held ACKs whose time has not come
// (a later hold's) wait the rest. heldTimerOn is cleared before held is
// looked at, and holdACKs stores held before it looks at heldTimerOn, so
// of the two at least one sees the other and sets the timer.
func (d *Device) onHeldTimer() {
	d.heldTimerOn.Store(false)
	if !d.held.Full() {
		return
	}
	if wait := d.heldDue.Load() - monoNow(); wait > 0 {
		if d.heldTimerOn.CompareAndSwap(false, true) {
			d.heldTimer.Reset(time.Duration(wait))
		}
		return
	}
	d.flushHeld()
}

// answerable reports whether every QP acknowledging in b, a batch of
// positive ACKs, has nothing in its own send queue: a QP with requests of
// its own in flight is streaming, not waiting to answer, and the peer it
// acknowledges is most likely streaming too, its window waiting for the
// ACK (an rsocket stream's sender acknowledging the receiver's credit
// updates: held, they kept the receiver's control messages in flight
// longer, and the stream lost 5% in bench/'s Rsocket/Stream64K).
func (b *txBatch) answerable() bool {
	for _, q := range b.owned {
		q.mu.Lock()
		busy := q.sq.tail != q.sq.head
		q.mu.Unlock()
		if busy {
			return false
		}
	}
	return true
}

// takeHeld returns the held batch, if any, with heldMu locked; the caller
// sends it and then calls sentHeld. It returns nil, unlocked, when nothing
// is held.
func (d *Device) takeHeld() *txBatch {
	if !d.held.Full() {
		return nil
	}
	d.heldMu.Lock()
	h := d.held.Take()
	if h == nil {
		d.heldMu.Unlock()
	}
	return h
}

// sentHeld finishes a held batch whose packets the caller has sent (and
// counted): it gives their buffers and QPs back, as release does.
func (d *Device) sentHeld(h *txBatch) {
	d.heldMu.Unlock()
	h.recycle()
	putTxBatch(h)
}

// flushHeld sends the held ACKs now, if any, on their own.
func (d *Device) flushHeld() {
	h := d.takeHeld()
	if h == nil {
		return
	}
	h.send(h.pkts)
	d.sentHeld(h)
}
