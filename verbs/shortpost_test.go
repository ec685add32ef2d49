package verbs

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// The requester's short path (shortPost) must send and leave what reqRun
// would. As TestShortSendAsGeneral: each case runs on fresh devices with
// the short paths and without, and the transcripts must match, and each
// post is taken by the short path or not as its step says. "taken" and
// "after a timeout" are posts it must take; in each other case one of
// shortPost's checks, and only that one, fails at a step marked general.

// postStep is one step of a case: a post, an answer from the peer, or a
// timer.
type postStep struct {
	kind   int // postWR, postTwo, postACK, postRNR, postTimer, postRNRTimer
	op     WROpcode
	n      int // message bytes
	flags  SendFlags
	sges   int  // 2: the message from two SGEs
	badKey bool // the SGE's lkey names nothing
	d      int  // postACK: the PSN acknowledged, relative to the highest sent
	short  bool // the short path must take this post
	setup  func(q *QP)
}

const (
	postWR = iota
	postTwo
	postACK
	postRNR
	postTimer
	postRNRTimer
)

type postCase struct {
	name  string
	typ   QPType
	ecn   bool // the port's reaction point on
	free  bool // the fuzzer's: no step says whether the short path takes it
	steps []postStep
}

func postCases() []postCase {
	send := func(n int) postStep {
		return postStep{kind: postWR, op: WRSend, n: n, flags: SendSignaled, short: true}
	}
	general := func(s postStep) postStep { s.short = false; return s }
	ack := postStep{kind: postACK}
	var sixteen []postStep
	for range 16 {
		sixteen = append(sixteen, send(8))
	}
	return []postCase{
		{name: "taken", typ: RC, steps: []postStep{send(64), ack, send(0), ack,
			{kind: postWR, op: WRSend, n: 16, flags: SendInline | SendSolicited, short: true}, send(1024), ack, send(3), send(5), ack}},
		{name: "a UC QP", typ: UC, steps: []postStep{general(send(64))}},
		{name: "not a SEND", typ: RC, steps: []postStep{{kind: postWR, op: WRRDMAWrite, n: 64, flags: SendSignaled}, ack,
			{kind: postWR, op: WRSendWithImm, n: 64, flags: SendSignaled}, ack}},
		{name: "longer than the path MTU", typ: RC, steps: []postStep{general(send(1025)), ack}},
		{name: "two SGEs", typ: RC, steps: []postStep{{kind: postWR, op: WRSend, n: 64, sges: 2}, ack}},
		{name: "a bad lkey", typ: RC, steps: []postStep{{kind: postWR, op: WRSend, n: 64, badKey: true}}},
		{name: "two WRs", typ: RC, steps: []postStep{{kind: postTwo, op: WRSend, n: 64}, ack}},
		{name: "the window full", typ: RC, steps: append(sixteen, general(send(8)), ack)},
		{name: "an RNR wait", typ: RC, steps: []postStep{send(8), {kind: postRNR}, general(send(8)), {kind: postRNRTimer}, ack}},
		{name: "a fence", typ: RC, steps: []postStep{{kind: postWR, op: WRRDMARead, n: 64}, general(postStep{kind: postWR, op: WRSend, n: 8, flags: SendFence})}},
		{name: "behind a fenced WR", typ: RC, steps: []postStep{{kind: postWR, op: WRRDMARead, n: 64},
			{kind: postWR, op: WRSend, n: 8, flags: SendFence}, general(send(8))}},
		{name: "a pacer", typ: RC, steps: []postStep{general(postStep{kind: postWR, op: WRSend, n: 8,
			setup: func(q *QP) { q.SetPacer(fakePacer{}) }})}},
		{name: "congestion control", typ: RC, ecn: true, steps: []postStep{general(send(8)), ack}},
		{name: "another goroutine's batch", typ: RC, steps: []postStep{general(postStep{kind: postWR, op: WRSend, n: 8,
			setup: func(q *QP) { q.mu.Lock(); q.reqBatch = &txBatch{}; q.mu.Unlock() }})}},
		{name: "behind a deferred WR", typ: RC, steps: []postStep{general(postStep{kind: postWR, op: WRSend, n: 8,
			setup: func(q *QP) { q.mu.Lock(); q.reqBatch = &txBatch{}; q.mu.Unlock() }}), general(send(8))}},
		{name: "congestion control turned off", typ: RC, ecn: true, steps: []postStep{general(send(8)), ack,
			general(postStep{kind: postWR, op: WRSend, n: 8, setup: func(q *QP) {
				if err := q.dev.SetECN(1, DefaultECNConfig()); err != nil {
					panic(err)
				}
			}}), ack, send(8)}},
		{name: "after a timeout", typ: RC, steps: []postStep{send(8), {kind: postTimer}, send(8), ack}},
	}
}

// fakePacer never holds a packet back.
type fakePacer struct{}

func (fakePacer) Delay(time.Time) time.Duration { return 0 }
func (fakePacer) Sent(time.Time, int)           {}

func TestShortPost(t *testing.T) {
	for _, c := range postCases() {
		t.Run(c.name, func(t *testing.T) {
			short := runPostCase(t, c, false)
			general := runPostCase(t, c, true)
			sameOutcome(t, short, general)
		})
	}
}

// runPostCase runs c on a fresh device and returns its transcript; it
// fails t when a step's post is not taken by the short path as marked.
func runPostCase(t testing.TB, c postCase, general bool) string {
	d, lk, local, peer := shortDevice(t, general)
	if c.ecn {
		e := DefaultECNConfig()
		e.RPEnable = AllPriorities
		if err := d.SetECN(1, e); err != nil {
			t.Fatal(err)
		}
	}
	pd, _ := d.AllocPD()
	buf := make([]byte, 8192)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	mr, err := pd.RegMRIOVA(buf, 0, mem.LocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(256)
	q, err := pd.CreateQP(QPInitAttr{Type: c.typ, SendCQ: cq, RecvCQ: cq,
		Cap: QPCap{MaxSendWR: 32, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	// A local ACK timeout of hours: armed, it shows; it never fires.
	shortConnect(t, q, mem.LocalWrite|mem.RemoteWrite, peer, true, 31)
	fuzzDrainEvents(d)
	var out txBatch
	out.dev = d
	var b strings.Builder
	deliver := func(syn wire.Syndrome, psn wire.PSN) {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCAcknowledge, PSN: psn, DestQP: q.num, PKey: wire.DefaultPKey}}
		f.Ext.AETH = wire.AETHFields{Syndrome: syn}
		tp := append(f.AppendTransport(nil), 0, 0, 0, 0)
		pk := link.Packet{Buf: append(make([]byte, link.FrameHeadroom), tp...), Off: link.FrameHeadroom, Len: len(tp),
			Addr: link.Addr{Version: wire.RoCEv2, SrcGID: peer, DstGID: local, UDPSrcPort: 4791, HopLimit: 64}}
		func() {
			d.rxMu.Lock()
			defer d.rxMu.Unlock()
			fuzzPrepare(&out)
			d.dispatch(&pk, &out)
			out.release()
		}()
	}
	wrOf := func(s postStep, id uint64) SendWR {
		wr := SendWR{WRID: id, Opcode: s.op, Flags: s.flags, RemoteAddr: 0x1000, RKey: 0x1234}
		switch {
		case s.flags&SendInline != 0:
			wr.InlineData = buf[100 : 100+s.n]
		case s.sges == 2:
			wr.SGList = []SGE{{Addr: 200, Length: uint32(s.n / 2), LKey: mr.LKey()}, {Addr: 4000, Length: uint32(s.n - s.n/2), LKey: mr.LKey()}}
		case s.n > 0 || s.op == WRRDMARead:
			wr.SGList = []SGE{{Addr: 300, Length: uint32(max(s.n, 1)), LKey: mr.LKey()}}
			if s.badKey {
				wr.SGList[0].LKey = shortBadKey
			}
		}
		return wr
	}
	for i, s := range c.steps {
		fmt.Fprintf(&b, "step %d (%d %v %d bytes %v):\n", i, s.kind, s.op, s.n, s.flags)
		if s.setup != nil {
			s.setup(q)
		}
		q.mu.Lock()
		hits, maxSent := q.req.short, q.req.maxSent
		q.mu.Unlock()
		switch s.kind {
		case postWR:
			if err := q.PostSend(wrOf(s, uint64(i))); err != nil {
				fmt.Fprintf(&b, "  post: %v\n", err)
			}
		case postTwo:
			if err := q.PostSend(wrOf(s, uint64(i)), wrOf(s, uint64(i+100))); err != nil {
				fmt.Fprintf(&b, "  post: %v\n", err)
			}
		case postACK:
			deliver(wire.SyndromeACK, maxSent.Add(s.d))
		case postRNR:
			q.mu.Lock()
			psn := q.comp.psn
			q.mu.Unlock()
			deliver(wire.RNRNAK(0), psn)
		case postTimer:
			fuzzFireRetrans(q)
		case postRNRTimer:
			fuzzFireRNR(q)
		}
		if err := fuzzSettle(d); err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		took := q.req.short != hits
		q.reqBatch = nil // a case's stand-in for another goroutine's batch
		q.mu.Unlock()
		if s.kind == postWR && !general && !c.free && took != s.short {
			t.Errorf("step %d: the short path took the post: %v, want %v", i, took, s.short)
		}
		for _, p := range lk.take() {
			fmt.Fprintf(&b, "  sent % x\n", p)
		}
		var wc [64]WC
		n, _ := cq.Poll(wc[:])
		for _, w := range wc[:n] {
			w.QPNum = 0
			fmt.Fprintf(&b, "  completion %+v\n", w)
		}
		for d.events.len() > 0 {
			ev, _ := d.events.get(nil)
			fmt.Fprintf(&b, "  event %v %q\n", ev.Type, ev.Detail)
		}
		q.mu.Lock()
		r, cp := &q.req, &q.comp
		fmt.Fprintf(&b, "  %v SQ %d %d %d req PSN %v off %d maxSent %v sentAny %v noack %d armOnSend %v rdAtomic %d deferred %v\n",
			q.state, q.sq.head, q.sq.cur, q.sq.tail, r.psn, r.off, r.maxSent, r.sentAny, r.noack, r.armOnSend, r.rdAtomic, q.reqDeferred)
		fmt.Fprintf(&b, "  comp PSN %v armed %v rnrWait %v sample %v %v unsent %v window %d reaction point %v\n",
			cp.psn, cp.timerArmed, cp.rnrWait, cp.rttValid, cp.rttPSN, cp.rttUnsent, r.win.size(), q.cc != nil)
		for j := q.sq.head; j < q.sq.tail; j++ {
			w := q.sq.at(j)
			fmt.Fprintf(&b, "  WQE %d: started %v PSNs %v-%v\n", j, w.started, w.firstPSN, w.lastPSN)
		}
		q.mu.Unlock()
		fmt.Fprintf(&b, "  counters %v\n", counterDelta(q.Counters().Snapshot(), nil))
	}
	// Keys are drawn afresh for each device.
	return strings.ReplaceAll(b.String(), fmt.Sprintf("key %#x ", mr.LKey()), "key LKEY ")
}

// FuzzShortPostDiff: sequences of posts (SENDs mostly; other opcodes,
// sizes around the path MTU, inline, solicited, fenced, two SGEs, bad
// keys, two WRs at once), ACKs, RNR NAKs and timers, with the short paths
// and without: the transcripts must match.
func FuzzShortPostDiff(f *testing.F) {
	f.Add([]byte{0, 0, 4, 2, 5, 0, 0, 0, 0, 0, 3, 6, 0, 0, 6, 2, 5, 0, 0, 0})
	f.Add([]byte{0, 0, 4, 2, 6, 0, 0, 0, 1, 0, 4, 2, 7, 0, 0, 1, 5, 0, 0, 0, 0, 0, 4, 0x22})
	f.Add([]byte{0, 5, 4, 2, 0, 0, 4, 0x12, 0, 0, 4, 2, 5, 0, 0, 0, 7, 0, 0, 0, 5, 0, 0, 0})
	f.Add([]byte{4, 0, 4, 2, 0, 0, 7, 2, 0, 0, 4, 0x42, 5, 0xFF, 0, 0, 5, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := postCase{name: "fuzz", typ: RC, free: true}
		ops := [...]WROpcode{WRSend, WRSend, WRSend, WRSendWithImm, WRRDMAWrite, WRRDMARead}
		sizes := [...]int{0, 1, 3, 8, 64, 1023, 1024, 1025, 2048, 4000}
		for len(data) >= 4 && len(c.steps) < 24 {
			r := data[:4]
			data = data[4:]
			s := postStep{op: ops[int(r[1])%len(ops)], n: sizes[int(r[2])%len(sizes)]}
			switch k := r[0] % 8; {
			case k < 4:
				s.kind = postWR
			case k == 4:
				s.kind = postTwo
			case k == 5:
				s.kind, s.d = postACK, int(int8(r[1]))%4
			case k == 6:
				s.kind = postRNR
			case r[3]&1 == 0:
				s.kind = postTimer
			default:
				s.kind = postRNRTimer
			}
			s.flags = SendFlags(0)
			if r[3]&0x02 != 0 {
				s.flags |= SendSignaled
			}
			if r[3]&0x04 != 0 && s.n <= 64 {
				s.flags |= SendInline
			}
			if r[3]&0x08 != 0 {
				s.flags |= SendSolicited
			}
			if r[3]&0x10 != 0 {
				s.flags |= SendFence
			}
			s.badKey = r[3]&0x20 != 0
			if r[3]&0x40 != 0 && s.n >= 2 {
				s.sges = 2
			}
			c.steps = append(c.steps, s)
		}
		short := runPostCase(t, c, false)
		general := runPostCase(t, c, true)
		sameOutcome(t, short, general)
	})
}
