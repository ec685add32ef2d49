package verbs

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// The short paths (shortSend and shortACK here, shortPost in
// shortpost_test.go) must leave everything as the general paths would.
// TestShortSendAsGeneral runs each case twice on fresh devices, once
// with the short path and once without (Device.generalOnly), and compares
// what a program and a peer can see: the packets sent, the completions,
// the memory, the QP's responder state and every counter. Each check the
// short path makes has a case in which only that check fails: the short
// path must not take the packet (short hits 0), and the general path's
// answer (an error, a NAK, a completion through another route) is the one
// given. FuzzShortSendDiff does the same for the fuzzer's packet
// sequences; TestShortACK and FuzzShortACKDiff for shortACK, below.

// shortPkt is one packet of a case, to the case's QP.
type shortPkt struct {
	op      wire.Opcode
	dpsn    int // PSN relative to the QP's expected one
	n       int // payload bytes
	ackReq  bool
	badPeer bool // from an address that is not the QP's peer
	write   bool // an RDMA WRITE FIRST or ONLY: a RETH naming 2 KiB of the region
	read    bool // an RDMA READ: a RETH naming 96 KiB of the region, more than a burst (burstBytes)
}

// shortCase is a QP, its receives, and the packets sent to it.
type shortCase struct {
	name  string
	typ   QPType
	srq   bool
	rtr   bool // leave the QP in RTR
	recvs [][]SGE
	pkts  []shortPkt
	short uint64 // packets the short path must take
}

// sgeAt is an SGE of n bytes at offset off of the case's region; a key of
// 0 is the region's lkey.
func sgeAt(off, n int, key uint32) SGE { return SGE{Addr: uint64(off), Length: uint32(n), LKey: key} }

const (
	shortBadKey = 0xBAD00
	shortBuf    = 128 << 10 // the case's region
)

func shortCases() []shortCase {
	rc := func(op wire.Opcode) wire.Opcode { return wire.TransportRC | op }
	only := rc(wire.OpSendOnly)
	one := [][]SGE{{sgeAt(0, 1024, 0)}, {sgeAt(1024, 1024, 0)}, {sgeAt(2048, 1024, 0)}}
	var eight [][]SGE // as many as the receive queue's ring has slots
	for i := range 8 {
		eight = append(eight, []SGE{sgeAt(i*8, 8, 0)})
	}
	return []shortCase{
		{name: "taken", typ: RC, recvs: one, short: 3,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}, {op: only, n: 1024}, {op: only, n: 1, ackReq: true}}},
		{name: "a PSN gap", typ: RC, recvs: one, short: 1,
			pkts: []shortPkt{{op: only, dpsn: 1, n: 64, ackReq: true}, {op: only, dpsn: 2, n: 64}, {op: only, n: 64, ackReq: true}}},
		{name: "a duplicate", typ: RC, recvs: one, short: 1,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}, {op: only, dpsn: -1, n: 64, ackReq: true}}},
		{name: "another source", typ: RC, recvs: one, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true, badPeer: true}}},
		{name: "no payload", typ: RC, recvs: one, short: 1,
			pkts: []shortPkt{{op: only, n: 0, ackReq: true}}},
		{name: "no payload, a bad lkey", typ: RC, recvs: [][]SGE{{sgeAt(0, 1024, shortBadKey)}}, short: 0,
			pkts: []shortPkt{{op: only, n: 0, ackReq: true}}},
		{name: "longer than the path MTU", typ: RC, recvs: [][]SGE{{sgeAt(0, 4096, 0)}}, short: 0,
			pkts: []shortPkt{{op: only, n: 1025, ackReq: true}}},
		{name: "the first SGE too short", typ: RC, recvs: [][]SGE{{sgeAt(0, 16, 0), sgeAt(16, 1000, 0)}}, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "no SGE", typ: RC, recvs: [][]SGE{{}}, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "a bad lkey", typ: RC, recvs: [][]SGE{{sgeAt(0, 1024, shortBadKey)}}, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "outside the region", typ: RC, recvs: [][]SGE{{sgeAt(shortBuf-32, 64, 0)}}, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "no receive", typ: RC, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "the receives used up", typ: RC, recvs: eight, short: 8,
			pkts: []shortPkt{{op: only, n: 8}, {op: only, n: 8}, {op: only, n: 8}, {op: only, n: 8},
				{op: only, n: 8}, {op: only, n: 8}, {op: only, n: 8}, {op: only, n: 8}, {op: only, n: 8, ackReq: true}}},
		{name: "behind READ responses", typ: RC, recvs: one, short: 1,
			pkts: []shortPkt{{op: rc(wire.OpReadRequest), read: true}, {op: only, n: 64, ackReq: true}}},
		{name: "inside a SEND", typ: RC, recvs: one, short: 0,
			pkts: []shortPkt{{op: rc(wire.OpSendFirst), n: 1024}, {op: only, n: 64, ackReq: true}}},
		{name: "inside a WRITE", typ: RC, recvs: one, short: 0,
			pkts: []shortPkt{{op: rc(wire.OpWriteFirst), n: 1024, write: true}, {op: only, n: 64, ackReq: true}}},
		{name: "an SRQ", typ: RC, srq: true, recvs: one, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "in RTR", typ: RC, rtr: true, recvs: one, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "a UC QP", typ: UC, recvs: one, short: 0,
			pkts: []shortPkt{{op: only, n: 64, ackReq: true}}},
		{name: "after an error", typ: RC, recvs: one, short: 0,
			pkts: []shortPkt{{op: only, n: 2000}, {op: only, n: 64, ackReq: true}}},
	}
}

func TestShortSendAsGeneral(t *testing.T) {
	for _, c := range shortCases() {
		t.Run(c.name, func(t *testing.T) {
			short, hits := runShortCase(t, c, false)
			general, ghits := runShortCase(t, c, true)
			if ghits != 0 {
				t.Fatalf("with the short path off it took %d packets", ghits)
			}
			if hits != c.short {
				t.Errorf("the short path took %d packets, want %d", hits, c.short)
			}
			sameOutcome(t, short, general)
		})
	}
}

// sameOutcome fails t when the transcripts of a run with the short paths
// and of one without differ.
func sameOutcome(t testing.TB, short, general string) {
	t.Helper()
	if short != general {
		t.Fatalf("the short path's outcome differs from the general path's:\nshort:\n%s\ngeneral:\n%s", short, general)
	}
}

// counterDelta lists, sorted, the counters of now that moved since start
// (nil: since 0), as name+delta. CNPs' counters are left out: when a CNP
// goes, and whether one is taken, depends on the time since the last, not
// on the path (shortCNP).
func counterDelta(now, start map[string]uint64) []string {
	var d []string
	for k, v := range now {
		if v != start[k] && !strings.HasPrefix(k, "np_cnp_") && !strings.HasPrefix(k, "rp_cnp_") {
			d = append(d, fmt.Sprintf("%s+%d", k, v-start[k]))
		}
	}
	slices.Sort(d)
	return d
}

// shortDevice opens a device of a case's own on a fuzzLink, with the short
// paths or without (general), closed when the test ends.
func shortDevice(t testing.TB, general bool) (d *Device, lk *fuzzLink, local, peer netip.Addr) {
	lk = &fuzzLink{closed: make(chan struct{})}
	local, peer = netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
	d, err := openFuzzDevice(DeviceConfig{Name: "short0", Link: lk, GIDs: []GIDEntry{{GID: local, Type: GIDTypeRoCEv2}}, ActiveMTU: MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.generalOnly = general
	return d, lk, local, peer
}

// shortConnect moves q, a QP of a case's own device, to RTS (or only to RTR),
// connected to QP fuzzPeerQPN at peer, with the local ACK timeout given.
func shortConnect(t testing.TB, q *QP, acc Access, peer netip.Addr, rts bool, timeout uint8) {
	if err := q.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: acc}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	m := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
	if q.typ == RC {
		m |= AttrMaxDestRdAtomic | AttrMinRNRTimer
	}
	if err := q.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024, DestQPN: fuzzPeerQPN, RQPSN: fuzzPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
		AH: AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: peer, HopLimit: 64}}}, m); err != nil {
		t.Fatal(err)
	}
	if !rts {
		return
	}
	m = AttrState | AttrSQPSN
	if q.typ == RC {
		m |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	}
	if err := q.Modify(&QPAttr{State: QPSRTS, SQPSN: 0x800, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}, m); err != nil {
		t.Fatal(err)
	}
}

// runShortCase runs c on a fresh device and returns what it saw, and how
// many packets the short path took.
func runShortCase(t *testing.T, c shortCase, general bool) (string, uint64) {
	d, lk, local, peer := shortDevice(t, general)
	pd, _ := d.AllocPD()
	buf := make([]byte, shortBuf)
	mr, err := pd.RegMRIOVA(buf, 0, mem.LocalWrite|mem.RemoteWrite|mem.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(64)
	init := QPInitAttr{Type: c.typ, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 2}}
	var srq *SRQ
	if c.srq {
		if srq, err = pd.CreateSRQ(SRQAttr{MaxWR: 8, MaxSGE: 2}); err != nil {
			t.Fatal(err)
		}
		init.SRQ = srq
	}
	q, err := pd.CreateQP(init)
	if err != nil {
		t.Fatal(err)
	}
	acc := mem.LocalWrite | mem.RemoteWrite
	if c.typ == RC {
		acc |= mem.RemoteRead
	}
	shortConnect(t, q, acc, peer, !c.rtr, 0)
	for i, sges := range c.recvs {
		s := make([]SGE, len(sges))
		for j, g := range sges {
			s[j] = g
			if g.LKey == 0 {
				s[j].LKey = mr.LKey()
			}
		}
		wr := RecvWR{WRID: uint64(100 + i), SGList: s}
		if srq != nil {
			err = srq.PostRecv(wr)
		} else {
			err = q.PostRecv(wr)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fuzzDrainEvents(d)
	var out txBatch
	out.dev = d
	var b strings.Builder
	for i, sp := range c.pkts {
		payload := make([]byte, sp.n)
		for j := range payload {
			payload[j] = byte(i*31 + j*7 + 1)
		}
		q.mu.Lock()
		psn := q.resp.psn.Add(sp.dpsn)
		q.mu.Unlock()
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: sp.op, PSN: psn, DestQP: q.num, PKey: wire.DefaultPKey, AckReq: sp.ackReq}, Payload: payload}
		switch {
		case sp.write:
			f.Ext.RETH = wire.RETHFields{VA: 2048, RKey: mr.RKey(), DMALength: 2048}
		case sp.read:
			f.Ext.RETH = wire.RETHFields{VA: 4096, RKey: mr.RKey(), DMALength: 96 << 10}
		}
		t := append(f.AppendTransport(nil), 0, 0, 0, 0)
		a := link.Addr{Version: wire.RoCEv2, SrcGID: peer, DstGID: local, UDPSrcPort: 4791, HopLimit: 64}
		if sp.badPeer {
			a.SrcGID = netip.MustParseAddr("::ffff:192.0.2.66")
		}
		pb := append(make([]byte, link.FrameHeadroom), t...)
		pk := link.Packet{Buf: pb, Off: link.FrameHeadroom, Len: len(t), Addr: a}
		func() {
			d.rxMu.Lock()
			defer d.rxMu.Unlock() // a panic must not leave Close waiting
			fuzzPrepare(&out)
			d.dispatch(&pk, &out)
			out.release()
		}()
		fmt.Fprintf(&b, "packet %d %v PSN %v (%d bytes):\n", i, sp.op, psn, sp.n)
		for _, s := range lk.take() {
			fmt.Fprintf(&b, "  sent % x\n", s)
		}
		var wc [8]WC
		n, err := cq.Poll(wc[:])
		for _, w := range wc[:n] {
			w.QPNum = 0 // the same QP in both runs
			fmt.Fprintf(&b, "  completion %+v\n", w)
		}
		if err != nil {
			fmt.Fprintf(&b, "  poll: %v\n", err)
		}
		for d.events.len() > 0 {
			ev, _ := d.events.get(nil)
			fmt.Fprintf(&b, "  event %v %q\n", ev.Type, ev.Detail)
		}
		q.mu.Lock()
		r := &q.resp
		fmt.Fprintf(&b, "  state %v ePSN %v MSN %d msg %v off %d nakSent %v taken %v posted %d\n",
			q.state, r.psn, r.msn, r.msg.kind, r.msg.off, r.nakSent, r.wqe.active, q.rq.n)
		q.mu.Unlock()
		fmt.Fprintf(&b, "  memory %x\n", sha256.Sum256(buf))
		fmt.Fprintf(&b, "  QP counters %v\n  port counters %v\n", q.Counters().Snapshot(), d.Counters().Snapshot())
	}
	q.mu.Lock()
	hits := q.resp.short
	q.mu.Unlock()
	// Keys are drawn afresh for each device.
	return strings.ReplaceAll(b.String(), fmt.Sprintf("key %#x ", mr.LKey()), "key LKEY "), hits
}

// FuzzShortSendDiff runs each input (FuzzRCSequence's packet records, to
// the RC QP and now and then to the others) twice on the fuzz harness's
// device, with the short paths and without (Device.generalOnly), and
// requires the same transcript: packets sent, completions, events, memory,
// the QPs' responder state and the counters.
func FuzzShortSendDiff(f *testing.F) {
	for _, s := range shortDiffSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := harness(t)
		defer func() { h.dev.generalOnly = false }()
		short, _ := shortDiffRun(t, h, data, false)
		general, hits := shortDiffRun(t, h, data, true)
		if hits != 0 {
			t.Fatalf("with the short path off it took %d packets", hits)
		}
		sameOutcome(t, short, general)
	})
}

// shortCNP: the differential runs skip the CNPs an input holds. A CNP
// cuts the QP's rate (DCQCN's reaction point), and the pacer then lets the
// requester go on after a time, so that the same input sends at different
// moments in the two runs; the short paths do not touch either.

// shortDiffSeeds are FuzzShortSendDiff's seeds.
func shortDiffSeeds() (seeds [][]byte) {
	rc := func(op wire.Opcode) wire.Opcode { return wire.TransportRC | op }
	only := rc(wire.OpSendOnly)
	seeds = append(seeds, seq(rcOps,
		rec{op: only, plen: plenSmall, small: 64, flags: 1},
		rec{op: only, plen: plenMTU},
		rec{op: only, dpsn: -1, plen: plenSmall, small: 64, flags: 1},
		rec{op: only, dpsn: 2, plen: plenSmall, small: 8, flags: 1},
		rec{op: only, plen: 0, flags: 1},
		rec{op: only, plen: plenSmall, small: 9, flags: 1 | 16},
		rec{op: only, plen: plenSmall, small: 9, flags: 1}))
	// Receives used up: RNR, then more.
	var recs []rec
	for range fuzzRecvs + 2 {
		recs = append(recs, rec{op: only, plen: plenSmall, small: 32, flags: 1})
	}
	seeds = append(seeds, seq(rcOps, recs...))
	// Inside messages, and a message too long for the path MTU.
	seeds = append(seeds, seq(rcOps,
		rec{op: rc(wire.OpSendFirst), plen: plenMTU},
		rec{op: only, plen: plenSmall, small: 16, flags: 1}))
	seeds = append(seeds, seq(rcOps,
		rec{op: rc(wire.OpWriteFirst), plen: plenMTU, dma: dma2PMTU},
		rec{op: only, plen: plenSmall, small: 16, flags: 1}))
	seeds = append(seeds, seq(rcOps, rec{op: only, plen: 4, flags: 1}, rec{op: only, plen: plenSmall, small: 16, flags: 1}))
	return seeds
}

// TestShortSendDiffTaken: the differential fuzzer's seeds run the short
// path (or comparing would prove nothing).
func TestShortSendDiffTaken(t *testing.T) {
	h := harness(t)
	defer func() { h.dev.generalOnly = false }()
	for i, s := range shortDiffSeeds() {
		if _, hits := shortDiffRun(t, h, s, false); hits == 0 && i < 2 {
			t.Errorf("seed %d: the short path took no packet", i)
		}
	}
}

// shortDiffRun runs one input on the harness, with the short paths or
// without (general), and returns its transcript and the packets the short
// path took. The harness's device takes packets only from this goroutine
// (deliver), so generalOnly may change between runs.
func shortDiffRun(t *testing.T, h *fuzzHarness, data []byte, general bool) (string, uint64) {
	h.dev.generalOnly = general
	h.reset(t)
	base := h.nextWRID
	// Keys that differ from one run to the next: the windows', bound again
	// by reset.
	keys := strings.NewReplacer(fmt.Sprintf("%#x", h.mws[mwType1].RKey()), "MW1", fmt.Sprintf("%#x", h.mws[mwType2].RKey()), "MW2")
	snap := func() []map[string]uint64 {
		s := []map[string]uint64{h.dev.Counters().Snapshot()}
		for _, q := range h.qps {
			s = append(s, q.Counters().Snapshot())
		}
		return s
	}
	start := snap()
	var b strings.Builder
	var pb []byte
	for n := 0; len(data) >= fuzzRecLen && n < fuzzMaxPkts; n++ {
		r := data[:fuzzRecLen]
		data = data[fuzzRecLen:]
		pkt, a, _ := h.build(0, r, pb[:0])
		pb = pkt
		if wire.BTH(pkt).Opcode() == wire.OpcodeCNP {
			continue // shortCNP
		}
		if err := h.deliver(pkt, a); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "packet %d %v PSN %v to QP %#x:\n", n, wire.Opcode(pkt[0]), wire.BTH(pkt).PSN(), wire.BTH(pkt).DestQP())
		for _, s := range h.lk.take() {
			if wire.BTH(s).Opcode() == wire.OpcodeCNP {
				continue // when a CNP goes depends on the time since the last
			}
			fmt.Fprintf(&b, "  sent % x\n", s)
		}
		for _, w := range h.pollWCs(t, "shortDiffRun") {
			if w.Opcode == WCRecv || w.Opcode == WCRecvRDMAWithImm {
				w.WRID -= base
			}
			for i, q := range h.qps {
				if w.QPNum == q.num {
					w.QPNum = uint32(i)
				}
			}
			if w.Flags&WCWithInv != 0 {
				w.ImmData = 0
			}
			fmt.Fprintf(&b, "  completion %s\n", keys.Replace(fmt.Sprintf("%+v", w)))
		}
		for h.dev.events.len() > 0 {
			ev, _ := h.dev.events.get(nil)
			fmt.Fprintf(&b, "  event %v %s\n", ev.Type, keys.Replace(ev.Detail))
		}
		for i, q := range h.qps {
			q.mu.Lock()
			r := &q.resp
			fmt.Fprintf(&b, "  QP %d: %v ePSN %v MSN %d msg %v off %d nakSent %v taken %v posted %d\n",
				i, q.state, r.psn, r.msn, r.msg.kind, r.msg.off, r.nakSent, r.wqe.active, q.rq.n)
			q.mu.Unlock()
		}
		fmt.Fprintf(&b, "  memory %x\n", sha256.Sum256(h.arena))
		for i, s := range snap() {
			fmt.Fprintf(&b, "  counters %d: %v\n", i, counterDelta(s, start[i]))
		}
	}
	h.qps[0].mu.Lock()
	hits := h.qps[0].resp.short
	h.qps[0].mu.Unlock()
	return b.String(), hits
}

// FuzzShortACKDiff is FuzzShortSendDiff for the completer's short path
// (shortACK): FuzzRCResponses' inputs — four WRs posted on the RC QP, then
// responses and timers — run with the short paths and without, and the
// transcripts compared.
func FuzzShortACKDiff(f *testing.F) {
	for _, s := range shortACKSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h := harness(t)
		defer func() { h.dev.generalOnly = false }()
		short, _ := shortACKDiffRun(t, h, data, false, nil)
		general, hits := shortACKDiffRun(t, h, data, true, nil)
		if hits != 0 {
			t.Fatalf("with the short path off it took %d ACKs", hits)
		}
		sameOutcome(t, short, general)
	})
}

// shortACKSeeds are FuzzShortACKDiff's seeds: reqSeed's encoding.
func shortACKSeeds() [][]byte {
	const (
		ack, timer, rnrTimer   = 0, 6, 7
		oldest, nextPSN, wqe   = 0, 1, 2
		synACK, synCredits     = 0, 1
		synRNR, synSeq         = 2, 3
		mixSends, mixWrites    = 0b11_11_11_11, 0
		mixLastRead            = 0b01_00_00_00
		l1, l8, l256, l700     = 0, 1, 3, 6
		wqe1, wqe2, wqe3, last = wqe | 1<<2, wqe | 2<<2, wqe | 3<<2, nextPSN
	)
	return [][]byte{
		// Each WR acknowledged alone, in order: the last one's ACK is
		// the short path's; then a duplicate of it.
		reqSeed(mixSends, [4]uint8{l1, l8, l256, l1},
			reqStep{kind: ack, base: wqe}, reqStep{kind: ack, base: wqe1}, reqStep{kind: ack, base: wqe2},
			reqStep{kind: ack, base: wqe3}, reqStep{kind: ack, base: wqe3}),
		// Multi-packet WRITEs: the last one acknowledged in parts, with
		// credits, then beyond what was sent, then exactly.
		reqSeed(mixWrites, [4]uint8{l700, l1, l8, l700},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: ack, base: wqe3, dpsn: 1, syn: synCredits},
			reqStep{kind: ack, base: last}, reqStep{kind: ack, base: last, dpsn: -1}),
		// A timeout before the last ACK (the window's cut to settle), an
		// RNR NAK and its wait, a sequence error.
		reqSeed(mixSends, [4]uint8{l1, l1, l1, l1},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: timer}, reqStep{kind: ack, base: wqe3}),
		reqSeed(mixSends, [4]uint8{l1, l1, l1, l1},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: ack, base: wqe3, syn: synRNR}, reqStep{kind: ack, base: wqe3},
			reqStep{kind: rnrTimer}, reqStep{kind: ack, base: last, dpsn: -1}),
		reqSeed(mixSends, [4]uint8{l1, l1, l1, l1},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: ack, base: wqe3, syn: synSeq}, reqStep{kind: ack, base: oldest},
			reqStep{kind: ack, base: last, dpsn: -1}),
		// A READ last: an ACK of its last PSN is an implicit NAK.
		reqSeed(mixLastRead, [4]uint8{l1, l1, l1, l700},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: ack, base: last, dpsn: -1}),
		// A WRITE of three packets last, resent after a timeout, the
		// original's ACK arriving while the resend is under way.
		reqSeed(mixWrites, [4]uint8{l1, l1, l1, l700},
			reqStep{kind: ack, base: wqe2}, reqStep{kind: timer}, reqStep{kind: ack, base: wqe3, dpsn: 2}),
	}
}

// TestShortACKDiffTaken: the seeds run the short path.
func TestShortACKDiffTaken(t *testing.T) {
	h := harness(t)
	defer func() { h.dev.generalOnly = false }()
	for i, s := range shortACKSeeds()[:2] {
		if _, hits := shortACKDiffRun(t, h, s, false, nil); hits == 0 {
			t.Errorf("seed %d: the short path took no ACK", i)
		}
	}
}

// shortACKDiffRun runs one of FuzzRCResponses' inputs with the short paths
// or without (general) and returns its transcript and the ACKs shortACK
// took. tweak, if not nil, is called before each step's packet is
// delivered, and may change it or the QP; what it returns is called after.
func shortACKDiffRun(t *testing.T, h *fuzzHarness, data []byte, general bool, tweak func(n int, a *link.Addr) func()) (string, uint64) {
	h.dev.generalOnly = general
	s := h.reqSink(t)
	h.reset(t)
	s.reset()
	q := h.qps[0]
	base := h.nextWRID
	if len(data) < 3 {
		return "", 0
	}
	// A local ACK timeout, so that the timer's arming shows (armed); one
	// of hours, so that it never fires during a run. (RTS to RTS does not
	// take the attribute; reset sets it back to 0.)
	q.mu.Lock()
	q.attr.Timeout = 31
	q.mu.Unlock()
	start := q.Counters().Snapshot()
	var b strings.Builder
	record := func(what string) {
		fmt.Fprintf(&b, "%s:\n", what)
		for _, p := range h.lk.take() {
			if wire.BTH(p).Opcode() != wire.OpcodeCNP {
				fmt.Fprintf(&b, "  sent % x\n", p)
			}
		}
		for _, w := range h.pollWCs(t, what) {
			if w.Opcode == WCRecv {
				w.WRID -= base // reset posts receives with new wr_ids
			}
			w.QPNum = 0
			fmt.Fprintf(&b, "  completion %+v\n", w)
		}
		for h.dev.events.len() > 0 {
			ev, _ := h.dev.events.get(nil)
			fmt.Fprintf(&b, "  event %v %s\n", ev.Type, ev.Detail)
		}
		q.mu.Lock()
		c := &q.comp
		fmt.Fprintf(&b, "  window %d undo %d deferred %v\n", q.req.win.size(), q.req.win.undo, q.reqDeferred)
		fmt.Fprintf(&b, "  %v SQ %d %d %d req PSN %v off %d maxSent %v comp PSN %v retry %d rnr %d timeouts %d seqNAKs %d rnrNAKs %d armed %v rnrWait %v retrying %v heard %v\n",
			q.state, q.sq.head, q.sq.cur, q.sq.tail, q.req.psn, q.req.off, q.req.maxSent, c.psn, c.retryLeft, c.rnrLeft,
			c.timeouts, c.seqNAKs, c.rnrNAKs, c.timerArmed, c.rnrWait, c.retrying, c.heard)
		q.mu.Unlock()
		fmt.Fprintf(&b, "  memory %x\n", sha256.Sum256(s.buf))
		fmt.Fprintf(&b, "  counters %v\n", counterDelta(q.Counters().Snapshot(), start))
	}
	var wrs [reqWRs]reqWR
	h.reqPost(t, s, data[0], uint16(data[1])|uint16(data[2])<<8, &wrs)
	record("posted")
	data = data[3:]
	var pb []byte
	for n := 0; len(data) >= reqRecLen && n < reqMaxSteps; n++ {
		r := data[:reqRecLen]
		data = data[reqRecLen:]
		pkt, a, ok := h.reqBuild(r, s, &wrs, pb[:0])
		switch {
		case ok && wire.BTH(pkt).Opcode() == wire.OpcodeCNP:
			continue // shortCNP
		case ok:
			pb = pkt
			after := func() {}
			if tweak != nil {
				after = tweak(n, &a)
			}
			if err := h.deliver(pkt, a); err != nil {
				t.Fatal(err)
			}
			after()
		case r[0]&1 == 0:
			fuzzFireRetrans(q)
		default:
			fuzzFireRNR(q)
		}
		if err := fuzzSettle(h.dev); err != nil {
			t.Fatal(err)
		}
		record(fmt.Sprintf("step %d % x", n, r))
	}
	q.mu.Lock()
	hits := q.comp.short
	q.mu.Unlock()
	return b.String(), hits
}

// TestShortACK: the checks of shortACK the fuzzer's responses do not
// reach. Each case runs the first seed (four SENDs, each acknowledged
// alone) with a change before its last ACK, with the short paths and
// without: the short path must not take that ACK, and both must end alike.
func TestShortACK(t *testing.T) {
	h := harness(t)
	defer func() { h.dev.generalOnly = false }()
	q := h.qps[0]
	seed := shortACKSeeds()[0]
	const lastACK = 3 // the step of the last WQE's ACK
	for _, c := range []struct {
		name  string
		tweak func(a *link.Addr) func()
	}{
		{"another source", func(a *link.Addr) func() {
			a.SrcGID = netip.MustParseAddr("::ffff:192.0.2.66")
			return func() {}
		}},
		{"SQD", func(*link.Addr) func() {
			if err := q.Modify(&QPAttr{State: QPSSQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}},
		{"a resend not yet begun", func(*link.Addr) func() {
			// A go-back-N retry that the window or the pacer stopped
			// before the WQE's first packet: its original ACK completes it.
			q.mu.Lock()
			q.rewind()
			q.mu.Unlock()
			return func() {}
		}},
		{"another goroutine's batch", func(*link.Addr) func() {
			q.mu.Lock()
			q.reqBatch = &txBatch{}
			q.mu.Unlock()
			return func() {
				q.mu.Lock()
				q.reqBatch = nil
				q.mu.Unlock()
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tweak := func(n int, a *link.Addr) func() {
				if n != lastACK {
					return func() {}
				}
				q.mu.Lock()
				before := q.comp.short
				q.mu.Unlock()
				after := c.tweak(a)
				return func() {
					after()
					q.mu.Lock()
					defer q.mu.Unlock()
					if q.comp.short != before {
						t.Errorf("the short path took the ACK")
					}
				}
			}
			short, _ := shortACKDiffRun(t, h, seed, false, tweak)
			general, _ := shortACKDiffRun(t, h, seed, true, tweak)
			sameOutcome(t, short, general)
		})
	}
}
