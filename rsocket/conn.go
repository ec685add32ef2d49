package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// Work request IDs, as rsocket.c makes them: a send's is its message (so
// its completion says what it freed), a receive's has bit 63 set.
const wrRecv = uint64(1) << 63

// extraRecvs receives are posted beyond rq_size, for the control messages
// that need no credits: a burst of them then finds a receive instead of
// an RNR NAK (whose wait is 655 ms at the CM's min_rnr_timer 0). Nothing
// of it shows on the wire.
const extraRecvs = 2 * ctrlSize

// defaultLinger is how long Close waits for its sends to complete.
const defaultLinger = 10 * time.Second

// state is a connection's state, as rsocket.c's rs_state bits.
type state uint8

const (
	stReadable     state = 1 << iota // rs_readable: data may still arrive
	stWritable                       // rs_writable: this side may still send
	stConnected                      // rs_connected: neither disconnected nor failed
	stDisconnected                   // rs_disconnected: RS_CTRL_DISCONNECT or the DREQ
)

// Conn is an rsocket stream: a net.Conn over one RC QP. Its methods may
// be called from any goroutine; Reads are serialized with each other, and
// so are Writes, as for a TCP connection.
type Conn struct {
	id     *rdmacm.ID
	ec     *rdmacm.EventChannel
	pd     *verbs.PD
	rcq    *verbs.CQ // receive completions: what the peer sent
	scq    *verbs.CQ // send completions: what this side's sends freed
	qp     *verbs.QP
	smr    *verbs.MR // sbuf: the send ring, then ctrlSize control slots
	rmr    *verbs.MR // rbuf: the receive ring (remote write)
	tmr    *verbs.MR // tbuf: the target SGL (remote write)
	sbuf   []byte
	rbuf   []byte
	tbuf   []byte
	p      params
	laddr  Addr
	raddr  Addr
	wg     sync.WaitGroup // the CM event goroutine
	rsem   chan struct{}  // one Read at a time
	wsem   chan struct{}  // one Write at a time
	recvWR []verbs.RecvWR // rq_size receives without SGEs, to repost
	ln     *Listener      // the listener that accepted it, if one did

	mu sync.Mutex
	// The connection's state and waiting, guarded by mu.
	st      state
	err     error // what ended the connection, if something did
	discard bool  // err is a protocol violation: no more data is read
	closing bool  // Close has begun: Read and Write return net.ErrClosed
	closed  bool  // resources are being released: nothing is posted any more
	bcast   chan struct{}
	waiters int  // goroutines waiting on bcast (the poller too)
	pollR   bool // a goroutine waits on rcq
	pollS   bool // a goroutine waits on scq
	rdl     deadline
	wdl     deadline
	linger  time.Duration // <0: default; 0: abortive
	keep    *time.Timer   // the keepalive timer, while SO_KEEPALIVE is on
	wcs     [32]verbs.WC
	sgl     [2]verbs.SGE

	// Sending, guarded by mu.
	sqeAvail  int    // send queue entries free for data
	sbufAvail int    // send ring bytes free
	sHead     int    // where the next data goes in the send ring
	sseqNo    uint16 // data messages sent
	sseqComp  uint16 // the peer's limit for sseqNo
	window    uint16 // the peer's credits in its connection data: how far ahead a limit may be
	tgt       [sglSize]sge
	tgtIdx    int       // the entry the next data message goes to
	sglNext   int       // the entry the peer's next SGL update writes
	ctrlSeq   uint32    // control messages posted
	ctrlMax   uint32    // ... may reach this (ctrlSize more than completed)
	remoteSGL sge       // the peer's target SGL: addr, key, entries
	remoteSge int       // the entry our next SGL update writes
	peerOrder byteOrder // the peer's byte order, for SGL updates
	peerIOMap int       // iomap entries the peer offers (unused)

	// Receiving, guarded by mu.
	rmsg      []uint32 // lengths of the data messages not yet read, a ring of rq_size+1
	rmHead    int
	rmTail    int
	rOff      int    // where the reader reads next in rbuf
	rFree     int    // where the next half to advertise starts
	rAvail    int    // bytes read but not yet advertised again
	rseqNo    uint16 // data messages read whole
	rseqComp  uint16 // when rseqNo reaches it, credits go back
	grant     uint16 // the limit granted: data messages the peer may have sent
	recvCount uint16 // data messages received
	curLeft   int    // bytes left in the half the peer is filling
	queued    int    // halves advertised beyond it
	toRepost  int    // receives completed, to post again
}

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// deadline is one of a connection's deadlines.
type deadline struct {
	t     time.Time
	timer *time.Timer
}

// set changes the deadline to t and wakes the waiters, whose wait it may
// end; when t comes, they are woken again. Called with c.mu held.
func (d *deadline) set(c *Conn, t time.Time) {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.t = t
	if !t.IsZero() {
		if wait := time.Until(t); wait > 0 {
			d.timer = time.AfterFunc(wait, func() {
				c.mu.Lock()
				c.broadcast()
				c.mu.Unlock()
			})
		}
	}
	c.broadcast()
}

func (d *deadline) expired() bool { return !d.t.IsZero() && !time.Now().Before(d.t) }

func (d *deadline) stop() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

// waitCtx is the context a poller waits on the CQ with: done is the
// broadcast channel, closed when anything changes that a waiter must see.
type waitCtx struct{ done chan struct{} }

func (w waitCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w waitCtx) Done() <-chan struct{}       { return w.done }
func (w waitCtx) Value(any) any               { return nil }
func (w waitCtx) Err() error {
	select {
	case <-w.done:
		return context.Canceled
	default:
		return nil
	}
}

// newConn makes a connection's resources on id's device, as rs_create_ep
// does: a PD, one CQ for sends and receives, the RC QP, the rings and the
// target SGL, and the posted receives.
func newConn(id *rdmacm.ID, p params) (c *Conn, err error) {
	dev := id.Device()
	if dev == nil {
		return nil, fmt.Errorf("rsocket: the CM ID has no device: %w", syscall.EINVAL)
	}
	c = &Conn{id: id, p: p, rsem: make(chan struct{}, 1), wsem: make(chan struct{}, 1), bcast: make(chan struct{}),
		st: stReadable | stWritable | stConnected, linger: -1, peerOrder: binary.LittleEndian}
	defer func() {
		if err != nil {
			c.freeMemory() // the QP is the ID's: the caller destroys it
			c = nil
		}
	}()
	if c.pd, err = dev.AllocPD(); err != nil {
		return c, err
	}
	// Two CQs where rsocket has one (nothing of it shows on the wire): a
	// reader waits for what the peer sent without waking for each of this
	// side's sends' completions.
	nrecv := p.rqSize + extraRecvs
	if c.rcq, err = dev.CreateCQ(nrecv); err != nil {
		return c, err
	}
	if c.scq, err = dev.CreateCQ(p.sqSize); err != nil {
		return c, err
	}
	init := verbs.QPInitAttr{Type: verbs.RC, SendCQ: c.scq, RecvCQ: c.rcq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: p.sqSize, MaxRecvWR: nrecv, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: p.inline}}
	if c.qp, err = id.CreateQP(c.pd, init); err != nil {
		return c, err
	}
	// The send ring and, after it, the control messages' slots
	// (rs_get_ctrl_buf); the receive ring; the target SGL. Each region is
	// exactly its buffer, so the peer can write nowhere else.
	c.sbuf = make([]byte, p.sbufSize+sgeLen*ctrlSize)
	c.rbuf = make([]byte, p.rbufSize)
	c.tbuf = make([]byte, sgeLen*sglSize)
	if c.smr, err = c.pd.RegMR(c.sbuf, verbs.AccessLocalWrite); err != nil {
		return c, err
	}
	if c.rmr, err = c.pd.RegMR(c.rbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return c, err
	}
	if c.tmr, err = c.pd.RegMR(c.tbuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return c, err
	}
	c.initState()
	c.recvWR = make([]verbs.RecvWR, nrecv)
	for i := range c.recvWR {
		c.recvWR[i].WRID = wrRecv
	}
	if err = c.qp.PostRecv(c.recvWR...); err != nil {
		return c, err
	}
	return c, nil
}

// initState sets the counters of a new connection (rs_init_bufs): the
// first half of the receive ring goes in the connection data, the second
// is free to advertise at once.
func (c *Conn) initState() {
	half := c.p.rbufSize / 2
	c.sbufAvail = c.p.sbufSize
	c.rFree, c.rAvail = half, half
	c.curLeft = half
	c.sqeAvail = c.p.sqSize - ctrlSize
	c.ctrlMax = ctrlSize
	c.rseqComp = uint16(c.p.rqSize >> 1)
	c.grant = uint16(c.p.rqSize)
	c.rmsg = make([]uint32, c.p.rqSize+1)
}

// connData is this side's connection data (rs_format_conn_data).
func (c *Conn) connData() []byte {
	return connData{
		version:   protoVersion,
		flags:     flagIOMap, // little-endian; no iomap space (target_iomap_size 0)
		credits:   uint16(c.p.rqSize),
		targetSGL: sge{addr: c.tmr.Addr(), key: c.tmr.RKey(), len: sglSize},
		dataBuf:   sge{addr: c.rmr.Addr(), key: c.rmr.RKey(), len: uint32(c.p.rbufSize / 2)},
	}.append(nil)
}

// saveConnData takes in the peer's connection data (rs_save_conn_data),
// checking what this side relies on.
func (c *Conn) saveConnData(b []byte) error {
	d, err := parseConnData(b)
	if err != nil {
		return &ProtocolError{Violation: err.Error()}
	}
	if d.version != protoVersion {
		return &ProtocolError{Violation: fmt.Sprintf("connection data version %d: rsocket's stream protocol is version %d", d.version, protoVersion)}
	}
	if d.targetSGL.len == 0 || d.targetSGL.len > 1<<16 {
		return &ProtocolError{Violation: fmt.Sprintf("connection data's target SGL has %d entries: 1 to 65536, rsocket's has %d", d.targetSGL.len, sglSize)}
	}
	if d.dataBuf.len == 0 {
		return &ProtocolError{Violation: "connection data's first receive buffer (data_buf) is empty"}
	}
	c.remoteSGL = d.targetSGL
	c.remoteSge = 1
	if d.flags&flagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	if d.flags&flagIOMap != 0 {
		c.peerIOMap = scaleToValue(d.iomapSize)
	}
	c.tgt[0] = d.dataBuf
	c.tgtIdx, c.sglNext = 0, 1
	c.sseqComp = d.credits
	c.window = d.credits
	return nil
}

// watchEvents starts the goroutine that reads the connection's CM events
// (on ec, the ID's own channel) until Close.
func (c *Conn) watchEvents(ec *rdmacm.EventChannel) {
	c.ec = ec
	c.laddr, c.raddr = Addr{c.id.LocalAddr()}, Addr{c.id.RemoteAddr()}
	c.wg.Add(1)
	go c.watch()
}

// begin starts the established connection's keepalives and sends its
// first credits (the second half of the ring).
func (c *Conn) begin() {
	c.mu.Lock()
	if c.p.keepAlive > 0 {
		c.armKeepalive()
	}
	c.progress()
	c.mu.Unlock()
}

// watch reads the connection's CM events until Close.
func (c *Conn) watch() {
	defer c.wg.Done()
	for {
		e, err := c.ec.Get(context.Background())
		if err != nil {
			return // closed
		}
		switch e.Type {
		case rdmacm.EventEstablished:
			if c.ln != nil {
				c.ln.established(c)
			}
		case rdmacm.EventUnreachable, rdmacm.EventRejected, rdmacm.EventConnectError, rdmacm.EventDisconnected:
			if c.ln != nil && c.ln.failed(c, e) {
				// Accepted but never established: the listener let it go.
				c.mu.Lock()
				c.closing, c.closed = true, true
				c.mu.Unlock()
				c.id.Destroy()
				c.ec.Close()
				c.freeMemory()
				return
			}
			if e.Type == rdmacm.EventDisconnected {
				// The peer's DREQ (rs_handle_cm_event): the peer is gone.
				c.mu.Lock()
				if c.st&stConnected != 0 {
					c.st = stDisconnected
				}
				c.broadcast()
				c.mu.Unlock()
			}
		case rdmacm.EventDeviceRemoval:
			c.mu.Lock()
			c.fail(fmt.Errorf("rsocket: the connection's device was removed: %w", syscall.ENODEV), false)
			c.mu.Unlock()
		}
	}
}

// broadcast wakes every waiter. Called with c.mu held.
func (c *Conn) broadcast() {
	if c.waiters > 0 {
		close(c.bcast)
		c.bcast = make(chan struct{})
	}
}

// fail ends the connection with err; a protocol violation (discard) also
// drops the data not yet read. The QP goes to the error state so the peer
// can write nothing more. Called with c.mu held.
func (c *Conn) fail(err error, discard bool) {
	if c.err != nil {
		return
	}
	c.err, c.discard = err, discard
	c.st &^= stConnected | stReadable | stWritable
	if discard {
		c.rmHead = c.rmTail
	}
	if !c.closed {
		c.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	}
	c.broadcast()
}

// await waits until cond holds, polling a CQ (one goroutine at a time per
// CQ) or waiting for the goroutine that does: on the send CQ if onSend
// says that what is missing comes from this side's sends completing (send
// queue entries, send ring space, control slots), or if credits wait for a
// control slot (creditsWaitSlot), else on the receive CQ. It returns
// net.ErrClosed once Close has begun (unless closing allows it, for Close
// itself) and os.ErrDeadlineExceeded when dl passes.
// Called with c.mu held, returns with it held.
func (c *Conn) await(dl *deadline, cond func() bool, closing bool, onSend func() bool) error {
	if cond() {
		return nil
	}
	for {
		c.progress()
		if cond() {
			return nil
		}
		if c.closed || c.closing && !closing {
			return net.ErrClosed
		}
		if dl.expired() {
			return os.ErrDeadlineExceeded
		}
		ch := c.bcast
		c.waiters++
		cq, polling := c.rcq, &c.pollR
		if onSend != nil && onSend() || c.creditsWaitSlot() {
			cq, polling = c.scq, &c.pollS
		}
		if !*polling {
			*polling = true
			c.mu.Unlock()
			cq.Wait(waitCtx{ch})
			c.mu.Lock()
			*polling = false
			c.waiters--
			if c.waiters > 0 {
				// Someone else may poll now (or has news of its own).
				c.broadcast()
			}
			continue
		}
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		c.waiters--
	}
}

// sendsPending reports whether sending waits for this side's sends to
// complete: no send queue entry or send ring space free.
func (c *Conn) sendsPending() bool {
	return c.sqeAvail == 0 || c.sbufAvail < min(sndLowat, c.p.sbufSize)
}

func always() bool { return true }

// acquire takes sem (a Read's or Write's turn) unless dl passes or Close
// begins first.
func (c *Conn) acquire(sem chan struct{}, dl *deadline) error {
	select {
	case sem <- struct{}{}:
		return nil
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closing {
			return net.ErrClosed
		}
		if dl.expired() {
			return os.ErrDeadlineExceeded
		}
		ch := c.bcast
		c.waiters++
		c.mu.Unlock()
		select {
		case sem <- struct{}{}:
			c.mu.Lock()
			c.waiters--
			return nil
		case <-ch:
		}
		c.mu.Lock()
		c.waiters--
	}
}

// check is what every Read and Write checks first, as a socket's do:
// Close has begun, or the deadline has passed (even with data ready).
func (c *Conn) check(dl *deadline) error {
	if c.closing {
		return net.ErrClosed
	}
	if dl.expired() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rsocket", Source: c.laddr, Addr: c.raddr, Err: err}
}

// Read reads what the peer sent: the data already in the receive ring, or
// waits for some. After the peer's shutdown or close it returns what is
// left, then io.EOF; after a protocol violation, the *ProtocolError.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.acquire(c.rsem, &c.rdl); err != nil {
		return 0, c.opError("read", err)
	}
	defer func() { <-c.rsem }()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(&c.rdl); err != nil {
		return 0, c.opError("read", err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.await(&c.rdl, c.readable, false, nil); err != nil {
		return 0, c.opError("read", err)
	}
	n := c.copyOut(p)
	if n == 0 && c.err == nil {
		// The peer's DREQ (DISCONNECTED, on the event goroutine) can end
		// the state before this side has polled the data that came before
		// it: the peer's sends had all completed, so it is in the CQ.
		c.progress()
		n = c.copyOut(p)
	}
	if n > 0 {
		c.updateCredits()
		return n, nil
	}
	if c.err != nil {
		return 0, c.opError("read", c.err)
	}
	return 0, io.EOF
}

// readable reports whether Read can return: data, or no more to come.
func (c *Conn) readable() bool {
	return c.rmHead != c.rmTail || c.st&stReadable == 0 || c.err != nil
}

// copyOut copies queued data into p (rrecv's loop) and returns how much.
func (c *Conn) copyOut(p []byte) int {
	n := 0
	for n < len(p) && c.rmHead != c.rmTail {
		size := int(c.rmsg[c.rmHead])
		if left := len(p) - n; left < size {
			size = left
			c.rmsg[c.rmHead] -= uint32(left)
		} else {
			c.rseqNo++
			if c.rmHead++; c.rmHead == len(c.rmsg) {
				c.rmHead = 0
			}
		}
		if c.rOff == len(c.rbuf) {
			c.rOff = 0
		}
		// A message never crosses the end of the ring (the peer never
		// splits one across two buffers), so one copy does.
		k := copy(p[n:n+size], c.rbuf[c.rOff:])
		c.rOff += k
		c.rAvail += k
		n += k
		if k < size {
			// Unreachable by the checks in complete; never read past the ring.
			c.fail(fmt.Errorf("rsocket: internal error: a message runs past the end of the receive ring: %w", syscall.EIO), true)
			return n
		}
	}
	return n
}

// Write sends p: it returns once every byte is posted (in the send ring or
// inline), like a write to a socket, or with how much was posted and
// why not the rest.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.acquire(c.wsem, &c.wdl); err != nil {
		return 0, c.opError("write", err)
	}
	defer func() { <-c.wsem }()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(&c.wdl); err != nil {
		return 0, c.opError("write", err)
	}
	if len(p) == 0 {
		if err := c.writeErr(); err != nil {
			return 0, c.opError("write", err)
		}
		return 0, nil
	}
	n := 0
	for n < len(p) {
		if err := c.await(&c.wdl, c.writable, false, c.sendsPending); err != nil {
			return n, c.opError("write", err)
		}
		if err := c.writeErr(); err != nil {
			return n, c.opError("write", err)
		}
		k, err := c.writeData(p[n:])
		n += k
		if err != nil {
			return n, c.opError("write", err)
		}
	}
	return n, nil
}

// writable reports whether Write can go on: room to send a data message,
// or no sending any more (rs_conn_can_send).
func (c *Conn) writable() bool { return c.canSend() || c.st&stWritable == 0 || c.err != nil }

// canSend is rs_can_send: a send queue entry, 2 KiB of send ring, a
// credit, and room in the current target entry.
func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= min(sndLowat, c.p.sbufSize) && c.sseqNo != c.sseqComp && c.tgt[c.tgtIdx].len != 0
}

// writeErr says why this side can no longer send, or nil.
func (c *Conn) writeErr() error {
	switch {
	case c.err != nil:
		return c.err
	case c.st&stWritable != 0:
		return nil
	case c.st&stDisconnected != 0:
		return syscall.ECONNRESET // the peer closed: rsend's ECONNRESET
	}
	return syscall.EPIPE // CloseWrite
}

// writeData posts one data message from the start of p (rsend's loop body)
// and returns its length.
func (c *Conn) writeData(p []byte) (int, error) {
	t := &c.tgt[c.tgtIdx]
	size := min(len(p), maxTransfer, c.sbufAvail, int(t.len))
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, RemoteAddr: t.addr, RKey: t.key}
	m := mkMsg(opData, uint32(size))
	wr.WRID, wr.ImmData = uint64(m), uint32(m)
	if size <= c.p.inline {
		wr.Flags = verbs.SendInline
		wr.InlineData = p[:size]
	} else {
		// Into the send ring at its head, wrapping into two SGEs.
		first := min(size, c.p.sbufSize-c.sHead)
		copy(c.sbuf[c.sHead:], p[:first])
		c.sgl[0] = c.smr.SGE(c.sHead, first)
		wr.SGList = c.sgl[:1]
		if first < size {
			copy(c.sbuf, p[first:size])
			c.sgl[1] = c.smr.SGE(0, size-first)
			wr.SGList = c.sgl[:2]
		}
		c.sHead = (c.sHead + size) % c.p.sbufSize
	}
	c.sent(size)
	if err := c.qp.PostSend(wr); err != nil {
		err = fmt.Errorf("rsocket: posting data: %w", err)
		c.fail(err, false)
		return 0, err
	}
	return size, nil
}

// sent counts a data message of size bytes as posted (rs_write_data):
// a credit, a send queue entry and its send ring bytes are taken, and the
// target entry moves on (before the post: the peer may update the entry
// as soon as the message lands).
func (c *Conn) sent(size int) {
	t := &c.tgt[c.tgtIdx]
	c.sseqNo++
	c.sqeAvail--
	c.sbufAvail -= size
	t.addr += uint64(size)
	t.len -= uint32(size)
	if t.len == 0 {
		c.tgtIdx = (c.tgtIdx + 1) % sglSize
	}
}

// ctrlAvail is rs_ctrl_avail: a control message may be posted.
func (c *Conn) ctrlAvail() bool { return c.ctrlSeq != c.ctrlMax }

// postMsg posts a control message: a 0-byte RDMA WRITE WITH IMMEDIATE
// (rs_post_msg). The caller has counted it in ctrlSeq.
func (c *Conn) postMsg(m msg) error {
	return c.qp.PostSend(verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(m)})
}

// updateCredits is rs_update_credits: credits (and the free half of the
// ring) go back to the peer once a half is free or half of rq_size
// messages have been read since the last grant.
func (c *Conn) updateCredits() {
	if !c.ctrlAvail() || !c.creditsDue() {
		return
	}
	// rs_send_credits.
	c.ctrlSeq++
	m, buf, withBuf := c.grantCredits()
	var err error
	if withBuf {
		s := sge{addr: c.rmr.Addr() + uint64(buf), key: c.rmr.RKey(), len: uint32(c.p.rbufSize / 2)}
		slot := c.p.sbufSize + sgeLen*int(c.ctrlSeq&(ctrlSize-1))
		appendSGE(c.sbuf[slot:slot], s, c.peerOrder)
		c.sgl[0] = c.smr.SGE(slot, sgeLen)
		err = c.qp.PostSend(verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(m),
			SGList: c.sgl[:1], RemoteAddr: c.remoteSGL.addr + uint64(c.prevSge())*sgeLen, RKey: c.remoteSGL.key})
	} else {
		err = c.postMsg(m)
	}
	if err != nil {
		c.fail(fmt.Errorf("rsocket: posting credits: %w", err), false)
	}
}

// creditsDue reports whether updateCredits has something to return: a
// free half of the ring, or half of rq_size messages read since the last
// grant.
func (c *Conn) creditsDue() bool {
	if c.closed || c.st&stConnected == 0 {
		return false
	}
	return c.rAvail >= c.p.rbufSize/2 || int16(c.rseqNo-c.rseqComp) >= 0
}

// creditsWaitSlot reports whether credits are due but every control slot
// is in flight. The slot comes back with a control message's send
// completion, so whoever waits must wait on the send CQ: waiting on the
// receive CQ for data the peer cannot send without those credits would
// wait for ever (rsocket.c polls one CQ for both, and cannot).
func (c *Conn) creditsWaitSlot() bool { return !c.ctrlAvail() && c.creditsDue() }

// grantCredits does the bookkeeping of an RS_OP_SGL (rs_send_credits):
// the new limit, and, when half of the ring is free, that half (at offset
// buf of the ring) for the peer's target entry after the one it last had.
func (c *Conn) grantCredits() (m msg, buf int, withBuf bool) {
	half := c.p.rbufSize / 2
	c.rseqComp = c.rseqNo + uint16(c.p.rqSize>>1)
	m = mkMsg(opSGL, uint32(c.rseqNo)+uint32(c.p.rqSize))
	c.grant = c.rseqNo + uint16(c.p.rqSize)
	if c.rAvail < half {
		return m, 0, false
	}
	buf = c.rFree
	c.rAvail -= half
	if c.rFree += half; c.rFree >= c.p.rbufSize {
		c.rFree = 0
	}
	if c.remoteSge++; c.remoteSge == int(c.remoteSGL.len) {
		c.remoteSge = 0
	}
	c.queued++
	return m, buf, true
}

// prevSge is the peer's target entry the last grantCredits filled.
func (c *Conn) prevSge() int {
	if c.remoteSge == 0 {
		return int(c.remoteSGL.len) - 1
	}
	return c.remoteSge - 1
}

// progress polls the CQ and handles what completed (rs_poll_cq), reposts
// the receives and returns credits. Called with c.mu held.
func (c *Conn) progress() {
	if c.closed {
		return
	}
	changed := false
	for _, cq := range []*verbs.CQ{c.scq, c.rcq} {
		for {
			n, err := cq.Poll(c.wcs[:])
			if err != nil {
				c.fail(fmt.Errorf("rsocket: %w", err), false)
				return
			}
			for i := range c.wcs[:n] {
				c.complete(&c.wcs[i])
				c.wcs[i] = verbs.WC{}
			}
			changed = changed || n > 0
			if n < len(c.wcs) {
				break
			}
		}
	}
	if c.toRepost > 0 && c.st&stConnected != 0 {
		if err := c.qp.PostRecv(c.recvWR[:c.toRepost]...); err != nil {
			c.fail(fmt.Errorf("rsocket: reposting receives: %w", err), false)
		}
		c.toRepost = 0
	}
	c.updateCredits()
	if changed {
		c.broadcast()
	}
}

// violation ends the connection for a protocol violation.
func (c *Conn) violation(format string, args ...any) {
	c.fail(&ProtocolError{Violation: fmt.Sprintf(format, args...)}, true)
}

// complete handles one completion.
func (c *Conn) complete(wc *verbs.WC) {
	if wc.WRID&wrRecv != 0 {
		c.completeRecv(wc)
		return
	}
	m := msg(wc.WRID)
	switch m.op() {
	case opSGL, opCtrl:
		c.ctrlMax++
		if m.op() == opCtrl && m.data() == ctrlDisconnect && c.st&stConnected != 0 {
			c.st = stDisconnected
		}
	default:
		c.sqeAvail++
		c.sbufAvail += int(m.data())
	}
	if wc.Status != verbs.WCSuccess && c.err == nil && !c.closed {
		switch {
		case wc.Status == verbs.WCWRFlushErr && c.st&stConnected == 0:
			// Flushed after the connection ended.
		case wc.Status == verbs.WCWRFlushErr:
			c.qpFailed(wc)
		default:
			c.fail(fmt.Errorf("rsocket: %v failed: %v%s: %w", m, wc.Status, detail(wc), syscall.EIO), false)
		}
	}
}

// qpFailed ends the connection whose QP went to the error state without
// this side's doing: wc is a work request it flushed.
func (c *Conn) qpFailed(wc *verbs.WC) {
	c.fail(fmt.Errorf("rsocket: the connection's QP %#x entered the error state: "+
		"the peer's request broke this side's memory protection (an RDMA WRITE outside the buffers it was given) or the transport failed: %v%s: %w",
		c.qp.Num(), wc.Status, detail(wc), syscall.ECONNRESET), false)
}

func detail(wc *verbs.WC) string {
	if wc.Detail == "" {
		return ""
	}
	return " (" + wc.Detail + ")"
}

// completeRecv handles a message from the peer, checking it.
func (c *Conn) completeRecv(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		switch {
		case c.err != nil || c.st&stConnected == 0 || c.closed:
		case wc.Status == verbs.WCWRFlushErr:
			c.qpFailed(wc)
		default:
			c.fail(fmt.Errorf("rsocket: the connection's QP %#x entered the error state: a receive failed: %v%s: %w",
				c.qp.Num(), wc.Status, detail(wc), syscall.ECONNRESET), false)
		}
		return
	}
	c.toRepost++
	if c.discard {
		// A protocol violation ended the connection and dropped the data
		// not read: what completed after it (already in the CQ when the
		// QP went to the error state) is dropped too, or Read would
		// return its length of bytes from where the dropped messages lay.
		return
	}
	if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
		c.violation("a message received as %v (%d bytes, a SEND): rsocket sends only RDMA WRITE WITH IMMEDIATE (RS_OPT_MSG_SEND, iWARP's SENDs, is not supported)", wc.Opcode, wc.ByteLen)
		return
	}
	m := msg(wc.ImmData)
	switch m.op() {
	case opData:
		c.recvData(m.data(), wc.ByteLen)
	case opSGL:
		c.recvSGL(m.data(), wc.ByteLen)
	case opCtrl:
		if wc.ByteLen != 0 {
			c.violation("%v with %d bytes of data: control messages carry none", m, wc.ByteLen)
			return
		}
		switch m.data() {
		case ctrlDisconnect:
			if c.st&stConnected != 0 {
				c.st = stDisconnected
			}
		case ctrlShutdown:
			// The peer sends no more: reads end once the ring is empty.
			if c.st&stWritable != 0 {
				c.st &^= stReadable
			} else if c.st&stConnected != 0 {
				c.st = stDisconnected
			}
		case ctrlKeepalive:
			// rsocket never sends it as an immediate; harmless.
		default:
			c.violation("unknown control message %d (RS_CTRL_DISCONNECT 0, RS_CTRL_KEEPALIVE 1, RS_CTRL_SHUTDOWN 2)", m.data())
		}
	case opIOMapSGL:
		c.violation("RS_OP_IOMAP_SGL (entry %d): iomapped buffers (riomap, riowrite) are not supported; this side advertised no iomap space (target_iomap_size 0)", m.data()&0xFFFF)
	case opWrite:
		c.violation("RS_OP_WRITE (immediate %#08x): rsocket's direct (iomap) writes carry no immediate", uint32(m))
	default:
		c.violation("message type %v (immediate %#08x) is reserved", m.op(), uint32(m))
	}
}

// recvData queues a data message, checking it against the credits granted
// and the buffer it had to go to.
func (c *Conn) recvData(n, byteLen uint32) {
	if n != byteLen {
		c.violation("RS_OP_DATA says %d bytes, but the RDMA WRITE carried %d", n, byteLen)
		return
	}
	c.recvCount++
	if d := int32(int16(c.recvCount - c.grant)); d > 0 {
		c.violation("data message %d is beyond the credits granted (the peer may send up to message %d)", c.recvCount, c.grant)
		return
	}
	if c.curLeft == 0 && c.queued > 0 && n > 0 {
		// The peer has filled its buffer and moved to the next one.
		c.queued--
		c.curLeft = c.p.rbufSize / 2
	}
	if int(n) > c.curLeft {
		if c.curLeft == 0 {
			c.violation("RS_OP_DATA of %d bytes beyond the receive buffers advertised (both halves of the ring are full)", n)
		} else {
			c.violation("RS_OP_DATA of %d bytes overruns the receive buffer it was written to (%d bytes were left in it)", n, c.curLeft)
		}
		return
	}
	c.curLeft -= int(n)
	if n == 0 {
		c.rseqNo++ // nothing to read: consumed at once
		return
	}
	c.rmsg[c.rmTail] = n
	if c.rmTail++; c.rmTail == len(c.rmsg) {
		c.rmTail = 0
	}
}

// recvSGL takes in credits and, if the write carried one, a receive
// buffer in the next target entry.
func (c *Conn) recvSGL(credits, byteLen uint32) {
	comp := uint16(credits)
	if ahead := comp - c.sseqNo; ahead > c.window {
		c.violation("RS_OP_SGL grants credits up to message %d, %d beyond the %d sent; the peer's window (its credits) is %d",
			comp, ahead, c.sseqNo, c.window)
		return
	}
	switch byteLen {
	case 0:
	case sgeLen:
		slot := c.sglNext
		if c.tgt[slot].len != 0 {
			c.violation("RS_OP_SGL updated target SGL entry %d, which still holds %d bytes of the previous buffer", slot, c.tgt[slot].len)
			return
		}
		s := parseSGE(c.tbuf[slot*sgeLen:], binary.LittleEndian)
		if s.len == 0 {
			c.violation("RS_OP_SGL wrote an empty receive buffer into target SGL entry %d", slot)
			return
		}
		c.tgt[slot] = s
		c.sglNext = (slot + 1) % sglSize
	default:
		c.violation("RS_OP_SGL wrote %d bytes: an SGL update is one %d-byte rs_sge, or none", byteLen, sgeLen)
		return
	}
	c.sseqComp = comp
}

// allSent is rs_conn_all_sends_done: every send has completed.
func (c *Conn) allSent() bool {
	return int(c.ctrlMax-c.ctrlSeq)+c.sqeAvail == c.p.sqSize || c.st&stConnected == 0 || c.err != nil
}

// shutdown sends ctrl once a control slot is free (rshutdown's message);
// the state is updated by the caller. It returns net.ErrClosed and
// deadline errors of the wait.
func (c *Conn) shutdown(dl *deadline, ctrl uint32, closing bool) error {
	if err := c.await(dl, func() bool { return c.ctrlAvail() || c.st&stConnected == 0 || c.err != nil }, closing, always); err != nil {
		return err
	}
	if c.st&stConnected == 0 || c.err != nil {
		return nil
	}
	c.ctrlSeq++
	if err := c.postMsg(mkMsg(opCtrl, ctrl)); err != nil {
		c.fail(fmt.Errorf("rsocket: posting %s: %w", ctrlName(ctrl), err), false)
		return err
	}
	return nil
}

// CloseWrite is shutdown(SHUT_WR): the peer reads what was sent, then end
// of file; this side may still read. Writes fail with EPIPE.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	if c.st&stWritable == 0 || c.st&stConnected == 0 {
		return nil
	}
	c.st &^= stWritable
	ctrl := uint32(ctrlShutdown)
	if c.st&stReadable == 0 {
		ctrl = ctrlDisconnect
	}
	c.broadcast()
	if err := c.shutdown(&c.wdl, ctrl, false); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// CloseRead is shutdown(SHUT_RD): Reads return io.EOF; if this side no
// longer writes either, the peer is told (RS_CTRL_DISCONNECT).
func (c *Conn) CloseRead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return c.opError("close", net.ErrClosed)
	}
	if c.st&stReadable == 0 || c.st&stConnected == 0 {
		return nil
	}
	c.st &^= stReadable
	c.broadcast()
	if c.st&stWritable != 0 {
		return nil
	}
	if err := c.shutdown(&c.rdl, ctrlDisconnect, false); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// SetLinger sets what Close does with sends not yet complete, as
// SO_LINGER: sec < 0 (the default) waits up to 10 s for them after
// telling the peer (RS_CTRL_DISCONNECT); sec > 0 waits up to sec seconds;
// sec == 0 closes at once, without telling the peer anything but the
// DREQ, and what was in flight may be lost.
func (c *Conn) SetLinger(sec int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case sec < 0:
		c.linger = -1
	default:
		c.linger = time.Duration(sec) * time.Second
	}
	return nil
}

// Close closes the connection: pending and later Reads and Writes return
// net.ErrClosed; unless SetLinger(0) said otherwise, it tells the peer
// (RS_CTRL_DISCONNECT) and waits up to the linger time for the sends to
// complete, as rclose does; then the QP and the CM ID are destroyed (the
// DREQ) and the memory deregistered. It returns an error if the linger
// time ran out with sends not acknowledged.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return c.opError("close", net.ErrClosed)
	}
	c.closing = true
	c.stopKeepalive()
	c.broadcast()
	var err error
	if c.st&stConnected != 0 && c.err == nil && c.linger != 0 {
		linger := c.linger
		if linger < 0 {
			linger = defaultLinger
		}
		var dl deadline
		dl.set(c, time.Now().Add(linger))
		// rshutdown(SHUT_RDWR).
		c.st &^= stReadable | stWritable
		if err = c.shutdown(&dl, ctrlDisconnect, true); err == nil {
			err = c.await(&dl, c.allSent, true, always)
		}
		dl.stop()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("rsocket: closed after the linger time of %v with sends not acknowledged by %v: %w", linger, c.raddr, syscall.ETIMEDOUT)
		}
	}
	c.closed = true
	c.rdl.stop()
	c.wdl.stop()
	c.broadcast()
	c.mu.Unlock()
	c.release()
	if err != nil {
		return c.opError("close", err)
	}
	return nil
}

// release destroys the connection's resources: the CM ID (which sends the
// DREQ, or the DREP) and its QP, the event goroutine, the memory regions
// and the CQ.
func (c *Conn) release() {
	if c.id != nil {
		c.id.Destroy()
	}
	if c.ec != nil {
		c.ec.Close()
	}
	c.wg.Wait()
	c.freeMemory()
}

// freeMemory deregisters the memory regions and destroys the CQ.
func (c *Conn) freeMemory() {
	for _, mr := range []*verbs.MR{c.smr, c.rmr, c.tmr} {
		if mr != nil {
			mr.Dereg()
		}
	}
	for _, cq := range []*verbs.CQ{c.rcq, c.scq} {
		if cq != nil {
			cq.Destroy()
		}
	}
}

// armKeepalive starts (or restarts) the keepalive timer. Called with c.mu
// held.
func (c *Conn) armKeepalive() {
	c.stopKeepalive()
	d := c.p.keepAlive.Truncate(time.Second) // rsocket's keepalive_time is in seconds
	if d <= 0 {
		d = time.Second
	}
	c.keep = time.AfterFunc(d, c.keepalive)
}

func (c *Conn) stopKeepalive() {
	if c.keep != nil {
		c.keep.Stop()
		c.keep = nil
	}
}

// keepalive sends a 0-byte RDMA WRITE (tcp_svc_send_keepalive) and
// rearms the timer.
func (c *Conn) keepalive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.keep == nil {
		return
	}
	c.progress()
	if c.ctrlAvail() && c.st&stConnected != 0 {
		c.ctrlSeq++
		m := mkMsg(opCtrl, ctrlKeepalive)
		if err := c.qp.PostSend(verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRRDMAWrite}); err != nil {
			c.fail(fmt.Errorf("rsocket: posting a keepalive: %w", err), false)
			return
		}
	}
	c.armKeepalive()
}

// SetKeepAlive turns keepalives on or off (SO_KEEPALIVE); the period is
// Options.KeepAlive, SetKeepAlivePeriod's, or 7200 s (tcp_keepalive_time).
func (c *Conn) SetKeepAlive(on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !on {
		c.stopKeepalive()
		return nil
	}
	if c.closing {
		return c.opError("set", net.ErrClosed)
	}
	if c.p.keepAlive <= 0 {
		c.p.keepAlive = 7200 * time.Second
	}
	c.armKeepalive()
	return nil
}

// SetKeepAlivePeriod sets the time between keepalives (TCP_KEEPIDLE, in
// whole seconds as rsocket counts it; less than a second is EINVAL, as
// rsocket refuses 0).
func (c *Conn) SetKeepAlivePeriod(d time.Duration) error {
	if d < time.Second {
		return c.opError("set", fmt.Errorf("rsocket: keepalive period %v: at least 1s (TCP_KEEPIDLE counts seconds): %w", d, syscall.EINVAL))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p.keepAlive = d
	if c.keep != nil {
		c.armKeepalive()
	}
	return nil
}

// SetReadBuffer and SetWriteBuffer would be SO_RCVBUF and SO_SNDBUF, which
// size the rings when the connection is made: on a Conn it is too late
// (rsocket ignores the call). They return an error that says where to set
// them.
func (c *Conn) SetReadBuffer(bytes int) error {
	return c.opError("set", fmt.Errorf("rsocket: the receive ring (%d bytes) is sized when the connection is made: set Options.ReadBuffer on the Dialer or ListenConfig: %w", c.p.rbufSize, syscall.EISCONN))
}

// SetWriteBuffer: see SetReadBuffer.
func (c *Conn) SetWriteBuffer(bytes int) error {
	return c.opError("set", fmt.Errorf("rsocket: the send ring (%d bytes) is sized when the connection is made: set Options.WriteBuffer on the Dialer or ListenConfig: %w", c.p.sbufSize, syscall.EISCONN))
}

// SetNoDelay is TCP_NODELAY, which rsocket accepts and ignores: every
// Write is sent at once.
func (c *Conn) SetNoDelay(bool) error { return nil }

// LocalAddr returns this side's address.
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl.set(c, t)
	c.wdl.set(c, t)
	return nil
}

// SetReadDeadline sets the deadline of pending and future Reads.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl.set(c, t)
	return nil
}

// SetWriteDeadline sets the deadline of pending and future Writes.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl.set(c, t)
	return nil
}

// Buffers reports the sizes of the connection's receive and send rings.
func (c *Conn) Buffers() (read, write int) { return c.p.rbufSize, c.p.sbufSize }

// PeerIOMapSize is the number of iomap entries the peer offered in its
// connection data (target_iomap_size): riostream asks for one, for its
// riowrite. goroce never uses them, and offers none, so such a peer's
// riomap fails.
func (c *Conn) PeerIOMapSize() int { return c.peerIOMap }

// QPNum returns the number of the connection's QP (for roce res show and
// captures).
func (c *Conn) QPNum() uint32 { return c.qp.Num() }

var _ net.Conn = (*Conn)(nil)
