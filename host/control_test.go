package host

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// loDevice registers a RoCE v2 device on lo in a fresh runtime directory.
func loDevice(t *testing.T) *Registry {
	t.Helper()
	ns, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	r := NewRegistry(t.TempDir())
	if err := r.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Netns: ns, Versions: VersionsV2}); err != nil {
		t.Fatal(err)
	}
	return r
}

// loopQPs makes two RC QPs on d connected to each other over 127.0.0.1.
func loopQPs(t *testing.T, d *Device) (pd *verbs.PD, cq *verbs.CQ, a, b *verbs.QP) {
	t.Helper()
	gidx := -1
	for i, g := range d.GIDs() {
		if g.GID == netip.MustParseAddr("::ffff:127.0.0.1") {
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
	if cq, err = d.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	init := verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if a, err = pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	if b, err = pd.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	o := verbstest.Options{QPAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessLocalWrite}
	gid := netip.MustParseAddr("::ffff:127.0.0.1")
	if err := verbstest.ConnectQP(a, b.Num(), gid, uint8(gidx), o); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.ConnectQP(b, a.Num(), gid, uint8(gidx), o); err != nil {
		t.Fatal(err)
	}
	return pd, cq, a, b
}

// writeMRs registers a WRITE's source and destination on pd, 1 MiB each,
// the source's byte i being byte(i).
func writeMRs(t *testing.T, pd *verbs.PD) (src, dst []byte, mrA, mrB *verbs.MR) {
	t.Helper()
	src, dst = make([]byte, 1<<20), make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i)
	}
	var err error
	if mrA, err = pd.RegMR(src, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if mrB, err = pd.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return src, dst, mrA, mrB
}

// readCapture reads a capture's pcapng stream to its end: the frames and
// the last statistics block.
type captureResult struct {
	frames  [][]byte
	stats   pcapgo.NgInterfaceStatistics
	gotISB  bool
	linkErr error
}

func readCapture(s io.Reader) captureResult {
	var res captureResult
	opts := pcapgo.DefaultNgReaderOptions
	opts.StatisticsCallback = func(_ int, st pcapgo.NgInterfaceStatistics) { res.stats, res.gotISB = st, true }
	ng, err := pcapgo.NewNgReader(s, opts)
	if err != nil {
		res.linkErr = err
		return res
	}
	for {
		data, _, err := ng.ReadPacketData()
		if err == io.EOF {
			return res
		}
		if err != nil {
			res.linkErr = err
			return res
		}
		res.frames = append(res.frames, append([]byte(nil), data...))
	}
}

func TestControlNotRunning(t *testing.T) {
	r := loDevice(t)
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	if _, err := r.Counters(ctx, "rxe0"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("counters of a device nobody runs: %v, want ErrNotRunning", err)
	}
	if _, err := r.Resources(ctx, "rxe9"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("resources of an unknown device: %v, want ENODEV", err)
	}
	if _, err := r.Capture(ctx, "rxe0"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("capture of a device nobody runs: %v, want ErrNotRunning", err)
	}
}

// TestControlLoopback opens a device on lo as its owner would, runs RDMA
// WRITEs between two of its QPs, and reads counters, resources and two
// captures at once through the control socket: one that keeps up, one that
// reads nothing until the end and so drops, and says how many.
func TestControlLoopback(t *testing.T) {
	r := loDevice(t)
	defer func(n int) { captureQueueLen = n }(captureQueueLen)
	captureQueueLen = 64

	// A dead owner's socket is in the way: Open replaces it.
	sock := r.ControlSocket("rxe0")
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := openLo(t, Options{RunDir: r.Dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, %v; want a socket with mode 0600", sock, st.Mode(), err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pd, cq, a, b := loopQPs(t, d)
	remove := d.AddCMIDSource(func() []CMID {
		return []CMID{{Port: 1, ID: 3, LQPN: a.Num(), QPType: "RC", State: "CONNECT", PS: "TCP", SrcAddr: "127.0.0.1:7174", DstAddr: "127.0.0.1:40000"}}
	})
	d.CountCMEvent("RDMA_CM_EVENT_ESTABLISHED")

	fast, err := r.Capture(ctx, "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := r.Capture(ctx, "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fastc := make(chan captureResult, 1)
	go func() { fastc <- readCapture(fast) }()

	// Wait until both captures are subscribed (the reply line is sent after).
	src, _, mrA, mrB := writeMRs(t, pd)
	const writes = 4
	for i := range writes {
		if err := a.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mrA.SGE(0, len(src))}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}); err != nil {
			t.Fatal(err)
		}
		verbstest.MustSucceed(t, cq)
	}

	rep, err := r.Counters(ctx, "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Device != "rxe0" || rep.Owner.PID != os.Getpid() || rep.Counters["sent_pkts"] < writes*1024 ||
		rep.Counters["rcvd_pkts"] < writes*1024 || rep.Link["tx_packets"] == 0 || rep.CMEvents["RDMA_CM_EVENT_ESTABLISHED"] != 1 {
		t.Errorf("counters: %+v", rep)
	}
	if len(rep.QPs) != 2 || rep.QPs[0].LQPN != a.Num() || rep.QPs[0].Counters["sent_pkts"] < writes*1024 || rep.QPs[0].State != "RTS" {
		t.Errorf("QP counters: %+v", rep.QPs)
	}
	res, err := r.Resources(ctx, "rxe0")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.QPs) != 2 {
		t.Fatalf("resources: %+v", res)
	}
	qa, qb := res.QPs[0], res.QPs[1]
	if qa.LQPN != a.Num() || qa.RQPN != b.Num() || qb.RQPN != a.Num() || qa.Type != "RC" || qa.State != "RTS" ||
		qa.SQPSN != uint32(wire.PSN(0x1000).Add(writes*1024)) || qb.RQPSN != qa.SQPSN || qa.PathMTU != 1024 || qb.PDN != qa.PDN {
		t.Errorf("QPs: %+v", res.QPs)
	}
	if len(res.CMIDs) != 1 || res.CMIDs[0].State != "CONNECT" || res.CMIDs[0].LQPN != a.Num() {
		t.Errorf("CM IDs: %+v", res.CMIDs)
	}
	remove()
	if res, err := r.Resources(ctx, "rxe0"); err != nil || len(res.CMIDs) != 0 {
		t.Errorf("CM IDs after their source is removed: %+v, %v", res, err)
	}

	// End both captures: each ends with what it had queued, the final
	// statistics and EOF.
	fast.Stop()
	slow.Stop()
	fr := <-fastc
	sr := readCapture(slow)
	for _, c := range []struct {
		name string
		r    captureResult
	}{{"fast", fr}, {"slow", sr}} {
		if c.r.linkErr != nil || !c.r.gotISB {
			t.Fatalf("%s capture: %v, statistics block %v", c.name, c.r.linkErr, c.r.gotISB)
		}
		if c.r.stats.PacketsReceived != uint64(len(c.r.frames))+c.r.stats.PacketsDropped {
			t.Errorf("%s capture: %d frames, statistics %+v", c.name, len(c.r.frames), c.r.stats)
		}
		// Every frame is a RoCE v2 packet over IPv4 with a good ICRC.
		for i, f := range c.r.frames {
			var p wire.Packet
			if err := p.ParseFrame(f, wire.RoCEv2Port); err != nil {
				t.Fatalf("%s capture frame %d: %v", c.name, i+1, err)
			}
			if err := p.VerifyICRC(); err != nil {
				t.Fatalf("%s capture frame %d: %v", c.name, i+1, err)
			}
		}
	}
	if n := uint64(len(fr.frames)) + fr.stats.PacketsDropped; n < writes*1024 {
		t.Errorf("fast capture saw %d packets; the device sent %d", n, rep.Counters["sent_pkts"])
	}
	if sr.stats.PacketsDropped == 0 {
		t.Errorf("the capture that did not read dropped nothing: %+v, %d frames", sr.stats, len(sr.frames))
	}
	t.Logf("fast capture: %d frames, %d dropped; slow capture: %d frames, %d dropped",
		len(fr.frames), fr.stats.PacketsDropped, len(sr.frames), sr.stats.PacketsDropped)

	// Close removes the socket; the device is no longer running.
	d.Close()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: %v", err)
	}
	if _, err := r.Counters(ctx, "rxe0"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("counters after Close: %v", err)
	}
}

// A client that connects and sends nothing, or garbage, does not hold up
// the owner's Close.
func TestControlBadClients(t *testing.T) {
	r := loDevice(t)
	d, err := openLo(t, Options{RunDir: r.Dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := net.Dial("unix", r.ControlSocket("rxe0"))
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	bad, err := net.Dial("unix", r.ControlSocket("rxe0"))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.Write([]byte("{\"op\":\"reboot\"}\n"))
	bad.SetReadDeadline(time.Now().Add(testenv.Slow))
	b, _ := io.ReadAll(bad)
	if !strings.Contains(string(b), `unknown request \"reboot\"`) {
		t.Errorf("reply to an unknown request: %q", b)
	}
	done := make(chan struct{})
	go func() { d.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(testenv.Slow):
		t.Fatal("Close hangs on an idle control client")
	}
}

// TestForeignDue: one log line per source per interval, and the next line
// counts the drops left unsaid in between.
func TestForeignDue(t *testing.T) {
	var c controlState
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.3")
	t0 := time.Unix(1000, 0)
	steps := []struct {
		src    netip.Addr
		at     time.Duration
		due    bool
		unsaid int
	}{
		{a, 0, true, 0},
		{a, 4 * time.Second, false, 0},
		{b, 5 * time.Second, true, 0}, // another source has its own interval
		{a, 8 * time.Second, false, 0},
		{a, foreignLogInterval + time.Second, true, 2},
		{a, foreignLogInterval + 2*time.Second, false, 0},
	}
	for i, s := range steps {
		due, unsaid := c.foreignDue(s.src, t0.Add(s.at))
		if due != s.due || unsaid != s.unsaid {
			t.Errorf("step %d (%v at %v): due %v unsaid %d, want %v %d", i, s.src, s.at, due, unsaid, s.due, s.unsaid)
		}
	}
}

// openLo opens rxe0, a device on lo in this (the root) namespace, whose UDP
// port 4791 other test processes of go test ./... may hold for a moment
// (roce demo binds 127.0.0.1:4791): it waits up to a minute for the port.
func openLo(t *testing.T, o Options) (*Device, error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		d, err := Open("rxe0", o)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return d, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestOpenKeepsPoller: the capture tap host puts over every device's link
// must not hide link/udp's link.Poller, or the device's CQ pollers never
// drive the link (verbs' run to completion) and every host device falls
// back to the receive goroutine's hand-off (the datapath branch's finding).
func TestOpenKeepsPoller(t *testing.T) {
	r := loDevice(t)
	d, err := openLo(t, Options{RunDir: r.Dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, ok := d.Device.Link().(link.Poller); !ok {
		t.Fatalf("the device's link %T is not a link.Poller", d.Device.Link())
	}
}

// TestPeerAllowedClosed: a control connection closed before its peer's
// credentials are read (the device closing, or a client hanging up at
// once) is refused; it crashed the process with a nil dereference (seen
// in a CI run's race pass).
func TestPeerAllowedClosed(t *testing.T) {
	a, b, err := unixPair()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !peerAllowed(a) {
		t.Fatal("an open connection from our own user is refused")
	}
	a.Close()
	if peerAllowed(a) {
		t.Fatal("a closed connection is admitted")
	}
}

// unixPair returns the two ends of a connected Unix stream socket pair.
func unixPair() (*net.UnixConn, *net.UnixConn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	conn := func(fd int) (*net.UnixConn, error) {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			return nil, err
		}
		return c.(*net.UnixConn), nil
	}
	a, err := conn(fds[0])
	if err != nil {
		return nil, nil, err
	}
	b, err := conn(fds[1])
	if err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}
