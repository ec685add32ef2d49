package rdmacm

import (
	"bufio"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// capture returns a hook that passes copies of received MADs of attribute
// attr to a channel.
func capture(attr mad.AttributeID) (func(*inbound), chan *inbound) {
	ch := make(chan *inbound, 16)
	return func(in *inbound) {
		if mad.Header(in.mad).AttributeID() == attr {
			c := *in
			select {
			case ch <- &c:
			default:
			}
		}
	}, ch
}

func recvMAD(t *testing.T, ch chan *inbound) *inbound {
	t.Helper()
	select {
	case in := <-ch:
		return in
	case <-time.After(testenv.Slow):
		t.Fatal("no MAD captured")
	}
	return nil
}

// goldenSection returns the "Name: value" lines of one MAD of a golden file.
func goldenSection(t *testing.T, file, title string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "# ") {
			if in {
				break
			}
			in = strings.Contains(l, title)
			continue
		}
		if in && strings.HasPrefix(l, "    ") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), ": ")
			out[k] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no %q", file, title)
	}
	return out
}

// TestREQMatchesRping checks, field by field, the REQ goroce sends against
// the one Linux's rping sent (wire/mad/testdata/rping.golden), with the
// same CM ports (0xdf97 → 7174) so the flow label must match too. Fields
// that depend on addresses, QPNs, PSNs, GUIDs and random comm IDs differ.
func TestREQMatchesRping(t *testing.T) {
	hook, reqs := capture(mad.AttrREQ)
	linuxRetries := Options{ResponseTimeout: fastOptions.ResponseTimeout, Timewait: fastOptions.Timewait}
	a, b := newSidesHook(t, "", linuxRetries, fastOptions, nil, hook)
	listen(t, b, PSTCP, 7174)
	id, _ := a.cm.CreateID(a.ec, PSTCP)
	if err := id.BindAddr(netip.AddrPortFrom(netip.Addr{}, 0xdf97)); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7174), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrResolved)
	id.ResolveRoute(time.Second)
	a.want(t, EventRouteResolved)
	if _, err := id.CreateQP(a.pd, rcInit(a)); err != nil {
		t.Fatal(err)
	}
	// rping's conn param: responder resources and initiator depth 1, retry 7, RNR retry 7.
	if err := id.Connect(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	in := recvMAD(t, reqs)
	b.want(t, EventConnectRequest)
	want := goldenSection(t, "../wire/mad/testdata/rping.golden", "ConnectRequest (REQ)")
	differ := map[string]bool{"TransactionID": true, "LocalCommID": true, "LocalCAGUID": true, "LocalQPN": true,
		"StartingPSN": true, "PrimaryLocalPortGID": true, "PrimaryRemotePortGID": true, "PrivateData": true,
		"SrcAddr": true, "DstAddr": true,
		"PathPacketPayloadMTU": true} // the port's active MTU: 1024 in the lab (netdev MTU 1500), 4096 on the fabric
	m := mad.MAD(in.mad)
	compareGolden(t, m, want, differ)
	hdr, err := m.IPCM()
	if err != nil {
		t.Fatal(err)
	}
	if hdr.SrcAddr() != a.ip || hdr.DstAddr() != b.ip {
		t.Errorf("IP CM header %v → %v, want %v → %v", hdr.SrcAddr(), hdr.DstAddr(), a.ip, b.ip)
	}
	req, _ := m.REQ()
	if got := verbs.MTU(req.PathPacketPayloadMTU()); got != a.dev.ActiveMTU() {
		t.Errorf("REQ path MTU %v, want the port's active MTU %v", got, a.dev.ActiveMTU())
	}
	if g := req.PrimaryLocalPortGID(); netip.AddrFrom16(g) != gidOf(a.ip) {
		t.Errorf("primary local GID %v", netip.AddrFrom16(g))
	}
	// cm_form_tid: rping's comm ID 0xba6bbd67 under agent high TID 2.
	ag := &agent{hiTID: 2}
	if got := ag.tid(0xba6bbd67); got != 0x0000000267bd6bba {
		t.Errorf("tid %#x, want rping's 0x0000000267bd6bba", got)
	}
	if got := mad.Header(in.mad).TransactionID(); uint32(got) != uint32(a.cm.agents[0].tid(req.LocalCommID())) {
		t.Errorf("REQ tid %#x does not carry comm ID %#x as cm_form_tid does", got, req.LocalCommID())
	}
}

// TestDefaultTOS: default_roce_tos becomes the REQ's traffic class and the
// data QP's.
func TestDefaultTOS(t *testing.T) {
	hook, reqs := capture(mad.AttrREQ)
	a, b := newSidesHook(t, "", Options{Defaults: fixedDefaults{mode: wire.RoCEv2, tos: 0x68}}, fastOptions, nil, hook)
	listen(t, b, PSTCP, 5000)
	id := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 5000))
	if err := id.Connect(ConnParam{RetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	in := recvMAD(t, reqs)
	req, _ := mad.MAD(in.mad).REQ()
	if tc := req.PrimaryTrafficClass(); tc != 0x68 {
		t.Errorf("REQ traffic class %#x, want 0x68", tc)
	}
	if in.tc != 0x68 {
		t.Errorf("REQ sent with TOS %#x, want 0x68", in.tc)
	}
	b.want(t, EventConnectRequest)
}

// TestClassPortInfoGet: a CM ClassPortInfo Get is answered as Linux's MAD
// layer does: the request back with method GetResp and status 0x000C.
func TestClassPortInfoGet(t *testing.T) {
	hook, resps := capture(mad.AttrClassPortInfo)
	a, b := newSidesHook(t, "", fastOptions, fastOptions, hook, nil)
	get := mad.NewCMHeader(mad.AttrClassPortInfo, 0x1234)
	get.Method = mad.MethodGet
	m := get.Append(make([]byte, 0, mad.Size))
	m = append(m, make([]byte, mad.DataLen)...)
	ag := a.cm.agents[0]
	a.cm.mu.Lock()
	ag.send(gidOf(b.ip), 0, 0, m, 1)
	a.cm.mu.Unlock()
	in := recvMAD(t, resps)
	h := mad.Header(in.mad)
	if h.Method() != mad.MethodGetResp || h.Status() != 0x000C || h.TransactionID() != 0x1234 {
		t.Errorf("answer: method %v status %#04x tid %#x; want GetResp, 0x000C, 0x1234", h.Method(), uint16(h.Status()), h.TransactionID())
	}
}

// TestSIDR: a UD "connection" over SIDR_REQ/SIDR_REP, then a datagram.
func TestSIDR(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	listen(t, b, PSUDP, 7174)
	ca := dial(t, a, PSUDP, netip.AddrPortFrom(b.ip, 7174))
	if err := ca.Connect(ConnParam{PrivateData: []byte("ud?")}); err != nil {
		t.Fatal(err)
	}
	e := b.want(t, EventConnectRequest)
	if string(e.PrivateData[:3]) != "ud?" {
		t.Errorf("SIDR private data %q", e.PrivateData[:3])
	}
	qb := acceptUD(t, b, e.ID, []byte("ud!"))
	est := a.want(t, EventEstablished)
	sendUD(t, a, b, ca, est, qb, []byte("datagram"))
}

// sendUD checks the UD parameters the active ID ca learned (ESTABLISHED
// event est) name b's QP qb, and sends it a datagram with them.
func sendUD(t *testing.T, a, b *side, ca *ID, est Event, qb *verbs.QP, msg []byte) {
	t.Helper()
	ud := ca.UD()
	if ud.QPNum != qb.Num() || ud.QKey != udpQKey || est.Param.QPNum != qb.Num() {
		t.Fatalf("UD param %+v, event QPN %d; want QPN %d, Q_Key %#x", ud, est.Param.QPNum, qb.Num(), udpQKey)
	}
	ah, err := a.pd.CreateAH(ud.AH)
	if err != nil {
		t.Fatal(err)
	}
	rbuf := make([]byte, 128)
	rmr, _ := b.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err := qb.PostRecv(verbs.RecvWR{SGList: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	if err := ca.QP().PostSend(verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: msg,
		AH: ah, RemoteQPN: ud.QPNum, RemoteQKey: ud.QKey}); err != nil {
		t.Fatal(err)
	}
	wc := recvWC(t, b)
	if got := string(rbuf[grhLen:wc.ByteLen]); got != string(msg) {
		t.Errorf("UD received %q, want %q", got, msg)
	}
}

func recvWC(t *testing.T, s *side) verbs.WC {
	t.Helper()
	for {
		wc := pollOne(t, s)
		if wc.Opcode == verbs.WCRecv {
			if wc.Status != verbs.WCSuccess {
				t.Fatalf("receive: %v", &wc)
			}
			return wc
		}
	}
}

func pollOne(t *testing.T, s *side) verbs.WC {
	t.Helper()
	return verbstest.Poll(t, s.cq, testenv.Slow)
}

// compareGolden compares every header and attribute field of m with a
// golden section, except those in differ.
func compareGolden(t *testing.T, m mad.MAD, want map[string]string, differ map[string]bool) {
	t.Helper()
	check := func(f mad.Field, v mad.Value) {
		w, ok := want[f.Name]
		if !ok {
			t.Errorf("%v: field %s not in the golden file", m.Header().AttributeID(), f.Name)
			return
		}
		if differ[f.Name] {
			return
		}
		if got := v.String(); got != w {
			t.Errorf("%v: %s = %s, rping sent %s", m.Header().AttributeID().Short(), f.Name, got, w)
		}
	}
	for f, v := range m.Header().All() {
		check(f, v)
	}
	for f, v := range m.DataFields() {
		check(f, v)
	}
}

// TestExchangeMatchesRping runs rping's exchange (client connects and
// disconnects) and compares REP, RTU, DREQ and DREP with the ones Linux
// sent, and their transaction IDs with the REQ's as Linux pairs them.
func TestExchangeMatchesRping(t *testing.T) {
	all := func() (func(*inbound), chan *inbound) {
		ch := make(chan *inbound, 32)
		return func(in *inbound) {
			c := *in
			select {
			case ch <- &c:
			default:
			}
		}, ch
	}
	ha, inA := all()
	hb, inB := all()
	a, b := newSidesHook(t, "", fastOptions, fastOptions, ha, hb)
	ca, cb := connect(t, a, b, nil, nil)
	disconnectBoth(t, a, b, ca, cb)
	got := map[mad.AttributeID]mad.MAD{}
	for len(got) < 5 {
		var in *inbound
		select {
		case in = <-inA:
		case in = <-inB:
		case <-time.After(testenv.Slow):
			t.Fatalf("captured only %d kinds of MAD", len(got))
		}
		m := mad.MAD(in.mad)
		got[m.Header().AttributeID()] = m
	}
	golden := "../wire/mad/testdata/rping.golden"
	ids := map[string]bool{"TransactionID": true, "LocalCommID": true, "RemoteCommID": true, "LocalCAGUID": true,
		"LocalQPN": true, "StartingPSN": true, "RemoteQPN": true}
	compareGolden(t, got[mad.AttrREP], goldenSection(t, golden, "(REP)"), ids)
	compareGolden(t, got[mad.AttrRTU], goldenSection(t, golden, "(RTU)"), ids)
	compareGolden(t, got[mad.AttrDREQ], goldenSection(t, golden, "(DREQ)"), ids)
	compareGolden(t, got[mad.AttrDREP], goldenSection(t, golden, "(DREP)"), ids)
	tid := func(a mad.AttributeID) uint64 { return got[a].Header().TransactionID() }
	for _, a := range []mad.AttributeID{mad.AttrREP, mad.AttrRTU, mad.AttrDREQ, mad.AttrDREP} {
		if tid(a) != tid(mad.AttrREQ) {
			t.Errorf("%v transaction ID %#x, want the REQ's %#x (as in rping.pcap)", a.Short(), tid(a), tid(mad.AttrREQ))
		}
	}
	req, _ := got[mad.AttrREQ].REQ()
	rep, _ := got[mad.AttrREP].REP()
	dreq, _ := got[mad.AttrDREQ].DREQ()
	if rep.RemoteCommID() != req.LocalCommID() || dreq.RemoteQPN() != rep.LocalQPN() {
		t.Errorf("comm IDs / QPNs do not pair: REQ %#x, REP remote %#x; DREQ remote QPN %#x, REP QPN %#x",
			req.LocalCommID(), rep.RemoteCommID(), dreq.RemoteQPN(), rep.LocalQPN())
	}
}

// TestSIDRNoListener: a SIDR_REQ nobody serves gets SIDR_REP status 1
// (service ID not supported); the active side reports UNREACHABLE with it.
func TestSIDRNoListener(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca := dial(t, a, PSUDP, netip.AddrPortFrom(b.ip, 4444))
	if err := ca.Connect(ConnParam{}); err != nil {
		t.Fatal(err)
	}
	e := a.want(t, EventUnreachable)
	if e.Status != int(mad.SIDRUnsupported) {
		t.Errorf("UNREACHABLE status %d (%v), want %d", e.Status, e.Err, mad.SIDRUnsupported)
	}
}

// TestHandleGarbage feeds CM MADs with valid headers and random bodies,
// and truncated ones, some aimed at a live connection's comm IDs, to a CM
// with a listener and a connection: nothing panics or deadlocks.
func TestHandleGarbage(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, b, nil, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	attrs := []mad.AttributeID{mad.AttrClassPortInfo, mad.AttrREQ, mad.AttrMRA, mad.AttrREJ, mad.AttrREP, mad.AttrRTU,
		mad.AttrDREQ, mad.AttrDREP, mad.AttrSIDRREQ, mad.AttrSIDRREP, mad.AttrLAP, mad.AttrAPR}
	ag := b.cm.agents[0]
	for i := range 5000 {
		h := mad.NewCMHeader(attrs[rng.IntN(len(attrs))], rng.Uint64())
		if i%7 == 0 {
			h.Method = mad.Method(rng.IntN(256))
		}
		m := h.Append(make([]byte, 0, mad.Size))
		for len(m) < mad.Size {
			m = append(m, byte(rng.Uint32()))
		}
		if i%5 == 0 { // point the comm IDs at the live connection
			binary.BigEndian.PutUint32(m[mad.HeaderLen:], ca.lcid)
			binary.BigEndian.PutUint32(m[mad.HeaderLen+4:], cb.lcid)
		}
		if i%11 == 0 {
			m = m[:rng.IntN(len(m))]
		}
		in := &inbound{mad: m, src: gidOf(a.ip), dst: gidOf(b.ip), srcQP: 1}
		b.cm.mu.Lock()
		b.cm.handle(ag, in)
		b.cm.mu.Unlock()
	}
}

// TestFlowControlBit checks that ConnParam.FlowControl sets the End-to-End
// Flow Control bit of the REQ and the REP, as rdma_conn_param.flow_control
// does (librdmacm's rsockets set it: rstream's REQ and REP carry 1), that
// the other side's event reports it, and that it stays clear by default,
// as in rping's REQ.
func TestFlowControlBit(t *testing.T) {
	for _, fc := range []bool{false, true} {
		hookA, reps := capture(mad.AttrREP)
		hookB, reqs := capture(mad.AttrREQ)
		a, b := newSidesHook(t, "", fastOptions, fastOptions, hookA, hookB)
		listen(t, b, PSTCP, 7471)
		ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7471))
		if err := ca.Connect(ConnParam{FlowControl: fc, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		if got := mad.REQ(mad.MAD(recvMAD(t, reqs).mad).Data()).EndToEndFlowControl(); got != fc {
			t.Errorf("FlowControl %v: REQ's End-to-End Flow Control bit %v", fc, got)
		}
		e := b.want(t, EventConnectRequest)
		if e.Param.FlowControl != fc {
			t.Errorf("FlowControl %v: CONNECT_REQUEST's Param.FlowControl %v", fc, e.Param.FlowControl)
		}
		if _, err := e.ID.CreateQP(b.pd, rcInit(b)); err != nil {
			t.Fatal(err)
		}
		if err := e.ID.Accept(ConnParam{FlowControl: fc, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		if got := mad.REP(mad.MAD(recvMAD(t, reps).mad).Data()).EndToEndFlowControl(); got != fc {
			t.Errorf("FlowControl %v: REP's End-to-End Flow Control bit %v", fc, got)
		}
		if e := a.want(t, EventEstablished); e.Param.FlowControl != fc {
			t.Errorf("FlowControl %v: ESTABLISHED's Param.FlowControl %v", fc, e.Param.FlowControl)
		}
		b.want(t, EventEstablished)
		disconnectBoth(t, a, b, ca, e.ID)
	}
}
