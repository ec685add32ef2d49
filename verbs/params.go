package verbs

import "time"

// Device limits, as ibv_query_device reports them. The values follow Linux
// rxe's rxe_param.h where a user could depend on them (ibv_devinfo -v on the
// lab's rxe shows the same), so applications sized for rxe fit goroce.
const (
	MaxQP           = 1048560 // max_qp
	MaxQPWR         = 1048576 // max_qp_wr
	MaxSGE          = 32      // max_sge
	MaxSGERD        = 32      // max_sge_rd
	MaxCQ           = 1048576 // max_cq
	MaxCQE          = 32767   // max_cqe (rxe: (1 << 15) - 1)
	MaxMR           = 524287  // max_mr
	MaxMW           = 524287  // max_mw (the lab's rxe: 524287)
	MaxPD           = 1048576 // max_pd
	MaxQPRdAtom     = 128     // max_qp_rd_atom
	MaxQPInitRdAtom = 128     // max_qp_init_rd_atom
	MaxResRdAtom    = 258048  // max_res_rd_atom
	MaxSRQ          = 917503  // max_srq
	MaxSRQWR        = 1048576 // max_srq_wr
	MaxSRQSGE       = 27      // max_srq_sge
	MaxAH           = 32767   // max_ah
	// Multicast, as rxe_param.h: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH
	// (QPs per group), RXE_MAX_TOT_MCAST_QP_ATTACH (0x70000).
	MaxMcastGrp           = 8192   // max_mcast_grp
	MaxMcastQPAttach      = 56     // max_mcast_qp_attach
	MaxTotalMcastQPAttach = 458752 // max_total_mcast_qp_attach
	MaxInlineData         = 256    // max_inline_data (per QP cap)
	MaxMsgSize            = 0x800000
	MaxMRSize             = ^uint64(0) // max_mr_size
	GIDTableLen           = 1024       // gid_tbl_len
	PKeyTableLen          = 1          // pkey_tbl_len
	LocalCAAckDelay       = 15         // local_ca_ack_delay
	VendorID              = 0xFFFFFF   // vendor_id, as rxe
	PageSizeCap           = 0xFFFFF000 // page_size_cap
	AtomicCapHCA          = 1          // atomic_cap: ATOMIC_HCA
	firstQPN              = 17         // rxe hands out QPNs from 17 (0x11), as the traces show
	GSIQPN                = 1          // QP1, the General Services Interface
	maxRDMAReadBytes      = MaxMsgSize

	// maxPktPerAck: the requester sets AckReq at least every this many
	// packets of one message (rxe's RXE_MAX_PKT_PER_ACK).
	maxPktPerAck = 64
	// maxUnackedPSNs bounds the PSNs a requester has in flight before it
	// waits for ACKs (rxe: RXE_MAX_UNACKED_PSNS = 128). goroce allows more
	// so one QP can fill a fast link; well under 2^23, the PSN half-space.
	maxUnackedPSNs = 1024
	// The congestion window that keeps a requester under this bound
	// (initialCwnd, cwndFloor, the delay target) is in cwnd.go.

	// maxAsyncEvents bounds a device's queue of unread asynchronous events
	// (eventQueue); events beyond it are dropped and counted in
	// async_events_dropped. The kernel's queue has no bound; goroce's rule
	// is that a peer cannot make the device hold unbounded state.
	maxAsyncEvents = 4096
	// maxReadRecords bounds the RDMA READ and FLUSH requests an RC
	// responder remembers having executed (respState.reads), against which
	// it checks a duplicate before executing it again. A requester retries
	// only requests it still has outstanding, at most its max_rd_atomic
	// (max_qp_init_rd_atom, 128 on rxe and goroce); older duplicates are
	// stale network copies and are dropped.
	maxReadRecords = MaxQPInitRdAtom
	// maxPendingRdAtomic bounds the READ, ATOMIC and FLUSH responses an RC
	// responder holds waiting to be sent (respState.pend). A requester
	// within the limit of max_rd_atomic never has more outstanding; a new
	// request beyond it is a class C error (NAK Invalid Request, as for
	// too many RDMA READ/ATOMIC requests), a duplicate is dropped.
	maxPendingRdAtomic = MaxQPRdAtom
	// burstBytes bounds what one QP sends in one turn of the device's
	// scheduler (sched.go): READ responses, retransmissions and other bulk
	// work go out in bursts of at most this many bytes, the QPs with work
	// taking turns, so one QP cannot hold the device (rxe's tasks yield the
	// same way after RXE_MAX_ITERATIONS packets). 64 KiB is the transmit
	// batch (txFlushBytes): 16 packets at path MTU 4096, 64 at 1024.
	burstBytes = txFlushBytes
)

// The bulk work's share of the time while other QPs are active (sched.go,
// timeShare).
const (
	// shareNum/shareDen: the bulk turns' fraction of the time while
	// another QP is active; a half: two parties, the bulk work and the
	// rest, each get half. On the benchmark VM a legitimate connection kept
	// 0.54–0.65 of its rate beside a hostile READ (medians of four sets of
	// eight paired rounds; 0.33–0.44 before), the READ at 0.41 of its
	// speed alone (BENCHMARKS.md, ReadFairness).
	shareNum, shareDen = 1, 2
	// shareActive: a QP without bulk work that had a packet this recently
	// is active. A connection doing small operations one at a time sends
	// one every few tens of µs; 2 ms spans a stall of a busy machine.
	shareActive = int64(2 * time.Millisecond)
	// shareCap bounds the time the bulk work saves up (a turn may go while
	// the balance is not negative) and the time it may owe: a wait is at
	// most shareCap·shareDen/shareNum, 1 ms, however long a turn took (a
	// thread the OS preempted in it).
	shareCap = int64(500 * time.Microsecond)
)

// TimeoutDuration returns the local ACK timeout for the QP attribute
// timeout: 4.096 µs × 2^timeout (IBTA §11.2.4.2, C9-140); 0 means infinite.
func TimeoutDuration(timeout uint8) time.Duration {
	if timeout == 0 {
		return 0
	}
	return time.Duration(4096<<min(timeout, 31)) * time.Nanosecond
}

// infiniteRetry is the retry_cnt value rxe treats as "retry forever".
const infiniteRetry = 7

// infiniteRNRRetry is the rnr_retry value that means "retry forever" (IBTA §9.7.5.2.8).
const infiniteRNRRetry = 7
