package verbs

// Where the device sends (issue 15): never on the link while holding a
// QP's lock or the receive path's (rxMu), and what a requester run that
// stopped part-way through a message put out asks for an ACK.

import (
	"bytes"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// lockCheckLink is a link.Poller that delivers what the test queues (to
// tryReceive) and, on each Send, notes whether the QP's lock or the
// device's rxMu was held. The tests run on one goroutine (the device's
// receive goroutine never gets a packet, the scheduler's is not started,
// the QP's retransmit timer is off), so a lock found held is held by the
// goroutine that sends.
type lockCheckLink struct {
	*fuzzLink
	d                atomic.Pointer[Device]
	q                atomic.Pointer[QP]
	underQP, underRx atomic.Int64
	// armedAtSend counts the Sends that found the QP's local ACK timer
	// armed already.
	armedAtSend atomic.Int64
	// firstSend is when the first Send began (monoNow), after the clock
	// has moved past the moment it was called (so anything stamped before
	// the Send is strictly earlier); zero before any.
	firstSend atomic.Int64

	qmu   sync.Mutex
	queue []link.Packet // guarded by qmu
}

func (l *lockCheckLink) Send(pkts []link.Packet) (int, error) {
	if l.firstSend.Load() == 0 {
		t0 := monoNow()
		now := t0
		for now <= t0 {
			now = monoNow()
		}
		l.firstSend.CompareAndSwap(0, now)
	}
	if q := l.q.Load(); q != nil {
		if q.mu.TryLock() {
			if q.comp.timerArmed {
				l.armedAtSend.Add(1)
			}
			q.mu.Unlock()
		} else {
			l.underQP.Add(1)
		}
	}
	if d := l.d.Load(); d != nil {
		if d.rxMu.TryLock() {
			d.rxMu.Unlock()
		} else {
			l.underRx.Add(1)
		}
	}
	return l.fuzzLink.Send(pkts)
}

func (l *lockCheckLink) TryRecv(pkts []link.Packet) (int, error) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	n := copy(pkts, l.queue)
	l.queue = l.queue[n:]
	return n, nil
}

func (l *lockCheckLink) RecvLocked([]link.Packet, sync.Locker) (int, error) {
	<-l.closed
	return 0, net.ErrClosed
}

// push queues a packet of fields f from the peer for TryRecv.
func (l *lockCheckLink) push(f *wire.PacketFields) {
	b := append(f.AppendTransport(nil), 0, 0, 0, 0)
	buf := append(make([]byte, link.FrameHeadroom, link.FrameHeadroom+len(b)), b...)
	l.qmu.Lock()
	l.queue = append(l.queue, link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: len(b), Addr: link.Addr{Version: wire.RoCEv2,
		SrcGID: netip.MustParseAddr("::ffff:192.0.2.2"), DstGID: netip.MustParseAddr("::ffff:192.0.2.1"), UDPSrcPort: 4791, HopLimit: 64}})
	l.qmu.Unlock()
}

// sentPSNs returns the PSNs and AckReq bits of the packets sent so far.
func (l *lockCheckLink) sentPSNs() (psns []wire.PSN, ackReq []bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.sent {
		psns = append(psns, wire.BTH(b).PSN())
		ackReq = append(ackReq, wire.BTH(b).AckReq())
	}
	return psns, ackReq
}

const txlockSQPSN = 0x800

// newLockEnv opens a device on a lockCheckLink, without its scheduler's
// goroutine, with one RC QP in RTS (path MTU 4096, sq_psn txlockSQPSN,
// local ACK timeout timeout) and a 1 MiB region.
func newLockEnv(t *testing.T, timeout uint8) (*lockCheckLink, *Device, *QP, *MR) {
	t.Helper()
	lk := &lockCheckLink{fuzzLink: &fuzzLink{closed: make(chan struct{})}}
	d, err := openDevice(DeviceConfig{Name: "txlock0", Link: lk, GIDs: []GIDEntry{{GID: netip.MustParseAddr("::ffff:192.0.2.1"), Type: GIDTypeRoCEv2}},
		ActiveMTU: MTU4096}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if d.poller == nil {
		t.Fatal("the device does not poll the test's link")
	}
	pd, _ := d.AllocPD()
	mr, err := pd.RegMR(make([]byte, 1<<20), mem.LocalWrite|mem.RemoteRead|mem.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(64)
	q, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU4096, DestQPN: 0x90, RQPSN: fuzzPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
		AH: AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: netip.MustParseAddr("::ffff:192.0.2.2"), HopLimit: 64}}},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	// Timeout 0: no local ACK timeout, so no timer's goroutine takes the
	// QP's lock while the test's sends; the tests that arm it take 4.3 s
	// (20), far more than they run.
	if err := q.Modify(&QPAttr{State: QPSRTS, SQPSN: txlockSQPSN, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
		AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic); err != nil {
		t.Fatal(err)
	}
	// The congestion window at its bound (cwnd.go starts a QP at
	// initialCwnd, 16 PSNs): these tests are about where and when the
	// requester's packets are sent, and their WRITEs of up to 64 packets
	// must be stopped by the batch's budget, not by the window.
	q.mu.Lock()
	q.req.win.n = maxUnackedPSNs
	q.mu.Unlock()
	lk.d.Store(d)
	lk.q.Store(q)
	return lk, d, q, mr
}

func writeWR(mr *MR, n uint32) SendWR {
	return SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{{Addr: mr.Addr(), Length: n, LKey: mr.LKey()}},
		RemoteAddr: 0x10000, RKey: 0x1234}
}

// checkPSNs fails unless the packets sent carry PSNs txlockSQPSN, +1, ...,
// n of them: each once, in order.
func checkPSNs(t *testing.T, psns []wire.PSN, n int) {
	t.Helper()
	if len(psns) != n {
		t.Fatalf("%d packets sent, want %d", len(psns), n)
	}
	for i, p := range psns {
		if want := wire.PSN(txlockSQPSN).Add(i); p != want {
			t.Fatalf("packet %d has PSN %v, want %v (PSNs %v)", i, p, want, psns)
		}
	}
}

// TestPostSendSendsWithoutQPLock: a WRITE of 64 packets, four transmit
// batches (txFlushBytes), is sent in PSN order, each packet once, and no
// batch goes to the link while the QP's lock is held (it used to be,
// from txBatch.next, for every batch but the last).
func TestPostSendSendsWithoutQPLock(t *testing.T) {
	lk, _, q, mr := newLockEnv(t, 0)
	if err := q.PostSend(writeWR(mr, 64*4096)); err != nil {
		t.Fatal(err)
	}
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, 64)
	if n := lk.underQP.Load(); n != 0 {
		t.Errorf("%d of the link's Sends ran with the QP's lock held", n)
	}
}

// TestReceivePathSendsWithoutRxMu: a READ response that completes a READ
// lets the requester run from the receive path (the next READ waited for
// max_rd_atomic); what it builds is sent after rxMu and the QP's lock are
// released, in PSN order.
func TestReceivePathSendsWithoutRxMu(t *testing.T) {
	lk, d, q, mr := newLockEnv(t, 0)
	const reads = 6 // MaxRdAtomic is 4: two wait
	for i := range reads {
		wr := SendWR{WRID: uint64(i), Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{{Addr: mr.Addr() + uint64(64*i), Length: 64, LKey: mr.LKey()}},
			RemoteAddr: 0x10000, RKey: 0x1234}
		if err := q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, 4)
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpReadResponseOnly, PKey: wire.DefaultPKey, DestQP: q.num,
		PSN: txlockSQPSN}, Payload: make([]byte, 64)}
	f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 1}
	lk.push(&f)
	if !d.tryReceive(false) {
		t.Fatal("tryReceive took no packet")
	}
	psns, _ = lk.sentPSNs()
	checkPSNs(t, psns, 5)
	if n := lk.underRx.Load(); n != 0 {
		t.Errorf("%d of the link's Sends ran with rxMu held", n)
	}
	if n := lk.underQP.Load(); n != 0 {
		t.Errorf("%d of the link's Sends ran with the QP's lock held", n)
	}
}

// TestStoppedRunAsksForACK: a requester run that its batch's budget stops
// part-way through a message sets AckReq on the last packet it put out, so
// that the responder acknowledges what left before the rest follows; the
// packets before it carry none (fewer than maxPktPerAck, the window far).
func TestStoppedRunAsksForACK(t *testing.T) {
	lk, _, q, mr := newLockEnv(t, 0)
	q.mu.Lock()
	wr := writeWR(mr, 64*4096)
	if err := q.postOne(&wr); err != nil {
		q.mu.Unlock()
		t.Fatal(err)
	}
	out := getTxBatch(q.dev) // burstBytes: the scheduler's turn, the receive path
	q.reqRun(out)
	more := q.req.more
	q.mu.Unlock()
	putTxBatch(out)
	if !more {
		t.Fatal("the run was not stopped by its budget")
	}
	psns, ack := lk.sentPSNs()
	if len(psns) == 0 || len(psns) >= 64 {
		t.Fatalf("%d packets sent, want some of the message's 64", len(psns))
	}
	checkPSNs(t, psns, len(psns))
	for i, a := range ack {
		if want := i == len(ack)-1; a != want {
			t.Errorf("packet %d of %d (PSN %v): AckReq %v, want %v", i+1, len(ack), psns[i], a, want)
		}
	}
}

// pushAETH queues a response from the peer: an RC Acknowledge of
// txlockSQPSN with syndrome syn.
func (l *lockCheckLink) pushAETH(q *QP, syn wire.Syndrome) {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCAcknowledge, PKey: wire.DefaultPKey, DestQP: q.num,
		PSN: txlockSQPSN}}
	f.Ext.AETH = wire.AETHFields{Syndrome: syn, MSN: 0}
	l.push(&f)
}

// checkArmedWhenSent fails t unless q's local ACK timer was off at every
// Send since the count was before, and is running now: what was sent is
// what started it. what names the packets.
func checkArmedWhenSent(t *testing.T, lk *lockCheckLink, q *QP, before int64, what string) {
	t.Helper()
	if n := lk.armedAtSend.Load() - before; n != 0 {
		t.Errorf("the timer was armed before %s was sent (%d Sends)", what, n)
	}
	q.mu.Lock()
	armed := q.comp.timerArmed
	q.mu.Unlock()
	if !armed {
		t.Errorf("the timer is not armed after %s was sent", what)
	}
}

// TestACKTimerArmedWhenSent: the local ACK timer starts once the
// requester's packets have gone to the link, not when they are built: a
// batch that waits for the link (behind other QPs') must not spend the
// timeout before its packets leave (IBTA §9.7.6.1.3 times the wait for a
// response to a packet sent).
func TestACKTimerArmedWhenSent(t *testing.T) {
	lk, _, q, mr := newLockEnv(t, 20)
	if err := q.PostSend(writeWR(mr, 8*4096)); err != nil {
		t.Fatal(err)
	}
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, 8)
	checkArmedWhenSent(t, lk, q, 0, "the packets")
}

// TestRNRRetryArmsTimerWhenSent: the resend after an RNR NAK's wait
// starts the local ACK timer once it has gone to the link, as every other
// requester run does (armOnSend); onRNRTimer used to arm it before its
// batch was sent, so a batch waiting for the link behind other QPs' spent
// the timeout before its packet left.
func TestRNRRetryArmsTimerWhenSent(t *testing.T) {
	lk, d, q, mr := newLockEnv(t, 20)
	wr := writeWR(mr, 64)
	wr.Opcode = WRSend
	if err := q.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	// The responder has no receive posted: an RNR NAK asking for its
	// longest wait (code 0, 655 ms), so that the test, not the QP's timer,
	// ends it.
	lk.pushAETH(q, wire.RNRNAK(0))
	if !d.tryReceive(false) {
		t.Fatal("tryReceive took no packet")
	}
	q.mu.Lock()
	waiting := q.comp.rnrWait
	q.mu.Unlock()
	if !waiting {
		t.Fatal("the QP does not wait after the RNR NAK")
	}
	before := lk.armedAtSend.Load()
	q.onRNRTimer()
	psns, _ := lk.sentPSNs()
	if len(psns) != 2 || psns[1] != txlockSQPSN {
		t.Fatalf("PSNs sent %v, want the SEND's (%#x) twice", psns, txlockSQPSN)
	}
	checkArmedWhenSent(t, lk, q, before, "the resend")
}

// TestACKArmsTimerWhenSent: an ACK that lets the requester send more (the
// window held the rest of the message) stops the local ACK timer and
// starts it again once the packets it let go have left, not before:
// afterProgress armed it right after building them into the receive
// path's batch, so the timeout ran while they waited for the link.
func TestACKArmsTimerWhenSent(t *testing.T) {
	lk, d, q, mr := newLockEnv(t, 20)
	q.mu.Lock()
	q.req.win.n = 1 // one PSN outstanding: the WRITE's second packet waits for the first's ACK
	q.mu.Unlock()
	if err := q.PostSend(writeWR(mr, 2*4096)); err != nil {
		t.Fatal(err)
	}
	if psns, _ := lk.sentPSNs(); len(psns) != 1 {
		t.Fatalf("PSNs sent %v, want the first packet's alone", psns)
	}
	lk.pushAETH(q, wire.SyndromeACK)
	before := lk.armedAtSend.Load()
	if !d.tryReceive(false) {
		t.Fatal("tryReceive took no packet")
	}
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, 2)
	checkArmedWhenSent(t, lk, q, before, "the packet the ACK let go")
}

// TestRTTSampleStartsWhenSent: the round trip the requester samples (for
// its timer's SRTT and its congestion window, cwnd.go) starts when the
// packet has gone to the link, not when it was built: a batch that waited
// for the link behind other QPs' would otherwise count that wait as a
// queue at the peer and cut the window.
func TestRTTSampleStartsWhenSent(t *testing.T) {
	lk, _, q, mr := newLockEnv(t, 20)
	if err := q.PostSend(writeWR(mr, 8*4096)); err != nil {
		t.Fatal(err)
	}
	psns, ack := lk.sentPSNs()
	checkPSNs(t, psns, 8)
	if !ack[7] {
		t.Fatal("the WRITE's last packet does not ask for an ACK")
	}
	sent := lk.firstSend.Load()
	q.mu.Lock()
	valid, psn, at := q.comp.rttValid, q.comp.rttPSN, q.comp.rttSent
	q.mu.Unlock()
	if !valid || psn != wire.PSN(txlockSQPSN).Add(7) {
		t.Fatalf("RTT sample valid %v on PSN %v, want one on %v", valid, psn, wire.PSN(txlockSQPSN).Add(7))
	}
	if at < sent {
		t.Errorf("the RTT sample started %v before its packet was sent", time.Duration(sent-at))
	}
}

// TestKickSendsWithoutQPLock: a change that lets a held-back requester go
// on (a new pacer, a rate limit, SQD → RTS) sends what it then builds with
// the QP's lock let go of, as every other path does, in PSN order; kick
// used to send under it.
func TestKickSendsWithoutQPLock(t *testing.T) {
	lk, _, q, mr := newLockEnv(t, 0)
	var p holdPacer
	p.on.Store(true)
	q.SetPacer(&p)
	if err := q.PostSend(writeWR(mr, 4*4096)); err != nil {
		t.Fatal(err)
	}
	if psns, _ := lk.sentPSNs(); len(psns) != 0 {
		t.Fatalf("%d packets sent with the pacer holding the requester", len(psns))
	}
	p.on.Store(false)
	q.SetPacer(nil) // kick: the WRITE goes now
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, 4)
	if n := lk.underQP.Load(); n != 0 {
		t.Errorf("%d of the link's Sends ran with the QP's lock held", n)
	}
}

// TestHostileResponsesAfterRewind: after a go-back-N retry that the pacer
// stopped before any resend (head == cur, off 0: the state in which the
// completer now takes responses to the first transmissions), forged
// responses change nothing: an ACK of a PSN never sent, and a READ
// response and an atomic ACK for the oldest outstanding PSN, which carried
// a WRITE, complete no WQE and write nothing. (A response at a later PSN
// acknowledges every request before it, IBTA's coalesced
// acknowledgement: a forged one does that too, as on any RC
// implementation, RoCE having no authentication.) A genuine ACK then
// completes exactly the WQEs it covers, and the requester resends only the
// rest.
func TestHostileResponsesAfterRewind(t *testing.T) {
	lk, d, q, _ := newLockEnv(t, 0)
	const n = 3
	src := make([]byte, 4096) // the WRITEs' source: a forged READ response must not land here
	mr, err := q.pd.RegMR(src, mem.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wr := writeWR(mr, 4096)
		wr.WRID = uint64(i)
		if err := q.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	psns, _ := lk.sentPSNs()
	checkPSNs(t, psns, n)
	var p holdPacer
	p.on.Store(true)
	q.SetPacer(&p)
	q.mu.Lock()
	out := getTxBatch(d)
	q.retry(out)
	q.mu.Unlock()
	putTxBatch(out)
	if psns, _ := lk.sentPSNs(); len(psns) != n {
		t.Fatalf("%d packets sent after the retry, want %d (the pacer holds the resend)", len(psns), n)
	}
	resp := func(op wire.Opcode, psn wire.PSN, payload []byte) {
		t.Helper()
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | op, PKey: wire.DefaultPKey, DestQP: q.num, PSN: psn},
			Payload: payload}
		f.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 1}
		f.Ext.AtomicAck = 0xeeeeeeeeeeeeeeee
		lk.push(&f)
		if !d.tryReceive(false) {
			t.Fatal("tryReceive took no packet")
		}
	}
	var wc [4]WC
	forged := 0
	for _, f := range []struct {
		op      wire.Opcode
		psn     wire.PSN
		payload []byte
	}{
		{wire.OpAcknowledge, txlockSQPSN + n, nil}, // never sent
		{wire.OpReadResponseOnly, txlockSQPSN, bytes.Repeat([]byte{0xee}, 64)},
		{wire.OpAtomicAcknowledge, txlockSQPSN, nil},
	} {
		resp(f.op, f.psn, f.payload)
		forged++
		if k, _ := q.sendCQ.Poll(wc[:]); k != 0 {
			t.Fatalf("forged response %d (%v, PSN %v) completed %d WQEs: %+v", forged, f.op, f.psn, k, wc[:k])
		}
	}
	if i := bytes.IndexByte(src, 0xee); i >= 0 {
		t.Fatalf("a forged response wrote into the WRITEs' source at offset %d", i)
	}
	q.mu.Lock()
	state := q.state
	q.mu.Unlock()
	if state != QPSRTS {
		t.Fatalf("QP in %v after the forged responses, want RTS", state)
	}
	resp(wire.OpAcknowledge, txlockSQPSN+1, nil) // the first two WRITEs
	k, _ := q.sendCQ.Poll(wc[:])
	if k != 2 || wc[0].WRID != 0 || wc[1].WRID != 1 || wc[0].Status != WCSuccess || wc[1].Status != WCSuccess {
		t.Fatalf("the ACK of the first two WRITEs completed %+v", wc[:k])
	}
	p.on.Store(false)
	q.SetPacer(nil)
	psns, _ = lk.sentPSNs()
	if len(psns) != n+1 || psns[n] != txlockSQPSN+n-1 {
		t.Fatalf("sent PSNs %v: want the third WRITE (PSN %v) resent, and only it", psns, wire.PSN(txlockSQPSN+n-1))
	}
}

// TestSentReadsClockOnce: when the packets a run built have gone to the
// link, the RTT sample they carry and the local ACK timer start from one
// clock read (onSent), not two: in the lab's VMs each read costs some
// 150-180 ns of a round trip's path. The timer's deadline is then exactly
// the sample's start plus the timeout; a second read would be later.
func TestSentReadsClockOnce(t *testing.T) {
	_, _, q, mr := newLockEnv(t, 20)
	if err := q.PostSend(writeWR(mr, 4096)); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.comp.rttValid || q.comp.rttUnsent || !q.comp.timerArmed {
		t.Fatalf("after the send: sample valid %v unsent %v, timer armed %v; want a sample started and the timer armed",
			q.comp.rttValid, q.comp.rttUnsent, q.comp.timerArmed)
	}
	if d := q.retransTimeout(); q.comp.due != q.comp.rttSent+int64(d) {
		t.Errorf("timer due %d, sample started %d, timeout %v: due %v after the sample's start plus the timeout, want the same clock read",
			q.comp.due, q.comp.rttSent, d, time.Duration(q.comp.due-q.comp.rttSent-int64(d)))
	}
}

// TestRTTSampleNotBeforeSent: an ACK that covers the sampled PSN before
// the sample's batch has gone to the link (a forged or stale one can) ends
// the sample without a round trip: the sample's clock starts only when its
// packet is sent (onSent), so it has no start to measure from, and a
// round trip from the zero time would make the retransmit timer's SRTT
// centuries long. The next sample starts afresh.
func TestRTTSampleNotBeforeSent(t *testing.T) {
	_, _, q, _ := newLockEnv(t, 20)
	q.mu.Lock()
	defer q.mu.Unlock()
	start := q.comp.psn
	q.sampleSent(start.Add(3))
	if !q.comp.rttValid || !q.comp.rttUnsent {
		t.Fatalf("after sampleSent: valid %v unsent %v, want a sample waiting for its send", q.comp.rttValid, q.comp.rttUnsent)
	}
	q.comp.psn = start.Add(4) // acknowledged past the sampled PSN
	q.sampleAcked()
	if q.comp.rttValid || q.comp.srtt != 0 || q.req.win.lastRTT != 0 {
		t.Fatalf("valid %v srtt %v window's last RTT %v after an ACK of a sample never sent, want no sample taken", q.comp.rttValid, q.comp.srtt, q.req.win.lastRTT)
	}
	// Sent, then acknowledged: a sample of the time between.
	q.sampleSent(start.Add(7))
	q.onSent()
	time.Sleep(time.Millisecond) // a round trip the clock sees
	q.comp.psn = start.Add(8)
	q.sampleAcked()
	if q.comp.rttValid || q.comp.srtt < time.Millisecond || q.comp.srtt > time.Minute {
		t.Fatalf("valid %v srtt %v after a sample sent and acknowledged, want one taken, short", q.comp.rttValid, q.comp.srtt)
	}
}
