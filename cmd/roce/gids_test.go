package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/verbs"
)

// gidRow is one data line of roce gids.
type gidRow struct {
	dev, port, index, gid, ipv4, ver, netdev string
}

func (r gidRow) String() string {
	return strings.Join([]string{r.dev, r.port, r.index, r.gid, r.ipv4, r.ver, r.netdev}, " ")
}

// parseGIDs checks the shape of roce gids' output — header, separator, data
// lines of exactly 7 whitespace-separated columns, n_gids_found=N with N the
// number of data lines — and returns the data lines.
func parseGIDs(t *testing.T, out string) []gidRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		t.Fatalf("gids output %q", out)
	}
	lines = lines[:len(lines)-1]
	if f := strings.Fields(lines[0]); strings.Join(f, " ") != "DEV PORT INDEX GID IPv4 VER NETDEV" {
		t.Errorf("header %q", lines[0])
	}
	if f := strings.Fields(lines[1]); len(f) != 7 || strings.Trim(strings.Join(f, ""), "-") != "" {
		t.Errorf("separator %q", lines[1])
	}
	last := lines[len(lines)-1]
	var rows []gidRow
	for _, l := range lines[2 : len(lines)-1] {
		f := strings.Fields(l)
		if len(f) != 7 {
			t.Errorf("line %q has %d columns, want 7", l, len(f))
			continue
		}
		if strings.Contains(l, " ") {
			t.Errorf("line %q: columns are separated by tabs", l)
		}
		rows = append(rows, gidRow{f[0], f[1], f[2], f[3], f[4], f[5], f[6]})
	}
	if want := fmt.Sprintf("n_gids_found=%d", len(rows)); last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
	return rows
}

// wantGIDRows is the table of a device whose GID table is entries.
func wantGIDRows(dev string, entries []verbs.GIDEntry) []gidRow {
	var rows []gidRow
	for i, e := range entries {
		if !e.GID.IsValid() {
			continue
		}
		r := gidRow{dev, "1", strconv.Itoa(i), e.GID.String(), "-", "v2", e.Netdev}
		if e.GID.Is4In6() {
			r.ipv4 = e.GID.Unmap().String()
		}
		if e.Type == verbs.GIDTypeRoCEv1 {
			r.ver = "v1"
		}
		rows = append(rows, r)
	}
	return rows
}

func sameRows(t *testing.T, what string, got, want []gidRow) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

func TestGIDsOnLoopback(t *testing.T) {
	dir := t.TempDir()
	if rows := parseGIDs(t, wantRun(t, dir, exitOK, nil, "gids")); len(rows) != 0 {
		t.Errorf("no devices: %v", rows)
	}
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	reg := host.NewRegistry(dir)
	def, _ := reg.Get("rxe0")
	entries, _, err := reg.GIDTableOf(def)
	if err != nil {
		t.Fatal(err)
	}
	want := wantGIDRows("rxe0", entries)
	if len(want) == 0 || want[0].gid != "fe80::200:ff:fe00:0" || want[0].ver != "v1" || want[1].ver != "v2" {
		t.Fatalf("lo's table: %v", want)
	}
	for _, args := range [][]string{{"gids"}, {"gids", "-d", "rxe0"}, {"gids", "rxe0"}, {"gids", "--device", "rxe0", "-p", "1"}} {
		code, stdout, stderr := roceAt(t, dir, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr)
		}
		sameRows(t, strings.Join(args, " "), parseGIDs(t, stdout), want)
		if want := gidHint(def, entries) + "\n"; stderr != want {
			t.Errorf("%q: stderr %q, want the hint %q", args, stderr, want)
		}
	}
}

func TestGIDsErrors(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitError, []string{"roce: gids: No such device: no device rxe7 in " + dir}, "gids", "-d", "rxe7")
	wantRun(t, dir, exitError, []string{"roce: gids: Invalid argument: port 2: goroce devices have one port, port 1"}, "gids", "-p", "2")
	wantRun(t, dir, exitUsage, []string{"ports are numbered from 1"}, "gids", "-p", "-1")
	wantRun(t, dir, exitUsage, []string{"gids: two devices, -d rxe0 and rxe1"}, "gids", "-d", "rxe0", "rxe1")
	wantRun(t, dir, exitUsage, []string{"accepts at most 1 arg(s)"}, "gids", "rxe0", "rxe1")
	wantRun(t, dir, exitUsage, []string{`invalid argument "x" for "-p, --port"`}, "gids", "-p", "x")
}

func TestGIDHint(t *testing.T) {
	def := host.DeviceDef{Name: "rxe0", Netdev: "eth0"}
	nd := labNetdev
	const tools = " (the sgid_index: perftest's -x, ibv_*_pingpong's -g)"
	for _, c := range []struct {
		v     host.Versions
		addrs []string
		want  string
	}{
		{host.VersionsBoth, []string{"192.0.2.11", "fd00:c0:2::11"},
			"rxe0 port 1: use GID index 3 for RoCE v2 over IPv4 (192.0.2.11), 5 for RoCE v2 over IPv6 (fd00:c0:2::11), 2 for RoCE v1 (192.0.2.11)" + tools},
		{host.VersionsV2, []string{"192.0.2.11", "fd00:c0:2::11"},
			"rxe0 port 1: use GID index 1 for RoCE v2 over IPv4 (192.0.2.11), 2 for RoCE v2 over IPv6 (fd00:c0:2::11)" + tools},
		{host.VersionsV2, []string{"fd00:c0:2::11"}, "rxe0 port 1: use GID index 1 for RoCE v2 over IPv6 (fd00:c0:2::11)" + tools},
		{host.VersionsV1, []string{"192.0.2.11"}, "rxe0 port 1: use GID index 1 for RoCE v1 (192.0.2.11)" + tools},
		{host.VersionsV1, nil, "rxe0 port 1: use GID index 0 for RoCE v1 (fe80::5054:ff:fec0:20b)" + tools},
		{host.VersionsV2, nil, "rxe0 port 1: only the link-local GID 0 (fe80::5054:ff:fec0:20b), which reaches the same link only; " +
			"add an IP address to eth0 for a routable RoCE v2 GID"},
	} {
		nd.Addrs = nil
		for _, a := range c.addrs {
			nd.Addrs = append(nd.Addrs, netip.MustParseAddr(a))
		}
		tab := host.GIDTable{Versions: c.v, Netdev: "eth0"}
		tab.Update(nd)
		if got := gidHint(def, tab.Entries()); got != c.want {
			t.Errorf("%s %v:\n got %q\nwant %q", c.v, c.addrs, got, c.want)
		}
	}
	if got := gidHint(def, nil); got != "rxe0 port 1: no GIDs" {
		t.Errorf("empty table: %q", got)
	}
}
