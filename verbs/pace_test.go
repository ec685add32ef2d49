package verbs_test

// The requester's pacer: IBV_QP_RATE_LIMIT and the Pacer hook, in virtual
// time (testing/synctest), so the elapsed times are exact.

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// setRate changes qp's rate limit in RTS (RTS → RTS).
func setRate(t *testing.T, qp *verbs.QP, kbps uint32) {
	t.Helper()
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, RateLimit: kbps}, verbs.AttrState|verbs.AttrRateLimit); err != nil {
		t.Fatal(err)
	}
}

// TestRateLimit: an RC WRITE of 1 MiB and a train of UD SENDs take, in
// virtual time, what their transport bytes take at the QP's rate limit
// (less the bucket's burst), and no time without one.
func TestRateLimit(t *testing.T) {
	const size = 1 << 20
	t.Run("RC", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{})
			data := randBytes(size, 11)
			src := source(t, p.A.PD, data)
			dst := newCanary(t, p.B.PD, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			write := func(wrid uint64) time.Duration {
				start := time.Now()
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGList: sgl(src, size), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
				wantOK(t, p.A.CQ, wrid, verbs.WCRDMAWrite)
				return time.Since(start)
			}
			if d := write(1); d > time.Millisecond {
				t.Fatalf("unlimited WRITE took %v of virtual time", d)
			}
			const kbps = 80_000 // 10 MB/s
			setRate(t, p.A.QP, kbps)
			d := write(2)
			// 1024 packets at path MTU 1024: BTH 12 + payload + ICRC 4, and
			// the FIRST's RETH 16. The bucket starts full (1 ms at the
			// rate), and the last packet goes as soon as it holds a byte.
			bytes := 1024*(12+1024+4) + 16
			burst, last := kbps*1000/8/1000, 12+1024+4
			lo := time.Duration(float64(bytes-burst-last) / (kbps * 1000 / 8) * float64(time.Second))
			if d < lo || d > lo*11/10 {
				t.Errorf("1 MiB WRITE at %d kbps took %v, want %v to %v", kbps, d, lo, lo*11/10)
			}
			dst.check(t, piece{0, data})
			setRate(t, p.A.QP, 0)
			if d := write(3); d > time.Millisecond {
				t.Errorf("WRITE after the limit was lifted took %v", d)
			}
		})
	})
	t.Run("UD", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD})
			const n, msg, kbps = 200, 1024, 8_000 // 1 MB/s
			setRate(t, p.A.QP, kbps)
			dst := newCanary(t, p.B.PD, n*(msg+40), verbs.AccessLocalWrite)
			src := source(t, p.A.PD, randBytes(msg, 12))
			for i := range n {
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{dst.mr.SGE(i*(msg+40), msg+40)}})
			}
			start := time.Now()
			for i := range n {
				mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, msg)}))
			}
			for i := range n {
				wantOK(t, p.B.RCQ, uint64(i), verbs.WCRecv)
			}
			d := time.Since(start)
			pkt := 12 + 8 + msg + 4  // BTH, DETH, payload, ICRC
			burst := 2 * (4096 + 64) // the bucket's floor: 1 ms at 1 MB/s is less
			lo := time.Duration(float64(n*pkt-burst-pkt) / (kbps * 1000 / 8) * float64(time.Second))
			if d < lo || d > lo*11/10 {
				t.Errorf("%d UD SENDs at %d kbps took %v, want %v to %v", n, kbps, d, lo, lo*11/10)
			}
		})
	})
}

// TestRateLimitInvalid: a rate outside the device's packet pacing caps,
// or in a transition that does not take it, is EINVAL naming it.
func TestRateLimitInvalid(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{})
	err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS, RateLimit: verbs.RateLimitMaxKbps + 1}, verbs.AttrState|verbs.AttrRateLimit)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "rate_limit") || !strings.Contains(err.Error(), "100000000") {
		t.Errorf("rate above the maximum: %v, want EINVAL naming rate_limit and the range", err)
	}
	q := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	err = q.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, RateLimit: 1000},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags|verbs.AttrRateLimit)
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "IBV_QP_RATE_LIMIT") {
		t.Errorf("rate limit in RESET → INIT: %v, want EINVAL naming IBV_QP_RATE_LIMIT", err)
	}
}

// gatePacer holds the requester until open, and counts what it is told.
// The QP calls it from its timers; the test reads it.
type gatePacer struct {
	mu      sync.Mutex
	open    bool
	packets int
	bytes   int
}

func (g *gatePacer) Delay(time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return 0
	}
	return time.Second
}

func (g *gatePacer) Sent(_ time.Time, n int) {
	g.mu.Lock()
	g.packets, g.bytes = g.packets+1, g.bytes+n
	g.mu.Unlock()
}

func (g *gatePacer) told() (packets, bytes int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.packets, g.bytes
}

// TestPacerHook: a Pacer installed with SetPacer holds every packet back
// while it says so, the requester resumes on its own when the delay ends,
// and the pacer hears of every packet sent, retransmissions included.
func TestPacerHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		g := &gatePacer{}
		p.A.QP.SetPacer(g)
		dst := newCanary(t, p.B.PD, 3000, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 3000)}})
		data := randBytes(3000, 13)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), 3000)})
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if n, _ := g.told(); n != 0 || counterOf(p.A.QP.Counters(), "sent_pkts") != 0 {
			t.Fatalf("%d packets sent (pacer told of %d) while the pacer held the QP", counterOf(p.A.QP.Counters(), "sent_pkts"), n)
		}
		g.mu.Lock()
		g.open = true // no kick: the pacer's timer must resume the requester
		g.mu.Unlock()
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		dst.check(t, piece{0, data})
		packets, bytes := g.told()
		if sent := counterOf(p.A.QP.Counters(), "sent_pkts"); packets != int(sent) || packets != 3 {
			t.Errorf("pacer told of %d packets, QP sent %d, want 3", packets, sent)
		}
		if want := 3*(12+4) + 3000; bytes != want {
			t.Errorf("pacer told of %d bytes, want %d", bytes, want)
		}
		p.A.QP.SetPacer(nil)
	})
}
