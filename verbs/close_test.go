package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// slowSend delays every Send, as a busy link does.
type slowSend struct{ link.Link }

func (s slowSend) Send(pkts []link.Packet) (int, error) {
	time.Sleep(15 * time.Millisecond)
	return s.Link.Send(pkts)
}

// TestCloseSendsTheLastACK: a responder that sees its receive completion
// and closes its device at once still sends the ACK for that SEND (seen
// in the lab: a 64 B pingpong client finished and exited before its last
// ACK left, and the server, having heard from it, retried forever).
func TestCloseSendsTheLastACK(t *testing.T) {
	wrapLink = func(i int, l link.Link) link.Link {
		if i == 1 {
			return slowSend{l}
		}
		return l
	}
	// A 1 s local ACK timeout, not rcPair's 4 ms: the SEND is the QP's
	// first message, and until a peer has answered, retry_cnt 7 is spent
	// (comp.go's spendRetry), so a loaded machine that delays the slow ACK
	// past 8 timeouts of 4 ms would fail the SEND for no fault of Close.
	// Without the last ACK the SEND still fails, after 8 s. (Not in
	// virtual time: Close waits on a mutex the slow Send holds, which
	// synctest does not count as durably blocked.)
	rcPairTimeout = 18
	defer func() { wrapLink, rcPairTimeout = nil, 10 }()
	a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
	defer a.dev.Close()
	rbuf := make([]byte, 64)
	rmr, err := b.pd.RegMR(rbuf, 1) // local write
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(RecvWR{WRID: 1, SGList: []SGE{rmr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("last")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	var wc [1]WC
	if n, err := b.cq.PollWait(ctx, wc[:]); err != nil || n != 1 || wc[0].Status != WCSuccess {
		t.Fatalf("receive: %d %v %v", n, err, &wc[0])
	}
	b.dev.Close() // at once, as a program that is done does
	n, err := a.cq.PollWait(ctx, wc[:])
	if err != nil || n != 1 || wc[0].Status != WCSuccess {
		t.Fatalf("the sender's completion after the responder closed: %d %v %v", n, err, &wc[0])
	}
}
