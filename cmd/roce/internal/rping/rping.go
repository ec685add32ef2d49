// Package rping is librdmacm's rping in Go, wire-compatible with it in both
// roles: an RC connection made by RDMA CM (port space TCP, port 7174 by
// default), then per ping the client advertises its start buffer (a SEND of
// buf/rkey/size), the server RDMA READs it, says "go ahead" (a SEND), the
// client advertises its sink buffer, the server RDMA WRITEs the data back
// and says "go ahead" again; the client compares (-V) and prints (-v).
package rping

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

const (
	// DefaultPort is rping's port (-p).
	DefaultPort = 7174
	// MinSize and MaxSize bound -S: sizeof(stringify(INT_MAX)) +
	// sizeof("rdma-ping-%d: ") = 11 + 15, and RPING_BUFSIZE - 1.
	MinSize = 26
	MaxSize = 64*1024 - 1
	// DefaultSize is rping's -S default.
	DefaultSize = 64

	sqDepth = 16 // RPING_SQ_DEPTH
	infoLen = 16 // struct rping_rdma_info: be64 buf, be32 rkey, be32 size

	wridRecv = 1
	wridSend = 2
	wridRDMA = 3
)

// Config mirrors rping's options.
type Config struct {
	Server     bool           // -s (else -c)
	Addr       netip.AddrPort // -a and -p: the server's address, or the one it binds
	Source     netip.Addr     // -I: the client's source address
	Count      int            // -C: pings, 0 = until interrupted
	Size       int            // -S: ping data size, default 64
	Verbose    bool           // -v: print the ping data
	Validate   bool           // -V: compare what came back
	Debug      bool           // -d: print each step
	Persistent bool           // -P: serve connections until interrupted
	// Timeout bounds address and route resolution (rping: 2 s each).
	Timeout time.Duration
	Out     io.Writer // ping data (-v)
	Err     io.Writer // events and errors, as rping prints them
}

func (c *Config) defaults() error {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Size < MinSize || c.Size > MaxSize {
		// rping's words, but with the range it accepts: rping prints
		// RPING_BUFSIZE (65536) as the top, a size it refuses.
		return fmt.Errorf("Invalid size %d (valid range is %d to %d): %w", c.Size, MinSize, MaxSize, syscall.EINVAL)
	}
	if c.Count < 0 {
		return fmt.Errorf("Invalid count %d: %w", c.Count, syscall.EINVAL)
	}
	if c.Addr.Port() == 0 {
		c.Addr = netip.AddrPortFrom(c.Addr.Addr(), DefaultPort)
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Err == nil {
		c.Err = io.Discard
	}
	return nil
}

// Run runs the server or the client role on cm's devices until the
// client's Count pings are done (client), the client disconnects (server;
// with Persistent, until ctx ends), or ctx ends.
//
// When ctx ends first, the error wraps ctx's cause and says how far the
// run got ("context canceled after 3 pings"); a persistent server (-P),
// which runs until then, returns that error too.
func Run(ctx context.Context, cm *rdmacm.CM, c Config) error {
	if err := c.defaults(); err != nil {
		return err
	}
	t := &tracker{}
	var err error
	if c.Server {
		err = serve(ctx, cm, c, t)
	} else {
		err = client(ctx, cm, c, t)
	}
	if ctx.Err() != nil && (err != nil || c.Persistent) {
		return fmt.Errorf("%w %s", context.Cause(ctx), t)
	}
	return err
}

// tracker is how far a run got, for the error of an interrupted one.
type tracker struct {
	mu     sync.Mutex
	stage  string // guarded by mu
	pings  int    // guarded by mu: completed by the client, or served on the current connection
	count  int    // guarded by mu: the client's -C
	served int    // guarded by mu: connections a server finished
	server bool   // guarded by mu
}

func (t *tracker) set(stage string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stage = stage
}

func (t *tracker) ping() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pings++
}

func (t *tracker) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.server && t.served > 0:
		return fmt.Sprintf("after serving %s, %s", plural(t.served, "connection"), t.stage)
	case t.stage != "":
		return t.stage
	case t.count > 0:
		return fmt.Sprintf("after %d of %d pings", t.pings, t.count)
	}
	return "after " + plural(t.pings, "ping")
}

// plural says "1 ping", "2 pings".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// conn is one connection's verbs resources and rping state.
type conn struct {
	c    *Config
	id   *rdmacm.ID
	ec   *rdmacm.EventChannel
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	recv *verbs.MR // the peer's rping_rdma_info lands here
	send *verbs.MR // ours goes from here
	rdma *verbs.MR // the sink (client) or the READ target (server)
	buf  []byte    // rdma's memory
	// start is the client's source buffer, which the server READs.
	start    *verbs.MR
	startBuf []byte
	recvBuf  []byte
	sendBuf  []byte

	track        *tracker      // counts the client's pings; nil: uncounted
	onPing       func(n int)   // if set, told the server's count of pings after each
	served       int           // pings the server completed
	disconnected chan struct{} // closed on DISCONNECTED
	once         sync.Once
	cmErr        error // the CM event that ended the connection, if not DISCONNECTED
}

func (k *conn) debugf(format string, args ...any) {
	if k.c.Debug {
		fmt.Fprintf(k.c.Out, format, args...)
	}
}

// setup makes the PD, CQ, QP (on the ID's device) and buffers and posts the
// first receive, as rping_setup_qp and rping_setup_buffers do.
func (k *conn) setup() error {
	dev := k.id.Device()
	if dev == nil {
		return errors.New("rping: the CM ID has no device")
	}
	var err error
	if k.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if k.cq, err = dev.CreateCQ(sqDepth * 2); err != nil {
		return err
	}
	if k.qp, err = k.id.CreateQP(k.pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: k.cq, RecvCQ: k.cq,
		Cap: verbs.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	k.recvBuf, k.sendBuf = make([]byte, infoLen), make([]byte, infoLen)
	if k.recv, err = k.pd.RegMR(k.recvBuf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if k.send, err = k.pd.RegMR(k.sendBuf, 0); err != nil {
		return err
	}
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite
	k.buf = make([]byte, k.c.Size)
	if k.rdma, err = k.pd.RegMR(k.buf, remote); err != nil {
		return err
	}
	if !k.c.Server {
		k.startBuf = make([]byte, k.c.Size)
		if k.start, err = k.pd.RegMR(k.startBuf, remote); err != nil {
			return err
		}
	}
	return k.postRecv()
}

func (k *conn) postRecv() error {
	return k.qp.PostRecv(verbs.RecvWR{WRID: wridRecv, SGList: []verbs.SGE{k.recv.SGE(0, infoLen)}})
}

// watch delivers the connection's CM events: DISCONNECTED (or an error)
// ends the waits, as rping's CM thread posts its semaphore.
func (k *conn) watch(ctx context.Context) {
	for {
		e, err := k.ec.Get(ctx)
		if err != nil {
			return
		}
		k.debugf("cma_event type %s cma_id %p (%s)\n", e.Type, e.ID, map[bool]string{true: "child", false: "parent"}[k.c.Server])
		switch e.Type {
		case rdmacm.EventDisconnected:
			fmt.Fprintf(k.c.Err, "%s DISCONNECT EVENT...\n", map[bool]string{true: "server", false: "client"}[k.c.Server])
			k.once.Do(func() { close(k.disconnected) })
			return
		case rdmacm.EventDeviceRemoval:
			fmt.Fprintf(k.c.Err, "cma detected device removal!!!!\n")
			k.cmErr = errors.New("rping: device removed")
			k.once.Do(func() { close(k.disconnected) })
			return
		}
	}
}

// errDisconnected ends a wait when the peer disconnects.
var errDisconnected = errors.New("rping: disconnected")

// wait returns the next completion, which must be wrid's and successful.
// Receives are reposted, as rping's CQ handler does.
func (k *conn) wait(ctx context.Context, wrid uint64) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		n, err := k.cq.Poll(wc[:])
		if err != nil {
			return verbs.WC{}, err
		}
		if n == 0 {
			wctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-k.disconnected:
					cancel()
				case <-wctx.Done():
				}
			}()
			err := k.cq.Wait(wctx)
			cancel()
			if err != nil {
				select {
				case <-k.disconnected:
					if k.cmErr != nil {
						return verbs.WC{}, k.cmErr
					}
					return verbs.WC{}, errDisconnected
				default:
				}
				return verbs.WC{}, err
			}
			continue
		}
		w := wc[0]
		if w.Status != verbs.WCSuccess {
			if w.Status == verbs.WCWRFlushErr {
				select {
				case <-k.disconnected:
					return verbs.WC{}, errDisconnected
				default:
				}
			}
			return w, fmt.Errorf("cq completion failed status %d (%v)%s", int(w.Status), w.Status, detail(w))
		}
		if w.WRID == wridRecv {
			if w.ByteLen != infoLen {
				return w, fmt.Errorf("Received bogus data, size %d", w.ByteLen)
			}
			if err := k.postRecv(); err != nil {
				return w, fmt.Errorf("post recv error: %w", err)
			}
		}
		if w.WRID != wrid {
			if w.WRID == wridRecv {
				return w, fmt.Errorf("rping: a message from the peer while waiting for %s", wridName(wrid))
			}
			continue // a send's completion; rping does not wait for it either
		}
		return w, nil
	}
}

func detail(w verbs.WC) string {
	if w.Detail == "" {
		return ""
	}
	return ": " + w.Detail
}

func wridName(w uint64) string {
	switch w {
	case wridRecv:
		return "the peer's advertisement"
	case wridRDMA:
		return "the RDMA completion"
	}
	return "the send completion"
}

// sendInfo SENDs an rping_rdma_info for mr (all zeros for the server's
// "go ahead", whose send_buf rping never fills).
func (k *conn) sendInfo(mr *verbs.MR) error {
	if mr != nil {
		binary.BigEndian.PutUint64(k.sendBuf[0:], mr.Addr())
		binary.BigEndian.PutUint32(k.sendBuf[8:], mr.RKey())
		binary.BigEndian.PutUint32(k.sendBuf[12:], uint32(k.c.Size))
		k.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), k.c.Size)
	}
	return k.qp.PostSend(verbs.SendWR{WRID: wridSend, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{k.send.SGE(0, infoLen)}})
}

// close releases what setup made; the ID's Destroy destroys the QP.
func (k *conn) close() {
	if k.id != nil {
		k.id.Destroy()
	}
	for _, mr := range []*verbs.MR{k.recv, k.send, k.rdma, k.start} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if k.cq != nil {
		k.cq.Destroy()
	}
	if k.ec != nil {
		k.ec.Close()
	}
}

// connParam is rping_init_conn_param's.
var connParam = rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}

// cmError turns an unexpected CM event into rping's message, with goroce's
// explanation after it.
func cmError(e rdmacm.Event, want rdmacm.EventType) error {
	switch e.Type {
	case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected:
		msg := fmt.Sprintf("cma event %s, error %d", e.Type, e.Status)
		if e.Err != nil {
			msg += ": " + e.Err.Error()
		}
		return &EventError{Event: e, msg: msg}
	}
	return &EventError{Event: e, msg: fmt.Sprintf("unexpected %s while waiting for %s", e.Type, want)}
}

// EventError is a CM event that ended the run.
type EventError struct {
	Event rdmacm.Event
	msg   string
}

func (e *EventError) Error() string { return e.msg }
func (e *EventError) Unwrap() error { return e.Event.Err }

// next waits for the next event on ec, which must be want.
func next(ctx context.Context, ec *rdmacm.EventChannel, want rdmacm.EventType) (rdmacm.Event, error) {
	e, err := ec.Get(ctx)
	if err != nil {
		return e, err
	}
	if e.Type != want {
		return e, cmError(e, want)
	}
	return e, nil
}

func client(ctx context.Context, cm *rdmacm.CM, c Config, t *tracker) error {
	t.count = c.Count
	t.set("while connecting to " + c.Addr.String())
	k := &conn{c: &c, ec: cm.CreateEventChannel(), disconnected: make(chan struct{})}
	defer k.close()
	id, err := cm.CreateID(k.ec, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	k.id = id
	if err := id.ResolveAddr(c.Source, c.Addr, c.Timeout); err != nil {
		return err
	}
	if _, err := next(ctx, k.ec, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	k.debugf("ADDR_RESOLVED\n")
	if err := id.ResolveRoute(c.Timeout); err != nil {
		return err
	}
	if _, err := next(ctx, k.ec, rdmacm.EventRouteResolved); err != nil {
		return err
	}
	k.debugf("ROUTE_RESOLVED\n")
	if err := k.setup(); err != nil {
		return err
	}
	if err := id.Connect(connParam); err != nil {
		return fmt.Errorf("connect error %w", err)
	}
	if _, err := next(ctx, k.ec, rdmacm.EventEstablished); err != nil {
		return err
	}
	k.debugf("ESTABLISHED\n")
	k.debugf("rmda_connect successful\n")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go k.watch(wctx)

	t.set("")
	k.track = t
	done, err := k.pings(ctx)
	if errors.Is(err, errDisconnected) {
		// rping exits 0 here (state DISCONNECTED); that hides a server that
		// gave up, e.g. on a size larger than its buffer (-S).
		if c.Count == 0 {
			return nil
		}
		return fmt.Errorf("the server disconnected after %d of %d pings (a server with a smaller -S fails its RDMA READ and disconnects)", done, c.Count)
	}
	if err != nil {
		return err
	}
	// rping_disconnect: DREQ; the DISCONNECTED event follows the DREP.
	id.Disconnect()
	select {
	case <-k.disconnected:
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	return nil
}

// pings is rping_test_client; it returns how many pings completed.
func (k *conn) pings(ctx context.Context) (int, error) {
	c := k.c
	start := byte(65)
	for ping := 0; c.Count == 0 || ping < c.Count; ping++ {
		cc := copy(k.startBuf, fmt.Sprintf("rdma-ping-%d: ", ping))
		for i, ch := cc, start; i < c.Size; i++ {
			k.startBuf[i] = ch
			if ch++; ch > 122 {
				ch = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		k.startBuf[c.Size-1] = 0
		if err := k.sendInfo(k.start); err != nil {
			return ping, fmt.Errorf("post send error %w", err)
		}
		if _, err := k.wait(ctx, wridRecv); err != nil { // the server READ it: go ahead
			return ping, err
		}
		if err := k.sendInfo(k.rdma); err != nil {
			return ping, fmt.Errorf("post send error %w", err)
		}
		if _, err := k.wait(ctx, wridRecv); err != nil { // the server WROTE it back
			return ping, err
		}
		if c.Validate && string(k.startBuf) != string(k.buf) {
			return ping, errors.New("data mismatch!")
		}
		if c.Verbose {
			fmt.Fprintf(c.Out, "ping data: %s\n", cstring(k.buf))
		}
		if k.track != nil {
			k.track.ping()
		}
	}
	return c.Count, nil
}

func cstring(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

func serve(ctx context.Context, cm *rdmacm.CM, c Config, t *tracker) error {
	t.server = true
	waiting := "while waiting for a connection on " + c.Addr.String()
	t.set(waiting)
	ec := cm.CreateEventChannel()
	defer ec.Close()
	lid, err := cm.CreateID(ec, rdmacm.PSTCP)
	if err != nil {
		return err
	}
	defer lid.Destroy()
	if err := lid.BindAddr(c.Addr); err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if err := lid.Listen(3); err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		e, err := ec.Get(ctx)
		if err != nil {
			return err
		}
		if e.Type != rdmacm.EventConnectRequest {
			continue
		}
		k := &conn{c: &c, id: e.ID, ec: cm.CreateEventChannel(), disconnected: make(chan struct{})}
		e.ID.Migrate(k.ec)
		if !c.Persistent {
			t.set(fmt.Sprintf("after 0 pings from %s", e.ID.RemoteAddr()))
			k.onPing = func(n int) { t.set(fmt.Sprintf("after %s from %s", plural(n, "ping"), e.ID.RemoteAddr())) }
			return k.serveOne(ctx)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := k.serveOne(ctx)
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.Err, "rping: %s: %v\n", k.id.RemoteAddr(), err)
			}
			t.mu.Lock()
			t.served++
			t.stage = waiting
			t.mu.Unlock()
		}()
	}
}

// serveOne accepts the connection request k.id came with and runs
// rping_test_server until the client disconnects.
func (k *conn) serveOne(ctx context.Context) error {
	defer k.close()
	k.debugf("accepting client connection request\n")
	if err := k.setup(); err != nil {
		k.id.Reject(nil)
		return err
	}
	if err := k.id.Accept(connParam); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := next(ctx, k.ec, rdmacm.EventEstablished); err != nil {
		return fmt.Errorf("wait for CONNECTED state: %w", err)
	}
	k.debugf("ESTABLISHED\n")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go k.watch(wctx)
	err := k.serverLoop(ctx)
	if errors.Is(err, errDisconnected) {
		k.id.Disconnect() // the DREP
		return nil
	}
	return err
}

// serverLoop is rping_test_server.
func (k *conn) serverLoop(ctx context.Context) error {
	for {
		if _, err := k.wait(ctx, wridRecv); err != nil { // the client's start buffer
			return err
		}
		raddr := binary.BigEndian.Uint64(k.recvBuf[0:])
		rkey := binary.BigEndian.Uint32(k.recvBuf[8:])
		rlen := binary.BigEndian.Uint32(k.recvBuf[12:])
		k.debugf("Received rkey %x addr %x len %d from peer\n", rkey, raddr, rlen)
		if err := k.qp.PostSend(verbs.SendWR{WRID: wridRDMA, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			RemoteAddr: raddr, RKey: rkey, SGList: []verbs.SGE{k.rdma.SGE(0, int(rlen))}}); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := k.wait(ctx, wridRDMA); err != nil {
			if rlen > uint32(len(k.buf)) {
				err = fmt.Errorf("%w (the client's -S %d is larger than this server's %d)", err, rlen, len(k.buf))
			}
			return err
		}
		k.debugf("server received read complete\n")
		if k.c.Verbose {
			fmt.Fprintf(k.c.Out, "server ping data: %s\n", cstring(k.buf))
		}
		if err := k.sendInfo(nil); err != nil { // go ahead
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := k.wait(ctx, wridRecv); err != nil { // the client's sink
			return err
		}
		raddr = binary.BigEndian.Uint64(k.recvBuf[0:])
		rkey = binary.BigEndian.Uint32(k.recvBuf[8:])
		n := len(cstring(k.buf)) + 1
		if n > len(k.buf) {
			n = len(k.buf)
		}
		if err := k.qp.PostSend(verbs.SendWR{WRID: wridRDMA, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			RemoteAddr: raddr, RKey: rkey, SGList: []verbs.SGE{k.rdma.SGE(0, n)}}); err != nil {
			return fmt.Errorf("post send error %w", err)
		}
		if _, err := k.wait(ctx, wridRDMA); err != nil {
			return err
		}
		k.debugf("server rdma write complete \n")
		if k.served++; k.onPing != nil {
			k.onPing(k.served)
		}
		if err := k.sendInfo(nil); err != nil { // begin again
			return fmt.Errorf("post send error %w", err)
		}
	}
}
