package verbs

// The DCQCN reaction point against the equations of Zhu et al., SIGCOMM
// 2015, §3.1, computed here step by step as the oracle: the state machine
// is pure, so the tests give it the times.

import (
	"errors"
	"math"
	"strings"
	"syscall"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(usec float64) time.Time { return t0.Add(time.Duration(usec * float64(time.Microsecond))) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func wantRates(t *testing.T, step string, r *dcqcnRP, rc, rt float64) {
	t.Helper()
	if !near(r.rc, rc) || !near(r.rt, rt) {
		t.Fatalf("%s: R_C %.6f R_T %.6f, want R_C %.6f R_T %.6f", step, r.rc, r.rt, rc, rt)
	}
}

// testParams: the paper's F = 5, a long byte counter so that only the
// timer drives, unless a test says otherwise.
func testParams() RPParams {
	p := DefaultRPParams()
	p.Threshold = 5
	p.ByteReset = 1 << 30
	p.InitialAlphaValue = 512
	return p
}

// TestDCQCNCut: a CNP sets R_T ← R_C, R_C ← R_C(1−α/2), then
// α ← (1−g)α + g; a second CNP cuts with the new α.
func TestDCQCNCut(t *testing.T) {
	p := testParams()
	r := newDCQCNRP(p, 10_000)
	if r.stage != RPIdle || r.Delay(at(0)) != 0 {
		t.Fatalf("a new RP paces: stage %v", r.stage)
	}
	g := 5.0 / 1024
	alpha := 512.0 / 1023
	if !r.OnCNP(at(0)) {
		t.Fatal("first CNP ignored")
	}
	rc := 10_000 * (1 - alpha/2)
	alpha = (1-g)*alpha + g
	wantRates(t, "first CNP", r, rc, 10_000)
	if !near(r.alpha, alpha) {
		t.Fatalf("alpha %v, want %v", r.alpha, alpha)
	}
	if r.stage != RPFastRecovery {
		t.Fatalf("stage %v after a cut", r.stage)
	}
	// 10 µs later: past rate_reduce_monitor_period (4), before the timer (300)
	// and the alpha period (55).
	r.OnCNP(at(10))
	rt := rc
	rc *= 1 - alpha/2
	alpha = (1-g)*alpha + g
	wantRates(t, "second CNP", r, rc, rt)
	if !near(r.alpha, alpha) {
		t.Fatalf("alpha %v, want %v", r.alpha, alpha)
	}
}

// TestDCQCNMonitorPeriod: a CNP within rate_reduce_monitor_period of the
// last cut changes nothing and is reported ignored.
func TestDCQCNMonitorPeriod(t *testing.T) {
	r := newDCQCNRP(testParams(), 10_000)
	r.OnCNP(at(0))
	rc, rt, alpha := r.rc, r.rt, r.alpha
	if r.OnCNP(at(3.9)) {
		t.Fatal("CNP 3.9 µs after a cut handled; rate_reduce_monitor_period is 4")
	}
	if r.rc != rc || r.rt != rt || r.alpha != alpha {
		t.Fatal("ignored CNP changed the state")
	}
	if !r.OnCNP(at(4)) {
		t.Fatal("CNP 4 µs after a cut ignored")
	}
}

// TestDCQCNAlphaDecay: each K (dce_tcp_rtt) without a CNP, α ← (1−g)α;
// the next cut uses the decayed α.
func TestDCQCNAlphaDecay(t *testing.T) {
	p := testParams()
	p.TimeReset = 1_000_000 // keep the rate still
	r := newDCQCNRP(p, 10_000)
	r.OnCNP(at(0))
	g := 5.0 / 1024
	alpha := (1-g)*(512.0/1023) + g
	// 7 periods of 55 µs, and not quite the 8th.
	r.Delay(at(7*55 + 54))
	want := alpha * math.Pow(1-g, 7)
	if !near(r.alpha, want) {
		t.Fatalf("alpha after 7 K: %v, want %v", r.alpha, want)
	}
	rc := r.rc
	r.OnCNP(at(7*55 + 54))
	wantRates(t, "cut with decayed alpha", r, rc*(1-want/2), rc)
	// The CNP restarted K: 54 µs later no decay, 55 µs later one.
	a := r.alpha
	r.Delay(at(7*55 + 54 + 54))
	if r.alpha != a {
		t.Fatal("alpha decayed before K had passed since the CNP")
	}
	r.Delay(at(7*55 + 54 + 55))
	if !near(r.alpha, a*(1-g)) {
		t.Fatalf("alpha %v, want %v", r.alpha, a*(1-g))
	}
}

// TestDCQCNTimerStages: with the byte counter out of play, the timer
// gives F fast recovery steps R_C ← (R_T+R_C)/2, then additive increase
// R_T += R_AI, R_C ← (R_T+R_C)/2 (hyper increase needs both counters past F).
func TestDCQCNTimerStages(t *testing.T) {
	p := testParams()
	r := newDCQCNRP(p, 10_000)
	// Two cuts, so that R_T is below line rate (which caps it).
	r.OnCNP(at(0))
	r.OnCNP(at(10))
	rc, rt := r.rc, r.rt
	for i := 1; i <= 12; i++ {
		r.Delay(at(10 + float64(i)*300))
		stage := RPFastRecovery
		if i > 5 {
			stage = RPAdditive
			rt += 5
		}
		rc = (rt + rc) / 2
		wantRates(t, "timer expiry", r, rc, rt)
		if r.stage != stage || r.t != uint32(i) {
			t.Fatalf("expiry %d: stage %v T %d, want %v", i, r.stage, r.t, stage)
		}
	}
	// Catching up: 3 expiries at once are 3 additive steps.
	r.Delay(at(10 + 15*300))
	for range 3 {
		rt += 5
		rc = (rt + rc) / 2
	}
	wantRates(t, "three expiries at once", r, rc, rt)
}

// TestDCQCNByteCounterHyper: rpg_byte_reset bytes make a byte counter
// expiry; once both T and BC pass F, hyper increase adds
// (min(T,BC)−F)·R_HAI to R_T.
func TestDCQCNByteCounterHyper(t *testing.T) {
	p := testParams()
	p.ByteReset = 10_000
	p.Threshold = 2
	r := newDCQCNRP(p, 10_000)
	r.OnCNP(at(0))
	r.OnCNP(at(10))
	rc, rt := r.rc, r.rt
	var T, BC uint32
	step := func(what string) {
		f := uint32(2)
		switch {
		case max(T, BC) <= f:
		case min(T, BC) > f:
			rt += float64(min(T, BC)-f) * 50
		default:
			rt += 5
		}
		rc = (rt + rc) / 2
		wantRates(t, what, r, rc, rt)
	}
	// Bytes first: 10 000 bytes in packets of 1000, at 1 µs apart (the
	// bucket's debt does not matter to the state machine).
	now := 10.0
	for i := range 30 {
		now++
		r.Sent(at(now), 1000)
		if (i+1)%10 == 0 {
			BC++
			step("byte counter expiry")
		}
	}
	if r.stage != RPAdditive || r.bc != 3 {
		t.Fatalf("BC %d stage %v, want 3 additive_increase", r.bc, r.stage)
	}
	for i := 1; i <= 4; i++ {
		r.Delay(at(10 + float64(i)*300))
		T++
		step("timer expiry")
	}
	if r.stage != RPHyperIncrease {
		t.Fatalf("T %d BC %d: stage %v, want hyper_increase", r.t, r.bc, r.stage)
	}
}

// TestDCQCNBounds: rpg_min_dec_fac bounds one cut, rpg_min_rate bounds
// every cut, rate_to_set_on_first_cnp replaces the first cut, rpg_max_rate
// caps the line rate.
func TestDCQCNBounds(t *testing.T) {
	p := testParams()
	p.InitialAlphaValue = 1023
	p.MinDecFac = 30
	r := newDCQCNRP(p, 1000)
	r.OnCNP(at(0))
	wantRates(t, "alpha 1, min_dec_fac 30", r, 700, 1000)

	p = testParams()
	p.MinRate = 400
	r = newDCQCNRP(p, 1000)
	for i := range 10 {
		r.OnCNP(at(float64(i) * 5))
	}
	if r.rc != 400 {
		t.Fatalf("R_C %v after 10 CNPs, rpg_min_rate 400", r.rc)
	}

	p = testParams()
	p.RateToSetOnFirstCNP = 100
	r = newDCQCNRP(p, 1000)
	r.OnCNP(at(0))
	wantRates(t, "rate_to_set_on_first_cnp", r, 100, 1000)
	g := 5.0 / 1024
	alpha := (1-g)*512.0/1023 + g
	r.OnCNP(at(5))
	wantRates(t, "second CNP after rate_to_set_on_first_cnp", r, 100*(1-alpha/2), 100)

	p = testParams()
	p.MaxRate = 300
	r = newDCQCNRP(p, 1000)
	if r.line != 300 || r.rc != 300 {
		t.Fatalf("rpg_max_rate 300 on a 1000 Mb/s port: line %v", r.line)
	}
}

// TestDCQCNRecovers: without CNPs the timer brings the rate back to line
// rate, the RP goes idle and paces no more; an hour's idleness replays in
// bounded work and ends recovered.
func TestDCQCNRecovers(t *testing.T) {
	p := DefaultRPParams()
	r := newDCQCNRP(p, 1000)
	r.OnCNP(at(0))
	if r.Delay(at(0)) == 0 {
		t.Fatal("a cut RP with an empty bucket does not pace")
	}
	for i := 1; r.stage != RPIdle; i++ {
		if i > 1000 {
			t.Fatalf("not recovered after 1000 timer periods: R_C %v R_T %v", r.rc, r.rt)
		}
		r.Delay(at(float64(i) * 300))
	}
	if r.Delay(at(1e6)) != 0 || r.rc != 1000 || r.bucket.bytesPerSec != 1000e6/8 {
		t.Fatalf("recovered RP: R_C %v, bucket at %v B/s", r.rc, r.bucket.bytesPerSec)
	}
	r.OnCNP(at(2e6))
	r.Delay(at(2e6 + 3600e6))
	if r.stage != RPIdle || r.alpha != 0 && r.alpha > 1e-9 || r.bucket.bytesPerSec != 1000e6/8 {
		t.Fatalf("after an hour: stage %v alpha %v bucket at %v B/s", r.stage, r.alpha, r.bucket.bytesPerSec)
	}
}

// TestDCQCNPaces: while cut, the RP is a token bucket at R_C.
func TestDCQCNPaces(t *testing.T) {
	p := testParams()
	p.RateToSetOnFirstCNP = 80 // 10 MB/s
	r := newDCQCNRP(p, 1000)
	r.OnCNP(at(0))
	// The bucket starts empty: the first byte needs 0.1 µs.
	if d := r.Delay(at(0)); d != 100*time.Nanosecond {
		t.Fatalf("Delay %v at 10 MB/s with an empty bucket, want 100ns", d)
	}
	// 100 µs fill 1000 bytes; a 1000-byte packet then leaves the bucket
	// empty, and the next byte takes 0.1 µs.
	r.Sent(at(100), 1000)
	if d := r.Delay(at(100)); d != 100*time.Nanosecond {
		t.Fatalf("Delay %v after spending the bucket, want 100ns", d)
	}
	r.Sent(at(100), 2000)
	if d := r.Delay(at(100)); d != 200*time.Microsecond+100*time.Nanosecond {
		t.Fatalf("Delay %v owing 2000 bytes at 10 MB/s, want 200.1µs", d)
	}
}

// TestDCQCNIdlePacesAtLineRate: before its first CNP an RP paces at the
// line rate (a hardware port's serialization): a full bucket of 1 ms, then
// the rate.
func TestDCQCNIdlePacesAtLineRate(t *testing.T) {
	r := newDCQCNRP(testParams(), 80) // 10 MB/s: the bucket holds 10 000 bytes
	if d := r.Delay(at(0)); d != 0 {
		t.Fatalf("Delay %v with a full bucket", d)
	}
	r.Sent(at(0), 10_000)
	if d := r.Delay(at(0)); d != 100*time.Nanosecond || r.stage != RPIdle {
		t.Fatalf("Delay %v (stage %v) after the bucket's 10 000 bytes, want 100ns, idle", d, r.stage)
	}
}

// TestDCQCNReconfigure: new parameters keep a cut RP's state within the
// new line rate, and an idle RP at it.
func TestDCQCNReconfigure(t *testing.T) {
	r := newDCQCNRP(testParams(), 1000)
	r.OnCNP(at(0))
	rc, stage := r.rc, r.stage
	p := testParams()
	p.MaxRate = 300
	r.reconfigure(p, 1000)
	if r.line != 300 || r.rt != 300 || r.rc != min(rc, 300) || r.stage != stage {
		t.Fatalf("line %v R_T %v R_C %v stage %v after rpg_max_rate 300", r.line, r.rt, r.rc, r.stage)
	}
	if r.bucket.bytesPerSec != r.rc*1e6/8 {
		t.Fatalf("bucket at %v B/s, R_C %v Mb/s", r.bucket.bytesPerSec, r.rc)
	}
	r = newDCQCNRP(testParams(), 1000)
	r.Delay(at(0))
	r.reconfigure(testParams(), 2000)
	if r.rc != 2000 || r.rt != 2000 || r.stage != RPIdle || r.bucket.bytesPerSec != 2000e6/8 {
		t.Fatalf("idle RP on a 2000 Mb/s line: R_C %v R_T %v bucket %v B/s", r.rc, r.rt, r.bucket.bytesPerSec)
	}
}

func TestRPParamsValidate(t *testing.T) {
	p := DefaultRPParams()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	p.MinDecFac = 0
	err := p.Validate()
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "rpg_min_dec_fac 0: valid values are 1 to 100") {
		t.Fatalf("min_dec_fac 0: %v", err)
	}
}
