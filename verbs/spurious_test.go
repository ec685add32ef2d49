package verbs

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// TestSpuriousTimeoutResumes: a responder that runs late by more than the
// local ACK timeout (its receive path held, as a VM the host did not run)
// has every packet the requester sent; the requester's timer fires and its
// go-back-N resends the floor's worth. Once an ACK of a first transmission
// the retry had not resent arrives, the timeout was spurious, and the
// requester goes on from where the timeout found it: it does not resend,
// behind the originals' ACKs, every packet it had in flight. In the lab's
// VMs such a late responder saw 264–451 packets again, all duplicates.
// Every WRITE completes once and the bytes arrive.
func TestSpuriousTimeoutResumes(t *testing.T) {
	defer func(v uint8) { rcPairTimeout = v }(rcPairTimeout)
	rcPairTimeout = 13 // 33.6 ms
	a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
	const size = 16 << 10 // 16 packets at path MTU 1024
	from, to := make([]byte, size), make([]byte, size)
	for i := range from {
		from[i] = byte(i*7 + 3)
	}
	src, err := a.pd.RegMR(from, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := b.pd.RegMR(to, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	// Grow A's window past the floor: slow start doubles it per round trip.
	id := uint64(0)
	for range 8 {
		for range 16 {
			postWrite(t, a, id, src, dst)
			id++
		}
		for range 16 {
			if wc := poll(t, a.cq); wc.Status != WCSuccess {
				t.Fatalf("WRITE %d: %v", wc.WRID, wc.Status)
			}
		}
	}
	a.qp.mu.Lock()
	win := a.qp.req.win.size()
	a.qp.mu.Unlock()
	if win < 8*cwndFloor {
		t.Fatalf("A's window is %d PSNs after 128 WRITEs, want at least %d for this test", win, 8*cwndFloor)
	}
	dups0, retrans0, sent0 := b.qp.counters.Get(DuplicateRequest), a.qp.counters.Get(RetransPkts), a.qp.counters.Get(SentPkts)

	// B runs late: its receive path stands still while A sends what its
	// window allows and A's timer fires and resends.
	const late = 32 // 512 packets
	var inFlight uint64
	b.dev.Observe(func() {
		for range late {
			postWrite(t, a, id, src, dst)
			id++
		}
		if !testenv.Poll(testenv.Slow, func() bool { return a.qp.counters.Get(RetransPkts) > retrans0 }) {
			t.Error("A's timer never resent")
		}
		inFlight = a.qp.counters.Get(SentPkts) - sent0 - (a.qp.counters.Get(RetransPkts) - retrans0)
	})
	for range late {
		if wc := poll(t, a.cq); wc.Status != WCSuccess {
			t.Fatalf("WRITE %d after the late responder: %v", wc.WRID, wc.Status)
		}
	}
	dups, retrans := b.qp.counters.Get(DuplicateRequest)-dups0, a.qp.counters.Get(RetransPkts)-retrans0
	t.Logf("window %d PSNs, %d packets in flight when B stood still; A resent %d, B counted %d duplicates",
		win, inFlight, retrans, dups)
	if inFlight < 8*cwndFloor {
		t.Fatalf("only %d packets were in flight when A's timer fired; the test needs more than the floor's resend", inFlight)
	}
	if retrans > 4*cwndFloor || dups > retrans {
		t.Errorf("A resent %d packets (B: %d duplicates) of %d in flight; want at most %d: the floor's resend, and what went before the ACK that showed the timeout spurious",
			retrans, dups, inFlight, 4*cwndFloor)
	}
	var same bool
	b.dev.Observe(func() { same = bytes.Equal(from, to) })
	if !same {
		t.Error("B's region differs from A's")
	}
}
