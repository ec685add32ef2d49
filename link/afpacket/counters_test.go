package afpacket

import "testing"

// TestCounterTable: every counter a v1-only link reports has exactly one
// CounterTable entry with help text.
func TestCounterTable(t *testing.T) {
	got := (&Link{}).Counters() // a zero Config is v1-only
	entries := map[string]int{}
	for _, e := range CounterTable {
		entries[e.Name]++
		if e.Help == "" {
			t.Errorf("%s: no help", e.Name)
		}
	}
	for n := range got {
		if entries[n] != 1 {
			t.Errorf("counter %q has %d CounterTable entries, want 1", n, entries[n])
		}
	}
	if len(got) != len(CounterTable) {
		t.Errorf("Counters reports %d counters, CounterTable has %d entries", len(got), len(CounterTable))
	}
}
