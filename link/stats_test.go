package link

import (
	"reflect"
	"sync/atomic"
	"testing"
)

// TestStatTable: every field of Stats has exactly one StatTable entry, with
// a name and help text, and Snapshot reports it under that name: a field
// added without an entry fails here (each field is set to its own value and
// must show up once).
func TestStatTable(t *testing.T) {
	var s Stats
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Addr().Interface().(*atomic.Uint64)
		if !ok {
			t.Fatalf("Stats.%s is not an atomic.Uint64", v.Type().Field(i).Name)
		}
		c.Store(uint64(100 + i))
	}
	snap := s.Snapshot()
	if len(snap) != v.NumField() || len(StatTable) != v.NumField() {
		t.Errorf("Stats has %d fields, StatTable %d entries, Snapshot %d counters", v.NumField(), len(StatTable), len(snap))
	}
	for i := range v.NumField() {
		var names []string
		for n, x := range snap {
			if x == uint64(100+i) {
				names = append(names, n)
			}
		}
		if len(names) != 1 {
			t.Errorf("Stats.%s is reported as %v, want one name", v.Type().Field(i).Name, names)
		}
	}
	seen := map[string]bool{}
	for _, e := range StatTable {
		if e.Name == "" || e.Help == "" || seen[e.Name] {
			t.Errorf("StatTable entry %+v: no name, no help, or a name twice", e.CounterInfo)
		}
		seen[e.Name] = true
	}
}
