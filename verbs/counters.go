package verbs

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/wire"
)

// Counter identifies one transport counter.
type Counter int

// Counters named as rxe names them in hw_counters and `rdma statistic show`,
// then goroce's drops by cause.
const (
	SentPkts            Counter = iota // sent_pkts
	RcvdPkts                           // rcvd_pkts
	DuplicateRequest                   // duplicate_request
	OutOfSeqRequest                    // out_of_seq_request
	RcvdRNRErr                         // rcvd_rnr_err: RNR NAKs received
	SendRNRErr                         // send_rnr_err: RNR NAKs sent
	RcvdSeqErr                         // rcvd_seq_err: PSN sequence error NAKs received
	AckDeferred                        // ack_deferred
	RetryExceededErr                   // retry_exceeded_err
	RetryRNRExceededErr                // retry_rnr_exceeded_err
	CompleterRetryErr                  // completer_retry_err: retransmissions started by the completer
	SendErr                            // send_err
	LinkDowned                         // link_downed
	RDMASends                          // rdma_sends
	RDMARecvs                          // rdma_recvs
	RcvdBadICRC                        // rcvd_bad_icrc: dropped by the link
	RcvdBadHeader                      // rcvd_bad_header: malformed transport headers
	RcvdBadQP                          // rcvd_bad_qp: no such QP, or QP not ready
	RcvdBadPKey                        // rcvd_bad_pkey
	RcvdBadQKey                        // rcvd_bad_qkey
	RcvdBadOpcode                      // rcvd_bad_opcode: opcode not valid for the QP's type
	RcvdNoRecvWQE                      // rcvd_no_recv_wqe: UD/UC messages dropped for lack of a receive
	// DuplicateRequestDropped counts duplicate READ and FLUSH requests
	// that repeat no request this QP executed (or that find the responder
	// busy with too many), dropped (IBTA §9.9.3.1.4 class D): a READ is
	// executed again only when a requester's retry can explain it.
	DuplicateRequestDropped // duplicate_request_dropped
	RcvdBadOpSeq            // rcvd_bad_op_seq: requests out of opcode sequence (UC: dropped)
	RcvdBadRKey             // rcvd_bad_rkey: requests refused for their rkey, PD, access or range (UC: dropped)
	RcvdBadLength           // rcvd_bad_length: requests refused for a payload or DMA length (UC: dropped)
	AsyncEventsDropped      // async_events_dropped: events the full async event queue could not hold
	RetransPkts             // retrans_pkts: packets sent again
	// DCQCN's, named as mlx5 names them (ecn.go).
	NPCNPSent              // np_cnp_sent: CNPs the notification point sent
	NPECNMarkedRoCEPackets // np_ecn_marked_roce_packets: RoCE v2 packets received marked CE
	RPCNPHandled           // rp_cnp_handled: CNPs that cut a QP's rate
	RPCNPIgnored           // rp_cnp_ignored: CNPs received and ignored (RP off, QP not sending, within rate_reduce_monitor_period)
	numCounters
)

// CounterInfo names one counter and says what it counts: the one place a
// counter's name and meaning are written, for roce stat, the metrics
// exporter and anything else that lists counters.
type CounterInfo struct {
	Name string // as rxe's hw_counters and `rdma statistic show` name it
	// Rxe is set for the counters Linux rxe has too
	// (drivers/infiniband/sw/rxe/rxe_hw_counters.c); the others are goroce's.
	Rxe  bool
	Help string // what it counts, a phrase without a final period
	// Drop is the cause a dropped-packet counter is filed under in the
	// exporter's goroce_port_drops_total{cause}; "" for the others.
	Drop string
}

// CounterTable describes every counter, indexed by Counter: rxe's first, in
// the order `rdma statistic show` prints them, then goroce's.
var CounterTable = [numCounters]CounterInfo{
	SentPkts:                {"sent_pkts", true, "packets sent", ""},
	RcvdPkts:                {"rcvd_pkts", true, "packets received", ""},
	DuplicateRequest:        {"duplicate_request", true, "duplicate requests received (answered again, not executed again)", ""},
	OutOfSeqRequest:         {"out_of_seq_request", true, "requests received with a PSN ahead of the expected one (answered with a sequence-error NAK)", "out_of_seq_request"},
	RcvdRNRErr:              {"rcvd_rnr_err", true, "RNR NAKs received: the peer had no receive posted", ""},
	SendRNRErr:              {"send_rnr_err", true, "RNR NAKs sent: this port had no receive posted", ""},
	RcvdSeqErr:              {"rcvd_seq_err", true, "sequence-error NAKs received", ""},
	AckDeferred:             {"ack_deferred", true, "ACKs the responder deferred", ""},
	RetryExceededErr:        {"retry_exceeded_err", true, "work requests that failed after retry_cnt retransmissions", ""},
	RetryRNRExceededErr:     {"retry_rnr_exceeded_err", true, "work requests that failed after rnr_retry RNR retries", ""},
	CompleterRetryErr:       {"completer_retry_err", true, "retransmissions the completer started (a timeout or a NAK)", ""},
	SendErr:                 {"send_err", true, "work requests the requester failed", ""},
	LinkDowned:              {"link_downed", true, "times the link went down", ""},
	RDMASends:               {"rdma_sends", true, "SEND work requests completed", ""},
	RDMARecvs:               {"rdma_recvs", true, "SEND messages received", ""},
	RcvdBadICRC:             {"rcvd_bad_icrc", false, "packets dropped: their ICRC was wrong", "bad_icrc"},
	RcvdBadHeader:           {"rcvd_bad_header", false, "packets dropped: malformed transport headers", "bad_header"},
	RcvdBadQP:               {"rcvd_bad_qp", false, "packets dropped: no such QP, or the QP was not ready", "bad_qp"},
	RcvdBadPKey:             {"rcvd_bad_pkey", false, "packets dropped: a P_Key the port does not have", "bad_pkey"},
	RcvdBadQKey:             {"rcvd_bad_qkey", false, "UD packets dropped: a Q_Key the QP does not have", "bad_qkey"},
	RcvdBadOpcode:           {"rcvd_bad_opcode", false, "packets dropped: an opcode not valid for the QP's type", "bad_opcode"},
	RcvdNoRecvWQE:           {"rcvd_no_recv_wqe", false, "UD and UC messages dropped: no receive was posted", "no_recv_wqe"},
	DuplicateRequestDropped: {"duplicate_request_dropped", false, "duplicate READ, ATOMIC or FLUSH requests dropped: they repeat no request this QP executed (a probe for keys, not a retry)", "duplicate_request_dropped"},
	RcvdBadOpSeq:            {"rcvd_bad_op_seq", false, "UC packets dropped: an opcode out of sequence (a MIDDLE or LAST that continues no message of its kind)", "bad_op_seq"},
	RcvdBadRKey:             {"rcvd_bad_rkey", false, "UC RDMA WRITEs dropped: the rkey, range or access did not allow them", "bad_rkey"},
	RcvdBadLength:           {"rcvd_bad_length", false, "UC packets dropped: a payload length the message does not allow", "bad_length"},
	AsyncEventsDropped:      {"async_events_dropped", false, "asynchronous events dropped because the device's event queue was full", ""},
	RetransPkts:             {"retrans_pkts", false, "packets the requesters sent again (go-back-N and timeouts)", ""},
	NPCNPSent:               {"np_cnp_sent", false, "CNPs the DCQCN notification point sent (mlx5's name)", ""},
	NPECNMarkedRoCEPackets:  {"np_ecn_marked_roce_packets", false, "RoCE v2 packets received marked ECN Congestion Experienced (mlx5's name)", ""},
	RPCNPHandled:            {"rp_cnp_handled", false, "CNPs that cut a QP's rate at the DCQCN reaction point (mlx5's name)", ""},
	RPCNPIgnored:            {"rp_cnp_ignored", false, "CNPs received and ignored by the DCQCN reaction point (mlx5's name)", ""},
}

// CounterNames are the counters' names, indexed by Counter (CounterTable's
// names).
var CounterNames = func() (n [numCounters]string) {
	for i, c := range CounterTable {
		n[i] = c.Name
	}
	return n
}()

func (c Counter) String() string { return CounterNames[c] }

// Counters is a set of counters, per port or per QP.
type Counters [numCounters]atomic.Uint64

// Get returns one counter's value.
func (c *Counters) Get(k Counter) uint64 { return c[k].Load() }

// Snapshot returns every counter by name.
func (c *Counters) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, numCounters)
	for k := range c {
		m[CounterNames[k]] = c[k].Load()
	}
	return m
}

// QPInfo is what `rdma res show qp` shows of a QP (rxe fills the same
// fields from rxe_qp_to_attr: sq_psn is the requester's next PSN, rq_psn the
// responder's expected PSN).
type QPInfo struct {
	QPN     uint32
	Type    QPType
	State   QPState
	DestQPN uint32   // rqpn; meaningful for RC and UC from RTR on
	SQPSN   wire.PSN // next PSN the requester sends
	RQPSN   wire.PSN // PSN the responder expects next
	PDN     uint32   // the protection domain's number
	PathMTU MTU
	// RC requesters only (zero for other types): the congestion window
	// (cwnd.go), how many PSNs the requester may have unacknowledged now,
	// and the PSNs it has; the base (smallest) and latest round trips it
	// sampled (0: none yet), the window's cuts for delay so far, and the
	// local ACK timeouts found spurious (their cut given back).
	Cwnd             int
	InFlight         int
	MinRTT           time.Duration
	RTT              time.Duration
	CwndCuts         uint64
	SpuriousTimeouts uint64
}

// Info returns the QP's resource view. It takes the QP's mutex briefly.
func (q *QP) Info() QPInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	in := QPInfo{QPN: q.num, Type: q.typ, State: q.state, DestQPN: q.attr.DestQPN,
		SQPSN: q.req.psn, RQPSN: q.resp.psn, PDN: q.pd.pd.ID(), PathMTU: q.attr.PathMTU}
	if q.typ == RC {
		w := &q.req.win
		in.Cwnd, in.MinRTT, in.RTT, in.CwndCuts, in.SpuriousTimeouts = w.size(), w.minRTT, w.lastRTT, w.cuts, w.undone
		if q.req.sentAny {
			in.InFlight = max(int(q.req.maxSent.Next().Diff(q.comp.psn)), 0)
		}
	}
	return in
}

// QPs returns the device's live QPs in QPN order, for resource and
// statistics tools (rdma res show qp, rdma statistic qp show).
func (d *Device) QPs() []*QP {
	d.mu.RLock()
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.RUnlock()
	slices.SortFunc(qps, func(a, b *QP) int { return cmp.Compare(a.num, b.num) })
	return qps
}
