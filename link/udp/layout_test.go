package udp

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// writeImmBatch is an RDMA WRITE WITH IMMEDIATE of 64 KiB as the engine
// sends it at path MTU 4096: FIRST with a RETH (4128 bytes), 14 MIDDLEs
// (4112), LAST with the ImmDt (4116). Sent as one batch it leaves as three
// GSO messages of 1, 14 and 1 segments.
func writeImmBatch(headroom int, a link.Addr, psn0 wire.PSN) []link.Packet {
	const n = 16
	var pkts []link.Packet
	for i := range n {
		psn := psn0 + wire.PSN(i)
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpWriteMiddle, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn}}
		switch i {
		case 0:
			f.BTH.Opcode = wire.TransportRC | wire.OpWriteFirst
			f.Ext.RETH = wire.RETHFields{VA: 0x1000, RKey: 7, DMALength: n * 4096}
		case n - 1:
			f.BTH.Opcode = wire.TransportRC | wire.OpWriteLastWithImmediate
			f.Ext.ImmDt = uint32(psn)
		}
		f.Payload = bytes.Repeat([]byte{byte(psn), byte(psn >> 8)}, 2048)
		pkts = append(pkts, build(headroom, &f, a))
	}
	return pkts
}

// layoutPair is a sender and a privileged receiver on a veth pair, with
// what the receiver's AF_PACKET socket has queued counted, so that a test
// reads only once every message it sent is there (no timing).
type layoutPair struct {
	t      *testing.T
	a, b   *Link
	addr   link.Addr
	queued uint64 // messages the receiving socket took, as PACKET_STATISTICS counts them
	sent   uint64 // GSO messages sent
	want   []link.Packet
}

func newLayoutPair(t *testing.T) *layoutPair {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	lp := &layoutPair{t: t, a: openOn(t, ha, false), b: openOn(t, hb, true)}
	testenv.Require(t, lp.a.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	lp.addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	return lp
}

// send sends pkts as one batch, which leaves as msgs GSO messages.
func (lp *layoutPair) send(pkts []link.Packet, msgs int) {
	lp.t.Helper()
	if n, err := lp.a.Send(pkts); err != nil || n != len(pkts) {
		lp.t.Fatalf("Send = %d, %v", n, err)
	}
	lp.want = append(lp.want, pkts...)
	lp.sent += uint64(msgs)
}

// settle waits until the receiving socket holds every message sent.
func (lp *layoutPair) settle() {
	lp.t.Helper()
	ok := testenv.Poll(testenv.Slow, func() bool {
		lp.b.raw.rc.Control(func(fd uintptr) {
			// Reading resets the kernel's counts; the link samples them
			// only in a read, and none runs meanwhile.
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				lp.queued += uint64(st.Packets)
				if st.Drops > 0 {
					lp.t.Errorf("the receiving socket dropped %d messages", st.Drops)
				}
			}
		})
		return lp.queued >= lp.sent
	})
	if !ok {
		lp.t.Fatalf("the receiving socket took %d of %d messages", lp.queued, lp.sent)
	}
}

// recv makes one Recv with nbuf buffers and checks that what it returns
// is what was sent next, in order.
func (lp *layoutPair) recv(nbuf int) int {
	lp.t.Helper()
	bufs := linktest.NewBuffers(nbuf)
	n, err := lp.b.Recv(bufs)
	if err != nil {
		lp.t.Fatal(err)
	}
	for i := range n {
		if len(lp.want) == 0 {
			lp.t.Fatalf("Recv returned %d packets, %d more than sent", n, n-i)
		}
		got, w := bufs[i], lp.want[0]
		if !bytes.Equal(got.Transport()[:got.Len-wire.ICRCLen], w.Transport()[:w.Len-wire.ICRCLen]) {
			lp.t.Fatalf("packet %d of the read differs (%d bytes, want %d)", i, got.Len, w.Len)
		}
		lp.want = lp.want[1:]
	}
	return n
}

// counters are the receiver's in-place, copied and queued tallies.
func (lp *layoutPair) counters() [3]uint64 {
	r := &lp.b.rx
	return [3]uint64{r.nInPlace, r.nCopied, r.nQueued}
}

// queueWriteImms warms the layout, queues n 64 KiB WRITEs WITH IMMEDIATE
// at the receiver, and returns the placement counters before they are read.
func (lp *layoutPair) queueWriteImms(n int) [3]uint64 {
	psn := wire.PSN(100)
	lp.warm(&psn)
	for range n {
		lp.send(writeImmBatch(lp.a.Headroom(), lp.addr, psn), 3)
		psn += 16
	}
	lp.settle()
	return lp.counters()
}

// warm sends four WRITEs WITH IMMEDIATE and reads them, so that the
// receiver has seen the traffic's shape.
func (lp *layoutPair) warm(psn *wire.PSN) {
	lp.t.Helper()
	for range 4 {
		lp.send(writeImmBatch(lp.a.Headroom(), lp.addr, *psn), 3)
		*psn += 16
	}
	lp.settle()
	for len(lp.want) > 0 {
		lp.recv(64)
	}
}

// A receiver reading 64 KiB WRITEs WITH IMMEDIATE (GSO messages of 1, 14
// and 1 segments, IBTA's FIRST, MIDDLEs and LAST with its ImmDt) with 64
// buffers takes four of them, 64 packets, in one recvmmsg, every segment
// where the kernel put it. Reserving 16 buffers a message (as many as a
// message of segment size 4112 can bring) took four messages, 17 packets
// at most, a read: the third GSO message's whole cost to goroce.
func TestRecvLayoutFollowsWriteImm(t *testing.T) {
	lp := newLayoutPair(t)
	c0 := lp.queueWriteImms(4)
	if n := lp.recv(64); n != 64 {
		t.Errorf("one Recv with 64 buffers took %d packets of four queued WRITEs WITH IMMEDIATE, want 64", n)
	}
	if c := lp.counters(); c[0]-c0[0] != 64 || c[1] != c0[1] || c[2] != c0[2] {
		t.Errorf("in place %d, copied %d, queued %d: want 64 in place", c[0]-c0[0], c[1]-c0[1], c[2]-c0[2])
	}
}

// A read that ends inside a WRITE WITH IMMEDIATE (40 buffers: two whole
// ones and the next one's FIRST) leaves the next read to start at its
// MIDDLEs; the layout follows the pattern from there, and every segment
// still lands in place.
func TestRecvLayoutKeepsPhase(t *testing.T) {
	lp := newLayoutPair(t)
	c0 := lp.queueWriteImms(4)
	n1 := lp.recv(40)
	n2 := lp.recv(64)
	if n1 != 33 || n2 != 31 {
		t.Errorf("Recv with 40 then 64 buffers took %d and %d packets, want 33 (two WRITEs WITH IMMEDIATE and a FIRST) and 31", n1, n2)
	}
	if c := lp.counters(); c[0]-c0[0] != 64 || c[1] != c0[1] || c[2] != c0[2] {
		t.Errorf("in place %d, copied %d, queued %d: want 64 in place", c[0]-c0[0], c[1]-c0[1], c[2]-c0[2])
	}
}

// When the traffic breaks the pattern (an RDMA WRITE, two GSO messages of
// 1 and 15, among WRITEs WITH IMMEDIATE), messages arrive with more
// segments than their place in the layout reserved; their extra segments
// are copied into buffers that later messages, which brought fewer than
// reserved, left unwritten, and everything reaches the caller in order.
// Only what no buffer is left for waits in the queue: here two segments, as
// each LAST with its ImmDt (4116 bytes) spills 4 bytes into a second
// buffer, which it cannot lend before it is read. Had the extra segments
// only the read's unused tail to go to, the first read would end at the
// first mismatch but one (18 packets) and queue the rest.
func TestRecvLayoutAbsorbsMismatch(t *testing.T) {
	lp := newLayoutPair(t)
	psn := wire.PSN(100)
	lp.warm(&psn)
	lp.send(writeBatch(lp.a.Headroom(), lp.addr, psn, 16, 0), 2)
	psn += 16
	for range 3 {
		lp.send(writeImmBatch(lp.a.Headroom(), lp.addr, psn), 3)
		psn += 16
	}
	lp.settle()
	c0 := lp.counters()
	if n := lp.recv(64); n < 48 {
		t.Errorf("one Recv with 64 buffers took %d packets of 64 queued, want more than three WRITEs WITH IMMEDIATE's 48", n)
	}
	for len(lp.want) > 0 {
		lp.recv(64)
	}
	c := lp.counters()
	t.Logf("in place %d, copied %d, queued %d", c[0]-c0[0], c[1]-c0[1], c[2]-c0[2])
	if c[0]-c0[0]+c[1]-c0[1]+c[2]-c0[2] != 64 {
		t.Errorf("in place %d, copied %d, queued %d: want 64 in all", c[0]-c0[0], c[1]-c0[1], c[2]-c0[2])
	}
	// The next WRITEs WITH IMMEDIATE land in place again once the pattern
	// is back (the layout reserves 16 a message until it is).
	for range 8 {
		lp.send(writeImmBatch(lp.a.Headroom(), lp.addr, psn), 3)
		psn += 16
	}
	lp.settle()
	for len(lp.want) > 0 {
		lp.recv(64)
	}
	for range 4 {
		lp.send(writeImmBatch(lp.a.Headroom(), lp.addr, psn), 3)
		psn += 16
	}
	lp.settle()
	c0 = lp.counters()
	if n := lp.recv(64); n != 64 {
		t.Errorf("after the pattern returned, one Recv took %d packets, want 64", n)
	}
	if c := lp.counters(); c[0]-c0[0] != 64 {
		t.Errorf("after the pattern returned: in place %d, copied %d, queued %d", c[0]-c0[0], c[1]-c0[1], c[2]-c0[2])
	}
}

// The plan reads the period of the latest messages' segment counts and
// continues it from where the last read ended; with no short period it
// reserves for each message as many buffers as segment size G allows.
func TestRecvLayoutCounts(t *testing.T) {
	var r rxState
	r.init(64, true, nil)
	r.g = 4112
	for range 4 {
		r.record(1)
		r.record(14)
		r.record(1)
	}
	m := r.counts(64, 64)
	want := slices.Repeat([]int{1, 14, 1}, 4)
	if !slices.Equal(r.want[:m], want) {
		t.Errorf("after 1, 14, 1 ×4: plan %v, want %v", r.want[:m], want)
	}
	r.record(1) // the next read starts at the MIDDLEs
	m = r.counts(64, 64)
	want = slices.Repeat([]int{14, 1, 1}, 4)
	if !slices.Equal(r.want[:m], want) {
		t.Errorf("one message on: plan %v, want %v", r.want[:m], want)
	}
	for _, c := range []int{3, 9, 1, 7, 2, 15, 5, 6, 4, 11, 8, 13} {
		r.record(c)
	}
	if m = r.counts(64, 64); m != 4 || !slices.Equal(r.want[:m], []int{16, 16, 16, 16}) {
		t.Errorf("no pattern: plan %v, want 16 ×4", r.want[:m])
	}
	r.g = 0
	if m = r.counts(64, 64); m != 64 || r.want[0] != 1 {
		t.Errorf("single datagrams: %d messages of %d, want 64 of 1", m, r.want[0])
	}
}

// TestPeriodRun checks period's shortcut for a repeated count (rxState.same)
// against its search, over runs of counts that repeat, alternate and
// change, across the history ring's wrap.
func TestPeriodRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var r rxState
	shortcuts := 0
	for i := range 5000 {
		var c int
		switch (i / 40) % 4 {
		case 0:
			c = 2 // one count repeated
		case 1:
			c = 1 + i%2 // period 2
		case 2:
			c = 1 + rng.IntN(3) // no pattern
		default:
			c = 300 // above 255: recorded as 255
		}
		r.record(c)
		got := r.period()
		same := r.same
		r.same = 0 // the search alone
		want := r.period()
		r.same = same
		if got != want {
			t.Fatalf("after %d counts (last %d, same %d): period %d, the search says %d", i+1, c, same, got, want)
		}
		if same >= 1+minRepeat {
			shortcuts++
		}
	}
	if shortcuts == 0 {
		t.Fatal("the shortcut never applied")
	}
}
