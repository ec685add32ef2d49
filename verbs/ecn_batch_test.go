package verbs

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/wire"
)

// markLast marks the last packet of every batch its device receives
// Congestion Experienced, as a switch would have on the wire.
type markLast struct{ link.Link }

func (l markLast) Recv(pkts []link.Packet) (int, error) {
	k, err := l.Link.Recv(pkts)
	if k > 0 {
		pkts[k-1].Addr.TrafficClass |= ECNCE
	}
	return k, err
}

// opLog records the opcode of every packet its device receives, in order.
type opLog struct {
	link.Link
	mu  *sync.Mutex
	ops *[]wire.Opcode
}

func (l opLog) Recv(pkts []link.Packet) (int, error) {
	k, err := l.Link.Recv(pkts)
	for i := range pkts[:k] {
		var p wire.Packet
		if p.ParseTransport(pkts[i].Transport(), pkts[i].Addr.Version) == nil {
			l.mu.Lock()
			*l.ops = append(*l.ops, p.Opcode())
			l.mu.Unlock()
		}
	}
	return k, err
}

// TestCNPLeavesBeforeItsBatch: eight SENDs reach the responder in one
// batch, the last marked CE; the notification point's CNP leaves before
// the batch's ACK, not behind the other seven packets' work and their
// responses (ccFirst): the requester receives the CNP first, and its
// reaction point handles it.
func TestCNPLeavesBeforeItsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		var mu sync.Mutex
		var ops []wire.Opcode
		wrapLink = func(i int, l link.Link) link.Link {
			if i == 1 {
				return markLast{gatherRecv{l, n}}
			}
			return opLog{l, &mu, &ops}
		}
		rcPairTimeout = 18 // no retransmission muddles the order
		defer func() { wrapLink, rcPairTimeout = nil, 10 }()
		a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
		c := DefaultECNConfig()
		c.RPEnable = AllPriorities
		if err := a.dev.SetECN(1, c); err != nil {
			t.Fatal(err)
		}
		c = DefaultECNConfig()
		c.NPEnable = AllPriorities
		if err := b.dev.SetECN(1, c); err != nil {
			t.Fatal(err)
		}
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
		for i := range n {
			if err := a.qp.PostSend(SendWR{WRID: uint64(100 + i), Opcode: WRSend, Flags: SendSignaled | SendInline, InlineData: []byte("congest!")}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.WRID != uint64(100+i) {
				t.Fatalf("send completion %d: %v", i, &wc)
			}
		}
		synctest.Wait()
		if got := b.dev.Counters().Get(NPCNPSent); got != 1 {
			t.Fatalf("np_cnp_sent %d, want 1 (one packet marked CE)", got)
		}
		if got := a.qp.Counters().Get(RPCNPHandled); got != 1 {
			t.Errorf("rp_cnp_handled %d, want 1", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ops) < 2 || ops[0] != wire.OpcodeCNP {
			t.Errorf("the requester received %v; want the CNP first, before the batch's ACK", ops)
		}
	})
}

// cnpsLast gathers two packets a batch and puts the CNPs among them last,
// logging when they arrived: a batch in which a CNP follows a response.
type cnpsLast struct {
	link.Link
	mu    *sync.Mutex
	cnpAt *[]time.Time
}

func (l cnpsLast) Recv(pkts []link.Packet) (int, error) {
	k, err := gatherRecv{l.Link, 2}.Recv(pkts)
	cnp := func(pk *link.Packet) bool {
		t := pk.Transport()
		return len(t) > 0 && t[0] == byte(wire.OpcodeCNP)
	}
	slices.SortStableFunc(pkts[:k], func(x, y link.Packet) int {
		switch {
		case cnp(&x) && !cnp(&y):
			return 1
		case !cnp(&x) && cnp(&y):
			return -1
		}
		return 0
	})
	l.mu.Lock()
	for i := range pkts[:k] {
		if cnp(&pkts[i]) {
			*l.cnpAt = append(*l.cnpAt, time.Now())
		}
	}
	l.mu.Unlock()
	return k, err
}

// sendLog records when its device sent each SEND ONLY.
type sendLog struct {
	link.Link
	mu     *sync.Mutex
	sentAt *[]time.Time
}

func (l sendLog) Send(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	for i := range pkts {
		var p wire.Packet
		if p.ParseTransport(pkts[i].Transport(), pkts[i].Addr.Version) == nil && p.Opcode() == wire.OpcodeRCSendOnly {
			*l.sentAt = append(*l.sentAt, time.Now())
		}
	}
	l.mu.Unlock()
	return l.Link.Send(pkts)
}

// TestCNPCutsBeforeItsBatch: a READ's response and a CNP reach the
// requester in one batch, the CNP second; the response completes the READ
// and so releases a fenced SEND. The reaction point cuts the rate before
// the batch's response lets the requester send (ccFirst): the SEND leaves
// paced at the cut rate, after the CNP's arrival, not at the old rate in
// the same instant (virtual time).
func TestCNPCutsBeforeItsBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var cnpAt, sentAt []time.Time
		wrapLink = func(i int, l link.Link) link.Link {
			if i == 1 {
				return markLast{l}
			}
			return cnpsLast{sendLog{l, &mu, &sentAt}, &mu, &cnpAt}
		}
		rcPairTimeout = 18
		defer func() { wrapLink, rcPairTimeout = nil, 10 }()
		a, b, _ := rcPair(t, RC, fabric.Faults{}, wire.RoCEv2)
		c := DefaultECNConfig()
		c.RPEnable = AllPriorities
		c.LineRate = 1 // Mb/s: a packet's tokens take microseconds
		if err := a.dev.SetECN(1, c); err != nil {
			t.Fatal(err)
		}
		c = DefaultECNConfig()
		c.NPEnable = AllPriorities
		if err := b.dev.SetECN(1, c); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		amr, err := a.pd.RegMR(buf, mem.LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		bmr, err := b.pd.RegMR(make([]byte, 128), mem.LocalWrite|mem.RemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.qp.PostRecv(RecvWR{WRID: 1, SGList: []SGE{bmr.SGE(64, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(SendWR{WRID: 10, Opcode: WRRDMARead, Flags: SendSignaled, SGList: []SGE{amr.SGE(0, 64)},
			RemoteAddr: bmr.Addr(), RKey: bmr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(SendWR{WRID: 11, Opcode: WRSend, Flags: SendSignaled | SendInline | SendFence, InlineData: []byte("fenced")}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []uint64{10, 11} {
			if wc := poll(t, a.cq); wc.Status != WCSuccess || wc.WRID != id {
				t.Fatalf("completion %d: %v", id, &wc)
			}
		}
		synctest.Wait()
		if got := a.qp.Counters().Get(RPCNPHandled); got < 1 {
			t.Fatalf("rp_cnp_handled %d, want the READ's CNP handled", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(cnpAt) == 0 || len(sentAt) != 1 {
			t.Fatalf("CNPs received at %v, SENDs sent at %v", cnpAt, sentAt)
		}
		if !sentAt[0].After(cnpAt[0]) {
			t.Errorf("the fenced SEND left at %v, in the batch whose CNP arrived at %v: sent at the old rate before the cut",
				sentAt[0], cnpAt[0])
		}
	})
}
