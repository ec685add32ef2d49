package bench_test

// The scale figures of issue 6, over the same veth as the rest: how much
// heap an idle connected RC QP costs (goal ≤ 64 KiB per QP) and how many
// RDMA CM connections a second one pair of CMs makes (goal ≥ 500/s).

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// idleHeap, if set, is where BenchmarkIdleQPs writes a heap profile while
// its QPs are idle (the last op's; with -memprofilerate 1 every allocation
// is in it):
//
//	go test -run '^$' -bench IdleQPs/wr1024 -benchtime 1x -memprofilerate 1 -o /tmp/bench.test ./bench/ -args -idleheap /tmp/idle.prof
//	go tool pprof -sample_index=inuse_space -top /tmp/bench.test /tmp/idle.prof
var idleHeap = flag.String("idleheap", "", "BenchmarkIdleQPs: write a heap profile to this file while the QPs are idle")

// idleQPs is how many connected RC QP pairs BenchmarkIdleQPs makes.
const idleQPs = 1000

// idleCap is a QP's size in BenchmarkIdleQPs/wr16 and BenchmarkCMConnect:
// rdmacm's tests' and a small application's. bigCap, in
// BenchmarkIdleQPs/wr1024, is verbstest's default (and about what
// ib_write_bw asks for: tx depth 128, rx depth 512, doubled).
var (
	idleCap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}
	bigCap  = verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
)

// heapNow returns the live heap after two full collections.
func heapNow() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// BenchmarkIdleQPs: 1,000 RC QP pairs between two host devices on the
// veth (privileged link), one op being all of them: create them (sharing
// each device's send and receive CQs and PD), connect each pair with
// modify_qp (INIT, RTR, RTS at path MTU 4096), post one receive on every
// QP, send one 64-byte SEND on each pair A→B and wait for every completion,
// then leave them idle and weigh the heap; destroy them all.
//
// Both ends live in this process, so the heap delta covers 2,000 QPs:
// heap-B/QP is HeapAlloc's growth (after runtime.GC) over 2,000, i.e. per
// QP end, the figure the goal of 64 KiB is about; heap-B/pair is per
// connected pair (both ends); inuse-B/QP is HeapInuse's growth (spans,
// including their free slots) per QP end; connected-B/QP is HeapAlloc's
// growth per QP end right after connecting, before the one message and
// the receives; goroutines/QP is the growth in goroutines per QP end.
// ns/op is the whole cycle (create, connect, one message, destroy) for all
// 1,000 pairs.
//
// wr16: 16 send and 16 receive WRs of 1 SGE per QP (idleCap); wr1024:
// 1,024 of 4 SGEs (bigCap).
func BenchmarkIdleQPs(b *testing.B) {
	ha, hb := newVeth(b)
	b.Run("wr16", func(b *testing.B) { benchIdleQPs(b, ha, hb, idleCap) })
	b.Run("wr1024", func(b *testing.B) { benchIdleQPs(b, ha, hb, bigCap) })
}

func benchIdleQPs(b *testing.B, ha, hb *nettest.Host, qcap verbs.QPCap) {
	p := openDevices(b, ha, hb, "privileged", 0)
	var mr [2]*verbs.MR
	for i := range 2 {
		var err error
		if mr[i], err = p.pd[i].RegMR(make([]byte, 2*rttSize), verbs.AccessLocalWrite); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var heap, pair, inuse, connected, goroutines float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		g0 := runtime.NumGoroutine()
		ms0 := heapNow()
		b.StartTimer()
		var qps [2][]*verbs.QP
		for i := range 2 {
			qps[i] = make([]*verbs.QP, idleQPs)
			for k := range qps[i] {
				qp, err := p.pd[i].CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.scq[i], RecvCQ: p.rcq[i], Cap: qcap})
				if err != nil {
					b.Fatalf("QP %d of %d: %v", k, idleQPs, err)
				}
				qps[i][k] = qp
			}
		}
		for k := range idleQPs {
			for i := range 2 {
				if err := p.connect(qps[i][k], qps[1-i][k].Num(), i); err != nil {
					b.Fatalf("connect pair %d: %v", k, err)
				}
			}
		}
		b.StopTimer()
		msC := heapNow()
		b.StartTimer()
		for i := range 2 {
			for _, qp := range qps[i] {
				if err := qp.PostRecv(verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{mr[i].SGE(rttSize, rttSize)}}); err != nil {
					b.Fatal(err)
				}
			}
		}
		for _, qp := range qps[0] {
			if err := qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr[0].SGE(0, rttSize)}}); err != nil {
				b.Fatal(err)
			}
		}
		wcs := make([]verbs.WC, 256)
		for _, cq := range []*verbs.CQ{p.scq[0], p.rcq[1]} {
			for got := 0; got < idleQPs; {
				n, err := cq.PollWait(ctx, wcs)
				if err != nil {
					b.Fatalf("%d of %d completions: %v", got, idleQPs, err)
				}
				for i := range wcs[:n] {
					if wcs[i].Status != verbs.WCSuccess {
						b.Fatalf("completion %v", &wcs[i])
					}
				}
				got += n
			}
		}
		b.StopTimer()
		ms1 := heapNow()
		g1 := runtime.NumGoroutine()
		if *idleHeap != "" {
			writeHeapProfile(b, *idleHeap)
		}
		if n := len(p.dev[0].QPs()); n < idleQPs {
			b.Fatalf("device A lists %d QPs", n)
		}
		heap += float64(int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc))
		inuse += float64(int64(ms1.HeapInuse) - int64(ms0.HeapInuse))
		connected += float64(int64(msC.HeapAlloc) - int64(ms0.HeapAlloc))
		goroutines += float64(g1 - g0)
		b.StartTimer()
		for i := range 2 {
			for _, qp := range qps[i] {
				if err := qp.Destroy(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.StopTimer()
	ends := float64(b.N) * 2 * idleQPs
	pair = heap / float64(b.N) / idleQPs
	b.ReportMetric(heap/ends, "heap-B/QP")
	b.ReportMetric(pair, "heap-B/pair")
	b.ReportMetric(inuse/ends, "inuse-B/QP")
	b.ReportMetric(connected/ends, "connected-B/QP")
	b.ReportMetric(goroutines/ends, "goroutines/QP")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/idleQPs, "ns/pair")
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCMConnect: RDMA CM connections over the veth, one after
// another: an rdmacm.CM on each host device (privileged link, Linux's CM
// timeouts), B listening, A's Dial (address and route resolution, QP,
// REQ/REP/RTU), B's Accept, then both ends Close (DREQ/DREP, QPs and IDs
// destroyed). One op is one such cycle; connects/s is b.N over the
// elapsed time.
func BenchmarkCMConnect(b *testing.B) {
	ha, hb := newVeth(b)
	p := openDevices(b, ha, hb, "privileged", 0)
	var cms [2]*rdmacm.CM
	for i := range 2 {
		cm := rdmacm.New(rdmacm.Options{})
		if err := cm.AddDevice(p.dev[i].Device); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cm.Close() }) // before the devices close (LIFO)
		cms[i] = cm
	}
	ep := func(i int) rdmacm.Endpoint {
		return rdmacm.Endpoint{PD: p.pd[i],
			QP:    verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.scq[i], RecvCQ: p.rcq[i], Cap: idleCap},
			Param: rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}}
	}
	const port = 7174
	l, err := cms[1].Listen(netip.AddrPortFrom(netip.Addr{}, port), ep(1))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(hb.IPv4, port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cmCycle(ctx, cms[0], l, dst, ep(0)); err != nil { // warm up: neighbours, AHs
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		if err := cmCycle(ctx, cms[0], l, dst, ep(0)); err != nil {
			b.Fatalf("cycle %d: %v", i, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "connects/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if n := len(p.dev[0].QPs()) + len(p.dev[1].QPs()); n > 2+2 { // QP1 on each, and a straggler or two
		b.Logf("%d QPs left on the two devices after the cycles", n)
	}
}

// cmCycle is rdmacm's own test cycle (rdmacm/cycles_test.go): Dial from a
// to l, Accept, Close both ends.
func cmCycle(ctx context.Context, a *rdmacm.CM, l *rdmacm.Listener, dst netip.AddrPort, ep rdmacm.Endpoint) error {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept(actx)
		if err == nil {
			err = c.Close()
		}
		accepted <- err
	}()
	c, err := a.Dial(ctx, dst, ep)
	if err != nil {
		cancel()
		<-accepted
		return fmt.Errorf("dial: %w", err)
	}
	cerr := c.Close()
	if err := <-accepted; err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return cerr
}
