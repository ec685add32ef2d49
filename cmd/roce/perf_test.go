package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/perftest/perftestcheck"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

func TestPerfUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"perf"},
		{"perf", "write", "-n", "2"},
		{"perf", "atomic", "-s", "64"},
		{"perf", "read", "-R", "-n", "1"},
		{"perf", "send", "--lat", "-q", "2"},
		{"perf", "write", "-m", "1000"},
		{"perf", "write", "a", "b"},
	} {
		if code, _, stderr := roceAt(t, dir, args...); code != exitUsage {
			t.Errorf("roce %s: exit %d, want %d: %s", strings.Join(args, " "), code, exitUsage, stderr)
		}
	}
	// -T, refused in perftest's words.
	for _, c := range []struct{ args, want string }{
		{"perf write -T 106", "TOS only valid for rdma_cm based QP and RawEth QP"},
		{"perf send -R --lat -T 256", "TOS should be between 0 and 255"},
		{"perf read -R -T -1 192.0.2.1", "TOS should be between 0 and 255"},
		// -e, perftest's --events, in perftest's words.
		{"perf write -e", "Events feature not available on WRITE verb"},
		{"perf write --lat --use_event", "Events feature not available on WRITE verb"},
		{"perf send -e -D 2", "Duration mode doesn't work with events"},
	} {
		if code, _, stderr := roceAt(t, dir, strings.Fields(c.args)...); code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("roce %s: exit %d, stderr %q; want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
}

// TestPerfOverVeth runs roce perf as server and client in two network
// namespaces joined by a veth pair, on devices made by roce link add,
// for every test: both exit 0 and print perftest's table.
func TestPerfOverVeth(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	for _, l := range []struct {
		h            *nettest.Host
		name, netdev string
	}{{ha, "rxe0", "veth0"}, {hb, "rxe1", "veth1"}} {
		if code, _, stderr := roceIn(t, l.h, dir, "link", "add", l.name, "type", "rxe", "netdev", l.netdev, "roce-versions", "v2"); code != 0 {
			t.Fatalf("link add %s: exit %d: %s", l.name, code, stderr)
		}
	}
	// The client's device has default_roce_tos 32: its -R connections
	// carry it, except the test QPs' with -T, which have -T's.
	if code, _, stderr := roceIn(t, hb, dir, "tos", "-d", "rxe1", "-t", strconv.Itoa(clientDefaultTOS)); code != 0 {
		t.Fatalf("tos -d rxe1: exit %d: %s", code, stderr)
	}
	cases := [][]string{
		{"write", "-s", "4096", "-n", "50"},
		{"read", "-s", "4096", "-n", "50", "-q", "2"},
		{"send", "-s", "2048", "-n", "50"},
		{"atomic", "-n", "50", "--report_gbits"},
		{"atomic", "-A", "CMP_AND_SWAP", "-n", "20"},
		{"write", "--lat", "-s", "64", "-n", "50"},
		{"read", "--lat", "-s", "64", "-n", "50"},
		{"send", "--lat", "-s", "64", "-n", "50"},
		{"atomic", "--lat", "-n", "50"},
		// -e: sleeping on CQ events instead of busy-polling the CQ.
		{"send", "--lat", "-e", "-s", "64", "-n", "50"},
		{"read", "--events", "-s", "4096", "-n", "50"},
		{"write", "-s", "65536", "-D", "2", "-q", "2"},
		// -R: the exchange and the QPs through RDMA CM.
		{"write", "-R", "-s", "4096", "-n", "50"},
		{"read", "-R", "-s", "4096", "-n", "50", "-q", "2"},
		{"send", "-R", "-s", "2048", "-n", "50"},
		{"write", "-R", "--lat", "-s", "64", "-n", "50"},
		{"read", "-R", "--lat", "-s", "64", "-n", "50"},
		{"send", "-R", "--lat", "-s", "64", "-n", "50"},
		// IPv6: the global IPv6 GID (-x 2, after the link-local and the
		// IPv4 GID), the exchange (TCP, or RDMA CM with -R) to the
		// server's IPv6 address.
		{"write", "--ipv6", "-x", "2", "-s", "4096", "-n", "50"},
		{"send", "--ipv6", "-x", "2", "--lat", "-s", "64", "-n", "50"},
		{"write", "-R", "--ipv6", "-s", "4096", "-n", "50"},
		{"read", "-R", "--ipv6", "--lat", "-s", "64", "-n", "50"},
		{"atomic", "-R", "-n", "50"},
		// Flags checked below on the output, the --out_json files and the
		// --pcap captures ({side} is a file of the side's own).
		{"write", "-a", "-n", "5"},
		{"write", "-m", "512", "-s", "4096", "-n", "20", "--pcap", "{side}.pcap"},
		{"send", "-F", "-s", "2048", "-n", "50"},
		{"read", "--out_json", "--out_json_file", "{side}.json", "-s", "4096", "-n", "50"},
		{"send", "--lat", "-D", "2", "-s", "64"},
		{"read", "-D", "2", "-s", "4096"},
		{"atomic", "-D", "2"},
		// -T: the test QPs' packets both ways carry the TOS, as perftest's
		// -R -T; the exchange's connection's carry the client device's
		// default_roce_tos (clientDefaultTOS), -T 0 or not.
		{"write", "-R", "-T", "106", "-s", "4096", "-n", "50", "--pcap", "{side}.pcap"},
		{"send", "-R", "--lat", "-T", "0xb8", "-s", "64", "-n", "50", "--pcap", "{side}.pcap"},
		{"read", "-R", "-T", "0", "-s", "4096", "-n", "50", "--pcap", "{side}.pcap"},
		// 0 where perftest gives it a meaning: -u 0 no ACK timeout, -o 0
		// the device's maximum of outstanding reads, -m 0 the port's MTU;
		// -o above the maximum runs with it, saying so as perftest does.
		{"read", "-u", "0", "-o", "0", "-m", "0", "-s", "4096", "-n", "50", "--disable_pcie_relaxed"},
		{"read", "-o", "200", "-s", "4096", "-n", "50"},
		// -c UD: SENDs through an address handle, at most the path MTU
		// (1024 here: a larger -s is clamped, -a stops there), Q_Key
		// 0x11111111 in every DETH (checked in the captures).
		{"send", "-c", "UD", "-s", "1024", "-n", "50"},
		{"send", "-c", "UD", "-s", "4096", "-n", "50", "-q", "2"},
		{"send", "-c", "UD", "--lat", "-s", "64", "-n", "50", "--pcap", "{side}.pcap"},
		{"send", "-c", "UD", "-a", "-n", "5"},
		{"send", "-c", "UD", "-b", "-s", "512", "-n", "50"},
	}
	files := t.TempDir()
	for i, args := range cases {
		t.Run(strings.Join(args, "_"), func(t *testing.T) {
			port := strconv.Itoa(18600 + i)
			sideArgs := func(side string) []string {
				a := slices.Clone(args)
				for k := range a {
					a[k] = strings.ReplaceAll(a[k], "{side}", filepath.Join(files, fmt.Sprint(i, "-", side)))
				}
				return a
			}
			sargs := append([]string{"perf"}, append(sideArgs("server"), "-d", "rxe0", "-p", port)...)
			server := ha.IPv4.String()
			if slices.Contains(args, "--ipv6") {
				server = ha.IPv6.String()
			}
			cargs := append([]string{"perf"}, append(sideArgs("client"), "-d", "rxe1", "-p", port, server)...)
			type ret struct {
				code           int
				stdout, stderr string
			}
			sc := make(chan ret, 1)
			listening := make(chan struct{})
			go func() {
				// In this process, so that the client starts once the
				// server says it waits: an RDMA CM request the server's
				// device is not yet open for is only sent again after
				// 4.3 s.
				var r ret
				out := &signalWriter{on: "Waiting for client to connect", ch: listening}
				var errb bytes.Buffer
				if err := ha.Do(func() error {
					r.code = run(append([]string{"--rundir", dir}, sargs...), out, &errb)
					return nil
				}); err != nil {
					r.code, r.stderr = -1, err.Error()
				}
				r.stdout, r.stderr = out.String(), r.stderr+errb.String()
				sc <- r
			}()
			var c ret
			var s ret
			select {
			case <-listening:
			case s = <-sc:
				t.Fatalf("server exit %d: %s\n%s", s.code, s.stderr, s.stdout)
			}
			for try := 0; try < 50; try++ {
				c.code, c.stdout, c.stderr = roceIn(t, hb, dir, cargs...)
				if c.code == 0 || !strings.Contains(c.stderr, "Couldn't connect") && !strings.Contains(c.stderr, "Unable to perform rdma_client function") {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case s = <-sc:
			case <-time.After(2 * time.Minute):
				t.Fatalf("the server has not exited 2 minutes after the client (exit %d: %s\n%s)", c.code, c.stderr, c.stdout)
			}
			if c.code != 0 || s.code != 0 {
				t.Fatalf("client exit %d: %s\n%s\nserver exit %d: %s\n%s", c.code, c.stderr, c.stdout, s.code, s.stderr, s.stdout)
			}
			lat := strings.Contains(strings.Join(args, " "), "--lat")
			dur := strings.Contains(strings.Join(args, " "), "-D")
			checkPerfTable(t, "client", c.stdout, lat, dur)
			if slices.Contains(args, "-R") {
				for who, out := range map[string]string{"client": c.stdout, "server": s.stdout} {
					if !strings.Contains(out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm") {
						t.Errorf("%s: the banner does not say rdma_cm:\n%s", who, out)
					}
				}
			}
			if !(lat && (args[0] == "read" || args[0] == "atomic")) {
				checkPerfTable(t, "server", s.stdout, lat, dur)
			}
			if dur && !strings.Contains(c.stderr, "roce perf:   1 s of 2 s: ") {
				t.Errorf("no progress line on the client's stderr: %q", c.stderr)
			}
			checkPerfFlags(t, args, sideArgs, map[string]string{"server": s.stdout, "client": c.stdout})
			if flagValue(args, "-o") == "200" {
				for who, e := range map[string]string{"client": c.stderr, "server": s.stderr} {
					if want := " Number of outstanding reads is above max = 128\n Changing to that max value\n"; !strings.Contains(e, want) {
						t.Errorf("%s: -o 200: stderr %q lacks perftest's %q", who, e, want)
					}
				}
			}
			t.Logf("server:\n%s%sclient:\n%s%s", s.stdout, s.stderr, c.stdout, c.stderr)
		})
	}
}

// clientDefaultTOS is the default_roce_tos of TestPerfOverVeth's client
// device.
const clientDefaultTOS = 32

// signalWriter collects output and closes ch once it contains on.
type signalWriter struct {
	mu   sync.Mutex
	b    bytes.Buffer
	on   string
	ch   chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if !w.done && strings.Contains(w.b.String(), w.on) {
		w.done = true
		close(w.ch)
	}
	return n, err
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// checkPerfTable finds perftest's result header and checks the row under
// it has the right number of numeric columns, with a positive result.
func checkPerfTable(t *testing.T, who, out string, lat, dur bool) {
	t.Helper()
	if !strings.Contains(out, " Link type       : Ethernet\n") || !strings.Contains(out, " remote address: LID 0000 QPN 0x") {
		t.Errorf("%s: no banner or addresses:\n%s", who, out)
	}
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, " #bytes") || i+1 >= len(lines) {
			continue
		}
		f := strings.Fields(lines[i+1])
		want, col := 5, 3
		if lat {
			want, col = 9, 4
		}
		if lat && dur {
			want, col = 4, 2
		}
		if len(f) != want {
			t.Fatalf("%s: row %q: %d columns, want %d", who, lines[i+1], len(f), want)
		}
		v, err := strconv.ParseFloat(f[col], 64)
		if err == nil && v == 0 && !lat {
			// BW in MB/s has two decimals: 2-byte messages at under
			// 2,500 a second (a loaded machine under -race) print 0.00,
			// as perftest's would; the message rate has six.
			col = 4
			v, err = strconv.ParseFloat(f[col], 64)
		}
		if err != nil || !(v > 0) {
			t.Errorf("%s: row %q: column %d is %q", who, lines[i+1], col, f[col])
		}
		return
	}
	t.Errorf("%s: no result table:\n%s", who, out)
}

// flagValue returns the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// checkPerfFlags checks what the flags of a TestPerfOverVeth case show in
// both sides' output (out, by side) and files (sideArgs gives a side's
// arguments, its file names in them).
func checkPerfFlags(t *testing.T, args []string, sideArgs func(side string) []string, out map[string]string) {
	t.Helper()
	tos := -1
	if v := flagValue(args, "-T"); v != "" {
		n, err := strconv.ParseInt(v, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		tos = int(n)
		// perftest's banner line, on both sides.
		want := fmt.Sprintf(" Data ex. method : rdma_cm \tTOS    : %d\n", tos)
		for side, o := range out {
			if !strings.Contains(o, want) {
				t.Errorf("%s: the banner lacks %q:\n%s", side, want, o)
			}
		}
	}
	ud := flagValue(args, "-c") == "UD"
	if slices.Contains(args, "-a") {
		// A row for each size, 2 B to 8 MiB (UD: to the path MTU), on the
		// client.
		var sizes []string
		for _, row := range tableRows(out["client"]) {
			sizes = append(sizes, strings.Fields(row)[0])
		}
		var want []string
		for n := 2; n <= 1<<23 && !(ud && n > 1024); n *= 2 {
			want = append(want, strconv.Itoa(n))
		}
		if !slices.Equal(sizes, want) {
			t.Errorf("-a: the client's rows are for sizes %v, want %v", sizes, want)
		}
	}
	// perftest 6.06 as Debian builds it (with PCIe relaxed ordering
	// support) says ON, or OFF with --disable_pcie_relaxed.
	relax := " PCIe relax order: ON\n"
	if slices.Contains(args, "--disable_pcie_relaxed") {
		relax = " PCIe relax order: OFF\n"
	}
	for side, o := range out {
		if !strings.Contains(o, relax) {
			t.Errorf("%s: the banner lacks %q:\n%s", side, relax, o)
		}
	}
	mtu := 1024 // the port's, on a 1500-byte veth
	if ud {
		// A UD message is one packet: -s beyond the path MTU runs at it.
		for side, o := range out {
			for _, row := range tableRows(o) {
				if n, _ := strconv.Atoi(strings.Fields(row)[0]); n > mtu {
					t.Errorf("%s: -c UD: a row for %d bytes, over the %d-byte path MTU:\n%s", side, n, mtu, o)
				}
			}
			if !strings.Contains(o, " Connection type : UD\t") {
				t.Errorf("%s: the banner does not say Connection type : UD:\n%s", side, o)
			}
		}
		if s := flagValue(args, "-s"); s != "" && !slices.Contains(args, "-b") {
			want, _ := strconv.Atoi(s)
			if rows := tableRows(out["client"]); len(rows) != 1 || strings.Fields(rows[0])[0] != strconv.Itoa(min(want, mtu)) {
				t.Errorf("client: -c UD -s %s: rows %q, want one for %d bytes", s, rows, min(want, mtu))
			}
		}
	}
	if v := flagValue(args, "-m"); v != "" {
		if v != "0" { // -m 0: the port's
			mtu, _ = strconv.Atoi(v)
		}
		for side, o := range out {
			if want := fmt.Sprintf(" Mtu             : %d[B]\n", mtu); !strings.Contains(o, want) {
				t.Errorf("%s: the banner lacks %q:\n%s", side, want, o)
			}
		}
	}
	var qpns map[uint32]bool // the test QPs', both sides'
	if tos >= 0 {
		qpns = perftestcheck.AddressQPNs(t, out["server"], out["client"])
	}
	for _, side := range []string{"server", "client"} {
		a := sideArgs(side)
		if f := flagValue(a, "--pcap"); f != "" {
			checkPerfCapture(t, side, f, tos, qpns, mtu, args[0], ud)
		}
		if slices.Contains(a, "--out_json") {
			checkPerfJSON(t, side, flagValue(a, "--out_json_file"), args)
		}
	}
}

// tableRows returns the rows under the first result header of out.
func tableRows(out string) []string {
	i := strings.Index(out, "\n #bytes")
	if i < 0 {
		return nil
	}
	lines := strings.Split(out[i+1:], "\n")[1:]
	for k, l := range lines {
		if strings.HasPrefix(l, "---") || l == "" {
			return lines[:k]
		}
	}
	return lines
}

// checkPerfCapture reads a side's --pcap capture with link/pcap
// and wire: every RoCE packet parses and its ICRC is right; both ways
// are there; no payload is above mtu, and a write test's WRITEs were
// segmented to it. With tos >= 0 (-T, with -R), the connections of the
// test QPs (qpns) carry tos both ways and the exchange's carries the
// client device's default_roce_tos (clientDefaultTOS), as perftest's do.
func checkPerfCapture(t *testing.T, side, file string, tos int, qpns map[uint32]bool, mtu int, verb string, ud bool) {
	t.Helper()
	from := map[netip.Addr]int{} // packets by source address
	conns := map[string]int{}    // with -T: packets by connection and direction
	ops := map[string]int{}
	comms := map[uint32]string{} // for perftestcheck.ConnOf
	err := pcap.ReadFile(file, func(f pcap.Frame) error {
		var p wire.Packet
		if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			if !errors.Is(err, wire.ErrNotRoCE) {
				t.Errorf("%s capture: frame %d: %v", side, f.Number, err)
			}
			return nil
		}
		if err := p.VerifyICRC(); err != nil {
			t.Errorf("%s capture: frame %d: %v", side, f.Number, err)
		}
		h := p.IPv4()
		if h == nil {
			t.Errorf("%s capture: frame %d is not RoCE v2 over IPv4", side, f.Number)
			return nil
		}
		from[h.Src()]++
		if tos >= 0 {
			conn := perftestcheck.ConnOf(&p, qpns, comms)
			want := map[string]int{"test": tos, "exchange": clientDefaultTOS}[conn]
			if conn != "" && int(h.TOS()) != want {
				t.Errorf("%s capture: frame %d (%s: %v %v → %v): TOS %d, want %d", side, f.Number, conn, p.Opcode(), h.Src(), h.Dst(), h.TOS(), want)
			}
			conns[fmt.Sprint(conn, " from ", h.Src())]++
		}
		if n := len(p.Payload()); n > mtu && p.BTH().DestQP() != 1 {
			t.Errorf("%s capture: frame %d (%v): %d-byte payload over the %d-byte path MTU", side, f.Number, p.Opcode(), n, mtu)
		}
		ops[p.Opcode().String()]++
		if ud && p.Opcode() == wire.OpcodeUDSendOnly && p.BTH().DestQP() != 1 && p.DETH().QKey() != 0x11111111 { // QP1: the CM's MADs
			t.Errorf("%s capture: frame %d: UD SEND with Q_Key %#x, want perftest's 0x11111111", side, f.Number, p.DETH().QKey())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s capture: %v", side, err)
	}
	if len(from) != 2 {
		t.Errorf("%s capture: packets by source %v, want both ways", side, from)
	}
	if verb == "write" && ops["RC_RDMA_WRITE_MIDDLE"] == 0 {
		t.Errorf("%s capture: no RC_RDMA_WRITE_MIDDLE: %v", side, ops)
	}
	if ud && ops["UD_SEND_ONLY"] == 0 {
		t.Errorf("%s capture: -c UD but no UD_SEND_ONLY: %v", side, ops)
	}
	if tos >= 0 {
		for a := range from {
			for _, conn := range []string{"test", "exchange"} {
				if conns[fmt.Sprint(conn, " from ", a)] == 0 {
					t.Errorf("%s capture: no packets of the %s connection from %v: %v", side, conn, a, conns)
				}
			}
		}
		t.Logf("%s capture: %v", side, conns)
	}
	t.Logf("%s capture: %v", side, ops)
}

// checkPerfJSON parses a side's --out_json file, which is perftest's
// format (not strict JSON: unquoted keys and values, trailing commas):
// sections "test_info" and "results" of "key: value," lines.
func checkPerfJSON(t *testing.T, side, file string, args []string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%s: --out_json: %v", side, err)
	}
	sec := map[string]map[string]string{}
	var cur map[string]string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "{" || l == "}":
		case strings.HasSuffix(l, ": {"):
			cur = map[string]string{}
			sec[strings.TrimSuffix(l, ": {")] = cur
		case l == "},":
			cur = nil
		case cur != nil && strings.HasSuffix(l, ","):
			k, v, ok := strings.Cut(strings.TrimSuffix(l, ","), ":")
			if !ok {
				t.Fatalf("%s: --out_json line %q", side, l)
			}
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		default:
			t.Fatalf("%s: --out_json line %q:\n%s", side, l, b)
		}
	}
	info, res := sec["test_info"], sec["results"]
	dev := map[string]string{"server": `"rxe0"`, "client": `"rxe1"`}[side]
	if info == nil || info["test"] != "RDMA_Read_BW_Test" || info["Device"] != dev || info["Data_ex_method"] != "Ethernet" {
		t.Errorf("%s: --out_json test_info %v", side, info)
	}
	bw, _ := strconv.ParseFloat(res["BW_average"], 64)
	if res == nil || res["MsgSize"] != flagValue(args, "-s") || res["n_iterations"] != flagValue(args, "-n") || !(bw > 0) {
		t.Errorf("%s: --out_json results %v", side, res)
	}
	t.Logf("%s --out_json: %v", side, sec)
}
