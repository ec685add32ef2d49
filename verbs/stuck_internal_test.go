package verbs

import (
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestResponseUpToHeadRunsRequester: a go-back-N retry whose window stops
// it inside the WQEs before a READ (or atomic) leaves that READ sent before
// the retry and not resent since. When a late response from the original
// transmission then acknowledges every WQE before the READ, the requester
// stands at the READ (head == cur: completeThrough skips what was
// acknowledged without being resent), and must send it again: nothing else
// would, as with head == cur the timer finds nothing outstanding and every
// response is ignored as stray. TestFaultsRCExactlyOnce/loss10 deadlocked
// in that state about once in a hundred runs (window 16, the head a READ
// or FETCH_ADD the responder had executed, no timer armed).
func TestResponseUpToHeadRunsRequester(t *testing.T) {
	for _, atomic := range []bool{false, true} {
		name := "read"
		if atomic {
			name = "atomic"
		}
		t.Run(name, func(t *testing.T) {
			e := newShareEnv(t)
			q := e.bulk
			const wlen = 10 * 4096 // 10 PSNs at path MTU 4096
			second := SendWR{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{e.mr.SGE(wlen, 4096)}, RemoteAddr: 0x10000, RKey: 0x1234}
			resp := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpReadResponseOnly, PKey: wire.DefaultPKey, DestQP: q.num, PSN: wire.PSN(0x800).Add(10)},
				Payload: make([]byte, 4096)}
			if atomic {
				second = SendWR{WRID: 2, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGList: []SGE{e.mr.SGE(wlen, 8)}, RemoteAddr: 0x10000, RKey: 0x1234, CompareAdd: 1}
				resp.BTH.Opcode, resp.Payload = wire.TransportRC|wire.OpAtomicAcknowledge, nil
				resp.Ext.AtomicAck = 41
			}
			resp.Ext.AETH = wire.AETHFields{Syndrome: wire.SyndromeACK, MSN: 2}
			err := q.PostSend(SendWR{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGList: []SGE{e.mr.SGE(0, wlen)}, RemoteAddr: 0x10000, RKey: 0x1234}, second)
			if err != nil {
				t.Fatal(err)
			}
			if n := e.lk.requests.Load(); n != 1 {
				t.Fatalf("%d requests of the second WR sent, want 1", n)
			}
			// The retry, with a window of 8 PSNs (what a NAK's halving of
			// 16 gives, cwnd.lost, set here directly since the floor is
			// 16): the WRITE's first 8 go again, and it stops there.
			out := getTxBatch(e.d)
			q.mu.Lock()
			q.req.win.n, q.req.win.ssthresh = 8, 8
			q.retry(out)
			q.mu.Unlock()
			putTxBatch(out)
			if n := e.lk.requests.Load(); n != 1 {
				t.Fatalf("the retry sent the second WR again (%d requests): the window did not stop it", n)
			}
			// The original's response arrives: it acknowledges the WRITE.
			e.deliver(&resp)
			if n := e.lk.requests.Load(); n != 2 {
				t.Fatalf("%d requests of the second WR sent after a response acknowledged the WRITE before it, want 2: "+
					"the requester stands at it and nothing will send it", n)
			}
			// The answer to the one resent completes it.
			e.deliver(&resp)
			wc := make([]WC, 4)
			n, _ := q.sendCQ.Poll(wc)
			if n != 2 || wc[0].WRID != 1 || wc[0].Status != WCSuccess || wc[1].WRID != 2 || wc[1].Status != WCSuccess {
				t.Fatalf("completions %v, want wr_id 1 and 2, IBV_WC_SUCCESS", wc[:n])
			}
		})
	}
}

// TestDuplicateOfPendingReadDropped: a duplicate of a READ whose
// responses still wait to be sent (behind the scheduler's turns) is
// answered by them: it is dropped, not executed again. Executed again,
// every go-back-N retry of the requester added another copy of its READs'
// responses to the queue, until a new READ found it full and the responder
// ended the connection with Invalid Request (TestPerfOverVeth's read, in
// CI).
func TestDuplicateOfPendingReadDropped(t *testing.T) {
	e := newShareEnv(t)
	q := e.bulk
	e.read(q)
	if n := q.resp.pend.rdAtomic; n != 1 {
		t.Fatalf("%d READs waiting after the first burst, want 1", n)
	}
	dropped := q.counters[DuplicateRequestDropped].Load()
	e.read(q) // the same request again: a retry
	if n := q.resp.pend.rdAtomic; n != 1 {
		t.Errorf("%d READs waiting after its duplicate, want 1: the duplicate was executed again", n)
	}
	if d := q.counters[DuplicateRequestDropped].Load() - dropped; d != 1 {
		t.Errorf("duplicate_request_dropped rose by %d, want 1", d)
	}
	// Once they are sent, a duplicate is a READ to execute again.
	e.d.drainSched()
	e.read(q)
	if n := q.resp.pend.rdAtomic; n != 1 {
		t.Errorf("%d READs waiting after a duplicate of a READ answered in full, want 1", n)
	}
}
