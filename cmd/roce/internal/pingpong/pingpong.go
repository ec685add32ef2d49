// Package pingpong is rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong in Go, wire-compatible with them in both roles: the same
// TCP exchange of "LID:QPN:PSN:GID" on port 18515 ending with the client's
// "done", the same QP attributes, the same traffic and the same output.
package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Config mirrors the pingpong tools' options.
type Config struct {
	Type     verbs.QPType // RC, UC or UD
	Server   string       // the server's address (client role); "" = server role
	Port     int          // TCP port of the exchange (-p), default 18515
	IBPort   int          // -i, default 1
	Size     int          // -s, default 4096 (UD: 2048)
	MTU      verbs.MTU    // -m (RC/UC), default 1024
	RxDepth  int          // -r, default 500
	Iters    int          // -n, default 1000
	SL       int          // -l
	Events   bool         // -e: sleep on CQ events instead of polling
	Check    bool         // -c: validate received buffers (rdma-core's --chk)
	GIDIndex int          // -g; -1: no GID (which RoCE cannot use)
	Out      io.Writer    // where the tool's output goes
	// Dial, if set, opens the client role's TCP connection (tests dial from
	// inside another network namespace); otherwise net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Listener, if set, is the server role's listening socket (tests use an
	// ephemeral port); otherwise the server listens on Port.
	Listener net.Listener
	// Notice, if set, hears what a wait of over two seconds is waiting for
	// (the TCP exchange, a client, the peer's messages), once per wait,
	// with what the link knows about the path when the peer is silent.
	Notice func(format string, args ...any)

	stats *pollStats // tests: how the run waited for completions
}

const (
	recvWRID = 1
	sendWRID = 2
	udQKey   = 0x11111111
	grhLen   = 40
)

// Defaults fills the tools' defaults into zero fields.
func (c *Config) Defaults() {
	if c.Port == 0 {
		c.Port = 18515
	}
	if c.IBPort == 0 {
		c.IBPort = 1
	}
	if c.Size == 0 {
		c.Size = 4096
		if c.Type == verbs.UD {
			c.Size = 2048
		}
	}
	if c.MTU == 0 {
		c.MTU = verbs.MTU1024
	}
	if c.RxDepth == 0 {
		c.RxDepth = 500
	}
	if c.Iters == 0 {
		c.Iters = 1000
	}
}

// Dest is what each side tells the other: struct pingpong_dest.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID netip.Addr // all zeros when no GID index was given
}

// msgLen is sizeof "0000:000000:000000:00000000000000000000000000000000",
// the NUL included: the tools write and read exactly that many bytes.
const msgLen = 52

// Marshal formats d as the tools do ("%04x:%06x:%06x:%s" with the GID as
// 32 hex digits, gid_to_wire_gid), NUL-padded to msgLen.
func (d Dest) Marshal() []byte {
	g := d.GID.As16()
	s := fmt.Sprintf("%04x:%06x:%06x:%x", d.LID, d.QPN, d.PSN, g[:])
	b := make([]byte, msgLen)
	copy(b, s)
	return b
}

// ParseDest parses a message written by Marshal or by the tools.
func ParseDest(b []byte) (Dest, error) {
	s := string(b)
	for i, c := range s {
		if c == 0 {
			s = s[:i]
			break
		}
	}
	var d Dest
	if len(s) != msgLen-1 || s[4] != ':' || s[11] != ':' || s[18] != ':' {
		return d, fmt.Errorf("malformed address message %q", s)
	}
	lid, err1 := strconv.ParseUint(s[0:4], 16, 16)
	qpn, err2 := strconv.ParseUint(s[5:11], 16, 24)
	psn, err3 := strconv.ParseUint(s[12:18], 16, 24)
	var g [16]byte
	var err4 error
	for i := 0; i < 16 && err4 == nil; i++ {
		var v uint64
		v, err4 = strconv.ParseUint(s[19+2*i:21+2*i], 16, 8)
		g[i] = byte(v)
	}
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return d, fmt.Errorf("malformed address message %q: %w", s, err)
	}
	return Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn), GID: netip.AddrFrom16(g)}, nil
}

func gidString(g netip.Addr) string {
	if !g.IsValid() {
		return "::"
	}
	return g.String() // inet_ntop(AF_INET6): ::ffff:192.0.2.1 for IPv4-mapped
}

// Run runs one pingpong on dev. When ctx ends first, the error wraps
// ctx's cause and says how far the run got: "context canceled after 412
// of 1000 iterations".
func Run(ctx context.Context, dev *verbs.Device, c Config) error {
	c.Defaults()
	var p progress
	err := run(ctx, dev, c, &p)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w %s", context.Cause(ctx), p.String())
	}
	return err
}

// progress is how far a run got, for an interrupted run's error.
type progress struct {
	stage      string // what the run was doing, before the iterations
	rcnt, scnt int    // iterations received and sent, once they started
	iters      int
	iterating  bool
}

func (p *progress) String() string {
	if !p.iterating {
		return p.stage
	}
	return fmt.Sprintf("after %d of %d iterations (%d received, %d sent)", min(p.rcnt, p.scnt), p.iters, p.rcnt, p.scnt)
}

func run(ctx context.Context, dev *verbs.Device, c Config, prog *progress) error {
	prog.stage = "before the exchange"
	if c.GIDIndex < 0 {
		// rdma-core's tools run on and fail once the QP is connected;
		// every goroce device is RoCE.
		return fmt.Errorf("no GID index: RoCE needs a GID: pass -g N (roce gids shows which index): %w", syscall.EINVAL)
	}
	// A device that dies (its link's receive path failed) completes nothing
	// more, and a QP whose peer answered before retries forever (retry_cnt
	// 7, as on rxe): end the run with the device's word instead of waiting.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchFatal(ctx, dev, cancel)
	w := startWatch(c.Notice)
	defer w.close()
	s := &session{c: c, dev: dev, out: c.Out, ud: c.Type == verbs.UD}
	if s.out == nil {
		s.out = io.Discard
	}
	defer s.close()
	if err := s.setup(); err != nil {
		return err
	}
	if err := s.exchange(ctx, w, prog); err != nil {
		return err
	}
	return s.iterate(ctx, w, prog)
}

// session is one run's resources and what it learned, from setup to the
// last iteration.
type session struct {
	c      Config
	dev    *verbs.Device
	out    io.Writer
	ud     bool
	buf    []byte // bufLen bytes: for UD, room for the GRH before the message
	bufLen int
	pd     *verbs.PD
	mr     *verbs.MR
	cq     *verbs.CQ
	qp     *verbs.QP
	ah     *verbs.AH // UD: the peer's
	routs  int       // receives posted
	my     Dest
	rem    Dest
}

// setup creates the PD, MR, CQ and QP, takes the QP to INIT, posts the
// receives and prints the local address, as the tools' pp_init_ctx and
// main do before the exchange.
func (s *session) setup() error {
	c, dev := s.c, s.dev
	if s.ud {
		pa, err := dev.QueryPort(c.IBPort)
		if err != nil {
			return err
		}
		if mtu := pa.ActiveMTU.Bytes(); c.Size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d): pass -s %d or less (UD sends one packet per message)", mtu, mtu)
		}
	}
	s.bufLen = c.Size
	if s.ud {
		s.bufLen += grhLen
	}
	s.buf = make([]byte, s.bufLen)
	for i := range s.buf {
		s.buf[i] = 0x7b
	}
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	if s.cq, err = dev.CreateCQ(c.RxDepth + 1); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: c.Type, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: c.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	s.qp = qp
	init := &verbs.QPAttr{State: verbs.QPSInit, PKeyIndex: 0, PortNum: uint8(c.IBPort), QKey: udQKey}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if s.ud {
		mask |= verbs.AttrQKey
	} else {
		mask |= verbs.AttrAccessFlags
	}
	if err := qp.Modify(init, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	s.routs = s.postRecv(c.RxDepth)
	if s.routs < c.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", s.routs)
	}
	s.my = Dest{QPN: qp.Num(), PSN: rand.Uint32() & 0xffffff}
	g, err := dev.GID(c.GIDIndex)
	if err != nil {
		return fmt.Errorf("can't read sgid of index %d (roce gids shows the GIDs): %w", c.GIDIndex, err)
	}
	s.my.GID = g.GID
	sep := ","
	if s.ud {
		sep = ":" // ibv_ud_pingpong prints "PSN 0x…: GID"
	}
	my := s.my
	fmt.Fprintf(s.out, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", my.LID, my.QPN, my.PSN, sep, gidString(my.GID))
	return nil
}

// close destroys what setup created, the last first.
func (s *session) close() {
	if s.qp != nil {
		s.qp.Destroy()
	}
	if s.cq != nil {
		s.cq.Destroy()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
}

// postRecv posts n receives of the whole buffer and returns how many it
// posted.
func (s *session) postRecv(n int) int {
	sge := s.mr.SGE(0, s.bufLen)
	for i := 0; i < n; i++ {
		if s.qp.PostRecv(verbs.RecvWR{WRID: recvWRID, SGList: []verbs.SGE{sge}}) != nil {
			return i
		}
	}
	return n
}

// connect takes the QP to RTR and RTS towards rem (pp_connect_ctx); for
// UD it creates the address handle to rem instead of a path.
func (s *session) connect(rem Dest) error {
	c, qp := s.c, s.qp
	global := rem.GID.IsValid() && rem.GID != netip.IPv6Unspecified() && !isZeroIID(rem.GID)
	if !global {
		// The tools leave the path without a GRH, which RoCE cannot
		// send (rxe: "ah_attr.is_global is 0").
		return noPeerGID(c.Server != "")
	}
	ahAttr := verbs.AHAttr{PortNum: uint8(c.IBPort), SL: uint8(c.SL), IsGlobal: true,
		GRH: verbs.GlobalRoute{HopLimit: 1, DGID: rem.GID, SGIDIndex: uint8(c.GIDIndex)}}
	if s.ud {
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
			return fmt.Errorf("Failed to modify QP to RTR: %w", err)
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: pingPSN(s.my.PSN)}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
		var err error
		if s.ah, err = s.pd.CreateAH(ahAttr); err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		return nil
	}
	rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: c.MTU, DestQPN: rem.QPN, RQPSN: pingPSN(rem.PSN),
		MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: ahAttr}
	m := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	if c.Type == verbs.RC {
		m |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	}
	if err := qp.Modify(rtr, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	rts := &verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: pingPSN(s.my.PSN), MaxRdAtomic: 1}
	m = verbs.AttrState | verbs.AttrSQPSN
	if c.Type == verbs.RC {
		m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	if err := qp.Modify(rts, m); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// exchange trades addresses with the peer over TCP, as the client or the
// server, and connects: the server before it answers, the client after.
func (s *session) exchange(ctx context.Context, w *watcher, prog *progress) error {
	c := s.c
	var err error
	if c.Server != "" {
		w.set(func() string {
			return fmt.Sprintf("the server at %s, TCP port %d, to exchange QP numbers", c.Server, c.Port)
		})
		prog.stage = fmt.Sprintf("while exchanging addresses with %s port %d", c.Server, c.Port)
		s.rem, err = clientExchange(ctx, c.Dial, c.Server, c.Port, s.my)
	} else {
		w.set(func() string { return fmt.Sprintf("a client to connect to TCP port %d", c.Port) })
		prog.stage = fmt.Sprintf("while waiting for a client on port %d", c.Port)
		if c.Listener != nil {
			prog.stage = "while waiting for a client on " + c.Listener.Addr().String()
		}
		s.rem, err = serverExchange(ctx, c.Port, c.Listener, s.my, s.connect)
	}
	if err != nil {
		return err
	}
	rem := s.rem
	fmt.Fprintf(s.out, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem.LID, rem.QPN, rem.PSN, gidString(rem.GID))
	if c.Server != "" {
		if err := s.connect(rem); err != nil {
			return err
		}
	}
	return nil
}

// iterate runs the iterations (the client sends first), then prints the
// tools' two result lines.
func (s *session) iterate(ctx context.Context, w *watcher, prog *progress) error {
	c, dev, buf, ud, rem := s.c, s.dev, s.buf, s.ud, s.rem
	sendSGE := s.mr.SGE(0, c.Size)
	if ud {
		sendSGE = s.mr.SGE(grhLen, c.Size)
	}
	postSend := func() error {
		wr := verbs.SendWR{WRID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{sendSGE}}
		if ud {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, rem.QPN, udQKey
		}
		return s.qp.PostSend(wr)
	}
	// --chk: the client marks the first byte of every page (with
	// i/page_size % sizeof(char), i.e. 0, exactly as rdma-core does) and
	// every receive checks those bytes.
	const pageSize = 4096
	dataOff := 0
	if ud {
		dataOff = grhLen
	}
	if c.Check && c.Server != "" {
		for i := 0; i < c.Size; i += pageSize {
			buf[dataOff+i] = 0
		}
	}
	check := func() error {
		for i := 0; i < c.Size; i += pageSize {
			if buf[dataOff+i] != 0 {
				return fmt.Errorf("invalid data in page %d", i/pageSize)
			}
		}
		return nil
	}
	pending := recvWRID
	if c.Server != "" {
		if err := postSend(); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	var received atomic.Int64 // rcnt, for the watcher's words
	w.set(func() string { return peerWait(dev, c, rem, received.Load()) })
	prog.iterating, prog.iters = true, c.Iters
	wcs := make([]verbs.WC, 2)
	for rcnt < c.Iters || scnt < c.Iters {
		prog.rcnt, prog.scnt = rcnt, scnt
		n, err := s.poll(ctx, wcs)
		if err != nil {
			var fe deviceFatal
			if errors.As(context.Cause(ctx), &fe) {
				err = fe
			}
			return fmt.Errorf("poll CQ failed: %w", err)
		}
		for _, wc := range wcs[:n] {
			w.step()
			if wc.Status != verbs.WCSuccess {
				msg := fmt.Sprintf("Failed status %s (%d) for wr_id %d", wc.Status.Description(), wc.Status, wc.WRID)
				if wc.Detail != "" {
					msg += ": " + wc.Detail
				}
				return errors.New(msg)
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				s.routs--
				if s.routs <= 1 {
					s.routs += s.postRecv(c.RxDepth - s.routs)
					if s.routs < c.RxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", s.routs)
					}
				}
				rcnt++
				received.Store(int64(rcnt))
				if c.Check {
					if err := check(); err != nil {
						return err
					}
				}
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID)
			if scnt < c.Iters && pending == 0 {
				if err := postSend(); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	usec := float64(time.Since(start).Microseconds())
	if usec == 0 {
		usec = 1
	}
	bytes := int64(c.Size) * int64(c.Iters) * 2
	fmt.Fprintf(s.out, "%d bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec/1e6, float64(bytes)*8/usec)
	fmt.Fprintf(s.out, "%d iters in %.2f seconds = %.2f usec/iter\n", c.Iters, usec/1e6, usec/float64(c.Iters))
	return nil
}

// poll waits for completions as ibv_rc_pingpong does (rdma-core's
// libibverbs/examples/rc_pingpong.c): with --events (use_event) it sleeps
// on the CQ's completion channel; by default it busy-polls, ibv_poll_cq in
// a loop that never sleeps. A goroce CQ.Poll that finds the queue empty
// drives the device's link itself (run to completion: receive, handle,
// answer, complete), so the busy loop does the device's work between its
// polls and never waits for a receive goroutine to be scheduled, which on
// a one-vCPU VM meant Go's 10 ms background netpoll. The loop yields the P
// between polls (runtime.Gosched, never a sleep) so the device's other
// goroutines and the watchers still run — every busypoll.OnePYield polls
// when the process has one P, where a yield after every poll put a third
// of the client's CPU in the scheduler (the lab's VMs) — and it looks at
// ctx on every call and every 1024 polls, so a cancelled run or a dead
// device ends it.
func (s *session) poll(ctx context.Context, wcs []verbs.WC) (n int, err error) {
	// An ended run is seen on every call too, not only after empty polls
	// (a CQ that holds a completion returns first; perftest's waitCQ hid
	// an interrupt that way).
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	default:
	}
	st := s.c.stats
	if s.c.Events {
		if st != nil {
			st.waits.Add(1)
		}
		return s.cq.PollWait(ctx, wcs)
	}
	every := busypoll.Every(1)
	for spins := 0; ; spins++ {
		n, err = s.cq.Poll(wcs)
		if st != nil {
			st.polls.Add(1)
		}
		if n != 0 || err != nil {
			return n, err
		}
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		if spins%every == every-1 {
			gosched()
		}
	}
}

// gosched is runtime.Gosched; tests count the calls.
var gosched = runtime.Gosched

// pollStats counts how a run waited for completions, for tests: CQ.Poll
// calls of the busy loop, and blocking waits (PollWait).
type pollStats struct {
	polls, waits atomic.Int64
}

// peerWait says what the exchange loop waits for: the peer's next message,
// and what the device's link knows against the path to it (no route, no
// ARP reply from the next hop, a RoCE v1 peer behind a router); received
// messages so far.
func peerWait(dev *verbs.Device, c Config, rem Dest, received int64) string {
	s := fmt.Sprintf("%v's message %d of %d", unmapped(rem.GID), received+1, c.Iters)
	v := wire.RoCEv2
	if g, err := dev.GID(max(c.GIDIndex, 0)); err == nil && g.Type == verbs.GIDTypeRoCEv1 {
		v = wire.RoCEv1
	}
	if err := link.PathErrorOf(dev.Link(), rem.GID, v); err != nil {
		return s + ": " + err.Error()
	}
	if c.Type == verbs.UD {
		return s + " (UD does not resend a lost datagram: do the peer's QPN, GID and RoCE version match, and does the path reach it?)"
	}
	return s
}

func unmapped(g netip.Addr) netip.Addr { return g.Unmap() }

// noPeerGID is the error for a peer that sent an all-zero GID: an
// rdma-core tool run without -g (gidx -1), which the tools connect without
// a GRH, and RoCE cannot.
func noPeerGID(client bool) error {
	peer := "client"
	if client {
		peer = "server"
	}
	return fmt.Errorf("the %s sent no GID (it runs without -g?): RoCE needs a GID on both sides: "+
		"pass -g N there (roce gids, or show_gids on Linux, shows which index): %w", peer, syscall.EINVAL)
}

// deviceFatal is the cause Run's context is cancelled with when the device
// reports IBV_EVENT_DEVICE_FATAL.
type deviceFatal struct {
	dev string
	ev  verbs.AsyncEvent
}

func (e deviceFatal) Error() string { return fmt.Sprintf("device %s: %v", e.dev, e.ev) }

// watchFatal cancels ctx with deviceFatal when dev reports a fatal event,
// until ctx ends. The pingpong tools take no other asynchronous event.
func watchFatal(ctx context.Context, dev *verbs.Device, cancel context.CancelCauseFunc) {
	for {
		ev, err := dev.GetAsyncEvent(ctx)
		if err != nil {
			return
		}
		if ev.Type == verbs.EventDeviceFatal {
			cancel(deviceFatal{dev: dev.Name(), ev: ev})
			return
		}
	}
}

func pingPSN(p uint32) wire.PSN { return wire.PSN(p & 0xffffff) }

// isZeroIID reports whether a GID's interface ID (its low 64 bits) is zero:
// the tools then leave the path without a GRH.
func isZeroIID(g netip.Addr) bool {
	b := g.As16()
	for _, x := range b[8:] {
		if x != 0 {
			return false
		}
	}
	return true
}
