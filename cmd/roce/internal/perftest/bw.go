package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/verbs"
)

// clock is a run's time base; stamps are nanoseconds since base, plus one
// so that zero means "not set" (perftest's cycles arrays start zeroed).
type clock struct{ base time.Time }

func (c clock) now() int64 { return int64(time.Since(c.base)) + 1 }

// window is -D's timeline: a quarter of the duration of warm-up, the
// middle half measured, a quarter to drain (perftest's margin).
type window struct {
	on                      bool
	sampleStart, sampleStop int64
	end                     int64
}

func (p *params) window(c clock, start int64) window {
	if p.Duration == 0 {
		return window{}
	}
	d, m := int64(p.Duration), int64(p.margin)
	return window{on: true, sampleStart: start + m, sampleStop: start + d - m, end: start + d}
}

func (w window) in(t int64) bool { return t >= w.sampleStart && t < w.sampleStop }

// waitCQ polls cq into wcs until it returns a completion, ctx ends or
// the deadline passes (a zero deadline waits for ctx only), as perftest
// waits for completions: by default it busy-polls the CQ, ibv_poll_cq in a
// loop that never sleeps; with -e (UseEvent) it sleeps on the CQ's
// completion event (ibv_req_notify_cq + ibv_get_cq_event: CQ.Wait).
func (p *params) waitCQ(ctx context.Context, cq *verbs.CQ, wcs []verbs.WC, deadline time.Time) (int, error) {
	// An ended run is seen on every call, not only after empty polls: a CQ
	// that always holds a completion (a stream of WRITEs) returns before
	// the busy poll's check, and an interrupted `roce perf write -D 60`
	// went on to the interrupt's 10 s limit (CI run 83). A non-blocking
	// look at Done costs a load.
	select {
	case <-ctx.Done():
		return 0, fmt.Errorf("poll CQ failed: %w", ctx.Err())
	default:
	}
	if p.UseEvent {
		return waitCQEvent(ctx, cq, wcs, deadline)
	}
	y := newYielder(p.Lat)
	defer y.done()
	for spins := 0; ; spins++ {
		n, err := cq.Poll(wcs)
		if n != 0 || err != nil {
			return n, err
		}
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("poll CQ failed: %w", err)
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return 0, nil // the deadline passed: let the caller look at the clock
			}
		}
		y.spin()
	}
}

// spinYield is how many empty polls a busy-polling loop makes between
// yields of its P while the process has a P no busy poll holds.
const spinYield = 1024

// gosched is runtime.Gosched; tests count the calls.
var gosched = runtime.Gosched

// spinners counts the goroutines of this process inside a busy-polling
// loop (waitCQ, watch), whichever run they belong to: the Ps they hold are
// the process's (a test runs server and client, and runs in parallel, in
// one process).
var spinners atomic.Int32

// yielder decides when a busy-polling loop yields its P. The poll never
// blocks, but it must yield now and then: the device's own goroutines
// (its receive goroutine when the link is not driven by the poller, a
// fabric's in tests) and the other busy polls run on the same GOMAXPROCS
// Ps as the loop, and a loop that never yields leaves them only the
// scheduler's 10 ms preemption.
//
// While the busy polls hold every P of several (as many polls as Ps:
// -q 2 on two, both sides of a test in one process), the loop yields after
// each empty poll: the others can run no other way, and with no P idle a
// yield is cheap. While a P is left over, the others run there, and the
// loop yields only every spinYield polls: runtime.Gosched puts the
// goroutine on the global run queue and wakes an idle P's thread to look
// for work (the runtime's goschedImpl calls wakep), so a loop that
// yielded after every poll kept a second thread waking, spinning and
// stealing the poller back — two CPUs busy for one poller, and on a
// two-vCPU host the second was the one the peer and the kernel's packet
// processing needed (roce perf write between two namespaces, issue 15;
// BENCHMARKS.md).
//
// The latency tests keep yielding after every poll: there the thread the
// yield keeps awake on the other P is the one that finds the next packet
// soonest, and t_typical of `roce perf send --lat -s 64` between two
// namespaces was 14.7–17.2 µs yielding every poll and 18.7–31.3 µs every
// spinYield polls (four alternating runs each, load 6).
//
// With one P, every loop yields every busypoll.OnePYield polls, latency or
// not.
type yielder struct {
	n     int
	every int   // yield every this many polls; 0: by the Ps the busy polls hold
	procs int32 // GOMAXPROCS
}

// newYielder counts the caller in spinners until done; everyPoll makes
// it yield after every poll whatever the Ps, but with one.
func newYielder(everyPoll bool) yielder {
	spinners.Add(1)
	every := 0
	if everyPoll {
		every = 1
	}
	return yielder{procs: int32(runtime.GOMAXPROCS(0)), every: busypoll.Every(every)}
}

// done ends the caller's busy poll.
func (y yielder) done() { spinners.Add(-1) }

// spin is called after each empty poll.
func (y *yielder) spin() {
	y.n++
	limit := y.every
	if limit == 0 {
		limit = spinYield
		if spinners.Load() >= y.procs {
			limit = 1
		}
	}
	if y.n >= limit {
		y.n = 0
		gosched()
	}
}

// waitCQEvent is -e's wait: poll, and sleep on the CQ when it is empty.
func waitCQEvent(ctx context.Context, cq *verbs.CQ, wcs []verbs.WC, deadline time.Time) (int, error) {
	for {
		n, err := cq.Poll(wcs)
		if n != 0 || err != nil {
			return n, err
		}
		wctx := ctx
		if !deadline.IsZero() {
			var cancel context.CancelFunc
			wctx, cancel = context.WithDeadline(ctx, deadline)
			err = cq.Wait(wctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return 0, nil // the deadline passed: let the caller look at the clock
			}
		} else {
			err = cq.Wait(ctx)
		}
		if err != nil {
			return 0, fmt.Errorf("poll CQ failed: %w", err)
		}
	}
}

// drainLimit bounds the wait, after -D's end, for the completions of what
// a client had posted.
const drainLimit = time.Second

// progress prints a line per second on p.Progress during -D runs, from a
// counter of completed messages.
type progress struct {
	stop func()
}

func (p *params) startProgress(count *atomic.Uint64, size int, unit string) *progress {
	if p.track != nil {
		p.track.traffic(count, size, unit == "lat")
	}
	if p.Duration == 0 || p.Progress == nil {
		return &progress{stop: func() {}}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start, last, prev := time.Now(), time.Now(), uint64(0)
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				n := count.Load()
				sec := now.Sub(last).Seconds()
				rate := float64(n-prev) / sec
				if unit == "lat" {
					fmt.Fprintf(p.Progress, "roce perf: %3.0f s of %.0f s: %d iterations, %.0f iterations/sec\n",
						now.Sub(start).Seconds(), p.Duration.Seconds(), n, rate)
				} else {
					fmt.Fprintf(p.Progress, "roce perf: %3.0f s of %.0f s: %.2f %s, %.6f Mpps\n",
						now.Sub(start).Seconds(), p.Duration.Seconds(), rate*float64(size)/p.formatFactor(), unit, rate/1e6)
				}
				last, prev = now, n
			}
		}
	}()
	return &progress{stop: func() { close(done); wg.Wait() }}
}

func (p *params) unit() string {
	if p.ReportGbits {
		return "Gb/sec"
	}
	return "MB/sec"
}

// rdmaBW is ib_write_bw, ib_read_bw and ib_atomic_bw after the connection:
// the client runs and reports; the server waits and prints the client's
// report. With -b both run (rdmaBWDuplex).
func (r *run) rdmaBW(ctx context.Context) error {
	r.bwHeader(r.out)
	if r.Bidirectional {
		return r.rdmaBWDuplex(ctx)
	}
	if !r.client {
		if err := r.hs(); err != nil {
			return err
		}
		rem, err := r.cm.xchgReports(BWReport{})
		if err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		r.res.BW = append(r.res.BW, rem)
		if err := r.printBW(r.out, rem, r.mtu.Bytes(), r.gidIndex, r.outReads); err != nil {
			return err
		}
		if r.Verify && r.Duration == 0 {
			if err := r.checkTarget(int(rem.Size)); err != nil {
				return err
			}
		}
		err = r.cm.closeConn(r.qps[0].my)
		fmt.Fprint(r.out, resultLine)
		return err
	}
	var last BWReport
	for _, size := range r.sizes() {
		s, err := r.runBWClient(ctx, size)
		if err != nil {
			return err
		}
		last = r.bwReport(size, s)
		r.res.BW = append(r.res.BW, last)
		if err := r.printBW(r.out, last, r.mtu.Bytes(), r.gidIndex, r.outReads); err != nil {
			return err
		}
		if r.Verify && r.Verb == Read && r.Duration == 0 {
			if err := r.checkReadResult(size); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(r.out, resultLine)
	if err := r.hs(); err != nil {
		return err
	}
	if _, err := r.cm.xchgReports(last); err != nil {
		return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	return r.cm.closeConn(r.qps[0].my)
}

// rdmaBWDuplex is ib_write_bw, ib_read_bw and ib_atomic_bw with -b: per
// size a handshake, then both sides run as the client does (with -a
// another handshake after the run, which perftest has from 4.6 on), then
// they exchange their reports and each prints the sum. No handshake and
// exchange of the client's report follow at the end: the server is not
// waiting for one.
func (r *run) rdmaBWDuplex(ctx context.Context) error {
	for _, size := range r.sizes() {
		if err := r.hs(); err != nil {
			return fmt.Errorf("Failed to sync between server and client between different msg sizes: %w", err)
		}
		s, err := r.runBWClient(ctx, size)
		if err != nil {
			return err
		}
		if r.All {
			if err := r.hs(); err != nil {
				return fmt.Errorf("Failed to sync between server and client between different msg sizes: %w", err)
			}
		}
		if err := r.printDuplex(r.bwReport(size, s)); err != nil {
			return err
		}
		// The peer sent its report after its last completion: what it wrote
		// or added here is in place, and it starts the next size only after
		// the next handshake.
		if r.Verify && r.Duration == 0 {
			if r.Verb == Read {
				err = r.checkReadResult(size)
			} else {
				err = r.checkTarget(size)
			}
			if err != nil {
				return err
			}
		}
	}
	fmt.Fprint(r.out, resultLine)
	return r.cm.closeConn(r.qps[0].my)
}

// printDuplex exchanges this side's report for the peer's
// (xchg_bw_reports) and prints their sum (print_full_bw_report with both).
func (r *run) printDuplex(my BWReport) error {
	rem, err := r.cm.xchgReports(my)
	if err != nil {
		return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	r.res.Local = append(r.res.Local, my)
	r.res.BW = append(r.res.BW, sumBW(my, rem))
	return r.printBWSum(r.out, my, rem, r.mtu.Bytes(), r.gidIndex, r.outReads)
}

// checkTarget is Verify's check of what the peer's WRITEs or atomics left
// in this side's target; an RC WRITE target is cleared for the next size.
// A UC WRITE completes once it is sent, so the peer's report can overtake
// its last packets: the check waits for the data, reading it while the
// device's receive path stands still, and leaves it (a packet still on its
// way would write it again).
func (r *run) checkTarget(size int) error {
	r.dev.Barrier()
	for i, q := range r.qps {
		switch r.Verb {
		case Write:
			what := fmt.Sprintf("QP %d: RDMA_Write target", i)
			if r.Connection == "UC" {
				var err error
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
					r.dev.Observe(func() { err = checkData(what, q.recvRegion(size), patternA) })
					if err == nil || time.Now().After(deadline) {
						break
					}
				}
				if err != nil {
					return err
				}
				continue
			}
			if err := checkData(what, q.recvRegion(size), patternA); err != nil {
				return err
			}
			clear(q.recvRegion(size))
		case Atomic:
			want := uint64(0)
			if r.atomicFA {
				want = uint64(r.Iters) * atomicAdd
			}
			if got := binary.LittleEndian.Uint64(q.recvRegion(8)); got != want {
				return fmt.Errorf("data check failed: QP %d: %s target holds %d after %d operations, want %d", i, r.Atomic, got, r.Iters, want)
			}
		}
	}
	return nil
}

// checkReadResult is Verify's check of what this side's READs brought
// back, cleared for the next size, which must read it again.
func (r *run) checkReadResult(size int) error {
	for i, q := range r.qps {
		if err := checkData(fmt.Sprintf("QP %d: RDMA_Read result", i), q.sendRegion(size), patternB); err != nil {
			return err
		}
		clear(q.sendRegion(size))
	}
	return nil
}

// sendBW is ib_send_bw: per size the server posts its receives, both
// sides handshake, the client sends and the server receives, and each
// prints its own report. With -b both post receives and both send and
// receive (runBWDuplex); they exchange their reports and each prints the
// sum, except with -D, where each prints its own.
func (r *run) sendBW(ctx context.Context) error {
	r.bwHeader(r.out)
	for _, size := range r.sizes() {
		var s *bwSamples
		if r.receives() {
			for _, q := range r.qps {
				q.posted = 0
				if err := r.postRecvs(q, size, r.RxDepth); err != nil {
					return err
				}
			}
		}
		if err := r.hs(); err != nil {
			return err
		}
		var err error
		switch {
		case r.Bidirectional:
			s, err = r.runBWDuplex(ctx, size)
		case r.client:
			s, err = r.runBWClient(ctx, size)
		default:
			s, err = r.runBWServer(ctx, size)
		}
		if err != nil {
			return err
		}
		rep := r.bwReport(size, s)
		if r.Bidirectional && r.Duration == 0 {
			err = r.printDuplex(rep)
		} else {
			if r.Bidirectional {
				r.res.Local = append(r.res.Local, rep)
			}
			r.res.BW = append(r.res.BW, rep)
			err = r.printBW(r.out, rep, r.mtu.Bytes(), r.gidIndex, r.outReads)
		}
		if err != nil {
			return err
		}
		if r.Verify && r.receives() && r.Duration == 0 {
			r.dev.Barrier()
			for i, q := range r.qps {
				if err := checkData(fmt.Sprintf("QP %d: received message", i), q.recvRegion(size), patternA); err != nil {
					return err
				}
				clear(q.recvRegion(size))
			}
		}
		if r.All {
			if err := r.hs(); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(r.out, resultLine)
	return r.cm.closeConn(r.qps[0].my)
}

// qpSamples is one QP's record of a BW run.
type qpSamples struct {
	posted []int64   // per message, unless noPeak
	comps  []compEvt // per completion seen
	first  int64
	last   int64
	count  uint64 // messages counted (in the sample window with -D)
}

type compEvt struct {
	t int64
	n uint64 // messages this completion accounts for
}

// runBWClient is run_iter_bw with one goroutine per QP, each posting up
// to TX depth work requests, a CQE every CQ-moderation messages.
func (r *run) runBWClient(ctx context.Context, size int) (_ *bwSamples, err error) {
	ctx, ended := r.peerWatched(ctx)
	defer func() { err = ended(err) }()
	clk := clock{base: time.Now()}
	win := r.window(clk, clk.now())
	var count atomic.Uint64
	prog := r.startProgress(&count, size, r.unit())
	defer prog.stop()
	per := make([]qpSamples, len(r.qps))
	errs := make([]error, len(r.qps))
	var wg sync.WaitGroup
	for i, q := range r.qps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.bwClientQP(ctx, q, size, clk, win, true, &per[i], &count)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return r.merge(per, win), nil
}

// bwClientQP posts and completes one QP's messages. With -D and drain it
// stops at the end on a signaled boundary and waits for what it posted, so
// that its last completion accounts for every message; without drain (SEND
// with -b, whose peer stops taking receives at its own end) it stops at
// the end and leaves what is outstanding, as perftest does.
func (r *run) bwClientQP(ctx context.Context, q *qpRes, size int, clk clock, win window, drain bool, s *qpSamples, count *atomic.Uint64) error {
	tmpl := r.sendWR(q, size)
	iters := uint64(r.Iters)
	txDepth, cqMod := uint64(r.TxDepth), uint64(r.CQMod)
	if !r.noPeak {
		s.posted = make([]int64, 0, iters)
	}
	if !win.on {
		// One record per signaled message, on the busy poller's thread:
		// growing the slice there cost 3% of a 64 KiB WRITE client's CPU.
		s.comps = make([]compEvt, 0, iters/cqMod+1)
	}
	batch := make([]verbs.SendWR, 0, txDepth)
	wcs := make([]verbs.WC, 16)
	var scnt, ccnt uint64
	stopped := false
	var drainUntil time.Time
	for {
		if win.on {
			// Stop posting at the end, on a signaled boundary so that the
			// last completion accounts for every message.
			if !stopped && clk.now() >= win.end && (scnt%cqMod == 0 || !drain) {
				stopped = true
			}
			if stopped && (ccnt == scnt || !drain) {
				break
			}
		} else if ccnt >= iters {
			break
		}
		batch = batch[:0]
		// With -D, -n does not bound the run: once stopped, post nothing.
		for (win.on && !stopped || !win.on && scnt < iters) && scnt-ccnt < txDepth {
			wr := tmpl
			wr.WRID = scnt
			if scnt%cqMod == cqMod-1 || !win.on && scnt == iters-1 {
				wr.Flags = verbs.SendSignaled
			}
			batch = append(batch, wr)
			scnt++
			if win.on && scnt%cqMod == 0 && clk.now() >= win.end {
				stopped = true
				break
			}
		}
		if len(batch) > 0 {
			t := clk.now()
			if s.first == 0 {
				s.first = t
			}
			if s.posted != nil {
				for range batch {
					s.posted = append(s.posted, t)
				}
			}
			if err := q.qp.PostSend(batch...); err != nil {
				return fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", q.qp.Num(), scnt, err)
			}
		}
		if ccnt == scnt {
			continue
		}
		var deadline time.Time
		switch {
		case win.on && !stopped:
			deadline = clk.base.Add(time.Duration(win.end))
		case win.on:
			// Draining, past the end: a peer that stopped taking messages
			// (a SEND server whose -n ran out answers RNR NAKs, forever
			// with rnr_retry 7) must not hold the run. perftest does not
			// wait for outstanding work at all at the end of -D.
			if drainUntil.IsZero() {
				drainUntil = time.Now().Add(drainLimit)
			}
			if time.Now().After(drainUntil) {
				if r.Progress != nil {
					fmt.Fprintf(r.Progress, "roce perf: QP %d: %d messages still outstanding %v after the end of -D: the peer stopped taking them (its -n ran out?), or they wait for a retransmission (roce stat: completer_retry_err)\n",
						q.qp.Num(), scnt-ccnt, drainLimit)
				}
				return nil
			}
			deadline = drainUntil
		}
		n, err := r.waitCQ(ctx, q.scq, wcs, deadline)
		if err != nil {
			return err
		}
		t := clk.now()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return wcError(wc, fmt.Sprintf("send, scnt=%d ccnt=%d", scnt, ccnt))
			}
			done := wc.WRID + 1
			evt := compEvt{t: t, n: done - ccnt}
			ccnt = done
			s.last = t
			if !win.on || win.in(t) {
				s.comps = append(s.comps, evt)
				s.count += evt.n
			}
			count.Add(evt.n)
		}
	}
	return nil
}

// merge turns the QPs' records into perftest's arrays.
func (r *run) merge(per []qpSamples, win window) *bwSamples {
	s := &bwSamples{}
	var first, last int64
	var comps []compEvt
	var posted []int64
	for _, p := range per {
		if first == 0 || p.first != 0 && p.first < first {
			first = p.first
		}
		last = max(last, p.last)
		comps = append(comps, p.comps...)
		posted = append(posted, p.posted...)
		s.iters += p.count
	}
	base := time.Time{}
	stamp := func(t int64) time.Time { return base.Add(time.Duration(t)) }
	if win.on {
		s.start, s.end = stamp(win.sampleStart), stamp(win.sampleStop)
		return s
	}
	s.start, s.end = stamp(first), stamp(last)
	if !r.noPeak && len(posted) == int(s.iters) {
		slices.Sort(posted)
		slices.SortFunc(comps, func(a, b compEvt) int { return int(a.t - b.t) })
		s.posted = make([]time.Time, len(posted))
		for i, t := range posted {
			s.posted[i] = stamp(t)
		}
		s.completed = make([]time.Time, len(posted))
		var c uint64
		for _, e := range comps {
			c += e.n
			s.completed[min(c, uint64(len(posted)))-1] = stamp(e.t)
		}
	}
	return s
}

// runBWServer is run_iter_bw_server: one goroutine per QP takes receive
// completions and reposts until every message of the run is posted for;
// the time runs from the first receive to the last.
func (r *run) runBWServer(ctx context.Context, size int) (_ *bwSamples, err error) {
	ctx, ended := r.peerWatched(ctx)
	defer func() { err = ended(err) }()
	clk := clock{base: time.Now()}
	var count atomic.Uint64
	prog := r.startProgress(&count, size, r.unit())
	defer prog.stop()
	var mu sync.Mutex
	var firstRx int64 // guarded by mu
	first := func(t int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		if firstRx == 0 {
			firstRx = t
		}
		return firstRx
	}
	per := make([]qpSamples, len(r.qps))
	errs := make([]error, len(r.qps))
	var wg sync.WaitGroup
	for i, q := range r.qps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.bwServerQP(ctx, q, size, clk, first, &per[i], &count)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	s := &bwSamples{}
	var last int64
	for _, p := range per {
		s.iters += p.count
		last = max(last, p.last)
	}
	f := first(0)
	if r.Duration > 0 {
		win := r.window(clk, f)
		f, last = win.sampleStart, win.sampleStop
	}
	s.start, s.end = time.Time{}.Add(time.Duration(f)), time.Time{}.Add(time.Duration(last))
	return s, nil
}

func (r *run) bwServerQP(ctx context.Context, q *qpRes, size int, clk clock, first func(int64) int64, s *qpSamples, count *atomic.Uint64) error {
	iters := uint64(r.Iters)
	wcs := make([]verbs.WC, 16)
	var rcnt uint64
	var win window
	for {
		if r.Duration == 0 && rcnt >= iters {
			return nil
		}
		var deadline time.Time
		if win.on {
			if clk.now() >= win.end {
				return nil
			}
			deadline = clk.base.Add(time.Duration(win.end))
		} else if r.Duration > 0 {
			// The window is the run's, from its first receive on any QP
			// (with -b, on the client, from its start).
			if f := first(0); f != 0 {
				win = r.window(clk, f)
				continue
			}
		}
		if r.Duration > 0 && !win.on {
			deadline = time.Now().Add(100 * time.Millisecond)
		}
		n, err := r.waitCQ(ctx, q.rcq, wcs, deadline)
		if err != nil {
			return err
		}
		t := clk.now()
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return wcError(wc, fmt.Sprintf("receive, rcnt=%d", rcnt))
			}
			if rcnt == 0 {
				first(t)
			}
			rcnt++
			s.last = t
			count.Add(1)
			if r.Duration == 0 || win.on && win.in(t) {
				s.count++
			}
			if r.Duration > 0 || uint64(q.posted) < iters {
				if err := r.postRecvs(q, size, 1); err != nil {
					return err
				}
			}
		}
	}
}

// runBWDuplex is run_iter_bi, ib_send_bw with -b: per QP one goroutine
// sends as the client does and one takes receives as the server does, from
// the receives posted before the handshake. The server sends nothing
// before its first receive (on any QP), so that it does not start before
// the client has. Without -D the report is of what this side sent, timed
// as the client's (with no peak measured, from the start of the run to
// the last completion either way); with -D it counts both what this side
// sent and what it received in the middle half of a run that starts on
// the client at once and on the server at its first receive, and neither
// side waits at the end for what it has outstanding.
func (r *run) runBWDuplex(ctx context.Context, size int) (_ *bwSamples, err error) {
	ctx, ended := r.peerWatched(ctx)
	defer func() { err = ended(err) }()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	clk := clock{base: time.Now()}
	start := clk.now()
	var count atomic.Uint64
	prog := r.startProgress(&count, size, r.unit())
	defer prog.stop()
	// began is closed, and beganAt set, when this side may send.
	began := make(chan struct{})
	var once sync.Once
	var beganAt int64
	begin := func(t int64) { once.Do(func() { beganAt = t; close(began) }) }
	if r.client {
		begin(start)
	}
	first := func(t int64) int64 {
		if t != 0 {
			begin(t)
		}
		select {
		case <-began:
			return beganAt
		default:
			return 0
		}
	}
	sent := make([]qpSamples, len(r.qps))
	rcvd := make([]qpSamples, len(r.qps))
	fail := func(err error) {
		if err != nil {
			cancel(err)
		}
	}
	var wg sync.WaitGroup
	for i, q := range r.qps {
		wg.Add(2)
		go func() {
			defer wg.Done()
			select {
			case <-began:
			case <-ctx.Done():
				return
			}
			fail(r.bwClientQP(ctx, q, size, clk, r.window(clk, beganAt), r.Duration == 0, &sent[i], &count))
		}()
		go func() {
			defer wg.Done()
			fail(r.bwServerQP(ctx, q, size, clk, first, &rcvd[i], &count))
		}()
	}
	wg.Wait()
	end := clk.now()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if r.Duration > 0 {
		s := r.merge(sent, r.window(clk, beganAt))
		for _, p := range rcvd {
			s.iters += p.count
		}
		return s, nil
	}
	s := r.merge(sent, window{})
	if r.noPeak {
		s.start, s.end = time.Time{}.Add(time.Duration(start)), time.Time{}.Add(time.Duration(end))
	}
	return s, nil
}
