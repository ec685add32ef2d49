// Package verbstest gives tests two goroce devices joined by an in-memory
// fabric, with QPs connected and ready, so any package can test RDMA code
// without a network.
package verbstest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
)

// Networks a pair can be on.
const (
	NetV2IPv4 = "v2-IPv4" // RoCE v2 over IPv4 (the default)
	NetV2IPv6 = "v2-IPv6" // RoCE v2 over IPv6
	NetV1     = "v1"      // RoCE v1 (Ethertype 0x8915)
)

// Networks lists every network a pair can be on.
var Networks = []string{NetV2IPv4, NetV2IPv6, NetV1}

// GIDs returns the two GIDs used on net.
func GIDs(net string) [2]verbs.GIDEntry {
	switch net {
	case NetV2IPv6:
		return [2]verbs.GIDEntry{
			{GID: netip.MustParseAddr("fd00:c0:2::1"), Type: verbs.GIDTypeRoCEv2, Netdev: "fab0"},
			{GID: netip.MustParseAddr("fd00:c0:2::2"), Type: verbs.GIDTypeRoCEv2, Netdev: "fab1"}}
	case NetV1:
		return [2]verbs.GIDEntry{
			{GID: netip.MustParseAddr("fe80::200:ff:fe00:1"), Type: verbs.GIDTypeRoCEv1, Netdev: "fab0"},
			{GID: netip.MustParseAddr("fe80::200:ff:fe00:2"), Type: verbs.GIDTypeRoCEv1, Netdev: "fab1"}}
	}
	return [2]verbs.GIDEntry{
		{GID: netip.MustParseAddr("::ffff:192.0.2.1"), Type: verbs.GIDTypeRoCEv2, Netdev: "fab0"},
		{GID: netip.MustParseAddr("::ffff:192.0.2.2"), Type: verbs.GIDTypeRoCEv2, Netdev: "fab1"}}
}

// Options configure a Pair. Zero values mean the documented defaults.
type Options struct {
	Type    verbs.QPType // RC (default), UC or UD
	Net     string       // NetV2IPv4 (default), NetV2IPv6 or NetV1
	FaultsA fabric.Faults
	FaultsB fabric.Faults
	Seed    uint64
	MTU     verbs.MTU   // path MTU; default 1024
	Cap     verbs.QPCap // default 1024 WRs each way, 4 SGEs, 64 bytes inline
	CQE     int         // default 8192
	// Tune may change the RTR and RTS attributes before they are applied
	// (defaults: timeout 14 (67 ms), retry_cnt 7, rnr_retry 7, min_rnr_timer
	// 12 (0.64 ms), max_rd_atomic and max_dest_rd_atomic 16, PSNs 0x1000).
	Tune func(rtr, rts *verbs.QPAttr)
	// QPAccess is the QPs' qp_access_flags; default all remote access.
	QPAccess verbs.Access
	// NoConnect leaves the QPs in RESET.
	NoConnect bool
	// PortMTU is the fabric ports' MTU (fabric.PortConfig.MTU); 0 is the
	// fabric's default. Fabric only.
	PortMTU int
	// Wrap, when set, gives the link side 0 (A) or 1 (B) opens its device
	// on: a decorator of port (one that loses, counts or records packets).
	// Fabric only.
	Wrap func(side int, port link.Link) link.Link
}

// defaults fills in the documented defaults of zero fields.
func (o *Options) defaults() {
	if o.Type == 0 {
		o.Type = verbs.RC
	}
	if o.Net == "" {
		o.Net = NetV2IPv4
	}
	if o.MTU == 0 {
		o.MTU = verbs.MTU1024
	}
	if o.Cap == (verbs.QPCap{}) {
		o.Cap = verbs.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}
	}
	if o.CQE == 0 {
		o.CQE = 8192
	}
	if o.QPAccess == 0 {
		o.QPAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead |
			verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
		if o.Type == verbs.UC {
			o.QPAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
		}
	}
}

// Side is one end of a pair.
type Side struct {
	Dev      *verbs.Device
	PD       *verbs.PD
	CQ       *verbs.CQ // send completions
	RCQ      *verbs.CQ // receive completions
	QP       *verbs.QP
	Port     *fabric.Port // nil on a registered network other than the fabric
	GID      verbs.GIDEntry
	GIDIndex uint8 // GID's index in Dev's table
}

// Endpoint is one end of a registered network: a running device and the
// GID its QPs address each other with.
type Endpoint struct {
	Dev      *verbs.Device
	GID      verbs.GIDEntry
	GIDIndex uint8
}

// NetworkFunc makes the two devices of a network for one test, and
// registers their teardown with t.Cleanup.
type NetworkFunc func(t testing.TB) (a, b Endpoint)

var (
	netMu    sync.Mutex
	networks = map[string]NetworkFunc{} // guarded by netMu
)

// RegisterNetwork makes NewPair build pairs on fn when Options.Net is
// name: the same test bodies then run over real links (package host's
// devices on veth, for instance) as over the fabric.
func RegisterNetwork(name string, fn NetworkFunc) {
	netMu.Lock()
	networks[name] = fn
	netMu.Unlock()
}

func lookupNetwork(name string) NetworkFunc {
	netMu.Lock()
	defer netMu.Unlock()
	return networks[name]
}

// Pair is two devices on one fabric with a QP each.
type Pair struct {
	A, B   Side
	Fabric *fabric.Fabric
	Opts   Options
}

// NewPair builds a pair and registers its teardown with t.Cleanup.
func NewPair(t testing.TB, o Options) *Pair {
	t.Helper()
	o.defaults()
	p := &Pair{Opts: o}
	if fn := lookupNetwork(o.Net); fn != nil {
		a, b := fn(t)
		for i, s := range []*Side{&p.A, &p.B} {
			e := a
			if i == 1 {
				e = b
			}
			s.Dev, s.GID, s.GIDIndex = e.Dev, e.GID, e.GIDIndex
		}
	} else {
		p.Fabric = fabric.New()
		gids := GIDs(o.Net)
		for i, s := range []*Side{&p.A, &p.B} {
			fa := o.FaultsA
			if i == 1 {
				fa = o.FaultsB
			}
			port, err := p.Fabric.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID},
				Faults: fa, Seed: o.Seed*2 + uint64(i), MTU: o.PortMTU})
			if err != nil {
				t.Fatal(err)
			}
			s.Port, s.GID = port, gids[i]
			var l link.Link = port
			if o.Wrap != nil {
				l = o.Wrap(i, port)
			}
			s.Dev, err = verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: l, MAC: port.MAC(),
				GIDs: []verbs.GIDEntry{gids[i]}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []*Side{&p.A, &p.B} {
		var err error
		if s.PD, err = s.Dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.CQ, err = s.Dev.CreateCQ(o.CQE); err != nil {
			t.Fatal(err)
		}
		if s.RCQ, err = s.Dev.CreateCQ(o.CQE); err != nil {
			t.Fatal(err)
		}
		if s.QP, err = s.PD.CreateQP(verbs.QPInitAttr{Type: o.Type, SendCQ: s.CQ, RecvCQ: s.RCQ, Cap: o.Cap}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(p.Close)
	if !o.NoConnect {
		if err := p.Connect(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Close destroys both devices and the fabric. (A registered network's
// devices are closed by the cleanup its NetworkFunc registered.)
func (p *Pair) Close() {
	if p.Fabric == nil {
		return
	}
	p.A.Dev.Close()
	p.B.Dev.Close()
	p.Fabric.Close()
}

// Connect moves both QPs to RTS, each addressed at the other.
func (p *Pair) Connect() error {
	if err := ConnectQP(p.A.QP, p.B.QP.Num(), p.B.GID.GID, p.A.GIDIndex, p.Opts); err != nil {
		return err
	}
	return ConnectQP(p.B.QP, p.A.QP.Num(), p.A.GID.GID, p.B.GIDIndex, p.Opts)
}

// ConnectQP moves qp from RESET to RTS, connected (RC, UC) to remote QP
// rqpn at GID dgid, sending from GID index sgidIndex.
func ConnectQP(qp *verbs.QP, rqpn uint32, dgid netip.Addr, sgidIndex uint8, o Options) error {
	o.Type = qp.Type()
	o.defaults()
	typ := qp.Type()
	init := &verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: o.QPAccess, QKey: 0x11111111}
	m := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if typ == verbs.UD || typ == verbs.GSI {
		m |= verbs.AttrQKey
	} else {
		m |= verbs.AttrAccessFlags
	}
	if err := qp.Modify(init, m); err != nil {
		return err
	}
	mtu := o.MTU
	if mtu == 0 {
		mtu = verbs.MTU1024
	}
	rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: mtu, DestQPN: rqpn, RQPSN: 0x1000, MaxDestRdAtomic: 16,
		MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: dgid, SGIDIndex: sgidIndex, HopLimit: 64}}}
	rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x1000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	if o.Tune != nil {
		o.Tune(rtr, rts)
	}
	switch typ {
	case verbs.RC:
		m = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
			verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	case verbs.UC:
		m = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	default:
		m = verbs.AttrState
	}
	if err := qp.Modify(rtr, m); err != nil {
		return err
	}
	m = verbs.AttrState | verbs.AttrSQPSN
	if typ == verbs.RC {
		m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	}
	return qp.Modify(rts, m)
}

// Poll waits up to timeout for one completion on cq.
func Poll(t testing.TB, cq *verbs.CQ, timeout time.Duration) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wc [1]verbs.WC
	if _, err := cq.PollWait(ctx, wc[:]); err != nil {
		t.Fatalf("no completion within %v: %v", timeout, err)
	}
	return wc[0]
}

// MustSucceed waits for one completion and fails t unless it is IBV_WC_SUCCESS.
func MustSucceed(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	wc := Poll(t, cq, 30*time.Second)
	if wc.Status != verbs.WCSuccess {
		t.Fatalf("completion: %v", &wc)
	}
	return wc
}
