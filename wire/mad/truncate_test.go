package mad

import (
	"errors"
	"testing"
)

// TestTruncated feeds every proper prefix of every sample CM MAD to Parse:
// each must fail with ErrTruncated, none may panic. The IP CM header gets the
// same treatment.
func TestTruncated(t *testing.T) {
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			checkPrefixes(t, s.bytes())
		})
	}
	t.Run("IPCMHeader", func(t *testing.T) {
		b := sampleIPCM().Append(nil)
		for n := range len(b) {
			if _, err := ParseIPCMHeader(b[:n]); !errors.Is(err, ErrTruncated) {
				t.Errorf("ParseIPCMHeader(%d bytes) = %v, want ErrTruncated", n, err)
			}
		}
	})
}

// checkPrefixes checks that every proper prefix of the CM MAD b is refused as
// truncated, and that the typed accessors refuse an unparsed prefix too.
func checkPrefixes(t *testing.T, b []byte) {
	t.Helper()
	for n := range len(b) {
		m, err := Parse(b[:n])
		if !errors.Is(err, ErrTruncated) || m != nil {
			t.Fatalf("Parse(%d of %d bytes) = %v, %v; want ErrTruncated", n, len(b), m, err)
		}
		if n >= HeaderLen {
			p := MAD(b[:n])
			if p.IsCM() {
				t.Fatalf("IsCM true for %d bytes", n)
			}
			if _, ok := p.REQ(); ok {
				t.Fatalf("REQ() ok for %d bytes", n)
			}
			if _, err := p.IPCM(); err == nil {
				t.Fatalf("IPCM() ok for %d bytes", n)
			}
		}
	}
}
