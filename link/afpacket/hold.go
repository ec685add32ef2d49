package afpacket

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Packets held while their next hop is resolved: the kernel's neighbour
// queue (arp_queue, unres_qlen_bytes), which a packet socket does not
// have. Send holds a copy of a packet whose next hop's MAC is being asked
// for and returns at once; a goroutine per next hop waits for the answer
// without any of the link's locks and sends what was held, or drops and
// counts it (tx_drop_no_route) when no answer comes. So the first packets
// to a new peer (a CM REP, a UD reply) are not lost to ARP, and no sender
// waits for it: before, Send waited for the resolution holding the link's
// lock, up to holdWait for a next hop that never answers, and every other
// packet of the device waited behind it.
//
// Bounded: holdBytes per destination and holdDests destinations at once,
// beyond which packets are dropped and counted as before; a next hop that
// has gone unanswered for longer than holdWait is not waited for again
// (neigh.LookupWait), so its packets are dropped at once after the first
// wait.

// holdWait is how long held packets wait for their next hop (a variable
// for the tests).
var holdWait = time.Second

const (
	// holdBytes bounds the bytes held for one destination: Linux's
	// default unres_qlen_bytes.
	holdBytes = 212992
	// holdDests bounds the destinations with packets held at once, each
	// with its waiting goroutine.
	holdDests = 64
)

type holdKey struct {
	dst netip.Addr
	v   wire.Version
}

type holdQueue struct {
	pkts  []link.Packet // copies, with the link's headroom
	bytes int
}

type holdState struct {
	mu     sync.Mutex
	queues map[holdKey]*holdQueue // guarded by mu
	n      atomic.Int32           // len(queues): Send's fast path looks at it alone
	ctx    context.Context        // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the waiting goroutines
}

func (h *holdState) init() {
	h.queues = make(map[holdKey]*holdQueue)
	h.ctx, h.cancel = context.WithCancel(context.Background())
}

// close stops the waiting goroutines and waits for them; what they held is
// dropped and counted.
func (h *holdState) close() {
	h.cancel()
	h.wg.Wait()
}

// holdFor holds a copy of pk until its next hop is resolved, starting the
// wait if none runs, and reports whether it did; false means pk is to be
// dropped (the bounds).
func (l *Link) holdFor(pk *link.Packet) bool {
	h := &l.hold
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return false
	}
	k := holdKey{pk.Addr.DstGID, pk.Addr.Version}
	q := h.queues[k]
	if q == nil {
		if len(h.queues) >= holdDests {
			return false
		}
		q = &holdQueue{}
		h.queues[k] = q
		h.n.Add(1)
		h.wg.Add(1)
		go l.resolveHeld(k)
	}
	return q.add(pk)
}

// holdBehind holds pk if packets to its destination are held, so that it
// does not overtake them (its next hop may have been resolved since they
// were held). handled is false when none are held; then held says nothing.
func (l *Link) holdBehind(pk *link.Packet) (handled, held bool) {
	h := &l.hold
	if h.n.Load() == 0 {
		return false, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[holdKey{pk.Addr.DstGID, pk.Addr.Version}]
	if q == nil {
		return false, false
	}
	return true, q.add(pk)
}

func (q *holdQueue) add(pk *link.Packet) bool {
	if q.bytes+pk.Len > holdBytes {
		return false
	}
	buf := make([]byte, pk.Off+pk.Len)
	copy(buf[pk.Off:], pk.Transport())
	q.pkts = append(q.pkts, link.Packet{Buf: buf, Off: pk.Off, Len: pk.Len, Addr: pk.Addr})
	q.bytes += pk.Len
	return true
}

// resolveHeld waits for k's next hop, then sends what is held for it, in
// the order held, until nothing more is (Send holds a packet to k behind
// them while any are); or drops and counts it.
func (l *Link) resolveHeld(k holdKey) {
	h := &l.hold
	defer h.wg.Done()
	_, err := l.res.LookupWaitContext(h.ctx, k.dst, k.v, holdWait)
	for {
		h.mu.Lock()
		q := h.queues[k]
		pkts := q.pkts
		q.pkts, q.bytes = nil, 0
		if len(pkts) == 0 {
			delete(h.queues, k)
			h.n.Add(-1)
		}
		h.mu.Unlock()
		if len(pkts) == 0 {
			return
		}
		if err != nil || l.closed.Load() {
			l.stats.TxNoRoute.Add(uint64(len(pkts)))
			continue
		}
		l.send(pkts, true)
	}
}
