package host

import (
	"bytes"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestRxPathAdd: a device's rx-path is recorded only for a RoCE v2-only
// port, and only with a known value; anything else is EINVAL, nothing
// recorded.
func TestRxPathAdd(t *testing.T) {
	ns, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(t.TempDir())
	for _, tc := range []struct {
		v    Versions
		p    RxPath
		want string // "" for success
	}{
		{VersionsV2, "ebpf", `rx-path "ebpf": valid values are ring, socket and xdp`},
		{VersionsBoth, RxSocket, "rx-path socket needs roce-versions v2"},
		{VersionsV1, RxRing, "rx-path ring needs roce-versions v2"},
		{VersionsV2, RxSocket, ""},
	} {
		err := r.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Netns: ns, Versions: tc.v, Rx: tc.p})
		if tc.want == "" {
			if err != nil {
				t.Fatalf("%s %s: %v", tc.v, tc.p, err)
			}
			continue
		}
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want EINVAL with %q", tc.v, tc.p, err, tc.want)
		}
	}
	def, err := r.Get("rxe0")
	if err != nil || def.Rx != RxSocket {
		t.Errorf("recorded %+v, %v", def, err)
	}
}

// TestRxPathOpen: as root, a RoCE v2 device receives with AF_PACKET (the
// ring) by default and with rx-path ring, and from its UDP socket with
// rx-path socket; each passes a SEND between two QPs over 127.0.0.1.
func TestRxPathOpen(t *testing.T) {
	testenv.Root(t)
	ns, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p          RxPath
		privileged bool
	}{{RxDefault, true}, {RxRing, true}, {RxSocket, false}} {
		r := NewRegistry(t.TempDir())
		if err := r.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Netns: ns, Versions: VersionsV2, Rx: tc.p}); err != nil {
			t.Fatal(err)
		}
		d, err := openLo(t, Options{RunDir: r.Dir})
		if err != nil {
			t.Fatalf("rx-path %q: %v", tc.p, err)
		}
		if got := d.udp.Privileged(); got != tc.privileged {
			t.Errorf("rx-path %q: the UDP link's Privileged() = %v, want %v", tc.p, got, tc.privileged)
		}
		writeOnce(t, d)
		d.Close()
	}
}

// writeOnce WRITEs 1 MiB between two QPs of d over 127.0.0.1 (256
// packets at path MTU 4096: GSO messages out, GRO reads in on the socket
// path) and checks every byte.
func writeOnce(t *testing.T, d *Device) {
	t.Helper()
	pd, cq, a, _ := loopQPs(t, d)
	src, dst, mrA, mrB := writeMRs(t, pd)
	if err := a.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mrA.SGE(0, len(src))}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}); err != nil {
		t.Fatal(err)
	}
	verbstest.MustSucceed(t, cq)
	if !bytes.Equal(src, dst) {
		t.Error("the WRITE's bytes differ at the destination")
	}
}
