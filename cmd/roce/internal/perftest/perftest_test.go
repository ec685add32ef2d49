package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/perftest/perftestcheck"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

func TestDestMessage(t *testing.T) {
	d := Dest{OutReads: 0x80, QPN: 0x17, PSN: 0x26ca9b, RKey: 0xe15, VAddr: 0x555cbdbca000,
		GID: netip.MustParseAddr("::ffff:192.0.2.11")}
	b := d.Marshal()
	want := "0000:0080:000017:26ca9b:00000e15:0000555cbdbca000:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:00:02:0b:00000000:"
	if len(b) != 108 || string(b[:107]) != want || b[107] != 0 {
		t.Fatalf("message %q, want %q and a NUL (108 bytes)", b, want)
	}
	got, err := ParseDest(b)
	if err != nil || got != d {
		t.Fatalf("ParseDest = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "0000:0080", strings.Replace(want, "26ca9b", "zz", 1)} {
		if _, err := ParseDest([]byte(bad)); err == nil {
			t.Errorf("ParseDest(%q) accepted", bad)
		}
	}
}

// With -R, a QP's data is struct pingpong_dest in big-endian, 56 bytes
// (rdma_write_keys).
func TestDestBinary(t *testing.T) {
	d := Dest{LID: 1, OutReads: 0x80, QPN: 0x17, PSN: 0x26ca9b, RKey: 0xe15, VAddr: 0x555cbdbca000,
		GID: netip.MustParseAddr("::ffff:192.0.2.11"), SRQN: 9}
	b := d.marshalBinary(3)
	want := "00000001" + "00000080" + "00000017" + "0026ca9b" + "00000e15" + "00000000" + "0000555cbdbca000" +
		"00000000000000000000ffffc000020b" + "00000009" + "00000003"
	if got := fmt.Sprintf("%x", b); got != want {
		t.Fatalf("message\n%s, want\n%s", got, want)
	}
	if got := parseBinaryDest(b); got != d {
		t.Fatalf("parseBinaryDest = %+v", got)
	}
}

func TestCHex(t *testing.T) {
	for _, c := range []struct {
		v    uint64
		w    int
		want string
	}{{0, 4, "0000"}, {0x17, 6, "0x0017"}, {0x26ca9b, 6, "0x26ca9b"}, {0xe15, 8, "0x000e15"},
		{0x555cbdbca000, 16, "0x00555cbdbca000"}, {0x80, 4, "0x80"}} {
		if got := cHex(c.v, c.w); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.w, got, c.want)
		}
	}
}

// The latency arithmetic on perftest's own numbers: 5 iterations leave 4
// deltas, the slowest 2 dropped, the median of 2 is their mean, and the
// standard deviation sums truncated integers.
func TestLatReport(t *testing.T) {
	p := &params{Config: Config{Verb: Send, Lat: true}}
	us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
	base := time.Unix(0, 0)
	var posted []time.Time
	t0 := base
	for _, d := range []float64{1600, 1500, 1700, 5000} { // RTTs: latency is half
		posted = append(posted, t0)
		t0 = t0.Add(us(d))
	}
	posted = append(posted, t0)
	r := p.latReport(64, posted)
	if r.Min != 750 || r.Max != 850 || r.Typical != 775 || r.Avg != 775 || r.Iters != 5 {
		t.Errorf("report %+v", r)
	}
	if r.Stdev != 25 { // (775-750)=25, (775-800)=-25 → sqrt((625+625)/2)
		t.Errorf("stdev %v", r.Stdev)
	}
}

type modeCase struct {
	verb   Verb
	lat    bool
	atomic string
	size   int
	qps    int
	all    bool
	uc     bool // -c UC
	ud     bool // -c UD
	bidir  bool // -b
	tos    int  // -T (with -R); 0: not given, unless tos0
	tos0   bool // -T 0
	// defTOS is the default_roce_tos of the client's CM (with -R; the
	// server's is another, which its passive connections never use): the
	// exchange's connection carries it, the test's -T's instead.
	defTOS int
	event  bool // -e
}

// tosFlag returns -T's value and whether it is given.
func (m modeCase) tosFlag() (int, bool) { return m.tos, m.tos != 0 || m.tos0 }

func (m modeCase) name() string {
	s := strings.ToLower(m.verb.String())
	if m.atomic != "" {
		s += "-" + m.atomic
	}
	if m.lat {
		s += "/lat"
	} else {
		s += "/bw"
	}
	if m.qps > 1 {
		s += "/q" + strconv.Itoa(m.qps)
	}
	if m.all {
		s += "/all"
	}
	if m.uc {
		s += "/uc"
	}
	if m.ud {
		s += "/ud"
	}
	if m.bidir {
		s += "/bidir"
	}
	if tos, ok := m.tosFlag(); ok {
		s += "/tos" + strconv.Itoa(tos)
	}
	if m.defTOS != 0 {
		s += "/default" + strconv.Itoa(m.defTOS)
	}
	if m.event {
		s += "/events"
	}
	return s
}

var modes = []modeCase{
	{verb: Write, size: 4096},
	{verb: Write, size: 65536, qps: 3},
	{verb: Read, size: 4096},
	{verb: Read, size: 3000, qps: 2},
	{verb: Send, size: 2048},
	{verb: Send, size: 1024, qps: 2},
	{verb: Atomic},
	{verb: Atomic, atomic: CmpAndSwap},
	{verb: Write, lat: true, size: 64},
	{verb: Read, lat: true, size: 64},
	{verb: Send, lat: true, size: 64},
	{verb: Atomic, lat: true},
	{verb: Write, all: true},
	{verb: Send, lat: true, all: true},
	{verb: Write, size: 4096, uc: true},
	{verb: Send, size: 2048, uc: true},
	{verb: Write, lat: true, size: 64, uc: true},
	{verb: Send, lat: true, size: 64, uc: true},
	{verb: Write, size: 4096, bidir: true},
	{verb: Write, size: 65536, qps: 2, bidir: true},
	{verb: Read, size: 4096, bidir: true},
	{verb: Read, size: 3000, qps: 2, bidir: true},
	{verb: Send, size: 2048, bidir: true},
	{verb: Send, size: 1024, qps: 2, bidir: true},
	{verb: Atomic, bidir: true},
	{verb: Atomic, atomic: CmpAndSwap, bidir: true},
	{verb: Write, all: true, bidir: true},
	{verb: Read, all: true, bidir: true},
	{verb: Send, all: true, bidir: true},
	{verb: Write, size: 4096, uc: true, bidir: true},
	{verb: Send, size: 2048, uc: true, bidir: true},
	// -c UD: SENDs of at most the path MTU through an AH, Q_Key 0x11111111;
	// larger sizes are clamped to the MTU, -a stops there.
	{verb: Send, size: 1024, ud: true},
	{verb: Send, size: 1024, qps: 2, ud: true},
	{verb: Send, size: 65536, ud: true},
	{verb: Send, lat: true, size: 64, ud: true},
	{verb: Send, lat: true, all: true, ud: true},
	{verb: Send, all: true, ud: true},
	{verb: Send, size: 2048, ud: true, bidir: true},
	{verb: Send, lat: true, size: 64, ud: true, event: true},
	// -e: both sides sleep on CQ events instead of busy-polling.
	{verb: Send, lat: true, size: 64, event: true},
	{verb: Read, lat: true, size: 64, event: true},
	{verb: Send, size: 65536, event: true},
	{verb: Atomic, event: true},
}

// Every mode, goroce against goroce on two devices of the in-memory
// fabric over a real TCP exchange: both succeed, the tables parse, and the
// data is right where it can be checked.
func TestPerfFabric(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name(), func(t *testing.T) { runFabric(t, m, false) })
	}
}

// rdmaCMModes are the modes run with -R.
var rdmaCMModes = []modeCase{
	{verb: Write, size: 4096},
	{verb: Write, size: 65536, qps: 3},
	{verb: Read, size: 4096},
	{verb: Send, size: 2048},
	{verb: Send, size: 1024, qps: 2},
	{verb: Atomic},
	{verb: Write, lat: true, size: 64},
	{verb: Read, lat: true, size: 64},
	{verb: Send, lat: true, size: 64},
	{verb: Send, lat: true, all: true},
	{verb: Write, size: 4096, bidir: true},
	{verb: Read, size: 4096, bidir: true},
	{verb: Send, size: 1024, qps: 2, bidir: true},
	{verb: Atomic, bidir: true},
	// -T: every packet of every connection, both ways, carries the TOS.
	{verb: Write, size: 4096, tos: 106},
	{verb: Read, lat: true, size: 64, tos: 106},
	{verb: Send, size: 2048, qps: 2, tos: 106},
	{verb: Atomic, bidir: true, tos: 106},
	{verb: Send, lat: true, size: 64, tos: 0x2e << 2},
	// -T overrides the client CM's default_roce_tos on the test's
	// connections only (RDMA_OPTION_ID_TOS on their IDs), -T 0 too; the
	// exchange's connection keeps the default.
	{verb: Write, size: 4096, tos: 106, defTOS: 32},
	{verb: Send, lat: true, size: 64, tos0: true, defTOS: 32},
}

// The same with -R: the exchange over an RDMA CM connection and the QPs
// connected by goroce's RDMA CM, each side with its own CM on its device.
func TestPerfFabricRDMACM(t *testing.T) {
	for _, m := range rdmaCMModes {
		t.Run(m.name(), func(t *testing.T) { runFabric(t, m, true) })
	}
}

func runFabric(t *testing.T, m modeCase, rdmaCM bool) {
	var sdev, cdev *verbs.Device
	var sgid netip.Addr
	var cp *capturedPair
	tos, setTOS := m.tosFlag()
	if setTOS {
		cp = newCapturedPair(t)
		sdev, cdev, sgid = cp.a, cp.b, cp.aGID
	} else {
		pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
		sdev, cdev, sgid = pair.A.Dev, pair.B.Dev, pair.A.GID.GID
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	iters := 50
	if m.all {
		iters = 5
	}
	cfg := Config{Verb: m.verb, Lat: m.lat, Atomic: m.atomic, Size: m.size, NumQPs: m.qps, Iters: iters,
		All: m.all, GIDIndex: -1, Verify: true, OutJSON: true, Bidirectional: m.bidir, UseEvent: m.event}
	if m.uc {
		cfg.Connection = "UC"
	}
	if m.ud {
		cfg.Connection = "UD"
	}
	if setTOS {
		cfg.TOS, cfg.SetTOS = tos, true
	}
	var sout, cout bytes.Buffer
	sc, cc := cfg, cfg
	sc.Out, sc.JSONFile = &sout, filepath.Join(t.TempDir(), "s.json")
	cc.Out, cc.JSONFile = &cout, filepath.Join(t.TempDir(), "c.json")
	ready := make(chan struct{})
	if rdmaCM {
		for i, c := range []*Config{&sc, &cc} {
			c.RDMACM = true
			o := rdmacm.Options{Timewait: 20 * time.Millisecond}
			if m.defTOS != 0 {
				o.Defaults = roceDefaults{tos: uint8(m.defTOS + 64*(1-i))} // the server's differs
			}
			c.CM = rdmacm.New(o)
			t.Cleanup(func() { c.CM.Close() }) // before the pair's cleanup: LIFO
		}
		if err := sc.CM.AddDevice(sdev); err != nil {
			t.Fatal(err)
		}
		if err := cc.CM.AddDevice(cdev); err != nil {
			t.Fatal(err)
		}
		sdev, cdev = nil, nil // found through the CM
		cc.Server = sgid.Unmap().String()
		sc.Out = &signalWriter{w: &sout, on: waitBanner, ch: ready}
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		sc.Listener = ln
		cc.Server, cc.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
		close(ready)
	}
	type ret struct {
		r   *Result
		err error
	}
	sret := make(chan ret, 1)
	go func() {
		r, err := Run(ctx, sdev, sc)
		sret <- ret{r, err}
	}()
	select {
	case <-ready:
	case s := <-sret:
		t.Fatalf("server: %v\n%s", s.err, sout.String())
	}
	cr, err := Run(ctx, cdev, cc)
	if err != nil {
		cancel()
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	s := <-sret
	if s.err != nil {
		t.Fatalf("server: %v\n%s", s.err, sout.String())
	}
	t.Logf("server:\n%sclient:\n%s", sout.String(), cout.String())
	conn := "RC"
	if m.uc {
		conn = "UC"
	}
	if m.ud {
		conn = "UD"
	}
	for who, out := range map[string]string{"server": sout.String(), "client": cout.String()} {
		if !strings.Contains(out, " Connection type : "+conn+"\t") {
			t.Errorf("the %s's banner does not say Connection type : %s", who, conn)
		}
	}
	sizes := []int{m.size}
	if m.verb == Atomic {
		sizes = []int{8}
	}
	limit := 1 << 23
	if m.ud {
		// A UD message is at most the path MTU the banner names.
		mm := regexp.MustCompile(`(?m)^ Mtu             : (\d+)\[B\]$`).FindStringSubmatch(cout.String())
		if mm == nil {
			t.Fatalf("no Mtu line in the client's banner:\n%s", cout.String())
		}
		limit, _ = strconv.Atoi(mm[1])
		sizes = []int{min(m.size, limit)}
	}
	if m.all {
		sizes = nil
		for i := 1; i < 24 && 1<<i <= limit; i++ {
			sizes = append(sizes, 1<<i)
		}
	}
	checkTable(t, "client", cout.String(), m, sizes, iters)
	if len(cr.BW)+len(cr.Lat) != len(sizes) {
		t.Errorf("client result: %+v", cr)
	}
	if m.bidir {
		checkDuplex(t, cout.String(), sout.String(), cr, s.r, m, len(sizes))
	}
	if !(m.lat && (m.verb == Read || m.verb == Atomic)) { // their server prints no table
		if !m.lat && m.verb != Send && !m.bidir {
			sizes = sizes[len(sizes)-1:] // the server prints the client's last report
		}
		checkTable(t, "server", sout.String(), m, sizes, iters)
	}
	method := " Data ex. method : Ethernet\n"
	switch {
	case setTOS: // perftest's banner line with -T
		method = fmt.Sprintf(" Data ex. method : rdma_cm \tTOS    : %d\n", tos)
	case rdmaCM:
		method = " Data ex. method : rdma_cm\n"
	}
	for who, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		if !strings.Contains(out, method) {
			t.Errorf("%s output lacks %q:\n%s", who, method, out)
		}
	}
	js, err := os.ReadFile(cc.JSONFile)
	if err != nil || !strings.Contains(string(js), "results: {") || !strings.Contains(string(js), "Device: \"") {
		t.Errorf("--out_json: %v\n%s", err, js)
	}
	// -e's banner line and --out_json entry are perftest's; without -e
	// there are none.
	events := regexp.MustCompile(`(?m)^ Test with events\. Using \w+_comp0$`)
	if got := events.MatchString(cout.String()); got != m.event {
		t.Errorf("client banner has %q: %v, want %v:\n%s", events, got, m.event, cout.String())
	}
	if got := regexp.MustCompile(`(?m)^Test with events: Using_\w+_comp0,$`).Match(js); got != m.event {
		t.Errorf("--out_json has the events entry: %v, want %v:\n%s", got, m.event, js)
	}
	if m.bidir && !strings.Contains(string(js), "test: "+strings.ReplaceAll(duplexTitle(t, m), " ", "_")+",\n") {
		t.Errorf("--out_json does not name the bidirectional test:\n%s", js)
	}
	if setTOS {
		if want := fmt.Sprintf("Data_ex_method: rdma_cm,\nTOS: %d,\n},\n", tos); !strings.Contains(string(js), want) {
			t.Errorf("--out_json lacks %q:\n%s", want, js)
		}
		sc.CM.Close()
		cc.CM.Close()
		cp.checkTOS(t, uint8(tos), uint8(m.defTOS), perftestcheck.AddressQPNs(t, cout.String(), sout.String()))
	}
}

// capturedPair is two devices on the in-memory fabric, as verbstest's,
// with what A sends and receives recorded in a pcap.
type capturedPair struct {
	a, b       *verbs.Device
	aGID, bGID netip.Addr
	fab        *fabric.Fabric
	pcap       bytes.Buffer
}

func newCapturedPair(t *testing.T) *capturedPair {
	t.Helper()
	p := &capturedPair{fab: fabric.New()}
	t.Cleanup(p.close)
	w, err := pcap.NewWriter(&p.pcap)
	if err != nil {
		t.Fatal(err)
	}
	gids := verbstest.GIDs(verbstest.NetV2IPv4)
	for i, d := range []**verbs.Device{&p.a, &p.b} {
		port, err := p.fab.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID}})
		if err != nil {
			t.Fatal(err)
		}
		var l link.Link = port
		if i == 0 {
			l = pcap.New(port, w)
		}
		if *d, err = verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: l, MAC: port.MAC(),
			GIDs: []verbs.GIDEntry{gids[i]}}); err != nil {
			t.Fatal(err)
		}
	}
	p.aGID, p.bGID = gids[0].GID, gids[1].GID
	return p
}

func (p *capturedPair) close() {
	for _, d := range []*verbs.Device{p.a, p.b} {
		if d != nil {
			d.Close()
		}
	}
	p.fab.Close()
}

// checkTOS closes the pair (the CMs must be closed already, so that
// nothing sends any more) and checks the capture as perftest's -R -T
// does it: the test QPs' connections (qpns, both sides') carry tos both
// ways, their data and ACKs and their CM MADs (REQ, REP, RTU, DREQ,
// DREP); the exchange's connection carries the client CM's
// default_roce_tos, def, likewise.
func (p *capturedPair) checkTOS(t *testing.T, tos, def uint8, qpns map[uint32]bool) {
	t.Helper()
	p.close()
	count := map[string]int{}
	comms := map[uint32]string{}
	err := pcap.Read(bytes.NewReader(p.pcap.Bytes()), func(f pcap.Frame) error {
		var pk wire.Packet
		if err := pk.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			t.Errorf("frame %d: %v", f.Number, err)
			return nil
		}
		if err := pk.VerifyICRC(); err != nil {
			t.Errorf("frame %d: %v", f.Number, err)
		}
		h := pk.IPv4()
		if h == nil {
			t.Fatalf("frame %d: not RoCE v2 over IPv4", f.Number)
		}
		conn := perftestcheck.ConnOf(&pk, qpns, comms)
		want := map[string]uint8{"test": tos, "exchange": def}[conn]
		if conn != "" && h.TOS() != want {
			t.Errorf("frame %d (%s: %v %v → %v QP %d): TOS %d, want %d", f.Number, conn, pk.Opcode(), h.Src(), h.Dst(), pk.BTH().DestQP(), h.TOS(), want)
		}
		way := " client→server"
		if netip.AddrFrom16(h.Src().As16()) == p.aGID {
			way = " server→client"
		}
		kind := " QP"
		if pk.BTH().DestQP() == 1 {
			kind = " CM"
		}
		count[conn+way+kind]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, conn := range []string{"test", "exchange"} {
		for _, k := range []string{" client→server CM", " client→server QP", " server→client CM", " server→client QP"} {
			if count[conn+k] == 0 {
				t.Errorf("no %s packets in the capture: %v", conn+k, count)
			}
		}
	}
	t.Logf("packets by connection: %v", count)
}

// checkDuplex checks a -b run as perftest prints it: both banners say
// Bidirectional and show the TX depth (and, for SEND, the RX depth); each
// side's line is its own report plus the peer's, so that both sides print
// the same numbers; and each side's own report measured something.
func checkDuplex(t *testing.T, cout, sout string, cr, sr *Result, m modeCase, lines int) {
	t.Helper()
	title := duplexTitle(t, m)
	for who, out := range map[string]string{"client": cout, "server": sout} {
		want := []string{"                    " + title + "\n", " TX depth        : "}
		if m.verb == Send {
			want = append(want, " RX depth        : ")
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("the %s's banner lacks %q:\n%s", who, w, out)
			}
		}
	}
	if len(cr.BW) != lines || len(sr.BW) != lines || len(cr.Local) != lines || len(sr.Local) != lines {
		t.Fatalf("-b results: client %+v, server %+v; want %d lines each", cr, sr, lines)
	}
	for i := range lines {
		c, s := cr.Local[i], sr.Local[i]
		if !(c.BWAvg > 0 && s.BWAvg > 0 && c.MsgRate > 0 && s.MsgRate > 0) {
			t.Errorf("line %d: a side measured nothing: client %+v, server %+v", i, c, s)
		}
		if got, want := cr.BW[i], sumBW(c, s); got != want {
			t.Errorf("line %d: the client printed %+v, want its own and the server's added: %+v", i, got, want)
		}
		if got, want := sr.BW[i], sumBW(s, c); got != want {
			t.Errorf("line %d: the server printed %+v, want its own and the client's added: %+v", i, got, want)
		}
	}
	if cRows, sRows := bwRows(cout), bwRows(sout); strings.Join(cRows, "\n") != strings.Join(sRows, "\n") || len(cRows) != lines {
		t.Errorf("the two sides' tables differ (or do not have %d lines):\n%s\n%s", lines, strings.Join(cRows, "\n"), strings.Join(sRows, "\n"))
	}
}

// duplexTitle is the banner's title of m's test with -b, as perftest's
// ctx_print_test_info puts it: "RDMA_Write Bidirectional BW Test".
func duplexTitle(t *testing.T, m modeCase) string {
	t.Helper()
	p, err := Config{Verb: m.verb, Atomic: m.atomic, Bidirectional: true}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	title := p.title()
	if want := m.verb.String() + " "; !strings.HasPrefix(title, want) || !strings.HasSuffix(title, " Bidirectional BW Test") {
		t.Fatalf("title %q", title)
	}
	return title
}

// bwRows returns the rows of a BW table, each as its fields joined by one
// space.
func bwRows(out string) []string {
	i := strings.Index(out, resultFmt+"\n")
	if i < 0 {
		return nil
	}
	var rows []string
	for _, l := range strings.Split(out[i+len(resultFmt)+1:], "\n") {
		if strings.HasPrefix(l, "---") || l == "" {
			break
		}
		rows = append(rows, strings.Join(strings.Fields(l), " "))
	}
	return rows
}

// signalWriter closes ch once what it has written contains on.
type signalWriter struct {
	mu   sync.Mutex
	w    *bytes.Buffer
	on   string
	ch   chan struct{}
	done bool
}

func (s *signalWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.w.Write(b)
	if !s.done && strings.Contains(s.w.String(), s.on) {
		s.done = true
		close(s.ch)
	}
	return n, err
}

// checkTable parses perftest's output: the banner, the address lines and
// the table with the right header and numeric columns.
func checkTable(t *testing.T, who, out string, m modeCase, sizes []int, iters int) {
	t.Helper()
	for _, w := range []string{" Link type       : Ethernet\n", " local address: LID 0000 QPN 0x", " remote address: LID 0000 QPN 0x", " GID: 00:00:00:00:00:00:00:00:00:00:255:255:"} {
		if !strings.Contains(out, w) {
			t.Errorf("%s output lacks %q:\n%s", who, w, out)
		}
	}
	header := resultFmt
	cols := 5
	if m.lat {
		header, cols = resultFmtLat, 9
	}
	i := strings.Index(out, header+"\n")
	if i < 0 {
		t.Fatalf("%s output lacks the header %q:\n%s", who, header, out)
	}
	lines := len(sizes)
	rows := strings.Split(strings.TrimSpace(out[i+len(header)+1:]), "\n")
	if len(rows) < lines+1 || rows[lines] != strings.TrimSpace(resultLine) {
		t.Fatalf("%s: %d table rows, want %d then a line:\n%s", who, len(rows), lines, out)
	}
	for k, row := range rows[:lines] {
		f := strings.Fields(row)
		if len(f) != cols {
			t.Errorf("%s: row %q has %d columns, want %d", who, row, len(f), cols)
			continue
		}
		var v []float64
		for _, s := range f {
			x, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Errorf("%s: row %q: %v", who, row, err)
			}
			v = append(v, x)
		}
		size := float64(sizes[k])
		wantIters := float64(iters * max(m.qps, 1))
		if m.lat {
			wantIters = float64(iters)
		}
		if v[0] != size || v[1] != wantIters {
			t.Errorf("%s: row %q: size/iterations %v %v, want %v %v", who, row, v[0], v[1], size, wantIters)
		}
		if m.lat {
			if !(v[2] > 0 && v[2] <= v[4] && v[4] <= v[3] && v[5] > 0) {
				t.Errorf("%s: row %q: latencies out of order", who, row)
			}
		} else if !(v[4] > 0 && (v[3] > 0 || size < 1024)) { // 2 B at 0.004 MB/sec prints 0.00
			t.Errorf("%s: row %q: no bandwidth", who, row)
		}
	}
}

// -D over the fabric: the client stops posting when the duration is up,
// whatever -n says (perftest's END_STATE), so a 1-second write run of
// 64 KiB messages (a CQE each) with -n 100000000 returns
// and reports the messages of its middle half. (Before the fix, the
// client posted on after the end until its send queue happened to drain:
// about a second too long under -race over veth, TestPerfMetrics; here
// the fabric drains it too soon for the test to tell.)
func TestPerfDurationStops(t *testing.T) {
	cfg := Config{Verb: Write, Size: 65536, Iters: 100_000_000, Duration: time.Second, GIDIndex: -1}
	r, _ := runDurationPair(t, cfg)
	if len(r.BW) != 1 || r.BW[0].Iters == 0 || r.BW[0].Iters >= 100_000_000 || !(r.BW[0].BWAvg > 0) {
		t.Errorf("report %+v", r.BW)
	}
}

// runDurationPair runs cfg (a -D run) goroce to goroce over a TCP exchange
// on loopback between two fabric devices, server on A, client on B, and
// returns both results. A client that does not stop at its duration runs
// on (the -n of TestPerfDurationStops takes hours) until the context's
// testenv.Slow ends it, an error; how long a run that stops takes is not
// checked: a loaded machine drains the send queue slowly.
func runDurationPair(t *testing.T, cfg Config) (cr, sr *Result) {
	t.Helper()
	pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc, cc := cfg, cfg
	var sout, cbuf bytes.Buffer
	sc.Out, sc.Listener = &sout, ln
	cc.Out, cc.Server, cc.Port = &cbuf, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	type ret struct {
		r   *Result
		err error
	}
	sret := make(chan ret, 1)
	go func() {
		r, err := Run(ctx, pair.A.Dev, sc)
		sret <- ret{r, err}
	}()
	start := time.Now()
	cr, err = Run(ctx, pair.B.Dev, cc)
	took := time.Since(start)
	if err != nil {
		cancel()
		t.Fatalf("client: %v\n%s", err, cbuf.String())
	}
	s := <-sret
	if s.err != nil {
		t.Fatalf("server: %v\n%s", s.err, sout.String())
	}
	t.Logf("client ran %v:\n%s\nserver:\n%s", took, cbuf.String(), sout.String())
	return cr, s.r
}

// -c: RC (default), UC for SEND and WRITE, UD for SEND; everything else
// is refused with ErrUsage and a message naming what is valid.
func TestConnectionValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{Verb: Write}, ""},
		{Config{Verb: Write, Connection: "RC"}, ""},
		{Config{Verb: Write, Connection: "UC"}, ""},
		{Config{Verb: Send, Lat: true, Connection: "UC"}, ""},
		{Config{Verb: Read, Connection: "UC"}, "UC carries SEND and RDMA WRITE only"},
		{Config{Verb: Atomic, Connection: "UC"}, "use -c RC"},
		{Config{Verb: Write, Connection: "UC", RDMACM: true}, "drop -R"},
		{Config{Verb: Send, Connection: "UD"}, ""},
		{Config{Verb: Send, Lat: true, Connection: "UD", Bidirectional: false}, ""},
		{Config{Verb: Write, Connection: "UD"}, "UD connection only possible in SEND verb"},
		{Config{Verb: Read, Lat: true, Connection: "UD"}, "only possible in SEND verb"},
		{Config{Verb: Send, Connection: "UD", RDMACM: true}, "drop -R"},
		{Config{Verb: Send, Connection: "XRC"}, "must be RC, UC or UD"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s %q: %v, want an ErrUsage containing %q", c.cfg.Verb, c.cfg.Connection, err, c.want)
		}
	}
}

// -b is for the BW tests: perftest's parser refuses it with a latency test
// ("Bidirectional is only available in BW test"), and so does Validate.
func TestBidirectionalValidate(t *testing.T) {
	for _, v := range []Verb{Write, Read, Send, Atomic} {
		if err := (Config{Verb: v, Bidirectional: true}).Validate(); err != nil {
			t.Errorf("%s -b: %v", v, err)
		}
		err := Config{Verb: v, Lat: true, Bidirectional: true}.Validate()
		if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "only available in BW tests") {
			t.Errorf("%s --lat -b: %v, want an ErrUsage naming the BW tests", v, err)
		}
	}
	for _, c := range []Config{{Verb: Send, Bidirectional: true}, {Verb: Send, Bidirectional: true, Server: "192.0.2.1"}} {
		p, err := c.resolve()
		if err != nil || p.noPeak {
			t.Errorf("%+v: noPeak %v, %v: with -b both sides send and measure a peak", c, p != nil && p.noPeak, err)
		}
	}
}

// -b with -D over the fabric: WRITE exchanges the reports and prints their
// sum; SEND does not, each side printing what it sent and received in its
// own window, and neither side waits at the end for what it has
// outstanding (its peer may already have stopped taking receives).
func TestPerfBidirDuration(t *testing.T) {
	for _, v := range []Verb{Write, Send} {
		t.Run(v.String(), func(t *testing.T) {
			cr, sr := runDurationPair(t, Config{Verb: v, Size: 4096, Duration: time.Second, GIDIndex: -1, Bidirectional: true})
			if len(cr.BW) != 1 || len(sr.BW) != 1 || len(cr.Local) != 1 || len(sr.Local) != 1 {
				t.Fatalf("results: client %+v, server %+v", cr, sr)
			}
			for who, r := range map[string]*Result{"client": cr, "server": sr} {
				if l := r.Local[0]; l.Iters == 0 || !(l.BWAvg > 0) || l.BWPeak != 0 {
					t.Errorf("%s's own report %+v: want messages, a bandwidth and no peak", who, l)
				}
			}
			if v == Send {
				if cr.BW[0] != cr.Local[0] || sr.BW[0] != sr.Local[0] {
					t.Errorf("SEND -b -D: each side prints its own report: client %+v, server %+v", cr, sr)
				}
				return
			}
			if cr.BW[0] != sumBW(cr.Local[0], sr.Local[0]) || sr.BW[0] != sumBW(sr.Local[0], cr.Local[0]) {
				t.Errorf("WRITE -b -D: each side prints both reports added: client %+v, server %+v", cr, sr)
			}
		})
	}
}

// -T: perftest's range (MIN_TOS, MAX_TOS) and its rule that TOS is for
// rdma_cm QPs (-R) only, each refused with perftest's words.
func TestTOSValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{Verb: Write, RDMACM: true, SetTOS: true, TOS: 0}, ""},
		{Config{Verb: Send, Lat: true, RDMACM: true, SetTOS: true, TOS: 255}, ""},
		{Config{Verb: Write, TOS: 300}, ""}, // not given
		{Config{Verb: Write, SetTOS: true, TOS: 106}, "TOS only valid for rdma_cm based QP and RawEth QP"},
		{Config{Verb: Read, RDMACM: true, SetTOS: true, TOS: 256}, "TOS should be between 0 and 255"},
		{Config{Verb: Read, RDMACM: true, SetTOS: true, TOS: -1}, "TOS should be between 0 and 255"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("-T %d (set %v, -R %v): %v, want an ErrUsage containing %q", c.cfg.TOS, c.cfg.SetTOS, c.cfg.RDMACM, err, c.want)
		}
	}
}

// roceDefaults are rdmacm.Defaults: RoCE v2 and default_roce_tos tos.
type roceDefaults struct{ tos uint8 }

func (roceDefaults) DefaultMode(string, int) (wire.Version, error) { return wire.RoCEv2, nil }
func (d roceDefaults) DefaultTOS(string, int) (uint8, error)       { return d.tos, nil }

// Run's error, when ctx ends while a server waits for its client (over
// TCP or RDMA CM), is ctx's, not the closed socket's or listener's, and
// says what the run was doing.
func TestRunInterrupted(t *testing.T) {
	for _, rdmaCM := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "rdma_cm"}[rdmaCM], func(t *testing.T) {
			pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out bytes.Buffer
			ready := make(chan struct{})
			c := Config{Verb: Write, GIDIndex: -1, Out: &signalWriter{w: &out, on: waitBanner, ch: ready}}
			dev := pair.A.Dev
			if rdmaCM {
				c.RDMACM, c.CM, dev = true, rdmacm.New(rdmacm.Options{}), nil
				t.Cleanup(func() { c.CM.Close() })
				if err := c.CM.AddDevice(pair.A.Dev); err != nil {
					t.Fatal(err)
				}
			} else {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				c.Listener = ln
			}
			errc := make(chan error, 1)
			go func() {
				_, err := Run(ctx, dev, c)
				errc <- err
			}()
			<-ready
			cancel()
			select {
			case err := <-errc:
				if want := context.Canceled.Error() + " while waiting for a client on "; !errors.Is(err, context.Canceled) ||
					!strings.HasPrefix(err.Error(), want) {
					t.Errorf("Run: %v, want %q...", err, want)
				}
			case <-time.After(testenv.Slow):
				t.Fatalf("Run did not return %v after its context ended", testenv.Slow)
			}
		})
	}
}

// -H prints every latency sample sorted, -U in the order measured, each
// halved for a ping-pong as the summary's are; the summary's own numbers
// come from the same samples.
func TestPrintSamples(t *testing.T) {
	base := time.Unix(0, 0)
	var posted []time.Time
	t0 := base
	for _, rtt := range []time.Duration{1600, 1500, 1700, 5000} { // µs
		posted = append(posted, t0)
		t0 = t0.Add(rtt * time.Microsecond)
	}
	posted = append(posted, t0)
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Verb: Send, Lat: true, Histogram: true}, "#, usec\n1, 750\n2, 800\n3, 850\n4, 2500\n"},
		{Config{Verb: Send, Lat: true, Unsorted: true}, "#, usec\n1, 800\n2, 750\n3, 850\n4, 2500\n"},
		{Config{Verb: Read, Lat: true, Unsorted: true}, "#, usec\n1, 1600\n2, 1500\n3, 1700\n4, 5000\n"},
	} {
		var b bytes.Buffer
		(&params{Config: c.cfg}).printSamples(&b, posted)
		if b.String() != c.want {
			t.Errorf("%s H=%v U=%v: %q, want %q", c.cfg.Verb, c.cfg.Histogram, c.cfg.Unsorted, b.String(), c.want)
		}
	}
	if err := (Config{Verb: Write, Unsorted: true}).Validate(); err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--lat") {
		t.Errorf("write -U without --lat: %v, want an ErrUsage naming --lat", err)
	}
}

// -U with -D: the client prints one sample per iteration of the measured
// window, in order, before the duration summary, whose iteration count
// is theirs plus one (a sample is the time between two posts).
func TestPerfDurationUnsorted(t *testing.T) {
	cfg := Config{Verb: Send, Lat: true, Size: 64, Duration: time.Second, GIDIndex: -1, Unsorted: true}
	pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc, cc := cfg, cfg
	sc.Unsorted = false
	var sout, cout bytes.Buffer
	sc.Out, sc.Listener = &sout, ln
	cc.Out, cc.Server, cc.Port = &cout, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	serr := make(chan error, 1)
	go func() { _, err := Run(ctx, pair.A.Dev, sc); serr <- err }()
	cr, err := Run(ctx, pair.B.Dev, cc)
	if err != nil {
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	out := cout.String()
	i := strings.Index(out, "#, usec\n")
	if i < 0 || strings.Contains(sout.String(), "#, usec") {
		t.Fatalf("client output without samples (or server's with them):\n%s\nserver:\n%s", out, sout.String())
	}
	n := 0
	for _, line := range strings.Split(out[i+len("#, usec\n"):], "\n") {
		var k int
		var v float64
		if _, err := fmt.Sscanf(line, "%d, %g", &k, &v); err != nil {
			break
		}
		n++
		if k != n || !(v > 0) {
			t.Fatalf("sample line %q: want index %d and a positive latency", line, n)
		}
	}
	if len(cr.Lat) != 1 || n == 0 || uint64(n+1) != cr.Lat[0].Iters {
		t.Errorf("%d samples, report %+v: want the report's iterations minus one", n, cr.Lat)
	}
}

// TestProgressOneWriterAtATime: the -D progress ticker and every QP's
// goroutine (its drain notice) write Progress at once; whatever writer the
// caller gives (here a bytes.Buffer, as the CLI tests do) sees one write at
// a time. The race detector failed TestPerfOverVeth (-q 2 -D 2) on this in
// a CI run; under -race this test fails the same way without the lock.
func TestProgressOneWriterAtATime(t *testing.T) {
	var out bytes.Buffer
	p, err := Config{Verb: Write, Size: 65536, Iters: 5, Progress: &out}.resolve()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				fmt.Fprintf(p.Progress, "line %d\n", j)
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(out.String(), "\n"); n != 400 {
		t.Errorf("%d lines, want 400", n)
	}
}

// -c UC and UD: with the default receive depth (512) an iterations run
// posts a receive for every message up front, up to UC_MAX_RX (16,000),
// as perftest's force_dependecies does (nothing resends a SEND that found
// no receive); a given -r, other depths and RC keep theirs. UD keeps -Q at
// a large -s (its messages are clamped to the path MTU).
func TestUnreliableRxDepth(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{Verb: Send, Connection: "UD"}, 1000},
		{Config{Verb: Send, Connection: "UD", Iters: 100000}, 16000},
		{Config{Verb: Send, Connection: "UD", Iters: 100}, 100},
		{Config{Verb: Send, Connection: "UC", Iters: 5000}, 5000},
		{Config{Verb: Send, Connection: "UD", Iters: 5000, RxDepth: 64}, 64},
		{Config{Verb: Send, Iters: 5000}, 512},
		{Config{Verb: Send, Connection: "UD", Duration: 2 * time.Second}, 512},
	} {
		p, err := c.cfg.resolve()
		if err != nil {
			t.Fatalf("%+v: %v", c.cfg, err)
		}
		if p.RxDepth != c.want {
			t.Errorf("-c %s -n %d -r %d -D %v: RX depth %d, want %d", p.Connection, c.cfg.Iters, c.cfg.RxDepth, c.cfg.Duration, p.RxDepth, c.want)
		}
	}
	p, err := Config{Verb: Send, Connection: "UD", Size: 65536}.resolve()
	if err != nil || p.CQMod != defCQMod {
		t.Errorf("-c UD -s 65536: CQ moderation %d, %v; want %d (perftest keeps it for UD)", p.CQMod, err, defCQMod)
	}
}

// -c UD with -D over the fabric: the bandwidth and latency tests run for
// their duration and report, as with RC (a UD SEND that finds no receive
// is dropped, not retried, and nothing waits for it).
func TestPerfUDDuration(t *testing.T) {
	for _, lat := range []bool{false, true} {
		t.Run(fmt.Sprint("lat=", lat), func(t *testing.T) {
			cr, sr := runDurationPair(t, Config{Verb: Send, Lat: lat, Connection: "UD", Size: 1024, Duration: time.Second, GIDIndex: -1})
			if lat {
				if len(cr.Lat) != 1 || cr.Lat[0].Iters == 0 {
					t.Errorf("client latency report %+v", cr.Lat)
				}
				return
			}
			if len(cr.BW) != 1 || cr.BW[0].Iters == 0 || !(cr.BW[0].BWAvg > 0) || len(sr.BW) != 1 {
				t.Errorf("reports: client %+v, server %+v", cr.BW, sr.BW)
			}
		})
	}
}

// TestWaitCQSeesCancel: a run whose context ended stops at its next
// waitCQ even while the CQ holds completions, busy-polled or waited for
// (-e): before, only a busy poll that found the CQ empty 1,024 times in a
// row looked, so a steady stream of completions hid an interrupt.
func TestWaitCQSeesCancel(t *testing.T) {
	for _, event := range []bool{false, true} {
		t.Run(map[bool]string{false: "busy poll", true: "event"}[event], func(t *testing.T) {
			pair := verbstest.NewPair(t, verbstest.Options{})
			const n = 4
			for i := range n {
				if err := pair.B.QP.PostRecv(verbs.RecvWR{WRID: uint64(i)}); err != nil {
					t.Fatal(err)
				}
				if err := pair.A.QP.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
					t.Fatal(err)
				}
			}
			// The send CQ holds a completion before the call.
			if err := pair.A.CQ.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			p := &params{Config: Config{UseEvent: event}}
			wcs := make([]verbs.WC, 1)
			k, err := p.waitCQ(ctx, pair.A.CQ, wcs, time.Time{})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("waitCQ after cancel, with completions queued: %d, %v; want %v", k, err, context.Canceled)
			}
		})
	}
}
