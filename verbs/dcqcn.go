package verbs

import (
	"fmt"
	"time"
)

// DCQCN: the congestion control of hardware RoCE (Zhu et al., "Congestion
// Control for Large-Scale RDMA Deployments", SIGCOMM 2015, §3). A switch
// marks ECN Congestion Experienced; the receiving device, the notification
// point (NP), answers a marked packet with a CNP (BTH opcode 0x81, RoCE v2
// Annex A17.9.3) to the sending QP, at most one per QP per
// min_time_between_cnps; the sending device, the reaction point (RP),
// cuts that QP's rate on each CNP and raises it again by a timer and a
// byte counter, in the stages of QCN (IEEE 802.1Qau).
//
// The parameters carry the names operators know: MLNX_OFED's sysfs
// (/sys/class/net/<if>/ecn/roce_rp/params/*, .../roce_np/params/*) and
// upstream mlx5's debugfs cc_params (drivers/infiniband/hw/mlx5/cong.c,
// mlx5_ib_dbg_cc_name: rp_time_reset, rp_byte_reset, rp_threshold,
// rp_ai_rate, rp_hai_rate, rp_max_rate, rp_min_dec_fac, rp_min_rate,
// rp_rate_to_set_on_first_cnp, rp_dce_tcp_g, rp_dce_tcp_rtt,
// rp_rate_reduce_monitor_period, rp_initial_alpha_value,
// np_min_time_between_cnps, np_cnp_dscp, np_cnp_prio). The firmware keeps
// the defaults, so cong.c does not show them. NVIDIA's "DCQCN CC
// Parameters" table (DOCA SDK documentation, ConnectX-4 and later)
// documents these, and goroce's defaults are its values: dce_tcp_g 1019
// (alpha ← (g/1024)·alpha + (1024−g) with a CNP in the period,
// (g/1024)·alpha without: g is the weight the old alpha keeps),
// initial_alpha_value 1023, rate_to_set_on_first_cnp 0, rpg_min_dec_fac
// 50, rpg_min_rate 1, rate_reduce_monitor_period 4. One differs on
// purpose: that table's dce_tcp_rtt is 1 µs, a hardware timer; goroce's
// is the paper's K, 55 µs, since a software pacer's timers are coarser
// than that. The rate increase parameters' defaults (rpg_time_reset,
// rpg_byte_reset, rpg_threshold, rpg_ai_rate, rpg_hai_rate) were not in
// the part of that table available here: they are the values commonly
// quoted for MLNX_OFED, unverified.

// RPParams are the reaction point's parameters (MLNX_OFED ecn/roce_rp).
type RPParams struct {
	// TimeReset is rpg_time_reset: the rate increase timer's period, in
	// µs (the paper's T). Default 300.
	TimeReset uint32
	// ByteReset is rpg_byte_reset: bytes sent between byte counter
	// increase events (the paper's B). Default 32767.
	ByteReset uint32
	// Threshold is rpg_threshold: the timer or byte counter expiries that
	// end fast recovery (the paper's F). Default 1.
	Threshold uint32
	// AIRate is rpg_ai_rate: the additive increase step, Mb/s (R_AI).
	// Default 5.
	AIRate uint32
	// HAIRate is rpg_hai_rate: the hyper increase step, Mb/s (R_HAI).
	// Default 50.
	HAIRate uint32
	// MaxRate is rpg_max_rate, Mb/s; 0 means the port's line rate.
	MaxRate uint32
	// MinDecFac is rpg_min_dec_fac: the most one CNP may cut, in percent
	// of the current rate. Default 50.
	MinDecFac uint32
	// MinRate is rpg_min_rate: no cut goes below it, Mb/s. Default 1.
	MinRate uint32
	// RateToSetOnFirstCNP is rate_to_set_on_first_cnp, Mb/s: the rate a
	// flow at line rate gets on its first CNP; 0 cuts as any CNP does.
	RateToSetOnFirstCNP uint32
	// DCETCPG is dce_tcp_g: the gain of alpha's moving average, as
	// 1024·(1−g) (the weight the old alpha keeps, as NVIDIA's formula
	// has it): 1019 gives g = 5/1024, next to the paper's 1/256. Default
	// 1019.
	DCETCPG uint32
	// DCETCPRTT is dce_tcp_rtt: alpha's update period, in µs (the paper's
	// K). Default 55, the paper's (NVIDIA's hardware default is 1).
	DCETCPRTT uint32
	// RateReduceMonitorPeriod is rate_reduce_monitor_period, in µs: a CNP
	// that arrives sooner than this after the last cut is ignored
	// (rp_cnp_ignored). Default 4.
	RateReduceMonitorPeriod uint32
	// InitialAlphaValue is initial_alpha_value: alpha at the first CNP,
	// in 1/1023 (1023 = 1). Default 1023.
	InitialAlphaValue uint32
}

// DefaultRPParams returns the reaction point's defaults.
func DefaultRPParams() RPParams {
	return RPParams{TimeReset: 300, ByteReset: 32767, Threshold: 1, AIRate: 5, HAIRate: 50,
		MinDecFac: 50, MinRate: 1, DCETCPG: 1019, DCETCPRTT: 55, RateReduceMonitorPeriod: 4,
		InitialAlphaValue: 1023}
}

// Validate returns an EINVAL naming the first parameter out of its range.
func (p *RPParams) Validate() error {
	bad := func(name string, v uint32, rng string) error {
		return invalid("%s %d: valid values are %s", name, v, rng)
	}
	switch {
	case p.TimeReset < 1 || p.TimeReset > 1_000_000:
		return bad("rpg_time_reset", p.TimeReset, "1 to 1000000 (µs)")
	case p.ByteReset < 1:
		return bad("rpg_byte_reset", p.ByteReset, "1 to 4294967295 (bytes)")
	case p.Threshold < 1 || p.Threshold > 31:
		return bad("rpg_threshold", p.Threshold, "1 to 31")
	case p.AIRate < 1 || p.AIRate > maxRateMbps:
		return bad("rpg_ai_rate", p.AIRate, fmt.Sprintf("1 to %d (Mb/s)", maxRateMbps))
	case p.HAIRate > maxRateMbps:
		return bad("rpg_hai_rate", p.HAIRate, fmt.Sprintf("0 to %d (Mb/s)", maxRateMbps))
	case p.MaxRate > maxRateMbps:
		return bad("rpg_max_rate", p.MaxRate, fmt.Sprintf("0 (line rate) to %d (Mb/s)", maxRateMbps))
	case p.MinDecFac < 1 || p.MinDecFac > 100:
		return bad("rpg_min_dec_fac", p.MinDecFac, "1 to 100 (%)")
	case p.MinRate < 1 || p.MinRate > maxRateMbps:
		return bad("rpg_min_rate", p.MinRate, fmt.Sprintf("1 to %d (Mb/s)", maxRateMbps))
	case p.RateToSetOnFirstCNP > maxRateMbps:
		return bad("rate_to_set_on_first_cnp", p.RateToSetOnFirstCNP, fmt.Sprintf("0 to %d (Mb/s)", maxRateMbps))
	case p.DCETCPG > 1023:
		return bad("dce_tcp_g", p.DCETCPG, "0 to 1023")
	case p.DCETCPRTT < 1 || p.DCETCPRTT > 1_000_000:
		return bad("dce_tcp_rtt", p.DCETCPRTT, "1 to 1000000 (µs)")
	case p.RateReduceMonitorPeriod > 1_000_000:
		return bad("rate_reduce_monitor_period", p.RateReduceMonitorPeriod, "0 to 1000000 (µs)")
	case p.InitialAlphaValue > 1023:
		return bad("initial_alpha_value", p.InitialAlphaValue, "0 to 1023")
	}
	return nil
}

// maxRateMbps is the highest rate goroce paces to: RateLimitMaxKbps.
const maxRateMbps = RateLimitMaxKbps / 1000

// maxCatchUp bounds the timer periods one call replays for a QP that sat
// idle: with rpg_ai_rate ≥ 1 Mb/s, maxRateMbps periods bring the target to
// any rate goroce paces to, and 64 more bring the current rate within
// 2^-64 of it, so a longer idle ends recovered.
const maxCatchUp = maxRateMbps + 64

// RPStage is the stage of a reaction point's rate increase.
//
//enum:string RPStage(%d)
type RPStage int

// The stages of DCQCN's rate increase (the paper's Fig. 7, after QCN).
const (
	RPIdle          RPStage = iota // "idle": at line rate: no CNP yet, or fully recovered
	RPFastRecovery                 // "fast_recovery": max(T, BC) ≤ F: R_C ← (R_T+R_C)/2
	RPAdditive                     // "additive_increase": one of T, BC > F: R_T += R_AI first
	RPHyperIncrease                // "hyper_increase": min(T, BC) > F: R_T += i·R_HAI first
)

// dcqcnRP is one QP's reaction point: a pure state machine of the times
// and events it is given, so that tests drive it in any virtual time. It
// paces as a token bucket at the current rate R_C while a CNP holds it
// below line rate. Called with the QP's lock held.
type dcqcnRP struct {
	p    RPParams
	line float64 // the line rate, Mb/s: MaxRate, or the port's rate

	stage   RPStage
	rc, rt  float64 // current and target rate, Mb/s
	alpha   float64
	t, bc   uint32    // timer and byte counter expiries since the last cut
	bytes   uint64    // bytes sent since the last byte counter expiry
	tNext   time.Time // next rate increase timer expiry
	aNext   time.Time // next alpha decay: K after the last CNP or decay
	lastCut time.Time
	cut     bool // lastCut is set
	bucket  tokenBucket
}

// newDCQCNRP returns an idle reaction point for a port of lineMbps.
func newDCQCNRP(p RPParams, lineMbps uint32) *dcqcnRP {
	r := &dcqcnRP{p: p, line: float64(lineMbps)}
	if p.MaxRate != 0 && float64(p.MaxRate) < r.line {
		r.line = float64(p.MaxRate)
	}
	r.rc, r.rt = r.line, r.line
	r.alpha = float64(p.InitialAlphaValue) / 1023
	return r
}

// reconfigure applies new parameters to a reaction point; its state
// stays, its rates within the new line rate.
func (r *dcqcnRP) reconfigure(p RPParams, lineMbps uint32) {
	n := newDCQCNRP(p, lineMbps)
	r.p, r.line = n.p, n.line
	if r.stage == RPIdle {
		r.rc, r.rt = r.line, r.line
	} else {
		r.rc, r.rt = min(r.rc, r.line), min(r.rt, r.line)
	}
	if !r.bucket.last.IsZero() {
		r.setRate(r.bucket.last) // the bucket paces at the new R_C from now on
	}
}

func us(n uint32) time.Duration { return time.Duration(n) * time.Microsecond }

// g is alpha's gain (see RPParams.DCETCPG).
func (r *dcqcnRP) g() float64 { return float64(1024-r.p.DCETCPG) / 1024 }

// Rate returns the current rate R_C in Mb/s (the line rate when idle).
func (r *dcqcnRP) Rate() float64 { return r.rc }

// advance runs the alpha and rate increase timers up to now.
func (r *dcqcnRP) advance(now time.Time) {
	if r.stage == RPIdle {
		return
	}
	// Alpha: "if the RP does not get feedback for K time units, it
	// updates α: α ← (1−g)α" (the paper, §3.1); K is dce_tcp_rtt, and its
	// clock restarts at each CNP.
	k := us(r.p.DCETCPRTT)
	for n := 0; !now.Before(r.aNext); n++ {
		if n >= maxCatchUp {
			r.alpha = 0
			r.aNext = now.Add(k)
			break
		}
		r.alpha *= 1 - r.g()
		r.aNext = r.aNext.Add(k)
	}
	// The rate increase timer: every T, one more expiry and one increase.
	for n := 0; r.stage != RPIdle && !now.Before(r.tNext); n++ {
		if n >= maxCatchUp {
			r.recovered(now)
			break
		}
		at := r.tNext
		r.tNext = r.tNext.Add(us(r.p.TimeReset))
		r.t++
		r.increase(at)
	}
}

// increase is one rate increase event at time at (the paper's Fig. 7):
// fast recovery while neither counter passed F, hyper increase when both
// did, additive increase between; R_C then moves halfway to R_T.
func (r *dcqcnRP) increase(at time.Time) {
	f := r.p.Threshold
	switch {
	case max(r.t, r.bc) <= f:
		r.stage = RPFastRecovery
	case min(r.t, r.bc) > f:
		r.stage = RPHyperIncrease
		r.rt += float64(min(r.t, r.bc)-f) * float64(r.p.HAIRate)
	default:
		r.stage = RPAdditive
		r.rt += float64(r.p.AIRate)
	}
	r.rt = min(r.rt, r.line)
	r.rc = (r.rt + r.rc) / 2
	if r.rc >= r.line*(1-1e-9) {
		r.recovered(at)
		return
	}
	r.setRate(at)
}

// recovered returns the reaction point to line rate at time at: no timers
// until the next CNP.
func (r *dcqcnRP) recovered(at time.Time) {
	r.stage = RPIdle
	r.rc, r.rt = r.line, r.line
	r.t, r.bc, r.bytes = 0, 0, 0
	r.setRate(at)
}

// setRate sets the bucket to R_C.
func (r *dcqcnRP) setRate(now time.Time) {
	r.startBucket(now)
	r.bucket.refill(now)
	r.bucket.bytesPerSec = r.rc * 1e6 / 8
	r.bucket.burst = max(r.bucket.bytesPerSec/1000, minBurst)
	r.bucket.tokens = min(r.bucket.tokens, r.bucket.burst)
}

// OnCNP handles a CNP for the QP at now; it reports false if the CNP was
// ignored (rate_reduce_monitor_period: it came too soon after the last cut).
func (r *dcqcnRP) OnCNP(now time.Time) bool {
	if r.stage != RPIdle {
		r.advance(now)
	}
	// The period holds between any two cuts, a recovery in between or not.
	if r.cut && now.Sub(r.lastCut) < us(r.p.RateReduceMonitorPeriod) {
		return false
	}
	first := r.stage == RPIdle
	if first {
		// A flow at line rate starts its timers, and alpha at
		// initial_alpha_value, on its first CNP.
		r.alpha = float64(r.p.InitialAlphaValue) / 1023
	}
	// The cut (the paper, §3.1): R_T ← R_C, R_C ← R_C(1 − α/2), then
	// α ← (1−g)α + g. rpg_min_dec_fac bounds the cut.
	r.rt = r.rc
	if first && r.p.RateToSetOnFirstCNP != 0 {
		r.rc = min(float64(r.p.RateToSetOnFirstCNP), r.line)
	} else {
		r.rc *= max(1-r.alpha/2, 1-float64(r.p.MinDecFac)/100)
	}
	r.alpha = (1-r.g())*r.alpha + r.g()
	r.aNext = now.Add(us(r.p.DCETCPRTT))
	r.rc = max(r.rc, float64(r.p.MinRate))
	r.t, r.bc, r.bytes = 0, 0, 0
	r.tNext = now.Add(us(r.p.TimeReset))
	r.lastCut, r.cut = now, true
	r.stage = RPFastRecovery
	r.setRate(now)
	// Tokens saved at the old rate would let the flow go on at it after
	// the cut: the new rate starts with an empty bucket (or a debt).
	r.bucket.tokens = min(r.bucket.tokens, 0)
	return true
}

// startBucket starts the token bucket, full, at the first packet or CNP.
func (r *dcqcnRP) startBucket(now time.Time) {
	if r.bucket.last.IsZero() {
		r.bucket = tokenBucket{bytesPerSec: r.rc * 1e6 / 8, last: now}
		r.bucket.burst = max(r.bucket.bytesPerSec/1000, minBurst)
		r.bucket.tokens = r.bucket.burst
	}
}

// Delay implements Pacer: the token bucket's wait at R_C, the line rate
// while idle (a hardware port's rate; LineRate's).
func (r *dcqcnRP) Delay(now time.Time) time.Duration {
	r.advance(now)
	r.startBucket(now)
	return r.bucket.Delay(now)
}

// Sent implements Pacer: the packet takes tokens, and every rpg_byte_reset
// bytes the byte counter expires and the rate increases.
func (r *dcqcnRP) Sent(now time.Time, n int) {
	r.advance(now)
	r.startBucket(now)
	r.bucket.Sent(now, n)
	if r.stage == RPIdle {
		return
	}
	r.bytes += uint64(n)
	for r.stage != RPIdle && r.bytes >= uint64(r.p.ByteReset) {
		r.bytes -= uint64(r.p.ByteReset)
		r.bc++
		r.increase(now)
	}
}
