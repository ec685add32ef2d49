package verbs

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/wire"
)

// TestHeldTimerWaitsTheRest: holdACKs does not reset the hold's timer
// while it is set (ackhold.go), so the timer may fire before the held
// ACKs' time (a later hold's): it then sends nothing and sets itself for
// the rest; at their time it sends them.
func TestHeldTimerWaitsTheRest(t *testing.T) {
	lk := &clockLink{fuzzLink: &fuzzLink{closed: make(chan struct{})}, perPkt: 1}
	d, err := openDevice(DeviceConfig{Name: "hold0", Link: lk, ActiveMTU: MTU1024,
		GIDs: []GIDEntry{{GID: netip.MustParseAddr("::ffff:192.0.2.1"), Type: GIDTypeRoCEv2}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	h := getTxBatch(d)
	pk := h.next()
	finish(pk, append(pk.Buf, make([]byte, wire.BTHLen+wire.AETHLen)...))
	d.held.Put(h)
	// Set by an earlier hold, and firing now, an hour before this one's time.
	d.heldTimerOn.Store(true)
	d.heldDue.Store(monoNow() + int64(time.Hour))
	d.onHeldTimer()
	if d.held.peek() != h || lk.now.Load() != 0 {
		t.Fatalf("the timer sent the held ACK before its time (%d packets sent)", lk.now.Load())
	}
	if !d.heldTimerOn.Load() || !d.heldTimer.Stop() {
		t.Fatal("the timer did not set itself for the rest")
	}
	d.heldTimerOn.Store(false)
	// Firing at the ACK's time.
	d.heldDue.Store(monoNow() - 1)
	d.onHeldTimer()
	if d.held.peek() != nil || lk.now.Load() != 1 {
		t.Fatalf("at its time the held ACK is held: %v, %d packets sent", d.held.peek() != nil, lk.now.Load())
	}
	// Nothing held: the timer stops, and the next hold sets it.
	d.onHeldTimer()
	if d.heldTimerOn.Load() {
		t.Fatal("the timer set itself with nothing held")
	}
}
