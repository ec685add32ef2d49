package rsocket

// FuzzRsocketPeer drives a live Conn with a hostile peer: each input is a
// sequence of actions of a rawPeer (the protocol spoken by hand over an
// RC QP) and of the Conn's user, interleaved. The peer's actions are
// those of a correct rsocket (data messages where and as long as the
// Conn's credits and buffers allow, SGL updates granting its own ring,
// RS_CTRL_SHUTDOWN/DISCONNECT, keepalives, closing) and those none sends
// (data, SGL, iomap, reserved and control messages with any immediate,
// length, address and key: inside, before and past the ring and the
// target SGL; SENDs; RDMA READs). The Conn's are Read, Write, CloseWrite,
// CloseRead and Close. After every action and at the end it checks:
//
//   - no panic;
//   - the Conn's bookkeeping stays within its bounds: at most rq_size
//     messages queued, every byte of the receive ring accounted for
//     exactly once (unread + left in the half being filled + halves
//     advertised + read but not yet advertised = the ring), the message
//     count never past the credits granted, send queue entries, send ring
//     bytes and control slots within their sizes;
//   - no RDMA WRITE (or READ) of the peer outside the Conn's ring and
//     target SGL, or with another key, completes successfully: the Conn's
//     memory regions are exactly those buffers;
//   - what Read returns is exactly, in order, what the peer's well-formed
//     data messages carried (while the peer wrote nothing else into the
//     ring); whatever the peer did, never more bytes than its data
//     messages said, and nothing once a protocol violation ended the
//     connection (the data not read is dropped with it);
//   - what the Conn's Writes sent lands, in order and unchanged, in the
//     buffers a well-behaved peer advertised (while it advertised no
//     others);
//   - a peer that only did what rsocket does is never accused: no error
//     but EOF after its shutdown, and every byte it sent is read;
//   - at the end the Conn either still works (the peer's last data
//     message is read whole, and a Write reaches the peer), or it failed
//     with a *ProtocolError (EPROTO) or a transport error (ECONNRESET,
//     EIO) after the peer did something rsocket does not, or ended as
//     the peer's or the user's shutdown says (io.EOF, EPIPE,
//     net.ErrClosed);
//   - once both ends are closed, the goroutine count is back where it
//     was: nothing of the connection lingers;
//   - a second connection of the same listener, made before, still
//     carries data both ways.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Actions of an input, one byte each (modulo numActs) followed by their
// arguments.
const (
	actGoodData       = iota // a data message as a correct sender writes it
	actRawWrite              // an RDMA WRITE WITH IMMEDIATE: any immediate, length, place and key
	actGoodSGL               // an SGL update as a correct receiver writes it
	actRawSGL                // an RS_OP_SGL: any credits, length, entry and buffer
	actCtrl                  // an RS_OP_CTRL: any value, maybe with data
	actSend                  // a SEND
	actConnRead              // the Conn's user reads
	actConnWrite             // the Conn's user writes
	actConnCloseWrite        // ... shuts down writing
	actConnCloseRead         // ... shuts down reading
	actConnClose             // ... closes
	actPeerClose             // the peer destroys its ID (the DREQ)
	actSettle                // everything posted on either side arrives
	actRead                  // an RDMA READ of the Conn's memory
	actKeepalive             // a 0-byte RDMA WRITE, rsocket's keepalive
	numActs
)

const (
	fuzzMaxActs = 400 // enough to run past the credits (rq_size 384)
	peerCredits = 128 // the rawPeer's rq size, in its connection data
	peerHalf    = 4096
)

// fuzzIn hands out an input's bytes; past the end, zeros.
type fuzzIn struct{ b []byte }

func (in *fuzzIn) u8() uint8 {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *fuzzIn) u16() uint16 { return uint16(in.u8()) | uint16(in.u8())<<8 }
func (in *fuzzIn) u32() uint32 { return uint32(in.u16()) | uint32(in.u16())<<16 }

// peerSend is one send of the peer's, posted.
type peerSend struct {
	mustFail bool // outside the Conn's buffers: it may not succeed
	what     string
}

// rxEntry is a buffer of the peer's that it advertised to the Conn.
type rxEntry struct {
	off  int // in r.rbuf
	left int
	slot int // the Conn's target SGL entry it went to
}

// fuzzRun is one input's run: the peer, the Conn, and what each side knows.
type fuzzRun struct {
	t *testing.T
	r *rawPeer
	c *Conn

	sends    map[uint64]peerSend
	peerDead bool // the peer's QP failed, or it closed
	peerGone bool // it closed (the DREQ)

	// The peer as a sender (rs_* of a correct rsocket).
	tgt     [sglSize]sge
	tgtIdx  int
	sglNext int
	sseqNo  uint16
	sseqCmp uint16
	shut    bool // it sent RS_CTRL_SHUTDOWN or DISCONNECT

	// The peer as a receiver.
	rx        []rxEntry
	freeHalf  []int // offsets of its ring's halves, free to advertise
	slotNext  int   // the Conn's target SGL entry its next update writes
	rcvdMsgs  uint16
	granted   uint16 // rcvdMsgs at its last grant
	rcvdCtrl  int
	rcvdBytes int

	// What was sent and read.
	expect   []byte // the well-formed data messages' bytes, in order
	got      []byte // what the Conn's Reads returned
	dataSent int    // bytes every data message said, well-formed or not
	connSent []byte // what the Conn's Writes posted
	writing  int    // the length of the Write under way
	pattern  byte
	rxTaint  bool // the peer wrote into the ring other than as a sender would
	txTaint  bool // the peer advertised buffers a receiver would not
	hostile  bool // the peer did something rsocket does not
	closedW  bool // the Conn's user: CloseWrite
	closedR  bool // CloseRead
	closed   bool // Close
	connErr  error
}

func (f *fuzzRun) fatalf(format string, args ...any) {
	f.t.Helper()
	f.t.Fatalf(format, args...)
}

// post posts wr on the peer's QP with data as its one SGE (none if
// empty), remembering what its completion may be. The data goes where no
// posted work request of the peer's still reads or READs into (a part
// reused early would send what was copied later).
func (f *fuzzRun) post(wr verbs.SendWR, data []byte, mustFail bool, what string) {
	f.t.Helper()
	if f.peerDead {
		return
	}
	off, ok := f.r.load(&wr, data)
	for end := time.Now().Add(30 * time.Second); !ok; off, ok = f.r.load(&wr, data) {
		// Every part is in use: the peer's sends wait for the Conn (RNR
		// NAKs while it has no receive posted). settle lets it poll.
		if time.Now().After(end) {
			f.fatalf("the peer's %d sends still hold its send buffer after 30 s", len(f.sends))
		}
		over := f.settle()
		if f.peerDead {
			return
		}
		if over {
			// The Conn failed (its QP in ERR drops what the peer sends)
			// or is closed, and the peer's sends wait for an answer that
			// will not come: its retry_cnt 7 retries for ever once the
			// Conn has answered (rxe's rule, verbs' spendRetry), until the
			// connection is torn down. A peer that can send nothing more
			// is dead for the rest of the run.
			f.peerDead = true
			return
		}
		time.Sleep(time.Millisecond)
	}
	if err := f.r.qp.PostSend(wr); err != nil {
		f.peerDead = true
		return
	}
	f.r.posted(wr.WRID, off, len(data))
	f.sends[wr.WRID] = peerSend{mustFail: mustFail, what: what}
	if len(f.sends) > 256 {
		f.settle()
	}
}

// inside reports whether [va, va+n) with key is within one of the Conn's
// remotely writable buffers.
func (f *fuzzRun) inside(va uint64, n int, key uint32) bool {
	for _, mr := range []*verbs.MR{f.c.rmr, f.c.tmr} {
		if key == mr.RKey() && va >= mr.Addr() && va+uint64(n) <= mr.Addr()+uint64(mr.Len()) && va+uint64(n) >= va {
			return true
		}
	}
	return false
}

// inRing reports whether [va, va+n) with key touches the Conn's ring.
func (f *fuzzRun) inRing(va uint64, n int, key uint32) bool {
	mr := f.c.rmr
	return key == mr.RKey() && n > 0 && va < mr.Addr()+uint64(mr.Len()) && va+uint64(n) > mr.Addr()
}

// write posts an RDMA WRITE WITH IMMEDIATE m of data at va with key.
func (f *fuzzRun) write(m msg, data []byte, va uint64, key uint32, what string) {
	wr := verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(m), RemoteAddr: va, RKey: key}
	f.post(wr, data, len(data) > 0 && !f.inside(va, len(data), key), what)
}

// pump handles the peer's completions: its sends' statuses, and what the
// Conn sent (credits, buffers, data, control), checking the data.
func (f *fuzzRun) pump() {
	f.t.Helper()
	var wcs [32]verbs.WC
	for {
		n, err := f.r.cq.Poll(wcs[:])
		if err != nil {
			f.fatalf("polling the peer's CQ: %v", err)
		}
		for i := range wcs[:n] {
			f.completion(&wcs[i])
		}
		if n < len(wcs) {
			return
		}
	}
}

func (f *fuzzRun) completion(wc *verbs.WC) {
	f.t.Helper()
	if wc.WRID&wrRecv == 0 {
		s, ok := f.sends[wc.WRID]
		if !ok {
			f.fatalf("a completion of the peer's for work request %d, never posted (or twice): %v", wc.WRID, wc)
		}
		delete(f.sends, wc.WRID)
		f.r.completed(wc.WRID)
		if s.mustFail && wc.Status == verbs.WCSuccess {
			f.fatalf("the peer's %s, outside the Conn's ring (%#x, %d bytes) and target SGL (%#x, %d bytes), succeeded",
				s.what, f.c.rmr.Addr(), f.c.rmr.Len(), f.c.tmr.Addr(), f.c.tmr.Len())
		}
		if wc.Status != verbs.WCSuccess {
			f.peerDead = true
		}
		return
	}
	if wc.Status != verbs.WCSuccess {
		f.peerDead = true
		return
	}
	if !f.peerDead {
		if err := f.r.qp.PostRecv(verbs.RecvWR{WRID: wrRecv}); err != nil {
			f.peerDead = true
		}
	}
	if wc.Opcode != verbs.WCRecvRDMAWithImm {
		f.fatalf("the Conn sent a %v: rsocket sends only RDMA WRITE WITH IMMEDIATE", wc.Opcode)
	}
	m := msg(wc.ImmData)
	switch m.op() {
	case opData:
		f.recvData(int(m.data()), int(wc.ByteLen))
	case opSGL:
		f.rcvdCtrl++
		f.sseqCmp = uint16(m.data())
		switch wc.ByteLen {
		case 0:
		case sgeLen:
			f.tgt[f.sglNext] = parseSGE(f.r.tbuf[f.sglNext*sgeLen:], binary.LittleEndian)
			f.sglNext = (f.sglNext + 1) % sglSize
		default:
			f.fatalf("the Conn sent an RS_OP_SGL of %d bytes", wc.ByteLen)
		}
	case opCtrl:
		f.rcvdCtrl++
		if wc.ByteLen != 0 || m.data() != ctrlShutdown && m.data() != ctrlDisconnect {
			f.fatalf("the Conn sent %v with %d bytes", m, wc.ByteLen)
		}
	default:
		f.fatalf("the Conn sent %v", m)
	}
}

// recvData checks a data message of the Conn's against what its user
// wrote and the buffers the peer advertised.
func (f *fuzzRun) recvData(n, byteLen int) {
	f.t.Helper()
	f.rcvdMsgs++
	if n != byteLen {
		f.fatalf("the Conn's data message says %d bytes and carried %d", n, byteLen)
	}
	if f.txTaint {
		f.rcvdBytes += n
		return
	}
	if len(f.rx) == 0 || n > f.rx[0].left {
		f.fatalf("the Conn sent %d bytes beyond the buffers the peer advertised (%v)", n, f.rx)
	}
	e := &f.rx[0]
	if f.rcvdBytes+n > len(f.connSent)+f.writing {
		f.fatalf("the peer received %d bytes, the Conn's user wrote %d", f.rcvdBytes+n, len(f.connSent)+f.writing)
	}
	if got, want := f.r.rbuf[e.off:e.off+n], connPattern(f.rcvdBytes, n); !bytes.Equal(got, want) {
		f.fatalf("the Conn's bytes %d..%d arrived as %x, its user wrote %x", f.rcvdBytes, f.rcvdBytes+n, got, want)
	}
	f.rcvdBytes += n
	e.off += n
	if e.left -= n; e.left == 0 {
		f.freeHalf = append(f.freeHalf, e.off-peerHalf)
		f.rx = f.rx[1:]
	}
}

// settle waits (boundedly) until what either side posted has arrived:
// the peer's sends have completed and it has received every message the
// Conn posted. It stops early, and reports over, once the Conn has failed
// or is closed.
func (f *fuzzRun) settle() (over bool) {
	f.t.Helper()
	defer func(start time.Time) {
		if d := time.Since(start); d > time.Second && testing.Verbose() {
			f.c.mu.Lock()
			f.t.Logf("settle took %v: %d sends of the peer's left, the Conn sent %d data and %d control messages, the peer received %d and %d; err %v", d, len(f.sends), f.c.sseqNo, f.c.ctrlSeq, f.rcvdMsgs, f.rcvdCtrl, f.c.err)
			f.c.mu.Unlock()
		}
	}(time.Now())
	start := time.Now()
	for end := start.Add(3 * time.Second); time.Now().Before(end); {
		f.pump()
		f.c.mu.Lock()
		if len(f.sends) > 0 && time.Since(start) > 50*time.Millisecond {
			// The peer's sends wait: more messages than the Conn has
			// receives posted (RNR NAKs, retried for ever), which it
			// reposts only when it polls, as a pending Read would.
			f.c.progress()
		}
		// A Conn that failed acknowledges nothing more: the peer's sends
		// would wait for an answer (post).
		over = f.c.closed || f.c.err != nil
		done := f.c.sseqNo == f.rcvdMsgs && int(f.c.ctrlSeq) == f.rcvdCtrl
		f.c.mu.Unlock()
		if over || len(f.sends) == 0 && (done || f.peerDead) {
			return over
		}
		time.Sleep(200 * time.Microsecond)
	}
	return over
}

// conn runs a call of the Conn's user, the peer serving its receives
// meanwhile (a correct peer's receives are always posted).
func (f *fuzzRun) conn(fn func()) {
	f.t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	for {
		select {
		case <-done:
			f.pump()
			return
		case <-time.After(200 * time.Microsecond):
			f.pump()
		}
	}
}

// bounded checks the Conn's bookkeeping.
func (f *fuzzRun) bounded(after string) {
	f.t.Helper()
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.p
	queued := (c.rmTail - c.rmHead + len(c.rmsg)) % len(c.rmsg)
	unread := 0
	for i := c.rmHead; i != c.rmTail; i = (i + 1) % len(c.rmsg) {
		unread += int(c.rmsg[i])
	}
	half := p.rbufSize / 2
	bad := ""
	switch {
	case len(c.rmsg) != p.rqSize+1 || queued > p.rqSize:
		bad = "messages queued beyond rq_size"
	case unread > p.rbufSize:
		bad = "more bytes unread than the ring holds"
	case c.err == nil && unread+c.curLeft+c.queued*half+c.rAvail != p.rbufSize:
		bad = "receive ring bytes not accounted for once"
	case c.curLeft < 0 || c.curLeft > half || c.queued < 0 || c.queued > 2 || c.rAvail < 0 || c.rAvail > p.rbufSize:
		bad = "receive ring counters out of range"
	case c.err == nil && int16(c.recvCount-c.grant) > 0:
		bad = "messages received beyond the credits granted"
	case c.sqeAvail < 0 || c.sqeAvail > p.sqSize-ctrlSize:
		bad = "send queue entries out of range"
	case c.sbufAvail < 0 || c.sbufAvail > p.sbufSize:
		bad = "send ring bytes out of range"
	case c.ctrlMax-c.ctrlSeq > ctrlSize:
		bad = "control slots out of range"
	case c.toRepost < 0 || c.toRepost > p.rqSize+extraRecvs:
		bad = "receives to repost out of range"
	case c.err == nil && uint16(c.sseqComp-c.sseqNo) > c.window:
		bad = "the peer's credits beyond its window"
	case c.rOff < 0 || c.rOff > len(c.rbuf):
		bad = "read offset outside the ring"
	}
	if bad != "" {
		f.fatalf("after %s: %s: queued %d (%d bytes), curLeft %d, queued halves %d, rAvail %d, recvCount %d grant %d, sqeAvail %d, sbufAvail %d, ctrl %d/%d, toRepost %d, sseqNo %d sseqComp %d window %d, rOff %d, err %v",
			after, bad, queued, unread, c.curLeft, c.queued, c.rAvail, c.recvCount, c.grant, c.sqeAvail, c.sbufAvail,
			c.ctrlSeq, c.ctrlMax, c.toRepost, c.sseqNo, c.sseqComp, c.window, c.rOff, c.err)
	}
}

// goodData sends up to n bytes as one data message, where and as a
// correct sender would (rs_write_data); nothing if it may not send.
func (f *fuzzRun) goodData(n int) {
	t := &f.tgt[f.tgtIdx]
	if f.sseqNo == f.sseqCmp || t.len == 0 || n == 0 {
		return
	}
	n = min(n, int(t.len), maxTransfer, len(f.r.sbuf))
	data := make([]byte, n)
	for i := range data {
		f.pattern++
		data[i] = f.pattern
	}
	if f.shut {
		f.hostile = true // data after its shutdown
	}
	if !f.peerDead {
		f.expect = append(f.expect, data...)
		f.dataSent += n
	}
	f.write(mkMsg(opData, uint32(n)), data, t.addr, t.key, "data message")
	f.sseqNo++
	t.addr += uint64(n)
	t.len -= uint32(n)
	if t.len == 0 {
		f.tgtIdx = (f.tgtIdx + 1) % sglSize
	}
}

// place picks an address and a key: the next place of a correct sender,
// in the ring, just before or past it, in the target SGL, past it, or
// anywhere; with the right key or the other buffer's or any.
func (f *fuzzRun) place(in *fuzzIn) (uint64, uint32) {
	sel, off := in.u8(), uint64(in.u16())
	rmr, tmr := f.c.rmr, f.c.tmr
	var va uint64
	key := rmr.RKey()
	switch sel % 7 {
	case 0:
		va, key = f.tgt[f.tgtIdx].addr, f.tgt[f.tgtIdx].key
	case 1:
		va = rmr.Addr() + off%uint64(rmr.Len())
	case 2:
		va = rmr.Addr() + uint64(rmr.Len()) - off%64
	case 3:
		va = rmr.Addr() - 1 - off%64
	case 4:
		va, key = tmr.Addr()+off%64, tmr.RKey()
	case 5:
		va, key = f.c.smr.Addr()+off, f.c.smr.LKey()
	case 6:
		va, key = uint64(in.u32())<<16|off, in.u32()
	}
	switch sel / 7 % 4 {
	case 1:
		key = tmr.RKey()
	case 2:
		key = rmr.RKey()
	case 3:
		key ^= 1 << (in.u8() % 32)
	}
	return va, key
}

// rawWrite is any RDMA WRITE WITH IMMEDIATE.
func (f *fuzzRun) rawWrite(in *fuzzIn) {
	o, v, n := op(in.u8()%8), in.u32(), int(in.u16())
	switch in.u8() % 4 {
	case 0:
		n %= 5000
	case 1:
		n = int(f.r.peer.dataBuf.len) + n%8 - 4 // about a half of the Conn's ring
	case 2:
		n = min(n|int(in.u8())<<16, len(f.r.sbuf)) // up to 1 MiB: past the ring
	case 3:
		n %= 64
	}
	va, key := f.place(in)
	m := mkMsg(o, v)
	if o == opData && in.u8()%2 == 0 {
		m = mkMsg(opData, uint32(n)) // the length right, the place maybe not
	}
	f.hostile = true
	if m.op() == opData || f.inRing(va, n, key) {
		f.rxTaint = true
	}
	if m.op() == opData {
		f.dataSent += int(m.data())
	}
	f.write(m, make([]byte, n), va, key, "RDMA WRITE WITH IMMEDIATE "+m.String())
}

// goodSGL grants the Conn credits and, if a half of the peer's ring is
// free and the Conn's next target entry empty, that half (rs_send_credits).
func (f *fuzzRun) goodSGL() {
	m := mkMsg(opSGL, uint32(f.rcvdMsgs)+peerCredits)
	f.granted = f.rcvdMsgs
	occupied := false
	for _, e := range f.rx {
		occupied = occupied || e.slot == f.slotNext
	}
	if len(f.freeHalf) == 0 || occupied || f.txTaint {
		f.write(m, nil, 0, 0, "credits")
		return
	}
	off := f.freeHalf[0]
	f.freeHalf = f.freeHalf[1:]
	f.rx = append(f.rx, rxEntry{off: off, left: peerHalf, slot: f.slotNext})
	s := appendSGE(nil, sge{addr: f.r.rmr.Addr() + uint64(off), key: f.r.rmr.RKey(), len: peerHalf}, binary.LittleEndian)
	f.write(m, s, f.r.peer.targetSGL.addr+uint64(f.slotNext)*sgeLen, f.r.peer.targetSGL.key, "SGL update")
	f.slotNext = (f.slotNext + 1) % sglSize
}

// rawSGL is any RS_OP_SGL.
func (f *fuzzRun) rawSGL(in *fuzzIn) {
	credits := in.u32()
	if in.u8()%2 == 0 {
		credits = uint32(f.rcvdMsgs) + uint32(in.u8()) // near the window
	}
	var b []byte
	switch in.u8() % 4 {
	case 1:
		s := sge{addr: f.r.rmr.Addr() + uint64(in.u16()%8192), key: f.r.rmr.RKey(), len: uint32(in.u16())}
		if in.u8()%2 == 0 {
			s = sge{addr: uint64(in.u32()), key: in.u32(), len: in.u32()}
		}
		b = appendSGE(nil, s, binary.LittleEndian)
	case 2:
		b = make([]byte, in.u8()%40)
	case 3:
		b = appendSGE(nil, sge{}, binary.LittleEndian)
	}
	entry := int(in.u8() % 4) // 2 and 3 are past the target SGL
	va, key := f.r.peer.targetSGL.addr+uint64(entry)*sgeLen, f.r.peer.targetSGL.key
	f.hostile, f.txTaint = true, true
	if f.inRing(va, len(b), key) {
		f.rxTaint = true
	}
	f.write(mkMsg(opSGL, credits), b, va, key, "RS_OP_SGL")
}

// ctrl is an RS_OP_CTRL; the known values without data are what rsocket
// sends.
func (f *fuzzRun) ctrl(in *fuzzIn) {
	v, n := uint32(in.u8()%5), 0
	if x := in.u8(); x%4 == 0 {
		n = int(x%32) + 1
	}
	va, key := f.c.rmr.Addr(), f.c.rmr.RKey()
	if n > 0 || v > ctrlShutdown || v == ctrlKeepalive {
		f.hostile = true
	}
	if n > 0 {
		f.rxTaint = true
	}
	if v == ctrlShutdown || v == ctrlDisconnect {
		f.shut = true
	}
	f.write(mkMsg(opCtrl, v), make([]byte, n), va, key, "RS_OP_CTRL")
}

// finish ends the input: the last checks, then both ends closed.
func (f *fuzzRun) finish() {
	f.t.Helper()
	f.settle()
	f.bounded("the sequence")
	if !f.closed {
		// A last data message of a correct sender, if it may send one,
		// must be read; then read what is left.
		if !f.peerDead && !f.shut && !f.rxTaint {
			f.goodData(100)
		}
		f.settle()
		f.drain()
		f.bounded("the last reads")
		f.writeBack()
		f.bounded("the last write")
	}
	if testing.Verbose() {
		f.t.Logf("at the end: %d bytes sent, %d read; the Conn's error: %v", len(f.expect), len(f.got), f.connErr)
	}
	// Both ends close: the peer first (its DREQ), then the Conn, at once.
	f.r.close()
	f.peerDead, f.peerGone = true, true
	if !f.closed {
		f.c.SetLinger(0)
		f.c.Close()
		f.closed = true
	}
}

// classify checks an error of the Conn's against what the sequence
// allows.
func (f *fuzzRun) classify(op string, err error) {
	f.t.Helper()
	var pe *ProtocolError
	switch {
	case errors.As(err, &pe):
		if !f.hostile {
			f.fatalf("%s: %v; the peer did nothing rsocket does not", op, err)
		}
		if !errors.Is(err, syscall.EPROTO) {
			f.fatalf("%s: %v does not unwrap to EPROTO", op, err)
		}
	case errors.Is(err, syscall.ECONNRESET) && strings.Contains(err.Error(), "error state"), errors.Is(err, syscall.EIO):
		if !f.hostile && !f.peerGone {
			f.fatalf("%s: %v; the peer did nothing rsocket does not", op, err)
		}
	case errors.Is(err, syscall.ECONNRESET):
		// rsend's ECONNRESET: the peer disconnected, or this side shut
		// down both ways (its RS_CTRL_DISCONNECT completed).
		if !f.shut && !f.peerGone && !f.hostile && !(f.closedW && f.closedR) {
			f.fatalf("%s: %v; the peer did not disconnect", op, err)
		}
	case errors.Is(err, io.EOF):
		if !f.shut && !f.peerGone && !f.closedR && !f.hostile {
			f.fatalf("%s: EOF; the peer did not shut down", op)
		}
	case errors.Is(err, syscall.EPIPE):
		if !f.closedW {
			f.fatalf("%s: %v without CloseWrite", op, err)
		}
	case errors.Is(err, net.ErrClosed):
		if !f.closed {
			f.fatalf("%s: %v without Close", op, err)
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
	default:
		f.fatalf("%s: %v: not an error a Conn returns", op, err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) && f.connErr == nil {
		f.connErr = err
	}
}

// read does one Read of the Conn's user with a deadline, checking what
// it returned.
func (f *fuzzRun) read(n int, wait time.Duration) error {
	f.t.Helper()
	buf := make([]byte, n)
	var k int
	var err error
	var discarded bool
	f.conn(func() {
		f.c.SetReadDeadline(time.Now().Add(wait))
		k, err = f.c.Read(buf)
		f.c.mu.Lock()
		discarded = f.c.discard
		f.c.mu.Unlock()
	})
	if k > 0 && discarded {
		f.fatalf("Read returned %d bytes, though the connection had ended for a protocol violation (%v), which drops what was not read", k, f.c.err)
	}
	f.got = append(f.got, buf[:k]...)
	if len(f.got) > f.dataSent {
		f.fatalf("Read returned %d bytes in all; the peer's data messages said %d", len(f.got), f.dataSent)
	}
	if !f.rxTaint && !bytes.Equal(f.got, f.expect[:min(len(f.got), len(f.expect))]) {
		f.fatalf("Read returned bytes the peer did not send: got %d bytes, %x..., want %x...", len(f.got), f.got[max(0, len(f.got)-16):], f.expect[max(0, min(len(f.got), len(f.expect))-16):min(len(f.got), len(f.expect))])
	}
	if err != nil {
		f.classify("Read", err)
	}
	return err
}

// drain reads until every well-formed byte is read or the Conn says why
// not.
func (f *fuzzRun) drain() {
	f.t.Helper()
	for {
		if !f.rxTaint && len(f.got) == len(f.expect) {
			return
		}
		wait := 20 * time.Millisecond
		if !f.rxTaint && !f.hostile {
			wait = 10 * time.Second // it must come (it has arrived: the sends completed)
		}
		err := f.read(1<<17, wait)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if !f.rxTaint && !f.hostile && !f.peerDead {
				f.fatalf("Read: %v with %d of the %d bytes sent read", err, len(f.got), len(f.expect))
			}
			return
		case errors.Is(err, io.EOF):
			if !f.rxTaint && !f.hostile && !f.closedR && len(f.got) != len(f.expect) {
				f.fatalf("Read: EOF with %d of the %d bytes sent read", len(f.got), len(f.expect))
			}
			return
		default:
			return
		}
	}
}

// writeBack has the Conn's user write; a well-behaved peer grants what it
// needs, and receives it whole, unless the Conn cannot send any more.
func (f *fuzzRun) writeBack() {
	f.t.Helper()
	if f.peerDead || f.txTaint {
		return
	}
	want := len(f.connSent) + 100
	err := f.connWrite(100, 10*time.Second)
	for end := time.Now().Add(10 * time.Second); f.rcvdBytes < len(f.connSent) && time.Now().Before(end) && !f.peerDead; {
		f.pump()
		if f.wouldGrant() {
			f.goodSGL()
		}
		time.Sleep(200 * time.Microsecond)
	}
	if err == nil && !f.peerDead && (f.rcvdBytes != want || len(f.connSent) != want) {
		f.fatalf("the Conn's last Write: the peer received %d bytes of %d written (%d wanted)", f.rcvdBytes, len(f.connSent), want)
	}
}

// connWrite has the Conn's user write n bytes, within wait.
func (f *fuzzRun) connWrite(n int, wait time.Duration) error {
	f.t.Helper()
	p := connPattern(len(f.connSent), n)
	f.writing = n
	defer func() { f.writing = 0 }()
	var k int
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.c.SetWriteDeadline(time.Now().Add(wait))
		k, err = f.c.Write(p)
	}()
	// A correct receiver grants credits and buffers while it waits.
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(200 * time.Microsecond):
		}
		f.pump()
		if !f.peerDead && !f.txTaint && f.wouldGrant() {
			f.goodSGL()
		}
	}
	f.connSent = append(f.connSent, p[:k]...)
	if err != nil {
		f.classify("Write", err)
	}
	return err
}

// connPattern is what the Conn's user writes at offset off of its
// stream, n bytes.
func connPattern(off, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		x := off + i
		p[i] = byte(x)*7 ^ byte(x>>8)*31
	}
	return p
}

// wouldGrant reports whether a correct receiver would grant now
// (rs_update_credits): a half of its ring is free and unadvertised, or
// half of its receive queue's messages arrived since its last grant.
func (f *fuzzRun) wouldGrant() bool {
	return len(f.freeHalf) > 0 || int16(f.rcvdMsgs-f.granted) >= peerCredits/2
}

// FuzzRsocketPeer: see the top of the file.
func FuzzRsocketPeer(f *testing.F) {
	for _, s := range rsocketSeeds() {
		f.Add(s)
	}
	a, b := newSides(f, netFabric4)
	l := b.listen(f, 7471, Options{})
	good, goodPeer := dialAccept(f, a, l, Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		base := runtime.NumGoroutine()
		r, c := rawDial(t, a, l, nil)
		if c == nil {
			t.Fatalf("the connection was refused: %v", r.pdErr)
		}
		fr := &fuzzRun{t: t, r: r, c: c, sends: map[uint64]peerSend{}, sglNext: 1, slotNext: 1,
			freeHalf: []int{peerHalf}, rx: []rxEntry{{off: 0, left: peerHalf, slot: 0}}, sseqCmp: uint16(r.peer.credits)}
		fr.tgt[0] = r.peer.dataBuf
		fr.run(&fuzzIn{b: data})
		fr.finish()
		// Nothing of the connection lingers.
		for end := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; {
			if time.Now().After(end) {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines after both ends closed, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(time.Millisecond)
		}
		// The other connection of the listener never noticed.
		if _, err := good.Write([]byte("still here")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		goodPeer.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(goodPeer, buf); err != nil || string(buf) != "still here" {
			t.Fatalf("the other connection: %q, %v", buf, err)
		}
		if _, err := goodPeer.Write([]byte("and here")); err != nil {
			t.Fatal(err)
		}
		good.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(good, buf[:8]); err != nil || string(buf[:8]) != "and here" {
			t.Fatalf("the other connection, back: %q, %v", buf[:8], err)
		}
	})
}

// run decodes and does the input's actions.
func (f *fuzzRun) run(in *fuzzIn) {
	f.t.Helper()
	for i := 0; i < fuzzMaxActs && len(in.b) > 0; i++ {
		a := in.u8() % numActs
		f.pump()
		switch a {
		case actGoodData:
			f.goodData(int(in.u16()%9000) + 1)
		case actRawWrite:
			f.rawWrite(in)
		case actGoodSGL:
			if !f.txTaint {
				f.goodSGL()
			}
		case actRawSGL:
			f.rawSGL(in)
		case actCtrl:
			f.ctrl(in)
		case actSend:
			n := int(in.u8() % 64)
			f.hostile = true
			f.post(verbs.SendWR{Opcode: verbs.WRSend}, make([]byte, n), false, "SEND")
		case actConnRead:
			if !f.closed {
				f.settle()
				f.read(int(in.u16()%20000)+1, 5*time.Millisecond)
			}
		case actConnWrite:
			if !f.closed {
				f.connWrite(int(in.u16()%20000)+1, 5*time.Millisecond)
			}
		case actConnCloseWrite:
			if !f.closed {
				f.closedW = true
				var err error
				f.conn(func() { err = f.c.CloseWrite() })
				if err != nil {
					f.classify("CloseWrite", err)
				}
			}
		case actConnCloseRead:
			if !f.closed {
				f.closedR = true
				var err error
				f.conn(func() { err = f.c.CloseRead() })
				if err != nil {
					f.classify("CloseRead", err)
				}
			}
		case actConnClose:
			if !f.closed {
				f.settle()
				f.closed = true
				var err error
				f.conn(func() { err = f.c.Close() })
				if err != nil && !f.hostile && !f.peerDead {
					f.fatalf("Close: %v", err)
				}
			}
		case actPeerClose:
			if !f.peerGone {
				f.settle()
				f.r.close()
				f.peerDead, f.peerGone = true, true
			}
		case actSettle:
			f.settle()
		case actRead:
			va, key := f.place(in)
			n := int(in.u16() % 256)
			f.hostile = true
			// The Conn's buffers grant no remote read.
			f.post(verbs.SendWR{Opcode: verbs.WRRDMARead, RemoteAddr: va, RKey: key}, make([]byte, max(n, 1)), true, "RDMA READ")
		case actKeepalive:
			f.post(verbs.SendWR{Opcode: verbs.WRRDMAWrite}, nil, false, "keepalive")
		}
		f.pump()
		f.bounded(actName(a))
		if testing.Verbose() {
			f.t.Logf("%s: %d sent, %d read, hostile %v, rx taint %v, tx taint %v, peer dead %v, err %v", actName(a), len(f.expect), len(f.got), f.hostile, f.rxTaint, f.txTaint, f.peerDead, f.connErr)
		}
	}
}

func actName(a uint8) string {
	return [...]string{"good data", "raw write", "good SGL", "raw SGL", "ctrl", "SEND", "Read", "Write",
		"CloseWrite", "CloseRead", "Close", "peer close", "settle", "RDMA READ", "keepalive"}[a]
}

// rsocketSeeds are the seed inputs: a well-formed exchange, and each case
// of TestHostilePeer and TestHostileWriteOutsideRing.
func rsocketSeeds() [][]byte {
	u16 := func(v int) []byte { return []byte{byte(v), byte(v >> 8)} }
	u32 := func(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	data := func(n int) []byte { return cat([]byte{actGoodData}, u16(n-1)) }
	read := func(n int) []byte { return cat([]byte{actConnRead}, u16(n-1)) }
	write := func(n int) []byte { return cat([]byte{actConnWrite}, u16(n-1)) }
	// raw: op, data, length; place sel, offset; for RS_OP_DATA, whether
	// the length follows the immediate.
	raw := func(o op, v uint32, n int, sel byte, off int) []byte {
		b := cat([]byte{actRawWrite, byte(o)}, u32(v), u16(n), []byte{0, sel}, u16(off))
		if o == opData {
			b = append(b, 1) // the immediate as given
		}
		return b
	}
	var seeds [][]byte
	// A well-formed exchange both ways, with shutdowns.
	seeds = append(seeds, cat(data(100), data(4000), read(5000), write(3000), []byte{actGoodSGL}, write(9000),
		data(1), read(10), []byte{actSettle, actConnCloseWrite}, data(50), read(100), []byte{actCtrl, ctrlShutdown, 1}, read(1)))
	// Credits beyond the window: 385 messages of 1 byte.
	credits := []byte{}
	for range defRQSize + 1 {
		credits = append(credits, raw(opData, 1, 1, 0, 0)...)
	}
	seeds = append(seeds, credits)
	seeds = append(seeds,
		// Overrunning its buffer: a half and a byte.
		cat([]byte{actRawWrite, byte(opData)}, u32(0), u16(5), []byte{1, 0}, u16(0), []byte{0}),
		// Beyond the ring: both halves filled, then a byte.
		cat(bytes.Repeat(data(9000), 16), raw(opData, 1, 1, 0, 0)),
		cat(raw(opData, 10, 20, 0, 0)), // immediate and length disagree
		cat(raw(opRsvd, 0, 0, 0, 0)),
		cat(raw(opWrite, 4, 4, 0, 0)),
		cat(raw(opIOMapSGL, 0, 32, 0, 0)),
		cat([]byte{actCtrl, 3, 1}), // unknown control message
		cat([]byte{actSend, 0}),
		cat([]byte{actRawSGL}, u32(129), []byte{1, 0, 0}), // credits beyond the peer's window
		cat([]byte{actRawSGL}, u32(128), []byte{1, 1}, u16(0), u16(4096), []byte{1, 1}, []byte{actRawSGL}, u32(128), []byte{1, 1}, u16(0), u16(4096), []byte{1, 0}), // into an entry in use
		cat([]byte{actRawSGL}, u32(128), []byte{1, 3, 1}),    // an empty buffer
		cat([]byte{actRawSGL}, u32(128), []byte{1, 2, 8, 1}), // the wrong size
		cat([]byte{actCtrl, ctrlShutdown, 4}),                // control message with data
		cat(raw(opData, 16, 16, 2, 0)),                       // past the ring
		cat(raw(opData, 16, 16, 3, 15)),                      // before the ring
		cat(raw(opData, 16, 16, 4, 32)),                      // past the target SGL
		cat(data(10), []byte{actRead, 1}, u16(0), u16(16)),   // an RDMA READ of the ring
		cat(data(10), []byte{actPeerClose}, read(10), read(10)),
		cat(data(10), write(10), []byte{actConnClose}, data(10)),
	)
	return seeds
}
