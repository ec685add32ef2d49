package main

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/verbs"
)

// ecnDefaults is roce ecn's listing of a port never set: MLNX_OFED's
// names, verbs' defaults.
const ecnDefaults = `roce_np/enable 0
roce_np/enable/0 0
roce_np/enable/1 0
roce_np/enable/2 0
roce_np/enable/3 0
roce_np/enable/4 0
roce_np/enable/5 0
roce_np/enable/6 0
roce_np/enable/7 0
roce_np/cnp_dscp 48
roce_np/min_time_between_cnps 0
roce_rp/enable 0
roce_rp/enable/0 0
roce_rp/enable/1 0
roce_rp/enable/2 0
roce_rp/enable/3 0
roce_rp/enable/4 0
roce_rp/enable/5 0
roce_rp/enable/6 0
roce_rp/enable/7 0
roce_rp/dce_tcp_g 1019
roce_rp/dce_tcp_rtt 55
roce_rp/initial_alpha_value 1023
roce_rp/rate_reduce_monitor_period 4
roce_rp/rate_to_set_on_first_cnp 0
roce_rp/rpg_ai_rate 5
roce_rp/rpg_byte_reset 32767
roce_rp/rpg_hai_rate 50
roce_rp/rpg_max_rate 0
roce_rp/rpg_min_dec_fac 50
roce_rp/rpg_min_rate 1
roce_rp/rpg_threshold 1
roce_rp/rpg_time_reset 300
`

// TestECN runs roce ecn on devices nobody has open: the listing, one
// point's, one value, a set that later runs read back, and each bad input
// refused with the valid values named (usage, exit 2) or the tree's error
// (exit 1), changing nothing.
func TestECN(t *testing.T) {
	dir := configDevs(t)
	usage := "Run 'roce ecn --help' for usage."
	if out := wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0"); out != ecnDefaults {
		t.Errorf("ecn -d rxe0:\n%s\nwant:\n%s", out, ecnDefaults)
	}
	for i, tc := range []struct {
		args   string
		code   int
		stdout string
		stderr []string
	}{
		{"ecn -d rxe0 np", 0, "roce_np/enable 0\n" + "roce_np/enable/0 0\nroce_np/enable/1 0\nroce_np/enable/2 0\nroce_np/enable/3 0\nroce_np/enable/4 0\nroce_np/enable/5 0\nroce_np/enable/6 0\nroce_np/enable/7 0\n" + "roce_np/cnp_dscp 48\nroce_np/min_time_between_cnps 0\n", nil},
		{"ecn -d rxe0 rp rpg_time_reset", 0, "300\n", nil},
		{"ecn -d rxe0 rp enable 1", 0, "1\n", nil},
		{"ecn -d rxe0 -p 1 rp rpg_time_reset 150", 0, "150\n", nil},
		{"ecn -d rxe0 np cnp_dscp 0x1a", 0, "26\n", nil},
		{"ecn -d rxe0 rp enable", 0, "1\n", nil},
		{"ecn -d rxe0 rp rpg_time_reset", 0, "150\n", nil},
		{"ecn -d rxe1 rp enable", 0, "0\n", nil}, // per device
		// Per priority, as MLNX_OFED's enable/<prio>; enable is all eight.
		{"ecn -d rxe0 rp enable/3 0", 0, "0\n", nil},
		{"ecn -d rxe0 rp enable", 0, "0\n", nil},
		{"ecn -d rxe0 rp enable/2", 0, "1\n", nil},
		{"ecn -d rxe0 rp enable/3", 0, "0\n", nil},
		{"ecn -d rxe0 rp enable 1", 0, "1\n", nil},
		{"ecn -d rxe0 rp enable/3", 0, "1\n", nil},
		{"ecn -d rxe0 rp enable/8 1", exitUsage, "", []string{`roce_rp has no parameter "enable/8": its parameters are enable, enable/PRIO (PRIO 0 to 7), `, usage}},
		{"ecn -d rxe0 xp", exitUsage, "", []string{`roce: ecn: Invalid argument: "xp": the points are np (notification point, roce_np) and rp (reaction point, roce_rp)`, usage}},
		{"ecn -d rxe0 rp rpg_bogus 1", exitUsage, "", []string{`roce: ecn: Invalid argument: roce_rp has no parameter "rpg_bogus": its parameters are enable, enable/PRIO (PRIO 0 to 7), dce_tcp_g, `, usage}},
		{"ecn -d rxe0 np rpg_time_reset", exitUsage, "", []string{`roce_np has no parameter "rpg_time_reset": its parameters are enable, enable/PRIO (PRIO 0 to 7), cnp_dscp, min_time_between_cnps`}},
		{"ecn -d rxe0 rp enable 2", exitUsage, "", []string{`roce: ecn: Invalid argument: roce_rp enable "2": valid values are 0 to 1 (0 off, 1 on, every priority)`, usage}},
		{"ecn -d rxe0 rp rpg_min_dec_fac 0", exitUsage, "", []string{`roce_rp rpg_min_dec_fac "0": valid values are 1 to 100 (%)`}},
		{"ecn -d rxe0 np cnp_dscp 64", exitUsage, "", []string{`roce_np cnp_dscp "64": valid values are 0 to 63`}},
		{"ecn -d rxe0 rp rpg_time_reset abc", exitUsage, "", []string{`roce_rp rpg_time_reset "abc": valid values are 1 to 1000000 (µs)`}},
		{"ecn -d rxe0 rp rpg_time_reset -1", exitUsage, "", nil},
		{"ecn -d rxe0 rp rpg_time_reset 1 2", exitUsage, "", []string{usage}},
		{"ecn rp enable 1", exitUsage, "", []string{"roce: ecn: which device? -d DEV is required", usage}},
		{"ecn -d rxe0 -p 0", exitUsage, "", []string{"roce: ecn: Invalid argument: -p 0: the port number should be between 1 and 255"}},
		{"ecn -d rxe0 -p 2 rp enable 1", 1, "", []string{"roce: ecn: Invalid argument: port 2: goroce devices have one port, port 1"}},
		{"ecn -d nosuchdev", 1, "", []string{"roce: ecn: No such device: no device nosuchdev in " + dir}},
		{"ecn -d nosuchdev rp enable 1", 1, "", []string{"roce: ecn: No such device: no device nosuchdev in " + dir}},
		{"ecn -d rxe0 rp rpg_time_reset", 0, "150\n", nil}, // the refusals changed nothing
		{"ecn -d rxe0 rp enable", 0, "1\n", nil},
	} {
		code, stdout, stderr := roceAt(t, dir, strings.Fields(tc.args)...)
		if code != tc.code || stdout != tc.stdout {
			t.Errorf("%d: roce %s: exit %d, stdout %q; want %d, %q\nstderr: %s", i, tc.args, code, stdout, tc.code, tc.stdout, stderr)
		}
		if tc.code == 0 && stderr != "" {
			t.Errorf("%d: roce %s: stderr %q", i, tc.args, stderr)
		}
		for _, w := range tc.stderr {
			if !strings.Contains(stderr, w) {
				t.Errorf("%d: roce %s: stderr %q lacks %q", i, tc.args, stderr, w)
			}
		}
	}
}

// TestECNRunningDevice: a setting made with roce ecn reaches a device a
// process has open (here the test's), at once; the settings stored before
// it opened are its from the start; and roce res show qp -d shows a QP's
// DCQCN rate while the RP is on, and not before.
func TestECNRunningDevice(t *testing.T) {
	dir := t.TempDir()
	wantRun(t, dir, exitOK, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "roce-versions", "v2")
	wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "rp", "rpg_min_rate", "7")
	d, err := host.Open("rxe0", host.Options{RunDir: dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c := d.ECN(1); c.RPEnable != 0 || c.NPEnable != 0 || c.RP.MinRate != 7 {
		t.Fatalf("opened device's ECN %+v: want np and rp off, rpg_min_rate 7 (set before it opened)", c)
	}
	qpn := loopQP(t, d)

	out := wantRun(t, dir, exitOK, nil, "res", "show", "qp", "rxe0", "-d")
	if strings.Contains(out, "dcqcn") || !strings.Contains(out, " path-mtu 1024 ") {
		t.Errorf("res show qp -d with the RP off: %q", out)
	}
	if !regexp.MustCompile(` cwnd \d+ unacked \d+ rtt-us \d+ minrtt-us \d+ cwnd-cuts \d+ spurious-timeouts \d+ path-mtu 1024 `).MatchString(out) {
		t.Errorf("res show qp -d: %q lacks the RC QP's congestion window", out)
	}

	wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "rp", "enable", "1")
	wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "np", "enable", "1")
	wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "rp", "rpg_time_reset", "123")
	if c := d.ECN(1); c.RPEnable != verbs.AllPriorities || c.NPEnable != verbs.AllPriorities || c.RP.TimeReset != 123 || c.RP.MinRate != 7 {
		t.Errorf("running device's ECN after roce ecn: %+v; want np and rp on, rpg_time_reset 123, rpg_min_rate 7", c)
	}
	out = wantRun(t, dir, exitOK, nil, "res", "show", "qp", "rxe0", "-d")
	want := "link rxe0/1 lqpn " + qpn + " rqpn " + qpn + " type RC state RTS "
	if !strings.HasPrefix(out, want) || !strings.Contains(out, " path-mtu 1024 dcqcn-rate 100000 dcqcn-limited no pid ") {
		t.Errorf("res show qp -d with the RP on: %q; want %q… path-mtu 1024 dcqcn-rate 100000 dcqcn-limited no pid …", out, want)
	}
	if out := wantRun(t, dir, exitOK, nil, "res", "show", "qp", "rxe0", "-d", "-j"); !strings.Contains(out, `"dcqcn-rate":100000,"dcqcn-limited":"no"`) {
		t.Errorf("res show qp -d -j: %q", out)
	}
	if out := wantRun(t, dir, exitOK, nil, "res", "show", "qp", "rxe0"); strings.Contains(out, "dcqcn") {
		t.Errorf("res show qp without -d shows details: %q", out)
	}

	wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "rp", "enable", "0")
	if c := d.ECN(1); c.RPEnable != 0 {
		t.Errorf("running device's RP still on after roce ecn rp enable 0")
	}
}

// loopQP makes an RC QP on d connected to itself over 127.0.0.1, in RTS,
// and returns its number.
func loopQP(t *testing.T, d *host.Device) string {
	t.Helper()
	gid := netip.MustParseAddr("::ffff:127.0.0.1")
	gidx := -1
	for i, g := range d.GIDs() {
		if g.GID == gid {
			gidx = i
		}
	}
	if gidx < 0 {
		t.Fatalf("no 127.0.0.1 GID in %v", d.GIDs())
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		a *verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: qp.Num(), RQPSN: 1, MaxDestRdAtomic: 1, MinRNRTimer: 12,
			AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: gid, SGIDIndex: uint8(gidx), HopLimit: 64}}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return strconv.FormatUint(uint64(qp.Num()), 10)
}

// ecnView is the FUSE view's ecn directory over the config tree: the
// devices, the settings as sysfs names them (enable/PRIO files, no
// enable, which is a directory there), and get and set as roce ecn does
// them, a value out of range refused with EINVAL naming the valid ones.
func TestECNView(t *testing.T) {
	dir := configDevs(t)
	v := ecnView{reg: host.NewRegistry(dir), tree: configTree(dir), ctx: context.Background()}
	devs, err := v.Devices()
	if err != nil || !slices.Equal(devs, []string{"rxe0", "rxe1", "rxe2"}) {
		t.Fatalf("Devices() = %v, %v", devs, err)
	}
	names := v.Names()
	if slices.Contains(names, "roce_np/enable") || !slices.Contains(names, "roce_np/enable/7") || !slices.Contains(names, "roce_rp/rpg_time_reset") {
		t.Errorf("Names() = %v", names)
	}
	if err := v.Set("rxe0", "roce_rp/enable/3", 1); err != nil {
		t.Fatal(err)
	}
	if err := v.Set("rxe0", "roce_rp/rpg_time_reset", 0); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "valid values are 1 to 1000000") {
		t.Errorf("rpg_time_reset 0: %v", err)
	}
	for _, c := range []struct {
		dev, name string
		want      uint32
	}{{"rxe0", "roce_rp/enable/3", 1}, {"rxe0", "roce_rp/enable/2", 0}, {"rxe1", "roce_rp/enable/3", 0}, {"rxe0", "roce_rp/rpg_time_reset", 300}} {
		if got, err := v.Get(c.dev, c.name); err != nil || got != c.want {
			t.Errorf("Get(%s, %s) = %d, %v; want %d", c.dev, c.name, got, err, c.want)
		}
	}
	if out := wantRun(t, dir, exitOK, nil, "ecn", "-d", "rxe0", "rp", "enable/3"); out != "1\n" {
		t.Errorf("roce ecn after the view's set: %q", out)
	}
}
