package pingpong_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/pingpong"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// startCapture runs tcpdump on the lab bridge until stop is called; it
// returns the file.
func startCapture(t *testing.T, l *lab.Lab) (file string, stop func()) {
	_, err := exec.LookPath("tcpdump")
	testenv.Require(t, err == nil, "tcpdump")
	file = filepath.Join(t.TempDir(), "lab.pcap")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := l.Command(ctx, "tcpdump", "-i", lab.Bridge, "-s", "0", "-U", "-w", file, "udp port 4791")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	out := &lockedBuffer{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// -U writes each packet as it comes; SIGINT ends tcpdump after the one
	// it is writing.
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			cmd.Wait()
		})
	}
	t.Cleanup(stop)
	if !testenv.Poll(testenv.Slow, func() bool { return strings.Contains(out.String(), "listening") }) {
		stop()
		t.Fatalf("tcpdump does not listen:\n%s", out)
	}
	return file, stop
}

// TestLabInterop runs goroce's pingpong against rdma-core's ibv_*_pingpong
// on Linux rxe, in both roles, over IPv4 and IPv6, 64 B to 64 KiB at path
// MTU 1024; rxe's sequence-error counters stay 0, and a capture of the
// traffic verifies (every ICRC) in goroce's decoder and tshark.
func TestLabInterop(t *testing.T) {
	testLabInterop(t, host.RxDefault, []verbs.QPType{verbs.RC, verbs.UC, verbs.UD})
}

// TestLabInteropXDP is TestLabInterop's RC half with goroce's port reading
// through AF_XDP (rx-path xdp; the host's end is the lab's bridge, where
// the XDP program runs in the generic mode).
func TestLabInteropXDP(t *testing.T) {
	testLabInterop(t, host.RxXDP, []verbs.QPType{verbs.RC})
}

func testLabInterop(t *testing.T, rx host.RxPath, types []verbs.QPType) {
	l := lab.Start(t)
	d := l.OpenDeviceRx(t, host.VersionsV2, rx)
	vm := lab.VM1
	l.Exec(vm, killPingpong)
	before := l.Counters(t, vm)
	file, stopCapture := startCapture(t, l)
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		gOurs, gTheirs := lab.HostGIDIndex(t, d, ours), l.GIDIndex(t, vm, theirs)
		for _, typ := range types {
			sizes := []int{64, 4096, 65536}
			if typ == verbs.UD {
				sizes = []int{64, 1024}
			}
			tool := "ibv_" + strings.ToLower(typ.String()) + "_pingpong"
			for _, size := range sizes {
				for _, role := range []string{"client", "server"} {
					name := fmt.Sprintf("%s/%s/%d/goroce-%s", fam, typ, size, role)
					t.Run(name, func(t *testing.T) {
						c := pingpong.Config{Type: typ, GIDIndex: gOurs, Size: size, Iters: 5, Out: &strings.Builder{}}
						args := fmt.Sprintf("-d rxe0 -g %d -n 5 -s %d", gTheirs, size)
						if role == "client" {
							goroceClient(t, l, vm, d, c, tool, args)
						} else {
							goroceServer(t, l, vm, d, c, tool, args)
						}
					})
				}
			}
		}
	}
	stopCapture()
	ours := d.Counters().Snapshot()
	l.CheckRxeCounters(t, vm, before, ours)
	t.Logf("goroce counters: %v", ours)
	verifyCapture(t, file)
}

// killPingpong ends any pingpong left in a VM by an interrupted run: it
// would answer the next run's exchange with a stale QP.
const killPingpong = "killall ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong 2>/dev/null; true"

// pingpongLimit bounds a pingpong's run in the VM (timeout(1)); goroce's
// side has a little longer.
const pingpongLimit = 80 * time.Second

// goroceClient runs tool (ibv_*_pingpong) with args as the server in vm and
// goroce's pingpong c against it, retrying while the tool does not listen
// yet: both succeed.
func goroceClient(t *testing.T, l *lab.Lab, vm lab.VM, d *host.Device, c pingpong.Config, tool, args string) {
	ctx, cancel := context.WithTimeout(context.Background(), pingpongLimit+10*time.Second)
	defer cancel()
	l.Exec(vm, killPingpong)
	job := l.Background(t, vm, "/tmp/pp.log", pingpongLimit, tool+" "+args)
	c.Server, c.Dial = vm.Mgmt, l.DialContext // the exchange, from inside roce-host
	err := lab.UntilListening(ctx, job, "Couldn't connect", func() error { return pingpong.Run(ctx, d.Device, c) })
	if err != nil {
		t.Fatalf("goroce client: %v\n%s", err, c.Out)
	}
	if log := job.Wait(); !strings.Contains(log, "EXIT 0") {
		t.Fatalf("%s server:\n%s", tool, log)
	}
}

// goroceServer runs goroce's pingpong c as the server and tool with args
// as the client in vm against it: both succeed.
func goroceServer(t *testing.T, l *lab.Lab, vm lab.VM, d *host.Device, c pingpong.Config, tool, args string) {
	ctx, cancel := context.WithTimeout(context.Background(), pingpongLimit+10*time.Second)
	defer cancel()
	c.Listener = l.Listen(t, lab.HostMgmt+":18515")
	errc := make(chan error, 1)
	go func() { errc <- pingpong.Run(ctx, d.Device, c) }()
	out, rc, err := l.Exec(vm, fmt.Sprintf("timeout %d %s %s %s", int(pingpongLimit.Seconds()), tool, args, lab.HostMgmt))
	if err != nil || rc != 0 {
		t.Errorf("%s client: exit %d %v\n%s", tool, rc, err, out)
	}
	if err := <-errc; err != nil {
		t.Fatalf("goroce server: %v\n%s", err, c.Out)
	}
}

// verifyCapture checks every RoCE packet of the capture: it parses and its
// ICRC is right (goroce), and tshark decodes it without malformed or
// error-severity marks.
func verifyCapture(t *testing.T, file string) {
	n, bad := 0, 0
	err := pcap.ReadFile(file, func(f pcap.Frame) error {
		var p wire.Packet
		err := p.ParseFrame(f.Data, wire.RoCEv2Port)
		if errors.Is(err, wire.ErrNotRoCE) {
			return nil
		}
		n++
		if err == nil {
			err = p.VerifyICRC()
		}
		if err != nil {
			bad++
			t.Errorf("capture frame %d: %v", f.Number, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the capture holds no RoCE packets")
	}
	t.Logf("capture: %d RoCE packets, %d bad", n, bad)
	tshark := testenv.Tshark(t)
	// Only stdout: tshark warns on stderr when it runs as root. UDP checksum
	// 0 over IPv6 is what rxe sends (its own traces draw the same complaint),
	// so that one expert message is not counted.
	cmd := exec.Command(tshark, "-r", file, "--disable-protocol", "rpcordma", "-Y",
		"_ws.malformed || (_ws.expert.severity >= \"error\" && !udp.checksum.zero)", "-T", "fields", "-e", "frame.number")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, stderr.String())
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		t.Errorf("tshark marks frames malformed or in error: %s", s)
	}
}

// lockedBuffer is a strings.Builder safe to read while exec's copier writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
