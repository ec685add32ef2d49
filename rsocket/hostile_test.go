package rsocket

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// rawPeer is a peer that speaks rsocket by hand, over verbs and rdmacm,
// to send what a correct rsocket never sends.
type rawPeer struct {
	t      *testing.T
	id     *rdmacm.ID
	ec     *rdmacm.EventChannel
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	rbuf   []byte // its receive ring (one 4 KiB half advertised)
	tbuf   []byte // its target SGL
	sbuf   []byte // what its work requests send or READ into, staged by stage
	rmr    *verbs.MR
	tmr    *verbs.MR
	smr    *verbs.MR
	cd     connData // what it sent
	peer   connData // the Conn's, from the REP
	wrid   uint64
	busy   []stageSpan // the parts of sbuf posted work requests use, oldest first
	pdErr  error       // what the REQ's answer was, if not ESTABLISHED
	closed bool
}

// rawDial connects a hand-made peer on a to listener l, sending the
// connection data mod returns (from a correct one), and returns it with
// the Conn l accepted (nil if it did not).
func rawDial(t *testing.T, a *side, l *Listener, mod func(connData) connData) (*rawPeer, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &rawPeer{t: t, ec: a.cm.CreateEventChannel()}
	t.Cleanup(r.close)
	var err error
	if r.id, err = a.cm.CreateID(r.ec, rdmacm.PSTCP); err != nil {
		t.Fatal(err)
	}
	if err := r.id.ResolveAddr(netip.Addr{}, l.AddrPort(), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := expect(ctx, r.ec, rdmacm.EventAddrResolved); err != nil {
		t.Fatal(err)
	}
	if err := r.id.ResolveRoute(0); err != nil {
		t.Fatal(err)
	}
	if _, err := expect(ctx, r.ec, rdmacm.EventRouteResolved); err != nil {
		t.Fatal(err)
	}
	dev := r.id.Device()
	if r.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if r.cq, err = dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if r.qp, err = r.id.CreateQP(r.pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: verbs.QPCap{MaxSendWR: 512, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	r.rbuf, r.tbuf, r.sbuf = make([]byte, 8192), make([]byte, sgeLen*sglSize), make([]byte, 1<<20)
	for _, x := range []struct {
		mr  **verbs.MR
		buf []byte
	}{{&r.rmr, r.rbuf}, {&r.tmr, r.tbuf}, {&r.smr, r.sbuf}} {
		if *x.mr, err = r.pd.RegMR(x.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
	}
	for range 128 {
		if err := r.qp.PostRecv(verbs.RecvWR{WRID: wrRecv}); err != nil {
			t.Fatal(err)
		}
	}
	r.cd = connData{version: protoVersion, flags: flagIOMap, credits: 128,
		targetSGL: sge{addr: r.tmr.Addr(), key: r.tmr.RKey(), len: sglSize},
		dataBuf:   sge{addr: r.rmr.Addr(), key: r.rmr.RKey(), len: 4096}}
	if mod != nil {
		r.cd = mod(r.cd)
	}
	accepted := make(chan *Conn, 1)
	go func() {
		c, _ := l.AcceptContext(ctx)
		accepted <- c
	}()
	if err := r.id.Connect(rdmacm.ConnParam{PrivateData: r.cd.append(nil), RetryCount: 7, RNRRetryCount: 7, FlowControl: true}); err != nil {
		t.Fatal(err)
	}
	e, err := expect(ctx, r.ec, rdmacm.EventEstablished)
	if err != nil {
		r.pdErr = err
		cancel()
		if c := <-accepted; c != nil {
			t.Errorf("the listener accepted a connection it should have refused")
			c.Close()
		}
		return r, nil
	}
	if r.peer, err = parseConnData(e.PrivateData); err != nil {
		t.Fatal(err)
	}
	c := <-accepted
	if c == nil {
		t.Fatal("the listener did not hand out the connection")
	}
	t.Cleanup(func() { c.Close() })
	return r, c
}

func (r *rawPeer) close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.id != nil {
		r.id.Destroy()
	}
	r.ec.Close()
}

// stageSpan is a part of the raw peer's send buffer that posted work
// request wrid reads (or a READ writes) until it completes.
type stageSpan struct {
	wrid   uint64
	off, n int
}

// stage finds n bytes of the send buffer that no posted work request
// uses (a ring: work requests complete in the order posted), or reports
// that there are none until some complete. Reusing a part a posted
// request still reads would send what was copied later (and race with
// the engine's gather).
func (r *rawPeer) stage(n int) (int, bool) {
	if n == 0 || len(r.busy) == 0 {
		return 0, n <= len(r.sbuf)
	}
	first, last := r.busy[0], r.busy[len(r.busy)-1]
	head := last.off + last.n
	switch {
	case last.off >= first.off && head+n <= len(r.sbuf): // free: [head, end) and [0, first)
		return head, true
	case last.off >= first.off && n <= first.off:
		return 0, true
	case last.off < first.off && head+n <= first.off: // wrapped; free: [head, first)
		return head, true
	}
	return 0, false
}

// posted records that work request wrid uses sbuf[off:off+n].
func (r *rawPeer) posted(wrid uint64, off, n int) {
	if n > 0 {
		r.busy = append(r.busy, stageSpan{wrid, off, n})
	}
}

// completed frees what work request wrid, and every one posted before
// it, used.
func (r *rawPeer) completed(wrid uint64) {
	for len(r.busy) > 0 && r.busy[0].wrid <= wrid {
		r.busy = r.busy[1:]
	}
}

// load stages data and makes it wr's one SGE (none if empty), with the
// next WRID, signaled; false if no part of the send buffer is free. The
// caller posts wr and then calls posted.
func (r *rawPeer) load(wr *verbs.SendWR, data []byte) (off int, ok bool) {
	if off, ok = r.stage(len(data)); !ok {
		return 0, false
	}
	copy(r.sbuf[off:], data)
	r.wrid++
	wr.WRID, wr.Flags = r.wrid, wr.Flags|verbs.SendSignaled
	if len(data) > 0 {
		wr.SGList = []verbs.SGE{r.smr.SGE(off, len(data))}
	}
	return off, true
}

// post posts wr with data (load).
func (r *rawPeer) post(wr verbs.SendWR, data []byte) {
	r.t.Helper()
	off, ok := r.load(&wr, data)
	if !ok {
		r.t.Fatalf("the raw peer's send buffer is full of %d work requests not completed", len(r.busy))
	}
	if err := r.qp.PostSend(wr); err != nil {
		r.t.Fatal(err)
	}
	r.posted(wr.WRID, off, len(data))
}

// write posts an RDMA WRITE WITH IMMEDIATE of data at va with rkey,
// immediate m.
func (r *rawPeer) write(m msg, data []byte, va uint64, rkey uint32) {
	r.t.Helper()
	r.post(verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, ImmData: uint32(m), RemoteAddr: va, RKey: rkey}, data)
}

// send posts a SEND of data.
func (r *rawPeer) send(data []byte) {
	r.t.Helper()
	r.post(verbs.SendWR{Opcode: verbs.WRSend}, data)
}

// lastSend waits for the completion of the last send posted and returns
// its status (receives are skipped).
func (r *rawPeer) lastSend() verbs.WC {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wc := make([]verbs.WC, 16)
	for {
		n, err := r.cq.PollWait(ctx, wc)
		if err != nil {
			r.t.Fatalf("waiting for the raw peer's send %d: %v", r.wrid, err)
		}
		for _, w := range wc[:n] {
			if w.WRID&wrRecv == 0 {
				r.completed(w.WRID)
			}
			if w.WRID == r.wrid {
				return w
			}
		}
	}
}

// data writes n bytes of data messages (1 message) at the next place of
// the Conn's first buffer, as a correct sender would; at is the offset in
// that buffer.
func (r *rawPeer) data(at, n int) {
	r.write(mkMsg(opData, uint32(n)), make([]byte, n), r.peer.dataBuf.addr+uint64(at), r.peer.dataBuf.key)
}

// wantViolation reads from c until it fails and checks that the error is
// a *ProtocolError (EPROTO) saying want.
func wantViolation(t *testing.T, c *Conn, want string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1<<20)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var pe *ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, syscall.EPROTO) {
			t.Fatalf("Read: %v; want a *ProtocolError (EPROTO) saying %q", err, want)
		}
		if !strings.Contains(pe.Violation, want) {
			t.Fatalf("Read: %v; want it to say %q", err, want)
		}
		t.Logf("as wanted: %v", err)
		// The connection is over: writes fail too, with the same error.
		if _, err := c.Write([]byte("x")); !errors.As(err, &pe) {
			t.Errorf("Write after the violation: %v, want the *ProtocolError", err)
		}
		return
	}
}

// TestHostilePeer sends each kind of protocol violation to a Conn: each
// ends that connection with an error naming it, and nothing else (a second
// connection of the same listener carries on).
func TestHostilePeer(t *testing.T) {
	a, b := newSides(t, netFabric4)
	l := b.listen(t, 7471, Options{})
	good, goodPeer := dialAccept(t, a, l, Options{})
	cases := []struct {
		name string
		do   func(r *rawPeer, c *Conn)
		want string
	}{
		{"credits beyond the window", func(r *rawPeer, c *Conn) {
			// The Conn grants 384 messages (its rq_size); the 385th is one
			// too many.
			for i := range defRQSize + 1 {
				r.data(i, 1)
			}
			r.lastSend() // all arrive before the Conn reads (which would grant more)
		}, "beyond the credits granted"},
		{"data overrunning its buffer", func(r *rawPeer, c *Conn) {
			r.data(0, int(r.peer.dataBuf.len)+1)
		}, "overruns the receive buffer"},
		{"data beyond the ring", func(r *rawPeer, c *Conn) {
			// Both halves (the second comes with the Conn's first SGL
			// update) filled, then one byte more.
			half := int(r.peer.dataBuf.len)
			r.data(0, half)
			r.write(mkMsg(opData, uint32(half)), make([]byte, half), r.peer.dataBuf.addr+uint64(half), r.peer.dataBuf.key)
			r.data(0, 1)
			r.lastSend() // all arrive before the Conn reads (which would free a half)
		}, "beyond the receive buffers advertised"},
		{"immediate and length disagree", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opData, 10), make([]byte, 20), r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}, "says 10 bytes, but the RDMA WRITE carried 20"},
		{"reserved message type", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opRsvd, 0), nil, 0, 0)
		}, "RS_OP_RSVD (immediate 0xa0000000) is reserved"},
		{"RS_OP_WRITE on the wire", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opWrite, 4), make([]byte, 4), r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}, "RS_OP_WRITE"},
		{"iomap", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opIOMapSGL, 0), make([]byte, 32), r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}, "RS_OP_IOMAP_SGL (entry 0): iomapped buffers (riomap, riowrite) are not supported"},
		{"unknown control message", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opCtrl, 9), nil, 0, 0)
		}, "unknown control message 9"},
		{"SEND", func(r *rawPeer, c *Conn) {
			r.send(nil)
		}, "rsocket sends only RDMA WRITE WITH IMMEDIATE"},
		{"credits beyond the peer's window", func(r *rawPeer, c *Conn) {
			// This peer's connection data granted 128 messages; a limit of
			// 129 ahead of what the Conn sent is more than it can mean.
			r.write(mkMsg(opSGL, 129), nil, 0, 0)
		}, "the peer's window (its credits) is 128"},
		{"SGL update into an entry in use", func(r *rawPeer, c *Conn) {
			// Entry 1 is free (only entry 0 came with the REP); entry 0 is
			// the Conn's connection data buffer, still unused.
			s := appendSGE(nil, sge{addr: r.rmr.Addr(), key: r.rmr.RKey(), len: 4096}, leOrder)
			r.write(mkMsg(opSGL, 128), s, r.peer.targetSGL.addr+sgeLen, r.peer.targetSGL.key)
			r.write(mkMsg(opSGL, 128), s, r.peer.targetSGL.addr, r.peer.targetSGL.key)
		}, "updated target SGL entry 0, which still holds 4096 bytes"},
		{"SGL update with an empty buffer", func(r *rawPeer, c *Conn) {
			s := appendSGE(nil, sge{addr: r.rmr.Addr(), key: r.rmr.RKey()}, leOrder)
			r.write(mkMsg(opSGL, 128), s, r.peer.targetSGL.addr+sgeLen, r.peer.targetSGL.key)
		}, "empty receive buffer"},
		{"SGL update of the wrong size", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opSGL, 128), make([]byte, 8), r.peer.targetSGL.addr+sgeLen, r.peer.targetSGL.key)
		}, "RS_OP_SGL wrote 8 bytes"},
		{"control message with data", func(r *rawPeer, c *Conn) {
			r.write(mkMsg(opCtrl, ctrlShutdown), make([]byte, 4), r.peer.dataBuf.addr, r.peer.dataBuf.key)
		}, "control messages carry none"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, c := rawDial(t, a, l, nil)
			tc.do(r, c)
			wantViolation(t, c, tc.want)
		})
	}
	// The good connection never noticed.
	if _, err := good.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(goodPeer, buf); err != nil || string(buf) != "still here" {
		t.Fatalf("the other connection: %q, %v", buf, err)
	}
}

var leOrder = binary.LittleEndian

// TestHostileWriteOutsideRing: an RDMA WRITE just past the receive ring,
// or past the target SGL, with the right rkey, is refused by the transport
// (the peer's completion says IBV_WC_REM_ACCESS_ERR) because each memory
// region is exactly its buffer; the Conn's QP goes to the error state and
// its Read says so; no byte beside the ring changed.
func TestHostileWriteOutsideRing(t *testing.T) {
	a, b := newSides(t, netFabric4)
	l := b.listen(t, 7471, Options{})
	for _, tc := range []struct {
		name string
		at   func(r *rawPeer) (uint64, uint32)
	}{
		{"past the ring", func(r *rawPeer) (uint64, uint32) {
			return r.peer.dataBuf.addr + 2*uint64(r.peer.dataBuf.len), r.peer.dataBuf.key
		}},
		{"before the ring", func(r *rawPeer) (uint64, uint32) {
			return r.peer.dataBuf.addr - 16, r.peer.dataBuf.key
		}},
		{"past the target SGL", func(r *rawPeer) (uint64, uint32) {
			return r.peer.targetSGL.addr + sgeLen*sglSize, r.peer.targetSGL.key
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, c := rawDial(t, a, l, nil)
			if c.rmr.Len() != len(c.rbuf) || c.rmr.Addr() != r.peer.dataBuf.addr || c.tmr.Len() != sgeLen*sglSize {
				t.Fatalf("memory regions: ring %d bytes at %#x for a ring of %d, target SGL %d bytes", c.rmr.Len(), c.rmr.Addr(), len(c.rbuf), c.tmr.Len())
			}
			va, key := tc.at(r)
			r.write(mkMsg(opData, 16), []byte("0123456789abcdef"), va, key)
			if wc := r.lastSend(); wc.Status != verbs.WCRemAccessErr {
				t.Fatalf("the hostile write completed %v, want IBV_WC_REM_ACCESS_ERR", &wc)
			}
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err := c.Read(make([]byte, 16))
			if err == nil || !strings.Contains(err.Error(), "entered the error state") {
				t.Fatalf("Read: %v, want the QP's error state named", err)
			}
			t.Logf("as wanted: %v", err)
			for i, v := range c.rbuf {
				if v != 0 {
					t.Fatalf("ring byte %d is %#x: something was written", i, v)
				}
			}
		})
	}
}

// TestHostileVersion: a REQ whose connection data is not version 1 is
// rejected (the peer gets REJECTED: ECONNREFUSED) and the listener says
// why; a REP that is not version 1 fails the Dial with a *ProtocolError.
func TestHostileVersion(t *testing.T) {
	a, b := newSides(t, netFabric4)
	var logged []string
	lc := ListenConfig{CM: b.cm, Logf: func(f string, args ...any) {
		logged = append(logged, strings.TrimSpace(sprintf(f, args...)))
	}}
	l, err := lc.Listen(context.Background(), "rsocket", netip.AddrPortFrom(b.ip, 7471).String())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r, c := rawDial(t, a, l, func(d connData) connData { d.version = 2; return d })
	if c != nil || !errors.Is(r.pdErr, syscall.ECONNREFUSED) {
		t.Fatalf("a REQ of version 2: %v, want ECONNREFUSED", r.pdErr)
	}
	r2, c2 := rawDial(t, a, l, func(d connData) connData { return d })
	if c2 == nil || r2.pdErr != nil {
		t.Fatalf("a correct REQ after it: %v", r2.pdErr)
	}
	if len(logged) == 0 || !strings.Contains(logged[0], "connection data version 2: rsocket's stream protocol is version 1") {
		t.Errorf("the listener's log: %q", logged)
	}

	// The other way: a passive peer that answers with version 3.
	lid, lec := listenRaw(t, a, 7472)
	defer lid.Destroy()
	go func() {
		e, err := lec.Get(context.Background())
		if err != nil || e.Type != rdmacm.EventConnectRequest {
			return
		}
		pd, _ := e.ID.Device().AllocPD()
		cq, _ := e.ID.Device().CreateCQ(16)
		e.ID.CreateQP(pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		cd := connData{version: 3, credits: 16, targetSGL: sge{len: 2}, dataBuf: sge{len: 4096}}
		e.ID.Accept(rdmacm.ConnParam{PrivateData: cd.append(nil), RNRRetryCount: 7})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = Dial(ctx, b.cm, "rsocket", netip.AddrPortFrom(a.ip, 7472).String())
	var pe *ProtocolError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "connection data version 3") {
		t.Fatalf("Dial to a peer of version 3: %v, want a *ProtocolError naming it", err)
	}
	t.Logf("as wanted: %v", err)
}

// listenRaw listens on a's port with a bare rdmacm ID.
func listenRaw(t *testing.T, a *side, port uint16) (*rdmacm.ID, *rdmacm.EventChannel) {
	t.Helper()
	ec := a.cm.CreateEventChannel()
	t.Cleanup(ec.Close)
	id, err := a.cm.CreateID(ec, rdmacm.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.BindAddr(netip.AddrPortFrom(a.ip, port)); err != nil {
		t.Fatal(err)
	}
	if err := id.Listen(4); err != nil {
		t.Fatal(err)
	}
	return id, ec
}

func sprintf(f string, args ...any) string { return fmt.Sprintf(f, args...) }

// TestHostileDataAfterViolation: data messages that arrive after the one
// that broke the protocol are dropped with the data before it; Read
// returns the *ProtocolError, not their bytes (which it took from where
// the dropped messages had been). Found replaying an input of
// FuzzRsocketPeer (kept in testdata), which now checks for it.
func TestHostileDataAfterViolation(t *testing.T) {
	a, b := newSides(t, netFabric4)
	l := b.listen(t, 7471, Options{})
	r, c := rawDial(t, a, l, nil)
	r.write(mkMsg(opData, 4), []byte("AAAA"), r.peer.dataBuf.addr, r.peer.dataBuf.key)
	r.write(mkMsg(opRsvd, 0), nil, 0, 0)
	r.write(mkMsg(opData, 4), []byte("BBBB"), r.peer.dataBuf.addr+4, r.peer.dataBuf.key)
	if wc := r.lastSend(); wc.Status != verbs.WCSuccess {
		t.Fatalf("the last data message: %v", &wc) // all three arrived before the Conn reads
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := c.Read(make([]byte, 16))
	var pe *ProtocolError
	if n != 0 || !errors.As(err, &pe) {
		t.Fatalf("Read: %d bytes, %v; want none and the *ProtocolError", n, err)
	}
	t.Logf("as wanted: %v", err)
}
