package verbs

import (
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// recvWQE is a posted receive.
type recvWQE struct {
	wrID uint64
	sge  []SGE
}

// recvQueue is a FIFO of receives, a QP's RQ or an SRQ's queue.
type recvQueue struct {
	ring   []recvWQE // grows on demand up to max (see initialQueueSlots)
	head   int
	n      int
	max    int // max_recv_wr / max_wr
	maxSGE int
}

func (q *recvQueue) init(maxWR, maxSGE int) {
	q.ring = make([]recvWQE, min(maxWR, initialQueueSlots))
	q.max = maxWR
	q.maxSGE = maxSGE
}

func (q *recvQueue) push(wr *RecvWR) error {
	if len(wr.SGList) > q.maxSGE {
		return invalid("wr %d has %d SGEs, max_recv_sge is %d", wr.WRID, len(wr.SGList), q.maxSGE)
	}
	if q.n == q.max {
		return &Error{Detail: fmt.Sprintf("receive queue full (%d WRs posted)", q.n), Err: syscall.ENOMEM}
	}
	if q.n == len(q.ring) { // double the ring, the oldest receive first
		r := make([]recvWQE, min(2*len(q.ring), q.max))
		for i := range q.n {
			r[i] = q.ring[(q.head+i)%len(q.ring)]
		}
		q.ring, q.head = r, 0
	}
	e := &q.ring[(q.head+q.n)%len(q.ring)]
	e.wrID = wr.WRID
	e.sge = append(e.sge[:0], wr.SGList...)
	q.n++
	return nil
}

// peek returns the oldest receive without removing it.
func (q *recvQueue) peek() *recvWQE {
	if q.n == 0 {
		return nil
	}
	return &q.ring[q.head]
}

func (q *recvQueue) pop() {
	q.head = (q.head + 1) % len(q.ring)
	q.n--
}

// SRQ is a shared receive queue.
type SRQ struct {
	dev   *Device
	pd    *PD
	mu    sync.Mutex
	q     recvQueue // guarded by mu
	limit int       // guarded by mu: armed when > 0 (ibv_modify_srq srq_limit)
	dead  bool      // guarded by mu
}

// SRQAttr is struct ibv_srq_attr.
type SRQAttr struct {
	MaxWR    int
	MaxSGE   int
	SRQLimit int
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr SRQAttr) (*SRQ, error) {
	if attr.MaxWR < 1 || attr.MaxWR > MaxSRQWR {
		return nil, errorf("create_srq", pd.dev.name, 0, syscall.EINVAL, "max_wr %d outside 1..%d", attr.MaxWR, MaxSRQWR)
	}
	if attr.MaxSGE < 1 || attr.MaxSGE > MaxSRQSGE {
		return nil, errorf("create_srq", pd.dev.name, 0, syscall.EINVAL, "max_sge %d outside 1..%d", attr.MaxSGE, MaxSRQSGE)
	}
	if attr.SRQLimit < 0 || attr.SRQLimit > attr.MaxWR {
		return nil, errorf("create_srq", pd.dev.name, 0, syscall.EINVAL, "srq_limit %d outside 0..max_wr %d", attr.SRQLimit, attr.MaxWR)
	}
	s := &SRQ{dev: pd.dev, pd: pd, limit: attr.SRQLimit}
	s.q.init(attr.MaxWR, attr.MaxSGE)
	return s, nil
}

// PostRecv posts receives to the SRQ.
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return net.ErrClosed
	}
	for i := range wrs {
		if err := s.q.push(&wrs[i]); err != nil {
			return withOp(err, "post_srq_recv", s.dev.name, 0)
		}
	}
	return nil
}

// Arm sets the SRQ limit: when fewer than limit receives remain,
// IBV_EVENT_SRQ_LIMIT_REACHED is reported once and the limit disarms.
func (s *SRQ) Arm(limit int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit < 0 || limit > s.q.max {
		return errorf("modify_srq", s.dev.name, 0, syscall.EINVAL, "srq_limit %d outside 0..%d", limit, s.q.max)
	}
	s.limit = limit
	return nil
}

// Destroy destroys the SRQ.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	return nil
}

// take removes the oldest receive into dst; it reports false when empty.
func (s *SRQ) take(dst *recvWQE) bool {
	s.mu.Lock()
	e := s.q.peek()
	if e == nil {
		s.mu.Unlock()
		return false
	}
	dst.wrID = e.wrID
	dst.sge = append(dst.sge[:0], e.sge...)
	s.q.pop()
	fire := s.limit > 0 && s.q.n < s.limit
	if fire {
		s.limit = 0
	}
	n := s.q.n
	s.mu.Unlock()
	if fire {
		s.dev.events.post(AsyncEvent{Type: EventSRQLimitReached, Detail: fmt.Sprintf("%d receives left", n)})
	}
	return true
}

// txBatch collects packets to send and sends them in batches.
type txBatch struct {
	dev  *Device
	pkts []link.Packet
	bufs []*[]byte // pkts[i]'s buffer
	kept []*[]byte // buffers for the next packets (recycle)
	// bytes is the length of pkts[cut:counted], the packets of the batch
	// being filled that next has seen finished.
	bytes, counted int
	// cuts are where the batches that filled end: pkts[:cuts[0]] is one
	// link.Send, pkts[cuts[0]:cuts[1]] the next, and so on; pkts[cut:] is
	// the batch being filled. next cuts a full batch instead of sending
	// it, because its callers hold a QP's lock (q.mu) and the receive path
	// may hold the device's (rxMu): a Send waits for the link's own lock
	// behind every other sender, and while it waited with q.mu held the
	// receive path stalled on that QP and nobody read the ACKs (the 67 ms
	// holes of issue 15, BENCHMARKS.md). flush, called with no lock held,
	// sends them in order.
	cuts []int
	cut  int
	// lastACK is the QP whose positive ACK is pkts[lastACKAt-1], while
	// that is the batch's last packet (QP.ack coalesces into it).
	lastACK   *QP
	lastACKAt int
	// owned are the QPs whose request packets this batch holds (their
	// reqBatch): no other batch takes packets of theirs until release,
	// so a QP's packets reach the link in PSN order. spare is owned's
	// other buffer, for release.
	owned, spare []*QP
	// reqOwned: some QP's reqBatch is b (own), so b holds request
	// packets or a requester run deferred to its release.
	reqOwned bool
	// merged is flush's scratch: held ACKs and a Send's packets.
	merged []link.Packet
	// budget is how many more bytes of bulk work (READ responses, the
	// requester's packets) the goroutine filling the batch sends before it
	// hands the rest of a QP's work to the device's scheduler (sched.go).
	// unlimited: an application's own goroutine (PostSend), whose work is
	// its own; the budget does not apply.
	budget    int
	unlimited bool
	// qpCache is dispatch's last QP lookup (lookupQPFor).
	qpCache qpCacheEntry
}

// qpCacheEntry is a QP lookup: qpn's QP, while qpGen is gen.
type qpCacheEntry struct {
	num uint32
	q   *QP
	gen uint64
}

// txFlushBytes: next ends the batch (cuts: one link.Send each) once it
// holds this many bytes, even if the link would take more packets. Each packet is written (gather),
// then read twice (the link's ICRC, the kernel's copy); a batch small
// enough to stay in the L2 cache between those passes costs less CPU than
// the link's full batch of 64 packets (256 KiB at path MTU 4096, next to
// the source buffer streaming through). 64 KiB is about one GSO message's
// payload (maxGSOBytes in link/udp): at path MTU 4096 a batch is 16
// packets, one 64 KiB WRITE's (its FIRST and a message of 15). A longer
// run of equal packets (a 256 KiB WRITE, a stream of SENDs) now ends at
// each batch, in a message of 15 and one of 1 where 64 packets made 15,
// 15, 15, 15 and 4; the cache still wins.
//
// On the 2-vCPU benchmark VM (512 KiB of L2 per core), CPU per op in
// interleaved pairs of runs of bench/'s RCWrite64K, medians: 64 KiB
// WRITEs (8 pairs) 87.0 → 82.9 µs privileged, 85.4 → 81.9 µs
// unprivileged, 14 of the 16 pairs lower; 256 KiB WRITEs, 4 in flight (6
// pairs) 320 → 278 µs and 286 → 275 µs, 9 of the 12 lower. That is less
// than the VM's ±10% run-to-run spread: it shows in paired runs only.
const txFlushBytes = 64 << 10

var txBatchPool = sync.Pool{New: func() any { return new(txBatch) }}

// A round trip takes a batch and gives it back two or three times per side
// (the receive's, the answer's PostSend, the held ACKs'), and every packet
// a buffer: through sync.Pool, each Get or Put cost some 90 instructions,
// 725 per round trip of `roce perf send --lat` (bench/callgrind.sh), a
// twentieth of the path. So the device keeps spareBatches batches of its
// own, each keeping up to keepBufs of the buffers it last used; only what
// overflows those goes through the pools.
const (
	spareBatches = 2
	keepBufs     = 16 // a 64 KiB batch at path MTU 4096 (txFlushBytes)
)

func getTxBatch(d *Device) *txBatch {
	var b *txBatch
	for i := range d.spare {
		if b = d.spare[i].Take(); b != nil {
			break
		}
	}
	if b == nil {
		b = txBatchPool.Get().(*txBatch)
		b.dev = d
	}
	b.budget, b.unlimited = burstBytes, false
	return b
}

func putTxBatch(b *txBatch) {
	b.release()
	d := b.dev
	for i := range d.spare {
		if d.spare[i].Put(b) {
			return
		}
	}
	for i, bp := range b.kept {
		d.txPool.Put(bp)
		b.kept[i] = nil
	}
	b.kept = b.kept[:0]
	b.dev, b.qpCache = nil, qpCacheEntry{}
	txBatchPool.Put(b)
}

// own records that b holds q's next request packets. Called with q.mu held.
func (b *txBatch) own(q *QP) {
	if q.reqBatch == nil {
		q.reqBatch = b
		b.reqOwned = true
		if q.respBatch != b {
			b.owned = append(b.owned, q)
		}
	}
}

// release sends what b holds and gives its QPs back: each requester that
// another goroutine found held by b (reqDeferred) runs now, into b, until
// none is left, and a QP whose responses waited for b's gets its turn in
// the scheduler. Called with no QP lock held.
func (b *txBatch) release() {
	b.flush()
	for len(b.owned) > 0 {
		qs := b.owned
		b.owned, b.spare = b.spare[:0], nil
		for i, q := range qs {
			q.mu.Lock()
			if q.respBatch == b {
				q.respBatch = nil
				if q.resp.pend.len() > 0 {
					// Responses waited for b's to go out (respond).
					q.dev.sched.push(q)
				}
			}
			if q.reqBatch == b {
				q.reqBatch = nil
				if q.req.armOnSend {
					q.onSent() // q's packets in b are out (the flush above)
				}
				if q.reqDeferred {
					q.reqDeferred = false
					q.reqRun(b)
				}
			}
			q.mu.Unlock()
			qs[i] = nil
		}
		b.spare = qs[:0]
		b.flush()
	}
	b.reqOwned = false
}

// full reports whether the batch being filled is full: the link's batch
// size, or txFlushBytes. The next packet starts a new one.
func (b *txBatch) full() bool {
	for i := range b.pkts[b.counted:] {
		b.bytes += b.pkts[b.counted+i].Len
	}
	b.counted = len(b.pkts)
	return len(b.pkts)-b.cut >= b.dev.batchSize || b.bytes >= txFlushBytes
}

// next returns a fresh packet whose buffer has the link's headroom. It
// never sends (see cuts): a full batch is cut, and flush sends it.
func (b *txBatch) next() *link.Packet {
	if len(b.pkts) > b.cut && b.full() {
		b.cuts = append(b.cuts, len(b.pkts))
		b.cut, b.bytes = len(b.pkts), 0
	}
	var bp *[]byte
	if n := len(b.kept); n > 0 {
		bp, b.kept[n-1] = b.kept[n-1], nil
		b.kept = b.kept[:n-1]
	} else {
		bp = b.dev.txPool.Get().(*[]byte)
	}
	b.bufs = append(b.bufs, bp)
	h := b.dev.headroom
	n := len(b.pkts)
	if n == cap(b.pkts) {
		b.pkts = append(b.pkts, link.Packet{})
	}
	// The slot is set field by field, not from a composite literal (a
	// 250-byte copy): Parsed may be an earlier packet's, which a link
	// ignores on Send (link.Packet), and a receiver given these very
	// bytes trusts only when it describes them (wire.Packet.Holds).
	b.pkts = b.pkts[:n+1]
	pk := &b.pkts[n]
	pk.Buf, pk.Off, pk.Len, pk.Addr = (*bp)[:h], h, 0, link.Addr{}
	return pk
}

// finish completes the packet next returned: it sets Len from the bytes
// appended after the headroom and adds the ICRC's room.
func finish(pk *link.Packet, buf []byte) {
	buf = append(buf, 0, 0, 0, 0)
	pk.Buf = buf
	pk.Len = len(buf) - pk.Off
}

func (b *txBatch) flush() {
	if len(b.pkts) == 0 {
		return
	}
	// ACKs a CQ poller holds for the answer (ackhold.go) go with the
	// batch's first packets, after them, in the same Send when they fit:
	// an ACK is shorter than any request, so the link's UDP GSO takes it
	// into the message of the packets before it when they are of one size
	// (an answer of one packet and its ACK: one message, one trip through
	// the kernel's stack; link/udp).
	h := b.dev.takeHeld()
	start := 0
	for i := 0; i <= len(b.cuts); i++ {
		end := len(b.pkts)
		if i < len(b.cuts) {
			end = b.cuts[i]
		}
		switch {
		case h == nil:
			b.send(b.pkts[start:end])
		case end == len(b.pkts) && end-start+len(h.pkts) <= b.dev.batchSize:
			// The last range (the only one, mostly): the held packets
			// go after it in b.pkts itself, copied there, not both into
			// merged (a link.Packet is some 250 bytes), and come off
			// again; their copies past len stay, as next allows.
			b.pkts = append(b.pkts, h.pkts...)
			b.send(b.pkts[start:])
			b.pkts = b.pkts[:end]
		case end-start+len(h.pkts) <= b.dev.batchSize:
			b.merged = append(append(b.merged[:0], b.pkts[start:end]...), h.pkts...)
			b.send(b.merged)
			clear(b.merged)
			b.merged = b.merged[:0]
		default:
			b.send(b.pkts[start:end])
			h.send(h.pkts)
		}
		if h != nil {
			b.dev.sentHeld(h)
			h = nil
		}
		start = end
	}
	b.recycle()
}

// send hands pkts to the link in one Send. They are counted before they
// go: the peer may answer one (an ACK that completes a WR) before Send
// returns, and a program that reads the counters after that completion
// must see them. What Send did not send comes off again.
func (b *txBatch) send(pkts []link.Packet) {
	b.dev.counters[SentPkts].Add(uint64(len(pkts)))
	if n, _ := b.dev.link.Send(pkts); n < len(pkts) {
		b.dev.counters[SentPkts].Add(^uint64(len(pkts) - n - 1))
	}
}

// recycle keeps the packets' buffers for b's next packets, up to
// keepBufs, gives the rest back, and empties b, sent.
func (b *txBatch) recycle() {
	for i, bp := range b.bufs {
		if len(b.kept) < keepBufs {
			b.kept = append(b.kept, bp)
		} else {
			b.dev.txPool.Put(bp)
		}
		b.bufs[i] = nil
	}
	// b.pkts is not cleared: next sets what a packet to send needs, and
	// clearing cost 70 instructions a batch (bench/callgrind.sh). What its
	// slots keep alive are buffers (and addresses): at most one per slot,
	// and mostly those b keeps anyway.
	b.pkts = b.pkts[:0]
	b.bufs = b.bufs[:0]
	b.bytes, b.counted = 0, 0
	b.cuts, b.cut = b.cuts[:0], 0
	b.lastACK, b.lastACKAt = nil, 0
}

// appendHeaders appends the BTH and the extended headers of f's opcode to
// buf, with the pad count for a payload of paylen bytes.
func appendHeaders(buf []byte, f *wire.PacketFields, paylen int) []byte {
	start := len(buf)
	buf = f.AppendTransport(buf)
	wire.BTH(buf[start:]).SetPadCount((4 - paylen%4) % 4)
	return buf
}

// appendPad appends the pad bytes after a payload of paylen bytes.
func appendPad(buf []byte, paylen int) []byte {
	for i := (4 - paylen%4) % 4; i > 0; i-- {
		buf = append(buf, 0)
	}
	return buf
}
