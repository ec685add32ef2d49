package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sample is go test -bench output of the kind bench/run.sh collects: two
// runs of each benchmark (medians of two are their mean).
const sample = `commit: abc1234
go: go1.26.8 linux/amd64
go: downloading golang.org/x/sys v0.50.0
goos: linux
goarch: amd64
pkg: github.com/goroce/goroce/bench
cpu: AMD EPYC
BenchmarkUDPThroughput/gso+gro-2    	   50000	     20000 ns/op	3000.00 MB/s	     21000 cpu-ns/op	         0 lost%
BenchmarkUDPThroughput/gso+gro-2    	   50000	     20000 ns/op	4000.00 MB/s	     23000 cpu-ns/op	         0 lost%
BenchmarkUDPThroughput/gso+gro+roce-2    	   50000	     30000 ns/op	2100.00 MB/s	     45000 cpu-ns/op	         0 lost%
BenchmarkUDPRoundTrip64/busypoll-2  	  100000	      6000 ns/op	     12000 cpu-ns/op
BenchmarkUDPRoundTrip64/busypoll-2  	  100000	      8000 ns/op	     12000 cpu-ns/op
BenchmarkUDPRoundTrip64/busypoll+ack-2  	  100000	      4500 ns/op	     22000 cpu-ns/op
BenchmarkUDPRoundTrip64/netpoll+ack-2  	  100000	      6000 ns/op	     20000 cpu-ns/op
BenchmarkRCWrite64K/privileged-2    	   10000	     60000 ns/op	1050.00 MB/s	     90000 cpu-ns/op	17.0 pkts/op	0 retrans/op	0.30 x-udp-best	       0 B/op	       0 allocs/op
BenchmarkRCWrite64K/privileged-2    	   10000	     60000 ns/op	3150.00 MB/s	     90000 cpu-ns/op	17.0 pkts/op	0 retrans/op	0.30 x-udp-best	       0 B/op	       0 allocs/op
BenchmarkRCSendRecvRTT64/unprivileged/wait-2 	   20000	      8000 ns/op	     50000 cpu-ns/op	4.0 pkts/op	0 B/op	0 allocs/op
BenchmarkRCSendRecvRTT64/unprivileged/wait-2 	   20000	     10000 ns/op	     50000 cpu-ns/op	4.0 pkts/op	0 B/op	0 allocs/op
BenchmarkRCSendRecvRTT64/unprivileged/cqpoll-2 	   20000	     6000 ns/op	     30000 cpu-ns/op	4.0 pkts/op	0 B/op	0 allocs/op
BenchmarkRCSendRecvRTT64/unprivileged/busypoll-2 	   20000	     7000 ns/op	     30000 cpu-ns/op	4.0 pkts/op	0 B/op	0 allocs/op
BenchmarkReadFairness-2 	       3	 900000000 ns/op	         0.62 fair-ratio	     20000 base-ops/s	     12400 read-ops/s	       300 read-MB/s
BenchmarkReadFairness-2 	       3	 900000000 ns/op	         0.40 fair-ratio	     20000 base-ops/s	      8000 read-ops/s	       280 read-MB/s
BenchmarkIdleQPs/wr16-2             	      75	  21189278 ns/op	      6409 connected-B/QP	         0 goroutines/QP	      6508 heap-B/QP	     13016 heap-B/pair	      6511 inuse-B/QP	     21189 ns/pair
BenchmarkIdleQPs/wr1024-2           	       3	 327901791 ns/op	    328725 connected-B/QP	         0 goroutines/QP	    328891 heap-B/QP	    657782 heap-B/pair	    328907 inuse-B/QP	    327902 ns/pair
BenchmarkCMConnect-2                	    4286	    253892 ns/op	      3939 connects/s	    255992 cpu-ns/op
--- BENCH: BenchmarkX
    x_test.go:1: note: ignored
PASS
ok  	github.com/goroce/goroce/bench	95.1s
`

func TestRender(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	render(&b, res)
	out := b.String()
	for _, want := range []string{
		"- commit: abc1234",
		"- go: go1.26.8 linux/amd64",
		"- cpu: AMD EPYC",
		"| UDPThroughput/gso+gro | 3500 [3000–4000] | 22 µs | 1 (baseline) |  |  |",
		"| UDPThroughput/gso+gro+roce | 2100 | 45 µs | 0.60 | 1 (floor) |  |",
		// Issue 15's goal for the WRITE: against the floor.
		"| RCWrite64K/privileged | 2100 [1050–3150] | 90 µs | 0.60 | 1.00 | ≥ 0.90× floor: met |",
		"| UDPRoundTrip64/busypoll | 7.0 [6.0–8.0] | 12 µs | 1 (baseline) |  |  |",
		"| UDPRoundTrip64/busypoll+ack | 4.5 | 22 µs | 0.6 | 1 (floor) |  |",
		"| UDPRoundTrip64/netpoll+ack | 6.0 | 20 µs | 0.9 | 1 (floor) |  |",
		// The wait rows against the blocking floor, cqpoll against the
		// busy-polled one, each with issue 15's goal; busypoll keeps
		// issue 6's.
		"| RCSendRecvRTT64/unprivileged/wait | 9.0 [8.0–10.0] | 50 µs | 1.3 | 1.50 | ≤ 2.00× floor: met |",
		"| RCSendRecvRTT64/unprivileged/cqpoll | 6.0 | 30 µs | 0.9 | 1.33 | ≤ 1.50× floor: met |",
		"| RCSendRecvRTT64/unprivileged/busypoll | 7.0 | 30 µs | 1.0 | 1.56 | ≤ 1.25: met |",
		"| ReadFairness | 0.510 [0.400–0.620] | 20000 ops/s before; 10200 ops/s during; the READ at 290 MB/s | ≥ 0.50: met |",
		"| IdleQPs/wr16: 1,000 connected RC QP pairs, idle | 6.4 KiB of heap per QP end |",
		"0.00 goroutines per QP",
		"≤ 64 KiB: met |",
		"| IdleQPs/wr1024: 1,000 connected RC QP pairs, idle | 321.2 KiB of heap per QP end |",
		"| CMConnect: RDMA CM connect, accept, disconnect, one after another | 3939 connects/s | 0.25 ms per cycle; 256 µs CPU per cycle | ≥ 500/s: met |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "goos") || strings.Contains(out, "BENCH") || strings.Contains(out, "downloading") {
		t.Errorf("go test's goos, a BENCH log line or the go command's download progress in the table:\n%s", out)
	}
	if ok, want := strings.Count(out, "| ≤ 64 KiB: **not met** |"), 1; ok != want {
		t.Errorf("%d rows not meeting the memory goal, want %d:\n%s", ok, want, out)
	}
}

// TestCollapsedBusyPoll: a busy-polled baseline slower than blocking UDP is
// replaced by the fastest mode, and the table says so.
func TestCollapsedBusyPoll(t *testing.T) {
	in := `BenchmarkUDPRoundTrip64/blocking-2 	1000	13000 ns/op
BenchmarkUDPRoundTrip64/busypoll-2 	1000	360000 ns/op
BenchmarkRCSendRecvRTT64/privileged/wait-2 	1000	65000 ns/op
`
	res, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	render(&b, res)
	out := b.String()
	for _, want := range []string{
		"Busy-polled UDP collapsed in this run",
		"| benchmark | µs | CPU per op | × UDPRoundTrip64/blocking | × floor | goal |",
		"| RCSendRecvRTT64/privileged/wait | 65.0 |  | 5.0 |  | ≤ 2.00× floor: no floor in this run |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}

func TestUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "B.md")
	doc := "# B\n\nbefore\n" + beginMarker + "\nold table\n" + endMarker + "\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := update(path, []byte("new table\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := "# B\n\nbefore\n" + beginMarker + "\nnew table\n" + endMarker + "\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := update(path, []byte("x")); err == nil {
		t.Error("update of a file without markers succeeded")
	}
}
