package verbs

import (
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// TestQueuesGrow: rings start at initialQueueSlots and double on demand up
// to max_send_wr/max_recv_wr (1024 in rcPair). Receives posted in two
// bursts, the second after some were consumed (so the ring wraps when it
// grows), and SENDs posted 100 at a time over a lossy fabric (so WQEs are
// live and retransmitted while the send ring grows) all complete in order
// with their data; a full queue still says ENOMEM at the limit.
func TestQueuesGrow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, _ := rcPair(t, RC, fabric.Faults{Loss: 0.05}, wire.RoCEv2)
		const total = 300
		rbuf := make([]byte, 16*total)
		rmr, err := b.pd.RegMR(rbuf, 1) // local write
		if err != nil {
			t.Fatal(err)
		}
		sbuf := make([]byte, 16*total)
		for i := range total {
			copy(sbuf[16*i:], fmt.Sprintf("message %7d", i))
		}
		smr, err := a.pd.RegMR(sbuf, 1)
		if err != nil {
			t.Fatal(err)
		}
		postRecvs := func(from, to int) {
			for i := from; i < to; i++ {
				if err := b.qp.PostRecv(RecvWR{WRID: uint64(i), SGList: []SGE{rmr.SGE(16*i, 16)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		postSends := func(from, to int) {
			for i := from; i < to; i++ {
				if err := a.qp.PostSend(SendWR{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGList: []SGE{smr.SGE(16*i, 16)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		sent, recvd := 0, 0
		expect := func(n int) {
			for ; sent < n; sent++ {
				if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.WRID != uint64(sent) {
					t.Fatalf("send completion %d: %v", sent, &wc)
				}
			}
			for ; recvd < n; recvd++ {
				if wc := poll(t, b.cq); wc.Status != WCSuccess || wc.WRID != uint64(recvd) || wc.ByteLen != 16 {
					t.Fatalf("receive completion %d: %v", recvd, &wc)
				}
			}
		}
		postRecvs(0, 10)
		postSends(0, 5)
		expect(5)            // the receive ring's head is at 5 of 16
		postRecvs(10, total) // grows 16 → 32 → … → 512 from a wrapped ring
		for i := 5; i < total; i += 100 {
			postSends(i, min(i+100, total)) // while earlier SENDs may still be unacknowledged
		}
		expect(total)
		for i := range total {
			if got, want := string(rbuf[16*i:16*i+16]), string(sbuf[16*i:16*i+16]); got != want {
				t.Fatalf("message %d: got %q, want %q", i, got, want)
			}
		}
		if len(a.qp.sq.ring) > 512 || len(b.qp.rq.ring) > 512 {
			t.Errorf("rings grew to %d and %d slots for at most 300 WRs", len(a.qp.sq.ring), len(b.qp.rq.ring))
		}
		// The limit is max_recv_wr, not the ring's size.
		postRecvs(0, 1024)
		if err := b.qp.PostRecv(RecvWR{WRID: 9999, SGList: []SGE{rmr.SGE(0, 16)}}); err == nil {
			t.Error("post_recv beyond max_recv_wr 1024 succeeded")
		} else {
			t.Log(err)
		}
	})
}
