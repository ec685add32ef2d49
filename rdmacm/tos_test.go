package rdmacm

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// newCapturedSides is newSides (RoCE v2 over IPv4) with every frame a
// sends and receives written to the returned buffer. closeAll closes the
// CMs and devices (nothing sends after it), so that the capture can be
// read; the test's cleanup does it too.
func newCapturedSides(t *testing.T, oa, ob Options) (a, b *side, pcapBuf *bytes.Buffer, closeAll func()) {
	t.Helper()
	pcapBuf = new(bytes.Buffer)
	w, err := pcap.NewWriter(pcapBuf)
	if err != nil {
		t.Fatal(err)
	}
	fab := fabric.New()
	var closers []func()
	closed := false
	closeAll = func() {
		if closed {
			return
		}
		closed = true
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	closers = append(closers, func() { fab.Close() })
	t.Cleanup(closeAll)
	gids := verbstest.GIDs(verbstest.NetV2IPv4)
	mk := func(i int, o Options) *side {
		port, err := fab.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID}})
		if err != nil {
			t.Fatal(err)
		}
		var l link.Link = port
		if i == 0 {
			l = pcap.New(port, w)
		}
		dev, err := verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: l, MAC: port.MAC(),
			GIDs: []verbs.GIDEntry{gids[i]}})
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, func() { dev.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		cm := New(o)
		ec := cm.CreateEventChannel()
		closers = append(closers, func() { cm.Close(); ec.Close() })
		if err := cm.AddDevice(dev); err != nil {
			t.Fatal(err)
		}
		return &side{cm: cm, dev: dev, pd: pd, cq: cq, ec: ec, ip: ipOf(gids[i].GID), fab: port}
	}
	return mk(0, oa), mk(1, ob), pcapBuf, closeAll
}

// senderCommID returns the comm ID of the side that sent a CM MAD.
func senderCommID(m mad.MAD) (uint32, bool) {
	if r, ok := m.REQ(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.REP(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.RTU(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.DREQ(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.DREP(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.MRA(); ok {
		return r.LocalCommID(), true
	}
	if r, ok := m.REJ(); ok {
		return r.LocalCommID(), true
	}
	return 0, false
}

// TestSetTOS: an ID's TOS (rdma_set_option RDMA_OPTION_ID_TOS) replaces
// default_roce_tos in its route, so every packet of its connection carries
// it both ways: the CM MADs (REQ, whose primary traffic class it is, REP,
// RTU, DREQ, DREP) and the QPs' data and ACKs, the passive side's taken
// from the REQ. As in Linux: the last TOS before ResolveRoute counts, one
// set after it does not change the route, and neither the listener's TOS
// nor one set on the passive ID matters; another ID of the same CM keeps
// default_roce_tos.
func TestSetTOS(t *testing.T) {
	const (
		aDefault = 0x20 // a's default_roce_tos
		bDefault = 0x40 // b's: a passive side never uses it
		tos      = 0x68 // set on a's first ID before ResolveRoute
	)
	a, b, buf, closeAll := newCapturedSides(t,
		Options{ResponseTimeout: fastOptions.ResponseTimeout, MaxRetries: fastOptions.MaxRetries, Timewait: fastOptions.Timewait,
			Defaults: fixedDefaults{mode: wire.RoCEv2, tos: aDefault}},
		Options{ResponseTimeout: fastOptions.ResponseTimeout, MaxRetries: fastOptions.MaxRetries, Timewait: fastOptions.Timewait,
			Defaults: fixedDefaults{mode: wire.RoCEv2, tos: bDefault}})

	l, err := b.cm.CreateID(b.ec, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetTOS(0x60); err != nil { // a listener's TOS: Linux's RoCE children ignore it
		t.Fatal(err)
	}
	if err := l.BindAddr(netip.AddrPortFrom(netip.Addr{}, 7174)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(8); err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(b.ip, 7174)

	// a's first ID: TOS set when created, set again once its address is
	// resolved (perftest's place), and once more after its route is.
	ca, err := a.cm.CreateID(a.ec, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.SetTOS(0x10); err != nil {
		t.Fatal(err)
	}
	if err := ca.ResolveAddr(netip.Addr{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrResolved)
	if err := ca.SetTOS(tos); err != nil {
		t.Fatal(err)
	}
	if err := ca.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventRouteResolved)
	if err := ca.SetTOS(0x88); err != nil { // too late for this route
		t.Fatal(err)
	}
	qa, err := ca.CreateQP(a.pd, rcInit(a))
	if err != nil {
		t.Fatal(err)
	}
	accept := func(setTOS bool) (*ID, *verbs.QP) {
		t.Helper()
		cb := b.want(t, EventConnectRequest).ID
		if setTOS {
			if err := cb.SetTOS(0xa0); err != nil { // the route is the REQ's already
				t.Fatal(err)
			}
		}
		qb, err := cb.CreateQP(b.pd, rcInit(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := cb.Accept(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		a.want(t, EventEstablished)
		b.want(t, EventEstablished)
		return cb, qb
	}
	param := ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if err := ca.Connect(param); err != nil {
		t.Fatal(err)
	}
	cb, qb := accept(true)

	// a's second ID, while the first is connected: default_roce_tos.
	ca2 := dial(t, a, PSTCP, dst)
	if err := ca2.Connect(param); err != nil {
		t.Fatal(err)
	}
	cb2, qb2 := accept(false)
	qa2 := ca2.QP()

	for _, c := range []struct {
		name   string
		qp     *verbs.QP
		id     *ID
		wantTC uint8
	}{{"a's first", qa, ca, tos}, {"b's first", qb, cb, tos}, {"a's second", qa2, ca2, aDefault}, {"b's second", qb2, cb2, aDefault}} {
		if tc := c.qp.Query().AH.GRH.TrafficClass; tc != c.wantTC {
			t.Errorf("%s QP: traffic class %#x, want %#x", c.name, tc, c.wantTC)
		}
		attr, _, err := c.id.InitQPAttr(verbs.QPSRTR)
		if err != nil || attr.AH.GRH.TrafficClass != c.wantTC {
			t.Errorf("%s ID: RTR traffic class %#x (%v), want %#x", c.name, attr.AH.GRH.TrafficClass, err, c.wantTC)
		}
	}

	send(t, a, b, qa, qb, []byte("a to b, first"))
	send(t, b, a, qb, qa, []byte("b to a, first"))
	send(t, a, b, qa2, qb2, []byte("a to b, second"))
	send(t, b, a, qb2, qa2, []byte("b to a, second"))
	for _, id := range []*ID{ca, ca2} {
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []*ID{cb, cb2} {
		b.want(t, EventDisconnected)
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		a.want(t, EventDisconnected)
	}
	for _, s := range []*side{a, b} {
		for range 2 {
			s.want(t, EventTimewaitExit)
		}
	}

	// Which connection a frame belongs to: data and ACKs by their QP, CM
	// MADs by their sender's comm ID.
	a.cm.mu.Lock()
	b.cm.mu.Lock()
	conns := map[uint32]string{qa.Num(): "first", qb.Num(): "first", qa2.Num(): "second", qb2.Num(): "second"}
	comms := map[uint32]string{ca.lcid: "first", cb.lcid: "first", ca2.lcid: "second", cb2.lcid: "second"}
	b.cm.mu.Unlock()
	a.cm.mu.Unlock()
	want := map[string]uint8{"first": tos, "second": aDefault}
	closeAll()
	count := map[string]int{}
	err = pcap.Read(bytes.NewReader(buf.Bytes()), func(f pcap.Frame) error {
		var pk wire.Packet
		if err := pk.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			t.Errorf("frame %d: %v", f.Number, err)
			return nil
		}
		h := pk.IPv4()
		if h == nil {
			t.Fatalf("frame %d: not RoCE v2 over IPv4", f.Number)
		}
		way := "a→b"
		if h.Src() == b.ip {
			way = "b→a"
		}
		conn, kind := conns[pk.BTH().DestQP()], "QP"
		if pk.BTH().DestQP() == 1 {
			kind = "CM"
			m, err := mad.Parse(pk.Payload())
			if err != nil {
				t.Errorf("frame %d: %v", f.Number, err)
				return nil
			}
			cid, ok := senderCommID(m)
			if !ok {
				t.Errorf("frame %d: unexpected MAD %v", f.Number, m.Header().AttributeID())
				return nil
			}
			conn = comms[cid]
			if r, ok := m.REQ(); ok && r.PrimaryTrafficClass() != want[conn] {
				t.Errorf("frame %d: %s connection's REQ names traffic class %#x, want %#x", f.Number, conn, r.PrimaryTrafficClass(), want[conn])
			}
		}
		if conn == "" {
			t.Errorf("frame %d (%v %s, QP %d): of neither connection", f.Number, pk.Opcode(), way, pk.BTH().DestQP())
			return nil
		}
		if h.TOS() != want[conn] {
			t.Errorf("frame %d (%s connection, %v %s): TOS %#x, want %#x", f.Number, conn, pk.Opcode(), way, h.TOS(), want[conn])
		}
		count[conn+" "+way+" "+kind]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, conn := range []string{"first", "second"} {
		for _, k := range []string{" a→b CM", " a→b QP", " b→a CM", " b→a QP"} {
			if count[conn+k] == 0 {
				t.Errorf("no %s packets in the capture: %v", conn+k, count)
			}
		}
	}
	t.Logf("packets by connection: %v", count)
}

// TestSetTOSStates: the TOS is accepted in every state, as Linux's
// rdma_set_service_type takes it, but not on a destroyed ID.
func TestSetTOSStates(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	l := listen(t, b, PSTCP, 7175)
	if err := l.SetTOS(0xff); err != nil {
		t.Errorf("listening ID: %v", err)
	}
	ca, cb := connect(t, a, b, nil, nil)
	for _, id := range []*ID{ca, cb} {
		if err := id.SetTOS(0); err != nil {
			t.Errorf("connected ID: %v", err)
		}
	}
	if err := ca.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := ca.SetTOS(1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("destroyed ID: %v, want EINVAL", err)
	}
	b.want(t, EventDisconnected)
	cb.Disconnect()
	b.want(t, EventTimewaitExit)
}
