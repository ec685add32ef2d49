package wire_test

import (
	"testing"

	"github.com/goroce/goroce/wire"
)

func TestPSNAdd(t *testing.T) {
	for _, tc := range []struct {
		p    wire.PSN
		n    int
		want wire.PSN
	}{
		{0, 1, 1},
		{0xFFFFFE, 1, 0xFFFFFF},
		{0xFFFFFF, 1, 0},        // wraps
		{0xFFFFFF, 2, 1},        // wraps
		{0, -1, 0xFFFFFF},       // wraps backwards
		{1, -2, 0xFFFFFF},       // wraps backwards
		{0x7FFFFF, 1, 0x800000}, // crosses half the space, no wrap
		{0xFFFFF0, 0x20, 0x10},  // a window across the wrap
		{5, 1 << 24, 5},         // a full turn
		{5, -(1 << 24), 5},      // a full turn backwards
		{5, 3<<24 + 2, 7},       // several turns
		{0, -(1<<24 + 1), 0xFFFFFF},
		{0xFFFFFF, 0, 0xFFFFFF},
	} {
		if got := tc.p.Add(tc.n); got != tc.want {
			t.Errorf("PSN(%#x).Add(%d) = %#x, want %#x", uint32(tc.p), tc.n, uint32(got), uint32(tc.want))
		}
	}
	for _, tc := range []struct{ p, want wire.PSN }{
		{0, 1}, {0x7FFFFF, 0x800000}, {0xFFFFFE, 0xFFFFFF}, {0xFFFFFF, 0},
	} {
		if got := tc.p.Next(); got != tc.want {
			t.Errorf("PSN(%#x).Next() = %#x, want %#x", uint32(tc.p), uint32(got), uint32(tc.want))
		}
	}
}

func TestPSNDiffBeforeAfter(t *testing.T) {
	for _, tc := range []struct {
		p, q wire.PSN
		diff int32
	}{
		{0, 0, 0},
		{0xFFFFFF, 0xFFFFFF, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, 0xFFFFFF, 1},         // 0 is one after 0xFFFFFF
		{0xFFFFFF, 0, -1},        // 0xFFFFFF is one before 0
		{2, 0xFFFFFE, 4},         // across the wrap
		{0xFFFFFE, 2, -4},        // across the wrap
		{0x7FFFFF, 0, 0x7FFFFF},  // the farthest "after"
		{0, 0x7FFFFF, -0x7FFFFF}, //
		{0x800000, 0, -0x800000}, // exactly half: Diff's range is [-2^23, 2^23)
		{0, 0x800000, -0x800000}, // ... so both ways it reads as "before"
		{0x800001, 0, -0x7FFFFF}, // beyond half: before
		{0, 0x800001, 0x7FFFFF},  // beyond half: after
		{0x123456, 0x123400, 0x56},
	} {
		p, q := tc.p, tc.q
		if got := p.Diff(q); got != tc.diff {
			t.Errorf("PSN(%#x).Diff(%#x) = %d, want %d", uint32(p), uint32(q), got, tc.diff)
		}
		if got := p.Before(q); got != (tc.diff < 0) {
			t.Errorf("PSN(%#x).Before(%#x) = %v", uint32(p), uint32(q), got)
		}
		if got := p.After(q); got != (tc.diff > 0) {
			t.Errorf("PSN(%#x).After(%#x) = %v", uint32(p), uint32(q), got)
		}
		if p.Before(q) && p.After(q) {
			t.Errorf("%#x both before and after %#x", uint32(p), uint32(q))
		}
		// Add undoes Diff.
		if got := q.Add(int(p.Diff(q))); got != p {
			t.Errorf("PSN(%#x).Add(PSN(%#x).Diff(%#x)) = %#x", uint32(q), uint32(p), uint32(q), uint32(got))
		}
	}
	// Around the wrap, a run of consecutive PSNs is ordered.
	start := wire.PSN(0xFFFFF0)
	for i := range 64 {
		a, b := start.Add(i), start.Add(i+1)
		if !a.Before(b) || !b.After(a) || a.Diff(b) != -1 || b.Diff(a) != 1 {
			t.Errorf("%#x and %#x are out of order", uint32(a), uint32(b))
		}
	}
}

func TestPSNString(t *testing.T) {
	for _, tc := range []struct {
		p    wire.PSN
		want string
	}{
		{0, "0"}, {12345, "12345"}, {0xFFFFFF, "16777215"}, {0x1000001, "1"}, // only 24 bits print
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("PSN(%#x).String() = %q, want %q", uint32(tc.p), got, tc.want)
		}
	}
}
