// Package verbs is goroce's RDMA verbs API and the engine behind it: what an
// ibverbs user does with libibverbs, in Go, and what Linux rxe does below
// it. A Device runs on any link.Link (the in-memory fabric, UDP sockets, raw
// Ethernet; package host binds one to a netdev); on it you allocate
// protection domains, register memory, create completion queues and queue
// pairs, move QPs through RESET → INIT → RTR → RTS with Modify, and post
// work requests.
//
//	dev, _ := verbs.Open(verbs.DeviceConfig{Name: "rxe0", Link: l, GIDs: gids})
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(256)
//	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: ...})
//	qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, ...}, verbs.AttrState|...)
//	qp.PostSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{mr.SGE(0, n)}, ...})
//	n, err := cq.PollWait(ctx, wcs)
//
// Names follow ibverbs: statuses print as IBV_WC_RETRY_EXC_ERR, events as
// IBV_EVENT_QP_FATAL, counters as rxe names them (sent_pkts,
// retry_exceeded_err). Errors of the control path wrap syscall.Errno
// (EINVAL names the attribute and the valid values); errors of the data path
// arrive in completions, whose Detail says what happened in words.
//
// # The engine
//
// The RC, UC and UD transports of IBTA Vol 1 chapter 9 run here, one file
// per role as Linux rxe splits them: req.go (the requester: work requests
// to packets), resp.go (the responder: requests to data placement, ACKs and
// READ responses), comp.go (the completer: ACKs to completions, retry and
// RNR timers), sched.go (the turns QPs with bulk work take), cq.go,
// queues.go and events.go. Memory protection is internal/mem's. The engine
// talks to the network only through a link.Link and never opens a socket
// or reads a file.
//
// Concurrency: each QP's requester, responder and completer run under the
// QP's mutex, called from the goroutine that posts a work request, from the
// device's one receive goroutine, or from the QP's retransmit and RNR timers.
// No goroutine is started per packet or per work request. Every method may
// be called from any goroutine.
//
// Short paths: the common case of a latency-bound program — an RC SEND ONLY
// into a posted receive (resp.go shortSend), the ACK of the only WQE
// outstanding (comp.go shortACK), PostSend of one SEND while the requester
// is idle (req.go shortPost) — runs in one function each, which checks
// everything the general path would decide before it changes anything and
// otherwise leaves the packet or the WQE to the general path untouched.
// Tests run every case both ways and compare all that a program or a peer
// can see (short_test.go, shortpost_test.go).
//
// # Congestion control
//
// Device.SetECN turns on DCQCN, the congestion control of hardware RoCE
// (dcqcn.go, ecn.go): the notification point answers RoCE v2 packets that a
// switch marked ECN Congestion Experienced with CNPs (BTH opcode 0x81) to
// the sending QP, and the reaction point marks the QP's request packets
// ECN-capable and cuts its rate on each CNP, then raises it again by timer
// and byte counter, pacing through the same hook as the rate limit. Both
// are off by default, and then nothing on the wire changes. Enable them
// when RoCE v2 crosses a routed, shared bottleneck whose queue marks ECN
// (switches with RED/ECN, a router with nft's "ip ecn set ce"): the NP on
// receivers, the RP on senders, as mlx5 ports do. On a direct link or a
// queue that does not mark they change nothing but the ECN bits. Counters:
// np_cnp_sent, np_ecn_marked_roce_packets, rp_cnp_handled, rp_cnp_ignored
// (mlx5's names). What Linux rxe peers make of goroce's CNPs is not yet
// checked in the lab (issue 16 item 7).
package verbs
