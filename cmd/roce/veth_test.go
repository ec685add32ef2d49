package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/wire"
)

// roceIn runs the CLI inside h's network namespace, as `ip netns exec NS roce ...` would.
func roceIn(t *testing.T, h *nettest.Host, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	err := h.Do(func() error {
		code, stdout, stderr = roceAt(t, dir, args...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return code, stdout, stderr
}

// eui64 is the link-local address (and default GID) a MAC gives.
func eui64(mac wire.MAC) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe,
		13: mac[3], 14: mac[4], 15: mac[5]})
}

// guidOf is the node GUID a MAC gives, as ibv_devinfo prints it.
func guidOf(mac wire.MAC) uint64 {
	var g uint64
	b16 := eui64(mac).As16()
	for _, b := range b16[8:] {
		g = g<<8 | uint64(b)
	}
	return g
}

// v1GID prints a RoCE v1 GID as ibv_devinfo does: 16 hex bytes in pairs.
func v1GID(a netip.Addr) string {
	b := a.As16()
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(parts, ":")
}

// TestControlOverVeth adds devices inside two namespaces joined by a veth
// pair, then, from the root namespace, checks roce link show, dev, dev -v,
// devices and gids against the veths' real MACs and addresses; opens a
// device as a running process would and checks the commands still work
// (and delete refuses); takes a link down.
func TestControlOverVeth(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()

	if code, _, stderr := roceIn(t, ha, dir, "link", "add", "rxe0", "type", "rxe", "netdev", "veth0"); code != 0 {
		t.Fatalf("link add rxe0 in %s: exit %d: %s", ha.NSName, code, stderr)
	}
	if code, _, stderr := roceIn(t, hb, dir, "link", "add", "rxe1", "type", "rxe", "netdev", "veth1", "roce-versions", "v2"); code != 0 {
		t.Fatalf("link add rxe1 in %s: exit %d: %s", hb.NSName, code, stderr)
	}
	// veth0 is not in the root namespace, and is taken in ha's.
	wantRun(t, dir, exitError, []string{"roce: link add rxe2: No such device: netdev veth0 not found in this network namespace"},
		"link", "add", "rxe2", "type", "rxe", "netdev", "veth0")
	code, _, stderr := roceIn(t, ha, dir, "link", "add", "rxe2", "type", "rxe", "netdev", "veth0", "roce-versions", "v1")
	if want := "roce: link add rxe2: File exists: netdev veth0 in netns " + ha.NSName + " already has device rxe0\n"; code != exitError || stderr != want {
		t.Errorf("second device on veth0: exit %d, stderr %q, want %q", code, stderr, want)
	}

	// rdma link show.
	show := "link rxe0/1 state ACTIVE physical_state LINK_UP netdev veth0 \n" +
		"link rxe1/1 state ACTIVE physical_state LINK_UP netdev veth1 \n"
	if out := wantRun(t, dir, exitOK, nil, "link", "show"); out != show {
		t.Errorf("link show:\n%s\nwant:\n%s", out, show)
	}
	t.Logf("roce link show:\n%s", show)
	detail := "link rxe0/1 state ACTIVE physical_state LINK_UP netdev veth0 netns " + ha.NSName + " roce_versions both \n"
	if out := wantRun(t, dir, exitOK, nil, "link", "show", "-d", "rxe0"); out != detail {
		t.Errorf("link show -d rxe0: %q, want %q", out, detail)
	}

	// ibv_devinfo and ibv_devices: node GUIDs from the MACs.
	ga, gb := guidOf(ha.MAC), guidOf(hb.MAC)
	devinfo := kernelDevinfo(t, false, "rxe0", ga, nil) + kernelDevinfo(t, false, "rxe1", gb, nil)
	out := wantRun(t, dir, exitOK, nil, "dev")
	if out != devinfo {
		t.Errorf("dev:\n%s", lineDiff(out, devinfo))
	}
	t.Logf("roce dev:\n%s", out)
	devs := fmt.Sprintf("    device          \t   node GUID\n    ------          \t----------------\n"+
		"    rxe0            \t%016x\n    rxe1            \t%016x\n", ga, gb)
	if out := wantRun(t, dir, exitOK, nil, "devices"); out != devs {
		t.Errorf("devices: %q, want %q", out, devs)
	}

	// ibv_devinfo -v: the GID table in Linux's order, default GID first,
	// then IPv4, then IPv6; with both versions, v1 then v2 per address.
	llA, v4A, v6A := eui64(ha.MAC), netip.AddrFrom16(ha.IPv4.As16()), ha.IPv6
	if v6A != netip.MustParseAddr("fd00:198:18::1") || ha.IPv4 != netip.MustParseAddr("198.18.0.1") {
		t.Fatalf("nettest's addresses changed: %v %v", ha.IPv4, ha.IPv6)
	}
	gidLines := []string{
		"\t\t\tGID[  0]:\t\t" + v1GID(llA) + ", RoCE v1",
		"\t\t\tGID[  1]:\t\t" + llA.String() + ", RoCE v2",
		"\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c612:0001, RoCE v1",
		"\t\t\tGID[  3]:\t\t::ffff:198.18.0.1, RoCE v2",
		"\t\t\tGID[  4]:\t\tfd00:0198:0018:0000:0000:0000:0000:0001, RoCE v1",
		"\t\t\tGID[  5]:\t\tfd00:198:18::1, RoCE v2",
	}
	if v1GID(v4A) != "0000:0000:0000:0000:0000:ffff:c612:0001" {
		t.Fatalf("v1GID(%v) = %s", v4A, v1GID(v4A))
	}
	verbose := kernelDevinfo(t, true, "rxe0", ga, gidLines)
	out = wantRun(t, dir, exitOK, nil, "dev", "-v", "-d", "rxe0")
	if out != verbose {
		t.Errorf("dev -v -d rxe0:\n%s", lineDiff(out, verbose))
	}
	t.Logf("roce dev -v -d rxe0:\n%s", out)
	llB := eui64(hb.MAC)
	verboseB := kernelDevinfo(t, true, "rxe1", gb, []string{
		"\t\t\tGID[  0]:\t\t" + llB.String() + ", RoCE v2",
		"\t\t\tGID[  1]:\t\t::ffff:198.18.0.2, RoCE v2",
		"\t\t\tGID[  2]:\t\tfd00:198:18::2, RoCE v2",
	})
	if out := wantRun(t, dir, exitOK, nil, "dev", "-v", "-d", "rxe1"); out != verboseB {
		t.Errorf("dev -v -d rxe1:\n%s", lineDiff(out, verboseB))
	}

	// show_gids, with the index to use on stderr.
	gidRows := []gidRow{
		{"rxe0", "1", "0", v1GID(llA), "", "v1", "veth0"},
		{"rxe0", "1", "1", v1GID(llA), "", "v2", "veth0"},
		{"rxe0", "1", "2", "0000:0000:0000:0000:0000:ffff:c612:0001", "198.18.0.1", "v1", "veth0"},
		{"rxe0", "1", "3", "0000:0000:0000:0000:0000:ffff:c612:0001", "198.18.0.1", "v2", "veth0"},
		{"rxe0", "1", "4", "fd00:0198:0018:0000:0000:0000:0000:0001", "", "v1", "veth0"},
		{"rxe0", "1", "5", "fd00:0198:0018:0000:0000:0000:0000:0001", "", "v2", "veth0"},
		{"rxe1", "1", "0", v1GID(llB), "", "v2", "veth1"},
		{"rxe1", "1", "1", "0000:0000:0000:0000:0000:ffff:c612:0002", "198.18.0.2", "v2", "veth1"},
		{"rxe1", "1", "2", "fd00:0198:0018:0000:0000:0000:0000:0002", "", "v2", "veth1"},
	}
	const tools = " (the sgid_index: perftest's -x, ibv_*_pingpong's -g)\n"
	hints := "rxe0 port 1: use GID index 3 for RoCE v2 over IPv4 (198.18.0.1), 5 for RoCE v2 over IPv6 (fd00:198:18::1), 2 for RoCE v1 (198.18.0.1)" + tools +
		"rxe1 port 1: use GID index 1 for RoCE v2 over IPv4 (198.18.0.2), 2 for RoCE v2 over IPv6 (fd00:198:18::2)" + tools
	code, out, stderr = roceAt(t, dir, "gids")
	if code != 0 || stderr != hints {
		t.Errorf("gids: exit %d, stderr %q, want %q", code, stderr, hints)
	}
	sameRows(t, "gids", parseGIDs(t, out), gidRows)
	t.Logf("roce gids:\n%s(stderr) %s", out, stderr)
	code, out, _ = roceAt(t, dir, "gids", "-d", "rxe1", "-p", "1")
	if code != 0 {
		t.Errorf("gids -d rxe1: exit %d", code)
	}
	sameRows(t, "gids -d rxe1", parseGIDs(t, out), gidRows[6:])

	// A process runs rxe0 (this one, as any other would): the control
	// commands still work, show the owner and its published GID table, and
	// delete refuses.
	dev, err := host.Open("rxe0", host.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer dev.Close()
		pid := os.Getpid()
		owned := strings.TrimSuffix(detail, "\n") + fmt.Sprintf("owner %d \n", pid)
		if out := wantRun(t, dir, exitOK, nil, "link", "-d", "show", "rxe0"); out != owned {
			t.Errorf("link -d show rxe0 while open: %q, want %q", out, owned)
		}
		code, _, stderr := roceAt(t, dir, "link", "delete", "rxe0")
		if want := fmt.Sprintf("roce: link delete rxe0: Device or resource busy: process %d (", pid); code != exitError ||
			!strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, ") runs rxe0; stop it first\n") {
			t.Errorf("delete while open: exit %d, stderr %q", code, stderr)
		}
		code, out, _ := roceAt(t, dir, "gids", "-d", "rxe0")
		if code != 0 {
			t.Errorf("gids while open: exit %d", code)
		}
		sameRows(t, "gids while open", parseGIDs(t, out), gidRows[:6])
		if out := wantRun(t, dir, exitOK, nil, "dev", "-v", "-d", "rxe0"); out != verbose {
			t.Errorf("dev -v while open:\n%s", lineDiff(out, verbose))
		}
	}()
	wantRun(t, dir, exitOK, nil, "link", "delete", "rxe0")
	if out := wantRun(t, dir, exitOK, nil, "link"); out != show[strings.Index(show, "\n")+1:] {
		t.Errorf("link after delete: %q", out)
	}

	// veth1 down: rxe1's port goes down.
	if err := hb.Do(func() error {
		l, err := netlink.LinkByName("veth1")
		if err != nil {
			return err
		}
		return netlink.LinkSetDown(l)
	}); err != nil {
		t.Fatal(err)
	}
	if out := wantRun(t, dir, exitOK, nil, "link", "show", "rxe1"); out != "link rxe1/1 state DOWN physical_state DISABLED netdev veth1 \n" {
		t.Errorf("link show with veth1 down: %q", out)
	}
	down := strings.Replace(kernelDevinfo(t, false, "rxe1", gb, nil), "PORT_ACTIVE (4)", "PORT_DOWN (1)", 1)
	if out := wantRun(t, dir, exitOK, nil, "dev", "-d", "rxe1"); out != down {
		t.Errorf("dev -d rxe1 with veth1 down:\n%s", lineDiff(out, down))
	}
}
