package mad

import (
	"fmt"
	"slices"
	"testing"
)

// allLayouts lists every field table with the size of the structure it tiles.
func allLayouts() []struct {
	name   string
	layout []Field
	size   int
} {
	return []struct {
		name   string
		layout []Field
		size   int
	}{
		{"Header", headerLayout[:], HeaderLen},
		{"IPCMHeader", ipcmLayout[:], IPCMHeaderLen},
		{"REQ", reqLayout[:], DataLen},
		{"MRA", mraLayout[:], DataLen},
		{"REJ", rejLayout[:], DataLen},
		{"REP", repLayout[:], DataLen},
		{"RTU", rtuLayout[:], DataLen},
		{"DREQ", dreqLayout[:], DataLen},
		{"DREP", drepLayout[:], DataLen},
		{"SIDR_REQ", sidrreqLayout[:], DataLen},
		{"SIDR_REP", sidrrepLayout[:], DataLen},
	}
}

// TestLayoutsTile checks that each table covers its structure exactly, bit
// by bit, in wire order, and that every entry is well formed: the offsets add
// up, as the ARCHITECTURE rule for data tables asks.
func TestLayoutsTile(t *testing.T) {
	for _, l := range allLayouts() {
		t.Run(l.name, func(t *testing.T) {
			next := 0 // next bit expected
			names := map[string]bool{}
			for i, f := range l.layout {
				if f.Name == "" {
					t.Fatalf("entry %d is empty (index constants out of step with the table?)", i)
				}
				if names[f.Name] {
					t.Errorf("duplicate name %s", f.Name)
				}
				names[f.Name] = true
				if f.Bit < 0 || f.Bit > 7 || f.Width <= 0 {
					t.Errorf("%s: bad bit/width", f)
				}
				if start := f.Offset*8 + f.Bit; start != next {
					t.Errorf("%s starts at bit %d, want %d (gap or overlap)", f, start, next)
				}
				next = f.Offset*8 + f.Bit + f.Width
				if f.Kind.IsBytes() {
					if f.Bit != 0 || f.Width%8 != 0 {
						t.Errorf("%s: byte field not byte aligned", f)
					}
				} else if f.span() > 8 {
					t.Errorf("%s: integer field spans %d bytes", f, f.span())
				}
				if (f.Kind == KindFlag) != (f.Width == 1 && !f.Reserved()) {
					t.Errorf("%s: one-bit fields and only they are flags", f)
				}
				if f.Kind == KindGID && f.Width != 128 {
					t.Errorf("%s: GID is not 16 bytes", f)
				}
				if f.Reserved() && f.Name != fmt.Sprintf("Reserved%d", f.Offset) && f.Name != "Reserved" {
					t.Errorf("%s: reserved fields are named after their byte offset", f)
				}
			}
			if next != 8*l.size {
				t.Errorf("table ends at bit %d, structure has %d", next, 8*l.size)
			}
		})
	}
}

// TestLayout checks the exported view of the tables.
func TestLayout(t *testing.T) {
	for _, a := range []AttributeID{AttrREQ, AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREQ, AttrDREP, AttrSIDRREQ, AttrSIDRREP} {
		got := slices.Collect(Layout(a))
		if !slices.Equal(got, layoutOf(a)) || len(got) == 0 {
			t.Errorf("Layout(%v) = %d fields", a, len(got))
		}
	}
	for _, a := range []AttributeID{AttrClassPortInfo, AttrLAP, AttrAPR, 0} {
		if n := len(slices.Collect(Layout(a))); n != 0 {
			t.Errorf("Layout(%v) has %d fields, want none", a, n)
		}
	}
	// Early break must stop the iteration.
	n := 0
	for range Layout(AttrREQ) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("break after one field visited %d", n)
	}
}

// TestFieldBits checks getUint/setUint on fields that straddle bytes.
func TestFieldBits(t *testing.T) {
	tests := []struct {
		name string
		f    Field
		in   []byte
		want uint64
	}{
		{"whole byte", Field{Offset: 1, Width: 8}, []byte{0, 0xab, 0}, 0xab},
		{"top nibble", Field{Width: 4}, []byte{0xa5}, 0xa},
		{"low 3 bits", Field{Bit: 5, Width: 3}, []byte{0xa5}, 5},
		{"flow label", Field{Width: 20}, []byte{0xb2, 0xf4, 0xf0, 0x00}, 0xb2f4f},
		{"straddle 2..8", Field{Offset: 0, Bit: 4, Width: 6}, []byte{0x0f, 0xc0}, 0x3f},
		{"u64", Field{Width: 64}, []byte{1, 2, 3, 4, 5, 6, 7, 8}, 0x0102030405060708},
		{"u64 at bit 0 of byte 2", Field{Offset: 2, Width: 64}, []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 9}, 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.getUint(tt.in); got != tt.want {
				t.Errorf("getUint = %#x, want %#x", got, tt.want)
			}
			b := make([]byte, len(tt.in))
			tt.f.setUint(b, tt.want)
			if got := tt.f.getUint(b); got != tt.want {
				t.Errorf("after setUint, getUint = %#x", got)
			}
			// Bits outside the field are untouched.
			for i := range b {
				b[i] = 0xff
			}
			tt.f.setUint(b, 0)
			fieldBits := bitsBuffer(len(b), tt.f.Offset*8+tt.f.Bit, tt.f.Width)
			for i := range b {
				if b[i] != ^fieldBits[i] {
					t.Fatalf("setUint(0) over ones = %x, want only the field cleared", b)
				}
			}
		})
	}
}
