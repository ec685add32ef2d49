package verbs

// The scheduler's share of the time for bulk work while another QP is
// active (sched.go, timeShare), driven on a clock the test moves: the
// device runs without its scheduler's goroutine, the test hands it
// packets and serves the turns, and each packet the device sends costs
// a fixed time on that clock.

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// clockLink is a link that delivers nothing and on whose clock each packet
// sent takes perPkt; it counts the READ responses sent.
type clockLink struct {
	*fuzzLink
	now       atomic.Int64
	perPkt    int64
	responses atomic.Int64
	requests  atomic.Int64 // READ and atomic requests sent
}

func (l *clockLink) Send(pkts []link.Packet) (int, error) {
	l.now.Add(l.perPkt * int64(len(pkts)))
	for i := range pkts {
		if op := wire.Opcode(pkts[i].Transport()[0]); op >= wire.TransportRC|wire.OpReadResponseFirst && op <= wire.TransportRC|wire.OpReadResponseOnly {
			l.responses.Add(1)
		}
		if info := wire.Opcode(pkts[i].Transport()[0]).Info(); info.Is(wire.FlagRequest) && (info.Is(wire.FlagRead) || info.Is(wire.FlagAtomic)) {
			l.requests.Add(1)
		}
	}
	return len(pkts), nil
}

// shareEnv is a device with two RC QPs in RTS: bulk, which a peer READs
// from, and inter, to which it does 64-byte RDMA WRITEs (or READs).
type shareEnv struct {
	d           *Device
	lk          *clockLink
	bulk, inter *QP
	mr          *MR
	interPSN    wire.PSN
	out         txBatch
}

const (
	shareTestPerPkt = int64(25 * time.Microsecond) // a turn of 16 packets: 400 µs
	shareTestRead   = 1 << 20                      // 256 responses at path MTU 4096: 16 turns
)

func newShareEnv(t *testing.T) *shareEnv {
	t.Helper()
	e := &shareEnv{lk: &clockLink{fuzzLink: &fuzzLink{closed: make(chan struct{})}, perPkt: shareTestPerPkt}}
	e.lk.now.Store(int64(time.Second))
	local, peer := netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
	d, err := openDevice(DeviceConfig{Name: "share0", Link: e.lk, GIDs: []GIDEntry{{GID: local, Type: GIDTypeRoCEv2}}, ActiveMTU: MTU4096}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	// Before any packet: the receive goroutine never receives (fuzzLink),
	// and the test's goroutine is the only one that reads the clock.
	d.sched.clock = e.lk.now.Load
	e.d, e.out.dev = d, d
	pd, _ := d.AllocPD()
	if e.mr, err = pd.RegMR(make([]byte, shareTestRead), mem.LocalWrite|mem.RemoteRead|mem.RemoteWrite); err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(64)
	for i, q := range []**QP{&e.bulk, &e.inter} {
		if *q, err = pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := (*q).Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: mem.LocalWrite | mem.RemoteWrite | mem.RemoteRead}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		if err := (*q).Modify(&QPAttr{State: QPSRTR, PathMTU: MTU4096, DestQPN: uint32(0x90 + i), RQPSN: fuzzPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1,
			AH: AHAttr{IsGlobal: true, PortNum: 1, GRH: GlobalRoute{DGID: peer, HopLimit: 64}}},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
		if err := (*q).Modify(&QPAttr{State: QPSRTS, SQPSN: 0x800, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic); err != nil {
			t.Fatal(err)
		}
	}
	e.interPSN = fuzzPSN
	return e
}

// deliver hands the device one packet as its receive goroutine would.
func (e *shareEnv) deliver(f *wire.PacketFields) {
	b := append(f.AppendTransport(nil), 0, 0, 0, 0)
	buf := append(make([]byte, link.FrameHeadroom, link.FrameHeadroom+len(b)), b...)
	pk := link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: len(b), Addr: link.Addr{Version: wire.RoCEv2,
		SrcGID: netip.MustParseAddr("::ffff:192.0.2.2"), DstGID: netip.MustParseAddr("::ffff:192.0.2.1"), UDPSrcPort: 4791, HopLimit: 64}}
	e.d.rxMu.Lock()
	e.out.budget, e.out.unlimited = burstBytes, false
	e.d.dispatch(&pk, &e.out)
	e.out.release()
	e.d.rxMu.Unlock()
}

// read asks q for the whole region.
func (e *shareEnv) read(q *QP) {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpReadRequest, PKey: wire.DefaultPKey, DestQP: q.num, PSN: fuzzPSN, AckReq: true}}
	if q == e.inter {
		f.BTH.PSN = e.interPSN
		e.interPSN = e.interPSN.Add(shareTestRead / 4096)
	}
	f.Ext.RETH = wire.RETHFields{VA: e.mr.Addr(), RKey: e.mr.RKey(), DMALength: shareTestRead}
	e.deliver(&f)
}

// write is one 64-byte RDMA WRITE to inter.
func (e *shareEnv) write() {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpWriteOnly, PKey: wire.DefaultPKey, DestQP: e.inter.num, PSN: e.interPSN, AckReq: true},
		Payload: make([]byte, 64)}
	f.Ext.RETH = wire.RETHFields{VA: e.mr.Addr(), RKey: e.mr.RKey(), DMALength: 64}
	e.interPSN = e.interPSN.Add(1)
	e.deliver(&f)
}

// TestBulkAloneDoesNotWait: QPs answering READs with no QP without bulk
// work active have the device to themselves: no turn waits, though the
// second READ request arrived, while the first READ was answered, for a
// QP that had no bulk work yet.
func TestBulkAloneDoesNotWait(t *testing.T) {
	e := newShareEnv(t)
	e.read(e.bulk)
	e.read(e.inter)
	turns := 0
	for {
		served, wait := e.d.serveShared(&e.out)
		if wait > 0 {
			t.Fatalf("turn %d waits %v with no other QP active", turns, wait)
		}
		if !served {
			break
		}
		turns++
	}
	if n := e.lk.responses.Load(); n != 2*shareTestRead/4096 {
		t.Fatalf("%d READ responses sent, want %d", n, 2*shareTestRead/4096)
	}
}

// TestBulkSharesTimeWithActiveQP: while another QP has packets (a 64-byte
// WRITE every 100 µs of the clock), the READ's turns take no more than
// half the time (shareNum/shareDen) beyond the shareCap they may have
// saved and one turn in progress: a turn beyond that waits, and the
// time it is told to wait is what makes the share hold. Once the other
// QP has been quiet for shareActive the READ goes on without waiting, and
// every response is sent.
func TestBulkSharesTimeWithActiveQP(t *testing.T) {
	e := newShareEnv(t)
	e.read(e.bulk)
	start := e.lk.now.Load()
	const activeFor = int64(10 * time.Millisecond)
	const turn = 16 * shareTestPerPkt
	var bulk, lastWrite int64
	waits := 0
	for {
		now := e.lk.now.Load()
		if now-start < activeFor && now-lastWrite >= int64(100*time.Microsecond) {
			e.write()
			lastWrite = e.lk.now.Load()
			// The ACK's own time on the clock is not the READ's.
		}
		before := e.lk.now.Load()
		served, wait := e.d.serveShared(&e.out)
		if wait > 0 {
			if before-lastWrite >= shareActive {
				t.Fatalf("a turn waits %v, %v after the other QP's last packet", time.Duration(wait), time.Duration(before-lastWrite))
			}
			waits++
			e.lk.now.Add(int64(wait))
			continue
		}
		if !served {
			break
		}
		bulk += e.lk.now.Load() - before
		if el := e.lk.now.Load() - start; el < activeFor && bulk > el*shareNum/shareDen+shareCap+turn {
			t.Fatalf("after %v the READ's turns took %v, more than its share", time.Duration(el), time.Duration(bulk))
		}
	}
	if waits == 0 {
		t.Error("no turn waited while the other QP was active")
	}
	if n := e.lk.responses.Load(); n != shareTestRead/4096 {
		t.Fatalf("%d READ responses sent, want %d", n, shareTestRead/4096)
	}
	t.Logf("%d waits; the READ's turns took %v of %v", waits, time.Duration(bulk), time.Duration(e.lk.now.Load()-start))
}

// TestRecentlyBulkQPIsNotActive: a QP whose own bulk work ended less than
// shareActive ago (one of many streaming QPs, in the scheduler between
// its ACKs) does not hold back the others' bulk work with its packets:
// while inter's WRITEs arrive within that time after inter answered a
// READ, the READ on bulk never waits.
func TestRecentlyBulkQPIsNotActive(t *testing.T) {
	e := newShareEnv(t)
	e.lk.perPkt = int64(10 * time.Microsecond) // turns of 160 µs: ten fit in shareActive
	e.read(e.inter)
	for {
		if served, wait := e.d.serveShared(&e.out); !served || wait > 0 {
			break
		}
	}
	end := e.inter.bulkEnd.Load()
	if e.lk.responses.Load() != shareTestRead/4096 || end == 0 {
		t.Fatalf("inter's READ: %d responses, bulk work ended at %d", e.lk.responses.Load(), end)
	}
	e.read(e.bulk)
	turns := 0
	for e.lk.now.Load()-end < shareActive { // each WRITE within shareActive
		e.write()
		served, wait := e.d.serveShared(&e.out)
		if wait > 0 {
			t.Fatalf("turn %d waits %v, %v after inter's bulk work ended", turns, time.Duration(wait), time.Duration(e.lk.now.Load()-end))
		}
		if !served {
			t.Fatal("bulk's READ ended early")
		}
		turns++
	}
	// Without the rule, the seventh turn waits: the share's balance is
	// 500 µs, and each turn of 160 µs and its WRITE's ACK of 10 µs take
	// 160 and give 85 back.
	if turns < 8 {
		t.Fatalf("%d turns in the time, want ≥ 8", turns)
	}
}

// TestQPCacheFollowsDestroy: dispatch's cached QP lookup (lookupQPFor)
// serves a QP only while no QP has come or gone since it looked: a QP
// destroyed is not found again through the cache, and a QP created anew
// under a number the cache missed is.
func TestQPCacheFollowsDestroy(t *testing.T) {
	e := newShareEnv(t)
	for range 2 { // the second from the cache
		if q := e.d.lookupQPFor(&e.out, e.inter.num); q != e.inter {
			t.Fatalf("QP %#x: %p, want %p", e.inter.num, q, e.inter)
		}
	}
	if err := e.inter.Destroy(); err != nil {
		t.Fatal(err)
	}
	if q := e.d.lookupQPFor(&e.out, e.inter.num); q != nil {
		t.Fatalf("the destroyed QP %#x is still found: %p", e.inter.num, q)
	}
	if q := e.d.lookupQPFor(&e.out, e.bulk.num); q != e.bulk {
		t.Fatalf("QP %#x: %p, want %p", e.bulk.num, q, e.bulk)
	}
}
