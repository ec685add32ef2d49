package mem

import (
	"errors"
	"testing"
)

// TestWindowLimit: a table holds at most its max_mw windows; a
// deallocated one frees its place. Regions do not count against it.
func TestWindowLimit(t *testing.T) {
	tb := NewTable(16)
	tb.SetMaxWindows(2)
	pd := tb.AllocPD()
	if _, err := tb.Register(pd, make([]byte, 8), 0x1000, LocalWrite); err != nil {
		t.Fatal(err)
	}
	w1, _, err := tb.AllocWindow(pd, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.AllocWindow(pd, 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb.AllocWindow(pd, 2); err == nil {
		t.Fatal("a third window in a table of max_mw 2 was allocated")
	}
	tb.DeallocWindow(w1)
	if _, _, err := tb.AllocWindow(pd, 1); err != nil {
		t.Fatalf("after a dealloc: %v", err)
	}
	if _, _, err := tb.AllocWindow(pd, 3); err == nil {
		t.Fatal("a window of type 3 was allocated")
	}
}

// TestWindowKeyIsNoLKey: a window's rkey never works as an lkey (a window
// has no local key), nor for a PD other than the window's.
func TestWindowKeyIsNoLKey(t *testing.T) {
	tb := NewTable(16)
	pd, other := tb.AllocPD(), tb.AllocPD()
	r, err := tb.Register(pd, make([]byte, 4096), 0x10000, LocalWrite|MWBind)
	if err != nil {
		t.Fatal(err)
	}
	w, rkey, err := tb.AllocWindow(pd, 1)
	if err != nil {
		t.Fatal(err)
	}
	rkey, err = tb.BindWindow(pd, nil, Bind{WindowRKey: rkey, NewKey: 7, Region: r, RegionLKey: r.LKey(),
		Addr: 0x10100, Length: 256, Access: RemoteWrite | RemoteRead})
	if err != nil || rkey&0xff != 7 {
		t.Fatalf("bind: rkey %#x, %v; want key byte 7", rkey, err)
	}
	if _, err := tb.Slice(pd, rkey, false, 0x10100, 256, RemoteWrite); err != nil {
		t.Fatalf("the window's range: %v", err)
	}
	if _, err := tb.Slice(pd, rkey, true, 0x10100, 8, LocalWrite); !errors.Is(err, ErrBadKey) {
		t.Errorf("window rkey as an lkey: %v, want ErrBadKey", err)
	}
	if _, err := tb.Slice(other, rkey, false, 0x10100, 8, RemoteWrite); !errors.Is(err, ErrBadPD) {
		t.Errorf("window rkey from another PD: %v, want ErrBadPD", err)
	}
	if _, _, ok := tb.Bounds(rkey, false); !ok {
		t.Error("Bounds of a bound window: not found")
	}
	tb.DeallocWindow(w)
	if _, err := tb.Slice(pd, rkey, false, 0x10100, 8, RemoteWrite); !errors.Is(err, ErrBadKey) {
		t.Errorf("after dealloc: %v, want ErrBadKey", err)
	}
}
