package verbs

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// gatherRecv hands its device batches of exactly n packets, as a loaded
// link does when several messages arrive between two receives.
type gatherRecv struct {
	link.Link
	n int
}

func (g gatherRecv) Recv(pkts []link.Packet) (int, error) {
	got := 0
	for got < g.n && got < len(pkts) {
		k, err := g.Link.Recv(pkts[got:])
		if err != nil {
			return got, err
		}
		got += k
	}
	return got, nil
}

// ackLog records the PSN and MSN of every ACK its device receives.
type ackLog struct {
	link.Link
	mu   *sync.Mutex
	acks *[][2]uint32
}

func (l ackLog) Recv(pkts []link.Packet) (int, error) {
	k, err := l.Link.Recv(pkts)
	for i := range pkts[:k] {
		var p wire.Packet
		if p.ParseTransport(pkts[i].Transport(), pkts[i].Addr.Version) == nil && p.Opcode() == wire.OpcodeRCAcknowledge {
			l.mu.Lock()
			*l.acks = append(*l.acks, [2]uint32{uint32(p.BTH().PSN()), wire.AETH(pkts[i].Transport()[wire.BTHLen:]).MSN()})
			l.mu.Unlock()
		}
	}
	return k, err
}

// TestACKsCoalesce: eight SEND ONLYs (each asking for an ACK) that reach
// the responder in one batch are acknowledged by one ACK, of the last PSN
// and MSN, and the requester completes all eight from it.
func TestACKsCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		var mu sync.Mutex
		var acks [][2]uint32
		wrapLink = func(i int, l link.Link) link.Link {
			if i == 1 {
				return gatherRecv{l, n}
			}
			return ackLog{l, &mu, &acks}
		}
		// No retransmission may muddle the count: a 1 s local ACK timeout
		// (the race detector can slow a receive past rcPair's 4 ms).
		rcPairTimeout = 18
		defer func() { wrapLink, rcPairTimeout = nil, 10 }()
		a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
		rbuf := make([]byte, 64*n)
		rmr, err := b.pd.RegMR(rbuf, 1) // local write
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := b.qp.PostRecv(RecvWR{WRID: uint64(i), SGList: []SGE{rmr.SGE(64*i, 64)}}); err != nil {
				t.Fatal(err)
			}
		}
		sent0 := b.dev.Counters().Get(SentPkts)
		for i := range n {
			if err := a.qp.PostSend(SendWR{WRID: uint64(100 + i), Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("coalesce")}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.WRID != uint64(100+i) {
				t.Fatalf("send completion %d: %v", i, &wc)
			}
		}
		for i := range n {
			if wc := poll(t, b.cq); wc.Status != WCSuccess || wc.WRID != uint64(i) || wc.ByteLen != 8 {
				t.Fatalf("receive completion %d: %v", i, &wc)
			}
		}
		if got := b.dev.Counters().Get(SentPkts) - sent0; got != 1 {
			t.Errorf("the responder sent %d packets for %d SENDs in one batch, want 1 coalesced ACK", got, n)
		}
		mu.Lock()
		defer mu.Unlock()
		// The SQ PSN starts at 100 (rcPair); MSN counts the messages.
		if want := [][2]uint32{{100 + n - 1, n}}; len(acks) != 1 || acks[0] != want[0] {
			t.Errorf("ACKs received (PSN, MSN): %v, want %v", acks, want)
		}
	})
}
