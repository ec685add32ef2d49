package verbs

// The responder: requests → data placement, receive completions, ACKs,
// NAKs and READ/atomic responses (rxe_resp.c's role); and the receive
// dispatch for UD and UC.
//
// RC and UC share one per-message state machine (msgStep): the opcode
// sequence, the payload and DMA lengths, the target of an RDMA WRITE and
// the receive a SEND fills, consumed once and released at the message's
// end or abort. The transports differ only in what a fault costs (fault):
// RC answers with a NAK and, for class C errors, goes to ERR; UC has no
// NAK and drops the message (IBTA §9.9.3.1 classes D1 and E; rxe's
// do_class_d1e_error and drop_msg). UC used to have a copy of the machine
// of its own that drifted from RC's: it let a SEND_LAST continue an RDMA
// WRITE and wrote into a receive that had completed, and a WRITE_MIDDLE
// continue a SEND, which panicked.

import (
	"encoding/binary"
	"fmt"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// respState is the responder's progress.
type respState struct {
	psn     wire.PSN // expected PSN (ePSN)
	msn     uint32   // message sequence number (24 bits)
	nakSent bool     // a PSN sequence error NAK was sent for the current gap
	commEst bool     // COMM_EST reported
	msg     msgState // the SEND or RDMA WRITE message in progress
	// wqe is the receive the message in progress consumed (a SEND, or the
	// last packet of an RDMA WRITE with immediate): taken once, at the
	// message's first packet, and released when it completes.
	wqe    curRecv
	ucDrop bool // UC: drop packets until the next FIRST/ONLY
	// short counts the packets shortSend took, for tests to see that a
	// short path ran.
	short uint64
	// Responder resources (max_dest_rd_atomic of them): the ATOMICs
	// executed last and their results, recycled oldest first as rxe
	// does, for answering a duplicate (IBTA §9.7.5.1.3). See duplicate.
	res     []respRes
	resNext int
	reads   readLog   // the READs and FLUSHes executed last
	pend    respQueue // responses waiting for a turn (see respond)
}

// msgKind is the kind of the message in progress.
type msgKind uint8

const (
	msgNone msgKind = iota
	msgSend
	msgWrite
)

func (k msgKind) String() string {
	return [...]string{"none", "SEND", "RDMA WRITE"}[k]
}

// msgState is a SEND or RDMA WRITE message in progress.
type msgState struct {
	kind msgKind
	off  uint64 // bytes placed so far
	// RDMA WRITE: the target range the RETH named, checked at the first
	// packet (nil for a DMA length of 0), and that length.
	target []byte
	dmaLen uint64
}

type curRecv struct {
	active bool
	recvWQE
}

// respRes is a saved ATOMIC result.
type respRes struct {
	valid bool
	psn   wire.PSN
	rkey  uint32
	va    uint64
	orig  uint64 // the original value
}

// readRec is a READ or FLUSH the responder executed: the PSNs its
// responses took and the range it read.
type readRec struct {
	first, last wire.PSN
	rkey        uint32
	va          uint64
	n           uint64
	flush       bool
}

// readLog holds the last maxReadRecords READs and FLUSHes executed, oldest
// overwritten first. 32 bytes a record, allocated as a QP serves them.
type readLog struct {
	recs []readRec
	next int
}

func (l *readLog) add(r readRec) {
	if len(l.recs) < maxReadRecords {
		l.recs = append(l.recs, r)
		return
	}
	l.recs[l.next] = r
	l.next = (l.next + 1) % len(l.recs)
}

// matches returns the record a duplicate READ (or FLUSH) repeats: the
// READ executed with the duplicate's rkey whose PSNs hold the duplicate's
// and whose range holds its range. A retry asks for the rest of a READ
// from the PSN of its first missing response (IBTA §9.7.5.1.3: a subset of
// the original; rxe's duplicate_request checks the same); a replay needs
// the PSNs it answers with to be the original's.
func (l *readLog) matches(psn wire.PSN, npkts uint64, rkey uint32, va, n uint64, flush bool) bool {
	for i := range l.recs {
		r := &l.recs[i]
		if r.flush != flush || r.rkey != rkey || psn.Diff(r.first) < 0 || psn.Diff(r.last) > 0 {
			continue
		}
		if flush {
			if psn == r.first && va == r.va && n == r.n {
				return true
			}
			continue
		}
		if uint64(r.last.Diff(psn))+1 < npkts || va < r.va || n > r.n || va-r.va > r.n-n {
			continue
		}
		return true
	}
	return false
}

// Response items waiting in respState.pend.
const (
	itemACK    = iota // an ACK or NAK
	itemRead          // READ responses (FLUSH: one of no data)
	itemAtomic        // an atomic ACK
)

// respItem is a response not sent yet.
type respItem struct {
	kind uint8
	syn  wire.Syndrome
	psn  wire.PSN // ACK/NAK: its PSN; READ: the next response's PSN
	msn  uint32   // the MSN when the request was executed
	orig uint64   // atomic: the original value
	// READ: what is left to send.
	rkey   uint32
	va     uint64
	left   uint64
	first  bool // the next response is the READ's first
	replay bool // a duplicate's: an rkey failure is not fatal
}

// respQueue is a FIFO of responses that wait behind a READ's: an RC
// responder's responses go out in PSN order (IBTA §9.7.5.1.2; an ACK
// ahead of an earlier READ's responses is an implicit NAK of the READ).
type respQueue struct {
	items    []respItem
	head     int
	rdAtomic int // READ, ATOMIC and FLUSH responses among the items
}

func (r *respQueue) len() int         { return len(r.items) - r.head }
func (r *respQueue) front() *respItem { return &r.items[r.head] }

func (r *respQueue) push(it respItem) {
	if it.kind == itemACK && it.syn == wire.SyndromeACK && r.len() > 0 {
		// ACKs are cumulative: one after another says it all.
		if l := &r.items[len(r.items)-1]; l.kind == itemACK && l.syn == wire.SyndromeACK {
			l.psn, l.msn = it.psn, it.msn
			return
		}
	}
	if it.kind != itemACK {
		r.rdAtomic++
	}
	r.items = append(r.items, it)
}

// readPending reports whether a READ's responses not sent yet include one
// of the npkts PSNs from psn.
func (r *respQueue) readPending(psn wire.PSN, npkts uint64) bool {
	for i := r.head; i < len(r.items); i++ {
		if it := &r.items[i]; it.kind == itemRead {
			if d := it.psn.Diff(psn); d >= 0 && uint64(d) < npkts {
				return true
			}
		}
	}
	return false
}

func (r *respQueue) pop() {
	if r.items[r.head].kind != itemACK {
		r.rdAtomic--
	}
	r.items[r.head] = respItem{}
	r.head++
	if r.head == len(r.items) {
		r.items, r.head = r.items[:0], 0
		if cap(r.items) > 64 {
			r.items = nil // a burst of requests is over: let it go
		}
	}
}

// receive handles one packet addressed to q. It runs on the device's
// receive goroutine; replies go to out.
func (q *QP) receive(p *wire.Packet, a *link.Addr, out *txBatch) {
	q.mu.Lock()
	switch p.Opcode() {
	case wire.OpcodeRCSendOnly:
		if q.shortSend(p, a, out) {
			q.mu.Unlock()
			return
		}
	case wire.OpcodeRCAcknowledge:
		if q.shortACK(p, a) {
			q.mu.Unlock()
			return
		}
	}
	defer q.mu.Unlock()
	q.counters[RcvdPkts].Add(1)
	op := p.Opcode()
	switch q.typ {
	case RC:
		if op.Transport() != wire.TransportRC {
			q.count(RcvdBadOpcode)
			return
		}
	case UC:
		if op.Transport() != wire.TransportUC {
			q.count(RcvdBadOpcode)
			return
		}
	default:
		if op.Transport() != wire.TransportUD {
			q.count(RcvdBadOpcode)
			return
		}
	}
	if q.state < QPSRTR || q.state == QPSErr {
		q.count(RcvdBadQP)
		return
	}
	if q.typ == RC || q.typ == UC {
		// Connected QPs take packets from their peer only: the source GID
		// must be the path's destination (the inbound address validation
		// of IBTA Vol 1 Rev 1.2.1 §9.6.1.2.3, which Annex A17.4.4.2 applies
		// to RoCE v2's IP addresses; rxe_recv.c check_addr).
		if a.SrcGID != q.path.dgid {
			q.count(RcvdBadQP)
			return
		}
		if q.state == QPSRTR && !q.resp.commEst {
			q.resp.commEst = true
			q.dev.events.post(AsyncEvent{Type: EventCommEst, QPNum: q.num})
		}
	}
	if p.Info.Is(wire.FlagResponse) {
		if q.typ == RC {
			q.receiveResponse(p, out)
		}
		return
	}
	switch q.typ {
	case RC:
		q.rcRequest(p, out)
	case UC:
		q.ucRequest(p)
	default:
		q.udRequest(p, a)
	}
}

// shortSend is the responder's short path for the common case (issue 15):
// an RC SEND ONLY, at the expected PSN, outside a message, on a QP in RTS
// from its peer's address, into the next receive of the QP's own receive
// queue, whose first SGE holds the whole payload. It checks all of that,
// and the receive's lkey, before it changes anything, and when a check
// fails it reports false having changed nothing: the general path
// (rcRequest) then takes the packet and gives it the answer it is due. What
// it takes it leaves as the general path would — the bytes, the receive's
// completion, the counters, the expected PSN and MSN, the ACK
// (TestShortSendAsGeneral, FuzzShortSendDiff) — in one function and a
// few calls, not eleven functions' (receive's checks, rcRequest, msgStep,
// sendStep, takeRecv, scatter, completeRecv, respond, emit ...): in the
// lab's VMs a round trip's path pays more for the distinct calls and
// branches it runs than for its instructions (BENCHMARKS.md, "What the VMs
// charge for"). Called with q.mu held.
func (q *QP) shortSend(p *wire.Packet, a *link.Addr, out *txBatch) bool {
	// Checks the others imply are left out: a QP with an SRQ has no
	// receive of its own (q.rq.n is 0), and an RC QP in RTS holds a
	// receive taken (resp.wqe) only inside a SEND message (msg.kind): a
	// fault that ends one in error sends the QP to ERR.
	r, data, psn := &q.resp, p.Payload(), p.BTH().PSN()
	if q.typ != RC || q.state != QPSRTS || r.msg.kind != msgNone || psn != r.psn || a.SrcGID != q.path.dgid ||
		len(data) > q.pmtu || q.rq.n == 0 || q.dev.generalOnly {
		return false
	}
	e := &q.rq.ring[q.rq.head]
	if len(e.sge) == 0 || uint64(len(data)) > uint64(e.sge[0].Length) {
		return false
	}
	b, err := q.dev.mem.SliceCached(&q.keyRecv, q.pd.pd, e.sge[0].LKey, true, e.sge[0].Addr, uint64(len(data)), mem.LocalWrite)
	if err != nil {
		// The general path fails the receive with IBV_WC_LOC_PROT_ERR,
		// or, for a SEND without payload, which checks no key, completes it.
		return false
	}
	copy(b, data)
	r.short++
	q.counters[RcvdPkts].Add(1)
	wc := WC{WRID: e.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(len(data)), QPNum: q.num}
	q.rq.pop()
	r.nakSent = false
	r.msn = (r.msn + 1) & wire.PSNMask
	r.psn = psn.Next()
	q.count(RDMARecvs)
	q.recvCQ.push(wc)
	if p.BTH().AckReq() {
		if q.respFree(out) {
			// respond's case of an ACK with nothing queued before it.
			q.ackMSN(out, wire.SyndromeACK, psn, r.msn)
			out.ownResp(q)
		} else {
			q.ack(out, wire.SyndromeACK, psn)
		}
	}
	return true
}

// respond sends a response, or queues it behind the responses that wait
// (PSN order). A READ sends what out's budget allows now and queues the
// rest for the device's scheduler.
func (q *QP) respond(out *txBatch, it respItem) {
	if q.respFree(out) {
		if it.kind != itemRead {
			q.emit(out, &it)
			return
		}
		if q.emitRead(out, &it) {
			return
		}
	}
	q.resp.pend.push(it)
	if q.respBatch == nil {
		q.dev.sched.push(q)
	} // else the batch holding q's responses gives it a turn when it is sent (release)
}

// respFree reports whether a response may go into out now: none waits
// before it, and no other batch holds q's earlier responses.
func (q *QP) respFree(out *txBatch) bool {
	return q.resp.pend.len() == 0 && (q.respBatch == nil || q.respBatch == out)
}

// ownResp records that b holds q's latest response packets: no other batch
// sends q's responses until b's are sent. Called with q.mu held.
func (b *txBatch) ownResp(q *QP) {
	if q.respBatch == nil {
		q.respBatch = b
		if q.reqBatch != b {
			b.owned = append(b.owned, q)
		}
	}
}

// serveResponses sends waiting responses while out's budget lasts. Called
// with q.mu held, from the scheduler.
func (q *QP) serveResponses(out *txBatch) {
	if q.respBatch != nil && q.respBatch != out {
		return // that batch gives q its turn again once its packets are out
	}
	for q.resp.pend.len() > 0 && (out.budget > 0 || out.unlimited) {
		it := q.resp.pend.front()
		if it.kind == itemRead {
			if !q.emitRead(out, it) {
				return
			}
		} else {
			q.emit(out, it)
		}
		if q.resp.pend.len() == 0 {
			return // the READ failed and the QP went to ERR (emitRead)
		}
		q.resp.pend.pop()
	}
}

// emit sends an ACK, NAK or atomic ACK.
func (q *QP) emit(out *txBatch, it *respItem) {
	switch it.kind {
	case itemAtomic:
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpAtomicAcknowledge, PKey: wire.DefaultPKey,
			DestQP: q.attr.DestQPN, PSN: it.psn}}
		f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: it.msn}
		f.Ext.AtomicAck = it.orig
		pk := out.next()
		finish(pk, appendHeaders(pk.Buf, &f, 0))
		q.counters[SentPkts].Add(1)
		pk.Addr = addrOf(&q.path, q.sport)
	default:
		q.ackMSN(out, it.syn, it.psn, it.msn)
	}
	out.ownResp(q)
}

// ack answers with an ACK (or NAK) of psn and the current MSN.
func (q *QP) ack(out *txBatch, syn wire.Syndrome, psn wire.PSN) {
	q.respond(out, respItem{kind: itemACK, syn: syn, psn: psn, msn: q.resp.msn})
}

// ackMSN builds an ACK (or NAK).
//
// A positive ACK right behind this QP's previous positive ACK in the batch
// replaces it instead of following it: an ACK acknowledges every PSN up to
// its own (IBTA §9.7.5.1.2, coalesced acknowledgements), so the requester
// learns the same from one packet. With several messages in flight a
// receive batch often ends more than one (a 64 KiB WRITE ends every 16
// packets at path MTU 4096), and each ACK saved is a packet less for both
// kernels and a receive less for the requester.
func (q *QP) ackMSN(out *txBatch, syn wire.Syndrome, psn wire.PSN, msn uint32) {
	if syn == wire.SyndromeACK && out.lastACK == q && out.lastACKAt == len(out.pkts) {
		t := out.pkts[len(out.pkts)-1].Transport()
		wire.BTH(t).SetPSN(psn)
		wire.AETH(t[wire.BTHLen:]).SetMSN(msn)
		return
	}
	// BTH and AETH straight, not through PacketFields' encoder (a
	// 200-byte struct and a walk of the opcode's headers): an ACK a
	// round trip (bench/callgrind.sh).
	bth := wire.BTHFields{Opcode: wire.OpcodeRCAcknowledge, PKey: wire.DefaultPKey, DestQP: q.attr.DestQPN, PSN: psn}
	pk := out.next()
	finish(pk, wire.AppendAETH(bth.Append(pk.Buf), syn, msn))
	q.counters[SentPkts].Add(1)
	pk.Addr = addrOf(&q.path, q.sport)
	if syn == wire.SyndromeACK {
		out.lastACK, out.lastACKAt = q, len(out.pkts)
	}
}

// emitRead sends READ responses of it while out's budget lasts; it reports
// whether it sent the last. The region is looked up again for every
// burst, as rxe's read_reply does (rxe_recheck_mr): a region deregistered
// while its READ is being answered ends the answer with Remote Access
// Error (fatal to the QP, as for a new READ; not for a duplicate's).
func (q *QP) emitRead(out *txBatch, it *respItem) bool {
	pmtu := uint64(q.pmtu)
	for out.budget > 0 || out.unlimited {
		n := min(it.left, max(pmtu, uint64(max(out.budget, 0))/pmtu*pmtu))
		if out.unlimited {
			n = it.left
		}
		var b []byte
		if n > 0 {
			var err error
			b, err = q.dev.mem.SliceRemoteCached(&q.keyRemote, q.pd.pd, q, it.rkey, it.va, n, mem.RemoteRead)
			if err != nil {
				q.count(RcvdBadRKey)
				if it.replay {
					q.ackMSN(out, wire.SyndromeRemAccessErr, it.psn, it.msn)
					out.ownResp(q)
					return true
				}
				// The QP goes to ERR: what waits behind this READ
				// answers requests it will not see through.
				psn := it.psn
				q.resp.pend = respQueue{}
				q.nakNow(out, wire.SyndromeRemAccessErr, psn, EventQPAccessErr, WCLocProtErr,
					fmt.Sprintf("RDMA READ at PSN %v: %v", psn, err))
				return true
			}
		}
		for {
			chunk := min(uint64(len(b)), pmtu)
			var code wire.Opcode
			switch lastPkt := it.left <= pmtu; {
			case it.first && lastPkt:
				code = wire.OpReadResponseOnly
			case it.first:
				code = wire.OpReadResponseFirst
			case lastPkt:
				code = wire.OpReadResponseLast
			default:
				code = wire.OpReadResponseMiddle
			}
			f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | code, PKey: wire.DefaultPKey,
				DestQP: q.attr.DestQPN, PSN: it.psn}}
			f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: it.msn}
			pk := out.next()
			buf := appendHeaders(pk.Buf, &f, int(chunk))
			buf = append(buf, b[:chunk]...)
			finish(pk, appendPad(buf, int(chunk)))
			q.counters[SentPkts].Add(1)
			pk.Addr = addrOf(&q.path, q.sport)
			out.budget -= pk.Len
			b = b[chunk:]
			it.first = false
			it.psn = it.psn.Next()
			it.va += chunk
			it.left -= chunk
			if len(b) == 0 {
				break
			}
		}
		out.ownResp(q)
		if it.left == 0 {
			return true
		}
	}
	return false
}

// nakFatal answers a request with a NAK, reports the responder-side error
// and moves the QP to ERR (IBTA §9.9.3.1: class C and D errors on RC).
// The receive being filled, if any, completes with st. The NAK waits
// behind the responses already waiting (PSN order).
func (q *QP) nakFatal(out *txBatch, syn wire.Syndrome, psn wire.PSN, ev EventType, st WCStatus, detail string) {
	q.ack(out, syn, psn)
	q.fatal(ev, st, detail)
}

// nakNow is nakFatal for a NAK that goes out at once, from the turn that
// sends the responses waiting.
func (q *QP) nakNow(out *txBatch, syn wire.Syndrome, psn wire.PSN, ev EventType, st WCStatus, detail string) {
	q.ackMSN(out, syn, psn, q.resp.msn)
	out.ownResp(q)
	q.fatal(ev, st, detail)
}

func (q *QP) fatal(ev EventType, st WCStatus, detail string) {
	q.dev.events.post(AsyncEvent{Type: ev, QPNum: q.num, Detail: detail})
	if q.resp.wqe.active {
		// The receive being filled fails; enterError flushes the others.
		q.failRecv(st, detail)
	}
	q.resp.msg = msgState{}
	q.enterError(-1, WCWRFlushErr, "")
}

// rnrNAK tells the requester no receive is posted (IBTA §9.7.5.2.8). The
// packets of the same burst behind psn then arrive out of sequence; the RNR
// NAK already sends the requester back to psn, so no PSN sequence error NAK
// follows it (nakSent), which would cost the requester a retry.
func (q *QP) rnrNAK(out *txBatch, psn wire.PSN) {
	q.count(SendRNRErr)
	q.resp.nakSent = true
	q.ack(out, wire.RNRNAK(q.attr.MinRNRTimer), psn)
}

// takeRecv claims the next receive (from the SRQ or the RQ).
func (q *QP) takeRecv() bool {
	if q.srq != nil {
		if !q.srq.take(&q.resp.wqe.recvWQE) {
			return false
		}
	} else {
		e := q.rq.peek()
		if e == nil {
			return false
		}
		q.resp.wqe.wrID = e.wrID
		q.resp.wqe.sge = append(q.resp.wqe.sge[:0], e.sge...)
		q.rq.pop()
	}
	q.resp.wqe.active = true
	return true
}

// releaseRecv forgets the receive taken: its buffer is the application's
// again, and nothing can scatter into it.
func (q *QP) releaseRecv() {
	q.resp.wqe.active = false
	clear(q.resp.wqe.sge)
	q.resp.wqe.sge = q.resp.wqe.sge[:0]
}

// completeRecv completes the receive the message consumed with wc (status
// success) and ends the message.
func (q *QP) completeRecv(wc WC) {
	q.releaseRecv()
	q.count(RDMARecvs)
	q.recvCQ.push(wc)
}

// failRecv completes the receive taken with an error.
func (q *QP) failRecv(st WCStatus, detail string) {
	wc := WC{WRID: q.resp.wqe.wrID, Status: st, Opcode: WCRecv, QPNum: q.num, Detail: detail}
	q.releaseRecv()
	q.recvCQ.push(wc)
}

// faultKind is what went wrong with a request, the IBTA error class's
// cause; fault is how each transport answers it.
type faultKind uint8

const (
	faultOpSeq      faultKind = iota + 1 // opcode out of sequence (§9.7.4.1.4)
	faultLength                          // payload or DMA length (rxe check_length)
	faultRKey                            // rkey, PD, access or range (§9.7.4.1.5)
	faultRNR                             // no receive posted
	faultTooLong                         // the message overflows the receive
	faultRecvKey                         // the receive's own lkey or range
	faultInvalidate                      // SEND_WITH_INVALIDATE's rkey refused
)

type fault struct {
	kind   faultKind
	detail string
}

// msgStep takes one SEND or RDMA WRITE packet at the expected PSN through
// the message state machine; nil means it was placed. Shared by RC and UC:
// a fault leaves the state for the transport to settle (rcFault, ucFault).
func (q *QP) msgStep(p *wire.Packet) *fault {
	info := p.Info
	m := &q.resp.msg
	kind := msgSend
	if info.Is(wire.FlagWrite) {
		kind = msgWrite
	}
	start, last := info.Is(wire.FlagFirst), info.Is(wire.FlagLast)
	psn := p.BTH().PSN()
	// Opcode sequence (IBTA §9.7.4.1.4; rxe check_op_seq): FIRST or ONLY
	// outside a message, MIDDLE or LAST of its kind inside one.
	switch {
	case m.kind == msgNone && !start:
		return &fault{faultOpSeq, fmt.Sprintf("%v at PSN %v continues no message (FIRST missing)", p.Opcode(), psn)}
	case m.kind != msgNone && start:
		if q.typ != UC {
			return &fault{faultOpSeq, fmt.Sprintf("%v at PSN %v starts a message inside a %v message (LAST missing)", p.Opcode(), psn, m.kind)}
		}
		// UC class D1: the partial message is lost; this one starts
		// afresh, in the receive the lost one had taken if any.
		q.abandonMsg()
	case m.kind != msgNone && m.kind != kind:
		return &fault{faultOpSeq, fmt.Sprintf("%v at PSN %v inside a %v message", p.Opcode(), psn, m.kind)}
	}
	// Payload length (IBTA Vol 1 C9-92, as rxe_resp_check_length cites it): a FIRST
	// or MIDDLE carries the path MTU, a LAST 1 byte to the path MTU, an
	// ONLY up to it.
	n, pmtu := len(p.Payload()), q.pmtu
	if start && last && n > pmtu || !last && n != pmtu || !start && last && (n == 0 || n > pmtu) {
		return &fault{faultLength, fmt.Sprintf("%v at PSN %v carries %d bytes at path MTU %d", p.Opcode(), psn, n, pmtu)}
	}
	if kind == msgSend {
		return q.sendStep(p, start, last)
	}
	return q.writeStep(p, start, last)
}

func (q *QP) sendStep(p *wire.Packet, start, last bool) *fault {
	m := &q.resp.msg
	if start {
		if !q.resp.wqe.active && !q.takeRecv() {
			return &fault{faultRNR, ""}
		}
		*m = msgState{kind: msgSend}
	}
	data := p.Payload()
	if err := q.scatter(&q.keyRecv, q.resp.wqe.sge, m.off, data); err != nil {
		if err == errTooLong {
			return &fault{faultTooLong, fmt.Sprintf("SEND of more than the %d bytes posted in receive wr_id %d", sgeLen(q.resp.wqe.sge), q.resp.wqe.wrID)}
		}
		return &fault{faultRecvKey, fmt.Sprintf("receive wr_id %d: %v", q.resp.wqe.wrID, err)}
	}
	m.off += uint64(len(data))
	if !last {
		return nil
	}
	wc := WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(m.off), QPNum: q.num}
	if imm := p.ImmDt(); imm != nil {
		wc.Flags |= WCWithImm
		wc.ImmData = imm.Value()
	}
	if inv := p.IETH(); inv != nil {
		rkey := inv.Value()
		if err := q.dev.mem.Invalidate(q.pd.pd, rkey); err != nil {
			return &fault{faultInvalidate, fmt.Sprintf("SEND_WITH_INVALIDATE at PSN %v: %v", p.BTH().PSN(), err)}
		}
		wc.Flags |= WCWithInv
		wc.ImmData = rkey
	}
	*m = msgState{}
	q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	q.completeRecv(wc)
	return nil
}

// maxDMALen is the largest DMA length rxe's responder takes (check_length).
const maxDMALen = 1 << 31

func (q *QP) writeStep(p *wire.Packet, start, last bool) *fault {
	m := &q.resp.msg
	info := p.Info
	psn := p.BTH().PSN()
	data := p.Payload()
	if start {
		r := p.RETH()
		n := uint64(r.DMALength())
		if n > maxDMALen {
			return &fault{faultLength, fmt.Sprintf("RDMA WRITE at PSN %v: DMA length %d exceeds 2^31", psn, n)}
		}
		b, err := q.remoteRange(r.RKey(), r.VA(), n, mem.RemoteWrite)
		if err != nil {
			return &fault{faultRKey, fmt.Sprintf("PSN %v: %v", psn, err)}
		}
		*m = msgState{kind: msgWrite, target: b, dmaLen: n}
	}
	if end := m.off + uint64(len(data)); end > m.dmaLen || last && end != m.dmaLen {
		return &fault{faultLength, fmt.Sprintf("RDMA WRITE %v at PSN %v: %d bytes at offset %d do not fit the DMA length %d",
			p.Opcode(), psn, len(data), m.off, m.dmaLen)}
	}
	imm := last && info.Is(wire.FlagImmediate)
	if imm && !q.resp.wqe.active && !q.takeRecv() {
		// WRITE_WITH_IMM consumes a receive; without one, RNR (the data
		// of the earlier packets is written again on retry).
		if start {
			*m = msgState{} // WRITE_ONLY_WITH_IMM: the retry starts the message again
		}
		return &fault{faultRNR, ""}
	}
	copy(m.target[m.off:], data)
	m.off += uint64(len(data))
	if !last {
		return nil
	}
	dmaLen := m.dmaLen
	*m = msgState{}
	q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	if imm {
		q.completeRecv(WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecvRDMAWithImm,
			ByteLen: uint32(dmaLen), QPNum: q.num, Flags: WCWithImm, ImmData: p.ImmDt().Value()})
	}
	return nil
}

// remoteRange checks a remote key for this QP: the QP's own access flags
// (qp_access_flags) and the region's (IBTA §10.6.3.3) — and returns the
// range. A zero-length transfer checks no key (§9.4.1.1, §9.4.3).
func (q *QP) remoteRange(rkey uint32, va, n uint64, need mem.Access) ([]byte, error) {
	if q.attr.AccessFlags&need != need {
		return nil, fmt.Errorf("this QP's qp_access_flags %v do not allow %v (rkey %#x addr %#x len %d)",
			q.attr.AccessFlags, need, rkey, va, n)
	}
	if n == 0 {
		return nil, nil
	}
	return q.dev.mem.SliceRemoteCached(&q.keyRemote, q.pd.pd, q, rkey, va, n, need)
}

// abandonMsg drops the UC message in progress. A receive it took stays
// taken and is filled again from its start by the next SEND (rxe's
// do_class_d1e_error resets the receive's DMA state the same way): it has
// not completed, so its buffer is not the application's yet.
func (q *QP) abandonMsg() {
	q.resp.msg = msgState{}
}

// rcFault answers an RC request that failed: RNR NAK (class B), or a NAK
// and the error state (class C; a refused SEND_WITH_INVALIDATE is class J).
func (q *QP) rcFault(out *txBatch, psn wire.PSN, f *fault) {
	switch f.kind {
	case faultRNR:
		q.rnrNAK(out, psn)
	case faultOpSeq:
		q.count(RcvdBadOpSeq)
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr, f.detail)
	case faultLength:
		q.count(RcvdBadLength)
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr, f.detail)
	case faultTooLong:
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr, f.detail)
	case faultRKey:
		q.count(RcvdBadRKey)
		q.nakFatal(out, wire.SyndromeRemAccessErr, psn, EventQPAccessErr, WCLocProtErr, f.detail)
	case faultRecvKey:
		q.nakFatal(out, wire.SyndromeRemOpErr, psn, EventQPFatal, WCLocProtErr, f.detail)
	case faultInvalidate:
		// rxe (RESPST_ERR_INVALIDATE_RKEY, "RC - Class J") completes the
		// receive with IBV_WC_REM_INV_REQ_ERR and moves the QP to ERR;
		// the region stays valid. rxe then acknowledges the request as if
		// it had succeeded, so its sender never learns; goroce NAKs it
		// with Invalid Request, which the sender's IBV_WC_REM_INV_REQ_ERR
		// reports.
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCRemInvReqErr, f.detail)
	}
}

// ucFault drops a UC message that failed, silently as rxe does (UC has no
// NAK; an event per packet would let a peer fill the event queue): the
// rest of the message is dropped up to the next FIRST or ONLY, and the
// drop is counted. A receive the message took is used again by the next
// SEND, unless the message itself failed it (too long, a bad receive
// buffer): that one completes with the error.
func (q *QP) ucFault(p *wire.Packet, f *fault) {
	switch f.kind {
	case faultRNR:
		q.count(RcvdNoRecvWQE)
	case faultOpSeq:
		q.count(RcvdBadOpSeq)
	case faultLength:
		q.count(RcvdBadLength)
	case faultRKey:
		q.count(RcvdBadRKey)
	case faultTooLong:
		q.failRecv(WCLocLenErr, "UC SEND: "+f.detail)
	case faultRecvKey:
		q.failRecv(WCLocProtErr, "UC SEND: "+f.detail)
	}
	q.abandonMsg()
	q.resp.ucDrop = !p.Info.Is(wire.FlagLast) || f.kind == faultOpSeq
}

func (q *QP) rcRequest(p *wire.Packet, out *txBatch) {
	bth := p.BTH()
	psn := bth.PSN()
	switch d := psn.Diff(q.resp.psn); {
	case d > 0:
		// A gap: NAK once with the PSN we expect: the AETH's PSN sequence error
		// syndrome (see wire.Syndrome); rxe_resp.c check_psn, its counter
		// out_of_seq_request.
		q.count(OutOfSeqRequest)
		if !q.resp.nakSent {
			q.resp.nakSent = true
			q.ack(out, wire.SyndromePSNSeqErr, q.resp.psn)
		}
		return
	case d < 0:
		q.count(DuplicateRequest)
		q.duplicate(p, out)
		return
	}
	q.resp.nakSent = false
	info := p.Info
	if info.Is(wire.FlagSend) || info.Is(wire.FlagWrite) {
		if f := q.msgStep(p); f != nil {
			q.rcFault(out, psn, f)
			return
		}
		q.resp.psn = psn.Next()
		if bth.AckReq() {
			q.ack(out, wire.SyndromeACK, psn)
		}
		return
	}
	// The other requests are single packets: none may come inside a
	// message (§9.7.4.1.4).
	if k := q.resp.msg.kind; k != msgNone {
		q.count(RcvdBadOpSeq)
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("%v at PSN %v inside a %v message (LAST missing)", p.Opcode(), psn, k))
		return
	}
	rdAtomic := info.Is(wire.FlagRead) || info.Is(wire.FlagAtomic) || info.Is(wire.FlagAtomicWrite) || info.Is(wire.FlagFlush)
	if rdAtomic && q.attr.MaxDestRdAtomic == 0 {
		// No responder resources: rxe answers a READ, ATOMIC or
		// ATOMIC_WRITE with NAK Invalid Request and goes to ERR
		// (check_resource: RXE_READ_OR_ATOMIC_MASK | RXE_ATOMIC_WRITE_MASK,
		// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, class C), and so does goroce,
		// for FLUSH too (it takes a resource here, as READ does).
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("%v at PSN %v: this QP's max_dest_rd_atomic is 0, so it takes no RDMA READ, ATOMIC, ATOMIC_WRITE or FLUSH request", p.Opcode(), psn))
		return
	}
	if rdAtomic && q.resp.pend.rdAtomic >= maxPendingRdAtomic {
		// More READ/ATOMIC responses waiting than any requester keeping to
		// its max_rd_atomic can have outstanding (class C,
		// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("%v at PSN %v: %d READ/ATOMIC responses are still being sent; a requester may have at most max_rd_atomic outstanding",
				p.Opcode(), psn, q.resp.pend.rdAtomic))
		return
	}
	switch {
	case info.Is(wire.FlagRead):
		q.rcRead(p, out, false)
	case info.Is(wire.FlagAtomic):
		q.rcAtomic(p, out)
	case info.Is(wire.FlagFlush):
		q.rcFlush(p, out, false)
	case info.Is(wire.FlagAtomicWrite):
		if q.rcAtomicWrite(p, out) {
			q.resp.psn = psn.Next()
			if bth.AckReq() {
				q.ack(out, wire.SyndromeACK, psn)
			}
		}
	default:
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr, fmt.Sprintf("unsupported opcode %v", p.Opcode()))
	}
}

// checkAccess is remoteRange for an RC request: a failure is answered
// with NAK Remote Access Error and, for a new request, is fatal
// (IBV_EVENT_QP_ACCESS_ERR, class C). For a replayed duplicate (replay)
// it is not: the duplicate may be a late network copy of a READ or FLUSH
// the requester completed long ago, its region since deregistered, and a
// healthy connection must not die of it (the requester drops the NAK as a
// ghost; a genuine retry fails with IBV_WC_REM_ACCESS_ERR). See duplicate.
func (q *QP) checkAccess(out *txBatch, psn wire.PSN, rkey uint32, va, n uint64, need mem.Access, replay bool) ([]byte, bool) {
	b, err := q.remoteRange(rkey, va, n, need)
	if err == nil {
		return b, true
	}
	q.count(RcvdBadRKey)
	if replay {
		q.ack(out, wire.SyndromeRemAccessErr, psn)
	} else {
		q.nakFatal(out, wire.SyndromeRemAccessErr, psn, EventQPAccessErr, WCLocProtErr, fmt.Sprintf("PSN %v: %v", psn, err))
	}
	return nil, false
}

// saveRes records an ATOMIC's result in the responder resources,
// overwriting the oldest record when all max_dest_rd_atomic are taken: a
// requester that keeps within the limit (its max_rd_atomic at most this
// max_dest_rd_atomic) has completed that request already, since it has at
// most that many outstanding and completes them in order. The responder
// cannot tell otherwise (it never learns which responses arrived), so
// like rxe ("it is the requesters job to not send too many read/atomic
// ops, we just recycle the responder resource queue") it does not refuse
// the new request; duplicate says what becomes of a retry of an
// overwritten one. max_dest_rd_atomic 0 never gets here (rcRequest).
func (q *QP) saveRes(r respRes) {
	n := int(q.attr.MaxDestRdAtomic)
	if n == 0 {
		return
	}
	if len(q.resp.res) != n {
		q.resp.res = make([]respRes, n)
		q.resp.resNext = 0
	}
	q.resp.res[q.resp.resNext] = r
	q.resp.resNext = (q.resp.resNext + 1) % n
}

func (q *QP) findRes(psn wire.PSN) *respRes {
	for i := range q.resp.res {
		if r := &q.resp.res[i]; r.valid && r.psn == psn {
			return r
		}
	}
	return nil
}

// rcRead answers an RDMA READ request. replay is set for a duplicate
// request that repeats a READ this QP executed (duplicate): it is
// executed again from its own RETH, as a new READ is (the rkey, bounds and
// access checked again, a failure NAKed with Remote Access Error, not
// fatal here: checkAccess), its responses carrying the duplicate's PSNs,
// without moving the expected PSN or the MSN.
func (q *QP) rcRead(p *wire.Packet, out *txBatch, replay bool) {
	psn := p.BTH().PSN()
	r := p.RETH()
	n := uint64(r.DMALength())
	if n > maxDMALen && !replay {
		q.count(RcvdBadLength)
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("RDMA READ at PSN %v: DMA length %d exceeds 2^31", psn, n))
		return
	}
	pmtu := uint64(q.pmtu)
	npkts := max(1, (n+pmtu-1)/pmtu)
	if _, ok := q.checkAccess(out, psn, r.RKey(), r.VA(), n, mem.RemoteRead, replay); !ok {
		return
	}
	if !replay {
		q.resp.reads.add(readRec{first: psn, last: psn.Add(int(npkts - 1)), rkey: r.RKey(), va: r.VA(), n: n})
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
		q.resp.psn = psn.Add(int(npkts))
	}
	q.respond(out, respItem{kind: itemRead, psn: psn, msn: q.resp.msn, rkey: r.RKey(), va: r.VA(), left: n, first: true, replay: replay})
}

func (q *QP) rcAtomic(p *wire.Packet, out *txBatch) {
	psn := p.BTH().PSN()
	a := p.AtomicETH()
	if a.VA()%8 != 0 {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("atomic at PSN %v: address %#x is not 8-byte aligned", psn, a.VA()))
		return
	}
	b, ok := q.checkAccess(out, psn, a.RKey(), a.VA(), 8, mem.RemoteAtomic, false)
	if !ok {
		return
	}
	q.dev.atomicMu.Lock()
	orig := binary.NativeEndian.Uint64(b)
	v := orig
	if p.Opcode().Operation() == wire.OpCompareSwap {
		if orig == a.Compare() {
			v = a.SwapAdd()
		}
	} else {
		v = orig + a.SwapAdd()
	}
	binary.NativeEndian.PutUint64(b, v)
	q.dev.atomicMu.Unlock()
	q.saveRes(respRes{valid: true, psn: psn, rkey: a.RKey(), va: a.VA(), orig: orig})
	q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	q.resp.psn = psn.Next()
	q.respond(out, respItem{kind: itemAtomic, psn: psn, msn: q.resp.msn, orig: orig})
}

// rcFlush executes a FLUSH: memory here is ordinary, so the data is already
// globally visible; the checks are those of the placement type. The
// response is a zero-length READ response, as rxe sends.
func (q *QP) rcFlush(p *wire.Packet, out *txBatch, replay bool) {
	psn := p.BTH().PSN()
	f := p.FETH()
	r := p.RETH()
	var need mem.Access
	if f.PlacementType()&wire.FlushGlobalVisibility != 0 {
		need |= mem.FlushGlobal
	}
	if f.PlacementType()&wire.FlushPersistence != 0 {
		need |= mem.FlushPersistent
	}
	va, n := r.VA(), max(uint64(r.DMALength()), 1)
	if f.Selectivity() == wire.FlushSelWholeMR {
		// The memory-region level ignores the RETH's VA and length (IBTA
		// 1.5 Memory Placement Extensions; rxe's check_rkey skips the range).
		if iova, l, ok := q.dev.mem.Bounds(r.RKey(), false); ok {
			va, n = iova, l
		}
	}
	if _, ok := q.checkAccess(out, psn, r.RKey(), va, n, need, replay); !ok {
		return
	}
	if !replay {
		q.resp.reads.add(readRec{first: psn, last: psn, rkey: r.RKey(), va: r.VA(), n: uint64(r.DMALength()), flush: true})
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
		q.resp.psn = psn.Next()
	}
	q.respond(out, respItem{kind: itemRead, psn: psn, msn: q.resp.msn, first: true, replay: replay})
}

func (q *QP) rcAtomicWrite(p *wire.Packet, out *txBatch) bool {
	psn := p.BTH().PSN()
	r := p.RETH()
	if r.VA()%8 != 0 || r.DMALength() != 8 || len(p.Payload()) != 8 {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, WCLocLenErr,
			fmt.Sprintf("ATOMIC_WRITE at PSN %v: address %#x length %d, %d bytes of payload (needs 8 bytes, 8-byte aligned)",
				psn, r.VA(), r.DMALength(), len(p.Payload())))
		return false
	}
	b, ok := q.checkAccess(out, psn, r.RKey(), r.VA(), 8, mem.RemoteWrite, false)
	if !ok {
		return false
	}
	q.dev.atomicMu.Lock()
	copy(b, p.Payload())
	q.dev.atomicMu.Unlock()
	q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	return true
}

// duplicate answers a request the responder has already executed (IBTA
// §9.7.5.1.3, C9-105): SEND and WRITE are ACKed again with the latest PSN,
// a READ is read again, an atomic's saved result is sent again (the atomic
// is not executed twice).
//
// A duplicate READ is executed again only if it repeats a READ this QP
// executed (readLog: the same rkey, the PSNs and range of the original or
// a part of them, as a retry asks for the rest of a READ): otherwise it is
// dropped and counted (duplicate_request_dropped), the class D error IBTA
// gives a duplicate the responder cannot match. A READ has no side effect
// and its duplicate carries everything it needs (the RETH, for the part
// still missing, and the PSN its responses start at): the responder
// re-executes a duplicate READ rather than keep its data (IBTA §9.7.5.1.3;
// ipath, qib and hfi1, written to it: "Don't re-execute SEND, RDMA write
// or atomic op"), and they and rxe re-read memory from the duplicate's
// RETH after checking it against their record of the READ. rxe and hfi1
// keep that record in the responder resources and drop a duplicate READ
// whose record was recycled ("Resource not found. Class D error"); but
// only a requester with more READ/ATOMIC outstanding than this QP's
// max_dest_rd_atomic (max_rd_atomic set above it with a manual modify_qp)
// retries one, and then dropping it livelocks: go-back-N resends the same
// READs, every retry is dropped again, and with retry_cnt 7 it never ends.
// goroce keeps its record of READs apart, up to maxReadRecords of them,
// more than any requester can have outstanding. Executing a repeat costs a
// stale network duplicate only responses the requester drops; if its
// region has gone meanwhile, the Remote Access Error NAK is not fatal to
// this QP (checkAccess), for the same reason as an ATOMIC's below. What
// the record must not allow is a duplicate that repeats no READ: the
// responder used to execute any READ whose PSN was behind the expected
// one, and a failure cost the sender nothing, so a peer could try rkeys
// until one read a region never shared with it.
//
// A duplicate FLUSH is executed again the same way: it must repeat a
// FLUSH executed at its PSN; then its checks again, and its zero-length
// response.
//
// A duplicate ATOMIC cannot be executed again. With its saved result it
// is answered as before. Without one (the record was recycled) it is the
// retry of a requester over the max_dest_rd_atomic limit, or a stale copy
// of an atomic the requester has already completed (a network duplicate
// arriving late, since a requester within the limit never retries a
// recycled one; see saveRes). It gets NAK Invalid Request, the answer
// IBTA's responder error classes give to more RDMA READ/ATOMIC requests
// than the responder has resources for (rxe's class C
// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ; hfi1 NAKs a new request that finds
// its ack queue full): it ends the over-committed requester's wait with
// IBV_WC_REM_INV_REQ_ERR instead of the livelock above, where rxe and
// hfi1 drop the duplicate. Unlike a new request's Invalid Request (class C, nakFatal),
// the responder does not go to ERR: the NAK may answer a stale copy, whose
// requester drops it as a response to nothing outstanding (IBTA's ghost
// response; goroce's and rxe's completers do), and a healthy connection
// must not die of a late network duplicate.
func (q *QP) duplicate(p *wire.Packet, out *txBatch) {
	psn := p.BTH().PSN()
	info := p.Info
	switch {
	case info.Is(wire.FlagRead), info.Is(wire.FlagFlush):
		r := p.RETH()
		n := uint64(r.DMALength())
		npkts := uint64(1)
		if info.Is(wire.FlagRead) {
			npkts = max(1, (n+uint64(q.pmtu)-1)/uint64(q.pmtu))
		}
		if npkts > uint64(q.resp.psn.Diff(psn)) || q.resp.pend.rdAtomic >= maxPendingRdAtomic ||
			!q.resp.reads.matches(psn, npkts, r.RKey(), r.VA(), n, info.Is(wire.FlagFlush)) ||
			q.resp.pend.readPending(psn, npkts) {
			// Its responses would take PSNs this responder has not
			// reached, it repeats no request executed here, the
			// responder is busy with as many as any requester can ask,
			// or the READ's responses are still waiting to be sent: they
			// answer it. (Executed again, each go-back-N retry of a
			// requester whose READs wait here behind bulk work added its
			// copies to them, until a new request found the queue full
			// and the connection died of Invalid Request: cmd/roce's
			// TestPerfOverVeth read in CI. rxe restarts the READ's one
			// resource instead of adding another.)
			q.count(DuplicateRequestDropped)
			return
		}
		if info.Is(wire.FlagRead) {
			q.rcRead(p, out, true)
		} else {
			q.rcFlush(p, out, true)
		}
	case info.Is(wire.FlagAtomic):
		a := p.AtomicETH()
		r := q.findRes(psn)
		switch {
		case r == nil:
			q.ack(out, wire.SyndromeInvalidReq, psn)
		case r.rkey == a.RKey() && r.va == a.VA():
			q.respond(out, respItem{kind: itemAtomic, psn: psn, msn: q.resp.msn, orig: r.orig})
		default:
			// An atomic at that PSN on another address: a malformed
			// duplicate, dropped.
			q.count(DuplicateRequestDropped)
		}
	default:
		if p.BTH().AckReq() {
			q.ack(out, wire.SyndromeACK, q.resp.psn.Add(-1))
		}
	}
}

func (q *QP) ucRequest(p *wire.Packet) {
	psn := p.BTH().PSN()
	start := p.Info.Is(wire.FlagFirst)
	// rxe's check_psn for UC: a gap loses the message in progress (UC has
	// no retransmission, IBTA §9.7.4.1.6); packets are dropped until the
	// next FIRST or ONLY.
	if psn != q.resp.psn {
		q.count(OutOfSeqRequest)
		q.abandonMsg()
		q.resp.ucDrop = true
	}
	q.resp.psn = psn.Next()
	if q.resp.ucDrop {
		if !start {
			return
		}
		q.resp.ucDrop = false
	}
	if f := q.msgStep(p); f != nil {
		q.ucFault(p, f)
	}
}

// grhFor builds the 40 bytes ibverbs puts before a UD receive: the GRH
// (RoCE v1, and v2 over IPv6), or for RoCE v2 over IPv4 the IPv4 header in
// the last 20 bytes, as Linux does (ibv_init_ah_from_wc reads it there).
func grhFor(a *link.Addr, paylen int) [40]byte {
	var g [40]byte
	if a.Version == wire.RoCEv2 && a.SrcGID.Is4In6() {
		f := wire.IPv4Fields{TOS: a.TrafficClass, TotalLen: wire.IPv4MinLen + wire.UDPLen + paylen, Flags: 2,
			TTL: a.HopLimit, Protocol: wire.IPProtocolUDP, Src: a.SrcGID.Unmap(), Dst: a.DstGID.Unmap()}
		b := f.Append(g[:20:20])
		wire.IPv4(b[20:]).SetChecksum(wire.IPv4(b[20:]).ComputeChecksum())
		copy(g[20:], b[20:])
		return g
	}
	next, plen := uint8(wire.IPProtocolUDP), wire.UDPLen+paylen
	if a.Version == wire.RoCEv1 {
		next, plen = wire.GRHNextHdrIBTH, paylen
	}
	f := wire.IPv6Fields{TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, PayloadLen: plen,
		NextHeader: next, HopLimit: a.HopLimit, Src: a.SrcGID, Dst: a.DstGID}
	f.Append(g[:0])
	return g
}

func (q *QP) udRequest(p *wire.Packet, a *link.Addr) {
	deth := p.DETH()
	if deth.QKey() != q.attr.QKey {
		q.count(RcvdBadQKey)
		return
	}
	if !q.takeRecv() {
		q.count(RcvdNoRecvWQE) // UD has no RNR: the datagram is lost
		return
	}
	data := p.Payload()
	grh := grhFor(a, len(p.Transport()))
	wc := WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(40 + len(data)),
		QPNum: q.num, SrcQP: deth.SrcQP(), Flags: WCWithGRH}
	if imm := p.ImmDt(); imm != nil {
		wc.Flags |= WCWithImm
		wc.ImmData = imm.Value()
	}
	if err := q.scatter(&q.keyRecv, q.resp.wqe.sge, 0, grh[:]); err == nil {
		err = q.scatter(&q.keyRecv, q.resp.wqe.sge, 40, data)
		if err != nil {
			wc.Status, wc.Detail = WCLocLenErr, fmt.Sprintf("UD datagram of %d bytes (+40 GRH) does not fit receive wr_id %d (%d bytes): %v", len(data), wc.WRID, sgeLen(q.resp.wqe.sge), err)
			wc.ByteLen = 0
		}
	} else {
		wc.Status, wc.Detail = WCLocLenErr, fmt.Sprintf("receive wr_id %d: %v", wc.WRID, err)
	}
	q.completeRecv(wc)
}
