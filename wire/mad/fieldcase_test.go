package mad

import (
	"bytes"
	"reflect"
	"slices"
	"testing"
)

// fieldCase is one row of a message's named table test: where IBTA (and
// Linux's include/rdma/ibta_vol1_c12.h, whose CM_* macros give (byte, bit,
// width)) put a field, written down independently of the package's layout
// tables, plus the accessors that reach it.
type fieldCase[F any, V ~[]byte] struct {
	name            string              // layout name
	off, bit, width int                 // byte offset from the structure start, MSB-first bit, width
	set             func(f *F)          // set the field to all ones in a Fields struct
	get             func(m V) uint64    // read an integer field through the view
	put             func(m V, v uint64) // write an integer field through the view
	getb            func(m V) []byte    // read a byte field through the view
	putb            func(m V, p []byte) // write a byte field through the view
}

// runFieldCases checks every row of cases against the layout table, the
// Fields encoder, the view getters and setters and the decoder:
//
//   - the layout entry of that name has the row's offset, bit and width;
//   - encoding a Fields with only that field all-ones sets exactly its bits;
//   - the getter reads all ones from that and zero from an all-zero buffer;
//   - the setter clears exactly its bits in an all-ones buffer and sets
//     exactly them in an all-zero one;
//   - decoding the encoded bytes gives back the Fields;
//
// and finally that every non-reserved layout field has a row.
func runFieldCases[F any, V ~[]byte](t *testing.T, layout []Field, size int,
	enc func(F) []byte, dec func(V) F, cases []fieldCase[F, V]) {
	t.Helper()
	byName := map[string]Field{}
	for _, f := range layout {
		byName[f.Name] = f
	}
	var covered []string
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			covered = append(covered, c.name)
			lf, ok := byName[c.name]
			if !ok {
				t.Fatalf("no layout field %q", c.name)
			}
			if lf.Offset != c.off || lf.Bit != c.bit || lf.Width != c.width {
				t.Fatalf("layout has %s, IBTA says %d[%d]:%d", lf, c.off, c.bit, c.width)
			}
			want := bitsBuffer(size, c.off*8+c.bit, c.width)

			var f F
			c.set(&f)
			got := enc(f)
			if len(got) != size {
				t.Fatalf("encoded %d bytes, want %d", len(got), size)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding only %s set:\n got %x\nwant %x", c.name, got, want)
			}
			zero := make([]byte, size)
			switch {
			case c.get != nil:
				if v := c.get(V(got)); v != mask(c.width) {
					t.Errorf("getter on encoded bytes = %#x, want %#x", v, mask(c.width))
				}
				if v := c.get(V(zero)); v != 0 {
					t.Errorf("getter on zero bytes = %#x, want 0", v)
				}
			case c.getb != nil:
				if p := c.getb(V(got)); len(p) != c.width/8 || !allBytes(p, 0xff) {
					t.Errorf("byte getter on encoded bytes = %x", p)
				}
			default:
				t.Fatal("row has no getter")
			}
			ones := bytes.Repeat([]byte{0xff}, size)
			notWant := make([]byte, size)
			for i := range notWant {
				notWant[i] = ^want[i]
			}
			switch {
			case c.put != nil:
				c.put(V(ones), 0)
				c.put(V(zero), mask(c.width))
			case c.putb != nil:
				c.putb(V(ones), make([]byte, c.width/8))
				c.putb(V(zero), bytes.Repeat([]byte{0xff}, c.width/8))
			default:
				t.Fatal("row has no setter")
			}
			if !bytes.Equal(ones, notWant) {
				t.Errorf("setter(0) on all-ones bytes:\n got %x\nwant %x", ones, notWant)
			}
			if !bytes.Equal(zero, want) {
				t.Errorf("setter(max) on zero bytes:\n got %x\nwant %x", zero, want)
			}
			if back := dec(V(got)); !reflect.DeepEqual(back, f) {
				t.Errorf("decode(encode(f)) = %+v, want %+v", back, f)
			}
		})
	}
	for _, f := range layout {
		if !f.Reserved() && !slices.Contains(covered, f.Name) {
			t.Errorf("layout field %s has no table row", f.Name)
		}
	}
}

// bitsBuffer returns size bytes with exactly bits [start, start+width) set,
// bit 0 being the most significant bit of byte 0.
func bitsBuffer(size, start, width int) []byte {
	b := make([]byte, size)
	for i := start; i < start+width; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return b
}

func allBytes(p []byte, c byte) bool {
	for _, x := range p {
		if x != c {
			return false
		}
	}
	return true
}

func ff(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

func ones16() [16]byte { return [16]byte(ff(16)) }
