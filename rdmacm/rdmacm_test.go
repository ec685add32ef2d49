package rdmacm

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// side is one host of a test: a device, its own CM, an event channel.
type side struct {
	cm  *CM
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	ec  *EventChannel
	ip  netip.Addr
	fab *fabric.Port
	net *fabric.Fabric // the fabric both sides are on
}

// fastOptions make retries and timewait cost little wall time. The retry
// count is Linux's (CMA_MAX_CM_RETRIES, 15), so a peer that a loaded
// machine (or -race) keeps from answering has 1.6 s, not 600 ms, before a
// REQ is UNREACHABLE; a test that waits for the retries to run out waits
// those 1.6 s.
var fastOptions = Options{ResponseTimeout: 100 * time.Millisecond, MaxRetries: 15, Timewait: 20 * time.Millisecond}

// newSides returns two hosts on verbstest's fabric (RoCE v2 over IPv4 unless
// net says otherwise), each with its own CM.
func newSides(t testing.TB, net string, oa, ob Options) (a, b *side) {
	t.Helper()
	return newSidesHook(t, net, oa, ob, nil, nil)
}

// newSidesHook is newSides with a hook on each CM that sees every MAD it
// receives.
func newSidesHook(t testing.TB, net string, oa, ob Options, ha, hb func(*inbound)) (a, b *side) {
	t.Helper()
	p := verbstest.NewPair(t, verbstest.Options{Net: net, NoConnect: true})
	mk := func(s verbstest.Side, o Options, h func(*inbound)) *side {
		cm := New(o)
		cm.onRecv = h
		if err := cm.AddDevice(s.Dev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() }) // before the pair's cleanup: LIFO
		cq, err := s.Dev.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		ec := cm.CreateEventChannel()
		t.Cleanup(ec.Close)
		return &side{cm: cm, dev: s.Dev, pd: s.PD, cq: cq, ec: ec, ip: ipOf(s.GID.GID), fab: s.Port, net: p.Fabric}
	}
	return mk(p.A, oa, ha), mk(p.B, ob, hb)
}

func (s *side) want(t *testing.T, typ EventType) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	e, err := s.ec.Get(ctx)
	if err != nil {
		t.Fatalf("waiting for %v: %v", typ, err)
	}
	if e.Type != typ {
		t.Fatalf("got event %v, want %v", e, typ)
	}
	return e
}

// disconnectBoth has a's ID ca disconnect first, then b's cb once b has
// seen DISCONNECTED, and waits for a's DISCONNECTED.
func disconnectBoth(t *testing.T, a, b *side, ca, cb *ID) {
	t.Helper()
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(t, EventDisconnected)
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventDisconnected)
}

// sentMADs is how many MADs s's CM has sent on its first device.
func sentMADs(s *side) int {
	s.cm.mu.Lock()
	defer s.cm.mu.Unlock()
	return s.cm.agents[0].sent
}

// acceptUD gives the SIDR request's ID a UD QP and accepts it with
// private data pd, returning the QP.
func acceptUD(t *testing.T, s *side, id *ID, pd []byte) *verbs.QP {
	t.Helper()
	init := rcInit(s)
	init.Type = verbs.UD
	qp, err := id.CreateQP(s.pd, init)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Accept(ConnParam{PrivateData: pd}); err != nil {
		t.Fatal(err)
	}
	return qp
}

// acceptRC takes s's next CONNECT_REQUEST, gives its ID an RC QP and
// accepts it (rnr_retry 7), returning the ID.
func acceptRC(t *testing.T, s *side) *ID {
	t.Helper()
	id := s.want(t, EventConnectRequest).ID
	if _, err := id.CreateQP(s.pd, rcInit(s)); err != nil {
		t.Fatal(err)
	}
	if err := id.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	return id
}

func rcInit(s *side) verbs.QPInitAttr {
	return verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}
}

// listen makes b listen on port.
func listen(t *testing.T, b *side, ps PortSpace, port uint16) *ID {
	t.Helper()
	l, err := b.cm.CreateID(b.ec, ps)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.BindAddr(netip.AddrPortFrom(netip.Addr{}, port)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(8); err != nil {
		t.Fatal(err)
	}
	return l
}

// dial resolves b's address and route from a and creates a's QP: UD in
// port space UDP, else RC.
func dial(t *testing.T, a *side, ps PortSpace, dst netip.AddrPort) *ID {
	t.Helper()
	typ := verbs.RC
	if ps == PSUDP {
		typ = verbs.UD
	}
	return dialQP(t, a, ps, dst, typ)
}

// dialQP is dial with a QP of type typ.
func dialQP(t *testing.T, a *side, ps PortSpace, dst netip.AddrPort, typ verbs.QPType) *ID {
	t.Helper()
	id := resolve(t, a, ps, dst)
	init := rcInit(a)
	init.Type = typ
	if _, err := id.CreateQP(a.pd, init); err != nil {
		t.Fatal(err)
	}
	return id
}

// connect runs the whole exchange and returns the two connected IDs.
func connect(t *testing.T, a, b *side, reqPD, repPD []byte) (ca, cb *ID) {
	t.Helper()
	listen(t, b, PSTCP, 7174)
	ca = dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
	if err := ca.Connect(ConnParam{PrivateData: reqPD, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e := b.want(t, EventConnectRequest)
	if !bytes.HasPrefix(e.PrivateData, reqPD) || len(e.PrivateData) != mad.RDMACMMaxREQPrivateData {
		t.Fatalf("CONNECT_REQUEST private data %x, want %x then zeros to 56 bytes", e.PrivateData, reqPD)
	}
	if e.Param.ResponderResources != 1 || e.Param.InitiatorDepth != 1 || e.Param.RNRRetryCount != 7 {
		t.Errorf("CONNECT_REQUEST param %+v", e.Param)
	}
	cb = e.ID
	if _, err := cb.CreateQP(b.pd, rcInit(b)); err != nil {
		t.Fatal(err)
	}
	if err := cb.Accept(ConnParam{PrivateData: repPD, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e = a.want(t, EventEstablished)
	if !bytes.HasPrefix(e.PrivateData, repPD) {
		t.Fatalf("ESTABLISHED private data %x, want prefix %x", e.PrivateData, repPD)
	}
	b.want(t, EventEstablished)
	return ca, cb
}

// send posts one SEND from src's QP to dst's and checks it arrives.
func send(t *testing.T, from, to *side, qa, qb *verbs.QP, msg []byte) {
	t.Helper()
	rbuf := make([]byte, 64)
	rmr, err := to.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Dereg()
	if err := qb.PostRecv(verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	sbuf := append([]byte(nil), msg...)
	smr, err := from.pd.RegMR(sbuf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Dereg()
	if err := qa.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{smr.SGE(0, len(sbuf))}}); err != nil {
		t.Fatal(err)
	}
	// The send's completion, and the receive's if the CQ is shared (loopback).
	var recv *verbs.WC
	for {
		wc := verbstest.MustSucceed(t, from.cq)
		if wc.Opcode != verbs.WCRecv {
			break
		}
		recv = &wc
	}
	if recv == nil {
		wc := verbstest.MustSucceed(t, to.cq)
		recv = &wc
	}
	wc := *recv
	if got := rbuf[:wc.ByteLen]; !bytes.Equal(got, msg) {
		t.Fatalf("received %q, want %q", got, msg)
	}
}

func TestConnectSendDisconnect(t *testing.T) {
	for _, net := range verbstest.Networks {
		for _, activeCloses := range []bool{true, false} {
			name := net + "/active-disconnects"
			if !activeCloses {
				name = net + "/passive-disconnects"
			}
			t.Run(name, func(t *testing.T) {
				a, b := newSides(t, net, fastOptions, fastOptions)
				ca, cb := connect(t, a, b, []byte("hello from the client"), []byte("hello from the server"))
				send(t, a, b, ca.QP(), cb.QP(), []byte("ping"))
				send(t, b, a, cb.QP(), ca.QP(), []byte("pong"))
				first, second := a, b
				fid, sid := ca, cb
				if !activeCloses {
					first, second, fid, sid = b, a, cb, ca
				}
				if err := fid.Disconnect(); err != nil {
					t.Fatal(err)
				}
				second.want(t, EventDisconnected)
				if err := sid.Disconnect(); err != nil { // sends the DREP
					t.Fatal(err)
				}
				first.want(t, EventDisconnected)
				first.want(t, EventTimewaitExit)
				second.want(t, EventTimewaitExit)
				if s := fid.QP().State(); s != verbs.QPSErr {
					t.Errorf("QP after disconnect in %v, want ERR", s)
				}
				for _, id := range []*ID{ca, cb} {
					if err := id.Destroy(); err != nil {
						t.Error(err)
					}
				}
			})
		}
	}
}

func TestReject(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	listen(t, b, PSTCP, 7000)
	ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7000))
	if err := ca.Connect(ConnParam{PrivateData: []byte("let me in"), RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e := b.want(t, EventConnectRequest)
	if err := e.ID.Reject(bytes.Repeat([]byte("no"), 74)); err != nil { // 148 bytes, the limit
		t.Fatal(err)
	}
	if err := e.ID.Reject(nil); err == nil { // the limits: TestPrivateDataLimits
		t.Error("Reject after Reject succeeded")
	}
	r := a.want(t, EventRejected)
	if r.Status != int(mad.RejectConsumer) {
		t.Errorf("REJECTED status %d, want %d (consumer reject)", r.Status, mad.RejectConsumer)
	}
	if !bytes.Equal(r.PrivateData, bytes.Repeat([]byte("no"), 74)) {
		t.Errorf("REJECTED private data %q", r.PrivateData)
	}
	ca.Destroy()
	e.ID.Destroy()
}

func TestInvalidServiceID(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7999)) // nobody listens
	if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	r := a.want(t, EventRejected)
	if r.Status != int(mad.RejectInvalidServiceID) {
		t.Errorf("REJECTED status %d (%v), want 8 (invalid service ID)", r.Status, r.Err)
	}
}

func TestUnreachable(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	b.cm.Close() // b's QP1 is gone: nobody answers
	ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
	start := time.Now()
	if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	e := a.want(t, EventUnreachable)
	if e.Status != -int(syscall.ETIMEDOUT) {
		t.Errorf("UNREACHABLE status %d, want -ETIMEDOUT", e.Status)
	}
	// The REQ and its retries, each waiting ResponseTimeout.
	tries := fastOptions.MaxRetries + 1
	if d := time.Since(start); d < time.Duration(tries)*fastOptions.ResponseTimeout {
		t.Errorf("UNREACHABLE after %v, want at least %v", d, time.Duration(tries)*fastOptions.ResponseTimeout)
	}
	const sentPkts = verbs.Counter(0) // rxe's sent_pkts, the first counter
	if n := a.dev.Counters().Get(sentPkts); n < uint64(tries) {
		t.Errorf("%d packets sent, want the REQ and its retries (%d)", n, tries)
	}
}

func TestRouteErrorWithoutGIDType(t *testing.T) {
	a, b := newSides(t, "", Options{Defaults: fixedDefaults{mode: wire.RoCEv1}}, fastOptions)
	id, _ := a.cm.CreateID(a.ec, PSTCP)
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 1), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	e := a.want(t, EventRouteError)
	t.Log(e)
}

type fixedDefaults struct {
	mode wire.Version
	tos  uint8
}

func (f fixedDefaults) DefaultMode(string, int) (wire.Version, error) { return f.mode, nil }
func (f fixedDefaults) DefaultTOS(string, int) (uint8, error)         { return f.tos, nil }

func TestEventTypeString(t *testing.T) {
	if s := EventConnectRequest.String(); s != "RDMA_CM_EVENT_CONNECT_REQUEST" {
		t.Error(s)
	}
	if s := EventTimewaitExit.String(); s != "RDMA_CM_EVENT_TIMEWAIT_EXIT" {
		t.Error(s)
	}
}

// TestCrossingDREQs: both sides disconnect at once; each answers the
// other's DREQ (as rdma_client.pcap shows Linux doing).
func TestCrossingDREQs(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, b, nil, nil)
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	// b's DREQ may cross a's or follow it; either way both end disconnected.
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*side{a, b} {
		s.want(t, EventDisconnected)
		s.want(t, EventTimewaitExit)
	}
}

// TestDestroyConnected: destroying a connected ID sends a DREQ; the peer
// sees DISCONNECTED.
func TestDestroyConnected(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, b, nil, nil)
	if err := ca.Destroy(); err != nil {
		t.Fatal(err)
	}
	b.want(t, EventDisconnected)
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	b.want(t, EventTimewaitExit)
}

// TestLossyCM: with a third of the frames lost and a third duplicated in
// each direction, retransmitted REQ/REP/DREQ, duplicate REQs (REP resent),
// duplicate REPs (RTU resent) and duplicate DREQs still end in one
// connection and one disconnection per round. In virtual time: the 20 ms
// retries must not run out because a loaded machine stalled the peer.
func TestLossyCM(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := Options{ResponseTimeout: 20 * time.Millisecond, MaxRetries: 15, Timewait: 10 * time.Millisecond}
		a, b := newSides(t, "", o, o)
		for _, s := range []*side{a, b} {
			if err := s.fab.SetFaults(fabric.Faults{Loss: 0.3, Duplicate: 0.3}); err != nil {
				t.Fatal(err)
			}
		}
		listen(t, b, PSTCP, 9000)
		for round := range 10 {
			ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 9000))
			if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
				t.Fatal(err)
			}
			cb := acceptRC(t, b)
			a.want(t, EventEstablished)
			b.want(t, EventEstablished)
			if err := ca.Disconnect(); err != nil {
				t.Fatal(err)
			}
			b.want(t, EventDisconnected)
			if err := cb.Disconnect(); err != nil {
				t.Fatal(err)
			}
			// The DREP may be lost every time: a then gives up after its retries
			// with DISCONNECTED all the same.
			a.want(t, EventDisconnected)
			a.want(t, EventTimewaitExit)
			b.want(t, EventTimewaitExit)
			ca.Destroy()
			cb.Destroy()
			_ = round
		}
		for _, s := range []*side{a, b} {
			st := s.fab.FaultStats()
			if st.Lost.Load() == 0 || st.Duplicated.Load() == 0 {
				t.Errorf("%s: %d lost, %d duplicated: the faults did not fire", s.dev.Name(), st.Lost.Load(), st.Duplicated.Load())
			}
		}
	})
}

// TestRTULost: when no RTU arrives, the passive side resends the REP (the
// active side answers each with its RTU again) and after the last retry
// reports UNREACHABLE with -ETIMEDOUT.
func TestRTULost(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	listen(t, b, PSTCP, 9001)
	ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 9001))
	if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	cb := b.want(t, EventConnectRequest).ID
	if _, err := cb.CreateQP(b.pd, rcInit(b)); err != nil {
		t.Fatal(err)
	}
	if err := a.fab.SetFaults(fabric.Faults{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	if err := cb.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventEstablished)
	e := b.want(t, EventUnreachable)
	if e.Status != -int(syscall.ETIMEDOUT) {
		t.Errorf("UNREACHABLE status %d, want -ETIMEDOUT", e.Status)
	}
	// The peer answered (it sent the REQ): the error says what never came.
	if e.Err == nil || !strings.Contains(e.Err.Error(), "sent no RTU for our REP") || strings.Contains(e.Err.Error(), "no answer") {
		t.Errorf("UNREACHABLE error %v, want it to name the missing RTU", e.Err)
	}
	// The REP and each of its retries drew an RTU.
	if n, want := a.fab.FaultStats().Lost.Load(), uint64(fastOptions.MaxRetries+1); n != want {
		t.Errorf("%d frames lost from the active side, want %d RTUs", n, want)
	}
}

// TestUnreachableLinuxDefaults: with Linux's defaults (response timeout
// 4.096 µs × 2^20, 15 retries) an unanswered REQ is sent 16 times and
// UNREACHABLE comes 16 timeouts (≈ 68.7 s) after Connect, in virtual time.
func TestUnreachableLinuxDefaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSides(t, "", Options{}, Options{})
		b.cm.Close()
		ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
		start := time.Now()
		if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		e, err := a.ec.Get(ctx)
		if err != nil || e.Type != EventUnreachable {
			t.Fatalf("got %v, %v; want UNREACHABLE", e, err)
		}
		if d, want := time.Since(start), 16*expDuration(20); d != want {
			t.Errorf("UNREACHABLE after %v, want %v", d, want)
		}
		// The port has no RoCE v1 GID to probe the other version with; the
		// event says so rather than just "timed out".
		if e.Err == nil || !strings.Contains(e.Err.Error(), "port 1 has no RoCE v1 GID") {
			t.Errorf("UNREACHABLE error %v", e.Err)
		}
		if n := sentMADs(a); n != 17 {
			t.Errorf("%d MADs sent, want the REQ, 15 retries and the REJ (Timeout) cm.c sends on giving up", n)
		}
		ca.Destroy()
	})
}

// TestLoopback: both ends on one device and one CM, as rping -c to the
// host's own address.
func TestLoopback(t *testing.T) {
	a, _ := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, a, []byte("self"), []byte("same"))
	if ca.Device() != cb.Device() {
		t.Fatal("loopback IDs on different devices")
	}
	send(t, a, a, ca.QP(), cb.QP(), []byte("to myself"))
	if err := ca.Disconnect(); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventDisconnected) // the passive ID's
	if err := cb.Disconnect(); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventDisconnected) // the active ID's, on the DREP
}

// TestRemoveDevice: IDs on a removed device get DEVICE_REMOVAL; with no
// device left, ResolveAddr reports ADDR_ERROR.
func TestRemoveDevice(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, _ := connect(t, a, b, nil, nil)
	if err := a.cm.RemoveDevice(a.dev); err != nil {
		t.Fatal(err)
	}
	if e := a.want(t, EventDeviceRemoval); e.ID != ca {
		t.Errorf("DEVICE_REMOVAL for %p, want %p", e.ID, ca)
	}
	if err := a.cm.RemoveDevice(a.dev); err == nil {
		t.Error("second RemoveDevice succeeded")
	}
	id, _ := a.cm.CreateID(a.ec, PSTCP)
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 1), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrError)
	ca.Destroy()
	id.Destroy()
	// QP1 is free again: another CM can own it.
	cm2 := New(fastOptions)
	defer cm2.Close()
	if err := cm2.AddDevice(a.dev); err != nil {
		t.Fatal(err)
	}
}

// TestStartingPSN: each side's Starting PSN is the PSN it expects to
// receive, as Linux uses it (ib_send_cm_rep sets the passive side's rq_psn
// from its REP; the rping capture shows the client's first SEND carrying
// the REP's PSN and the server's first READ the REQ's). Linux rxe NAKs
// (PSN sequence error) a peer that reads the fields the other way round.
func TestStartingPSN(t *testing.T) {
	var mu sync.Mutex
	var reqPSN, repPSN uint32
	hook := func(in *inbound) {
		m, err := mad.Parse(in.mad)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if r, ok := m.REQ(); ok {
			reqPSN = r.StartingPSN()
		}
		if r, ok := m.REP(); ok {
			repPSN = r.StartingPSN()
		}
	}
	a, b := newSidesHook(t, "", fastOptions, fastOptions, hook, hook)
	ca, cb := connect(t, a, b, nil, nil)
	// The hook runs with the CM's lock held and takes mu: read the PSNs and
	// let go of mu before anything here takes the CM's lock (Destroy).
	mu.Lock()
	req, rep := reqPSN, repPSN
	mu.Unlock()
	active, passive := ca.QP().Query(), cb.QP().Query()
	for _, c := range []struct {
		what      string
		got, want uint32
	}{
		{"active sq_psn (the REP's)", uint32(active.SQPSN), rep},
		{"active rq_psn (the REQ's)", uint32(active.RQPSN), req},
		{"passive sq_psn (the REQ's)", uint32(passive.SQPSN), req},
		{"passive rq_psn (the REP's)", uint32(passive.RQPSN), rep},
	} {
		if c.got != c.want {
			t.Errorf("%s: %#x, want %#x", c.what, c.got, c.want)
		}
	}
	ca.Destroy()
	cb.Destroy()
}
