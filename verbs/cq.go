package verbs

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// CQ is a completion queue. Completions are never dropped silently: when the
// queue is full the CQ enters the error state and IBV_EVENT_CQ_ERR is
// reported (IBTA §11.4.2.1, C11-12), and the completion that did not fit is
// counted in Overflows.
type CQ struct {
	dev  *Device
	cqe  int
	mu   sync.Mutex
	ring []WC // guarded by mu: a circular buffer of cqe entries
	head int  // guarded by mu
	n    int  // guarded by mu
	err  bool // guarded by mu: overflowed
	// overflows counts completions lost to overflow (after the CQ_ERR event).
	overflows int  // guarded by mu
	destroyed bool // guarded by mu
	notify    chan struct{}
	// waiters counts the goroutines in Wait: push wakes them through
	// notify, and skips the channel when there are none (a busy poller's
	// CQ). Wait counts itself before it looks at n under mu, push looks
	// at waiters after it raised n under mu: one of the two sees the other.
	waiters atomic.Int32
}

// CreateCQ creates a completion queue of at least cqe entries.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	if cqe < 1 || cqe > MaxCQE {
		return nil, errorf("create_cq", d.name, 0, syscall.EINVAL, "cqe %d outside 1..%d", cqe, MaxCQE)
	}
	if d.isClosed() {
		return nil, net.ErrClosed
	}
	return &CQ{dev: d, cqe: cqe, ring: make([]WC, cqe), notify: make(chan struct{}, 1)}, nil
}

// CQE returns the queue's capacity.
func (c *CQ) CQE() int { return c.cqe }

// push adds a completion; it reports false on overflow.
func (c *CQ) push(wc WC) bool {
	c.mu.Lock()
	if c.destroyed {
		c.mu.Unlock()
		return false
	}
	if c.n == len(c.ring) || c.err {
		first := !c.err
		c.err = true
		c.overflows++
		c.mu.Unlock()
		if first {
			c.dev.events.post(AsyncEvent{Type: EventCQErr,
				Detail: fmt.Sprintf("completion queue overflow: %d entries are not polled; completions are being lost", c.cqe)})
		}
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	c.mu.Unlock()
	if c.waiters.Load() > 0 {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
	return true
}

// Poll moves up to len(wc) completions into wc and returns how many, like
// ibv_poll_cq. After an overflow it returns an error once the queue is empty.
//
// A Poll that finds the queue empty drives the device itself: it takes
// what the link has received and handles it on the calling goroutine (run
// to completion), then looks again. A program that polls in a loop, as
// perftest does, thus does its device's work between its polls, and does
// not wait for the device's receive goroutine to be scheduled, which a
// spinning goroutine can keep from happening (Go's scheduler polls the
// network when a P has nothing else to run). Poll(nil) takes no completion
// and so always drives the link once: a loop that waits on something other
// than a completion (ib_write_lat's spin on its buffer) calls it between
// looks.
//
// The positive ACKs such a Poll's handling produces wait for the device's
// next send and leave with it, most often the answer the program posts on
// seeing the completion: one system call instead of two (ackhold.go). The
// next empty Poll, a Wait, Close or, after ackHoldFor (200 µs), a timer
// sends them if nothing else has.
func (c *CQ) Poll(wc []WC) (int, error) {
	n, err := c.poll(wc)
	if n == 0 && err == nil && c.dev.pollLink() {
		n, err = c.poll(wc)
	}
	return n, err
}

func (c *CQ) poll(wc []WC) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for k < len(wc) && c.n > 0 {
		wc[k] = c.ring[c.head]
		c.ring[c.head] = WC{}
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	if k == 0 && c.err {
		return 0, errorf("poll_cq", c.dev.name, 0, syscall.EOVERFLOW, "the CQ overflowed and lost %d completions", c.overflows)
	}
	return k, nil
}

// Wait blocks until the queue holds a completion (or has overflowed), or
// ctx ends. It is the Go form of ibv_req_notify_cq + ibv_get_cq_event.
func (c *CQ) Wait(ctx context.Context) error {
	c.waiters.Add(1)
	defer c.waiters.Add(-1)
	for {
		c.mu.Lock()
		ready, destroyed := c.n > 0 || c.err, c.destroyed
		c.mu.Unlock()
		if ready {
			return nil
		}
		if destroyed {
			return net.ErrClosed
		}
		// ACKs this goroutine's Poll held for an answer go before it
		// sleeps (ackhold.go).
		c.dev.flushHeld()
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PollWait waits for and polls at least one completion. It does not
// drive the link as Poll does: a goroutine about to sleep leaves the
// packets to the device's receive goroutine, which sleeps in the
// netpoller for them. (A look first costs a recvmmsg per wait that finds
// nothing, and showed no gain in paired rounds of bench/'s
// RCSendRecvRTT64/*/wait.)
func (c *CQ) PollWait(ctx context.Context, wc []WC) (int, error) {
	for {
		n, err := c.poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if err := c.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// Destroy destroys the CQ; Wait returns net.ErrClosed.
func (c *CQ) Destroy() error {
	c.mu.Lock()
	c.destroyed = true
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return nil
}
