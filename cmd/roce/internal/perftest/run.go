package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Result holds the table lines a run printed: a BW server of WRITE, READ
// and atomics prints the client's report, as perftest does. With -b each
// line of BW is the sum of both sides' reports (but for SEND with -D) and
// Local holds this side's own report of each.
type Result struct {
	BW    []BWReport
	Lat   []LatReport
	Local []BWReport
}

// qpRes is one QP with its buffer: the first half is what this side sends
// from (and where READ and atomic results land), the second half is what
// the peer writes, reads, adds to or sends into (the VAddr it is told).
// With -c UD a cache line more follows, and a received SEND's payload
// lands there (rOff), after the 40 bytes of GRH before it, as perftest
// lays out its UD receives.
type qpRes struct {
	buf    []byte
	half   int
	rOff   int       // where a received message's payload starts
	grh    int       // bytes a receive holds before the payload: the GRH with UD
	ah     *verbs.AH // UD: the peer's address
	mr     *verbs.MR
	scq    *verbs.CQ
	rcq    *verbs.CQ
	qp     *verbs.QP
	my     Dest
	rem    Dest
	posted int // receives posted for the current size
}

func (q *qpRes) sendRegion(n int) []byte { return q.buf[:n] }
func (q *qpRes) recvRegion(n int) []byte { return q.buf[q.rOff : q.rOff+n] }

// run is one test's state.
type run struct {
	*params
	dev      *verbs.Device
	out      io.Writer
	cm       *comm
	cmd      cmData // -R: the test QPs' CM IDs
	pd       *verbs.PD
	qps      []*qpRes
	mtu      verbs.MTU
	gidIndex int
	outReads int
	res      Result
}

// patterns the client sends and the server exposes, for Verify.
func patternA(i int) byte { return byte(i*7 + 1) }
func patternB(i int) byte { return byte(i*13 + 5) }

// Run runs one perftest test on dev, as the client when c.Server is set,
// else as the server (which serves one client and returns). With
// c.RDMACM, dev may be nil: the device is then the one c.CM routes the
// exchange's connection through. When ctx ends first, the error is
// ctx's (context.Canceled for an interrupted run).
func Run(ctx context.Context, dev *verbs.Device, c Config) (*Result, error) {
	t := &tracker{stage: "before the exchange"}
	res, err := runTest(ctx, dev, c, t)
	if err != nil && ctx.Err() != nil {
		// Whatever failed failed because ctx ended: a closed listener, a
		// socket past its deadline, an event channel's wait. Say how far
		// the run got: "context canceled after 1234 of 5000 iterations".
		return nil, fmt.Errorf("%w %s", context.Cause(ctx), t)
	}
	return res, err
}

// tracker is how far a run got, for the error of an interrupted one.
type tracker struct {
	mu    sync.Mutex
	stage string         // guarded by mu: what the run is doing
	count *atomic.Uint64 // guarded by mu: messages (BW) or iterations (latency) of the current size
	size  int            // guarded by mu
	lat   bool           // guarded by mu
	p     *params        // guarded by mu: the run's -n and -D
	sizes int            // guarded by mu: sizes done before the current one
}

func (t *tracker) setStage(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stage, t.count = s, nil
}

// traffic notes that a size's traffic started, counted by count.
func (t *tracker) traffic(count *atomic.Uint64, size int, lat bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count != nil && t.size != size {
		t.sizes++
	}
	t.count, t.size, t.lat = count, size, lat
}

func (t *tracker) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.count == nil {
		return t.stage
	}
	what := "messages"
	if t.lat {
		what = "iterations"
	}
	s := fmt.Sprintf("after %d %s of %d bytes", t.count.Load(), what, t.size)
	switch {
	case t.p != nil && t.p.Duration > 0:
		s += fmt.Sprintf(" (-D %d)", t.p.Duration/time.Second)
	case t.p != nil:
		s = fmt.Sprintf("after %d of %d %s of %d bytes", t.count.Load(), t.p.Iters, what, t.size)
	}
	if t.p != nil && t.p.All {
		s += fmt.Sprintf(", %d sizes done", t.sizes)
	}
	return s
}

func runTest(ctx context.Context, dev *verbs.Device, c Config, t *tracker) (*Result, error) {
	p, err := c.resolve()
	if err != nil {
		return nil, err
	}
	p.track = t
	t.mu.Lock()
	t.p = p
	t.mu.Unlock()
	r := &run{params: p, dev: dev, out: c.Out}
	if r.out == nil {
		r.out = io.Discard
	}
	if p.RDMACM {
		if p.CM == nil {
			return nil, errors.New("-R: no RDMA CM to connect through")
		}
		if p.client {
			t.setStage(fmt.Sprintf("while connecting to %s port %d through RDMA CM", p.Server, p.Port))
		} else {
			t.setStage(fmt.Sprintf("while waiting for a client on port %d (RDMA CM)", p.Port))
		}
		if err := r.cmComm(ctx); err != nil {
			return nil, err
		}
		defer r.cm.Close()
	} else if dev == nil {
		return nil, errors.New("no device")
	}
	if r.Device == "" {
		r.Device = r.dev.Name()
	}
	pa, err := r.dev.QueryPort(p.IBPort)
	if err != nil {
		return nil, err
	}
	r.mtu = pa.ActiveMTU
	if p.MTU != 0 {
		if m := verbs.MTUFromBytes(p.MTU); m <= pa.ActiveMTU {
			r.mtu = m
		} else {
			fmt.Fprintf(r.out, "Requested mtu is higher than active mtu \nChanging to active mtu - %d\n", pa.ActiveMTU)
		}
	}
	if err := r.pickGID(); err != nil {
		return nil, err
	}
	r.outReads = 1
	if p.Verb == Read || p.Verb == Atomic {
		r.outReads = r.dev.Query().MaxQPRdAtom
		if p.OutReads > r.outReads && p.Progress != nil {
			// ctx_set_out_reads's words: perftest runs on, with the maximum.
			fmt.Fprintf(p.Progress, " Number of outstanding reads is above max = %d\n Changing to that max value\n", r.outReads)
		}
		if p.OutReads > 0 {
			r.outReads = min(p.OutReads, r.outReads)
		}
	}
	if !p.RDMACM {
		if p.client {
			t.setStage(fmt.Sprintf("while connecting to %s port %d", p.Server, p.Port))
			r.cm, err = dialComm(ctx, p.Dial, p.Server, p.Port)
		} else {
			t.setStage(fmt.Sprintf("while waiting for a client on port %d", p.Port))
			if p.Listener != nil {
				t.setStage("while waiting for a client on " + p.Listener.Addr().String())
			}
			fmt.Fprint(r.out, waitBanner)
			r.cm, err = acceptComm(ctx, p.Listener, p.Port)
		}
		if err != nil {
			return nil, err
		}
		defer r.cm.Close()
	}
	t.setStage("during the exchange of QP data")
	r.cm.gidIndex = r.gidIndex
	defer r.destroy()
	if err := r.cm.versions(p.Duration); err != nil {
		return nil, err
	}
	if err := r.agreeDuration(c); err != nil {
		return nil, err
	}
	cycle, line, err := r.cm.sysData(pageSize, cacheLine)
	if err != nil {
		return nil, fmt.Errorf("Failed to exchange Page Size data between server and client: %w", err)
	}
	m, err := r.cm.mtu(int(r.mtu))
	if err != nil {
		return nil, err
	}
	r.mtu = verbs.MTU(m)
	if r.Connection == "UD" && r.Size > r.mtu.Bytes() {
		// A UD message is one packet (check_link); -a's sizes stop there.
		if r.All && p.Progress != nil {
			fmt.Fprintf(p.Progress, " Max msg size in UD is MTU %d\n Changing to this MTU\n", r.mtu.Bytes())
		}
		r.Size = r.mtu.Bytes()
	}
	if err := r.create(cycle, line); err != nil {
		return nil, err
	}
	if p.RDMACM {
		if err := r.connectCM(ctx); err != nil {
			return nil, err
		}
	}
	r.banner(r.out, r.mtu.Bytes(), r.gidIndex, r.outReads)
	if err := r.connectAll(); err != nil {
		return nil, err
	}
	switch {
	case p.Lat:
		err = r.latency(ctx)
	case p.Verb == Send:
		err = r.sendBW(ctx)
	default:
		err = r.rdmaBW(ctx)
	}
	if err != nil {
		return nil, err
	}
	return &r.res, nil
}

// agreeDuration makes both sides of a goroce-to-goroce run use one -D:
// the client's if it has one, else the server's. perftest's exchange does
// not carry -D, and perftest with -D on one side only hangs with SEND (in
// the lab, ib_send_bw -D 3 against a server without -D: the client prints
// its row and waits forever for the server's last handshake, the server
// for receives the client no longer sends; the reverse alike); with a
// goroce peer, which says its -D after the version string, the side
// without it (or with another) takes the other's and says so. Against
// perftest nothing changes.
func (r *run) agreeDuration(c Config) error {
	rem := r.cm.remDuration
	if !r.cm.remGoroce || rem == r.Duration || rem == 0 && !r.client {
		return nil
	}
	if r.client && r.Duration != 0 {
		return nil // the server takes ours
	}
	peer := "client"
	if r.client {
		peer = "server"
	}
	c.Duration = rem
	p, err := c.resolve()
	if err != nil {
		return fmt.Errorf("the %s runs for %v (-D %d): %w", peer, rem, rem/time.Second, err)
	}
	if r.Progress != nil {
		was := fmt.Sprintf("-n %d", r.Iters)
		if r.Duration != 0 {
			was = fmt.Sprintf("-D %d", r.Duration/time.Second)
		}
		fmt.Fprintf(r.Progress, "roce perf: the %s runs for %d s (-D %d): so does this side, not %s\n", peer, rem/time.Second, rem/time.Second, was)
	}
	p.Device = r.Device
	p.track = r.track
	if p.track != nil {
		p.track.mu.Lock()
		p.track.p = p
		p.track.mu.Unlock()
	}
	r.params = p
	return nil
}

// cmComm opens -R's exchange: the server listens on Port and serves the
// first connection, the client connects to Server. The run's device is
// the connection's.
func (r *run) cmComm(ctx context.Context) error {
	var err error
	if r.client {
		r.cm, err = dialCMComm(ctx, r.CM, r.Server, r.Port)
	} else {
		// perftest prints this before it listens; goroce once it does, so
		// that whoever waits for it may start the client.
		r.cm, err = listenCMComm(ctx, r.CM, r.Port, func() { fmt.Fprint(r.out, waitBanner) })
	}
	if err != nil {
		return err
	}
	d := r.cm.cmDevice()
	if r.dev != nil && d != r.dev {
		r.cm.Close()
		return fmt.Errorf("-R: RDMA CM routes %s through device %s, not %s", r.Server, d.Name(), r.dev.Name())
	}
	r.dev = d
	return nil
}

// pickGID is set_up_connection's choice: -x as given, else
// get_best_gid_index (an IPv4-mapped GID unless --ipv6, then RoCE v2).
func (r *run) pickGID() error {
	gids := r.dev.GIDs()
	if r.GIDIndex >= 0 {
		if r.GIDIndex >= len(gids) || !gids[r.GIDIndex].GID.IsValid() {
			return fmt.Errorf("-x %d: no such GID index: the port has %d GIDs, 0 to %d (roce gids shows which to use)", r.GIDIndex, len(gids), len(gids)-1)
		}
		r.gidIndex = r.GIDIndex
		return nil
	}
	if len(gids) == 0 {
		return errors.New("the port has no GIDs")
	}
	best := 0
	for i := 1; i < len(gids); i++ {
		b4, i4 := gids[best].GID.Unmap().Is4(), gids[i].GID.Unmap().Is4()
		switch {
		case i4 && !b4 && !r.IPv6, !i4 && b4 && r.IPv6:
			best = i
		case i4 == b4 && gids[i].Type == verbs.GIDTypeRoCEv2 && gids[best].Type != verbs.GIDTypeRoCEv2:
			best = i
		}
	}
	r.gidIndex = best
	return nil
}

// create makes the PD, and per QP a buffer, MR, CQs and, without -R, an
// RC QP in INIT (ctx_init, ctx_modify_qp_to_init); with -R the QPs are
// made through RDMA CM (connectCM).
func (r *run) create(cycle, line int) error {
	var err error
	if r.pd, err = r.dev.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	half := (max(r.Size, cycle) + line - 1) / line * line
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	qpAccess := map[Verb]verbs.Access{Send: verbs.AccessRemoteWrite | verbs.AccessLocalWrite, Write: verbs.AccessRemoteWrite,
		Read: verbs.AccessRemoteRead, Atomic: verbs.AccessRemoteAtomic}[r.Verb]
	n := r.NumQPs
	for i := 0; i < n; i++ {
		q := &qpRes{half: half, rOff: half}
		extra := 0
		if r.Connection == "UD" {
			extra, q.rOff, q.grh = line, half+line, udAddition
		}
		q.buf = alignedBuf(2*half+extra, pageSize)
		for j := range half {
			q.buf[j] = patternA(j)
			q.buf[half+j] = patternB(j)
		}
		if r.Verb == Atomic {
			clear(q.buf[half : half+8])
		}
		if q.mr, err = r.pd.RegMR(q.buf, access); err != nil {
			return fmt.Errorf("Couldn't allocate MR: %w", err)
		}
		r.qps = append(r.qps, q)
		depth := r.TxDepth + 16
		if q.scq, err = r.dev.CreateCQ(depth); err != nil {
			return fmt.Errorf("Couldn't create CQ: %w", err)
		}
		if q.rcq, err = r.dev.CreateCQ(r.RxDepth + 16); err != nil {
			return fmt.Errorf("Couldn't create CQ: %w", err)
		}
		if r.RDMACM {
			continue
		}
		if q.qp, err = r.pd.CreateQP(r.qpInit(q)); err != nil {
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		init, mask := &verbs.QPAttr{State: verbs.QPSInit, PortNum: uint8(r.IBPort), AccessFlags: qpAccess},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags
		if r.Connection == "UD" { // a Q_Key, no access flags
			init.QKey, mask = defQKey, mask&^verbs.AttrAccessFlags|verbs.AttrQKey
		}
		err = q.qp.Modify(init, mask)
		if err != nil {
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		if err := r.setMy(q); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) qpInit(q *qpRes) verbs.QPInitAttr {
	typ := verbs.RC
	switch r.Connection {
	case "UC":
		typ = verbs.UC
	case "UD":
		typ = verbs.UD
	}
	return verbs.QPInitAttr{Type: typ, SendCQ: q.scq, RecvCQ: q.rcq,
		Cap: verbs.QPCap{MaxSendWR: r.TxDepth, MaxRecvWR: r.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// setMy fills q's data as set_up_connection does: a random PSN (which,
// with -R, nobody uses), the rkey and the address of the buffer's second
// half, the GID of the chosen index.
func (r *run) setMy(q *qpRes) error {
	gid, err := r.dev.GID(r.gidIndex)
	if err != nil {
		return err
	}
	q.my = Dest{OutReads: uint32(r.outReads), QPN: q.qp.Num(), PSN: rand.Uint32() & 0xffffff,
		RKey: q.mr.RKey(), VAddr: q.mr.Addr() + uint64(q.half), GID: gid.GID}
	return nil
}

// alignedBuf returns n bytes starting at a multiple of align, as
// perftest's memalign'd buffers do (atomics need 8-byte alignment).
func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	off := int(uintptr(unsafe.Pointer(&b[0])) % uintptr(align))
	if off != 0 {
		off = align - off
	}
	return b[off : off+n : off+n]
}

func (r *run) destroy() {
	if r.cmd.ids != nil || r.cmd.ec != nil {
		r.cmd.close() // the IDs destroy their QPs
		for _, q := range r.qps {
			q.qp = nil
		}
	}
	for _, q := range r.qps {
		if q.qp != nil {
			q.qp.Destroy()
		}
		if q.scq != nil {
			q.scq.Destroy()
		}
		if q.rcq != nil {
			q.rcq.Destroy()
		}
		if q.mr != nil {
			q.mr.Dereg()
		}
	}
}

// hs is a bare synchronizing handshake on QP 0's data.
func (r *run) hs() error {
	_, err := r.cm.handShake(r.qps[0].my)
	return err
}

// connectAll is the middle of every test's main(): exchange the QPs'
// data, move them to RTR and RTS (ctx_connect), print both sides'
// addresses, with the extra handshakes each tool has where it has them.
func (r *run) connectAll() error {
	if r.Lat && r.Verb != Send {
		if err := r.hs(); err != nil {
			return err
		}
	}
	for _, q := range r.qps {
		rem, err := r.cm.handShake(q.my)
		if err != nil {
			return err
		}
		q.rem = rem
	}
	if !r.RDMACM { // with -R, RDMA CM has connected the QPs
		if r.qps[0].my.GID.Unmap().Is4() != r.qps[0].rem.GID.Unmap().Is4() {
			return errors.New("Found Incompatibility issue with GID types. Please Try to use a different IP version")
		}
		for _, q := range r.qps {
			if err := r.connect(q); err != nil {
				return fmt.Errorf("Unable to Connect the HCA's through the link: %w", err)
			}
		}
	}
	if r.Verb == Send {
		if err := r.hs(); err != nil {
			return err
		}
	}
	for _, q := range r.qps {
		r.printDest(r.out, "local", q.my)
	}
	for _, q := range r.qps {
		if _, err := r.cm.handShake(q.my); err != nil {
			return err
		}
		r.printDest(r.out, "remote", q.rem)
	}
	if r.Verb != Send {
		return r.hs() // "An additional handshake is required after moving qp to RTR."
	}
	return nil
}

func (r *run) connect(q *qpRes) error {
	ah := verbs.AHAttr{PortNum: uint8(r.IBPort), IsGlobal: true,
		GRH: verbs.GlobalRoute{DGID: q.rem.GID, SGIDIndex: uint8(r.gidIndex), HopLimit: 0xff}}
	rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: r.mtu, DestQPN: q.rem.QPN, RQPSN: wire.PSN(q.rem.PSN),
		MaxDestRdAtomic: uint8(q.my.OutReads), MinRNRTimer: minRNRTimer, AH: ah}
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: wire.PSN(q.my.PSN), Timeout: uint8(r.QPTimeout), RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: uint8(min(q.rem.OutReads, 255))}
	rtsMask := verbs.AttrState | verbs.AttrSQPSN
	switch r.Connection {
	case "RC": // UC has no responder resources, RNR timer, timeout or retries
		rtrMask |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		rtsMask |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	case "UD": // no path or peer in the QP: each SEND names them (the AH)
		rtrMask = verbs.AttrState
		var err error
		if q.ah, err = r.pd.CreateAH(ah); err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
	}
	if err := q.qp.Modify(rtr, rtrMask); err != nil {
		return fmt.Errorf("Failed to modify QP %d to RTR: %w", q.qp.Num(), err)
	}
	if err := q.qp.Modify(rts, rtsMask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// sendWR is the work request a client posts (ctx_set_send_reg_wqes).
func (r *run) sendWR(q *qpRes, size int) verbs.SendWR {
	wr := verbs.SendWR{SGList: []verbs.SGE{q.mr.SGE(0, size)}, RemoteAddr: q.rem.VAddr, RKey: q.rem.RKey}
	switch r.Verb {
	case Send:
		wr.Opcode = verbs.WRSend
		if r.Connection == "UD" {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = q.ah, q.rem.QPN, defQKey
			wr.RemoteAddr, wr.RKey = 0, 0
		}
	case Write:
		wr.Opcode = verbs.WRRDMAWrite
	case Read:
		wr.Opcode = verbs.WRRDMARead
	case Atomic:
		wr.Opcode = verbs.WRAtomicCmpAndSwp
		wr.CompareAdd, wr.Swap = 0, atomicSwap
		if r.atomicFA {
			wr.Opcode, wr.CompareAdd = verbs.WRAtomicFetchAndAdd, atomicAdd
		}
	}
	return wr
}

// postRecvs posts receives of size bytes into the receive region until n
// are outstanding for this size (ctx_set_recv_wqes).
func (r *run) postRecvs(q *qpRes, size, n int) error {
	for range n {
		if err := q.qp.PostRecv(verbs.RecvWR{WRID: 0, SGList: []verbs.SGE{q.mr.SGE(q.rOff-q.grh, size+q.grh)}}); err != nil {
			return fmt.Errorf("Couldn't post recv: %w", err)
		}
		q.posted++
	}
	return nil
}

func wcError(wc verbs.WC, what string) error {
	msg := fmt.Sprintf("Completion with error at %s: %s (%d) wr_id %d", what, wc.Status, wc.Status, wc.WRID)
	if wc.Detail != "" {
		msg += ": " + wc.Detail
	}
	return errors.New(msg)
}

// checkData is Verify's comparison.
func checkData(what string, got []byte, want func(int) byte) error {
	for i, b := range got {
		if b != want(i) {
			return fmt.Errorf("data check failed: %s: byte %d is %#02x, want %#02x", what, i, b, want(i))
		}
	}
	return nil
}

var _ = netip.Addr{}
