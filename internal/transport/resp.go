package transport

// The responder: requests → data placement, receive completions, ACKs,
// NAKs and READ/atomic responses (rxe_resp.c's role); and the receive
// dispatch for UD and UC.

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
	// The message in progress.
	inMsg  uint8   // 0, msgSend or msgWrite
	wqe    curRecv // the receive a multi-packet SEND fills
	off    uint64  // bytes placed so far
	target []byte  // RDMA WRITE: the checked target range
	dmaLen uint64  // RDMA WRITE: the RETH DMA length
	ucDrop bool    // UC: drop packets until the next FIRST/ONLY
	// Responder resources (max_dest_rd_atomic of them): the READ,
	// ATOMIC and FLUSH requests executed last, recycled oldest first as
	// rxe does, for replaying duplicates (IBTA §9.7.5.1.3). Only an
	// ATOMIC needs its record (its saved result); see duplicate.
	res     []respRes
	resNext int
}

const (
	msgSend  = 1
	msgWrite = 2
)

type curRecv struct {
	active bool
	recvWQE
}

type respRes struct {
	valid  bool
	atomic bool
	first  wire.PSN
	last   wire.PSN
	orig   uint64 // atomic: the original value
}

// receive handles one packet addressed to q. It runs on the device's
// receive goroutine; replies go to out.
func (q *QP) receive(p *wire.Packet, a *link.Addr, out *txBatch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counters[RcvdPkts].Add(1)
	op := p.Opcode()
	switch q.typ {
	case QPTypeRC:
		if op.Transport() != wire.TransportRC {
			q.count(RcvdBadOpcode)
			return
		}
	case QPTypeUC:
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
	if q.typ == QPTypeRC || q.typ == QPTypeUC {
		// Connected QPs take packets from their peer only (IBTA C9-?? path check):
		// the source GID must be the path's destination.
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
		if q.typ == QPTypeRC {
			q.receiveResponse(p, out)
		}
		return
	}
	switch q.typ {
	case QPTypeRC:
		q.rcRequest(p, out)
	case QPTypeUC:
		q.ucRequest(p)
	default:
		q.udRequest(p, a)
	}
}

// ack queues an ACK (or NAK) with psn and the current MSN.
//
// A positive ACK right behind this QP's previous positive ACK in the batch
// replaces it instead of following it: an ACK acknowledges every PSN up to
// its own (IBTA §9.7.5.1.2, coalesced acknowledgements), so the requester
// learns the same from one packet. With several messages in flight a
// receive batch often ends more than one (a 64 KiB WRITE ends every 16
// packets at path MTU 4096), and each ACK saved is a packet less for both
// kernels and a receive less for the requester.
func (q *QP) ack(out *txBatch, syn wire.Syndrome, psn wire.PSN) {
	if syn == wire.SyndromeACK && out.lastACK == q && out.lastACKAt == len(out.pkts) {
		t := out.pkts[len(out.pkts)-1].Transport()
		wire.BTH(t).SetPSN(psn)
		wire.AETH(t[wire.BTHLen:]).SetMSN(q.resp.msn)
		return
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCAcknowledge, PKey: wire.DefaultPKey,
		DestQP: q.attr.DestQPN, PSN: psn}}
	f.Ext.AETH = wire.AETHFields{Syndrome: syn, MSN: q.resp.msn}
	pk := out.next()
	finish(pk, appendHeaders(pk.Buf, &f, 0))
	q.counters[SentPkts].Add(1)
	pk.Addr = addrOf(&q.path, q.sport)
	if syn == wire.SyndromeACK {
		out.lastACK, out.lastACKAt = q, len(out.pkts)
	}
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

// nakFatal sends a NAK, reports the responder-side error and moves the QP
// to ERR (IBTA §9.9.3.1: class C and D errors on RC).
func (q *QP) nakFatal(out *txBatch, syn wire.Syndrome, psn wire.PSN, ev EventType, detail string) {
	q.ack(out, syn, psn)
	q.dev.events.post(AsyncEvent{Type: ev, QPNum: q.num, Detail: detail})
	if q.resp.wqe.active {
		// The receive being filled fails; enterError flushes the others.
		st := WCLocLenErr
		if syn != wire.SyndromeInvalidReq {
			st = WCLocProtErr
		}
		q.recvCQ.push(WC{WRID: q.resp.wqe.wrID, Status: st, Opcode: WCRecv, QPNum: q.num, Detail: detail})
		q.resp.wqe.active = false
	}
	q.enterError(-1, WCWRFlushErr, "")
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

func (q *QP) rcRequest(p *wire.Packet, out *txBatch) {
	bth := p.BTH()
	psn := bth.PSN()
	switch d := psn.Diff(q.resp.psn); {
	case d > 0:
		// A gap: NAK once with the PSN we expect (C9-??, rxe: out_of_seq_request).
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
	// Opcode sequence (IBTA §9.7.4.1.4): inside a message only its MIDDLE
	// and LAST may come; outside one only FIRST or ONLY.
	want := uint8(0)
	switch {
	case info.Is(wire.FlagSend):
		want = msgSend
	case info.Is(wire.FlagWrite):
		want = msgWrite
	}
	cont := info.Flags&(wire.FlagMiddle) != 0 || info.Flags&(wire.FlagLast|wire.FlagFirst) == wire.FlagLast
	if q.resp.inMsg != 0 && (!cont || want != q.resp.inMsg) || q.resp.inMsg == 0 && cont {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("opcode %v at PSN %v out of sequence (message in progress: %d)", p.Opcode(), psn, q.resp.inMsg))
		return
	}
	if q.attr.MaxDestRdAtomic == 0 && (info.Is(wire.FlagRead) || info.Is(wire.FlagAtomic) || info.Is(wire.FlagAtomicWrite) ||
		info.Is(wire.FlagFlush)) {
		// No responder resources: rxe answers a READ, ATOMIC or
		// ATOMIC_WRITE with NAK Invalid Request and goes to ERR
		// (check_resource: RXE_READ_OR_ATOMIC_MASK | RXE_ATOMIC_WRITE_MASK,
		// RESPST_ERR_TOO_MANY_RDMA_ATM_REQ, class C), and so does goroce,
		// for FLUSH too (it takes a resource here, as READ does).
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("%v at PSN %v: this QP's max_dest_rd_atomic is 0, so it takes no RDMA READ, ATOMIC, ATOMIC_WRITE or FLUSH request", p.Opcode(), psn))
		return
	}
	switch {
	case info.Is(wire.FlagSend):
		if !q.rcSend(p, out) {
			return
		}
	case info.Is(wire.FlagWrite):
		if !q.rcWrite(p, out) {
			return
		}
	case info.Is(wire.FlagRead):
		q.rcRead(p, out, false)
		return
	case info.Is(wire.FlagAtomic):
		q.rcAtomic(p, out)
		return
	case info.Is(wire.FlagFlush):
		q.rcFlush(p, out, false)
		return
	case info.Is(wire.FlagAtomicWrite):
		if !q.rcAtomicWrite(p, out) {
			return
		}
	default:
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr, fmt.Sprintf("unsupported opcode %v", p.Opcode()))
		return
	}
	q.resp.psn = psn.Next()
	if bth.AckReq() {
		q.ack(out, wire.SyndromeACK, psn)
	}
}

// rcSend places a SEND packet; it reports false when it answered with a NAK.
func (q *QP) rcSend(p *wire.Packet, out *txBatch) bool {
	psn := p.BTH().PSN()
	info := p.Info
	if info.Is(wire.FlagFirst) {
		if !q.resp.wqe.active && !q.takeRecv() {
			q.rnrNAK(out, psn)
			return false
		}
		q.resp.inMsg, q.resp.off = msgSend, 0
	}
	data := p.Payload()
	if !info.Is(wire.FlagLast) && len(data) != q.pmtu {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("%v at PSN %v carries %d bytes; a non-last packet must carry the path MTU %d", p.Opcode(), psn, len(data), q.pmtu))
		return false
	}
	if err := q.scatter(q.resp.wqe.sge, q.resp.off, data); err != nil {
		if err == errTooLong {
			q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
				fmt.Sprintf("SEND of more than the %d bytes posted in receive wr_id %d", sgeLen(q.resp.wqe.sge), q.resp.wqe.wrID))
		} else {
			q.nakFatal(out, wire.SyndromeRemOpErr, psn, EventQPFatal,
				fmt.Sprintf("receive wr_id %d: %v", q.resp.wqe.wrID, err))
		}
		return false
	}
	q.resp.off += uint64(len(data))
	if info.Is(wire.FlagLast) {
		wc := WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(q.resp.off), QPNum: q.num}
		if imm := p.ImmDt(); imm != nil {
			wc.Flags |= WCWithImm
			wc.ImmData = imm.Value()
		}
		if inv := p.IETH(); inv != nil {
			rkey := inv.Value()
			if err := q.dev.mem.Invalidate(q.pd.pd, rkey); err != nil {
				q.nakFatal(out, wire.SyndromeRemOpErr, psn, EventQPFatal, fmt.Sprintf("SEND_WITH_INV: %v", err))
				return false
			}
			wc.Flags |= WCWithInv
			wc.ImmData = rkey
		}
		q.resp.wqe.active = false
		q.resp.inMsg = 0
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
		q.count(RDMARecvs)
		q.recvCQ.push(wc)
	}
	return true
}

// checkRKey validates a remote key for this QP: the QP's own access flags
// (qp_access_flags) and the region's (IBTA §10.6.3.3, C10-?); on failure it
// NAKs with Remote Access Error and reports IBV_EVENT_QP_ACCESS_ERR.
func (q *QP) checkRKey(out *txBatch, psn wire.PSN, rkey uint32, va, n uint64, need mem.Access) ([]byte, bool) {
	return q.checkAccess(out, psn, rkey, va, n, need, false)
}

// checkAccess is checkRKey; for a replayed duplicate (replay) a failure
// is NAKed with Remote Access Error but is not fatal here: the duplicate
// may be a late network copy of a READ or FLUSH the requester completed
// long ago, its region since deregistered, and a healthy connection must
// not die of it (the requester drops the NAK as a ghost; a genuine retry
// fails with IBV_WC_REM_ACCESS_ERR). See duplicate.
func (q *QP) checkAccess(out *txBatch, psn wire.PSN, rkey uint32, va, n uint64, need mem.Access, replay bool) ([]byte, bool) {
	fail := func(detail string) ([]byte, bool) {
		if replay {
			q.ack(out, wire.SyndromeRemAccessErr, psn)
		} else {
			q.nakFatal(out, wire.SyndromeRemAccessErr, psn, EventQPAccessErr, detail)
		}
		return nil, false
	}
	if q.attr.AccessFlags&need != need {
		return fail(fmt.Sprintf("PSN %v: this QP's qp_access_flags %v do not allow %v (rkey %#x addr %#x len %d)",
			psn, q.attr.AccessFlags, need, rkey, va, n))
	}
	if n == 0 {
		return nil, true // a zero-length transfer checks no key (§9.4.1.1, §9.4.3)
	}
	b, err := q.dev.mem.Slice(q.pd.pd, rkey, false, va, n, need)
	if err != nil {
		return fail(fmt.Sprintf("PSN %v: %v", psn, err))
	}
	return b, true
}

func (q *QP) rcWrite(p *wire.Packet, out *txBatch) bool {
	psn := p.BTH().PSN()
	info := p.Info
	if info.Is(wire.FlagFirst) {
		r := p.RETH()
		b, ok := q.checkRKey(out, psn, r.RKey(), r.VA(), uint64(r.DMALength()), mem.RemoteWrite)
		if !ok {
			return false
		}
		q.resp.inMsg, q.resp.off, q.resp.target, q.resp.dmaLen = msgWrite, 0, b, uint64(r.DMALength())
	}
	data := p.Payload()
	last := info.Is(wire.FlagLast)
	if !last && len(data) != q.pmtu || q.resp.off+uint64(len(data)) > q.resp.dmaLen ||
		last && q.resp.off+uint64(len(data)) != q.resp.dmaLen {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("RDMA WRITE %v at PSN %v: %d bytes at offset %d do not fit the DMA length %d", p.Opcode(), psn, len(data), q.resp.off, q.resp.dmaLen))
		return false
	}
	if last && info.Is(wire.FlagImmediate) && !q.resp.wqe.active && !q.takeRecv() {
		// WRITE_WITH_IMM consumes a receive; without one, RNR (the data
		// already written is written again on retry).
		if info.Is(wire.FlagFirst) {
			// WRITE_ONLY_WITH_IMM: the retry starts the message again.
			q.resp.inMsg, q.resp.target = 0, nil
		}
		q.rnrNAK(out, psn)
		return false
	}
	copy(q.resp.target[q.resp.off:], data)
	q.resp.off += uint64(len(data))
	if last {
		if info.Is(wire.FlagImmediate) {
			q.recvCQ.push(WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecvRDMAWithImm,
				ByteLen: uint32(q.resp.dmaLen), QPNum: q.num, Flags: WCWithImm, ImmData: p.ImmDt().Value()})
			q.resp.wqe.active = false
			q.count(RDMARecvs)
		}
		q.resp.inMsg, q.resp.target = 0, nil
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	}
	return true
}

// saveRes records a READ/ATOMIC/FLUSH in the responder resources,
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
		r := &q.resp.res[i]
		if r.valid && psn.Diff(r.first) >= 0 && psn.Diff(r.last) <= 0 {
			return r
		}
	}
	return nil
}

// rcRead answers an RDMA READ request with response packets. replay is set
// for a duplicate request: it is executed again from its own RETH, as a
// new READ is (the rkey, bounds and access checked again, a failure NAKed
// with Remote Access Error, not fatal here: checkAccess), its responses
// carrying the duplicate's PSNs,
// without moving the expected PSN or the MSN. See duplicate.
func (q *QP) rcRead(p *wire.Packet, out *txBatch, replay bool) {
	psn := p.BTH().PSN()
	r := p.RETH()
	n := uint64(r.DMALength())
	pmtu := uint64(q.pmtu)
	npkts := max(1, (n+pmtu-1)/pmtu)
	if replay && npkts > uint64(q.resp.psn.Diff(psn)) {
		// Its responses would take PSNs this responder has not reached:
		// no READ executed here was that long. A retried READ asks for
		// the rest of the original (the same last PSN) or less.
		return
	}
	b, ok := q.checkAccess(out, psn, r.RKey(), r.VA(), n, mem.RemoteRead, replay)
	if !ok {
		return
	}
	if !replay {
		q.saveRes(respRes{valid: true, first: psn, last: psn.Add(int(npkts - 1))})
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
		q.resp.psn = psn.Add(int(npkts))
	}
	q.readResponses(out, psn, b, npkts)
}

func (q *QP) readResponses(out *txBatch, psn wire.PSN, b []byte, npkts uint64) {
	pmtu := uint64(q.pmtu)
	for i := uint64(0); i < npkts; i++ {
		var code wire.Opcode
		switch {
		case npkts == 1:
			code = wire.OpReadResponseOnly
		case i == 0:
			code = wire.OpReadResponseFirst
		case i == npkts-1:
			code = wire.OpReadResponseLast
		default:
			code = wire.OpReadResponseMiddle
		}
		chunk := b[min(i*pmtu, uint64(len(b))):min((i+1)*pmtu, uint64(len(b)))]
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | code, PKey: wire.DefaultPKey,
			DestQP: q.attr.DestQPN, PSN: psn.Add(int(i))}}
		f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: q.resp.msn}
		pk := out.next()
		buf := appendHeaders(pk.Buf, &f, len(chunk))
		buf = append(buf, chunk...)
		finish(pk, appendPad(buf, len(chunk)))
		q.counters[SentPkts].Add(1)
		pk.Addr = addrOf(&q.path, q.sport)
	}
}

func (q *QP) rcAtomic(p *wire.Packet, out *txBatch) {
	psn := p.BTH().PSN()
	a := p.AtomicETH()
	if a.VA()%8 != 0 {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("atomic at PSN %v: address %#x is not 8-byte aligned", psn, a.VA()))
		return
	}
	b, ok := q.checkRKey(out, psn, a.RKey(), a.VA(), 8, mem.RemoteAtomic)
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
	q.saveRes(respRes{valid: true, atomic: true, first: psn, last: psn, orig: orig})
	q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
	q.resp.psn = psn.Next()
	q.atomicAck(out, psn, orig)
}

func (q *QP) atomicAck(out *txBatch, psn wire.PSN, orig uint64) {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpAtomicAcknowledge, PKey: wire.DefaultPKey,
		DestQP: q.attr.DestQPN, PSN: psn}}
	f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: q.resp.msn}
	f.Ext.AtomicAck = orig
	pk := out.next()
	finish(pk, appendHeaders(pk.Buf, &f, 0))
	q.counters[SentPkts].Add(1)
	pk.Addr = addrOf(&q.path, q.sport)
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
		q.saveRes(respRes{valid: true, first: psn, last: psn})
		q.resp.msn = (q.resp.msn + 1) & wire.PSNMask
		q.resp.psn = psn.Next()
	}
	q.readResponses(out, psn, nil, 1)
}

func (q *QP) rcAtomicWrite(p *wire.Packet, out *txBatch) bool {
	psn := p.BTH().PSN()
	r := p.RETH()
	if r.VA()%8 != 0 || r.DMALength() != 8 {
		q.nakFatal(out, wire.SyndromeInvalidReq, psn, EventQPReqErr,
			fmt.Sprintf("ATOMIC_WRITE at PSN %v: address %#x length %d (needs 8 bytes, 8-byte aligned)", psn, r.VA(), r.DMALength()))
		return false
	}
	b, ok := q.checkRKey(out, psn, r.RKey(), r.VA(), 8, mem.RemoteWrite)
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
// A duplicate READ is executed again whether or not its responder
// resource is still held. A READ has no side effect and its duplicate
// carries everything it needs (the RETH, for the part still missing, and
// the PSN its responses start at): the responder re-executes a duplicate
// READ rather than keep its data (IBTA §9.7.5.1.3; ipath, qib and hfi1,
// written to it: "Don't re-execute SEND, RDMA write or atomic op"), and
// they and rxe re-read memory from the duplicate's RETH (after checking
// it against the record, which the full rkey, bounds and access check
// here makes unnecessary). rxe and hfi1 drop a duplicate READ whose
// record was recycled ("Resource not found. Class D error"); but only a
// requester with more READ/ATOMIC outstanding than this QP's
// max_dest_rd_atomic (max_rd_atomic set above it with a manual
// modify_qp) retries one, and then dropping it livelocks: go-back-N
// resends the same READs, every retry is dropped again, and with
// retry_cnt 7 it never ends. Executing it again costs a stale network
// duplicate only responses the requester drops; if its region has gone
// meanwhile, the Remote Access Error NAK is not fatal to this QP
// (checkAccess), for the same reason as an ATOMIC's below.
//
// A duplicate FLUSH is executed again the same way: its checks again,
// and its zero-length response.
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
	case info.Is(wire.FlagRead):
		q.rcRead(p, out, true)
	case info.Is(wire.FlagAtomic):
		r := q.findRes(psn)
		switch {
		case r == nil:
			q.ack(out, wire.SyndromeInvalidReq, psn)
		case r.atomic && r.first == psn:
			q.atomicAck(out, psn, r.orig)
		}
		// Otherwise its PSN was another request's: a malformed
		// duplicate, dropped.
	case info.Is(wire.FlagFlush):
		q.rcFlush(p, out, true)
	default:
		if p.BTH().AckReq() {
			q.ack(out, wire.SyndromeACK, q.resp.psn.Add(-1))
		}
	}
}

func (q *QP) ucRequest(p *wire.Packet) {
	psn := p.BTH().PSN()
	info := p.Info
	start := info.Is(wire.FlagFirst)
	if psn != q.resp.psn {
		// UC has no retransmission: a gap loses the message in progress
		// (IBTA §9.7.4.1.6). Resynchronise on the next FIRST or ONLY.
		if q.resp.inMsg != 0 {
			q.resp.inMsg, q.resp.off, q.resp.target = 0, 0, nil
		}
		q.count(OutOfSeqRequest)
		if !start {
			q.resp.ucDrop = true
			q.resp.psn = psn.Next()
			return
		}
	}
	q.resp.psn = psn.Next()
	if q.resp.ucDrop && !start {
		return
	}
	q.resp.ucDrop = false
	if q.resp.inMsg != 0 && start {
		q.resp.inMsg, q.resp.off = 0, 0 // a new message abandons the partial one
	}
	if q.resp.inMsg == 0 && !start {
		q.resp.ucDrop = true
		return
	}
	data := p.Payload()
	drop := func() { q.resp.inMsg, q.resp.off, q.resp.target, q.resp.ucDrop = 0, 0, nil, !info.Is(wire.FlagLast) }
	switch {
	case info.Is(wire.FlagSend):
		if start {
			if !q.resp.wqe.active && !q.takeRecv() {
				q.count(RcvdNoRecvWQE)
				drop()
				return
			}
			q.resp.inMsg, q.resp.off = msgSend, 0
		}
		if err := q.scatter(q.resp.wqe.sge, q.resp.off, data); err != nil {
			q.recvCQ.push(WC{WRID: q.resp.wqe.wrID, Status: WCLocLenErr, Opcode: WCRecv, QPNum: q.num,
				Detail: fmt.Sprintf("UC SEND: %v", err)})
			q.resp.wqe.active = false
			drop()
			return
		}
		q.resp.off += uint64(len(data))
		if info.Is(wire.FlagLast) {
			wc := WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecv, ByteLen: uint32(q.resp.off), QPNum: q.num}
			if imm := p.ImmDt(); imm != nil {
				wc.Flags, wc.ImmData = WCWithImm, imm.Value()
			}
			q.resp.wqe.active, q.resp.inMsg = false, 0
			q.count(RDMARecvs)
			q.recvCQ.push(wc)
		}
	case info.Is(wire.FlagWrite):
		if start {
			r := p.RETH()
			var b []byte
			if n := uint64(r.DMALength()); n > 0 {
				var err error
				if q.attr.AccessFlags&mem.RemoteWrite == 0 {
					err = mem.ErrAccess
				} else {
					b, err = q.dev.mem.Slice(q.pd.pd, r.RKey(), false, r.VA(), n, mem.RemoteWrite)
				}
				if err != nil {
					// UC has no NAK: the message is dropped (IBTA C9-?), and the
					// responder reports the access error asynchronously.
					q.dev.events.post(AsyncEvent{Type: EventQPAccessErr, QPNum: q.num, Detail: fmt.Sprintf("UC RDMA WRITE PSN %v: %v", psn, err)})
					drop()
					return
				}
			}
			q.resp.inMsg, q.resp.off, q.resp.target, q.resp.dmaLen = msgWrite, 0, b, uint64(r.DMALength())
		}
		if q.resp.off+uint64(len(data)) > q.resp.dmaLen {
			drop()
			return
		}
		if info.Is(wire.FlagLast) && info.Is(wire.FlagImmediate) && !q.resp.wqe.active && !q.takeRecv() {
			q.count(RcvdNoRecvWQE)
			drop()
			return
		}
		copy(q.resp.target[q.resp.off:], data)
		q.resp.off += uint64(len(data))
		if info.Is(wire.FlagLast) {
			if info.Is(wire.FlagImmediate) {
				q.recvCQ.push(WC{WRID: q.resp.wqe.wrID, Status: WCSuccess, Opcode: WCRecvRDMAWithImm,
					ByteLen: uint32(q.resp.dmaLen), QPNum: q.num, Flags: WCWithImm, ImmData: p.ImmDt().Value()})
				q.resp.wqe.active = false
				q.count(RDMARecvs)
			}
			q.resp.inMsg, q.resp.target = 0, nil
		}
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
	if err := q.scatter(q.resp.wqe.sge, 0, grh[:]); err == nil {
		err = q.scatter(q.resp.wqe.sge, 40, data)
		if err != nil {
			wc.Status, wc.Detail = WCLocLenErr, fmt.Sprintf("UD datagram of %d bytes (+40 GRH) does not fit receive wr_id %d (%d bytes): %v", len(data), wc.WRID, sgeLen(q.resp.wqe.sge), err)
			wc.ByteLen = 0
		}
	} else {
		wc.Status, wc.Detail = WCLocLenErr, fmt.Sprintf("receive wr_id %d: %v", wc.WRID, err)
	}
	q.resp.wqe.active = false
	q.count(RDMARecvs)
	q.recvCQ.push(wc)
}
