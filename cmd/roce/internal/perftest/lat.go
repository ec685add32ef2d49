package perftest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/verbs"
)

// latency is ib_send_lat, ib_write_lat, ib_read_lat and ib_atomic_lat
// after the connection.
func (r *run) latency(ctx context.Context) error {
	if !r.client && (r.Verb == Read || r.Verb == Atomic) {
		// Only the client posts; the server waits for it to finish.
		err := r.cm.closeConn(r.qps[0].my)
		fmt.Fprint(r.out, resultLine)
		return err
	}
	r.latHeader(r.out)
	q := r.qps[0]
	for _, size := range r.sizes() {
		var (
			posted []int64
			rep    LatReport
			err    error
		)
		clk := clock{base: time.Now()}
		win := r.window(clk, clk.now())
		var count atomic.Uint64
		prog := r.startProgress(&count, size, "lat")
		switch r.Verb {
		case Send:
			q.posted = 0
			if err = r.postRecvs(q, size, r.RxDepth); err == nil {
				if err = r.hs(); err == nil {
					wctx, ended := r.peerWatched(ctx)
					posted, err = r.latSend(wctx, q, size, clk, win, &count)
					err = ended(err)
				}
			}
		case Write:
			wctx, ended := r.peerWatched(ctx)
			posted, err = r.latWrite(wctx, q, size, clk, win, &count)
			err = ended(err)
		default:
			wctx, ended := r.peerWatched(ctx)
			posted, err = r.latRead(wctx, q, size, clk, win, &count)
			err = ended(err)
		}
		prog.stop()
		if err != nil {
			return err
		}
		if r.Histogram || r.Unsorted {
			r.printSamples(r.out, toTimes(posted))
		}
		if win.on {
			rep = r.latDurReport(size, uint64(len(posted)), time.Duration(win.sampleStop-win.sampleStart))
		} else {
			rep = r.latReport(size, toTimes(posted))
		}
		r.res.Lat = append(r.res.Lat, rep)
		if err := r.printLat(r.out, rep, r.mtu.Bytes(), r.gidIndex, r.outReads); err != nil {
			return err
		}
		if r.Verify && r.Verb == Read && !win.on {
			if err := checkData("RDMA_Read result", q.sendRegion(size), patternB); err != nil {
				return err
			}
			copy(q.sendRegion(size), make([]byte, size))
		}
	}
	fmt.Fprint(r.out, resultLine)
	if r.Verb == Write {
		return nil // ib_write_lat ends without a closing handshake
	}
	return r.cm.closeConn(q.my)
}

func toTimes(ts []int64) []time.Time {
	out := make([]time.Time, len(ts))
	for i, t := range ts {
		out[i] = time.Time{}.Add(time.Duration(t))
	}
	return out
}

// sampled keeps what a latency loop records: every post's time with
// iterations, the number of iterations in the window with -D (as a slice
// of the right length, so both cases report len).
type sampled struct {
	win   window
	ts    []int64
	count *atomic.Uint64
}

func (s *sampled) post(t int64) {
	s.count.Add(1)
	if !s.win.on || s.win.in(t) {
		s.ts = append(s.ts, t)
	}
}

// latRead is run_iter_lat: one READ (or atomic) at a time.
func (r *run) latRead(ctx context.Context, q *qpRes, size int, clk clock, win window, count *atomic.Uint64) ([]int64, error) {
	wr := r.sendWR(q, size)
	wr.Flags = verbs.SendSignaled
	s := sampled{win: win, count: count}
	wcs := make([]verbs.WC, 1)
	for scnt := 0; win.on || scnt < r.Iters; scnt++ {
		t := clk.now()
		if win.on && t >= win.end {
			break
		}
		s.post(t)
		wr.WRID = uint64(scnt)
		if err := q.qp.PostSend(wr); err != nil {
			return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		n, err := r.waitCQ(ctx, q.scq, wcs, time.Time{})
		if err != nil {
			return nil, err
		}
		if n > 0 && wcs[0].Status != verbs.WCSuccess {
			return nil, wcError(wcs[0], fmt.Sprintf("send, scnt=%d", scnt))
		}
	}
	return s.ts, nil
}

// latSend is run_iter_lat_send: the server receives then sends, the
// client sends then receives; every send is signaled (TX depth 1).
func (r *run) latSend(ctx context.Context, q *qpRes, size int, clk clock, win window, count *atomic.Uint64) ([]int64, error) {
	wr := r.sendWR(q, size)
	wr.Flags = verbs.SendSignaled
	s := sampled{win: win, count: count}
	wcs := make([]verbs.WC, 1)
	iters := r.Iters
	done := func(t int64) bool { return win.on && t >= win.end }
	var scnt, rcnt int
	for win.on || scnt < iters || rcnt < iters {
		if (win.on || rcnt < iters) && !(scnt < 1 && r.client) {
			var deadline time.Time
			if win.on {
				deadline = clk.base.Add(time.Duration(win.end))
			}
			n, err := r.waitCQ(ctx, q.rcq, wcs, deadline)
			if err != nil {
				return nil, err
			}
			if n == 0 && done(clk.now()) {
				break
			}
			if wcs[0].Status != verbs.WCSuccess {
				return nil, wcError(wcs[0], fmt.Sprintf("receive, rcnt=%d", rcnt))
			}
			rcnt++
			if win.on || rcnt+r.RxDepth <= iters {
				if err := r.postRecvs(q, size, 1); err != nil {
					return nil, err
				}
			}
		}
		if win.on || scnt < iters {
			t := clk.now()
			if done(t) {
				break
			}
			s.post(t)
			wr.WRID = uint64(scnt)
			scnt++
			if err := q.qp.PostSend(wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if _, err := r.waitCQ(ctx, q.scq, wcs, time.Time{}); err != nil {
				return nil, err
			}
			if wcs[0].Status != verbs.WCSuccess {
				return nil, wcError(wcs[0], fmt.Sprintf("send, scnt=%d", scnt))
			}
		}
	}
	return s.ts, nil
}

// latWrite is run_iter_lat_write: each side RDMA WRITEs size bytes whose
// last byte counts the iterations into the other's buffer, and watches
// its own buffer's last byte for the peer's count.
func (r *run) latWrite(ctx context.Context, q *qpRes, size int, clk clock, win window, count *atomic.Uint64) ([]int64, error) {
	wr := r.sendWR(q, size)
	wr.Flags = verbs.SendSignaled
	s := sampled{win: win, count: count}
	wcs := make([]verbs.WC, 1)
	iters := r.Iters
	postBuf := &q.sendRegion(size)[size-1]
	pollBuf := &q.recvRegion(size)[size-1]
	var scnt, ccnt, rcnt int
	for win.on || scnt < iters || ccnt < iters || rcnt < iters {
		if (win.on || rcnt < iters) && !(scnt < 1 && !r.client) {
			rcnt++
			ok, err := r.watch(ctx, pollBuf, byte(rcnt), clk, win, q.scq)
			if err != nil {
				return nil, err
			}
			if !ok {
				break
			}
		}
		if win.on || scnt < iters {
			t := clk.now()
			if win.on && t >= win.end {
				break
			}
			s.post(t)
			scnt++
			*postBuf = byte(scnt)
			wr.WRID = uint64(scnt)
			if err := q.qp.PostSend(wr); err != nil {
				return nil, fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if win.on || ccnt < iters {
			if _, err := r.waitCQ(ctx, q.scq, wcs, time.Time{}); err != nil {
				return nil, err
			}
			if wcs[0].Status != verbs.WCSuccess {
				return nil, wcError(wcs[0], fmt.Sprintf("send, scnt=%d ccnt=%d", scnt, ccnt))
			}
			ccnt++
		}
	}
	return s.ts, nil
}

// watch waits until *b == v, as perftest spins on a volatile byte the NIC
// writes. Here the peer's WRITE lands from whichever goroutine handles
// the device's received packets, and nothing tells this goroutine when:
// each look at the byte is taken under Device.Observe, which holds the
// receive path still, so the poll never races with the WRITE and the rest
// of it is ordered before what follows. It reports false when -D's time
// is up first.
//
// Between looks it drives the link itself: a CQ.Poll that finds its CQ
// empty takes what the link has received and handles it on this
// goroutine (run to completion), so the WRITE lands without waiting for
// the device's receive goroutine, which a spinning goroutine on a one-vCPU
// VM leaves to Go's 10 ms background netpoll. It polls for no completion
// (an empty slice, as ibv_poll_cq with num_entries 0): the send
// completions on scq stay for latWrite's waitCQ. The loop never sleeps,
// as ib_write_lat's spin, and yields its P after every look, as waitCQ's
// in the latency tests (yielder).
func (r *run) watch(ctx context.Context, b *byte, v byte, clk clock, win window, cq *verbs.CQ) (bool, error) {
	y := newYielder(true)
	defer y.done()
	for spins := 0; ; spins++ {
		seen := false
		r.dev.Observe(func() { seen = *b == v })
		if seen {
			return true, nil
		}
		if spins%256 == 255 {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("waiting for the peer's RDMA WRITE: %w", err)
			}
			if win.on && clk.now() >= win.end {
				return false, nil
			}
		}
		if _, err := cq.Poll(nil); err != nil {
			return false, fmt.Errorf("waiting for the peer's RDMA WRITE: poll CQ failed: %w", err)
		}
		y.spin() // as waitCQ's yields
	}
}
