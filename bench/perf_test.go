package bench_test

// `roce perf write` — the tool users run, as two processes — beside the
// engine's own benchmark on the same devices and veth, in alternating
// rounds (issue 15: the tool at ≥ 0.9× the engine).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// perfIters is -n of every roce perf round and the messages of every
// engine round: ib_write_bw's default.
const perfIters = 5000

// BenchmarkPerfWrite64K: each op is one paired round on one veth. In one
// half, `roce perf write -s 65536 -n 5000` (ib_write_bw: 128 WRs in
// flight, a CQE every 100, the CQ busy-polled), built from this tree, runs
// as server and client, two processes, one in each namespace (`ip netns
// exec`), on devices made by `roce link add`; its figure is the client's
// "BW average" (perftest's MiB/s, turned into MB/s). In the other half
// this process opens the same two devices (host.Open, the privileged link
// the CLI gets as root) and runs RCWrite64K's loop (16 WRs in flight,
// every one signaled, PollWait) for the same 5000 messages at the same
// path MTU: the engine's own figure. A third part runs the same loop
// busy-polling the CQ as perftest does (spinPoll), to tell the polling
// apart from everything else two processes do. The round's order flips
// from round to round. x-engine is the median over the rounds of perf's
// MB/s over the engine's of the same round (the goal is ≥ 0.9),
// x-engine-spin the same over the busy-polling engine's; every round's
// figures are logged. cpu-ns/op is CPU per 64 KiB: perf's is both processes'
// (user + system, from start to exit, the TCP exchange and setup
// included), engine-cpu-ns/op this process's during the engine's loop.
//
// veth9000: veth MTU 9000, path MTU 4096; veth1500: MTU 1500, path MTU
// 1024 (the port's active MTU, which both halves use). Run 5 rounds with
//
//	go test -run '^$' -bench PerfWrite64K -benchtime 5x ./bench/
//
// (the first run, b.N = 1, is one more round). GOROCE_BENCH_ROCE=PATH runs
// that roce binary instead of building this tree's.
func BenchmarkPerfWrite64K(b *testing.B) {
	testenv.Root(b)
	_, err := exec.LookPath("ip")
	testenv.Require(b, err == nil, "iproute2's ip (to run roce in the namespaces)")
	roceBin := os.Getenv("GOROCE_BENCH_ROCE") // another build's, for a before and after
	if roceBin == "" {
		roceBin = filepath.Join(b.TempDir(), "roce")
		build := exec.Command("go", "build", "-o", roceBin, "./cmd/roce")
		build.Dir = testenv.RepoRoot(b)
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("go build ./cmd/roce: %v\n%s", err, out)
		}
	}
	for _, c := range []struct {
		name    string
		vethMTU int
		mtu     verbs.MTU
	}{{"veth9000", 9000, verbs.MTU4096}, {"veth1500", 1500, verbs.MTU1024}} {
		b.Run(c.name, func(b *testing.B) {
			ha, hb := nettest.VethPair(b, nettest.Options{MTU: c.vethMTU})
			pr := &perfRounds{roce: roceBin, dir: b.TempDir(), hosts: [2]*nettest.Host{ha, hb}, mtu: c.mtu}
			for i, h := range pr.hosts {
				pr.dev[i] = fmt.Sprintf("rxe%d", i)
				if out, err := pr.roceCmd(context.Background(), h, "link", "add", pr.dev[i], "type", "rxe", "netdev", h.Ifname, "roce-versions", "v2").CombinedOutput(); err != nil {
					b.Fatalf("roce link add %s: %v\n%s", pr.dev[i], err, out)
				}
			}
			var ratios, spinRatios, perfMB, engMB, spinMB, perfCPU, engCPU []float64
			b.ResetTimer()
			for round := range b.N {
				var p, e, s perfFigure
				if round%2 == 0 {
					p, e, s = pr.perf(b), pr.engine(b, false), pr.engine(b, true)
				} else {
					s, e, p = pr.engine(b, true), pr.engine(b, false), pr.perf(b)
				}
				ratios, spinRatios = append(ratios, p.mbps/e.mbps), append(spinRatios, p.mbps/s.mbps)
				perfMB, engMB, spinMB = append(perfMB, p.mbps), append(engMB, e.mbps), append(spinMB, s.mbps)
				perfCPU, engCPU = append(perfCPU, p.cpuNs), append(engCPU, e.cpuNs)
				b.Logf("round %d (%s first): roce perf %.0f MB/s, %.0f µs CPU per op; engine %.0f MB/s, %.0f µs CPU per op; engine busy-polling %.0f MB/s, %.0f µs CPU per op; perf/engine %.2f, perf/busy-polling engine %.2f",
					round+1, map[bool]string{true: "perf", false: "engine"}[round%2 == 0], p.mbps, p.cpuNs/1e3, e.mbps, e.cpuNs/1e3, s.mbps, s.cpuNs/1e3, p.mbps/e.mbps, p.mbps/s.mbps)
			}
			b.StopTimer()
			med := func(v []float64) float64 {
				v = append([]float64(nil), v...)
				sort.Float64s(v)
				if len(v)%2 == 0 {
					return (v[len(v)/2-1] + v[len(v)/2]) / 2
				}
				return v[len(v)/2]
			}
			b.ReportMetric(med(ratios), "x-engine")
			b.ReportMetric(med(perfMB), "perf-MB/s")
			b.ReportMetric(med(engMB), "engine-MB/s")
			b.ReportMetric(med(perfCPU), "cpu-ns/op")
			b.ReportMetric(med(engCPU), "engine-cpu-ns/op")
			b.ReportMetric(med(spinRatios), "x-engine-spin")
			b.ReportMetric(med(spinMB), "engine-spin-MB/s")
			b.ReportMetric(0, "ns/op") // a round's wall time says nothing
		})
	}
}

// perfRounds is one veth's paired rounds: devices rxe0 (in hosts[0]'s
// namespace, the server's) and rxe1 (the client's) in registry dir.
type perfRounds struct {
	roce  string
	dir   string
	hosts [2]*nettest.Host
	dev   [2]string
	mtu   verbs.MTU
	port  int // the exchange's TCP port, a new one per round
}

type perfFigure struct {
	mbps  float64 // 1e6 bytes of payload per second
	cpuNs float64 // CPU per message
}

// roceCmd is roce ARGS... in h's namespace, on the rounds' registry.
func (pr *perfRounds) roceCmd(ctx context.Context, h *nettest.Host, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NSName, pr.roce, "--rundir", pr.dir}, args...)...)
}

// bwLine is perftest's result row: #bytes #iterations peak average rate.
var bwLine = regexp.MustCompile(`(?m)^\s*65536\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)

// perf runs one roce perf write, server and client.
func (pr *perfRounds) perf(b *testing.B) perfFigure {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pr.port++
	port := strconv.Itoa(18515 + pr.port)
	args := []string{"perf", "write", "-s", "65536", "-n", strconv.Itoa(perfIters), "-p", port}
	var sout, cout bytes.Buffer
	server := pr.roceCmd(ctx, pr.hosts[0], append(args, "-d", pr.dev[0])...)
	server.Stdout, server.Stderr = &sout, &sout
	if err := server.Start(); err != nil {
		b.Fatal(err)
	}
	serverDone := make(chan error, 1)
	go func() { serverDone <- server.Wait() }()
	// The client may dial only once the server listens (a dial to test
	// whether it does would be taken for the client): its namespace's
	// /proc/PID/net/tcp says.
	if !testenv.Poll(30*time.Second, func() bool {
		select {
		case err := <-serverDone:
			serverDone <- err
			return true
		default:
		}
		return listening(server.Process.Pid, 18515+pr.port)
	}) {
		b.Fatalf("roce perf server never listened on %s:\n%s", port, sout.String())
	}
	client := pr.roceCmd(ctx, pr.hosts[1], append(args, "-d", pr.dev[1], pr.hosts[0].IPv4.String())...)
	client.Stdout, client.Stderr = &cout, &cout
	cerr := client.Run()
	serr := <-serverDone
	if cerr != nil || serr != nil {
		b.Fatalf("roce perf write: client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, cout.String(), sout.String())
	}
	m := bwLine.FindStringSubmatch(cout.String())
	if m == nil || m[1] != strconv.Itoa(perfIters) {
		b.Fatalf("no result row for 65536 bytes × %d in the client's output:\n%s", perfIters, cout.String())
	}
	avg, _ := strconv.ParseFloat(m[3], 64)
	cpu := procCPU(client.ProcessState) + procCPU(server.ProcessState)
	return perfFigure{mbps: avg * (1 << 20) / 1e6, cpuNs: float64(cpu.Nanoseconds()) / perfIters}
}

func procCPU(ps *os.ProcessState) time.Duration {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return 0
}

// listening reports whether pid's network namespace has a TCP socket
// listening on port (/proc/PID/net/tcp and tcp6: local address, state 0A;
// Go listens on IPv6 for both families).
func listening(pid, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// engine opens the two devices in this process and runs RCWrite64K's
// loop for perfIters messages, then closes them (so that the next perf
// round's processes can open them).
func (pr *perfRounds) engine(b *testing.B, spin bool) perfFigure {
	b.Helper()
	var devs [2]*host.Device
	defer func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}()
	p := &rocePair{}
	for i := range 2 {
		d, err := host.Open(pr.dev[i], host.Options{RunDir: pr.dir})
		if err != nil {
			b.Fatal(err)
		}
		devs[i] = d
		p.setSide(b, i, d)
		if p.qp[i], err = p.pd[i].CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.scq[i], RecvCQ: p.rcq[i],
			Cap: verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			b.Fatal(err)
		}
		p.ip[i] = v4GID(pr.hosts[i])
		p.sgid[i] = gidIndex(b, d, p.ip[i])
	}
	for i := range 2 {
		if err := verbstest.ConnectQP(p.qp[i], p.qp[1-i].Num(), p.ip[1-i], uint8(p.sgid[i]), verbstest.Options{MTU: pr.mtu}); err != nil {
			b.Fatal(err)
		}
	}
	w := newWriteLoop(b, p)
	w.spin = spin
	cpu0 := cpuTime()
	t0 := time.Now()
	if err := w.run(perfIters); err != nil {
		b.Fatal(err)
	}
	el := time.Since(t0)
	cpu := cpuTime() - cpu0
	return perfFigure{mbps: float64(msgSize) * perfIters / el.Seconds() / 1e6, cpuNs: float64(cpu.Nanoseconds()) / perfIters}
}
