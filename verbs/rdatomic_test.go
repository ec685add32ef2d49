package verbs_test

// Responder resources (max_dest_rd_atomic) and duplicate READ/ATOMIC
// requests whose record the responder has recycled, in virtual time.

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// overCommitted is an RC pair whose requester may have maxRdAtomic
// READ/ATOMIC outstanding while the responder keeps maxDest responder
// resources (a misconfiguration a manual modify_qp allows), retry_cnt 7.
// side's links are dropLinks that lose what dropA and dropB select; wrapB
// may decorate B's port under its dropLink.
func overCommitted(t *testing.T, maxRdAtomic, maxDest uint8, dropA, dropB dropFunc, wrapB func(link.Link) link.Link) (*verbstest.Pair, [2]*dropLink) {
	t.Helper()
	o := verbstest.Options{Type: verbs.RC, Net: verbstest.NetV2IPv4, MTU: verbs.MTU1024, CQE: 1024,
		Cap:      verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1},
		QPAccess: allRemote,
		Tune: func(rtr, rts *verbs.QPAttr) {
			rtr.MaxDestRdAtomic = maxDest
			rts.MaxRdAtomic, rts.RetryCnt = maxRdAtomic, 7
		}}
	var links [2]*dropLink
	o.Wrap = func(i int, l link.Link) link.Link {
		if i == 1 && wrapB != nil {
			l = wrapB(l)
		}
		links[i] = &dropLink{Link: l, drop: [2]dropFunc{dropA, dropB}[i], sent: map[uint64]int{}}
		return links[i]
	}
	p := verbstest.NewPair(t, o)
	return p, links
}

// sentCount returns how many packets with opcode op and PSN psn d sent.
func (d *dropLink) sentCount(op wire.Opcode, psn wire.PSN) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.sent[uint64(op)<<24|uint64(psn)]
}

// TestReadOverCommittedResponder is the auditor's scenario: a requester
// with max_rd_atomic 8 against a responder with max_dest_rd_atomic 2
// posts 8 READs of 3 packets each and one READ response is lost. The
// retried READs are duplicates whose records the responder recycled long
// ago; it executes them again from their RETH, so every READ completes
// with the right data after one retry (before, the duplicates were
// dropped and the requester retried forever under retry_cnt 7).
func TestReadOverCommittedResponder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const nReads, size = 8, 3000 // 3 packets each at MTU 1024
		// READ i takes PSNs firstPSN+3i..+2: lose the middle response of
		// READ 2, the first time it is sent.
		lost := firstPSN.Add(3*2 + 1)
		p, links := overCommitted(t, 8, 2, nil, func(b wire.BTH, n int) bool {
			return n == 0 && b.Opcode() == wire.TransportRC|wire.OpReadResponseMiddle && b.PSN() == lost
		}, nil)
		remote := newCanary(t, p.B.PD, nReads*size, allRemote)
		data := remote.set(0, randBytes(nReads*size, 1))
		local := newCanary(t, p.A.PD, nReads*size, verbs.AccessLocalWrite)
		var wrs []verbs.SendWR
		for i := range nReads {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{local.mr.SGE(i*size, size)}, RemoteAddr: remote.addr(i * size), RKey: remote.mr.RKey()})
		}
		mustPostSend(t, p.A.QP, wrs...)
		for i := range nReads {
			if wc := wantOK(t, p.A.CQ, uint64(i), verbs.WCRDMARead); wc.ByteLen != size {
				t.Errorf("READ %d: byte_len %d, want %d", i, wc.ByteLen, size)
			}
		}
		local.check(t, data)
		remote.check(t, data)
		if n := links[1].count(); n != 1 {
			t.Fatalf("%d READ responses lost, want 1", n)
		}
		// The retry resends READ 2 from its lost packet, then the READs
		// after it that had gone out (the requester's window, 16 PSNs at
		// first, may have held READs 6 and 7 until after the retry: then
		// they go once): READs 2..5 have no record left, 6 and 7 do; every
		// repeat is read again, none dropped.
		repeats := links[0].sentCount(wire.TransportRC|wire.OpReadRequest, lost) - nReads
		for i := range nReads {
			repeats += links[0].sentCount(wire.TransportRC|wire.OpReadRequest, firstPSN.Add(3*i))
		}
		dup, dropped := ctr(t, p.B.QP.Counters(), "duplicate_request"), ctr(t, p.B.QP.Counters(), "duplicate_request_dropped")
		if repeats < 1 || repeats > nReads-2 || dup != uint64(repeats) || dropped != 0 {
			t.Errorf("READ requests sent again %d (want 1 to %d: READ 2 and some of those after it, once); responder duplicate_request %d, duplicate_request_dropped %d (want %d and 0)",
				repeats, nReads-2, dup, dropped, repeats)
		}
		if c := ctr(t, p.A.QP.Counters(), "completer_retry_err"); c != 1 {
			t.Errorf("completer_retry_err %d, want 1: one retry recovers the lost response", c)
		}
		// READ 2 is asked for again from the lost PSN (its RETH the rest
		// of the original): its responses there start with a FIRST.
		if m, f := links[1].sentCount(wire.TransportRC|wire.OpReadResponseMiddle, lost),
			links[1].sentCount(wire.TransportRC|wire.OpReadResponseFirst, lost); m != 1 || f != 1 {
			t.Errorf("PSN %v: %d MIDDLE and %d FIRST READ responses sent, want 1 each (lost, then read again from there)", lost, m, f)
		}
		for _, s := range []*verbstest.Side{&p.A, &p.B} {
			if st := s.QP.State(); st != verbs.QPSRTS {
				t.Errorf("%s QP in %v, want RTS", s.Dev.Name(), st)
			}
		}
	})
}

// TestAtomicOverCommittedResponder: the same misconfiguration (max_rd_atomic
// 4, max_dest_rd_atomic 1) with FETCH_ADDs, the first one's response lost.
// Its retry finds no saved result (an atomic is never executed twice), so
// the responder answers NAK Invalid Request: the requester completes it
// with IBV_WC_REM_INV_REQ_ERR naming max_dest_rd_atomic, flushes the rest
// and goes to ERR instead of retrying forever; the responder stays in RTS
// (the NAK may answer a stale duplicate; see TestAtomicStaleDuplicate)
// and executed every atomic exactly once.
func TestAtomicOverCommittedResponder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, links := overCommitted(t, 4, 1, nil, func(b wire.BTH, n int) bool {
			return n == 0 && b.Opcode() == wire.TransportRC|wire.OpAtomicAcknowledge && b.PSN() == firstPSN
		}, nil)
		remote := newCanary(t, p.B.PD, 64, allRemote)
		var v [8]byte
		binary.NativeEndian.PutUint64(v[:], 1000)
		remote.set(0, v[:])
		local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
		var wrs []verbs.SendWR
		for i := range 4 {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{local.mr.SGE(8*i, 8)}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey(), CompareAdd: 1 << i})
		}
		mustPostSend(t, p.A.QP, wrs...)
		wc := poll(t, p.A.CQ)
		want(t, wc, verbs.WCRemInvReqErr, 0)
		wantDetail(t, wc, "max_dest_rd_atomic")
		for i := 1; i < 4; i++ {
			want(t, poll(t, p.A.CQ), verbs.WCWRFlushErr, uint64(i))
		}
		if s := p.A.QP.State(); s != verbs.QPSErr {
			t.Errorf("requester QP in %v, want ERR", s)
		}
		if s := p.B.QP.State(); s != verbs.QPSRTS {
			t.Errorf("responder QP in %v, want RTS", s)
		}
		noEvent(t, p.B.Dev, verbs.EventQPReqErr)
		if n := links[1].count(); n != 1 {
			t.Fatalf("%d atomic responses lost, want 1", n)
		}
		if n := links[1].sentCount(wire.OpcodeRCAcknowledge, firstPSN); n != 1 {
			t.Errorf("%d NAKs for the first atomic's PSN, want 1", n)
		}
		binary.NativeEndian.PutUint64(v[:], 1000+1+2+4+8)
		remote.check(t, piece{0, v[:]})
	})
}

// staleLink is a link that keeps a copy of the request with opcode op and
// PSN from as it arrives, and delivers the copy again right before the
// request with PSN at: a network duplicate that arrives late.
type staleLink struct {
	link.Link
	op       wire.Opcode
	from, at wire.PSN
	mu       sync.Mutex
	saved    []byte // guarded by mu
	addr     link.Addr
	injected int // guarded by mu
}

// wantStaleNAKed checks that stale delivered its copy once, that the
// responder's link b sent one NAK for it (at firstPSN), and that both QPs
// are still in RTS: the NAK was fatal to neither.
func wantStaleNAKed(t *testing.T, p *verbstest.Pair, stale *staleLink, b *dropLink) {
	t.Helper()
	stale.mu.Lock()
	injected := stale.injected
	stale.mu.Unlock()
	if injected != 1 {
		t.Fatalf("the stale duplicate was delivered %d times, want 1", injected)
	}
	if n := b.sentCount(wire.OpcodeRCAcknowledge, firstPSN); n != 1 {
		t.Errorf("%d NAKs for the stale duplicate, want 1", n)
	}
	for _, s := range []*verbstest.Side{&p.A, &p.B} {
		if st := s.QP.State(); st != verbs.QPSRTS {
			t.Errorf("%s QP in %v, want RTS", s.Dev.Name(), st)
		}
	}
}

func (l *staleLink) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; i < n; i++ {
		b := wire.BTH(pkts[i].Transport())
		if b.Opcode() != l.op {
			continue
		}
		switch {
		case b.PSN() == l.from && l.saved == nil:
			l.saved, l.addr = bytes.Clone(pkts[i].Transport()), pkts[i].Addr
		case b.PSN() == l.at && l.saved != nil && l.injected == 0 && n < len(pkts):
			// Insert the copy at i: the batch's buffers move up one.
			c := pkts[n]
			c.Buf, c.Off, c.Len, c.Addr = append(c.Buf[:0], l.saved...), 0, len(l.saved), l.addr
			copy(pkts[i+1:n+1], pkts[i:n])
			pkts[i] = c
			n++
			i++
			l.injected++
		}
	}
	return n, err
}

// TestAtomicStaleDuplicate: a requester within the limit (max_rd_atomic 1,
// max_dest_rd_atomic 1) never retries an atomic whose record is gone, but
// the network can deliver a copy of one late. Here the first FETCH_ADD
// arrives again after four more, right before the fifth: the responder,
// without its saved result, answers NAK Invalid Request and stays in RTS;
// the requester drops that NAK, whose PSN it completed long ago, while the
// fifth FETCH_ADD is outstanding; every atomic executes once and the
// connection carries on.
func TestAtomicStaleDuplicate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stale := &staleLink{op: wire.TransportRC | wire.OpFetchAdd, from: firstPSN, at: firstPSN.Add(4)}
		p, links := overCommitted(t, 1, 1, nil, nil, func(l link.Link) link.Link {
			stale.Link = l
			return stale
		})
		remote := newCanary(t, p.B.PD, 64, allRemote)
		remote.set(0, make([]byte, 8))
		local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
		var wrs []verbs.SendWR
		for i := range 5 {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{local.mr.SGE(8*i, 8)}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey(), CompareAdd: 1 << i})
		}
		wrs = append(wrs, verbs.SendWR{WRID: 5, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{local.mr.SGE(40, 8)}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()})
		mustPostSend(t, p.A.QP, wrs...)
		for i := range 5 {
			wantOK(t, p.A.CQ, uint64(i), verbs.WCFetchAdd)
		}
		wantOK(t, p.A.CQ, 5, verbs.WCRDMARead)
		wantStaleNAKed(t, p, stale, links[1])
		// Each FETCH_ADD saw the sum of those before it; the READ sees all.
		var want [48]byte
		for i := range 5 {
			binary.NativeEndian.PutUint64(want[8*i:], uint64(1<<i-1))
		}
		binary.NativeEndian.PutUint64(want[40:], 31)
		local.check(t, piece{0, want[:]})
		remote.check(t, piece{0, want[40:]})
		if c := ctr(t, p.A.QP.Counters(), "completer_retry_err"); c != 0 {
			t.Errorf("completer_retry_err %d, want 0", c)
		}
	})
}

// TestMaxDestRdAtomicZero: a responder with max_dest_rd_atomic 0 has no
// responder resources: as on rxe, a READ, an ATOMIC (or here a FLUSH)
// draws NAK Invalid Request, the responder reports IBV_EVENT_QP_REQ_ERR
// and goes to ERR, the requester completes the WR with
// IBV_WC_REM_INV_REQ_ERR, and remote memory is untouched. (goroce used to
// treat 0 as 1.)
func TestMaxDestRdAtomicZero(t *testing.T) {
	for _, c := range []struct {
		name string
		wr   func(local, remote *canary) verbs.SendWR
	}{
		{"read", func(local, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{local.mr.SGE(0, 64)}, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()}
		}},
		{"fetch_add", func(local, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{local.mr.SGE(0, 8)}, RemoteAddr: remote.addr(0),
				RKey: remote.mr.RKey(), CompareAdd: 1}
		}},
		{"cmp_swp", func(local, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGList: []verbs.SGE{local.mr.SGE(0, 8)}, RemoteAddr: remote.addr(0),
				RKey: remote.mr.RKey(), Swap: 7}
		}},
		{"atomic_write", func(local, remote *canary) verbs.SendWR {
			// Its 8 bytes are local's fill pattern, which remote.check would
			// find in the remote region had it been executed.
			return verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGList: []verbs.SGE{local.mr.SGE(0, 8)}, RemoteAddr: remote.addr(0),
				RKey: remote.mr.RKey()}
		}},
		{"flush", func(local, remote *canary) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRFlush, RemoteAddr: remote.addr(0), RKey: remote.mr.RKey(), SGList: []verbs.SGE{{Length: 64}},
				FlushSel: wire.FlushSelMRRange, FlushPlacement: wire.FlushGlobalVisibility}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Tune: func(rtr, rts *verbs.QPAttr) { rtr.MaxDestRdAtomic = 0 }})
				if a := p.B.QP.Query(); a.MaxDestRdAtomic != 0 {
					t.Fatalf("max_dest_rd_atomic %d, want 0", a.MaxDestRdAtomic)
				}
				remote := newCanary(t, p.B.PD, 64, allRemote)
				local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
				wr := c.wr(local, remote)
				wr.WRID, wr.Flags = 1, verbs.SendSignaled
				mustPostSend(t, p.A.QP, wr)
				want(t, poll(t, p.A.CQ), verbs.WCRemInvReqErr, 1)
				ev := waitEvent(t, p.B.Dev, verbs.EventQPReqErr, p.B.QP.Num())
				if !strings.Contains(ev.Detail, "max_dest_rd_atomic") {
					t.Errorf("event Detail %q does not mention max_dest_rd_atomic", ev.Detail)
				}
				if s := p.B.QP.State(); s != verbs.QPSErr {
					t.Errorf("responder QP in %v, want ERR", s)
				}
				remote.check(t)
				local.check(t)
			})
		})
	}
}

// TestReadStaleDuplicateAfterDereg: a late network copy of a READ the
// requester completed long ago, whose region the responder has since
// deregistered, draws a Remote Access Error NAK that is fatal to neither
// side: the responder stays in RTS, the requester drops the NAK as a ghost,
// and the READs posted after it complete. (When the re-executed duplicate's
// failed rkey check was fatal, the responder went to ERR and the requester,
// retry_cnt 7, waited forever.)
func TestReadStaleDuplicateAfterDereg(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stale := &staleLink{op: wire.TransportRC | wire.OpReadRequest, from: firstPSN, at: firstPSN.Add(2)}
		p, links := overCommitted(t, 1, 1, nil, nil, func(l link.Link) link.Link {
			stale.Link = l
			return stale
		})
		r1 := newCanary(t, p.B.PD, 64, allRemote)
		r1.set(0, randBytes(64, 21))
		local := newCanary(t, p.A.PD, 256, verbs.AccessLocalWrite)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 0, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{local.mr.SGE(0, 64)}, RemoteAddr: r1.addr(0), RKey: r1.mr.RKey()})
		wantOK(t, p.A.CQ, 0, verbs.WCRDMARead)
		if err := r1.mr.Dereg(); err != nil {
			t.Fatal(err)
		}
		data := randBytes(64, 22)
		r2 := newCanary(t, p.B.PD, 64, allRemote)
		r2.set(0, data)
		var wrs []verbs.SendWR
		for i := 1; i <= 3; i++ {
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{local.mr.SGE(64*i, 64)}, RemoteAddr: r2.addr(0), RKey: r2.mr.RKey()})
		}
		mustPostSend(t, p.A.QP, wrs...) // PSNs firstPSN+1..+3: the copy of firstPSN arrives before +2
		for i := 1; i <= 3; i++ {
			wantOK(t, p.A.CQ, uint64(i), verbs.WCRDMARead)
		}
		wantStaleNAKed(t, p, stale, links[1])
		r2.check(t, piece{0, data})
		for i := 1; i <= 3; i++ {
			if !bytes.Equal(local.region()[64*i:64*i+64], data) {
				t.Errorf("READ %d brought the wrong data", i)
			}
		}
	})
}
