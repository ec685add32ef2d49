package verbs

// The device's scheduler: bulk work — READ responses, the requester's
// retransmissions and whatever else one QP has more of than a burst —
// goes out in bursts of at most burstBytes, the QPs with work taking turns
// in a round robin. Without it the receive goroutine answered a 44-byte
// READ request for 256 MiB with 262,145 responses in one loop, and every
// other QP of the device waited seconds for it.
//
// Work lives with its QP (respState.pend, reqState.more, guarded by the
// QP's mutex); the scheduler only holds the order in which QPs get their
// next turn, each QP at most once. Linux rxe does the same with a task per
// QP direction that yields after RXE_MAX_ITERATIONS packets (rxe_task.c),
// the kernel's work queue taking the QPs in turn.
//
// Turns are served by the receive goroutine, one after each batch of
// packets it handles, and by the scheduler's goroutine while the receive
// goroutine waits for packets. The device's data path thus alternates
// between what arrives (every QP's requests and responses, answered at
// once: a legitimate request never queues behind another QP's bulk) and
// one burst of bulk work; with nothing arriving the bulk work has the
// device to itself. Between two of its turns the scheduler's goroutine
// takes what the link received and handles it itself (tryReceive), so a
// packet that arrives during a burst waits for that burst only, and not
// also for the receive goroutine to be woken. When the scheduler's
// goroutine ran beside a busy receive goroutine instead, the two competed
// for the link and the CPU, and a connection doing small operations kept a
// third of its rate while another QP answered a READ of 256 MiB (bench/'s
// ReadFairness).
//
// Turns by bytes are not enough: what the other QPs wait for is a CPU.
// On the benchmark VM a READ answered in back-to-back bursts, with the
// kernel's work to deliver them, filled both vCPUs, and the small
// operations of another connection, each as fast as before in the median,
// lost their tail to threads that waited milliseconds for a CPU
// (execution traces; BENCHMARKS.md). So the bulk work's share is of time,
// too: while a QP without bulk work has had a packet in the last
// shareActive, the bulk turns together take at most shareNum/shareDen of
// the time (timeShare, a deficit counter by time), and the scheduler's
// goroutine sleeps off what they took beyond it; the receive goroutine
// then serves no turn either. With no such QP active, bulk work is not
// held back. (rxe has no such bound: its QPs' tasks share the CPUs through
// the kernel's scheduler.)

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

type sched struct {
	mu   sync.Mutex
	fifo []*QP // guarded by mu: the QPs waiting for a turn, in order
	head int   // guarded by mu
	// waitingQPs is len(fifo)-head, readable without mu: the receive
	// goroutine looks at it after every batch.
	waitingQPs atomic.Int32
	wake       chan struct{}
	quit       chan struct{}
	done       chan struct{}
	// txMu is held while a turn is served: Barrier takes it to order the
	// caller after the memory the turn read (READ sources).
	txMu sync.Mutex
	// idle: the receive goroutine waits for packets; idleCh signals that
	// it has started to, when the scheduler's goroutine waits for that
	// (waiting).
	idle    atomic.Bool
	waiting atomic.Bool
	idleCh  chan struct{}
	// share bounds the bulk work's time while other QPs are active
	// (timeShare); guarded by mu.
	share timeShare
	// activeAt is when a packet last arrived for a QP with no bulk work
	// while others had (clock's nanoseconds), activeQP that QP; nil: no
	// QP active. bulkQPs counts the QPs whose bulk is set (changed under
	// mu): with none, nothing is recorded, and the data path does not
	// read the clock.
	activeAt atomic.Int64
	activeQP atomic.Pointer[QP]
	bulkQPs  atomic.Int32
	// clock is the device's monotonic clock in nanoseconds (replaced by
	// tests that drive the share by hand).
	clock func() int64
}

// active records that a packet arrived for q, a QP with no bulk work,
// while others have some. A QP whose own bulk work ended less than
// shareActive ago is not counted: it is one of many QPs streaming (each in
// the scheduler now and then, between its ACKs), not a small operation
// waiting behind the others' bulk.
func (s *sched) active(q *QP) {
	now := s.clock()
	if e := q.bulkEnd.Load(); e != 0 && now-e < shareActive {
		return
	}
	s.activeAt.Store(now)
	if s.activeQP.Load() != q {
		s.activeQP.Store(q)
	}
}

// rxIdle records whether the receive goroutine waits for packets.
func (s *sched) rxIdle(idle bool) {
	s.idle.Store(idle)
	if idle && s.waiting.Load() {
		select {
		case s.idleCh <- struct{}{}:
		default:
		}
	}
}

// waitIdle returns once the receive goroutine waits for packets, or false
// at Close. (waiting is set before idle is read again, and rxIdle sets
// idle before it reads waiting: one of the two sees the other.)
func (s *sched) waitIdle() bool {
	for !s.idle.Load() {
		s.waiting.Store(true)
		if s.idle.Load() {
			s.waiting.Store(false)
			break
		}
		select {
		case <-s.idleCh:
		case <-s.quit:
			return false
		}
		s.waiting.Store(false)
	}
	return true
}

func (s *sched) init() {
	epoch := time.Now()
	s.clock = func() int64 { return int64(time.Since(epoch)) + 1 }
	s.wake = make(chan struct{}, 1)
	s.idleCh = make(chan struct{}, 1)
	s.quit = make(chan struct{})
	s.done = make(chan struct{})
}

// push gives q a turn after the QPs already waiting, unless it has one.
// Called with or without q.mu held; sched.mu is a leaf lock.
func (s *sched) push(q *QP) {
	s.mu.Lock()
	if !q.queued {
		q.queued = true
		if !q.bulk.Swap(true) {
			s.bulkQPs.Add(1)
		}
		s.fifo = append(s.fifo, q)
		s.waitingQPs.Add(1)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop takes the QP whose turn is next, or nil.
func (s *sched) pop() *QP {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == len(s.fifo) {
		return nil
	}
	q := s.fifo[s.head]
	s.fifo[s.head] = nil
	s.head++
	s.waitingQPs.Add(-1)
	if s.head == len(s.fifo) {
		s.fifo, s.head = s.fifo[:0], 0
	} else if s.head >= 1024 && 2*s.head >= len(s.fifo) {
		// Shift the waiting QPs down so the backing array stays within
		// twice the number of QPs with work.
		n := copy(s.fifo, s.fifo[s.head:])
		clear(s.fifo[n:])
		s.fifo, s.head = s.fifo[:n], 0
	}
	q.queued = false
	return q
}

// runSched is the scheduler's goroutine: it serves turns while the
// receive goroutine waits for packets, until Close.
func (d *Device) runSched() {
	s := &d.sched
	defer close(s.done)
	out := &txBatch{dev: d}
	var timer *time.Timer
	for {
		select {
		case <-s.wake:
		case <-s.quit:
			return
		}
		for {
			// While the receive goroutine handles packets it serves a
			// turn itself after each batch.
			if !s.waitIdle() {
				return
			}
			served, wait := d.serveShared(out)
			if wait > 0 {
				// The bulk work has had its share while other QPs are
				// active: the device's time (the CPU) is theirs for now.
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-s.quit:
					return
				}
				continue
			}
			if !served {
				break
			}
			// Run to completion between bursts: what arrived during the
			// burst is taken and answered here, by the goroutine that has
			// a CPU, before the next burst. Left to the receive goroutine
			// it waited for that goroutine to be woken and scheduled, and
			// for the link's send lock, which the bursts held: on two
			// busy CPUs, milliseconds for one in a hundred of a
			// legitimate connection's operations, half of its time
			// (bench/'s ReadFairness, execution traces). The receive
			// goroutine, woken by the same packets, finds them taken.
			d.tryReceive(false)
			select {
			case <-s.quit:
				return
			default:
			}
			// Let the other goroutines run between turns: on a machine
			// with few cores the loop would otherwise hold one until the
			// Go scheduler preempts it. (Gosched does not make the Go
			// scheduler poll the network: with GOMAXPROCS=1 a packet for
			// the receive goroutine waits for sysmon's poll, every 10 ms,
			// while turns are served; with two Ps or more the idle one
			// polls. The run-to-completion data path of a later issue,
			// which receives between bursts, removes the difference.)
			runtime.Gosched()
		}
	}
}

// serveTurn gives the next QP its turn; it reports false when none waits.
// It does not look at the share (tests that step the device).
func (d *Device) serveTurn(out *txBatch) bool {
	return d.serveTurnAt(out, false)
}

// serveShared gives the next QP its turn if the bulk work has time left
// in its share (timeShare); else it reports how long until it has.
func (d *Device) serveShared(out *txBatch) (served bool, wait time.Duration) {
	s := &d.sched
	if s.waitingQPs.Load() == 0 {
		return false, 0
	}
	var now int64
	active := false
	if q := s.activeQP.Load(); q != nil {
		now = s.clock()
		if now-s.activeAt.Load() >= shareActive {
			s.activeQP.CompareAndSwap(q, nil) // quiet: no clock until one is active again
		} else {
			// Unless the QP active last has bulk work of its own since: a
			// lone QP whose ACKs arrived between its bursts does not share
			// with itself.
			active = !q.bulk.Load()
		}
	}
	s.mu.Lock()
	wait = s.share.wait(now, active)
	s.mu.Unlock()
	if wait > 0 {
		return false, wait
	}
	return d.serveTurnAt(out, active), 0
}

// serveTurnAt serves the next QP's turn; with account (another QP is
// active), its time is charged to the share.
func (d *Device) serveTurnAt(out *txBatch, account bool) bool {
	s := &d.sched
	q := s.pop()
	if q == nil {
		return false
	}
	s.txMu.Lock()
	var t0 int64
	if account {
		t0 = s.clock()
	}
	out.budget, out.unlimited = burstBytes, false
	q.mu.Lock()
	more := q.serveBurst(out)
	if !more {
		// Unless a push since the pop gave q another turn.
		s.mu.Lock()
		if !q.queued && q.bulk.Swap(false) {
			s.bulkQPs.Add(-1)
			q.bulkEnd.Store(s.clock())
		}
		s.mu.Unlock()
	}
	q.mu.Unlock()
	out.release()
	var t1 int64
	if account {
		t1 = s.clock()
	}
	s.txMu.Unlock()
	if account {
		s.mu.Lock()
		s.share.spend(t1 - t0)
		s.mu.Unlock()
	}
	if more {
		s.push(q)
	}
	return true
}

// timeShare is a deficit counter of the bulk work's time, in nanoseconds:
// while another QP is active (had a packet in the last shareActive) the
// bulk turns may take shareNum/shareDen of the time, earned as the clock
// advances and spent by each turn's duration, at most shareCap ahead. A
// turn is served while the balance is not negative; a negative balance is
// time owed, waited for. With no other QP active the balance is full and
// the bulk work has the device to itself.
type timeShare struct {
	balance, at int64
}

// wait refills the balance to now and reports how long the next turn
// waits: 0 when it may go now.
func (t *timeShare) wait(now int64, active bool) time.Duration {
	if !active {
		t.balance, t.at = shareCap, 0
		return 0
	}
	if t.at == 0 {
		t.at = now
	} else if el := now - t.at; el > 0 {
		t.balance = min(t.balance+el*shareNum/shareDen, shareCap)
		t.at = now
	}
	if t.balance >= 0 {
		return 0
	}
	// Rounded up, so that the refill after the wait covers what is owed.
	return time.Duration((-t.balance*shareDen + shareNum - 1) / shareNum)
}

// spend charges a turn that took d nanoseconds.
func (t *timeShare) spend(d int64) {
	t.balance = max(t.balance-d, -shareCap)
}

// serveBurst sends up to one burst of q's pending work: responses first
// (they answer requests that arrived before anything the requester sends
// now), then the requester. It reports whether work is left. Called with
// q.mu held.
func (q *QP) serveBurst(out *txBatch) bool {
	if q.destroyed {
		return false
	}
	q.serveResponses(out)
	if q.req.more && (out.budget > 0 || out.unlimited) {
		q.req.more = false
		q.reqRun(out)
	}
	return q.resp.pend.len() > 0 || q.req.more
}

// drainSched serves every waiting turn on the calling goroutine, until no
// QP has work: for tests that run the device without its goroutine.
func (d *Device) drainSched() {
	out := getTxBatch(d)
	for d.serveTurn(out) {
	}
	putTxBatch(out)
}
