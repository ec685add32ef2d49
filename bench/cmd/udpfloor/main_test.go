package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// TestFloorOverLoopback: a server and a client over 127.0.0.1 move every
// byte, the client's table reads as perftest's (bench/vm.sh's metric takes
// the fourth column), and the server's count is what the report says.
func TestFloorOverLoopback(t *testing.T) {
	testenv.Root(t) // SO_RCVBUFFORCE
	for _, c := range []struct {
		name string
		p    params
	}{
		{"64KiB at 1024", params{n: 200, size: 65536, mtu: 1024, window: 16, rx: "ring"}},
		{"odd size at 4096", params{n: 50, size: 10000, mtu: 4096, window: 4, rx: "ring"}},
		{"one P", params{n: 100, size: 65536, mtu: 1024, window: 8, rx: "ring"}},
		{"one P, entersyscall", params{n: 100, size: 65536, mtu: 1024, window: 8, rx: "ring", entersyscall: true}},
		// Loopback's receiver gets a copy (skb_orphan_frags_rx): every
		// send completes as copied, and each buffer is reused only after.
		{"zerocopy", params{n: 100, size: 65536, mtu: 1024, window: 8, rx: "ring", zerocopy: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.HasPrefix(c.name, "one P") {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			}
			// With one P every sendmmsg is raw, as goroce's link makes
			// it; with more, or -entersyscall, none.
			raw := 0
			if runtime.GOMAXPROCS(0) == 1 && !c.p.entersyscall {
				raw = c.p.n
			}
			ctl := testenv.FreeTCPPort(t)
			data := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(testenv.FreeTCPPort(t)))
			done := make(chan error, 1)
			go func() { done <- serve(data, ctl) }()
			var out bytes.Buffer
			var err error
			for range 50 { // until the server listens
				if err = client(c.p, data, "127.0.0.1", ctl, &out); err == nil || !isRefused(err) {
					break
				}
				out.Reset()
				sleep()
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
			t.Logf("%s", out.String())
			m := regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s`).FindStringSubmatch(out.String())
			if m == nil || m[1] != strconv.Itoa(c.p.size) || m[2] != strconv.Itoa(c.p.n) {
				t.Fatalf("no perftest table row for %d × %d bytes:\n%s", c.p.n, c.p.size, out.String())
			}
			if v, _ := strconv.ParseFloat(m[4], 64); v <= 0 {
				t.Errorf("BW average %s", m[4])
			}
			if w := fmt.Sprintf("sendmmsg calls made raw (no entersyscall): %d\n", raw); !strings.Contains(out.String(), w) {
				t.Errorf("want %q in:\n%s", w, out.String())
			}
			if c.p.zerocopy {
				// Two GSO messages a 64 KiB message (62 datagrams of 1,040 bytes fit in one).
				sends := 2 * c.p.n
				if w := fmt.Sprintf("-zerocopy: %d of %d sends reported done, %d of them copied by the kernel after all\n", sends, sends, sends); !strings.Contains(out.String(), w) {
					t.Errorf("want %q in:\n%s", w, out.String())
				}
			} else if strings.Contains(out.String(), "-zerocopy") {
				t.Errorf("a zero-copy report without -zerocopy:\n%s", out.String())
			}
			want := strconv.Itoa(c.p.n*c.p.size) + " of " + strconv.Itoa(c.p.n*c.p.size) + " bytes received"
			if !bytes.Contains(out.Bytes(), []byte(want)) || !bytes.Contains(out.Bytes(), []byte(strconv.Itoa(c.p.n)+" messages ACKed, 0 counted lost; 0 datagrams")) {
				t.Errorf("want %q, all messages ACKed, none lost:\n%s", want, out.String())
			}
		})
	}
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func sleep() { time.Sleep(20 * time.Millisecond) }

// TestLatFloorOverLoopback: -lat's ping-pong over 127.0.0.1 makes every
// round trip, each message ACKed, and prints both tools' reports as
// bench/vm.sh reads them (ib_send_lat's t_typical column, ibv_rc_pingpong's
// usec/iter), with figures that agree with each other; both sides
// busy-polling an AF_PACKET ring (the default) or the socket, and both
// waiting in recvfrom(2) (-block).
func TestLatFloorOverLoopback(t *testing.T) {
	testenv.Root(t) // SO_RCVBUFFORCE
	for _, c := range []struct {
		name, addr, rx      string
		block, pktinfo, gso bool
	}{
		{"ring", "127.0.0.1", "ring", false, false, true},
		{"ring IPv6", "::1", "ring", false, false, true},
		{"socket", "127.0.0.1", "socket", false, false, true},
		{"block", "127.0.0.1", "ring", true, false, true},
		{"pktinfo", "127.0.0.1", "ring", false, true, true},
		{"pktinfo IPv6", "::1", "ring", false, true, true},
		{"two datagrams", "127.0.0.1", "ring", false, false, false},
		{"two datagrams, pktinfo", "127.0.0.1", "ring", false, true, false},
		{"two datagrams, socket", "127.0.0.1", "socket", false, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			testLatFloor(t, c.addr, params{n: 500, size: 64, mtu: 1024, window: 1, lat: true, block: c.block, rx: c.rx, pktinfo: c.pktinfo, gso: c.gso})
		})
	}
	// One P, as in the lab's VMs: raw sends, unless -entersyscall.
	for _, enter := range []bool{false, true} {
		t.Run(fmt.Sprintf("one P, entersyscall %v", enter), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			testLatFloor(t, "127.0.0.1", params{n: 500, size: 64, mtu: 1024, window: 1, lat: true, rx: "ring", gso: true, entersyscall: enter})
		})
	}
	// -acknow: each ACK alone at once, then the message alone, as rxe
	// acknowledges: two sends per message, none merged.
	for _, c := range []struct {
		name string
		oneP bool
	}{{"ACK at once", false}, {"ACK at once, one P", true}} {
		t.Run(c.name, func(t *testing.T) {
			if c.oneP {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			}
			testLatFloor(t, "127.0.0.1", params{n: 500, size: 64, mtu: 1024, window: 1, lat: true, rx: "ring", gso: true, ackNow: true})
		})
	}
}

// TestLatFloorXDP: the same round trips between two namespaces over a
// veth pair, each side busy-polling an AF_XDP socket's ring (-rx xdp), as
// goroce's rx-path xdp reads: every round trip answered and ACKed, every
// CRC-32 good.
func TestLatFloorXDP(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	in := func(h *nettest.Host) func(func() error) error { return h.Do }
	testLatFloorIn(t, hb.IPv4.String(), params{n: 500, size: 64, mtu: 1024, window: 1, lat: true, rx: "xdp", gso: true}, in(hb), in(ha))
}

func testLatFloor(t *testing.T, addr string, p params) {
	here := func(f func() error) error { return f() }
	testLatFloorIn(t, addr, p, here, here)
}

// testLatFloorIn runs the server with srvIn and the client with cliIn (in
// a namespace each, or here) and checks the client's report.
func testLatFloorIn(t *testing.T, addr string, p params, srvIn, cliIn func(func() error) error) {
	ctl := testenv.FreeTCPPort(t)
	data := netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(testenv.FreeTCPPort(t)))
	done := make(chan error, 1)
	go func() { done <- srvIn(func() error { return serve(data, ctl) }) }()
	var out bytes.Buffer
	var err error
	for range 50 {
		err = cliIn(func() error { return client(p, data, addr, ctl, &out) })
		if err == nil || !isRefused(err) {
			break
		}
		out.Reset()
		sleep()
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	t.Logf("%s", out.String())
	s := out.String()
	lat := strings.Contains(s, " t_typical[usec] ")
	row := regexp.MustCompile(`(?m)^ 64\s+500\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s`).FindStringSubmatch(s)
	pp := regexp.MustCompile(`(?m)^500 iters in [0-9.]+ seconds = ([0-9.]+) usec/iter$`).FindStringSubmatch(s)
	if !lat || row == nil || pp == nil {
		t.Fatalf("want perftest's latency table (64 bytes, 500 iterations) and ibv_rc_pingpong's iters line:\n%s", s)
	}
	typical, _ := strconv.ParseFloat(row[3], 64)
	avg, _ := strconv.ParseFloat(row[4], 64)
	perIter, _ := strconv.ParseFloat(pp[1], 64)
	// A round trip is two of perftest's (halved) latencies; the average
	// leaves out the two slowest, which the whole run's time keeps.
	if typical <= 0 || avg <= 0 || perIter < 1.9*avg || perIter > 10*avg {
		t.Errorf("t_typical %g, t_avg %g µs against %g µs per iteration: want each iteration two latencies", typical, avg, perIter)
	}
	// Every message but the client's first carries the ACK of the one
	// before it, in one GSO message with -gso.
	gso := "0 messages of the client's, 0 of the server's"
	if p.gso && !p.ackNow {
		gso = "499 messages of the client's, 500 of the server's"
	}
	if !strings.Contains(s, "sent as one GSO message with their ACK: "+gso+"\n") {
		t.Errorf("want %s sent as one GSO message with their ACK:\n%s", gso, s)
	}
	// With one P every send is a raw system call, as goroce's link makes
	// it; with more, or -entersyscall, none.
	raw := "0 of the client's, 0 of the server's"
	if runtime.GOMAXPROCS(0) == 1 && !p.entersyscall {
		raw = "500 of the client's, 500 of the server's"
		if p.ackNow {
			raw = "1000 of the client's, 1000 of the server's" // an ACK's and a message's
		}
	}
	if !strings.Contains(s, "sendmmsg calls made raw (no entersyscall): "+raw+"\n") {
		t.Errorf("want sendmmsg calls made raw: %s:\n%s", raw, s)
	}
	if !strings.Contains(s, "500 round trips of 64 bytes; the server answered 500; 500 ACKs received; 0 datagrams with a bad CRC-32") {
		t.Errorf("want every round trip answered and ACKed:\n%s", s)
	}
}

// TestCPUProfile: -cpuprofile writes a profile pprof reads when the run
// ends, and when a signal stops the server (which serves until one does),
// which then exits as the signal would have (128+n).
func TestCPUProfile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "udpfloor")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prof := filepath.Join(t.TempDir(), "server.prof")
	srv := exec.Command(bin, "-s", "-a", "127.0.0.1", "-P", strconv.Itoa(testenv.FreeTCPPort(t)), "-cpuprofile", prof)
	var stderr bytes.Buffer
	srv.Stderr = &stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The profile's file exists once the server has started it.
	for i := 0; ; i++ {
		if _, err := os.Stat(prof); err == nil {
			break
		}
		if i == 100 {
			srv.Process.Kill()
			t.Fatalf("no %s after 10 s: %s", prof, stderr.String())
		}
		sleep()
	}
	srv.Process.Signal(syscall.SIGTERM)
	err := srv.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("the server stopped by SIGTERM: %v, want exit status 143; stderr: %s", err, stderr.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	// A CPU profile is a gzipped protocol buffer (runtime/pprof).
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err == nil {
		var raw []byte
		if raw, err = io.ReadAll(zr); err == nil && len(raw) == 0 {
			err = errors.New("empty")
		}
	}
	if err != nil {
		t.Errorf("the server's profile (%d bytes): %v", len(b), err)
	}
	if out, err := exec.Command(bin, "-s", "-a", "127.0.0.1", "-cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir")).CombinedOutput(); err == nil || !strings.Contains(string(out), "-cpuprofile: ") {
		t.Errorf("a profile that cannot be written: %v, want an error naming -cpuprofile:\n%s", err, out)
	}
}
