package verbs

// The requester: work requests → packets (rxe_req.c's role).

import (
	"encoding/binary"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// sendWQE is a posted send work request and its progress.
type sendWQE struct {
	wr       SendWR // SGList and InlineData point into sge/inline below
	sge      []SGE
	inline   []byte
	length   uint64 // total message length
	signaled bool
	isRdAtom bool // READ, atomic or FLUSH: needs a responder resource and a response
	// PSNs, assigned when the first packet is sent.
	firstPSN wire.PSN
	lastPSN  wire.PSN
	started  bool
	// UD only: where it goes.
	path      path
	sport     uint16
	remoteQPN uint32
	qkey      uint32
	// BIND_MW: the window's rkey when the WR was posted (rxe: mw_rkey).
	mwRKey uint32
}

// sendQueue holds send WQEs. Indexes grow without bound; slot = index mod
// len(ring). head ≤ cur ≤ tail: [head, cur) are sent and await completion,
// [cur, tail) are not (fully) sent yet.
type sendQueue struct {
	ring            []sendWQE
	max             int // max_send_wr: the ring grows up to this many slots
	head, cur, tail uint64
}

// initialQueueSlots is how many slots a send or receive ring starts with.
// Rings double, up to the QP's max_send_wr/max_recv_wr, when a post finds
// them full, so an idle QP holds what it has ever had outstanding rather
// than its limit: a 1,024-WR QP that never had more than 16 WRs posted
// weighs what a 16-WR one does (bench/'s IdleQPs). Linux rxe allocates its
// queues whole; the limits ibv_query_qp reports are the same either way.
const initialQueueSlots = 16

func (s *sendQueue) init(n int)           { s.max, s.ring = n, make([]sendWQE, min(n, initialQueueSlots)) }
func (s *sendQueue) at(i uint64) *sendWQE { return &s.ring[i%uint64(len(s.ring))] }
func (s *sendQueue) full() bool           { return s.tail-s.head == uint64(s.max) }
func (s *sendQueue) clear()               { s.head, s.cur, s.tail = 0, 0, 0 }

// room makes a slot for the WQE at tail, doubling the ring (up to max)
// when every slot is live. Indices are absolute, so each live WQE moves to
// its index modulo the new length; no *sendWQE is kept across posts.
func (s *sendQueue) room() {
	if s.tail-s.head < uint64(len(s.ring)) || len(s.ring) >= s.max {
		return
	}
	r := make([]sendWQE, min(2*len(s.ring), s.max))
	for i := s.head; i < s.tail; i++ {
		r[i%uint64(len(r))] = s.ring[i%uint64(len(s.ring))]
	}
	s.ring = r
}

// reqState is the requester's progress.
type reqState struct {
	psn   wire.PSN // next PSN to send
	off   uint64   // bytes of the WQE at sq.cur already sent
	noack int      // packets sent since the last AckReq
	short uint64   // WQEs shortPost sent, for tests to see that it ran
	// win is how many PSNs may be unacknowledged (cwnd.go): grown by
	// acknowledgements, cut when the round trip grows past its target,
	// halved by a NAK's go-back-N retry, cut to the floor by a timeout
	// (each retry resends the whole window, so a congested or lossy path
	// must not keep a large one).
	win         cwnd
	rdAtomic    int      // outstanding READ/ATOMIC/FLUSH requests
	maxSent     wire.PSN // highest PSN sent so far, to count retransmissions
	sentAny     bool     // whether maxSent is valid
	sqdNotified bool
	sqdEnd      uint64 // SQD: the WQEs before this SQ index were started and must finish
	// more: the requester stopped at its batch's budget with packets left
	// to send; the device's scheduler gives it its next turn (sched.go).
	more bool
	// armOnSend: packets the requester built wait in its batch (reqBatch);
	// the batch arms the local ACK timer and starts the RTT sample's clock
	// once they are sent (release, onSent).
	armOnSend bool
	// resume is where the requester stood when a local ACK timeout
	// rewound it (comp.go: saveResume, resumeAfterSpurious).
	resume resumePoint
}

// resumePoint is the requester's position (sq.cur, off, psn) before a
// timeout's go-back-N; valid: saved and not yet used or dropped.
type resumePoint struct {
	valid    bool
	cur, off uint64
	psn      wire.PSN
}

func (o WROpcode) validFor(t QPType) bool {
	switch o {
	case WRSend, WRSendWithImm:
		return true
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return t == RC || t == UC
	case WRSendWithInv, WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush, WRAtomicWrite:
		return t == RC
	case WRBindMW, WRLocalInv:
		return t == RC || t == UC // rxe_wr_opcode_info: WR_LOCAL_OP_MASK
	}
	return false
}

// PostSend posts send work requests, like ibv_post_send. A WR that cannot be
// posted returns an error naming it (the WRs before it are posted); errors
// found while executing a WR are reported in its completion instead.
func (q *QP) PostSend(wrs ...SendWR) error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return net.ErrClosed
	}
	var err error
	for i := range wrs {
		if err = q.postOne(&wrs[i]); err != nil {
			break // the WRs before it are posted: send them (ibv_post_send's bad_wr)
		}
	}
	if q.state != QPSRTS {
		q.mu.Unlock()
		return err
	}
	out := getTxBatch(q.dev)
	// The application's goroutine sends what the window allows: the
	// work is its own, and no other QP waits for this goroutine.
	out.unlimited = true
	if len(wrs) != 1 || err != nil || !q.shortPost(out) {
		q.reqRun(out)
	}
	q.mu.Unlock()
	putTxBatch(out)
	return err
}

// shortPost is the requester's short path for the common case (issue 15;
// shortSend and shortACK are the responder's and the completer's): the WR
// PostSend just posted is an RC SEND of at most the path MTU, inline or
// from one SGE, and the requester had nothing else to send — no message
// part-sent, no other batch holding the QP's packets, the window open, no
// RNR wait, no pacer or congestion control, no fence to wait on. It checks
// all of that and the SGE's lkey before it changes anything and reports
// false, having changed nothing, when a check fails: reqRun then takes the
// WQE. What it sends and leaves is what reqRun would (the packet, the
// WQE's PSNs, the requester's PSN, highest PSN sent and RTT sample, the
// counters; TestShortPost, FuzzShortPostDiff), without reqRun's loop and
// the nine functions a packet goes through there (sendPacket, startWQE,
// requestFields, ackReq, encodeRequest, appendHeaders, gather, countSent,
// advance). out is PostSend's fresh batch. Called with q.mu held.
func (q *QP) shortPost(out *txBatch) bool {
	w, c := q.sq.at(q.sq.cur), q.dev.ecn.Load()
	// The requester was idle before the post (cur+1 == tail), so no
	// message is part-sent (req.off is 0).
	if q.typ != RC || q.sq.cur+1 != q.sq.tail || w.wr.Opcode != WRSend || w.length > uint64(q.pmtu) ||
		q.reqBatch != nil || q.comp.rnrWait || q.pacer != nil || q.cc != nil || c != nil && c.RPEnable != 0 ||
		w.wr.Flags&SendFence != 0 && q.req.rdAtomic > 0 || int(q.req.psn.Diff(q.comp.psn)) >= q.window() || q.dev.generalOnly {
		return false
	}
	var data []byte
	switch {
	case w.wr.Flags&SendInline != 0:
		data = w.inline
	case w.length > 0:
		if len(w.sge) != 1 {
			return false
		}
		b, err := q.dev.mem.SliceCached(&q.keySend, q.pd.pd, w.sge[0].LKey, true, w.sge[0].Addr, w.length, 0)
		if err != nil {
			return false // reqRun fails the WQE with IBV_WC_LOC_PROT_ERR
		}
		data = b
	}
	psn, n := q.req.psn, int(w.length)
	q.req.short++
	w.started, w.firstPSN, w.lastPSN = true, psn, psn
	q.req.noack = 0 // the AckReq of a message's end
	bth := wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, SolicitedEvent: w.wr.Flags&SendSolicited != 0,
		PadCount: (4 - n%4) % 4, PKey: wire.DefaultPKey, DestQP: q.attr.DestQPN, AckReq: true, PSN: psn}
	pk := out.next()
	finish(pk, appendPad(append(bth.Append(pk.Buf), data...), n))
	out.budget -= pk.Len
	pk.Addr = addrOf(&q.path, q.sport)
	q.counters[SentPkts].Add(1)
	if q.retransmitting() {
		q.count(RetransPkts)
	} else {
		q.count(RDMASends)
		q.sampleSent(psn)
	}
	q.req.psn = psn.Next()
	if !q.req.sentAny || psn.After(q.req.maxSent) {
		q.req.maxSent, q.req.sentAny = psn, true
	}
	out.own(q)
	q.sq.cur++
	q.req.armOnSend = true
	return true
}

func (q *QP) postOne(wr *SendWR) error {
	bad := func(format string, args ...any) error {
		return errorf("post_send", q.dev.name, q.num, syscall.EINVAL, "%v QP: wr_id %d: "+format,
			append([]any{q.typ, wr.WRID}, args...)...)
	}
	switch q.state {
	case QPSReset, QPSInit, QPSRTR:
		return bad("the QP is in %v; it must be in RTS to send", q.state)
	}
	if !wr.Opcode.validFor(q.typ) {
		return bad("%v is not valid on a %v QP", wr.Opcode, q.typ)
	}
	if wr.Flags&SendInline != 0 {
		if len(wr.InlineData) > q.cap.MaxInlineData {
			return bad("%d bytes of inline data exceed max_inline_data %d", len(wr.InlineData), q.cap.MaxInlineData)
		}
	} else if len(wr.SGList) > q.cap.MaxSendSGE {
		return bad("%d SGEs exceed max_send_sge %d", len(wr.SGList), q.cap.MaxSendSGE)
	}
	var length uint64
	if wr.Flags&SendInline != 0 {
		length = uint64(len(wr.InlineData))
	} else {
		for _, s := range wr.SGList {
			length += uint64(s.Length)
		}
	}
	switch wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAndAdd:
		if length != 8 {
			return bad("an atomic needs one 8-byte local buffer, got %d bytes", length)
		}
	case WRAtomicWrite:
		if length != 8 {
			return bad("ATOMIC_WRITE carries exactly 8 bytes, got %d", length)
		}
	case WRBindMW:
		if wr.MW == nil {
			return bad("IBV_WR_BIND_MW needs a memory window (bind_mw.mw)")
		}
		if wr.MW.pd.dev != q.dev || wr.BindInfo.MR != nil && wr.BindInfo.MR.pd.dev != q.dev {
			return bad("the memory window or its MR belongs to another device")
		}
		length = 0
	case WRLocalInv:
		length = 0
	case WRFlush:
		if wr.FlushSel > wire.FlushSelWholeMR || wr.FlushPlacement == 0 || wr.FlushPlacement&^3 != 0 {
			return bad("FLUSH selectivity %d (0 range, 1 whole MR) placement %#x (1 global visibility, 2 persistence)", wr.FlushSel, wr.FlushPlacement)
		}
	}
	if length > MaxMsgSize {
		return bad("message of %d bytes exceeds max_msg_sz %d", length, MaxMsgSize)
	}
	ud := q.typ == UD || q.typ == GSI
	if ud && wr.AH == nil {
		return bad("a UD send needs an address handle (ah)")
	}
	if ud && wr.AH.pd.dev != q.dev {
		return bad("the address handle belongs to another device")
	}
	if q.sq.full() {
		return errorf("post_send", q.dev.name, q.num, syscall.ENOMEM, "send queue full (%d WRs outstanding, max_send_wr %d)",
			q.sq.tail-q.sq.head, q.sq.max)
	}
	q.sq.room()
	w := q.sq.at(q.sq.tail)
	sge, inline := w.sge[:0], w.inline[:0]
	*w = sendWQE{wr: *wr, length: length, signaled: q.sigAll || wr.Flags&SendSignaled != 0}
	if wr.Flags&SendInline != 0 {
		w.inline = append(inline, wr.InlineData...)
		w.wr.InlineData = w.inline
		w.sge, w.wr.SGList = sge, nil
	} else {
		w.sge = append(sge, wr.SGList...)
		w.wr.SGList = w.sge
		w.inline, w.wr.InlineData = inline, nil
	}
	switch wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAndAdd, WRFlush:
		w.isRdAtom = true
	case WRBindMW:
		// The window's rkey becomes the new one now, as rdma-core's
		// ibv_bind_mw sets ibv_mw.rkey when it posts; the bind checks the
		// former one when it executes.
		w.mwRKey = wr.MW.rkey.Swap(wr.RKey)
	}
	if ud {
		w.path, w.remoteQPN = wr.AH.path, wr.RemoteQPN
		w.sport = q.sport
		w.qkey = wr.RemoteQKey
		if w.qkey&0x80000000 != 0 { // §10.2.5: use the QP's own Q_Key
			w.qkey = q.attr.QKey
		}
	}
	q.sq.tail++
	if q.state == QPSErr || q.state == QPSSQE {
		// ERR and SQE accept send WRs and flush them (IBTA §10.3.1; as
		// rxe's post_send, which refuses only states before RTS).
		q.completeSend(w, WCWRFlushErr, "")
		q.sq.head, q.sq.cur = q.sq.tail, q.sq.tail
	}
	return nil
}

// gather copies n bytes of w's message at offset off into dst, checking the
// local keys. It returns dst extended.
func (q *QP) gather(dst []byte, w *sendWQE, off uint64, n int) ([]byte, error) {
	if w.wr.Flags&SendInline != 0 {
		return append(dst, w.inline[off:off+uint64(n)]...), nil
	}
	for _, s := range w.sge {
		if n == 0 {
			break
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		k := min(uint64(n), l-off)
		b, err := q.dev.mem.SliceCached(&q.keySend, q.pd.pd, s.LKey, true, s.Addr+off, k, 0)
		if err != nil {
			return dst, err
		}
		dst = append(dst, b...)
		n -= int(k)
		off = 0
	}
	return dst, nil
}

// reqRun sends what the send queue allows: it runs until the queue is
// empty or the window, the outstanding-READ/ATOMIC limit, a fence or the
// pacer (the rate limit) stops it, or out's budget is spent: then the rest
// waits for the QP's next turn in the device's scheduler (a go-back-N
// retry resends up to the whole window, maxUnackedPSNs packets, and the
// receive goroutine or a timer must not send that in one loop). Called
// with q.mu held.
func (q *QP) reqRun(out *txBatch) {
	if q.state != QPSRTS && q.state != QPSSQD {
		return
	}
	if q.reqBatch != nil && q.reqBatch != out {
		// Another goroutine's batch holds this QP's earlier packets and
		// has not sent them all yet: packets built here could overtake
		// them. That batch runs the requester once they are out.
		q.reqDeferred = true
		return
	}
	rc := q.typ == RC
	sent := false
	last := -1    // out.pkts index of the last packet this run built
	cont := false // the run stopped at a full batch, and release goes on with it
	for q.sq.cur < q.sq.tail {
		w := q.sq.at(q.sq.cur)
		if q.req.off == 0 && !w.started {
			if q.state == QPSSQD && q.sq.cur >= q.req.sqdEnd {
				break // SQD: finish messages in progress (resending them if need be), start no new one
			}
			if rc && w.wr.Flags&SendFence != 0 && q.req.rdAtomic > 0 {
				break // fence: wait for outstanding READ/ATOMIC to complete
			}
		}
		if w.wr.Opcode == WRBindMW || w.wr.Opcode == WRLocalInv {
			// A local operation runs once every WQE before it has
			// completed: then it never sits among WQEs awaiting
			// acknowledgement (it has no PSN), and a bind or
			// invalidation takes effect after the accesses posted
			// before it are done (rxe runs it as soon as the requester
			// reaches it; waiting is stricter, never looser). The
			// completer runs the requester again when they complete.
			if q.sq.head != q.sq.cur {
				break
			}
			if !q.localOp(w) {
				return
			}
			continue
		}
		if rc && w.isRdAtom && q.req.off == 0 && q.req.rdAtomic >= max(int(q.attr.MaxRdAtomic), 1) {
			break
		}
		if rc && int(q.req.psn.Diff(q.comp.psn)) >= q.window() {
			break
		}
		if q.rnrWaiting() {
			break
		}
		if q.paced() {
			break // the pacer's timer resumes it
		}
		if out.budget <= 0 && !out.unlimited {
			q.req.more = true
			q.dev.sched.push(q)
			break
		}
		if out.full() {
			// out's batch is full: the run goes on once it is sent,
			// which release does with no lock held (reqDeferred), so
			// that a long run never waits for the link holding q.mu.
			out.own(q)
			q.reqDeferred = true
			cont = true
			break
		}
		done, ok := q.sendPacket(w, out)
		if !ok {
			return // the QP went to ERR or SQE
		}
		sent, last = true, len(out.pkts)-1
		out.own(q)
		if !done {
			continue
		}
		q.sq.cur++
		q.req.off = 0
		if !rc {
			// UC and UD complete when the message is on the wire.
			q.completeSend(w, WCSuccess, "")
			q.sq.head = q.sq.cur
		}
	}
	if rc && last >= 0 && q.req.off != 0 && !cont {
		q.ackStopped(&out.pkts[last])
	}
	if sent && rc {
		// The local ACK timer times the wait for a response to a packet
		// sent (IBTA §9.7.6.1.3), so it starts when the batch has left
		// (release), not now: the batch may wait for the link behind
		// every other QP's (with 64 QPs, longer than the 67 ms timeout).
		q.req.armOnSend = true
	}
	if q.state == QPSSQD {
		q.checkDrained()
	}
}

// checkDrained reports SQ_DRAINED once the SQD state has nothing outstanding.
func (q *QP) checkDrained() {
	if q.req.sqdNotified || q.sq.head < q.req.sqdEnd {
		return
	}
	q.req.sqdNotified = true
	if q.attr.EnSQDAsyncNotify {
		q.dev.events.post(AsyncEvent{Type: EventSQDrained, QPNum: q.num})
	}
}

// sendPacket builds and queues the next packet of w (rxe_req.c
// rxe_requester), in steps: the first packet numbers the message's PSNs
// (startWQE); requestFields picks the opcode from wrOps and fills the
// headers the opcode table says it carries; ackReq sets RC's
// acknowledgement request; encodeRequest builds the packet; countSent and
// advance move the requester on. It reports whether w's last packet went
// out, and ok false if w failed (the QP went to ERR or SQE).
func (q *QP) sendPacket(w *sendWQE, out *txBatch) (done, ok bool) {
	if !w.started && !q.startWQE(w) {
		return true, false
	}
	off := q.req.off
	f, paylen, done := q.requestFields(w)
	if f.BTH.Opcode.Transport() == wire.TransportRC {
		f.BTH.AckReq = q.ackReq(done)
	}
	pk, ok := q.encodeRequest(w, &f, off, paylen, out)
	if !ok {
		return true, false
	}
	q.countSent(w, pk, done)
	q.advance(w, &f, done)
	return done, true
}

// startWQE numbers the PSNs of w, whose first packet is about to go: one
// per packet, and for a READ one per response packet (rxe_req.c
// update_wqe_psn). A UD
// message longer than the path MTU fails (IBV_WC_LOC_LEN_ERR, as rxe's).
func (q *QP) startWQE(w *sendWQE) bool {
	pmtu := uint64(q.pmtu)
	w.started = true
	w.firstPSN = q.req.psn
	n := uint64(1)
	if wrOps[w.wr.Opcode].multi || w.wr.Opcode == WRRDMARead {
		n = max(1, (w.length+pmtu-1)/pmtu)
	}
	w.lastPSN = w.firstPSN.Add(int(n - 1))
	if (q.typ == UD || q.typ == GSI) && w.length > pmtu {
		q.failSend(w, WCLocLenErr, fmt.Sprintf("UD message of %d bytes exceeds the path MTU %d", w.length, pmtu))
		return false
	}
	return true
}

// wrOp is what packets a work request opcode sends: the operations (the
// low five bits of the BTH opcode, Table 35) of an only packet and, for
// messages cut at the path MTU (multi), of the first, middle and last.
type wrOp struct {
	only, first, middle, last wire.Opcode
	multi                     bool
}

// wrOps maps each work request opcode that sends packets to its
// operations; the QP type gives the transport bits, and the opcode table
// (wire.OpInfo) then says which headers each packet carries. As rxe's
// next_opcode, without the switch.
var wrOps = [...]wrOp{
	WRSend:              {wire.OpSendOnly, wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLast, true},
	WRSendWithImm:       {wire.OpSendOnlyWithImmediate, wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLastWithImmediate, true},
	WRSendWithInv:       {wire.OpSendOnlyWithInvalidate, wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendLastWithInvalidate, true},
	WRRDMAWrite:         {wire.OpWriteOnly, wire.OpWriteFirst, wire.OpWriteMiddle, wire.OpWriteLast, true},
	WRRDMAWriteWithImm:  {wire.OpWriteOnlyWithImmediate, wire.OpWriteFirst, wire.OpWriteMiddle, wire.OpWriteLastWithImmediate, true},
	WRRDMARead:          {only: wire.OpReadRequest},
	WRAtomicCmpAndSwp:   {only: wire.OpCompareSwap},
	WRAtomicFetchAndAdd: {only: wire.OpFetchAdd},
	WRFlush:             {only: wire.OpFlush},
	WRAtomicWrite:       {only: wire.OpAtomicWrite},
}

// transport returns the transport bits of the QP's opcodes.
func (q *QP) transport() wire.Opcode {
	switch q.typ {
	case UC:
		return wire.TransportUC
	case UD, GSI:
		return wire.TransportUD
	}
	return wire.TransportRC
}

// requestFields returns the fields of w's next packet, from q.req.off on,
// its payload length, and whether it is w's last; it moves q.req.off past
// the payload of a message cut at the path MTU.
func (q *QP) requestFields(w *sendWQE) (f wire.PacketFields, paylen uint64, last bool) {
	wr := &w.wr
	ops := &wrOps[wr.Opcode]
	off := q.req.off
	rem := w.length - off
	code, last := ops.only, true
	if ops.multi {
		paylen = min(rem, uint64(q.pmtu))
		first := off == 0
		last = off+paylen == w.length
		switch {
		case first && !last:
			code = ops.first
		case !first && !last:
			code = ops.middle
		case !first:
			code = ops.last
		}
		q.req.off += paylen
	}
	op := q.transport() | code
	info := op.Info()
	if info.FixedPayload > 0 {
		paylen = uint64(info.FixedPayload) // ATOMIC_WRITE's 8 bytes
	}
	f = wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, PSN: q.req.psn, DestQP: q.attr.DestQPN}}
	// The solicited event bit, on the last packet of a SEND or of a WRITE
	// with immediate data, whose receiver completes a receive WR (rxe_req.c
	// init_req_packet). The DETH's datagrams go to the WR's QPN.
	f.BTH.SolicitedEvent = info.Is(wire.FlagLast) && (info.Is(wire.FlagSend) || info.Is(wire.FlagImmediate)) &&
		wr.Flags&SendSolicited != 0
	x := &f.Ext
	if info.Has(wire.HdrDETH) {
		f.BTH.DestQP = w.remoteQPN
		x.DETH = wire.DETHFields{QKey: w.qkey, SrcQP: q.num}
	}
	if info.Has(wire.HdrFETH) {
		x.FETH = wire.FETHWord(wr.FlushSel, wr.FlushPlacement)
	}
	if info.Has(wire.HdrRETH) {
		// The rest of the message from this packet on: all of a WRITE or
		// FLUSH (off 0), a READ from where a retry resumes it, ATOMIC
		// WRITE's 8 bytes.
		x.RETH = wire.RETHFields{VA: wr.RemoteAddr + off, RKey: wr.RKey, DMALength: uint32(rem)}
	}
	if info.Has(wire.HdrAtomicETH) {
		x.AtomicETH = wire.AtomicETHFields{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
		if wr.Opcode == WRAtomicFetchAndAdd {
			x.AtomicETH.SwapAdd, x.AtomicETH.Compare = wr.CompareAdd, 0 // the addend; no compare
		}
	}
	if info.Has(wire.HdrImmDt) {
		x.ImmDt = wr.ImmData
	}
	if info.Has(wire.HdrIETH) {
		x.IETH = wr.InvalidateRKey
	}
	return f, paylen, last
}

// ackStopped sets AckReq on pk, the last packet of a requester run that
// stopped part-way through a message (the window, the pacer, the batch's
// budget: what is left waits for an ACK, the pacer's timer or the next
// turn in the scheduler). Without it the packets that did leave are
// acknowledged only once later ones carrying AckReq arrive, and those may
// wait behind every other QP's turn: with 64 QPs the retransmit timer
// (67 ms) fired first and resent them (issue 15, BENCHMARKS.md). IBTA Vol
// 1 §9.2.4 (BTH AckReq) lets the requester ask for an acknowledgement on
// any request packet; rxe sets it on the last packet of a message and
// every RXE_MAX_PKT_PER_ACK packets (rxe_req.c init_req_packet), here on
// the last that left as well. pk is not sent yet (the link computes the
// ICRC when it sends), so its BTH may change.
func (q *QP) ackStopped(pk *link.Packet) {
	bth := wire.BTH(pk.Transport())
	if !bth.AckReq() {
		bth.SetAckReq(true)
		q.req.noack = 0
	}
}

// ackReq reports whether an RC packet asks for an acknowledgement: at the
// end of a message (done), every maxPktPerAck packets, and on the packet
// that fills the window, after which nothing more goes out until it is
// acknowledged.
func (q *QP) ackReq(done bool) bool {
	q.req.noack++
	if done || q.req.noack >= maxPktPerAck || int(q.req.psn.Next().Diff(q.comp.psn)) >= q.window() {
		q.req.noack = 0
		return true
	}
	return false
}

// encodeRequest encodes the packet of fields f, with paylen bytes of w's message
// from offset off, into the next buffer of out, addressed and counted. A
// local buffer that fails its key check fails w (IBV_WC_LOC_PROT_ERR).
func (q *QP) encodeRequest(w *sendWQE, f *wire.PacketFields, off, paylen uint64, out *txBatch) (*link.Packet, bool) {
	pk := out.next()
	buf := appendHeaders(pk.Buf, f, int(paylen))
	if paylen > 0 {
		var err error
		if buf, err = q.gather(buf, w, off, int(paylen)); err != nil {
			out.pkts = out.pkts[:len(out.pkts)-1] // drop the half-built packet (its buffer returns at flush)
			q.failSend(w, WCLocProtErr, fmt.Sprintf("local buffer of wr_id %d: %v", w.wr.WRID, err))
			return nil, false
		}
	}
	buf = appendPad(buf, int(paylen))
	finish(pk, buf)
	out.budget -= pk.Len
	if f.BTH.Opcode.Transport() == wire.TransportUD {
		pk.Addr = addrOf(&w.path, w.sport)
	} else {
		pk.Addr = addrOf(&q.path, q.sport)
	}
	q.markECT(&pk.Addr)
	return pk, true
}

// countSent counts pk: sent_pkts, the pacer's and congestion control's
// bytes, and a retransmission or (once per message) a SEND.
func (q *QP) countSent(w *sendWQE, pk *link.Packet, done bool) {
	q.counters[SentPkts].Add(1)
	if q.pacer != nil {
		q.pacer.Sent(time.Now(), pk.Len)
	}
	if q.cc != nil {
		q.cc.Sent(time.Now(), pk.Len)
	}
	if q.retransmitting() {
		q.count(RetransPkts)
	} else if op := w.wr.Opcode; done && (op == WRSend || op == WRSendWithImm || op == WRSendWithInv) {
		q.count(RDMASends) // once per SEND, not per retransmission (rxe counts it on completion)
	}
}

// retransmitting reports whether the packet at q.req.psn was sent before.
func (q *QP) retransmitting() bool {
	return q.req.sentAny && !q.req.psn.After(q.req.maxSent) // maxSent is meaningless before the first packet
}

// advance moves the requester past the packet of fields f just sent: the
// next PSN (a READ request takes one per response packet), the RTT sample
// of an acknowledged RC packet sent for the first time, the highest PSN
// sent, and the READs and atomics outstanding.
func (q *QP) advance(w *sendWQE, f *wire.PacketFields, done bool) {
	npsn := 1
	if w.wr.Opcode == WRRDMARead {
		npsn = int(w.lastPSN.Diff(q.req.psn)) + 1
	}
	if f.BTH.Opcode.Transport() == wire.TransportRC && f.BTH.AckReq && !q.retransmitting() {
		q.sampleSent(q.req.psn.Add(npsn - 1))
	}
	q.req.psn = q.req.psn.Add(npsn)
	if !q.req.sentAny || q.req.psn.Add(-1).After(q.req.maxSent) {
		q.req.maxSent, q.req.sentAny = q.req.psn.Add(-1), true
	}
	if w.isRdAtom && done {
		q.req.rdAtomic++
	}
}

// failSend completes w with a local error. An RC QP goes to ERR and
// reports IBV_EVENT_QP_FATAL; a UC, UD or GSI QP goes to SQE (enterSQE).
func (q *QP) failSend(w *sendWQE, status WCStatus, detail string) {
	idx := q.sq.cur
	for i := q.sq.head; i < q.sq.tail; i++ {
		if q.sq.at(i) == w {
			idx = i
		}
	}
	if q.typ != RC {
		q.enterSQE(int64(idx), status, detail+
			"; the QP is now in SQE: its other send WRs are flushed, receives go on, and ibv_modify_qp to RTS resumes sending")
		return
	}
	q.dev.events.post(AsyncEvent{Type: EventQPFatal, QPNum: q.num, Detail: detail})
	q.enterError(int64(idx), status, detail)
}

// window returns the requester's window in PSNs.
func (q *QP) window() int { return q.req.win.size() }

// rnrWaiting reports whether the requester waits out an RNR NAK timer.
func (q *QP) rnrWaiting() bool { return q.comp.rnrWait }

// scatter copies data into a receive or READ/atomic target described by
// sges at offset off, checking local keys for LOCAL_WRITE; c is the side's
// key cache (q.keyRecv, q.keySend).
func (q *QP) scatter(c *mem.Cache, sges []SGE, off uint64, data []byte) error {
	for _, s := range sges {
		if len(data) == 0 {
			return nil
		}
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		k := min(uint64(len(data)), l-off)
		b, err := q.dev.mem.SliceCached(c, q.pd.pd, s.LKey, true, s.Addr+off, k, mem.LocalWrite)
		if err != nil {
			return err
		}
		copy(b, data[:k])
		data = data[k:]
		off = 0
	}
	if len(data) > 0 {
		return errTooLong
	}
	return nil
}

var errTooLong = fmt.Errorf("message longer than the posted buffers")

func sgeLen(sges []SGE) uint64 {
	var n uint64
	for _, s := range sges {
		n += uint64(s.Length)
	}
	return n
}

// putU64 stores an atomic's original value into the local 8-byte buffer.
func (q *QP) putU64(sges []SGE, v uint64) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], v)
	return q.scatter(&q.keySend, sges, 0, b[:])
}
