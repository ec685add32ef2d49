package pktring

import "testing"

// TestReleaseAtLeast: the kernel release check that decides whether an
// AF_PACKET socket can describe UDP superpackets parses the releases
// distributions print.
func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.1.0-57-amd64", false}, // Debian 12: the lab's guests
		{"6.2.0", true},
		{"6.18.44-fc-v1045", true},
		{"5.15.0-91-generic", false},
		{"7.0", true},
		{"", false},
		{"x.y", false},
	} {
		if got := ReleaseAtLeast(c.release, 6, 2); got != c.want {
			t.Errorf("ReleaseAtLeast(%q, 6, 2) = %v, want %v", c.release, got, c.want)
		}
	}
}
