package nettest

import "testing"

// TestVethPairReady: the hosts VethPair returns can carry traffic at once
// (operstate UP, a real qdisc in place of noop, the link-local address
// made). Before VethPair waited for that, a raw RoCE v1 frame sent right
// away was dropped by noop whenever the kernel's linkwatch work ran late
// (it needs the RTNL lock, which namespace teardown on a busy machine
// holds for long), and its receiver waited until go test's timeout
// (link/afpacket TestVeth/v1/link-local in a CI run). That race cannot be
// forced here; this checks the promise on every run.
func TestVethPairReady(t *testing.T) {
	for range 3 {
		a, b := VethPair(t, Options{})
		for _, h := range []*Host{a, b} {
			var why string
			if err := h.Do(func() error { why = notReady(h.Ifname); return nil }); err != nil {
				t.Fatal(err)
			}
			if why != "" {
				t.Errorf("%s in %s right after VethPair: %s", h.Ifname, h.NSName, why)
			}
		}
	}
}
