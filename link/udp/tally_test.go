package udp

import (
	"net/netip"
	"testing"
)

// TestTally: the per-destination counts PathError reads stay right while
// tally keeps the last destination's entry at hand (a run of sends to one
// peer looks the map up once): sends alternating between peers each land
// on their own entry, and after the map is emptied at its bound the entry
// at hand is the new map's, never a dropped one.
func TestTally(t *testing.T) {
	l := &Link{}
	a, b := netip.MustParseAddr("::ffff:198.18.0.1"), netip.MustParseAddr("::ffff:198.18.0.2")
	l.tally(a, 2)
	l.tally(a, 1)
	l.tally(b, 1)
	l.tally(a, 3)
	if got, want := *l.dsts[a], (dstTally{gsoPkts: 5, gsoMsgs: 2, single: 1}); got != want {
		t.Errorf("%s: %+v, want %+v", a, got, want)
	}
	if got, want := *l.dsts[b], (dstTally{single: 1}); got != want {
		t.Errorf("%s: %+v, want %+v", b, got, want)
	}
	// Fill the map to its bound with other peers; the next new one empties it.
	for i := range 1100 {
		l.tally(netip.AddrFrom16([16]byte{0: 0xfd, 14: byte(i >> 8), 15: byte(i)}), 1)
	}
	if len(l.dsts) >= 1024 {
		t.Fatalf("%d destinations kept, want fewer than 1024", len(l.dsts))
	}
	l.tally(a, 1)
	l.tally(a, 1)
	if l.lastTally != l.dsts[a] {
		t.Fatal("the entry at hand is not the map's")
	}
	if got, want := *l.dsts[a], (dstTally{single: 2}); got != want {
		t.Errorf("%s after the map was emptied: %+v, want %+v", a, got, want)
	}
}
