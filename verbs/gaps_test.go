package verbs_test

// Behaviours the other conformance tests leave unchecked, each proven on
// the wire where it has a wire form: AckReq spacing, the requester's limit
// on outstanding READ/ATOMIC, the QP_FATAL and GID_CHANGE events,
// SEND_ONLY_WITH_INVALIDATE, SEND_WITH_IMM on QP1, the exact retransmit
// timer, the range in a remote access error's Detail, and the address
// vector's traffic class, flow label and hop limit in the packets' network
// headers.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"regexp"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// tapLink records every packet its device sends and receives, in the
// order the device sees them: a sent batch before it reaches the fabric,
// a received batch as it leaves the fabric, before the engine handles it.
// A consequence (a response, a packet sent because of one) is therefore
// always logged after its cause.
type tapLink struct {
	link.Link
	mu  sync.Mutex
	log []tapped // guarded by mu
}

// tapped is one packet seen by a tapLink.
type tapped struct {
	rx    bool      // received (else sent)
	at    time.Time // when the device handed it over or got it
	addr  link.Addr
	tr    []byte // the transport packet, BTH through ICRC (unfilled when sent)
	frame []byte // received only: the whole frame as it crossed the fabric
}

func (l *tapLink) Send(pkts []link.Packet) (int, error) {
	now := time.Now()
	l.mu.Lock()
	for i := range pkts {
		l.log = append(l.log, tapped{at: now, addr: pkts[i].Addr, tr: bytes.Clone(pkts[i].Transport())})
	}
	l.mu.Unlock()
	return l.Link.Send(pkts)
}

func (l *tapLink) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	now := time.Now()
	l.mu.Lock()
	for i := range pkts[:n] {
		pk := &pkts[i]
		l.log = append(l.log, tapped{rx: true, at: now, addr: pk.Addr, tr: bytes.Clone(pk.Transport()),
			frame: bytes.Clone(pk.Buf[:pk.Off+pk.Len])})
	}
	l.mu.Unlock()
	return n, err
}

// all returns a copy of the log.
func (l *tapLink) all() []tapped {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]tapped(nil), l.log...)
}

// filter returns the logged packets in direction rx whose opcode is one of ops.
func (l *tapLink) filter(rx bool, ops ...wire.Opcode) []tapped {
	var r []tapped
	for _, tp := range l.all() {
		if tp.rx != rx {
			continue
		}
		for _, op := range ops {
			if tp.bth().Opcode() == op {
				r = append(r, tp)
				break
			}
		}
	}
	return r
}

func (tp *tapped) bth() wire.BTH { return wire.BTH(tp.tr[:wire.BTHLen]) }

// transport parses the transport headers.
func (tp *tapped) transport(t testing.TB) *wire.Packet {
	t.Helper()
	var p wire.Packet
	if err := p.ParseTransport(tp.tr, tp.addr.Version); err != nil {
		t.Fatalf("tapped packet % x: %v", tp.tr, err)
	}
	return &p
}

// wire parses a received packet's whole frame: Ethernet, IPv4/IPv6 or
// GRH, UDP, transport.
func (tp *tapped) wire(t testing.TB) *wire.Packet {
	t.Helper()
	if !tp.rx {
		t.Fatal("a sent packet has no frame yet")
	}
	var p wire.Packet
	if err := p.ParseFrame(tp.frame, wire.RoCEv2Port); err != nil {
		t.Fatalf("frame % x: %v", tp.frame, err)
	}
	if !bytes.Equal(p.Transport(), tp.tr) {
		t.Fatalf("the frame's transport packet is not the one the link delivered")
	}
	return &p
}

// tapSide wraps the link of side `side` (0: A, 1: B) of a buildPair pair in
// a tapLink, stored in *tap.
func tapSide(side int, tap **tapLink) func(int, link.Link) link.Link {
	return func(i int, l link.Link) link.Link {
		if i != side {
			return l
		}
		*tap = &tapLink{Link: l}
		return *tap
	}
}

// tapBoth wraps both sides' links.
func tapBoth(taps *[2]*tapLink) func(int, link.Link) link.Link {
	return func(i int, l link.Link) link.Link {
		taps[i] = &tapLink{Link: l}
		return taps[i]
	}
}

// TestAckReqEvery64Packets: a 1 MiB RDMA WRITE at path MTU 256 goes out as
// 4096 packets in which AckReq is set at least every 64 packets (rxe's
// RXE_MAX_PKT_PER_ACK; params.go's maxPktPerAck) and on the last one. In
// virtual time, so no timeout can blur the count.
func TestAckReqEvery64Packets(t *testing.T) {
	// 1 MiB is 4096 packets, a multiple of 64; one byte more makes 4097,
	// whose last packet only the end-of-message rule marks.
	for _, n := range []int{1 << 20, 1<<20 + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// The ACKs take 1 µs of virtual time, which passes only once the
			// poster has handed all its packets to the link: the receive
			// loop alone drives the requester after that. (With no latency
			// the two can put packets on the wire out of PSN order; see
			// TestRequesterSendsInPSNOrder.)
			writeAndTap(t, n, verbs.MTU256, time.Microsecond, func(t *testing.T, sent []tapped, _ *verbstest.Pair) {
				checkAckReqSpacing(t, sent, n, 256)
			})
		})
	}
}

// writeAndTap runs, in virtual time, one RDMA WRITE of n bytes from A to B
// at path MTU mtu with the given latency on B's ACKs, checks the data, and
// hands check the WRITE packets A sent, in the order it sent them.
func writeAndTap(t *testing.T, n int, mtu verbs.MTU, ackLatency time.Duration, check func(*testing.T, []tapped, *verbstest.Pair)) {
	synctest.Test(t, func(t *testing.T) {
		var tap *tapLink
		p := buildPair(t, pairConfig{Options: verbstest.Options{MTU: mtu}, Wrap: tapSide(0, &tap)})
		if err := p.B.Port.SetFaults(fabric.Faults{Delay: ackLatency}); err != nil {
			t.Fatal(err)
		}
		data := randBytes(n, 64)
		dst := newCanary(t, p.B.PD, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(source(t, p.A.PD, data), n), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
		wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
		dst.check(t, piece{0, data})
		check(t, tap.filter(false, wire.TransportRC|wire.OpWriteFirst, wire.TransportRC|wire.OpWriteMiddle,
			wire.TransportRC|wire.OpWriteLast, wire.TransportRC|wire.OpWriteOnly), p)
	})
}

// wantInPSNOrder fails t unless sent holds the npkts packets of one
// message, each once, in PSN order from firstPSN.
func wantInPSNOrder(t *testing.T, sent []tapped, npkts int, p *verbstest.Pair) {
	t.Helper()
	for i := range sent {
		if psn := sent[i].bth().PSN(); psn != firstPSN.Add(i) {
			t.Fatalf("packet %d A sent has PSN %v, want %v: %d packets in all, want %d once each in order "+
				"(no fabric fault is on; A: %s; B: %s)", i, psn, firstPSN.Add(i), len(sent), npkts,
				nonzeroCounters(p.A.QP.Counters()), nonzeroCounters(p.B.QP.Counters()))
		}
	}
	if len(sent) != npkts {
		t.Fatalf("%d packets on the wire, want %d", len(sent), npkts)
	}
}

// checkAckReqSpacing checks the AckReq bits of the packets of one
// n-byte message at path MTU pmtu, sent once each.
func checkAckReqSpacing(t *testing.T, sent []tapped, n, pmtu int) {
	t.Helper()
	npkts := (n + pmtu - 1) / pmtu
	for i := range sent {
		if psn := sent[i].bth().PSN(); psn != firstPSN.Add(i) || len(sent) != npkts {
			t.Fatalf("packet %d of %d has PSN %v; want %d packets in PSN order from %v (no retransmission)",
				i, len(sent), psn, npkts, firstPSN)
		}
	}
	last, largest, acks, bad := -1, 0, 0, 0
	for i := range sent {
		if !sent[i].bth().AckReq() {
			continue
		}
		acks++
		// gap: packets since the previous AckReq, this one included.
		gap := i - last
		largest = max(largest, gap)
		if gap > 64 && bad < 5 {
			bad++
			t.Errorf("packets %d..%d (PSN %v..%v): %d in a row without AckReq; want AckReq at least every 64 packets",
				last+1, i, sent[last+1].bth().PSN(), sent[i].bth().PSN(), gap-1)
		}
		last = i
	}
	if !sent[npkts-1].bth().AckReq() {
		t.Errorf("the last packet (%v PSN %v) has no AckReq", sent[npkts-1].bth().Opcode(), sent[npkts-1].bth().PSN())
	}
	if largest > 64 {
		t.Errorf("largest run ending in an AckReq: %d packets, want ≤ 64", largest)
	}
	t.Logf("%d packets, %d with AckReq, largest run ending in one: %d", npkts, acks, largest)
}

// TestRequesterSendsInPSNOrder: on a fabric with no fault, one WRITE's
// packets leave the requester once each and in PSN order.
//
// They used not to: PostSend built packets under the QP's lock but handed
// the batch's last part to the link after unlocking, and ACKs for the parts
// already sent let the device's receive loop build and send the next PSNs
// first (under -race nearly every run: packet 960 carried PSN 5120 where
// 5056 was due; 1600 of 4096 packets retransmitted). A batch now holds a
// QP's requester until it has sent its packets (txBatch.own).
func TestRequesterSendsInPSNOrder(t *testing.T) {
	writeAndTap(t, 1<<20, verbs.MTU256, 0, func(t *testing.T, sent []tapped, p *verbstest.Pair) {
		wantInPSNOrder(t, sent, 1<<20/256, p)
		if c := ctr(t, p.B.QP.Counters(), "out_of_seq_request"); c != 0 {
			t.Errorf("responder out_of_seq_request %d on a fabric with no fault", c)
		}
	})
}

// TestMaxRdAtomicOnTheWire: with max_rd_atomic 2 (and the responder's
// max_dest_rd_atomic 16, so only the requester's limit can hold it back),
// eight READs, eight atomics, or a mix posted in one call never have more
// than two requests on the wire beyond the responses that came back, and
// they do have two (the limit is used, not just respected); all complete in
// order with the right data.
func TestMaxRdAtomicOnTheWire(t *testing.T) {
	const maxRdAtomic, n, chunk = 2, 8, 3000 // a 3000-byte READ: 3 response packets at MTU 1024
	ne := binary.NativeEndian
	for _, kind := range []string{"read", "atomic", "mixed"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var tap *tapLink
				p := buildPair(t, pairConfig{Options: verbstest.Options{Tune: func(rtr, rts *verbs.QPAttr) {
					rts.MaxRdAtomic = maxRdAtomic
				}}, Wrap: tapSide(0, &tap)})
				if got := p.B.QP.Query().MaxDestRdAtomic; got < n {
					t.Fatalf("responder max_dest_rd_atomic %d: it would limit the requests itself", got)
				}
				atomOff := n * chunk
				remote := newCanary(t, p.B.PD, atomOff+8, allRemote)
				rdata := randBytes(atomOff, 80)
				word := uint64(1000)
				var w [8]byte
				ne.PutUint64(w[:], word)
				rpieces := []piece{remote.set(0, rdata), remote.set(atomOff, w[:])}
				local := newCanary(t, p.A.PD, atomOff+8*n, verbs.AccessLocalWrite)
				var lpieces []piece
				var wrs []verbs.SendWR
				var ops []verbs.WCOpcode
				for i := range n {
					wr := verbs.SendWR{WRID: uint64(i), Flags: verbs.SendSignaled, RKey: remote.mr.RKey()}
					read := kind == "read" || kind == "mixed" && i%2 == 0
					switch {
					case read:
						wr.Opcode, wr.SGList, wr.RemoteAddr = verbs.WRRDMARead, []verbs.SGE{local.mr.SGE(i*chunk, chunk)}, remote.addr(i*chunk)
						ops = append(ops, verbs.WCRDMARead)
						lpieces = append(lpieces, piece{i * chunk, rdata[i*chunk : (i+1)*chunk]})
					default:
						// The atomics all hit one word, in posting order: each
						// returns what the one before left.
						var o [8]byte
						ne.PutUint64(o[:], word)
						lpieces = append(lpieces, piece{atomOff + 8*i, o[:]})
						wr.SGList, wr.RemoteAddr = []verbs.SGE{local.mr.SGE(atomOff+8*i, 8)}, remote.addr(atomOff)
						if i%4 < 2 {
							wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, uint64(i+1)
							ops = append(ops, verbs.WCFetchAdd)
							word += uint64(i + 1)
						} else {
							wr.Opcode, wr.CompareAdd, wr.Swap = verbs.WRAtomicCmpAndSwp, word, word*3
							ops = append(ops, verbs.WCCompSwap)
							word *= 3
						}
					}
					wrs = append(wrs, wr)
				}
				ne.PutUint64(w[:], word)
				rpieces = append(rpieces, piece{atomOff, bytes.Clone(w[:])})
				mustPostSend(t, p.A.QP, wrs...)
				for i := range n {
					wantOK(t, p.A.CQ, uint64(i), ops[i])
				}
				local.check(t, lpieces...)
				remote.check(t, rpieces...)

				// Replay the wire as the requester saw it: a request is
				// outstanding from its sending until the last packet of its
				// response arrives.
				out, peak, reqs := 0, 0, 0
				for _, tp := range tap.all() {
					op := tp.bth().Opcode()
					switch {
					case !tp.rx && (op == wire.TransportRC|wire.OpReadRequest || op == wire.TransportRC|wire.OpCompareSwap ||
						op == wire.TransportRC|wire.OpFetchAdd):
						reqs++
						if out++; out > peak {
							peak = out
						}
						if out > maxRdAtomic {
							t.Errorf("%v PSN %v sent with %d READ/ATOMIC requests unanswered; max_rd_atomic is %d",
								op, tp.bth().PSN(), out-1, maxRdAtomic)
						}
					case tp.rx && (op == wire.TransportRC|wire.OpReadResponseLast || op == wire.TransportRC|wire.OpReadResponseOnly ||
						op == wire.TransportRC|wire.OpAtomicAcknowledge):
						out--
					}
				}
				if reqs != n {
					t.Errorf("%d READ/ATOMIC requests on the wire, want %d (one each, no retransmission)", reqs, n)
				}
				if peak != maxRdAtomic {
					t.Errorf("at most %d READ/ATOMIC requests were outstanding, want exactly max_rd_atomic = %d", peak, maxRdAtomic)
				}
			})
		})
	}
}

// TestAsyncEventQPFatal: every path that posts IBV_EVENT_QP_FATAL does so
// for the right QP, with a Detail, and leaves that QP in ERR: on the
// requester a local protection error (bad lkey) on RC (a UD datagram above
// the path MTU is not fatal: the UD QP goes to SQE, with no event); on the
// responder a receive it cannot write (its lkey is bad). (A SEND_WITH_INV
// naming an rkey the responder may not invalidate is an invalid request,
// not a fatal error: TestSendWithInvRefused.)
func TestAsyncEventQPFatal(t *testing.T) {
	t.Run("requester/bad-lkey", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		s := source(t, p.A.PD, randBytes(100, 1)).SGE(0, 100)
		s.LKey = 0xDEADBE00
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{s}})
		want(t, poll(t, p.A.CQ), verbs.WCLocProtErr, 1)
		wantQPFatal(t, p.A.Dev, p.A.QP)
		noEvent(t, p.B.Dev, verbs.EventQPFatal)
	})
	t.Run("requester/ud-above-mtu", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD})
		mtu := p.A.Dev.ActiveMTU().Bytes()
		err := p.A.QP.PostSend(udTo(t, p, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: sgl(source(t, p.A.PD, make([]byte, mtu+1)), mtu+1)}))
		if err != nil {
			t.Skipf("refused at post time (%v): no QP error, no event", err)
		}
		want(t, poll(t, p.A.CQ), verbs.WCLocLenErr, 1)
		// An unreliable QP's send error is not fatal: the QP goes to SQE
		// and reports it by the completion alone (TestSendQueueError).
		noEvent(t, p.A.Dev, verbs.EventQPFatal)
		if st := p.A.QP.Query().State; st != verbs.QPSSQE {
			t.Errorf("UD QP in %v after a send error, want SQE", st)
		}
	})
	t.Run("responder/receive-bad-lkey", func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		dst := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite)
		s := dst.mr.SGE(0, 256)
		s.LKey ^= 1
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{s}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: sgl(source(t, p.A.PD, randBytes(100, 2)), 100)})
		want(t, poll(t, p.A.CQ), verbs.WCRemOpErr, 1)
		want(t, poll(t, p.B.RCQ), verbs.WCLocProtErr, 1)
		wantQPFatal(t, p.B.Dev, p.B.QP)
		noEvent(t, p.A.Dev, verbs.EventQPFatal) // the requester's error is the remote's
		dst.check(t)
	})
}

// wantQPFatal waits for IBV_EVENT_QP_FATAL on qp and checks it and the
// QP's state.
func wantQPFatal(t *testing.T, dev *verbs.Device, qp *verbs.QP) verbs.AsyncEvent {
	t.Helper()
	ev := waitEvent(t, dev, verbs.EventQPFatal, qp.Num())
	if ev.QPNum != qp.Num() || ev.Detail == "" {
		t.Errorf("event %v: want QP %#x and a Detail", ev, qp.Num())
	}
	if s := qp.State(); s != verbs.QPSErr {
		t.Errorf("QP in %v after QP_FATAL, want ERR", s)
	}
	return ev
}

// TestAsyncEventGIDChange: changing the GID table reports
// IBV_EVENT_GID_CHANGE on port 1 of that device only; a table too long is
// refused with EINVAL and reports nothing.
func TestAsyncEventGIDChange(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	added := verbs.GIDEntry{GID: netip.MustParseAddr("::ffff:198.51.100.7"), Type: verbs.GIDTypeRoCEv2, Netdev: "fab0"}
	if err := p.A.Dev.SetGIDs(append(p.A.Dev.GIDs(), added)); err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(t, p.A.Dev, verbs.EventGIDChange, 0)
	if ev.Port != 1 || ev.QPNum != 0 {
		t.Errorf("event %v port %d qp %#x: want port 1, no QP", ev, ev.Port, ev.QPNum)
	}
	if g, err := p.A.Dev.GID(1); err != nil || g.GID != added.GID {
		t.Errorf("GID index 1 after the change: %v, %v; want %v", g, err, added.GID)
	}
	noEvent(t, p.B.Dev, verbs.EventGIDChange)

	pa, err := p.A.Dev.QueryPort(1)
	if err != nil {
		t.Fatal(err)
	}
	wantEINVAL(t, p.A.Dev.SetGIDs(make([]verbs.GIDEntry, pa.GIDTableLen+1)))
	noEvent(t, p.A.Dev, verbs.EventGIDChange)
	if n := len(p.A.Dev.GIDs()); n != 2 {
		t.Errorf("a refused SetGIDs changed the table: %d entries, want 2", n)
	}
}

// TestSendOnlyWithInvalidate: a SEND_WITH_INV that fits one packet (0, 1
// and path-MTU bytes) goes out as SEND_ONLY_WITH_INVALIDATE (opcode 0x17)
// carrying the rkey in its IETH. The rkey names a region registered with
// ibv_reg_mr, which no peer may invalidate (rxe_invalidate_mr refuses any
// but a fast-registration MR): the request is refused (wantInvRefused)
// and the rkey keeps working.
func TestSendOnlyWithInvalidate(t *testing.T) {
	for _, net := range verbstest.Networks {
		for _, n := range []int{0, 1, 1024} {
			t.Run(fmt.Sprintf("%s/%d", net, n), func(t *testing.T) {
				var tap *tapLink
				p := buildPair(t, pairConfig{Options: verbstest.Options{Net: net, MTU: verbs.MTU1024}, Wrap: tapSide(1, &tap)})
				target := newCanary(t, p.B.PD, 256, allRemote)
				tdata := target.set(0, randBytes(256, 17))
				dst := newCanary(t, p.B.PD, n+16, verbs.AccessLocalWrite)
				data := randBytes(n, 18)
				src := source(t, p.A.PD, data)
				local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
				rkey := target.mr.RKey()
				// The rkey works before.
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{local.mr.SGE(0, 64)}, RemoteAddr: target.addr(0), RKey: rkey})
				wantOK(t, p.A.CQ, 1, verbs.WCRDMARead)
				local.check(t, piece{0, tdata.data[:64]})

				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{dst.mr.SGE(0, n+16)}})
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
					SGList: sgl(src, n), InvalidateRKey: rkey})
				wantInvRefused(t, p, 2, rkey)
				dst.check(t, piece{0, data})

				// On the wire: one packet, SEND_ONLY_WITH_INVALIDATE.
				var sends []tapped
				for _, tp := range tap.all() {
					if tp.rx && tp.bth().Opcode().Transport() == wire.TransportRC && tp.bth().Opcode() != wire.TransportRC|wire.OpAcknowledge &&
						tp.bth().Opcode() != wire.TransportRC|wire.OpReadRequest {
						sends = append(sends, tp)
					}
				}
				if len(sends) != 1 {
					t.Fatalf("%d SEND packets reached the responder, want 1", len(sends))
				}
				pk := sends[0].transport(t)
				const sendOnlyWithInv = 0x17 // IBTA Table 35: RC SEND Only with Invalidate
				if op := pk.Opcode(); op != sendOnlyWithInv {
					t.Errorf("opcode %#02x (%v), want 0x17 RC SEND_ONLY_WITH_INVALIDATE", uint8(op), op)
				}
				if ieth := pk.IETH(); ieth == nil || ieth.Value() != rkey {
					t.Errorf("IETH % x, want rkey %#x", []byte(ieth), rkey)
				}
				if got := pk.Payload(); !bytes.Equal(got, data) {
					t.Errorf("payload of %d bytes, want the %d sent", len(got), n)
				}
				if !pk.BTH().AckReq() {
					t.Error("the only packet of a message has no AckReq")
				}

				// The rkey still works (on a new connection: these QPs are in ERR).
				a, _ := freshRC(t, p)
				mustPostSend(t, a.qp, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{local.mr.SGE(0, 64)}, RemoteAddr: target.addr(0), RKey: rkey})
				wantOK(t, a.cq, 3, verbs.WCRDMARead)
				target.check(t, tdata)
				local.check(t, piece{0, tdata.data[:64]})
			})
		}
	}
}

// TestGSISendWithImm: QP1 sends SEND_WITH_IMM to QP1: the wire carries UD
// SEND_ONLY_WITH_IMMEDIATE to QP 1 with the GSI Q_Key and the immediate,
// and the receive reports WITH_GRH|WITH_IMM, the immediate, src_qp 1.
func TestGSISendWithImm(t *testing.T) {
	for _, net := range verbstest.Networks {
		t.Run(net, func(t *testing.T) {
			var tap *tapLink
			p := buildPair(t, pairConfig{Options: verbstest.Options{Type: verbs.UD, Net: net}, Wrap: tapSide(1, &tap)})
			var gsi [2]*verbs.QP
			for i, s := range []*verbstest.Side{&p.A, &p.B} {
				qp, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.GSI, SendCQ: s.CQ, RecvCQ: s.RCQ,
					Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				if err := verbstest.ConnectQP(qp, 0, netip.Addr{}, 0, p.Opts); err != nil {
					t.Fatal(err)
				}
				gsi[i] = qp
			}
			const n, imm = 256, 0x8badf00d
			mad := randBytes(n, 5)
			dst := newCanary(t, p.B.PD, 40+n, verbs.AccessLocalWrite)
			mustPostRecv(t, gsi[1], verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 40+n)}})
			wr := udTo(t, p, verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: imm, Flags: verbs.SendSignaled,
				SGList: sgl(source(t, p.A.PD, mad), n)})
			wr.RemoteQPN, wr.RemoteQKey = 1, verbs.GSIQKey
			mustPostSend(t, gsi[0], wr)
			wantOK(t, p.A.CQ, 1, verbs.WCSend)
			rwc := wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
			if rwc.Flags != verbs.WCWithGRH|verbs.WCWithImm || rwc.ImmData != imm || rwc.SrcQP != 1 || rwc.QPNum != 1 || rwc.ByteLen != 40+n {
				t.Errorf("GSI receive %v flags %#x imm %#x src_qp %d; want WITH_GRH|WITH_IMM, imm %#x, src_qp 1, qp 1, byte_len %d",
					&rwc, rwc.Flags, rwc.ImmData, rwc.SrcQP, imm, 40+n)
			}
			checkGRH(t, net, dst.region()[:40], p.A.GID.GID, p.B.GID.GID, n, 4, true)
			dst.check(t, piece{0, dst.region()[:40]}, piece{40, mad})

			got := tap.filter(true, wire.OpcodeUDSendOnlyWithImmediate)
			if len(got) != 1 {
				t.Fatalf("%d UD SEND_ONLY_WITH_IMMEDIATE packets reached B, want 1", len(got))
			}
			pk := got[0].transport(t)
			if d := pk.DETH(); pk.BTH().DestQP() != 1 || d.QKey() != verbs.GSIQKey || d.SrcQP() != 1 {
				t.Errorf("dest QP %d, DETH Q_Key %#x src QP %d; want 1, %#x, 1", pk.BTH().DestQP(), d.QKey(), d.SrcQP(), uint32(verbs.GSIQKey))
			}
			if v := pk.ImmDt(); v == nil || v.Value() != imm {
				t.Errorf("ImmDt % x, want %#x", []byte(v), uint32(imm))
			}
		})
	}
}

// localACKTimeout is the IBTA local ACK timeout for the QP attribute
// timeout, computed here from its definition: 4.096 µs × 2^timeout
// (§11.2.4.2, C9-140).
func localACKTimeout(timeout uint8) time.Duration {
	return time.Duration(4096*(uint64(1)<<timeout)) * time.Nanosecond
}

// TestRetransmitTimerExact: in virtual time, a peer that never answers
// gets the first transmission and retry_cnt retransmissions exactly one
// local ACK timeout (4.096 µs × 2^timeout) apart, and
// IBV_WC_RETRY_EXC_ERR exactly (retry_cnt + 1) timeouts after the first
// transmission. When the peer did answer before, over a path whose round
// trip is slower than that, the timer is four smoothed round trips instead
// (comp.go's retransTimeout: max(4.096 µs × 2^timeout, 4 × SRTT)).
func TestRetransmitTimerExact(t *testing.T) {
	type tc struct {
		timeout, retryCnt uint8
		delay             time.Duration // one-way fabric latency before the peer dies
	}
	var cases []tc
	for _, to := range []uint8{8, 10, 12} {
		for _, rc := range []uint8{0, 3, 7} { // 7 never heard: 7 retries, not forever
			cases = append(cases, tc{timeout: to, retryCnt: rc})
		}
	}
	cases = append(cases,
		tc{timeout: 10, retryCnt: 3, delay: 100 * time.Microsecond}, // 4 × 200 µs < 4.19 ms: the attribute rules
		tc{timeout: 10, retryCnt: 2, delay: time.Millisecond},       // 4 × 2 ms > 4.19 ms: the round trip rules
	)
	for _, c := range cases {
		name := fmt.Sprintf("timeout=%d/retry_cnt=%d", c.timeout, c.retryCnt)
		if c.delay > 0 {
			name += fmt.Sprintf("/answered-before/latency=%v", c.delay)
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var tap *tapLink
				p := buildPair(t, pairConfig{Options: verbstest.Options{
					Tune: func(rtr, rts *verbs.QPAttr) { rts.Timeout, rts.RetryCnt = c.timeout, c.retryCnt },
				}, Wrap: tapSide(0, &tap)})
				d := localACKTimeout(c.timeout)
				src := source(t, p.A.PD, randBytes(100, 6))
				if c.delay > 0 {
					for _, port := range []*fabric.Port{p.A.Port, p.B.Port} {
						if err := port.SetFaults(fabric.Faults{Delay: c.delay}); err != nil {
							t.Fatal(err)
						}
					}
					// One exchange takes one round-trip sample: SRTT = 2 × delay exactly.
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: sgl(source(t, p.B.PD, make([]byte, 100)), 100)})
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
					wantOK(t, p.A.CQ, 1, verbs.WCSend)
					// Karn's rule: only a first transmission answered
					// before its timeout gives a sample.
					if rtt := 2 * c.delay; rtt >= d {
						t.Fatalf("round trip %v ≥ the timeout %v: no sample could be taken", rtt, d)
					}
					if k := len(tap.filter(false, wire.OpcodeRCSendOnly)); k != 1 {
						t.Fatalf("the first SEND went out %d times, want once", k)
					}
					d = max(d, 4*2*c.delay)
				}
				p.A.Port.SetFaults(fabric.Faults{Loss: 1}) // dead from now on
				psn := p.A.QP.Info().SQPSN                 // the PSN the SEND will carry
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
				wc := poll(t, p.A.CQ)
				failed := time.Now()
				want(t, wc, verbs.WCRetryExcErr, 2)

				var tx []time.Time
				for _, tp := range tap.filter(false, wire.OpcodeRCSendOnly) {
					if tp.bth().PSN() == psn {
						tx = append(tx, tp.at)
					}
				}
				if len(tx) != int(c.retryCnt)+1 {
					t.Fatalf("the SEND went out %d times, want 1 + retry_cnt %d", len(tx), c.retryCnt)
				}
				for i := 1; i < len(tx); i++ {
					if gap := tx[i].Sub(tx[i-1]); gap != d {
						t.Errorf("transmission %d came %v after the one before, want exactly %v", i, gap, d)
					}
				}
				if el, want := failed.Sub(tx[0]), time.Duration(c.retryCnt+1)*d; el != want {
					t.Errorf("IBV_WC_RETRY_EXC_ERR %v after the first transmission, want exactly (retry_cnt %d + 1) × %v = %v",
						el, c.retryCnt, d, want)
				}
				// The words say how long it waited between tries: the
				// timer's wait, 4 × SRTT when that ruled.
				if c.delay == 0 {
					wantWord(t, "Detail", wc.Detail, fmt.Sprintf("%d retransmissions", c.retryCnt))
				} else {
					wantWord(t, "Detail", wc.Detail, fmt.Sprintf("%d timeouts", c.retryCnt+1))
				}
				wantWord(t, "Detail", wc.Detail, d.String())
				t.Logf("Detail: %s", wc.Detail)
			})
		})
	}
}

// TestRemoteAccessErrorNamesRange: IBV_WC_REM_ACCESS_ERR's Detail names
// the rkey and the range that failed: its address and its length.
func TestRemoteAccessErrorNamesRange(t *testing.T) {
	const regionLen = 4096
	cases := []struct {
		name string
		wr   func(remote *canary, src, local *verbs.MR) verbs.SendWR
	}{
		{"write/past-end", func(remote *canary, src, _ *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 3000), RemoteAddr: remote.addr(regionLen - 2999), RKey: remote.mr.RKey()}
		}},
		{"write/unknown-rkey", func(remote *canary, src, _ *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: sgl(src, 100), RemoteAddr: remote.addr(0), RKey: 0xDEADBE00}
		}},
		{"read/below-start", func(remote *canary, _, local *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: sgl(local, 100), RemoteAddr: remote.addr(0) - 1, RKey: remote.mr.RKey()}
		}},
		{"fetch_add/past-end", func(remote *canary, _, local *verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGList: sgl(local, 8), RemoteAddr: remote.addr(regionLen), RKey: remote.mr.RKey(), CompareAdd: 1}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			remote := newCanary(t, p.B.PD, regionLen, allRemote)
			src := source(t, p.A.PD, randBytes(3000, 7))
			local := newCanary(t, p.A.PD, 100, verbs.AccessLocalWrite)
			wr := c.wr(remote, src, local.mr)
			wr.WRID, wr.Flags = 1, verbs.SendSignaled
			mustPostSend(t, p.A.QP, wr)
			wc := poll(t, p.A.CQ)
			want(t, wc, verbs.WCRemAccessErr, 1)
			var n uint64
			for _, s := range wr.SGList {
				n += uint64(s.Length)
			}
			wantWord(t, "Detail", wc.Detail, fmt.Sprintf("%#x", wr.RKey))
			wantWord(t, "Detail", wc.Detail, fmt.Sprintf("%#x", wr.RemoteAddr))
			// The length, as a length or as the range's end.
			if !hasWord(wc.Detail, fmt.Sprintf("length %d", n)) && !hasWord(wc.Detail, fmt.Sprintf("%d bytes", n)) &&
				!hasWord(wc.Detail, fmt.Sprintf("%#x", wr.RemoteAddr+n)) {
				t.Errorf("Detail %q does not give the length %d of the range", wc.Detail, n)
			}
			remote.check(t)
			local.check(t)
		})
	}
}

// hasWord reports whether w occurs in s not as part of a longer word
// (0x10 is not in 0x100).
func hasWord(s, w string) bool {
	return regexp.MustCompile(`(^|[^0-9A-Za-z])` + regexp.QuoteMeta(w) + `($|[^0-9A-Za-z])`).MatchString(s)
}

func wantWord(t testing.TB, what, s, w string) {
	t.Helper()
	if !hasWord(s, w) {
		t.Errorf("%s %q does not mention %q", what, s, w)
	}
}

// TestAHTrafficClassFlowLabelHopLimit: an address vector's traffic class
// 0x68, flow label 0x12345 and hop limit 7 reach the wire, for UD (the
// AH) and RC (the QP's AV, in both directions: requests and ACKs):
// RoCE v2/IPv4: TOS and TTL (no flow label field; RC's UDP source port is
// derived from it, as Linux's rdma_get_udp_sport); v2/IPv6: traffic class,
// flow label and hop limit, and RC's UDP source port; v1: the GRH's. A UD
// receive's 40-byte GRH reports them as the wire carried them.
func TestAHTrafficClassFlowLabelHopLimit(t *testing.T) {
	const tclass, flow, hop = 0x68, 0x12345, 7
	grh := func(g *verbs.GlobalRoute) { g.TrafficClass, g.FlowLabel, g.HopLimit = tclass, flow, hop }
	for _, net := range verbstest.Networks {
		for _, typ := range []verbs.QPType{verbs.UD, verbs.RC} {
			t.Run(net+"/"+typ.String(), func(t *testing.T) {
				var taps [2]*tapLink
				p := buildPair(t, pairConfig{Options: verbstest.Options{Type: typ, Net: net,
					Tune: func(rtr, _ *verbs.QPAttr) { grh(&rtr.AH.GRH) }}, Wrap: tapBoth(&taps)})
				const n = 200
				data := randBytes(n, 8)
				src := source(t, p.A.PD, data)
				dst := newCanary(t, p.B.PD, 40+n, verbs.AccessLocalWrite)
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 40+n)}})
				if typ == verbs.UD {
					ah, err := p.A.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: p.B.GID.GID,
						SGIDIndex: p.A.GIDIndex, TrafficClass: tclass, FlowLabel: flow, HopLimit: hop}})
					if err != nil {
						t.Fatal(err)
					}
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, n),
						AH: ah, RemoteQPN: p.B.QP.Num(), RemoteQKey: udQKey})
				} else {
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, n)})
				}
				wantOK(t, p.A.CQ, 1, verbs.WCSend)
				wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
				if typ == verbs.UD {
					dst.check(t, piece{0, dst.region()[:40]}, piece{40, data})
					checkNetHeader(t, net, "the UD receive's GRH", dst.region()[:40], tclass, flow, hop)
				} else {
					dst.check(t, piece{0, data})
				}

				// What crossed the fabric: A's request at B, and for RC B's ACK at A.
				dirs := []struct {
					tap  *tapLink
					what string
				}{{taps[1], "request"}}
				if typ == verbs.RC {
					dirs = append(dirs, struct {
						tap  *tapLink
						what string
					}{taps[0], "ACK"})
				}
				for _, dir := range dirs {
					pkts := dir.tap.filter(true, wire.OpcodeUDSendOnly, wire.OpcodeRCSendOnly, wire.OpcodeRCAcknowledge)
					if len(pkts) == 0 {
						t.Fatalf("no %s packet crossed the fabric", dir.what)
					}
					for _, tp := range pkts {
						pk := tp.wire(t)
						checkFrame(t, net, dir.what, pk, tclass, flow, hop)
						if a := tp.addr; a.TrafficClass != tclass || a.HopLimit != hop || net != verbstest.NetV2IPv4 && a.FlowLabel != flow {
							t.Errorf("%s: the link delivered traffic class %#x flow label %#x hop limit %d", dir.what, a.TrafficClass, a.FlowLabel, a.HopLimit)
						}
						if typ == verbs.RC && net != verbstest.NetV1 {
							if sp, want := pk.UDP().SrcPort(), wire.FlowLabelToUDPSport(flow); sp != want {
								t.Errorf("%s: UDP source port %d, want %d (from flow label %#x)", dir.what, sp, want, flow)
							}
						}
					}
				}
			})
		}
	}
}

// checkFrame checks the network header of a frame as it crossed the fabric.
func checkFrame(t *testing.T, net, what string, pk *wire.Packet, tclass uint8, flow uint32, hop uint8) {
	t.Helper()
	switch net {
	case verbstest.NetV2IPv4:
		ip := pk.IPv4()
		if ip == nil {
			t.Fatalf("%s: no IPv4 header", what)
		}
		if ip.TOS() != tclass || ip.TTL() != hop {
			t.Errorf("%s: IPv4 TOS %#x TTL %d, want %#x %d", what, ip.TOS(), ip.TTL(), tclass, hop)
		}
	case verbstest.NetV2IPv6:
		ip := pk.IPv6()
		if ip == nil {
			t.Fatalf("%s: no IPv6 header", what)
		}
		if ip.TrafficClass() != tclass || ip.FlowLabel() != flow || ip.HopLimit() != hop {
			t.Errorf("%s: IPv6 traffic class %#x flow label %#x hop limit %d, want %#x %#x %d", what,
				ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit(), tclass, flow, hop)
		}
	case verbstest.NetV1:
		g := pk.GRH()
		if g == nil {
			t.Fatalf("%s: no GRH", what)
		}
		if g.TrafficClass() != tclass || g.FlowLabel() != flow || g.HopLimit() != hop {
			t.Errorf("%s: GRH traffic class %#x flow label %#x hop limit %d, want %#x %#x %d", what,
				g.TrafficClass(), g.FlowLabel(), g.HopLimit(), tclass, flow, hop)
		}
	}
}

// checkNetHeader checks the 40 bytes ibverbs puts before a UD receive:
// RoCE v2/IPv4 the IPv4 header in bytes 20..39, else the IPv6 header or GRH.
func checkNetHeader(t *testing.T, net, what string, g []byte, tclass uint8, flow uint32, hop uint8) {
	t.Helper()
	if net == verbstest.NetV2IPv4 {
		ip := wire.IPv4(g[20:40])
		if ip.TOS() != tclass || ip.TTL() != hop {
			t.Errorf("%s: IPv4 TOS %#x TTL %d, want %#x %d", what, ip.TOS(), ip.TTL(), tclass, hop)
		}
		return
	}
	ip := wire.IPv6(g)
	if ip.TrafficClass() != tclass || ip.FlowLabel() != flow || ip.HopLimit() != hop {
		t.Errorf("%s: traffic class %#x flow label %#x hop limit %d, want %#x %#x %d", what,
			ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit(), tclass, flow, hop)
	}
}
