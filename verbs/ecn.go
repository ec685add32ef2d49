package verbs

import (
	"syscall"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// NPParams are the notification point's parameters (MLNX_OFED
// ecn/roce_np; mlx5 cc_params np_*).
type NPParams struct {
	// MinTimeBetweenCNPs is min_time_between_cnps, in µs: a QP sends its
	// peer at most one CNP per this time. Default 0 (every CE-marked
	// packet), as mlx5's np_min_time_between_cnps ("Default = 0", the
	// patch that added it, IB/mlx5, 2020).
	MinTimeBetweenCNPs uint32
	// CNPDSCP is cnp_dscp: the DSCP CNPs carry (their ECN bits are
	// Not-ECT: a CNP is never marked). Default 48.
	CNPDSCP uint8
}

// ECN codepoints of the IP header's two ECN bits (RFC 3168 §5).
const (
	ECNNotECT uint8 = 0
	ECNECT1   uint8 = 1
	ECNECT0   uint8 = 2
	ECNCE     uint8 = 3
)

// Priorities is a set of the eight priorities, bit p for priority p, as
// MLNX_OFED enables the points per priority (ecn/roce_np/enable/<prio>,
// ecn/roce_rp/enable/<prio>).
//
// A goroce port has no VLAN and no PFC, so a packet's priority is the one
// its DSCP maps to under the "trust dscp" mode that RoCE deployments with
// DCQCN configure, with mlx5's default dscp2prio table: priority = DSCP / 8
// (see PriorityOf). A QP's priority is that of its traffic class.
type Priorities uint8

// AllPriorities is every priority, 0 to 7.
const AllPriorities Priorities = 0xff

// Has reports whether priority prio (0-7) is in the set.
func (p Priorities) Has(prio uint8) bool { return prio < 8 && p&(1<<prio) != 0 }

// PriorityOf returns the priority of a packet with IP traffic class tc
// (DSCP and ECN): DSCP / 8, mlx5's default dscp2prio mapping.
func PriorityOf(tc uint8) uint8 { return tc >> 5 }

// ECNConfig is a port's congestion control: DCQCN's notification point
// and reaction point (see dcqcn.go). Both are off by default, and then
// nothing on the wire changes.
type ECNConfig struct {
	// NPEnable makes the port answer RoCE v2 packets marked Congestion
	// Experienced with CNPs (MLNX_OFED ecn/roce_np/enable/<prio>), for
	// packets of these priorities (PriorityOf their traffic class).
	NPEnable Priorities
	// RPEnable makes the port's QPs of these priorities (PriorityOf their
	// traffic class) mark their request packets ECN-capable (ECT) and cut
	// their rate on CNPs (ecn/roce_rp/enable/<prio>): only a sender that
	// reacts may claim ECN capability (RFC 3168 §6.1).
	RPEnable Priorities
	// ECT is the codepoint request packets carry with RPEnable: ECNECT0
	// (the default; 0 means it) or ECNECT1.
	ECT uint8
	// LineRate is the port's rate in Mb/s for DCQCN: the rate a QP sends
	// at (paced, as a hardware port's serialization) before its first CNP
	// and once recovered, and rpg_max_rate 0's meaning. Zero means
	// RateLimitMaxKbps (100 Gb/s): a soft device has no fixed speed.
	LineRate uint32
	NP       NPParams
	RP       RPParams
}

// DefaultECNConfig returns a port's defaults: NP and RP off, the
// MLNX_OFED parameter defaults.
func DefaultECNConfig() ECNConfig {
	return ECNConfig{ECT: ECNECT0, NP: NPParams{CNPDSCP: 48}, RP: DefaultRPParams()}
}

// SetECN sets port's congestion control. Parameters take effect at each
// QP's next CNP or packet sent; a QP whose rate was cut keeps its state
// across a change of parameters, and drops it when the RP is disabled.
func (d *Device) SetECN(port uint8, c ECNConfig) error {
	bad := func(format string, args ...any) error {
		return errorf("set_ecn", d.name, 0, syscall.EINVAL, format, args...)
	}
	if port != 1 {
		return bad("port %d: the device has port 1 only", port)
	}
	switch c.ECT {
	case 0:
		c.ECT = ECNECT0
	case ECNECT0, ECNECT1:
	default:
		return bad("ect %d: valid values are 1 (ECT(1)) and 2 (ECT(0))", c.ECT)
	}
	if c.LineRate == 0 {
		c.LineRate = maxRateMbps
	}
	if c.LineRate > maxRateMbps {
		return bad("line rate %d Mb/s: valid values are 1 to %d", c.LineRate, maxRateMbps)
	}
	if c.NP.CNPDSCP > 63 {
		return bad("cnp_dscp %d: valid values are 0 to 63", c.NP.CNPDSCP)
	}
	if c.NP.MinTimeBetweenCNPs > 1_000_000 {
		return bad("min_time_between_cnps %d: valid values are 0 to 1000000 (µs)", c.NP.MinTimeBetweenCNPs)
	}
	if err := c.RP.Validate(); err != nil {
		return withOp(err, "set_ecn", d.name, 0)
	}
	d.ecn.Store(&c)
	return nil
}

// defaultECN is what a port that was never set has.
var defaultECN = DefaultECNConfig()

// ECN returns port's congestion control.
func (d *Device) ECN(port uint8) ECNConfig {
	if c := d.ecn.Load(); c != nil {
		return *c
	}
	return DefaultECNConfig()
}

// ccFor returns the QP's reaction point under the port's current
// configuration c (nil: RP disabled). Called with q.mu held.
func (q *QP) ccFor(c *ECNConfig) *dcqcnRP {
	if !q.rpOn(c) {
		q.cc = nil
		return nil
	}
	if q.cc == nil {
		q.cc = newDCQCNRP(c.RP, c.LineRate)
		q.ccCfg = c
	} else if q.ccCfg != c {
		q.cc.reconfigure(c.RP, c.LineRate)
		q.ccCfg = c
	}
	return q.cc
}

// rpOn reports whether c enables the reaction point for the QP: for an
// RC or UC QP, for the priority of its path's traffic class; for a UD QP,
// whose datagrams each have their own, for any priority (markECT then
// decides per packet). Called with q.mu held.
func (q *QP) rpOn(c *ECNConfig) bool {
	if c == nil || c.RPEnable == 0 {
		return false
	}
	if q.typ == RC || q.typ == UC {
		return c.RPEnable.Has(PriorityOf(q.path.tc))
	}
	return true
}

// markECT gives a request packet the port's ECT codepoint while its RP is
// enabled for the packet's priority (RoCE v2 only: RoCE v1's GRH is not
// IP, and no switch marks it).
func (q *QP) markECT(a *link.Addr) {
	if c := q.dev.ecn.Load(); c != nil && c.RPEnable.Has(PriorityOf(a.TrafficClass)) && a.Version == wire.RoCEv2 {
		a.TrafficClass = a.TrafficClass&^3 | c.ECT
	}
}

// onCNP is the reaction point's half: a CNP for this QP cuts its rate
// (rp_cnp_handled), unless the port's RP is disabled, the QP cannot send,
// or the CNP comes within rate_reduce_monitor_period of the last cut
// (rp_cnp_ignored, as mlx5 counts them).
func (q *QP) onCNP(a *link.Addr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.counters[RcvdPkts].Add(1)
	connected := q.typ == RC || q.typ == UC
	if q.state != QPSRTS && q.state != QPSSQD || q.typ == GSI || connected && a.SrcGID != q.path.dgid {
		q.count(RPCNPIgnored)
		return
	}
	cc := q.ccFor(q.dev.ecn.Load())
	if cc == nil || !cc.OnCNP(time.Now()) {
		q.count(RPCNPIgnored)
		return
	}
	q.count(RPCNPHandled)
}

// onCE is the notification point's half: a RoCE v2 packet marked
// Congestion Experienced (np_ecn_marked_roce_packets) makes this QP send
// the QP that sent it a CNP, at most one per min_time_between_cnps
// (np_cnp_sent): a connected QP's peer, or a UD datagram's source QP (its
// DETH) at the address it came from.
func (q *QP) onCE(c *ECNConfig, p *wire.Packet, a *link.Addr, out *txBatch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.count(NPECNMarkedRoCEPackets)
	if !c.NPEnable.Has(PriorityOf(a.TrafficClass)) || q.state < QPSRTR || q.state == QPSErr {
		return
	}
	var (
		dqpn uint32
		to   link.Addr
	)
	switch q.typ {
	case RC, UC:
		if a.SrcGID != q.path.dgid {
			return
		}
		dqpn, to = q.attr.DestQPN, addrOf(&q.path, q.sport)
	case UD:
		// Only a datagram of this QP's transport names its source QP (the
		// responder drops any other, rcvd_bad_opcode).
		deth := p.DETH()
		if deth == nil || p.Opcode().Transport() != wire.TransportUD {
			return
		}
		dqpn = deth.SrcQP()
		to = link.Addr{Version: a.Version, SrcGID: a.DstGID, DstGID: a.SrcGID, UDPSrcPort: q.sport}
	default:
		return // QP1's MADs: no congestion control
	}
	now := time.Now()
	if q.npSent && now.Sub(q.npLast) < time.Duration(c.NP.MinTimeBetweenCNPs)*time.Microsecond {
		return
	}
	q.npSent, q.npLast = true, now
	// RoCE v2 Annex A17.9.3: BTH opcode 0x81, BECN set, the destination
	// QP the QP that sent the marked packet, PSN 0; then 16 reserved
	// bytes and the ICRC, which the link fills.
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeCNP, PKey: wire.DefaultPKey,
		DestQP: dqpn, BECN: true}}
	pk := out.next()
	finish(pk, appendHeaders(pk.Buf, &f, 0))
	pk.Addr = to
	pk.Addr.TrafficClass = c.NP.CNPDSCP << 2 // Not-ECT
	q.counters[SentPkts].Add(1)
	q.count(NPCNPSent)
}

// CongestionRate returns the QP's current DCQCN rate in Mb/s and whether
// DCQCN holds it below the port's line rate (false: the QP has had no CNP,
// or has recovered, or the port's RP is off).
func (q *QP) CongestionRate() (mbps float64, limited bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cc == nil {
		return 0, false
	}
	q.cc.advance(time.Now())
	if q.cc.stage == RPIdle {
		return q.cc.line, false
	}
	return q.cc.rc, true
}
