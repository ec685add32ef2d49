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
// goroutine ran beside a busy
// receive goroutine instead, the two competed for the link and the CPU,
// and a connection doing small operations kept a third of its rate while
// another QP answered a READ of 256 MiB (bench/'s ReadFairness).

import (
	"runtime"
	"sync"
	"sync/atomic"
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
			if !d.serveTurn(out) {
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
			d.tryReceive()
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
func (d *Device) serveTurn(out *txBatch) bool {
	s := &d.sched
	q := s.pop()
	if q == nil {
		return false
	}
	s.txMu.Lock()
	out.budget, out.unlimited = burstBytes, false
	q.mu.Lock()
	more := q.serveBurst(out)
	q.mu.Unlock()
	out.release()
	s.txMu.Unlock()
	if more {
		s.push(q)
	}
	return true
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
