package rsocket

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/goroce/goroce/link/fabric"
)

// TestTransfer sends data both ways at once and reads it back whole,
// on every test network.
func TestTransfer(t *testing.T) {
	for _, net := range testNets {
		t.Run(net, func(t *testing.T) {
			ca, cb := pair(t, net, Options{})
			want := make([]byte, 3<<20+17)
			for i := range want {
				want[i] = byte(rand.Uint32())
			}
			errs := make(chan error, 2)
			for _, c := range []*Conn{ca, cb} {
				go func() {
					_, err := c.Write(want)
					errs <- err
				}()
			}
			for _, c := range []*Conn{cb, ca} {
				got := make([]byte, len(want))
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("data differs")
				}
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestCreditsWaitForControlSlot: a reader that has freed the ring while
// every control slot is in flight must wait for those slots on the send
// CQ. It used to wait on the receive CQ for data that the writer, short
// of the buffers it was owed, could not send: the slots' completions came
// in unpolled, and both ends waited for ever (TestTransfer hung so on
// the UDP network now and then, in CI run 21).
func TestCreditsWaitForControlSlot(t *testing.T) {
	a, b := newSides(t, netFabric4)
	ca, cb := dialAccept(t, a, b.listen(t, 7471, Options{}), Options{})
	half := cb.p.rbufSize / 2
	want := make([]byte, 4*half)
	for i := range want {
		want[i] = byte(rand.Uint32())
	}
	// The ring's two halves, which ca was given at the start, filled.
	if n, err := ca.Write(want[:2*half]); err != nil {
		t.Fatal(n, err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		cb.mu.Lock()
		cb.progress()
		got := cb.rAvail == 0 && cb.rmHead != cb.rmTail && cb.curLeft == 0
		cb.mu.Unlock()
		if got {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the first two halves did not arrive")
		}
	}
	// ca's acknowledgements reach cb late, so every control message cb
	// posts now completes well after its reader has begun to wait.
	if err := a.port.SetFaults(fabric.Faults{Delay: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cb.mu.Lock()
	for cb.ctrlAvail() {
		// Credit updates that grant nothing new: rs_send_credits with no
		// buffer, a message a correct rsocket may send at any time.
		cb.ctrlSeq++
		if err := cb.postMsg(mkMsg(opSGL, uint32(cb.grant))); err != nil {
			t.Fatal(err)
		}
	}
	cb.mu.Unlock()
	errs := make(chan error, 1)
	go func() {
		_, err := ca.Write(want[2*half:]) // waits for the halves cb owes it
		errs <- err
	}()
	got := make([]byte, len(want))
	cb.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.ReadFull(cb, got); err != nil {
		t.Fatalf("read %d of %d bytes: %v", n, len(want), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("data differs")
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}
