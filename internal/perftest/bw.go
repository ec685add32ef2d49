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

// waitCQ polls cq into wcs, spinning briefly before it blocks: a goroutine
// that never blocks keeps the Go scheduler from polling the network (see
// internal/pingpong). A zero deadline waits for ctx only.
func waitCQ(ctx context.Context, cq *verbs.CQ, wcs []verbs.WC, deadline time.Time) (int, error) {
	for spins := 0; ; spins++ {
		n, err := cq.Poll(wcs)
		if n != 0 || err != nil {
			return n, err
		}
		if spins < 64 {
			runtime.Gosched()
			continue
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

// progress prints a line per second on p.Progress during -D runs, from a
// counter of completed messages.
type progress struct {
	stop func()
}

func (p *params) startProgress(count *atomic.Uint64, size int, unit string) *progress {
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
// report.
func (r *run) rdmaBW(ctx context.Context) error {
	r.bwHeader(r.out)
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
			r.dev.Barrier()
			for i, q := range r.qps {
				var err error
				switch r.Verb {
				case Write:
					err = checkData(fmt.Sprintf("QP %d: RDMA_Write target", i), q.recvRegion(int(rem.Size)), patternA)
				case Atomic:
					want := uint64(0)
					if r.atomicFA {
						want = uint64(r.Iters) * atomicAdd
					}
					if got := binary.LittleEndian.Uint64(q.recvRegion(8)); got != want {
						err = fmt.Errorf("data check failed: QP %d: %s target holds %d after %d operations, want %d", i, r.Atomic, got, r.Iters, want)
					}
				}
				if err != nil {
					return err
				}
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
			for i, q := range r.qps {
				if err := checkData(fmt.Sprintf("QP %d: RDMA_Read result", i), q.sendRegion(size), patternB); err != nil {
					return err
				}
				copy(q.sendRegion(size), make([]byte, size)) // the next size must read it again
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

// sendBW is ib_send_bw: per size the server posts its receives, both
// sides handshake, the client sends and the server receives, and each
// prints its own report.
func (r *run) sendBW(ctx context.Context) error {
	r.bwHeader(r.out)
	for _, size := range r.sizes() {
		var s *bwSamples
		if !r.client {
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
		if r.client {
			s, err = r.runBWClient(ctx, size)
		} else {
			s, err = r.runBWServer(ctx, size)
		}
		if err != nil {
			return err
		}
		rep := r.bwReport(size, s)
		r.res.BW = append(r.res.BW, rep)
		if err := r.printBW(r.out, rep, r.mtu.Bytes(), r.gidIndex, r.outReads); err != nil {
			return err
		}
		if r.Verify && !r.client && r.Duration == 0 {
			r.dev.Barrier()
			for i, q := range r.qps {
				if err := checkData(fmt.Sprintf("QP %d: received message", i), q.recvRegion(size), patternA); err != nil {
					return err
				}
				copy(q.recvRegion(size), make([]byte, size))
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
func (r *run) runBWClient(ctx context.Context, size int) (*bwSamples, error) {
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
			errs[i] = r.bwClientQP(ctx, q, size, clk, win, &per[i], &count)
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

func (r *run) bwClientQP(ctx context.Context, q *qpRes, size int, clk clock, win window, s *qpSamples, count *atomic.Uint64) error {
	tmpl := r.sendWR(q, size)
	iters := uint64(r.Iters)
	txDepth, cqMod := uint64(r.TxDepth), uint64(r.CQMod)
	if !r.noPeak {
		s.posted = make([]int64, 0, iters)
	}
	batch := make([]verbs.SendWR, 0, txDepth)
	wcs := make([]verbs.WC, 16)
	var scnt, ccnt uint64
	stopped := false
	for {
		if win.on {
			// Stop posting at the end, on a signaled boundary so that the
			// last completion accounts for every message.
			if !stopped && clk.now() >= win.end && scnt%cqMod == 0 {
				stopped = true
			}
			if stopped && ccnt == scnt {
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
		if win.on && !stopped {
			deadline = clk.base.Add(time.Duration(win.end))
		}
		n, err := waitCQ(ctx, q.scq, wcs, deadline)
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
func (r *run) runBWServer(ctx context.Context, size int) (*bwSamples, error) {
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
		} else if r.Duration > 0 && rcnt > 0 {
			win = r.window(clk, first(0))
			continue
		}
		if r.Duration > 0 && !win.on {
			deadline = time.Now().Add(100 * time.Millisecond)
		}
		n, err := waitCQ(ctx, q.rcq, wcs, deadline)
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
