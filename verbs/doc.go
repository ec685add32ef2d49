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
package verbs
