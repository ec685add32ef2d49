package perftest_test

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/perftest"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

var labTools = []struct {
	tool  string
	verb  perftest.Verb
	lat   bool
	size  int
	conn  string // -c UC or UD; "": RC, perftest's default
	bidir bool   // -b
}{
	{"ib_write_bw", perftest.Write, false, 4096, "", false},
	{"ib_read_bw", perftest.Read, false, 4096, "", false},
	{"ib_send_bw", perftest.Send, false, 2048, "", false},
	{"ib_atomic_bw", perftest.Atomic, false, 0, "", false},
	{"ib_write_lat", perftest.Write, true, 64, "", false},
	{"ib_send_lat", perftest.Send, true, 64, "", false},
	{"ib_read_lat", perftest.Read, true, 64, "", false},
	{"ib_write_bw", perftest.Write, false, 4096, "UC", false},
	{"ib_send_bw", perftest.Send, false, 2048, "UC", false},
	{"ib_write_lat", perftest.Write, true, 64, "UC", false},
	{"ib_send_lat", perftest.Send, true, 64, "UC", false},
	// UD: the lab's path MTU is 1024, so at most 1024-byte messages.
	{"ib_send_bw", perftest.Send, false, 1024, "UD", false},
	{"ib_send_lat", perftest.Send, true, 64, "UD", false},
	{"ib_send_bw", perftest.Send, false, 512, "UD", true},
	{"ib_write_bw", perftest.Write, false, 4096, "", true},
	{"ib_read_bw", perftest.Read, false, 4096, "", true},
	{"ib_send_bw", perftest.Send, false, 2048, "", true},
	{"ib_atomic_bw", perftest.Atomic, false, 0, "", true},
}

// labFamilies are the RoCE v2 GIDs the lab tests run over: goroce's -x
// and perftest's -x name the IPv4-mapped or the IPv6 GID of either side.
// perftest 6.06's TCP exchange (and its -R) resolves the server's name
// for AF_INET only: `ib_write_bw -x 2 fd00:c0:2::11` exits 1 with
// "Address family for hostname not supported for fd00:c0:2::11:18515",
// so the exchange stays on the IPv4 management network either way.
var labFamilies = []struct {
	name string
	ours func(lab.VM) string // goroce's address in the lab
	vm   func(lab.VM) string // the VM's
}{
	{"IPv4", func(lab.VM) string { return lab.HostIPv4 }, func(v lab.VM) string { return v.IPv4 }},
	{"IPv6", func(lab.VM) string { return lab.HostIPv6 }, func(v lab.VM) string { return v.IPv6 }},
}

// perftestGID is a GID as perftest prints it in its address lines:
// " GID: 253:00:00:192:...".
func perftestGID(ip string) string {
	b := netip.MustParseAddr(ip).As16()
	var parts []string
	for _, x := range b {
		parts = append(parts, fmt.Sprintf("%02d", x))
	}
	return " GID: " + strings.Join(parts, ":") + "\n"
}

// TestLabInterop runs goroce's perf against perftest 6.06 (Debian 12's
// perftest 4.5-0.17) on Linux rxe in the lab's vm1, in both roles, for
// every BW and latency tool, 5 iterations each, over the IPv4 and then
// the IPv6 RoCE v2 GID: both sides succeed, both print a table line with
// a positive bandwidth or latency, and each names the other's GID of that
// family in its remote address line. With -b (the BW tools) both print
// the same line: each side's report plus the other's.
func TestLabInterop(t *testing.T) {
	l := lab.Start(t)
	d := l.OpenDevice(t, host.VersionsV2)
	vm := lab.VM1
	l.Exec(vm, killPerftest)
	before := l.Counters(t, vm)
	for _, fam := range labFamilies {
		ourIP, theirIP := fam.ours(vm), fam.vm(vm)
		gOurs, gTheirs := lab.HostGIDIndex(t, d, ourIP), l.GIDIndex(t, vm, theirIP)
		for _, tc := range labTools {
			for _, role := range []string{"client", "server"} {
				name := fam.name + "/" + tc.tool
				if tc.conn != "" {
					name += "-" + tc.conn
				}
				if tc.bidir {
					name += "-b"
				}
				t.Run(name+"/goroce-"+role, func(t *testing.T) {
					r := &labRun{l: l, vm: vm, dev: d.Device, tool: tc.tool, out: &syncBuilder{},
						args: fmt.Sprintf("-d rxe0 -x %d -n 5 -F", gTheirs)}
					r.c = perftest.Config{Verb: tc.verb, Lat: tc.lat, Size: tc.size, Iters: 5, GIDIndex: gOurs}
					if tc.conn != "" {
						r.c.Connection = tc.conn
						r.args += " -c " + tc.conn
					}
					if tc.bidir {
						r.c.Bidirectional = true
						r.args += " -b"
					}
					if tc.size != 0 {
						r.args += fmt.Sprintf(" -s %d", tc.size)
					}
					ours, theirs := r.run(t, role)
					if c := tc.conn; c != "" && (!strings.Contains(theirs, " Connection type : "+c) || !strings.Contains(ours, " Connection type : "+c)) {
						t.Errorf("a banner does not say Connection type : %s:\n%s\n%s", c, ours, theirs)
					}
					if !strings.Contains(ours, perftestGID(theirIP)) || !strings.Contains(theirs, perftestGID(ourIP)) {
						t.Errorf("the address lines do not name %s and %s:\n%s\n%s", ourIP, theirIP, ours, theirs)
					}
				})
			}
		}
	}
	ours := d.Counters().Snapshot()
	l.CheckRxeCounters(t, vm, before, ours)
	t.Logf("goroce counters: %v", ours)
}

// killPerftest ends any perftest tool left in a VM by an interrupted run:
// it would answer the next run's exchange.
const killPerftest = "killall ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_send_lat ib_read_lat 2>/dev/null; true"

// perftestLimit bounds a perftest tool's run in the VM (timeout(1)); a
// subtest's context gives goroce's side a little longer.
const perftestLimit = 80 * time.Second

// labRun is one run of goroce's perf against a perftest tool in a lab VM,
// in either role: what every lab test that runs perftest does, so that
// what perftest may do on a loaded VM is tolerated in one place.
type labRun struct {
	l    *lab.Lab
	vm   lab.VM
	dev  *verbs.Device // nil with RDMA CM (-R): the CM finds it
	tool string        // perftest's program
	args string        // its flags, without the server's address
	c    perftest.Config
	out  *syncBuilder // c.Out: goroce's output
}

// run runs r with goroce as role ("client" or "server") under a context of
// its own and checks what both sides printed: success, a result on each
// (tolerating a perftest that could not measure its clock, see
// checkServerResult), perftest's table line, and with -b the same line on
// both sides. It returns goroce's output and perftest's.
func (r *labRun) run(t *testing.T, role string) (ours, theirs string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), perftestLimit+10*time.Second)
	defer cancel()
	r.c.Out = r.out
	if role == "client" {
		theirs = r.goroceClient(ctx, t)
	} else {
		theirs = r.goroceServer(ctx, cancel, t)
	}
	readLat := r.c.Lat && r.c.Verb == perftest.Read
	if !(readLat && role == "client") && !perftestLine(theirs, r.c.Lat) { // ib_read_lat's server prints no table
		t.Errorf("%s printed no result line:\n%s", r.tool, theirs)
	}
	if r.c.Bidirectional {
		checkDuplexInterop(t, r.out.String(), theirs)
	}
	t.Logf("goroce %s:\n%s%s:\n%s", role, r.out, r.tool, theirs)
	return r.out.String(), theirs
}

// goroceClient runs the perftest tool as the server in the VM and goroce's
// client against it, retrying while the tool does not listen yet, and
// returns the tool's output.
func (r *labRun) goroceClient(ctx context.Context, t *testing.T) string {
	t.Helper()
	r.l.Exec(r.vm, killPerftest)
	job := r.l.Background(t, r.vm, "/tmp/perf.log", perftestLimit, r.tool+" "+r.args)
	notYet := "Couldn't connect" // the TCP exchange, on the management network
	r.c.Server, r.c.Dial = r.vm.Mgmt, r.l.DialContext
	if r.c.RDMACM {
		notYet, r.c.Server, r.c.Dial = "Unable to perform rdma_client function", r.vm.IPv4, nil
	}
	var res *perftest.Result
	err := lab.UntilListening(ctx, job, notYet, func() (err error) {
		res, err = perftest.Run(ctx, r.dev, r.c)
		return err
	})
	if err != nil {
		theirs, _, _ := job.Log()
		t.Fatalf("goroce client: %v\n%s\n%s server:\n%s", err, r.out, r.tool, theirs)
	}
	checkResult(t, "goroce client", res, r.c.Lat)
	theirs := job.Wait()
	if !strings.Contains(theirs, "EXIT 0") {
		t.Fatalf("%s server:\n%s\ngoroce client:\n%s", r.tool, theirs, r.out)
	}
	return theirs
}

// goroceServer runs goroce's server and the perftest tool as the client in
// the VM against it, and returns the tool's output.
func (r *labRun) goroceServer(ctx context.Context, cancel context.CancelFunc, t *testing.T) string {
	t.Helper()
	server := lab.HostMgmt // the TCP exchange, on the management network
	if r.c.RDMACM {
		server = lab.HostIPv4
	} else {
		r.c.Listener = r.l.Listen(t, lab.HostMgmt+":18515")
	}
	type ret struct {
		r   *perftest.Result
		err error
	}
	done := make(chan ret, 1)
	go func() {
		res, err := perftest.Run(ctx, r.dev, r.c)
		done <- ret{res, err}
	}()
	if r.c.RDMACM { // until it listens: its CM ID is bound before it says so
		for !strings.Contains(r.out.String(), "Waiting for client to connect") {
			select {
			case res := <-done:
				t.Fatalf("goroce server: %v\n%s", res.err, r.out)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	theirs, rc, err := r.l.Exec(r.vm, fmt.Sprintf("timeout %d %s %s %s", int(perftestLimit.Seconds()), r.tool, r.args, server))
	if err != nil || rc != 0 {
		cancel()
		t.Errorf("%s client: exit %d %v\n%s", r.tool, rc, err, theirs)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("goroce server: %v\n%s", res.err, r.out)
	}
	r.checkServerResult(t, res.r, theirs)
	return theirs
}

// checkServerResult checks goroce's server's result. ib_read_lat's server
// prints no table; and the server of ib_write_bw, ib_read_bw and
// ib_atomic_bw (one way) prints the client's report, which a perftest
// client that could not measure its clock (clockFailed: a loaded TCG VM)
// gives as 0.00 MB/s: goroce prints that as perftest's server does, so
// only when the client says so is a zero report not a failure.
func (r *labRun) checkServerResult(t *testing.T, res *perftest.Result, theirs string) {
	t.Helper()
	switch c := r.c; {
	case c.Lat && c.Verb == perftest.Read:
	case !c.Lat && c.Verb != perftest.Send && !c.Bidirectional && strings.Contains(theirs, clockFailed):
		t.Logf("%s could not measure its CPU clock; its report, which goroce prints: %+v", r.tool, res.BW)
	default:
		checkResult(t, "goroce server", res, c.Lat)
	}
}

// checkDuplexInterop checks a -b run of goroce against perftest: both
// banners say Bidirectional, and both sides print the same table line, each
// its own report plus the other's (print_full_bw_report with both).
func checkDuplexInterop(t *testing.T, ours, theirs string) {
	t.Helper()
	for who, out := range map[string]string{"goroce": ours, "perftest": theirs} {
		if !strings.Contains(out, " Bidirectional BW Test\n") || !strings.Contains(out, " TX depth        : ") {
			t.Errorf("%s's banner does not say Bidirectional BW Test with a TX depth:\n%s", who, out)
		}
	}
	o, p := tableRow(ours), tableRow(theirs)
	if len(o) != 5 || strings.Join(o, " ") != strings.Join(p, " ") {
		t.Errorf("goroce printed %q, perftest %q: want the same sum of both sides' reports", o, p)
	}
}

// tableRow returns the fields of the first row of a BW table.
func tableRow(out string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	return nil
}

// clockFailed is what perftest prints when its sampling of the CPU clock
// fails (get_clock.c gives 0 MHz then); with -F it runs on, and in CI a
// loaded TCG VM's ib_read_bw client that printed it reported 0.00 MB/s.
const clockFailed = "Correlation coefficient r^2"

func checkResult(t *testing.T, who string, r *perftest.Result, lat bool) {
	t.Helper()
	switch {
	case lat && (len(r.Lat) != 1 || !(r.Lat[0].Typical > 0 && r.Lat[0].Typical < 1e6)):
		t.Errorf("%s: latency report %+v", who, r.Lat)
	case !lat && (len(r.BW) != 1 || !(r.BW[0].BWAvg > 0) || r.BW[0].Iters != 5):
		t.Errorf("%s: bandwidth report %+v", who, r.BW)
	}
}

// perftestLine reports whether perftest's output holds a table line: the
// header, then a row of numbers.
func perftestLine(out string, lat bool) bool {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && i+1 < len(lines) {
			f := strings.Fields(lines[i+1])
			want := 5
			if lat {
				want = 9
			}
			return len(f) == want
		}
	}
	return false
}

// labRDMACMTools are the tools run with -R against perftest.
var labRDMACMTools = []struct {
	tool  string
	verb  perftest.Verb
	lat   bool
	size  int
	bidir bool // -b
	tos   int  // -T on both sides; 0: not given
}{
	{"ib_write_bw", perftest.Write, false, 4096, false, 0},
	{"ib_read_bw", perftest.Read, false, 4096, false, 0},
	{"ib_send_bw", perftest.Send, false, 2048, false, 0},
	{"ib_atomic_bw", perftest.Atomic, false, 0, false, 0},
	{"ib_write_lat", perftest.Write, true, 64, false, 0},
	{"ib_send_lat", perftest.Send, true, 64, false, 0},
	{"ib_read_lat", perftest.Read, true, 64, false, 0},
	{"ib_write_bw", perftest.Write, false, 4096, true, 0},
	{"ib_read_bw", perftest.Read, false, 4096, true, 0},
	{"ib_send_bw", perftest.Send, false, 2048, true, 0},
	{"ib_write_bw", perftest.Write, false, 4096, false, 106},
}

// TestLabInteropRDMACM runs goroce's perf -R against perftest 6.06's -R
// on Linux rxe in vm1, in both roles: the exchange over an RDMA CM
// connection on port 18515 and the test's QPs connected through RDMA CM,
// 5 iterations each, over RoCE v2 on the bridge.
//
// IPv4 only: perftest 6.06's -R resolves the server's address for
// AF_INET alone. As the client, `ib_write_bw -R -d rxe0 -x 2 -n 5 -F
// fd00:c0:2::11` (with or without --ipv6) exits 1 at once with
// "Address family for hostname not supported for fd00:c0:2::11:18515",
// "Problem in resolving basic address and port", " Unable to perform
// rdma_client function"; as the server it listens on AF_INET. goroce's
// -R over IPv6 is tested goroce to goroce over a veth pair
// (cmd/roce TestPerfOverVeth).
func TestLabInteropRDMACM(t *testing.T) {
	l := lab.Start(t)
	d := l.OpenDevice(t, host.VersionsV2)
	cm := rdmacm.New(rdmacm.Options{})
	if err := cm.AddDevice(d.Device); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	vm := lab.VM1
	l.Exec(vm, killPerftest)
	gOurs, gTheirs := lab.HostGIDIndex(t, d, lab.HostIPv4), l.GIDIndex(t, vm, vm.IPv4)
	before := l.Counters(t, vm)
	for _, tc := range labRDMACMTools {
		for _, role := range []string{"client", "server"} {
			name := tc.tool
			if tc.bidir {
				name += "-b"
			}
			if tc.tos != 0 {
				name += fmt.Sprintf("-T%d", tc.tos)
			}
			t.Run(name+"/goroce-"+role, func(t *testing.T) {
				r := &labRun{l: l, vm: vm, tool: tc.tool, out: &syncBuilder{},
					args: fmt.Sprintf("-R -d rxe0 -x %d -n 5 -F", gTheirs)}
				r.c = perftest.Config{Verb: tc.verb, Lat: tc.lat, Size: tc.size, Iters: 5, GIDIndex: gOurs,
					RDMACM: true, CM: cm, Bidirectional: tc.bidir}
				if tc.bidir {
					r.args += " -b"
				}
				if tc.size != 0 {
					r.args += fmt.Sprintf(" -s %d", tc.size)
				}
				if tc.tos != 0 {
					r.c.TOS, r.c.SetTOS = tc.tos, true
					r.args += fmt.Sprintf(" -T %d", tc.tos)
					startTOSCapture(t, l, vm)
				}
				ours, theirs := r.run(t, role)
				if !strings.Contains(theirs, "Data ex. method : rdma_cm") || !strings.Contains(ours, "Data ex. method : rdma_cm") {
					t.Errorf("a banner does not say rdma_cm:\n%s\n%s", ours, theirs)
				}
				if tc.tos != 0 {
					checkTOSCapture(t, l, vm, tc.tos)
				}
			})
		}
	}
	ours := d.Counters().Snapshot()
	l.CheckRxeCounters(t, vm, before, ours)
	t.Logf("goroce counters: %v", ours)
}

// startTOSCapture starts tcpdump on vm's RoCE link, printing each RoCE v2
// packet's IP header (-v) to /tmp/tos.txt, and waits until it listens.
func startTOSCapture(t *testing.T, l *lab.Lab, vm lab.VM) {
	t.Helper()
	l.MustExec(t, vm, "rm -f /tmp/tos.txt; (tcpdump -i eth0 -n -v -l udp port 4791 > /tmp/tos.txt 2>&1 & echo $! > /tmp/tcpdump.pid)")
	var out string
	if !testenv.Poll(testenv.Slow, func() bool {
		out, _, _ = l.Exec(vm, "cat /tmp/tos.txt")
		return strings.Contains(out, "listening on")
	}) {
		t.Fatalf("tcpdump in %s does not listen:\n%s", vm.Name, out)
	}
}

// checkTOSCapture stops startTOSCapture's tcpdump and checks what it saw
// of a -R -T tos run: packets with tos and with 0 (the exchange's
// connection, perftest's and goroce's default_roce_tos) both ways, and no
// other TOS. Linux's side carries tos as the passive side too, which then
// has it from goroce's REQ only (perftest's server sets no TOS on its IDs).
func checkTOSCapture(t *testing.T, l *lab.Lab, vm lab.VM, tos int) {
	t.Helper()
	l.Exec(vm, "kill $(cat /tmp/tcpdump.pid)")
	// tcpdump flushes and exits, saying how many packets it captured.
	var out string
	if !testenv.Poll(testenv.Slow, func() bool {
		out, _, _ = l.Exec(vm, "cat /tmp/tos.txt")
		return strings.Contains(out, "packets captured")
	}) {
		t.Fatalf("tcpdump in %s did not end:\n%s", vm.Name, out)
	}
	// "IP (tos 0x6a,ECT(0), ttl 64, ...)\n    192.0.2.1.49152 > 192.0.2.11.4791: UDP, ..."
	re := regexp.MustCompile(`IP \(tos (0x[0-9a-f]+)[^\n]*\n\s*(\S+)\.\d+ > (\S+)\.\d+: `)
	seen := map[string]map[int]int{} // source → TOS → packets
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseUint(m[1], 0, 8)
		if err != nil {
			t.Fatalf("tcpdump: TOS %q: %v", m[1], err)
		}
		if seen[m[2]] == nil {
			seen[m[2]] = map[int]int{}
		}
		seen[m[2]][int(v)]++
	}
	for _, src := range []string{lab.HostIPv4, vm.IPv4} {
		got := seen[src]
		if got[tos] == 0 || got[0] == 0 || len(got) != 2 {
			t.Errorf("packets from %s by TOS: %v, want some with %d (the test's) and some with 0 (the exchange's), no other", src, got, tos)
		}
	}
	t.Logf("tcpdump in %s: packets by source and TOS: %v", vm.Name, seen)
}

// syncBuilder is a strings.Builder safe for a writer and a reader.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
