package turnsplit

import (
	"bytes"
	"testing"
)

// A print every Every round trips, with each part's quartiles in
// microseconds; the rest at Flush from Least on, nothing below it.
func TestSamples(t *testing.T) {
	var s Samples
	var out bytes.Buffer
	for i := range Every + 150 {
		s.Add(&out, int64(i%4)*1000, 50_000, int64(100+i%100)*1000)
	}
	want := "goroce_turn: 1000 round trips, µs p25/median/p75: wake 1.0/2.0/3.0 path 50.0/50.0/50.0 send 125.0/150.0/175.0\n"
	if out.String() != want {
		t.Fatalf("after %d round trips:\n%q, want\n%q", Every, out.String(), want)
	}
	out.Reset()
	s.Flush(&out)
	if got := out.String(); len(got) == 0 || !bytes.HasPrefix(out.Bytes(), []byte("goroce_turn: 150 round trips,")) {
		t.Fatalf("Flush of 150: %q", got)
	}
	out.Reset()
	for range Least - 1 {
		s.Add(&out, 1, 2, 3)
	}
	s.Flush(&out)
	if out.Len() != 0 {
		t.Fatalf("Flush of %d printed %q", Least-1, out.String())
	}
}
