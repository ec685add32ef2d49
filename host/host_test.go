package host

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

func TestRegistry(t *testing.T) {
	r := NewRegistry(t.TempDir())
	ns := Netns{Inode: 1, Dev: 2}
	if err := r.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "eth0", Netns: ns, Versions: VersionsBoth}); err != nil {
		t.Fatal(err)
	}
	if err := r.Add(DeviceDef{Name: "rxe1", Type: "rxe", Netdev: "eth0", Netns: ns}); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("second device on eth0: %v, want EEXIST", err)
	}
	if err := r.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "eth1", Netns: ns}); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("duplicate name: %v, want EEXIST", err)
	}
	// The same netdev name in another namespace is another netdev.
	if err := r.Add(DeviceDef{Name: "rxe1", Type: "rxe", Netdev: "eth0", Netns: Netns{Inode: 9, Dev: 2}}); err != nil {
		t.Errorf("eth0 of another namespace: %v", err)
	}
	if err := r.Add(DeviceDef{Name: "9bad", Netdev: "eth2"}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad name: %v, want EINVAL", err)
	}
	defs, err := r.List()
	if err != nil || len(defs) != 2 || defs[0].Name != "rxe0" || defs[1].Name != "rxe1" {
		t.Fatalf("List = %v, %v", defs, err)
	}
	if err := r.Delete("rxe0"); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete("rxe0"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("delete twice: %v, want ENODEV", err)
	}
	if _, err := r.Get("nosuch"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("Get: %v, want ENODEV", err)
	}
	if _, err := ParseVersions("v3"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("roce-versions v3: %v", err)
	}
}

// The GID table follows Linux: the default GID, then IPv4, then IPv6; v1
// then v2 per address when both; stable indices as addresses come and go.
func TestGIDTable(t *testing.T) {
	mac := wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}
	if g := DefaultGID(mac); g != netip.MustParseAddr("fe80::5054:ff:fec0:20b") {
		t.Fatalf("default GID %v", g)
	}
	nd := Netdev{Name: "eth0", MAC: mac, Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.11"),
		netip.MustParseAddr("fd00:c0:2::11"), netip.MustParseAddr("fe80::5054:ff:fec0:20b")}}
	show := func(tab *GIDTable) []string {
		var s []string
		for _, e := range tab.Entries() {
			if !e.GID.IsValid() {
				s = append(s, "-")
				continue
			}
			s = append(s, e.GID.String()+" "+e.Type.String())
		}
		return s
	}
	eq := func(got, want []string) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("index %d: got %q, want %q\nall: %q", i, got[i], want[i], got)
			}
		}
	}
	v2 := &GIDTable{Versions: VersionsV2}
	v2.Update(nd)
	// The lab's rxe0 (KERNEL-BEHAVIOUR.md): 0 fe80…, 1 ::ffff:192.0.2.11, 2 fd00:c0:2::11, all RoCE v2.
	eq(show(v2), []string{"fe80::5054:ff:fec0:20b RoCE v2", "::ffff:192.0.2.11 RoCE v2", "fd00:c0:2::11 RoCE v2"})
	both := &GIDTable{Versions: VersionsBoth}
	both.Update(nd)
	eq(show(both), []string{"fe80::5054:ff:fec0:20b IB/RoCE v1", "fe80::5054:ff:fec0:20b RoCE v2",
		"::ffff:192.0.2.11 IB/RoCE v1", "::ffff:192.0.2.11 RoCE v2", "fd00:c0:2::11 IB/RoCE v1", "fd00:c0:2::11 RoCE v2"})
	v1 := &GIDTable{Versions: VersionsV1}
	v1.Update(nd)
	for _, e := range v1.Entries() {
		if e.Type != verbs.GIDTypeRoCEv1 {
			t.Errorf("v1-only port has a %v entry", e.Type)
		}
	}
	// Remove the IPv4 address: its slots go unused, the others keep their index.
	nd2 := nd
	nd2.Addrs = []netip.Addr{netip.MustParseAddr("fd00:c0:2::11")}
	if !v2.Update(nd2) {
		t.Fatal("Update reported no change")
	}
	eq(show(v2), []string{"fe80::5054:ff:fec0:20b RoCE v2", "-", "fd00:c0:2::11 RoCE v2"})
	// A new address takes the free slot.
	nd2.Addrs = append(nd2.Addrs, netip.MustParseAddr("198.51.100.7"))
	v2.Update(nd2)
	eq(show(v2), []string{"fe80::5054:ff:fec0:20b RoCE v2", "::ffff:198.51.100.7 RoCE v2", "fd00:c0:2::11 RoCE v2"})
	if v2.Update(nd2) {
		t.Error("Update of an unchanged netdev reported a change")
	}
	for _, c := range []struct {
		mtu  int
		want verbs.MTU
	}{{1500, verbs.MTU1024}, {9000, verbs.MTU4096}, {4200, verbs.MTU4096}, {1280, verbs.MTU1024}, {600, verbs.MTU512}} {
		if got := ActiveMTU(c.mtu); got != c.want {
			t.Errorf("ActiveMTU(%d) = %v, want %v", c.mtu, got, c.want)
		}
	}
}
