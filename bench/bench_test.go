package bench_test

// Run, as root:
//
//	go test -run '^$' -bench . ./bench/
//	go test -run '^$' -bench . -count 3 ./bench/   # spread across runs
//
// Every benchmark runs between two network namespaces joined by a veth pair
// with MTU 9000 (internal/nettest), over IPv4. The raw-UDP baselines come
// first in the file, so `-bench .` measures them before the goroce
// benchmarks, which report their ratio to the baseline of the same run
// (x-udp-best for throughput, x-udp-busypoll for the round trip); when
// -bench filtered the baseline out, the goroce benchmark measures it itself
// with testing.Benchmark. After the run, TestMain prints a summary table:
// the median of the -count runs of each benchmark, their spread, the ratios
// and the goals of the "Real links" issue.
//
// Metrics beside ns/op and MB/s: cpu-ns/op is the process's CPU time (user
// + system, all threads) per operation — on a 2-core machine the CPU a
// mode spends matters as much as its speed; pkts/op counts goroce packets
// (both directions, ACKs included); retrans/op should be 0 (a retransmission
// means a drop); lost% (baselines) should be 0.

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/wire"
)

const (
	msgSize = 64 << 10 // bytes of payload per throughput operation
	pmtu    = 4096     // path MTU: payload bytes per packet
	perMsg  = msgSize / pmtu
	// dgramLen is a baseline datagram: the UDP payload of a RoCE v2 RDMA
	// WRITE MIDDLE at path MTU 4096 (BTH, 4096 bytes, ICRC), so the baselines
	// put the same packets on the wire as goroce does.
	dgramLen = wire.BTHLen + pmtu + wire.ICRCLen
	window   = 16 // 64 KiB operations in flight (baselines and goroce alike)
	vethMTU  = 9000
	rttSize  = 64 // bytes per ping and per pong
)

func TestMain(m *testing.M) {
	code := m.Run()
	printSummary(os.Stdout)
	os.Exit(code)
}

// newVeth makes the two namespaces for a benchmark (root only).
func newVeth(b *testing.B) (a, c *nettest.Host) {
	b.Helper()
	testenv.Root(b)
	return nettest.VethPair(b, nettest.Options{MTU: vethMTU})
}

// cpuTime is the process's CPU time, user and system, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// result is one benchmark ramp's final measurement.
type result struct {
	n     int
	ns    float64 // per op
	mbps  float64 // 1e6 bytes/s of payload, as testing reports MB/s; 0 if none
	cpuNs float64 // CPU per op
}

// results collects the final measurement of every ramp of every benchmark,
// for the ratios and the summary. A ramp starts at b.N == 1 (testing always
// runs N=1 first) and its later, longer runs replace its entry.
var results struct {
	mu    sync.Mutex
	runs  map[string][]result
	order []string
}

// record stores the measurement of the timed loop that just ended.
func record(b *testing.B, bytesPerOp int64, cpu time.Duration) result {
	el := b.Elapsed()
	r := result{n: b.N, ns: float64(el.Nanoseconds()) / float64(b.N), cpuNs: float64(cpu.Nanoseconds()) / float64(b.N)}
	if bytesPerOp > 0 && el > 0 {
		r.mbps = float64(bytesPerOp) * float64(b.N) / el.Seconds() / 1e6
	}
	b.ReportMetric(r.cpuNs, "cpu-ns/op")
	results.mu.Lock()
	defer results.mu.Unlock()
	if results.runs == nil {
		results.runs = make(map[string][]result)
	}
	name := b.Name()
	rs := results.runs[name]
	if rs == nil {
		results.order = append(results.order, name)
	}
	if b.N == 1 || len(rs) == 0 {
		rs = append(rs, r)
	} else {
		rs[len(rs)-1] = r
	}
	results.runs[name] = rs
	return r
}

// median returns the median of f over name's ramps and their min and max.
func median(name string, f func(result) float64) (med, lo, hi float64, n int) {
	results.mu.Lock()
	rs := results.runs[name]
	results.mu.Unlock()
	if len(rs) == 0 {
		return 0, 0, 0, 0
	}
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return m, v[0], v[len(v)-1], len(v)
}

func mbps(r result) float64 { return r.mbps }
func nsop(r result) float64 { return r.ns }

// Baseline names, as b.Name() spells them.
const (
	nameUDPThroughput = "BenchmarkUDPThroughput"
	nameUDPRTT        = "BenchmarkUDPRoundTrip64"
	rttBusyPoll       = nameUDPRTT + "/busypoll"
)

var udpModes = []string{"plain", "sendmmsg", "gso", "gso+gro"}

// floorMode is BenchmarkUDPThroughput's raw UDP with RoCE's unavoidable
// per-byte work (an ICRC and a copy on each side): not a candidate for the
// best mode, the floor under RCWrite64K.
const floorMode = "gso+gro+roce"

// floorImmMode is floorMode with the datagrams of each 64 KiB grouped as
// goroce's link must group an RDMA WRITE WITH IMMEDIATE's 16 packets: three
// GSO messages (the FIRST alone, the 14 MIDDLEs, the LAST alone, since its
// ImmDt makes it 4 bytes longer than a MIDDLE and a GSO message's segments
// are all the same size but the last, which may only be shorter) where an
// RDMA WRITE's take two (the FIRST, then the MIDDLEs and the LAST). The
// datagrams and bytes are floorMode's; only the grouping differs, so
// floorImmMode ÷ floorMode is what a third message per 64 KiB costs the
// kernel alone (BenchmarkRsocket's UDPFloorImm64K).
const floorImmMode = "gso+gro+roce+imm"

// isFloor reports whether mode is one of the floors (RoCE's work by hand).
func isFloor(mode string) bool { return mode == floorMode || mode == floorImmMode }

// bestUDP returns the fastest raw-UDP throughput mode measured so far and its
// median MB/s; if none ran in this process (-bench filtered them out), it
// measures them now between ha and hb.
func bestUDP(b *testing.B, ha, hb *nettest.Host) (string, float64) {
	best, v := bestUDPSoFar()
	if v > 0 {
		return best, v
	}
	b.Logf("no raw-UDP throughput baseline in this run: measuring it now")
	for i, mode := range udpModes {
		u := openUDPThroughput(b, ha, hb, mode, basePort+100+i)
		r, err := measure(func(n int) (time.Duration, error) {
			var t0 time.Time
			_, err := u.run(n, func() { t0 = time.Now() })
			return time.Since(t0), err
		})
		u.close()
		if err != nil {
			b.Fatal(err)
		}
		r.mbps = msgSize / r.ns * 1e3
		addResult(nameUDPThroughput+"/"+mode, r)
	}
	return bestUDPSoFar()
}

// measure runs f with growing n until a run takes 300 ms or more, as the
// testing package ramps b.N, and returns the last run's result.
func measure(f func(n int) (time.Duration, error)) (result, error) {
	for n := 16; ; n *= 4 {
		cpu0 := cpuTime()
		d, err := f(n)
		if err != nil {
			return result{}, err
		}
		if d >= 300*time.Millisecond || n >= 1<<24 {
			return result{n: n, ns: float64(d.Nanoseconds()) / float64(n), cpuNs: float64((cpuTime() - cpu0).Nanoseconds()) / float64(n)}, nil
		}
	}
}

func bestUDPSoFar() (string, float64) {
	best, bv := "", 0.0
	for _, mode := range udpModes {
		name := nameUDPThroughput + "/" + mode
		if v, _, _, _ := median(name, mbps); v > bv {
			best, bv = name, v
		}
	}
	return best, bv
}

// busyPollRTT returns the busy-polled UDP round trip's median ns, measuring
// it now between ha and hb if the run did not.
func busyPollRTT(b *testing.B, ha, hb *nettest.Host) float64 {
	if v, _, _, _ := median(rttBusyPoll, nsop); v > 0 {
		return v
	}
	b.Logf("no busy-polled UDP round trip in this run: measuring it now")
	u := openUDPRTT(b, ha, hb, "busypoll")
	r, err := measure(func(n int) (time.Duration, error) {
		var t0 time.Time
		err := u.run(n, func() { t0 = time.Now() })
		return time.Since(t0), err
	})
	u.close()
	if err != nil {
		b.Fatal(err)
	}
	addResult(rttBusyPoll, r)
	return r.ns
}

func addResult(name string, r result) {
	results.mu.Lock()
	defer results.mu.Unlock()
	if results.runs == nil {
		results.runs = make(map[string][]result)
	}
	if results.runs[name] == nil {
		results.order = append(results.order, name)
	}
	results.runs[name] = append(results.runs[name], r)
}

// printSummary writes the table of medians, spreads and ratios.
func printSummary(w *os.File) {
	results.mu.Lock()
	names := slices.Clone(results.order)
	results.mu.Unlock()
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(w, "\ngoroce vs raw UDP: veth MTU %d, path MTU %d, IPv4; median of the runs [min–max]\n", vethMTU, pmtu)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tmedian\tspread\tcpu/op\tratio\tgoal\t")
	bestName, bestV := bestUDPSoFar()
	rtt, _, _, _ := median(rttBusyPoll, nsop)
	rttName := "UDPRoundTrip64/busypoll"
	if rtt > 0 {
		// A busy-poll whose spinning threads lost their vCPUs is no
		// baseline: then compare with the fastest UDP mode (kinder to goroce).
		for _, mode := range []string{"blocking", "netpoll"} {
			if v, _, _, _ := median(nameUDPRTT+"/"+mode, nsop); v > 0 && v < rtt {
				fmt.Fprintf(w, "busy-polled UDP (%.1f µs) was slower than UDPRoundTrip64/%s (%.1f µs) in this run: round trips compared with the latter\n", rtt/1e3, mode, v/1e3)
				rtt, rttName = v, "UDPRoundTrip64/"+mode
			}
		}
	}
	for _, name := range names {
		short := strings.TrimPrefix(name, "Benchmark")
		thru := strings.HasPrefix(name, nameUDPThroughput) || strings.Contains(name, "64K") // BenchmarkRsocket's too
		var val, spread, ratio, goal string
		cpu, _, _, _ := median(name, func(r result) float64 { return r.cpuNs })
		if thru {
			m, lo, hi, n := median(name, mbps)
			val, spread = fmt.Sprintf("%.0f MB/s", m), fmt.Sprintf("%.0f–%.0f (n=%d)", lo, hi, n)
			if bestV > 0 {
				ratio = fmt.Sprintf("%.2f× %s", m/bestV, strings.TrimPrefix(bestName, "Benchmark"))
			}
			if strings.HasPrefix(name, "BenchmarkRCWrite64K") {
				goal = "≥ 0.75×"
				if bestV > 0 && m/bestV >= 0.75 {
					goal += " met"
				} else {
					goal += " NOT met"
				}
			}
		} else {
			m, lo, hi, n := median(name, nsop)
			val, spread = fmt.Sprintf("%.1f µs", m/1e3), fmt.Sprintf("%.1f–%.1f (n=%d)", lo/1e3, hi/1e3, n)
			if rtt > 0 {
				ratio = fmt.Sprintf("%.2f× %s", m/rtt, rttName)
			}
			if strings.HasPrefix(name, "BenchmarkRCSendRecvRTT64") {
				goal = "≤ 1.25×"
				if rtt > 0 && m/rtt <= 1.25 {
					goal += " met"
				} else {
					goal += " NOT met"
				}
			}
		}
		cpus := ""
		if cpu > 0 {
			cpus = fmt.Sprintf("%.1f µs", cpu/1e3)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", short, val, spread, cpus, ratio, goal)
	}
	tw.Flush()
}
