package wire

import "fmt"

// PSN is a 24-bit packet sequence number (IBTA Vol 1 §9.7.1). Arithmetic
// wraps modulo 2^24 and comparison is wraparound-aware: a is before b when b
// is less than half the sequence space (2^23) ahead of a.
type PSN uint32

// PSNMask masks the 24 significant bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p advanced by n (which may be negative), modulo 2^24.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Next returns p + 1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Diff returns the signed distance p - q in the range [-2^23, 2^23).
func (p PSN) Diff(q PSN) int32 {
	d := int32((uint32(p) - uint32(q)) & PSNMask)
	if d >= 1<<23 {
		d -= 1 << 24
	}
	return d
}

// Before reports whether p precedes q in sequence space.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p follows q in sequence space.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// String prints the PSN in decimal, as tshark and ibv_*_pingpong do.
func (p PSN) String() string { return fmt.Sprintf("%d", uint32(p)&PSNMask) }
