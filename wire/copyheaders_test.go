package wire

import (
	"bytes"
	"testing"
)

// TestCopyHeaders: CopyHeaders does what copy does, for every length of
// source and destination up to 64 bytes (the constant-length moves at 28
// and 48 included), never writing past the bytes copied.
func TestCopyHeaders(t *testing.T) {
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i + 1)
	}
	for ns := range 65 {
		for nd := range 65 {
			want := bytes.Repeat([]byte{0xEE}, 80)
			got := bytes.Repeat([]byte{0xEE}, 80)
			wn := copy(want[:nd], src[:ns])
			gn := CopyHeaders(got[:nd], src[:ns])
			if gn != wn || !bytes.Equal(got, want) {
				t.Fatalf("src %d bytes, dst %d: copied %d, % x; want %d, % x", ns, nd, gn, got[:max(nd, ns)], wn, want[:max(nd, ns)])
			}
		}
	}
}
