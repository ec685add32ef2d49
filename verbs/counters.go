package verbs

import (
	"cmp"
	"slices"
	"sync/atomic"

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

// CounterNames are the counters' names, indexed by Counter: rxe's first, in
// the order `rdma statistic show` prints them.
var CounterNames = [numCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
	"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
	"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs",
	"rcvd_bad_icrc", "rcvd_bad_header", "rcvd_bad_qp", "rcvd_bad_pkey", "rcvd_bad_qkey",
	"rcvd_bad_opcode", "rcvd_no_recv_wqe",
	"duplicate_request_dropped", "rcvd_bad_op_seq", "rcvd_bad_rkey", "rcvd_bad_length", "async_events_dropped",
	"retrans_pkts",
	"np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored",
}

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
}

// Info returns the QP's resource view. It takes the QP's mutex briefly.
func (q *QP) Info() QPInfo {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QPInfo{QPN: q.num, Type: q.typ, State: q.state, DestQPN: q.attr.DestQPN,
		SQPSN: q.req.psn, RQPSN: q.resp.psn, PDN: q.pd.pd.ID(), PathMTU: q.attr.PathMTU}
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
