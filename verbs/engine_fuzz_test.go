package verbs

// A stateful fuzzer of a live device: each input is a sequence of packets
// (any opcode, PSNs around the expected one, keys and addresses drawn from
// the QP's own regions, another PD's, a deregistered one's, memory
// windows' and random ones) into an RC, UC or UD QP in RTS with receives posted. After every
// packet it checks what no peer may change:
//
//   - no panic;
//   - no byte changes but in a region that grants remote write (in the
//     QP's PD), in a memory window that grants it (to that QP, for a
//     type 2 window) or in a receive of that QP that has not completed;
//   - no byte of a receive's buffer changes after the receive completed,
//     and no receive completes twice;
//   - no byte of memory a peer may not read (regions without
//     REMOTE_READ, other PDs', deregistered ones, memory between regions)
//     leaves in any packet the device sends;
//   - the device's state stays bounded (fuzzBounded).
//
// The device runs without its scheduler's goroutine: the harness hands it
// each packet on the fuzzing goroutine, as the receive goroutine would,
// and then serves the scheduler's turns itself, so an input always runs
// the same way. FuzzReceive (package verbs) sends single random datagrams;
// sequences are what matter: it never found the UC crash the seeds here
// hold.

import (
	"bytes"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// fuzzLink is a link that records what the device sends and never
// delivers anything (the harness calls dispatch itself).
type fuzzLink struct {
	mu     sync.Mutex
	sent   [][]byte // guarded by mu
	closed chan struct{}
	stats  link.Stats
}

func (l *fuzzLink) Send(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	for i := range pkts {
		l.sent = append(l.sent, bytes.Clone(pkts[i].Transport()))
	}
	l.mu.Unlock()
	return len(pkts), nil
}

func (l *fuzzLink) Recv([]link.Packet) (int, error) {
	<-l.closed
	return 0, net.ErrClosed
}

func (l *fuzzLink) BatchSize() int     { return 64 }
func (l *fuzzLink) Headroom() int      { return link.FrameHeadroom }
func (l *fuzzLink) MTU() int           { return 4096 + 64 }
func (l *fuzzLink) Stats() *link.Stats { return &l.stats }
func (l *fuzzLink) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *fuzzLink) take() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sent
	l.sent = nil
	return s
}

// Regions of the arena, by role.
const (
	regAll   = iota // every remote right, the QPs' PD
	regRO           // REMOTE_READ only
	regWO           // LOCAL_WRITE|REMOTE_WRITE
	regLW           // LOCAL_WRITE|MW_BIND: writable remotely only through the windows (fuzzWindows)
	regRecv         // the receives' buffers, LOCAL_WRITE
	regOther        // every right, another PD
	regStale        // deregistered
	numRegs
)

var regSizes = [numRegs]int{1024, 512, 512, 512, 3 * fuzzRecvs * fuzzRecvLen, 512, 512}

const (
	fuzzGuard   = 64
	fuzzIOVA    = 0x7f00_0000_0000
	fuzzRecvs   = 4   // receives posted on each QP
	fuzzRecvLen = 512 // bytes each
	fuzzPeerQPN = 0x99
	fuzzPSN     = 0x400
	fuzzQKey    = 0x11111111
	fuzzMaxPkts = 24 // packets per input
)

// The memory windows, all on regLW and granting REMOTE_WRITE only (the
// region is secret: what a READ or an atomic's result would send must not
// be): a type 1 window on its first half, a type 2 window bound through
// the RC QP on its second half, a type 2 window never bound and a
// deallocated type 1 window. reset binds the first two again.
const (
	mwType1 = iota
	mwType2
	mwFree
	mwGone
	numMWs
	mwHalf = 256 // regLW bytes per bound window
)

type fuzzRegion struct {
	off, n int
	mr     *MR
	key    uint32
	secret bool // a peer may not read it
}

type fuzzRecv struct {
	wrID     uint64
	off, n   int
	done     bool
	snapshot []byte
}

// fuzzRead is a READ the harness saw the device answer as a new request.
type fuzzRead struct {
	first, last wire.PSN
	rkey        uint32
	va, n       uint64
}

// fuzzHarness is a live device and its memory, kept across inputs.
type fuzzHarness struct {
	dev      *Device
	noRecv   bool // the packet just delivered must complete no receive
	lk       *fuzzLink
	arena    []byte
	pristine []byte
	regs     [numRegs]fuzzRegion
	mws      [numMWs]*MW
	pds      [2]*PD
	cq       *CQ
	qps      [3]*QP // RC, UC, UD
	local    netip.Addr
	peer     netip.Addr
	secret   [16]byte
	recvs    [3][]fuzzRecv
	nextWRID uint64
	reads    []fuzzRead // the READs a new request made the RC QP answer, this input
	before   []byte
	pkt      wire.Packet
	out      txBatch
	sink     *reqSink // FuzzRCResponses' local memory, made on first use
}

var (
	fuzzOnce sync.Once
	fuzzH    *fuzzHarness
	fuzzErr  error
)

func harness(t testing.TB) *fuzzHarness {
	fuzzOnce.Do(func() { fuzzH, fuzzErr = newFuzzHarness() })
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzH
}

func newFuzzHarness() (*fuzzHarness, error) {
	h := &fuzzHarness{lk: &fuzzLink{closed: make(chan struct{})},
		local: netip.MustParseAddr("::ffff:192.0.2.1"), peer: netip.MustParseAddr("::ffff:192.0.2.2")}
	crand.Read(h.secret[:])
	var err error
	h.dev, err = openFuzzDevice(DeviceConfig{Name: "fuzz0", Link: h.lk, GIDs: []GIDEntry{{GID: h.local, Type: GIDTypeRoCEv2}}, ActiveMTU: MTU1024})
	if err != nil {
		return nil, err
	}
	h.out.dev = h.dev
	// DCQCN on, both halves, so that CE marks make CNPs and CNPs (any
	// opcode may be drawn, 0x81 among them) reach the reaction point.
	ecn := DefaultECNConfig()
	ecn.NPEnable, ecn.RPEnable = AllPriorities, AllPriorities
	if err := h.dev.SetECN(1, ecn); err != nil {
		return nil, err
	}
	n := fuzzGuard
	for i := range h.regs {
		h.regs[i] = fuzzRegion{off: n, n: regSizes[i], secret: i != regAll && i != regRO}
		n += regSizes[i] + fuzzGuard
	}
	h.arena = make([]byte, n)
	// Memory a peer may read holds a pattern; the rest the secret.
	for i := range h.arena {
		h.arena[i] = h.secret[i%len(h.secret)]
	}
	for _, r := range []int{regAll, regRO} {
		g := h.regs[r]
		for i := range g.n {
			h.arena[g.off+i] = byte(i*7 + r)
		}
	}
	h.pristine = bytes.Clone(h.arena)
	h.before = make([]byte, len(h.arena))
	for i := range h.pds {
		if h.pds[i], err = h.dev.AllocPD(); err != nil {
			return nil, err
		}
	}
	all := mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic | mem.FlushGlobal | mem.FlushPersistent
	access := [numRegs]Access{all, mem.RemoteRead, mem.LocalWrite | mem.RemoteWrite, mem.LocalWrite | mem.MWBind, mem.LocalWrite, all, all}
	for i := range h.regs {
		g := &h.regs[i]
		pd := h.pds[0]
		if i == regOther {
			pd = h.pds[1]
		}
		if g.mr, err = pd.RegMRIOVA(h.arena[g.off:g.off+g.n], fuzzIOVA+uint64(g.off), access[i]); err != nil {
			return nil, err
		}
		// The lkey: the rkey of a region with a remote right, and for one
		// without (whose rkey is 0, as rxe's) the number a peer would
		// guess, which must name nothing remotely.
		g.key = g.mr.LKey()
	}
	h.regs[regStale].mr.Dereg()
	for i, typ := range [numMWs]MWType{MWType1, MWType2, MWType2, MWType1} {
		if h.mws[i], err = h.pds[0].AllocMW(typ); err != nil {
			return nil, err
		}
	}
	h.mws[mwGone].Dealloc()
	if h.cq, err = h.dev.CreateCQ(4096); err != nil {
		return nil, err
	}
	for i, typ := range []QPType{RC, UC, UD} {
		if h.qps[i], err = h.pds[0].CreateQP(QPInitAttr{Type: typ, SendCQ: h.cq, RecvCQ: h.cq,
			Cap: QPCap{MaxSendWR: 4, MaxRecvWR: fuzzRecvs, MaxSendSGE: 1, MaxRecvSGE: 2}}); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// reset brings the QPs back to RTS with fresh receives and the memory to
// its first contents.
func (h *fuzzHarness) reset(t testing.TB) {
	copy(h.arena, h.pristine)
	h.reads = h.reads[:0]
	for _, q := range h.qps {
		if err := q.Modify(&QPAttr{State: QPSReset}, AttrState); err != nil {
			t.Fatal(err)
		}
	}
	var wc [64]WC
	for {
		n, _ := h.cq.Poll(wc[:])
		if n == 0 {
			break
		}
	}
	fuzzDrainEvents(h.dev)
	h.lk.take()
	for i, q := range h.qps {
		var err error
		switch q.typ {
		case UD:
			if err = q.Modify(&QPAttr{State: QPSInit, PortNum: 1, QKey: fuzzQKey}, AttrState|AttrPKeyIndex|AttrPort|AttrQKey); err == nil {
				if err = q.Modify(&QPAttr{State: QPSRTR}, AttrState); err == nil {
					err = q.Modify(&QPAttr{State: QPSRTS, SQPSN: 1}, AttrState|AttrSQPSN)
				}
			}
		default:
			acc := mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead | mem.RemoteAtomic | mem.FlushGlobal | mem.FlushPersistent
			if q.typ == UC {
				acc = mem.LocalWrite | mem.RemoteWrite
			}
			if err = q.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: acc}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
				break
			}
			rtr := &QPAttr{State: QPSRTR, PathMTU: MTU256, DestQPN: fuzzPeerQPN, RQPSN: fuzzPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
				AH: AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: h.peer, HopLimit: 64}}}
			m := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN
			if q.typ == RC {
				m |= AttrMaxDestRdAtomic | AttrMinRNRTimer
			}
			if err = q.Modify(rtr, m); err != nil {
				break
			}
			rts := &QPAttr{State: QPSRTS, SQPSN: 0x800, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}
			m = AttrState | AttrSQPSN
			if q.typ == RC {
				m |= AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
			}
			err = q.Modify(rts, m)
		}
		if err != nil {
			t.Fatal(err)
		}
		h.recvs[i] = h.recvs[i][:0]
		rg := h.regs[regRecv]
		for j := range fuzzRecvs {
			h.nextWRID++
			off := rg.off + (i*fuzzRecvs+j)*fuzzRecvLen
			r := fuzzRecv{wrID: h.nextWRID, off: off, n: fuzzRecvLen}
			// Two SGEs, so a message crosses from one to the next.
			half := uint64(fuzzRecvLen / 2)
			iova := fuzzIOVA + uint64(off)
			if err := q.PostRecv(RecvWR{WRID: r.wrID, SGList: []SGE{{Addr: iova, Length: uint32(half), LKey: rg.key},
				{Addr: iova + half, Length: uint32(half), LKey: rg.key}}}); err != nil {
				t.Fatal(err)
			}
			h.recvs[i] = append(h.recvs[i], r)
		}
	}
	// The UD QP is in fuzzMGID's group (again: a reset QP stays attached,
	// as in rxe, and attaching twice is allowed).
	if err := h.qps[fuzzUD].AttachMcast(fuzzMGID, 0); err != nil {
		t.Fatal(err)
	}
	h.bindWindows(t)
}

// fuzzUD is the UD QP's index among the harness's QPs. fuzzMGID is the
// group it joins; fuzzOtherMGID one that no QP joins (the device drops
// what is sent to it and counts rcvd_bad_qp).
const fuzzUD = 2

var (
	fuzzMGID      = netip.MustParseAddr("::ffff:239.1.2.3")
	fuzzOtherMGID = netip.MustParseAddr("::ffff:239.9.9.9")
)

// bindWindows binds the type 1 window again (a new key) and a fresh type 2
// window through the RC QP: an input may have invalidated the type 2 one
// (SEND_WITH_INVALIDATE) or sent the QP to ERR before.
func (h *fuzzHarness) bindWindows(t testing.TB) {
	lw := h.regs[regLW]
	iova := fuzzIOVA + uint64(lw.off)
	rc := h.qps[0]
	if err := rc.BindMW(h.mws[mwType1], MWBind{BindInfo: MWBindInfo{MR: lw.mr, Addr: iova, Length: mwHalf, Access: mem.RemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	h.mws[mwType2].Dealloc()
	var err error
	if h.mws[mwType2], err = h.pds[0].AllocMW(MWType2); err != nil {
		t.Fatal(err)
	}
	mw := h.mws[mwType2]
	if err := rc.PostSend(SendWR{Opcode: WRBindMW, MW: mw, RKey: IncRKey(mw.RKey()),
		BindInfo: MWBindInfo{MR: lw.mr, Addr: iova + mwHalf, Length: mwHalf, Access: mem.RemoteWrite}}); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{mwType1, mwType2} {
		if _, _, ok := h.dev.mem.Bounds(h.mws[i].RKey(), false); !ok {
			t.Fatalf("window %d (rkey %#x) did not bind", i, h.mws[i].RKey())
		}
	}
}

// fuzzSpec is one packet of an input: a fixed record of fuzzRecLen bytes.
const fuzzRecLen = 24

var (
	rcOps = opsOf(wire.TransportRC)
	ucOps = opsOf(wire.TransportUC)
	udOps = opsOf(wire.TransportUD)
)

func opsOf(t wire.Opcode) []wire.Opcode {
	var ops []wire.Opcode
	for c := 0; c < 256; c++ {
		if op := wire.Opcode(c); op.Transport() == t && op.Info().Valid() {
			ops = append(ops, op)
		}
	}
	return ops
}

// build makes the packet a record describes, for QP qi of the harness.
func (h *fuzzHarness) build(qi int, r []byte, b []byte) ([]byte, link.Addr, int) {
	q := h.qps[qi]
	ops := [][]wire.Opcode{rcOps, ucOps, udOps}[qi]
	op := ops[int(r[0])%len(ops)]
	if r[0]&0x80 != 0 {
		op = wire.Opcode(r[1]) // any opcode at all
	}
	flags := r[3]
	psn := q.resp.psn.Add(int(int8(r[2])))
	if flags&0x40 != 0 {
		psn = wire.PSN(uint32(r[20]) | uint32(r[21])<<8 | uint32(r[22])<<16)
	}
	rnd64 := binary.LittleEndian.Uint64(r[8:16])
	rnd32 := binary.LittleEndian.Uint32(r[16:20])
	// The key: the QP's regions', another PD's, a deregistered one's,
	// one a generation off, random, or a memory window's (on regLW).
	var reg *fuzzRegion
	var key uint32
	switch ks := r[4] % (10 + numMWs); {
	case ks >= 10:
		reg = &h.regs[regLW]
		key = h.mws[ks-10].RKey()
	case ks < numRegs:
		reg = &h.regs[ks]
		key = reg.key
	case ks == 7:
		reg = &h.regs[regAll]
		key = reg.key ^ uint32(1+r[6]%255)
	case ks == 8:
		reg = &h.regs[regRO]
		key = reg.key ^ 0x80
	default:
		reg = &h.regs[regAll]
		key = rnd32
	}
	base := fuzzIOVA + uint64(reg.off)
	small := uint64(r[6])
	var va uint64
	switch r[5] % 8 {
	case 0:
		va = base
	case 1:
		va = base + small
	case 2:
		va = base + uint64(reg.n) - small
	case 3:
		va = base + uint64(reg.n)
	case 4:
		va = base - 1 - small
	case 5:
		va = rnd64
	case 6:
		va = base + small*8
	default:
		va = 0
	}
	pmtu := uint64(max(q.pmtu, 256))
	var dma uint64
	switch r[7] % 8 {
	case 0:
		dma = 0
	case 1:
		dma = small
	case 2:
		dma = pmtu
	case 3:
		dma = pmtu + 1
	case 4:
		dma = uint64(reg.n)
	case 5:
		dma = 1 << 31
	case 6:
		dma = 0xFFFFFFFF
	default:
		dma = 2 * pmtu
	}
	var plen int
	switch r[23] % 8 {
	case 0:
		plen = 0
	case 1:
		plen = 1
	case 2:
		plen = int(pmtu) - 1
	case 3:
		plen = int(pmtu)
	case 4:
		plen = int(pmtu) + 1
	case 5:
		plen = int(small)
	case 6:
		plen = 8
	default:
		plen = int(small) * 16
	}
	payload := make([]byte, plen)
	for i := range payload {
		payload[i] = byte(i*13) ^ r[16]
	}
	dest, dqi := q.num, qi
	mcast := flags&0x08 != 0 && r[6]&0x04 != 0
	switch {
	case mcast:
		// The multicast QPN (IBTA §10.5.2.1): to the group the UD QP
		// joined, or (r[6]&0x08) to a group no QP joined.
		dest, dqi = MulticastQPN, fuzzUD
	case flags&0x08 != 0:
		dqi = (qi + 1 + int(r[6]&1)) % 3
		dest = h.qps[dqi].num
	}
	pkey := uint16(wire.DefaultPKey)
	if flags&0x04 != 0 {
		pkey = 0x7001
	}
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PSN: psn, DestQP: dest, PKey: pkey, AckReq: flags&1 != 0, SolicitedEvent: flags&2 != 0},
		Payload: payload}
	x := &f.Ext
	x.RETH = wire.RETHFields{VA: va, RKey: key, DMALength: uint32(dma)}
	x.AtomicETH = wire.AtomicETHFields{VA: va, RKey: key, SwapAdd: rnd64, Compare: uint64(rnd32)}
	x.ImmDt, x.IETH = rnd32, key
	x.FETH = wire.FETHWord(r[6]&1, 1+r[6]>>1&1)
	x.AETH = wire.AETHFields{Syndrome: wire.Syndrome(r[16]), MSN: rnd32 & wire.PSNMask}
	x.DETH = wire.DETHFields{QKey: fuzzQKey, SrcQP: 5}
	if flags&0x20 != 0 {
		x.DETH.QKey = rnd32
	}
	x.AtomicAck = rnd64
	b = f.AppendTransport(b)
	b = append(b, 0, 0, 0, 0) // the ICRC: links check it, the engine does not
	a := link.Addr{Version: wire.RoCEv2, SrcGID: h.peer, DstGID: h.local, UDPSrcPort: 4791, HopLimit: 64}
	if flags&0x10 != 0 {
		a.SrcGID = netip.MustParseAddr("::ffff:192.0.2.66")
	}
	if flags&0x80 != 0 {
		a.TrafficClass = ECNCE // a switch marked it: the device's DCQCN notification point answers
	}
	if mcast {
		a.DstGID = fuzzMGID
		if r[6]&0x08 != 0 {
			a.DstGID = fuzzOtherMGID
		}
	}
	return b, a, dqi
}

// deliver hands the device one packet as its receive goroutine would, and
// serves the scheduler's turns.
func (h *fuzzHarness) deliver(b []byte, a link.Addr) error {
	buf := make([]byte, link.FrameHeadroom, link.FrameHeadroom+len(b))
	buf = append(buf, b...)
	pk := link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: len(b), Addr: a}
	func() {
		h.dev.rxMu.Lock()
		defer h.dev.rxMu.Unlock() // a panic must leave the device usable for the fuzzer's next run
		fuzzPrepare(&h.out)
		h.dev.dispatch(&pk, &h.out)
		h.out.release()
	}()
	return fuzzSettle(h.dev)
}

// check verifies the invariants after a packet to QP qi; sent is what the
// device sent meanwhile.
func (h *fuzzHarness) check(t *testing.T, qi int, sent [][]byte, what string) {
	h.checkWCs(t, qi, h.pollWCs(t, what), sent, what)
}

// pollWCs empties the CQ.
func (h *fuzzHarness) pollWCs(t *testing.T, what string) []WC {
	var wcs []WC
	var wc [64]WC
	for {
		n, err := h.cq.Poll(wc[:])
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n == 0 {
			return wcs
		}
		wcs = append(wcs, wc[:n]...)
	}
}

// checkWCs is check with the completions already polled.
func (h *fuzzHarness) checkWCs(t *testing.T, qi int, wcs []WC, sent [][]byte, what string) {
	// Completions: each receive at most once, and its buffer frozen.
	var completed []*fuzzRecv
	for _, c := range wcs {
		if c.Opcode != WCRecv && c.Opcode != WCRecvRDMAWithImm {
			continue
		}
		if h.noRecv {
			t.Fatalf("%s: a datagram to a multicast group no QP joined completed a receive: %v", what, &c)
		}
		found := false
		for i := range h.recvs {
			for j := range h.recvs[i] {
				r := &h.recvs[i][j]
				if r.wrID != c.WRID {
					continue
				}
				found = true
				if r.done {
					t.Fatalf("%s: receive wr_id %d completed twice (%v)", what, c.WRID, &c)
				}
				if c.QPNum != h.qps[i].num {
					t.Fatalf("%s: receive wr_id %d of QP %#x completed on QP %#x", what, c.WRID, h.qps[i].num, c.QPNum)
				}
				completed = append(completed, r)
			}
		}
		if !found {
			t.Fatalf("%s: completion of a receive never posted: %v", what, &c)
		}
	}
	// Memory: what changed since the packet arrived.
	if !bytes.Equal(h.before, h.arena) {
		for i := range h.arena {
			if h.arena[i] == h.before[i] || h.mayChange(qi, i) {
				continue
			}
			t.Fatalf("%s: arena byte %d (%s) changed from %#x to %#x", what, i, h.where(i), h.before[i], h.arena[i])
		}
	}
	for _, r := range completed {
		if r.done {
			t.Fatalf("%s: receive wr_id %d completed twice", what, r.wrID)
		}
		r.done = true
		r.snapshot = bytes.Clone(h.arena[r.off : r.off+r.n])
	}
	for i := range h.recvs {
		for _, r := range h.recvs[i] {
			if r.done && !bytes.Equal(r.snapshot, h.arena[r.off:r.off+r.n]) {
				t.Fatalf("%s: the buffer of receive wr_id %d changed after it completed", what, r.wrID)
			}
		}
	}
	// No region stops working: a peer may not invalidate one.
	for k, g := range h.regs {
		if _, _, ok := h.dev.mem.Bounds(g.key, true); !ok && k != regStale {
			t.Fatalf("%s: region %d (key %#x) was invalidated", what, k, g.key)
		}
	}
	// What left: never 8 bytes of memory a peer may not read.
	for _, p := range sent {
		for k := 0; k < len(h.secret); k++ {
			var w [8]byte
			for j := range w {
				w[j] = h.secret[(k+j)%len(h.secret)]
			}
			if bytes.Contains(p, w[:]) {
				t.Fatalf("%s: the device sent memory a peer may not read: % x", what, p)
			}
		}
	}
	if err := fuzzBounded(h.dev); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// mayChange reports whether a packet to QP qi may change arena byte i: in
// a region of the QPs' PD that grants remote write, or in a receive of qi
// that has not completed.
func (h *fuzzHarness) mayChange(qi, i int) bool {
	for _, r := range []int{regAll, regWO} {
		if g := h.regs[r]; i >= g.off && i < g.off+g.n && h.qps[qi].typ != UD {
			return true
		}
	}
	// The windows: the type 1 window's half of regLW to RC and UC, the
	// type 2 window's half to the RC QP it was bound through.
	if g := h.regs[regLW]; i >= g.off && i < g.off+2*mwHalf && h.qps[qi].typ != UD {
		if i < g.off+mwHalf || qi == 0 {
			return true
		}
	}
	for _, r := range h.recvs[qi] {
		if i >= r.off && i < r.off+r.n && !r.done {
			return true
		}
	}
	return false
}

func (h *fuzzHarness) where(i int) string {
	for k, g := range h.regs {
		if i >= g.off && i < g.off+g.n {
			return fmt.Sprintf("region %d offset %d", k, i-g.off)
		}
	}
	return "between regions"
}

// checkRead holds the device to the rule for duplicate READs: one draws
// responses only if it repeats a READ the QP answered as a new request
// (the same rkey, within its PSNs and its range). Without it, a READ
// behind the expected PSN was an rkey oracle: executed whatever its key.
func (h *fuzzHarness) checkRead(t *testing.T, q *QP, b []byte, a link.Addr, epsn wire.PSN, sent [][]byte, what string) {
	var p wire.Packet
	if q.typ != RC || p.ParseTransport(b, wire.RoCEv2) != nil || p.Opcode() != wire.TransportRC|wire.OpReadRequest ||
		p.BTH().PKey()&0x7FFF != wire.DefaultPKey&0x7FFF || a.SrcGID != h.peer {
		return
	}
	responses := 0
	for _, s := range sent {
		if op := wire.BTH(s).Opcode(); op >= wire.TransportRC|wire.OpReadResponseFirst && op <= wire.TransportRC|wire.OpReadResponseOnly {
			responses++
		}
	}
	if responses == 0 {
		return
	}
	psn, r := p.BTH().PSN(), p.RETH()
	va, n := r.VA(), uint64(r.DMALength())
	if psn == epsn {
		pmtu := uint64(q.pmtu)
		h.reads = append(h.reads, fuzzRead{first: psn, last: psn.Add(int(max(1, (n+pmtu-1)/pmtu)) - 1), rkey: r.RKey(), va: va, n: n})
		return
	}
	for _, x := range h.reads {
		if x.rkey == r.RKey() && psn.Diff(x.first) >= 0 && psn.Diff(x.last) <= 0 && va >= x.va && n <= x.n && va-x.va <= x.n-n {
			return
		}
	}
	t.Fatalf("%s: a duplicate READ (rkey %#x addr %#x len %d) that repeats no READ executed drew %d responses", what, r.RKey(), va, n, responses)
}

// fuzzSequence runs one input against QP qi.
func fuzzSequence(t *testing.T, qi int, data []byte) {
	h := harness(t)
	h.reset(t)
	var b []byte
	for n := 0; len(data) >= fuzzRecLen && n < fuzzMaxPkts; n++ {
		r := data[:fuzzRecLen]
		data = data[fuzzRecLen:]
		var a link.Addr
		var dqi int
		b, a, dqi = h.build(qi, r, b[:0])
		copy(h.before, h.arena)
		q := h.qps[dqi]
		epsn := q.resp.psn
		err := h.deliver(b, a)
		what := fmt.Sprintf("packet %d (%v PSN %v to QP %#x)", n, wire.Opcode(b[0]), wire.BTH(b).PSN(), wire.BTH(b).DestQP())
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		sent := h.lk.take()
		h.checkRead(t, q, b, a, epsn, sent, what)
		// A datagram to a group no QP joined reaches no QP.
		h.noRecv = wire.BTH(b).DestQP() == MulticastQPN && a.DstGID == fuzzOtherMGID
		h.check(t, dqi, sent, what)
	}
}

// rec encodes one packet of a seed: op is an opcode of the QP's transport.
type rec struct {
	op      wire.Opcode
	dpsn    int8  // PSN relative to the expected one
	flags   uint8 // 1 AckReq, 2 SE, 4 bad P_Key, 8 another QP, 16 another source, 32 bad Q_Key, 64 absolute PSN
	key     uint8 // 0..6 regions (regAll...), 7 a generation off, 8 RO's key flipped, 9 random, 10.. windows (10+mwType1...)
	va      uint8 // 0 start, 1 +small, 2 end-small, 3 end, 4 below, 5 random, 6 +8*small, 7 zero
	small   uint8
	dma     uint8 // 0 0, 1 small, 2 pmtu, 3 pmtu+1, 4 region size, 5 2^31, 6 2^32-1, 7 2*pmtu
	plen    uint8 // 0 0, 1 1, 2 pmtu-1, 3 pmtu, 4 pmtu+1, 5 small, 6 8, 7 16*small
	rnd64   uint64
	rnd32   uint32
	raw     bool // op is any opcode byte
	absPSN  uint32
	payload uint8
}

func (r rec) bytes(ops []wire.Opcode) []byte {
	b := make([]byte, fuzzRecLen)
	if r.raw {
		b[0], b[1] = 0x80, byte(r.op)
	} else {
		for i, o := range ops {
			if o == r.op {
				b[0] = byte(i)
			}
		}
	}
	b[2], b[3], b[4], b[5], b[6], b[7] = byte(r.dpsn), r.flags, r.key, r.va, r.small, r.dma
	binary.LittleEndian.PutUint64(b[8:], r.rnd64)
	binary.LittleEndian.PutUint32(b[16:], r.rnd32)
	b[20], b[21], b[22] = byte(r.absPSN), byte(r.absPSN>>8), byte(r.absPSN>>16)
	b[23] = r.plen
	return b
}

func seq(ops []wire.Opcode, rs ...rec) []byte {
	var b []byte
	for _, r := range rs {
		b = append(b, r.bytes(ops)...)
	}
	return b
}

const (
	plenMTU   = 3
	plenSmall = 5
	dmaPMTU   = 2
	dma2PMTU  = 7
)

// FuzzUCSequence: packet sequences into a UC QP.
func FuzzUCSequence(f *testing.F) {
	uc := func(op wire.Opcode) wire.Opcode { return wire.TransportUC | op }
	// The remote crash: a completed two-packet RDMA WRITE, then SEND_FIRST
	// and WRITE_MIDDLE.
	f.Add(seq(ucOps,
		rec{op: uc(wire.OpWriteFirst), plen: plenMTU, dma: dma2PMTU},
		rec{op: uc(wire.OpWriteLast), dpsn: 0, plen: plenMTU},
		rec{op: uc(wire.OpSendFirst), plen: plenMTU},
		rec{op: uc(wire.OpWriteMiddle), plen: plenMTU},
		rec{op: uc(wire.OpWriteLast), plen: plenSmall, small: 10}))
	// The write into a completed receive: SEND_ONLY completes it, then
	// WRITE_FIRST of DMA length 0 and SEND_LAST.
	f.Add(seq(ucOps,
		rec{op: uc(wire.OpSendOnly), plen: plenSmall, small: 100},
		rec{op: uc(wire.OpWriteFirst), plen: 0, dma: 0},
		rec{op: uc(wire.OpSendLast), plen: plenSmall, small: 200},
		rec{op: uc(wire.OpWriteFirst), plen: plenMTU, dma: 0},
		rec{op: uc(wire.OpSendLast), plen: plenSmall, small: 200}))
	// Bad rkeys, a gap, a message of the wrong kind.
	f.Add(seq(ucOps,
		rec{op: uc(wire.OpWriteOnly), key: 7, plen: plenSmall, small: 16, dma: 1},
		rec{op: uc(wire.OpWriteOnly), key: regOther, plen: plenSmall, small: 16, dma: 1},
		rec{op: uc(wire.OpSendFirst), dpsn: 3, plen: plenMTU},
		rec{op: uc(wire.OpSendMiddle), plen: plenMTU},
		rec{op: uc(wire.OpWriteLastWithImmediate), plen: plenSmall, small: 1}))
	// Memory windows from the UC QP: the type 1 window is usable, the
	// type 2 one (bound through the RC QP) is not.
	f.Add(seq(ucOps,
		rec{op: uc(wire.OpWriteOnly), key: 10 + mwType1, plen: plenSmall, small: 64, dma: 1},
		rec{op: uc(wire.OpWriteOnly), key: 10 + mwType2, va: 6, small: 32, plen: plenSmall, dma: 1}))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSequence(t, 1, data) })
}

// FuzzRCSequence: packet sequences into an RC QP.
func FuzzRCSequence(f *testing.F) {
	rc := func(op wire.Opcode) wire.Opcode { return wire.TransportRC | op }
	// The rkey oracle: a READ the peer made, then duplicates of it with
	// other keys and ranges (a secret region, another PD's, random).
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpReadRequest), key: regAll, dma: dma2PMTU, flags: 1},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: regRO, dma: dmaPMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: regAll, va: 1, small: 200, dma: dmaPMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: regLW, dma: dmaPMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: regWO, dma: dmaPMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -1, key: regOther, dma: 1, small: 64},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: 9, rnd32: 0x12345678, dma: dmaPMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -2, key: regAll, dma: dma2PMTU},
		rec{op: rc(wire.OpReadRequest), dpsn: -1, key: regAll, va: 6, small: 32, dma: dmaPMTU}))
	// SEND_WITH_INVALIDATE of a user MR, then a use of it.
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpSendOnlyWithInvalidate), key: regWO, plen: plenSmall, small: 8, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: regWO, plen: plenSmall, small: 8, dma: 1, flags: 1}))
	// The UC sequences, on RC.
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpWriteFirst), plen: plenMTU, dma: dma2PMTU},
		rec{op: rc(wire.OpWriteLast), plen: plenMTU, flags: 1},
		rec{op: rc(wire.OpSendFirst), plen: plenMTU},
		rec{op: rc(wire.OpWriteMiddle), plen: plenMTU}))
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpSendOnly), plen: plenSmall, small: 100, flags: 1},
		rec{op: rc(wire.OpWriteFirst), plen: 0, dma: 0},
		rec{op: rc(wire.OpSendLast), plen: plenSmall, small: 200, flags: 1}))
	// Memory windows: WRITEs through each (within, across the end, past
	// it), a READ and an atomic through a write-only window, a
	// SEND_WITH_INVALIDATE of the type 1 window (refused) and of the type
	// 2 window, then a WRITE through the invalidated window.
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwType1, plen: plenSmall, small: 64, dma: 1, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwType2, va: 6, small: 32, plen: plenSmall, dma: 1, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwType1, va: 2, small: 8, plen: 5, dma: 1, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwFree, plen: plenSmall, small: 16, dma: 1, flags: 1}))
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpReadRequest), key: 10 + mwType1, dma: 1, small: 64, flags: 1},
		rec{op: rc(wire.OpFetchAdd), key: 10 + mwType2, va: 6, small: 32}))
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpSendOnlyWithInvalidate), key: 10 + mwType1, plen: plenSmall, small: 8, flags: 1}))
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpSendOnlyWithInvalidate), key: 10 + mwType2, plen: plenSmall, small: 8, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwType2, va: 6, small: 32, plen: plenSmall, dma: 1, flags: 1},
		rec{op: rc(wire.OpWriteOnly), key: 10 + mwGone, plen: plenSmall, small: 16, dma: 1, flags: 1}))
	// Atomics on every region, a misaligned one, and their duplicates.
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpFetchAdd), key: regAll, rnd64: 5},
		rec{op: rc(wire.OpCompareSwap), key: regWO},
		rec{op: rc(wire.OpFetchAdd), key: regAll, va: 1, small: 3},
		rec{op: rc(wire.OpFetchAdd), dpsn: -1, key: regAll},
		rec{op: rc(wire.OpFetchAdd), dpsn: -1, key: regLW}))
	// FLUSH and ATOMIC_WRITE, new and duplicated.
	f.Add(seq(rcOps,
		rec{op: rc(wire.OpFlush), key: regAll, dma: 1, small: 64},
		rec{op: rc(wire.OpFlush), dpsn: -1, key: regLW, dma: 1, small: 64},
		rec{op: rc(wire.OpAtomicWrite), key: regAll, plen: 6, dma: 1, small: 8},
		rec{op: rc(wire.OpAtomicWrite), dpsn: -1, key: regLW, plen: 6, dma: 1, small: 8}))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSequence(t, 0, data) })
}

// FuzzUDSequence: datagrams into a UD QP (and, with the flag, the others).
func FuzzUDSequence(f *testing.F) {
	ud := wire.TransportUD
	f.Add(seq(udOps,
		rec{op: ud | wire.OpSendOnly, plen: plenSmall, small: 100},
		rec{op: ud | wire.OpSendOnlyWithImmediate, plen: plenMTU},
		rec{op: ud | wire.OpSendOnly, plen: 7, small: 60},
		rec{op: ud | wire.OpSendOnly, flags: 32, plen: 1},
		rec{op: ud | wire.OpSendOnly, flags: 8, plen: 1},
		rec{op: wire.TransportUC | wire.OpSendLast, raw: true, flags: 8, plen: plenSmall, small: 9}))
	// To the multicast QPN (flag 8 with small's bit 4): the UD QP's group,
	// with a bad Q_Key, a group nobody joined (bit 8), and an RC opcode.
	f.Add(seq(udOps,
		rec{op: ud | wire.OpSendOnly, flags: 8, plen: plenSmall, small: 4},
		rec{op: ud | wire.OpSendOnlyWithImmediate, flags: 8 | 32, plen: plenSmall, small: 4},
		rec{op: ud | wire.OpSendOnly, flags: 8, plen: plenSmall, small: 12},
		rec{op: wire.TransportRC | wire.OpSendOnly, raw: true, flags: 8, plen: plenSmall, small: 4},
		rec{op: ud | wire.OpSendOnlyWithImmediate, flags: 8, plen: plenMTU, small: 4}))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzSequence(t, 2, data) })
}
