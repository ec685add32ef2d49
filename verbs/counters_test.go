package verbs_test

import (
	"testing"

	"github.com/goroce/goroce/verbs"
)

// TestCounterTable: every counter a device reports has exactly one entry in
// verbs.CounterTable, with help text, so a counter cannot be added without
// its name and meaning (roce stat and the metrics exporter list the table).
func TestCounterTable(t *testing.T) {
	var c verbs.Counters
	snap := c.Snapshot()
	entries := map[string]int{}
	drops := map[string]string{}
	for i, e := range verbs.CounterTable {
		entries[e.Name]++
		if e.Name == "" || e.Help == "" {
			t.Errorf("CounterTable[%d] = %+v: no name or no help", i, e)
		}
		if verbs.Counter(i).String() != e.Name {
			t.Errorf("Counter(%d).String() = %q, want %q", i, verbs.Counter(i), e.Name)
		}
		if e.Drop != "" {
			if other, ok := drops[e.Drop]; ok {
				t.Errorf("%s and %s both file drops under %q", other, e.Name, e.Drop)
			}
			drops[e.Drop] = e.Name
		}
	}
	for n := range snap {
		if entries[n] != 1 {
			t.Errorf("counter %q has %d CounterTable entries, want 1", n, entries[n])
		}
	}
	if len(snap) != len(verbs.CounterTable) {
		t.Errorf("a device reports %d counters, CounterTable has %d entries", len(snap), len(verbs.CounterTable))
	}
}
