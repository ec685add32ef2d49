package verbs

// FuzzRCResponses drives the other half of an RC QP: the requester and
// its completer, with WQEs outstanding. Each input posts four signaled
// work requests (RDMA WRITE, RDMA READ, FETCH_AND_ADD or SEND, of varied
// lengths) on the harness's RC QP, lets them go out, then hands the device
// a sequence of forged responses (ACKs, NAKs of every kind, RNR NAKs, READ
// responses and atomic ACKs at PSNs around the oldest unacknowledged,
// the next to send and each WQE's own, or any opcode at all) and fires
// the retransmit and RNR timers in between, so go-back-N rewinds and
// resumed retries meet responses to what went before. After every step
// it checks what no peer may change:
//
//   - no panic, and the responder's invariants of fuzzSequence (check);
//   - a READ's or atomic's local buffer changes only while its WQE is
//     outstanding and after its request left, only within its length; no
//     other byte of the requester's memory changes; one that completes
//     successfully has had every byte of its buffer written (responses
//     aimed at a READ carry bytes unlike those its buffer holds, so every
//     byte placed shows);
//   - a WQE completes at most once, in the order posted, with the
//     opcode it was posted with; after an error completion only flushes
//     follow, and the QP is in ERR;
//   - the completer never acknowledges a PSN the requester has not sent
//     (unless an RNR NAK stopped it), and the send queue's indices stay
//     ordered and bounded.
//
// FuzzRCSequence and its neighbours aim at the responder: their QPs have
// no send WQE outstanding, so a response there only meets an empty
// requester.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

const (
	reqWRs       = 4         // work requests posted per input
	reqSlot      = 3*256 + 8 // each WR's slot in the sink: three 256-byte READ responses
	reqSinkGuard = 64
	reqRecLen    = 8          // bytes per step of an input
	reqMaxSteps  = 32         // steps per input
	reqRemote    = 0x10000000 // WR i's remote address: reqRemote + i<<12
)

// reqWR is one work request of an input, as posted.
type reqWR struct {
	op     WROpcode
	n      int // message length
	done   bool
	status WCStatus
	left   bool // its request was seen on the wire
	first  wire.PSN
	frozen []byte // its slot when it completed
	// written: which bytes of its slot have changed since it was posted
	// (reqBuild makes every byte a response places a change).
	written [reqSlot]bool
}

// reqSink is the requester's local memory: READ and atomic results land
// in slot i of WR i. Registered LOCAL_WRITE only in the QPs' PD, so no
// request of a peer may write it.
type reqSink struct {
	buf []byte
	mr  *MR
}

func (h *fuzzHarness) reqSink(t testing.TB) *reqSink {
	if h.sink == nil {
		s := &reqSink{buf: make([]byte, reqWRs*(reqSlot+reqSinkGuard)+reqSinkGuard)}
		var err error
		if s.mr, err = h.pds[0].RegMRIOVA(s.buf, fuzzIOVA/2, mem.LocalWrite); err != nil {
			t.Fatal(err)
		}
		h.sink = s
	}
	return h.sink
}

func (s *reqSink) slot(i int) int { return reqSinkGuard + i*(reqSlot+reqSinkGuard) }

func (s *reqSink) reset() {
	for i := range s.buf {
		s.buf[i] = byte(i*5 + 3)
	}
}

var reqLens = [8]int{1, 8, 255, 256, 257, 512, 700, 768}

// reqPost posts an input's four WRs on the RC QP and lets them go out:
// WR i's opcode is mix's bits 2i and 2i+1, its length reqLens[lens's bits
// 3i to 3i+2].
func (h *fuzzHarness) reqPost(t *testing.T, s *reqSink, mix uint8, lens uint16, wrs *[reqWRs]reqWR) {
	q := h.qps[0]
	src := h.regs[regAll] // what WRITEs and SENDs carry: a pattern a peer may read
	q.mu.Lock()
	idx := q.sq.tail
	q.mu.Unlock()
	for i := range wrs {
		w := &wrs[i]
		*w = reqWR{op: [4]WROpcode{WRRDMAWrite, WRRDMARead, WRAtomicFetchAndAdd, WRSend}[mix>>(2*i)&3],
			n: reqLens[lens>>(3*i)&7]}
		wr := SendWR{WRID: uint64(1000 + i), Opcode: w.op, Flags: SendSignaled,
			RemoteAddr: reqRemote + uint64(i)<<12, RKey: 0x1234, CompareAdd: 1}
		switch w.op {
		case WRRDMARead:
			wr.SGList = []SGE{{Addr: fuzzIOVA/2 + uint64(s.slot(i)), Length: uint32(w.n), LKey: s.mr.LKey()}}
		case WRAtomicFetchAndAdd:
			w.n = 8
			wr.SGList = []SGE{{Addr: fuzzIOVA/2 + uint64(s.slot(i)), Length: 8, LKey: s.mr.LKey()}}
		default:
			w.n = min(w.n, src.n)
			wr.SGList = []SGE{{Addr: fuzzIOVA + uint64(src.off), Length: uint32(w.n), LKey: src.key}}
		}
		if err := q.PostSend(wr); err != nil {
			t.Fatalf("post wr %d (%v, %d bytes): %v", i, w.op, w.n, err)
		}
	}
	if err := fuzzSettle(h.dev); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	for i := range wrs {
		wrs[i].first = q.sq.at(idx + uint64(i)).firstPSN
	}
	q.mu.Unlock()
}

// reqBuild makes the response (or other packet) a step describes; ok is
// false for the steps that fire a timer instead.
//
// A READ response or atomic ACK whose PSN falls in a READ's or atomic's
// PSNs carries, where that WR's buffer would take it, bytes unlike those
// the buffer holds, so that every byte placed changes (reqCheck's written).
func (h *fuzzHarness) reqBuild(r []byte, s *reqSink, wrs *[reqWRs]reqWR, b []byte) ([]byte, link.Addr, bool) {
	q := h.qps[0]
	rc := wire.TransportRC
	ops := [6]wire.Opcode{rc | wire.OpAcknowledge, rc | wire.OpReadResponseFirst, rc | wire.OpReadResponseMiddle,
		rc | wire.OpReadResponseLast, rc | wire.OpReadResponseOnly, rc | wire.OpAtomicAcknowledge}
	var op wire.Opcode
	switch k := r[0] & 7; {
	case r[0]&0x80 != 0:
		op = wire.Opcode(r[1]) // any opcode at all
	case k >= 6:
		return b, link.Addr{}, false
	default:
		op = ops[k]
	}
	q.mu.Lock()
	var base wire.PSN
	switch r[3] & 3 {
	case 0:
		base = q.comp.psn // the oldest unacknowledged
	case 1:
		base = q.req.psn // the next to send
	case 2:
		base = wrs[r[3]>>2&3].first // a WR's first PSN
	default:
		base = wire.PSN(uint32(r[4]) | uint32(r[5])<<8 | uint32(r[1])<<16)
	}
	q.mu.Unlock()
	psn := base.Add(int(int8(r[2])))
	var syn wire.Syndrome
	switch r[7] & 7 {
	case 0:
		syn = wire.SyndromeACK
	case 1:
		syn = wire.ACKWithCredits(r[4])
	case 2:
		syn = wire.RNRNAK(0) // 655 ms: the harness fires the RNR timer itself
	case 3:
		syn = wire.SyndromePSNSeqErr
	case 4:
		syn = wire.SyndromeInvalidReq
	case 5:
		syn = wire.SyndromeRemAccessErr
	case 6:
		syn = wire.SyndromeRemOpErr
	default:
		syn = wire.Syndrome(r[5])
		if syn.IsRNRNAK() {
			syn = wire.RNRNAK(0)
		}
	}
	pmtu := max(q.pmtu, 256)
	plen := [8]int{0, 1, pmtu - 1, pmtu, pmtu + 1, 8, int(r[5]), 2 * pmtu}[r[6]&7]
	payload := make([]byte, plen)
	for i := range payload {
		payload[i] = byte(i*11) ^ r[4]
	}
	atomicAck := binary.LittleEndian.Uint64(append(payload, make([]byte, 8)...))
	for i := range wrs {
		w, o := &wrs[i], s.slot(i)
		if d := int(psn.Diff(w.first)); w.op == WRRDMARead && d >= 0 && d*pmtu < w.n {
			for k := range payload {
				if d*pmtu+k < w.n {
					payload[k] = ^s.buf[o+d*pmtu+k]
				}
			}
		} else if w.op == WRAtomicFetchAndAdd && d == 0 {
			c := byte(0)
			for bytes.IndexByte(s.buf[o:o+8], c) >= 0 {
				c++
			}
			atomicAck = 0x0101010101010101 * uint64(c)
		}
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PSN: psn, DestQP: q.num, PKey: wire.DefaultPKey, AckReq: r[3]&0x40 != 0},
		Payload: payload}
	x := &f.Ext
	x.AETH = wire.AETHFields{Syndrome: syn, MSN: uint32(r[4]) | uint32(r[5])<<8}
	x.AtomicAck = atomicAck
	x.RETH = wire.RETHFields{VA: fuzzIOVA + uint64(h.regs[regAll].off), RKey: h.regs[regAll].key, DMALength: uint32(plen)}
	b = f.AppendTransport(b)
	b = append(b, 0, 0, 0, 0)
	return b, link.Addr{Version: wire.RoCEv2, SrcGID: h.peer, DstGID: h.local, UDPSrcPort: 4791, HopLimit: 64}, true
}

// reqSeen marks the WRs whose request the device sent: each WR's remote
// address is its own.
func reqSeen(sent [][]byte, wrs *[reqWRs]reqWR) {
	var p wire.Packet
	for _, s := range sent {
		if p.ParseTransport(s, wire.RoCEv2) != nil {
			continue
		}
		var va uint64
		switch op := p.Opcode(); op {
		case wire.TransportRC | wire.OpReadRequest:
			va = p.RETH().VA()
		case wire.TransportRC | wire.OpFetchAdd, wire.TransportRC | wire.OpCompareSwap:
			va = p.AtomicETH().VA()
		default:
			continue
		}
		if i := (va - reqRemote) >> 12; va >= reqRemote && i < reqWRs && va&0xFFF == 0 {
			wrs[i].left = true
		}
	}
}

// reqCheck verifies the requester's invariants after a step.
func (h *fuzzHarness) reqCheck(t *testing.T, s *reqSink, before []byte, wrs *[reqWRs]reqWR, wcs []WC, next *int, what string) {
	q := h.qps[0]
	// The sink: only an outstanding READ's or atomic's own bytes (one
	// that completes in this step was outstanding during it), once its
	// request left; nothing after it completed.
	for k := range s.buf {
		if s.buf[k] == before[k] {
			continue
		}
		ok := false
		for i := range wrs {
			w, o := &wrs[i], s.slot(i)
			if k >= o && k < o+w.n && w.left && (w.op == WRRDMARead || w.op == WRAtomicFetchAndAdd) && !w.done {
				ok = true
				w.written[k-o] = true
			}
		}
		if !ok {
			t.Fatalf("%s: requester memory byte %d changed from %#x to %#x (%s)", what, k, before[k], s.buf[k], reqWRsString(wrs))
		}
	}
	for _, c := range wcs {
		if c.QPNum != q.num || c.Opcode == WCRecv || c.Opcode == WCRecvRDMAWithImm {
			continue
		}
		if c.WRID < 1000 || c.WRID >= 1000+reqWRs {
			t.Fatalf("%s: a completion of a send WR never posted: %v", what, &c)
		}
		i := int(c.WRID - 1000)
		w := &wrs[i]
		if w.done {
			t.Fatalf("%s: wr_id %d completed twice (%v)", what, c.WRID, &c)
		}
		if i != *next {
			t.Fatalf("%s: wr_id %d completed before wr_id %d, posted first (%v)", what, c.WRID, 1000+*next, &c)
		}
		*next++
		if c.Opcode != w.op.wcOpcode() {
			t.Fatalf("%s: %v posted, %v completed (%v)", what, w.op, c.Opcode, &c)
		}
		if i > 0 {
			if p := wrs[i-1].status; p != WCSuccess && c.Status != WCWRFlushErr {
				t.Fatalf("%s: after wr_id %d's %v, wr_id %d completed %v, not flushed", what, 999+i, p, c.WRID, c.Status)
			}
		}
		if c.Status == WCSuccess && (w.op == WRRDMARead || w.op == WRAtomicFetchAndAdd) {
			if !w.left {
				t.Fatalf("%s: %v wr_id %d completed successfully, but its request never left", what, w.op, c.WRID)
			}
			for k := range w.n {
				if !w.written[k] {
					t.Fatalf("%s: %v wr_id %d completed successfully, but byte %d of its %d was never written", what, w.op, c.WRID, k, w.n)
				}
			}
		}
		w.done, w.status = true, c.Status
		o := s.slot(i)
		w.frozen = bytes.Clone(s.buf[o : o+reqSlot])
	}
	for i := range wrs {
		if w, o := &wrs[i], s.slot(i); w.done && !bytes.Equal(w.frozen, s.buf[o:o+reqSlot]) {
			t.Fatalf("%s: wr_id %d's buffer changed after it completed %v", what, 1000+i, w.status)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	failed := false
	for i := range wrs {
		if wrs[i].done && wrs[i].status != WCSuccess {
			failed = true
		}
	}
	if failed && q.state != QPSErr {
		t.Fatalf("%s: a WR completed in error and the QP is in %v, not ERR", what, q.state)
	}
	// While an RNR NAK's timer runs the requester is stopped, and later
	// NAKs may acknowledge PSNs it has been sent back over: the timer's
	// rewind starts it from comp.psn.
	if q.state == QPSRTS && !q.comp.rnrWait {
		if d := q.req.psn.Diff(q.comp.psn); d < 0 {
			t.Fatalf("%s: the completer's oldest unacknowledged PSN %v is past the next to send, %v", what, q.comp.psn, q.req.psn)
		}
	}
	if sq := &q.sq; sq.head > sq.cur || sq.cur > sq.tail || sq.tail-sq.head > uint64(sq.max) {
		t.Fatalf("%s: send queue head %d cur %d tail %d max %d", what, sq.head, sq.cur, sq.tail, sq.max)
	}
}

func reqWRsString(wrs *[reqWRs]reqWR) string {
	var b []byte
	for i, w := range wrs {
		b = fmt.Appendf(b, "wr_id %d %v %d bytes at PSN %v, slot %d, sent %v, done %v %v; ", 1000+i, w.op, w.n, w.first,
			(&reqSink{}).slot(i), w.left, w.done, w.status)
	}
	return string(b)
}

// fuzzResponses runs one input.
func fuzzResponses(t *testing.T, data []byte) {
	h := harness(t)
	s := h.reqSink(t)
	h.reset(t)
	s.reset()
	h.noRecv = false
	if len(data) < 3 {
		return
	}
	var wrs [reqWRs]reqWR
	h.reqPost(t, s, data[0], uint16(data[1])|uint16(data[2])<<8, &wrs)
	data = data[3:]
	sent := h.lk.take()
	reqSeen(sent, &wrs)
	next := 0
	h.reqCheck(t, s, s.buf, &wrs, h.pollWCs(t, "posting"), &next, "posting")
	q := h.qps[0]
	before := make([]byte, len(s.buf))
	var b []byte
	for n := 0; len(data) >= reqRecLen && n < reqMaxSteps; n++ {
		r := data[:reqRecLen]
		data = data[reqRecLen:]
		copy(before, s.buf)
		copy(h.before, h.arena)
		var what string
		pkt, a, ok := h.reqBuild(r, s, &wrs, b[:0])
		if ok {
			b = pkt
			what = fmt.Sprintf("step %d (%v PSN %v syndrome %#x, %d bytes)", n, wire.Opcode(b[0]), wire.BTH(b).PSN(),
				r[7], len(b)-wire.BTHLen-4)
			if err := h.deliver(b, a); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		} else if r[0]&1 == 0 {
			what = fmt.Sprintf("step %d (the retransmit timer)", n)
			fuzzFireRetrans(q)
		} else {
			what = fmt.Sprintf("step %d (the RNR timer)", n)
			fuzzFireRNR(q)
		}
		if err := fuzzSettle(h.dev); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sent := h.lk.take()
		reqSeen(sent, &wrs)
		wcs := h.pollWCs(t, what)
		h.reqCheck(t, s, before, &wrs, wcs, &next, what)
		h.checkWCs(t, 0, wcs, sent, what)
	}
}

// reqStep encodes one step of a seed.
type reqStep struct {
	kind  uint8 // 0 ACK, 1-4 READ response first/middle/last/only, 5 atomic ACK, 6 the retransmit timer, 7 the RNR timer
	base  uint8 // 0 the oldest unacknowledged PSN, 1 the next to send, 2|i<<2 WQE i's first PSN
	dpsn  int8
	syn   uint8 // 0 ACK, 1 ACK with credits, 2 RNR NAK, 3 sequence error, 4 invalid request, 5 remote access, 6 remote operational
	plen  uint8 // 0 0, 1 1, 2 pmtu-1, 3 pmtu, 4 pmtu+1, 5 8, 6 small, 7 2*pmtu
	small uint8
}

// reqSeed encodes an input: mix as reqPost takes it, lens the four WRs'
// indexes into reqLens.
func reqSeed(mix uint8, lens [reqWRs]uint8, steps ...reqStep) []byte {
	l := uint16(lens[0]&7) | uint16(lens[1]&7)<<3 | uint16(lens[2]&7)<<6 | uint16(lens[3]&7)<<9
	b := []byte{mix, byte(l), byte(l >> 8)}
	for _, s := range steps {
		b = append(b, s.kind, 0, byte(s.dpsn), s.base, 0, s.small, s.plen, s.syn)
	}
	return b
}

// WR mixes: two bits a WR, 0 WRITE, 1 READ, 2 FETCH_AND_ADD, 3 SEND.
const (
	mixReads  = 0b01_01_01_01
	mixAll    = 0b11_10_01_00 // WRITE, READ, FETCH_AND_ADD, SEND
	mixReadAt = 0b10_01_10_01
)

func FuzzRCResponses(f *testing.F) {
	const (
		ack, rFirst, rMiddle, rLast, rOnly, atomicAck, timer, rnrTimer = 0, 1, 2, 3, 4, 5, 6, 7
		oldest, nextPSN, wqe                                           = 0, 1, 2
		synACK, synRNR, synSeq, synInv, synAcc                         = 0, 2, 3, 4, 5
		plenPMTU, plenSmall, plen2PMTU                                 = 3, 6, 7
	)
	// reqLens' indexes.
	const l1, l8, l256, l257, l700, l768 = 0, 1, 3, 4, 6, 7
	// READs of three, one, two packets and of 8 bytes: their responses in
	// order, a middle one doubled, a last one again after the READ
	// completed (and too long), then an ACK of everything.
	f.Add(reqSeed(mixReads, [4]uint8{l700, l256, l257, l8},
		reqStep{kind: rFirst, base: wqe, plen: plenPMTU},
		reqStep{kind: rMiddle, base: wqe, dpsn: 1, plen: plenPMTU},
		reqStep{kind: rMiddle, base: wqe, dpsn: 1, plen: plenPMTU},
		reqStep{kind: rLast, base: wqe, dpsn: 2, plen: plenSmall, small: 700 - 512},
		reqStep{kind: rLast, base: wqe, dpsn: 2, plen: plen2PMTU},
		reqStep{kind: rOnly, base: wqe | 1<<2, plen: plenPMTU},
		reqStep{kind: rFirst, base: wqe | 2<<2, plen: plenPMTU},
		reqStep{kind: rLast, base: wqe | 2<<2, dpsn: 1, plen: 1},
		reqStep{kind: rOnly, base: wqe | 3<<2, plen: 5},
		reqStep{kind: ack, base: nextPSN, dpsn: -1}))
	// A go-back-N retry (the timer) before anything is answered, the
	// WRITE's ACK, a READ's first response, a retry that asks for the
	// rest of the READ, the rest, the atomic's ACK, an ACK of a PSN never
	// sent, then an ACK of everything.
	f.Add(reqSeed(mixAll, [4]uint8{l768, l700, l8, l256},
		reqStep{kind: timer},
		reqStep{kind: ack, base: wqe, dpsn: 2},
		reqStep{kind: rFirst, base: wqe | 1<<2, plen: plenPMTU},
		reqStep{kind: timer},
		reqStep{kind: rMiddle, base: wqe | 1<<2, dpsn: 1, plen: plenPMTU},
		reqStep{kind: rLast, base: wqe | 1<<2, dpsn: 2, plen: plenSmall, small: 700 - 512},
		reqStep{kind: atomicAck, base: wqe | 2<<2},
		reqStep{kind: ack, base: nextPSN, dpsn: 5},
		reqStep{kind: ack, base: nextPSN, dpsn: -1}))
	// NAKs: a sequence error in the middle of a READ, an RNR NAK and its
	// timer, a READ response of the wrong length, then remote access on
	// an atomic, and responses to a QP in ERR.
	f.Add(reqSeed(mixReadAt, [4]uint8{l700, l8, l256, l8},
		reqStep{kind: rFirst, base: wqe, plen: plenPMTU},
		reqStep{kind: ack, base: wqe, dpsn: 1, syn: synSeq},
		reqStep{kind: rFirst, base: wqe, plen: plenPMTU},
		reqStep{kind: ack, base: oldest, syn: synRNR},
		reqStep{kind: rnrTimer},
		reqStep{kind: rOnly, base: wqe, plen: plenSmall, small: 255},
		reqStep{kind: ack, base: wqe | 1<<2, syn: synAcc},
		reqStep{kind: rOnly, base: wqe | 2<<2, plen: plenSmall, small: 8},
		reqStep{kind: atomicAck, base: wqe | 3<<2}))
	// Answers of PSNs inside a READ that only its responses may answer:
	// an ACK, an RNR NAK, a PSN sequence error NAK; then the READ's
	// responses.
	f.Add(reqSeed(mixReads, [4]uint8{l768, l1, l1, l1},
		reqStep{kind: ack, base: wqe},
		reqStep{kind: ack, base: wqe, dpsn: 1, syn: synRNR},
		reqStep{kind: rnrTimer},
		reqStep{kind: ack, base: wqe, dpsn: 2, syn: synSeq},
		reqStep{kind: rFirst, base: wqe, plen: plenPMTU},
		reqStep{kind: rMiddle, base: wqe, dpsn: 1, plen: plenPMTU},
		reqStep{kind: rLast, base: wqe, dpsn: 2, plen: plenPMTU},
		reqStep{kind: ack, base: nextPSN, dpsn: -1}))
	// Timeouts without an answer until retry_cnt runs out; an invalid
	// request NAK after.
	f.Add(reqSeed(mixAll, [4]uint8{l1, l1, l8, l1},
		reqStep{kind: timer}, reqStep{kind: timer}, reqStep{kind: timer}, reqStep{kind: timer},
		reqStep{kind: timer}, reqStep{kind: timer}, reqStep{kind: timer}, reqStep{kind: timer},
		reqStep{kind: ack, base: oldest, syn: synInv}))
	f.Fuzz(fuzzResponses)
}

// reqRespond hands the harness's RC QP one response from its peer.
func (h *fuzzHarness) reqRespond(t *testing.T, op wire.Opcode, psn wire.PSN, syn wire.Syndrome, payload []byte) {
	t.Helper()
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | op, PSN: psn, DestQP: h.qps[0].num, PKey: wire.DefaultPKey},
		Payload: payload}
	f.Ext.AETH = wire.AETHFields{Syndrome: syn}
	b := append(f.AppendTransport(nil), 0, 0, 0, 0)
	if err := h.deliver(b, link.Addr{Version: wire.RoCEv2, SrcGID: h.peer, DstGID: h.local, UDPSrcPort: 4791, HopLimit: 64}); err != nil {
		t.Fatal(err)
	}
}

// An ACK, a PSN sequence error NAK or an RNR NAK of a PSN inside a
// multi-packet READ acknowledges nothing of it: only READ responses answer
// a READ's PSNs. Each moved the completer past the first response's PSN,
// so that response was dropped when it came and the READ completed
// IBV_WC_SUCCESS with its first 256 bytes never written (FuzzRCResponses
// found the ACK and the RNR NAK).
func TestAnswerInsideReadCompletesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		dpsn int // from the READ's first PSN
		syn  wire.Syndrome
	}{
		{"ACK", 0, wire.SyndromeACK},
		{"ACK of the middle", 1, wire.SyndromeACK},
		{"sequence error NAK", 1, wire.SyndromePSNSeqErr},
		{"RNR NAK", 1, wire.RNRNAK(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := harness(t)
			s := h.reqSink(t)
			h.reset(t)
			s.reset()
			var wrs [reqWRs]reqWR
			h.reqPost(t, s, mixReads, 7, &wrs) // WR 0: a READ of 768 bytes, three responses
			h.lk.take()
			h.pollWCs(t, "posting")
			first := wrs[0].first
			h.reqRespond(t, wire.OpAcknowledge, first.Add(tc.dpsn), tc.syn, nil)
			fuzzFireRNR(h.qps[0])
			data := make([]byte, 768)
			for i := range data {
				data[i] = byte(i*7 + 1)
			}
			var wcs []WC
			// The responder's answer, after the forged one; if the
			// requester dropped it as a duplicate and asked again, the
			// responder answers again.
			for range 2 {
				h.reqRespond(t, wire.OpReadResponseFirst, first, wire.SyndromeACK, data[:256])
				h.reqRespond(t, wire.OpReadResponseMiddle, first.Add(1), wire.SyndromeACK, data[256:512])
				h.reqRespond(t, wire.OpReadResponseLast, first.Add(2), wire.SyndromeACK, data[512:])
				if wcs = h.pollWCs(t, "the READ's responses"); len(wcs) > 0 {
					break
				}
				fuzzFireRNR(h.qps[0])
			}
			if len(wcs) == 0 || wcs[0].WRID != 1000 {
				t.Fatalf("the READ did not complete: %v", wcs)
			}
			o := s.slot(0)
			if wcs[0].Status != WCSuccess || !bytes.Equal(s.buf[o:o+768], data) {
				t.Fatalf("the READ completed %v; its buffer holds % x..., the responses carried % x...",
					wcs[0].Status, s.buf[o:o+8], data[:8])
			}
		})
	}
}

// An RNR NAK of a PSN already acknowledged is a ghost (a late answer to a
// request that has since completed), as a NAK of one is (onNAK): it does
// not stop the requester, rewind it or spend rnr_retry. It did all three.
func TestGhostRNRNAK(t *testing.T) {
	h := harness(t)
	s := h.reqSink(t)
	h.reset(t)
	s.reset()
	var wrs [reqWRs]reqWR
	h.reqPost(t, s, 0, 0, &wrs) // four one-byte WRITEs, one PSN each
	h.lk.take()
	h.pollWCs(t, "posting")
	q := h.qps[0]
	h.reqRespond(t, wire.OpAcknowledge, wrs[1].first, wire.SyndromeACK, nil)
	rnr := q.Counters().Get(RcvdRNRErr)
	h.reqRespond(t, wire.OpAcknowledge, wrs[0].first, wire.RNRNAK(0), nil)
	q.mu.Lock()
	wait, psn := q.comp.rnrWait, q.req.psn
	q.mu.Unlock()
	if wait || psn != wrs[3].first.Add(1) {
		t.Fatalf("after an RNR NAK of PSN %v, acknowledged before: waiting for the RNR timer %v, next PSN to send %v (want false, %v)",
			wrs[0].first, wait, psn, wrs[3].first.Add(1))
	}
	if n := q.Counters().Get(RcvdRNRErr); n != rnr {
		t.Errorf("rcvd_rnr_err counted the ghost: %d, before %d", n, rnr)
	}
	fuzzFireRNR(q)
	if sent := h.lk.take(); len(sent) != 0 {
		t.Fatalf("the ghost RNR NAK made the requester send %d packets again", len(sent))
	}
	h.reqRespond(t, wire.OpAcknowledge, wrs[3].first, wire.SyndromeACK, nil)
	if wcs := h.pollWCs(t, "the last ACK"); len(wcs) != 4 || wcs[3].Status != WCSuccess {
		t.Fatalf("after the last ACK: %v, want all four WRITEs complete", wcs)
	}
}
