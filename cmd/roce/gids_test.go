package main

import (
	"fmt"
	"net/netip"
	"regexp"
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

// show_gids' header and separator as mlnx-tools' script prints them (echo
// -e "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV").
const (
	showGIDsHeader    = "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV"
	showGIDsSeparator = "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---"
)

var sysfsGIDForm = regexp.MustCompile(`^[0-9a-f]{4}(:[0-9a-f]{4}){7}$`)

// parseGIDs checks that roce gids' output is laid out as show_gids' is —
// its header and separator, data lines of tab-separated columns, the GID
// in sysfs' form, an IPv4 column of the address and two spaces or empty
// (so 7 whitespace-separated fields with an address and 6 without, the
// 5th being VER then), n_gids_found=N with N the number of data lines —
// and returns the data lines.
func parseGIDs(t *testing.T, out string) []gidRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		t.Fatalf("gids output %q", out)
	}
	lines = lines[:len(lines)-1]
	if lines[0] != showGIDsHeader {
		t.Errorf("header %q, want show_gids' %q", lines[0], showGIDsHeader)
	}
	if lines[1] != showGIDsSeparator {
		t.Errorf("separator %q, want show_gids' %q", lines[1], showGIDsSeparator)
	}
	last := lines[len(lines)-1]
	var rows []gidRow
	for _, l := range lines[2 : len(lines)-1] {
		tabs, fields := strings.Split(l, "\t"), strings.Fields(l)
		var r gidRow
		switch {
		case len(tabs) == 7 && strings.HasSuffix(tabs[4], "  ") && len(fields) == 7:
			r = gidRow{tabs[0], tabs[1], tabs[2], tabs[3], strings.TrimSuffix(tabs[4], "  "), tabs[5], tabs[6]}
			if fields[4] != r.ipv4 || fields[5] != r.ver || fields[6] != r.netdev {
				t.Errorf("line %q: awk would see %q", l, fields)
			}
		case len(tabs) == 8 && tabs[4] == "" && tabs[5] == "" && len(fields) == 6:
			r = gidRow{tabs[0], tabs[1], tabs[2], tabs[3], "", tabs[6], tabs[7]}
			if fields[4] != r.ver || fields[5] != r.netdev {
				t.Errorf("line %q: awk would see %q", l, fields)
			}
		default:
			t.Errorf("line %q is not laid out as show_gids' lines are", l)
			continue
		}
		if !sysfsGIDForm.MatchString(r.gid) {
			t.Errorf("line %q: GID %q is not in the sysfs form", l, r.gid)
		}
		rows = append(rows, r)
	}
	if want := fmt.Sprintf("n_gids_found=%d", len(rows)); last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
	return rows
}

// wantGIDRows is the table of a device whose GID table is entries, each
// GID as sysfs writes it (written out here byte by byte, not by the code
// under test).
func wantGIDRows(dev string, entries []verbs.GIDEntry) []gidRow {
	var rows []gidRow
	for i, e := range entries {
		if !e.GID.IsValid() {
			continue
		}
		b := e.GID.As16()
		var groups []string
		for j := 0; j < 16; j += 2 {
			groups = append(groups, fmt.Sprintf("%02x%02x", b[j], b[j+1]))
		}
		r := gidRow{dev, "1", strconv.Itoa(i), strings.Join(groups, ":"), "", "v2", e.Netdev}
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
	if len(want) == 0 || want[0].gid != "fe80:0000:0000:0000:0200:00ff:fe00:0000" || want[0].ver != "v1" || want[1].ver != "v2" {
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

// TestGIDsErrors: a bad command line or a device that does not exist is
// an error on stderr and nothing on stdout (roce gids nosuch printed an
// empty table, n_gids_found=0, before failing).
func TestGIDsErrors(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	for _, args := range [][]string{{"gids", "-d", "rxe7"}, {"gids", "nosuch"}} {
		code, stdout, stderr := roceAt(t, dir, args...)
		if want := "roce: gids: No such device: no device " + args[len(args)-1] + " in " + dir; code != exitError ||
			stdout != "" || !strings.HasPrefix(stderr, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, %q", args, code, stdout, stderr, want)
		}
	}
	wantRun(t, dir, exitError, []string{"roce: gids: Invalid argument: port 2: goroce devices have one port, port 1"}, "gids", "-p", "2")
	wantRun(t, dir, exitUsage, []string{"roce: gids: Invalid argument: -p -1: the port number should be between 1 and 255"}, "gids", "-p", "-1")
	wantRun(t, dir, exitUsage, []string{"roce: gids: Invalid argument: -p 0: the port number should be between 1 and 255"}, "gids", "-p", "0")
	wantRun(t, dir, exitUsage, []string{"gids: two devices, -d rxe0 and rxe1"}, "gids", "-d", "rxe0", "rxe1")
	wantRun(t, dir, exitUsage, []string{"accepts at most 1 arg(s)"}, "gids", "rxe0", "rxe1")
	wantRun(t, dir, exitUsage, []string{`roce: gids: Invalid argument: -p x: not an integer; the port number should be between 1 and 255`}, "gids", "-p", "x")
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
