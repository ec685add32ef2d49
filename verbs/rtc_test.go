package verbs_test

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// pollOnly is a link.Poller whose blocking receive never delivers: the
// device's receive goroutine waits in it until Close, so a packet reaches
// the engine only if a goroutine polling a CQ takes it (TryRecv).
type pollOnly struct {
	link.Link
	p    link.Poller
	once sync.Once
	done chan struct{}
}

func (l *pollOnly) TryRecv(pkts []link.Packet) (int, error) { return l.p.TryRecv(pkts) }

func (l *pollOnly) RecvLocked([]link.Packet, sync.Locker) (int, error) {
	<-l.done
	return 0, net.ErrClosed
}

func (l *pollOnly) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Link.Close()
}

// TestPollDrivesLink: with both devices' receive goroutines kept from
// receiving, RC SENDs under loss, reordering and duplication still complete,
// each once and in order, because the goroutine that spins on the CQs
// (CQ.Poll in a loop, as perftest polls) receives, handles and answers the
// packets itself (run to completion). Before, Poll only read the queue, and
// nothing arrived.
func TestPollDrivesLink(t *testing.T) {
	faults := fabric.Faults{Loss: 0.05, Duplicate: 0.05, Reorder: 0.1}
	p := verbstest.NewPair(t, verbstest.Options{FaultsA: faults, FaultsB: faults, Seed: 15,
		Wrap: func(side int, port link.Link) link.Link {
			return &pollOnly{Link: port, p: port.(link.Poller), done: make(chan struct{})}
		}})
	const n, size = 200, 64
	src, dst := make([]byte, n*size), make([]byte, n*size)
	for i := range n {
		binary.BigEndian.PutUint32(src[i*size:], uint32(i))
	}
	mrA, err := p.A.PD.RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mrB, err := p.B.PD.RegMR(dst, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := p.B.QP.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{mrB.SGE(i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := p.A.QP.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mrA.SGE(i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	var sent, recvd int
	wcs := make([]verbs.WC, 16)
	deadline := time.Now().Add(time.Minute) // a diagnosis, not a timing assert
	for sent < n || recvd < n {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of polling: %d of %d sends and %d of %d receives completed", sent, n, recvd, n)
		}
		k, err := p.A.CQ.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(sent) {
				t.Fatalf("send completion %d: %v", sent, &wc)
			}
			sent++
		}
		if k, err = p.B.RCQ.Poll(wcs); err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(recvd) || wc.ByteLen != size {
				t.Fatalf("receive completion %d: %v", recvd, &wc)
			}
			recvd++
		}
	}
	for i := range n {
		if got := binary.BigEndian.Uint32(dst[i*size:]); got != uint32(i) {
			t.Fatalf("receive %d holds SEND %d", i, got)
		}
	}
	fa, fb := p.A.Port.FaultStats(), p.B.Port.FaultStats()
	if fa.Lost.Load()+fb.Lost.Load() == 0 || fa.Reordered.Load()+fb.Reordered.Load() == 0 || fa.Duplicated.Load()+fb.Duplicated.Load() == 0 {
		t.Errorf("the faults did not all fire: lost %d+%d, reordered %d+%d, duplicated %d+%d",
			fa.Lost.Load(), fb.Lost.Load(), fa.Reordered.Load(), fb.Reordered.Load(), fa.Duplicated.Load(), fb.Duplicated.Load())
	}
}
