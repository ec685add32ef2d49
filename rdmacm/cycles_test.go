package rdmacm

import (
	"context"
	"fmt"
	"github.com/goroce/goroce/internal/testenv"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"
)

// cycle connects a to b's listener with Dial/Accept, then closes both ends.
func cycle(ctx context.Context, a, b *side, l *Listener, dst netip.AddrPort) error {
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept(ctx)
		if err == nil {
			// Close after the client's Close has sent its DREQ, or first:
			// either order must leave nothing behind.
			err = c.Close()
		}
		accepted <- err
	}()
	c, err := a.cm.Dial(ctx, dst, Endpoint{PD: a.pd, QP: rcInit(a), Param: ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}})
	if err != nil {
		<-accepted
		return fmt.Errorf("dial: %w", err)
	}
	cerr := c.Close()
	if err := <-accepted; err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	return cerr
}

// live counts what a CM holds: IDs, comm IDs, probes, and the QPs on its
// devices.
func live(s *side) (ids, comm, qps int) {
	s.cm.mu.Lock()
	ids, comm = len(s.cm.ids), len(s.cm.byLocal)+len(s.cm.byRemote)+len(s.cm.probes)
	s.cm.mu.Unlock()
	return ids, comm, len(s.dev.QPs())
}

// settle waits until f reports true or testenv.Slow passes (timewait and
// goroutine exits take a moment, and a loaded machine's moments are long).
func settle(f func() bool) bool { return testenv.Poll(testenv.Slow, f) }

// TestConnectCycles: 1,000 sequential and then 100 concurrent
// connect/accept/disconnect cycles leave no CM ID, comm ID, QP or goroutine
// behind.
func TestConnectCycles(t *testing.T) {
	// 100 REQs at once wait in line for one Accept loop, which under -race
	// on 2 cores can take longer than fastOptions' 100 ms × 6 tries: give
	// them Linux-like patience (timewait stays short).
	patient := Options{ResponseTimeout: 2 * time.Second, MaxRetries: 15, Timewait: 20 * time.Millisecond}
	a, b := newSides(t, "", patient, patient)
	l, err := b.cm.Listen(netip.AddrPortFrom(netip.Addr{}, 7174), Endpoint{PD: b.pd, QP: rcInit(b), Param: ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dst := netip.AddrPortFrom(b.ip, 7174)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// One cycle first, so lazily made things (AHs, goroutines that stay)
	// are part of the baseline.
	if err := cycle(ctx, a, b, l, dst); err != nil {
		t.Fatal(err)
	}
	settle(func() bool { i, _, _ := live(a); return i == 0 })
	goroutines := runtime.NumGoroutine()
	aIDs, aComm, aQPs := live(a)
	bIDs, bComm, bQPs := live(b)

	start := time.Now()
	const sequential = 1000
	for i := 0; i < sequential; i++ {
		if err := cycle(ctx, a, b, l, dst); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	t.Logf("%d sequential cycles: %.0f connections/s", sequential, sequential/time.Since(start).Seconds())

	const concurrent = 100
	start = time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, concurrent)
	var accepts sync.WaitGroup
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	for i := 0; i < concurrent; i++ {
		accepts.Add(1)
		go func() {
			defer accepts.Done()
			c, err := l.Accept(actx)
			if err == nil {
				err = c.Close()
			}
			if err != nil {
				errs <- fmt.Errorf("accept: %w", err)
			}
		}()
	}
	for i := 0; i < concurrent; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.cm.Dial(ctx, dst, Endpoint{PD: a.pd, QP: rcInit(a), Param: ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}})
			if err == nil {
				err = c.Close()
			}
			if err != nil {
				errs <- fmt.Errorf("dial: %w", err)
			}
		}()
	}
	wg.Wait()
	// Every Dial has returned; an Accept still waiting waits for a Dial
	// that failed (its error is in errs): give the rest a while, then stop.
	acceptsDone := make(chan struct{})
	go func() { accepts.Wait(); close(acceptsDone) }()
	select {
	case <-acceptsDone:
	case <-time.After(testenv.Slow):
		acancel()
		<-acceptsDone
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d concurrent cycles: %.0f connections/s", concurrent, concurrent/time.Since(start).Seconds())

	if !settle(func() bool {
		i1, c1, q1 := live(a)
		i2, c2, q2 := live(b)
		return i1 == aIDs && c1 == aComm && q1 == aQPs && i2 == bIDs && c2 == bComm && q2 == bQPs &&
			runtime.NumGoroutine() <= goroutines
	}) {
		i1, c1, q1 := live(a)
		i2, c2, q2 := live(b)
		t.Errorf("after the cycles: active side %d IDs, %d comm IDs, %d QPs (before %d, %d, %d); "+
			"passive side %d, %d, %d (before %d, %d, %d); %d goroutines (before %d)",
			i1, c1, q1, aIDs, aComm, aQPs, i2, c2, q2, bIDs, bComm, bQPs, runtime.NumGoroutine(), goroutines)
	}
}

// BenchmarkConnect measures connect/accept/disconnect cycles per second
// over the in-memory fabric (the CM's own cost: no wire latency).
func BenchmarkConnect(b *testing.B) {
	a, s := newSides(b, "", fastOptions, fastOptions) // b.Cleanup closes them
	l, err := s.cm.Listen(netip.AddrPortFrom(netip.Addr{}, 7174), Endpoint{PD: s.pd, QP: rcInit(s), Param: ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	dst := netip.AddrPortFrom(s.ip, 7174)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := cycle(ctx, a, s, l, dst); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "connects/s")
}
