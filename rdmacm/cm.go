// Package rdmacm is librdmacm in Go: CM IDs, address and route resolution,
// and the IB CM protocol (REQ/REP/RTU/REJ/MRA/DREQ/DREP, IBA Vol 1 ch. 12)
// spoken on each device's QP1 as Linux's cm.c and cma.c speak it, with the
// RDMA IP CM service (Annex A11) private-data header.
//
// A CM owns QP1 of every device given to AddDevice: one goroutine per device
// receives MADs from QP1's completion queue and dispatches them by
// communication ID or service ID; all protocol state is guarded by CM.mu;
// response timeouts and retries run on timers that stop with their ID
// (one queue per CM behind a single time.Timer).
//
//	dir := host.RunDir()
//	cm := rdmacm.New(rdmacm.Options{Defaults: config.Open(dir, host.NewRegistry(dir))})
//	cm.AddDevice(dev.Device)
//	ec := cm.CreateEventChannel()
//	id, _ := cm.CreateID(ec, rdmacm.PSTCP)
//	id.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("192.0.2.11:7174"), time.Second)
//	// ADDR_RESOLVED → id.ResolveRoute → ROUTE_RESOLVED → id.CreateQP → id.Connect → ESTABLISHED
//
// CM.Dial and CM.Listen wrap that sequence and return connected QPs.
//
// An ID need not own its QP: Connect and Accept on an ID without one name
// the caller's QP in ConnParam.QPNum (rdma_conn_param.qp_num), and the
// caller moves it through INIT, RTR and RTS itself with the attributes
// InitQPAttr gives (rdma_init_qp_attr). The active side then gets
// CONNECT_RESPONSE for the REP, with the REP's private data and the peer's
// QP number and READ depths, instead of ESTABLISHED, and calls Establish
// (rdma_establish), which sends the RTU: the passive side gets ESTABLISHED,
// the active side no further event, as with librdmacm and the kernel. Until
// Establish, each repeat of the REP is answered with an MRA (cma.c prepares
// one when the REP comes, cm_dup_rep_handler sends it); Reject rejects the
// REP and Destroy does too.
//
// The messages carry the values Linux puts in them (the tests compare
// REQ, REP, RTU, DREQ and DREP field by field with rping's in
// wire/mad/testdata): CM response timeout 20, max CM retries 15, P_Key
// 0xFFFF, LIDs 0xFFFF, hop limit 64, local ACK timeout 19, target ACK delay
// 15, flow label (sport × 31 + dport) & 0xFFFFF for RoCE v2, traffic class
// the ID's SetTOS, else default_roce_tos, transaction ID = agent high TID over the comm ID as
// cm_form_tid makes it; REP, RTU, MRA and the active side's DREQ reuse the
// REQ's transaction ID, DREP the DREQ's.
//
// A consumer may take its time over a CONNECT_REQUEST: as Linux's cm.c
// does for a request its rdma_cm consumer has not answered yet, a repeat of
// the REQ is answered with an MRA (MessageMRAed REQ, service timeout 24,
// 4.096 µs × 2^24 ≈ 68.7 s). An MRA received for the waiting REQ or REP
// makes each of its remaining retries wait the MRA's service timeout plus
// the packet lifetime (cm_mra_handler: 2^16 + 2^11 ms for Linux's MRA)
// instead of the CM response timeout.
//
// A repeat of a SIDR_REQ whose CONNECT_REQUEST is still unanswered (the
// requester's retry) is dropped, as cm.c drops it through its
// remote_sidr_table; once the SIDR_REP is sent (Accept, Reject, or
// Destroy, which sends status Reject as cm_destroy_id does) a repeat is a
// new request and brings a new CONNECT_REQUEST, as in cm.c, which keeps no
// copy of its reply.
//
// DEVICE_REMOVAL is delivered to each ID of a device given to
// CM.RemoveDevice.
//
// ADDR_CHANGE is delivered to each ID on a device whose source address has
// left the device's GID table (CM.GIDTableChanged, which AddRoutedDevice
// arranges for a host.Device from its netlink watch), once until the
// address returns and goes again. Linux's occasion differs: cma.c's
// netdev notifier sends ADDR_CHANGE only for NETDEV_BONDING_FAILOVER on a
// bond master, to each ID bound to it whose recorded hardware address
// differs from the bond's new one (cma_netdev_change), and says nothing
// when an address is deleted. goroce's device keeps the MAC it opened
// with, so a hardware address change reaches an ID only as the loss of
// its address (the link-local GID made from the MAC).
//
// Every MAD may come from a hostile peer (RoCE has no authentication), so
// what a peer can make the CM hold is bounded, and what it drops to stay
// so is counted (CM.Counters): a listener's unread CONNECT_REQUESTs by its
// backlog, enforced as Linux's ucma does (a REQ beyond it is dropped
// without a REJ); a connection whose REP never gets its RTU by the CM
// timeout, as cm.c gives it up; QP1's cached address handles; its send
// backlog. Listener.Accept returns whichever connection completes first.
//
// # Errors
//
// Every error a function of this package returns wraps a syscall.Errno,
// so errors.Is(err, syscall.EINVAL) and the like tell the cause, as the
// kernel's rdma_cm and librdmacm report it; the text says what was wrong
// and, where there is one, what to do. Each function's doc lists its own.
// The exceptions are waits: EventChannel.Get and Listener.Accept return
// net.ErrClosed after Close and ctx.Err() when ctx ends; Dial returns
// ctx.Err() wrapped with the peer and how far it got.
//
//	EINVAL        a bad argument (the valid values named), or a call the
//	              ID's state does not allow (the state named)
//	EADDRINUSE    BindAddr, Listen: the port is taken, or has a listener
//	EADDRNOTAVAIL BindAddr: no device has the address; Dial: the PD's
//	              device has no address to connect from
//	EEXIST        AddDevice: added already, or QP1 taken; CreateQP: the
//	              ID has a QP
//	ENODEV        RemoveDevice: not added
//	ESHUTDOWN     AddDevice, CreateID: the CM is closed
//	ECONNREFUSED  Dial: REJECTED, or another event than ESTABLISHED
//	ETIMEDOUT     Dial: UNREACHABLE (no answer after every retry)
//	other         Dial: ADDR_ERROR's (EHOSTUNREACH, the route's ENETUNREACH,
//	              ...) or ROUTE_ERROR's status; CreateQP, Accept, Destroy:
//	              the verbs error of the QP (it wraps an errno too)
//
// Events carry their cause the same way: Event.Status is librdmacm's
// (a negative errno, or the REJ reason for REJECTED), and Event.Err,
// when set, wraps the errno (UNREACHABLE: ETIMEDOUT; REJECTED:
// ECONNREFUSED; ADDR_ERROR: EHOSTUNREACH or the route's).
//
// Where goroce differs from Linux:
//   - ResolveAddr follows the host's routes only for devices added with
//     AddRoutedDevice; for the others it picks by address family (see its
//     doc).
//   - No stale-connection detection (REJ reason 10), no LAP/APR or alternate
//     path, no multicast.
//   - ADDR_CHANGE comes when an ID's address leaves its device, not on a
//     bonding failover (see above); a device added with plain AddDevice
//     gets it only if someone calls GIDTableChanged.
//   - A SIDR repeat is recognised by request ID and requester GID; cm.c
//     keys remote_sidr_table by request ID and source LID, which RoCE
//     leaves 0 for every requester.
//   - ID.DisconnectWithData puts private data in the DREQ or DREP, as the
//     kernel's ib_send_cm_dreq/drep can (rdma_disconnect cannot), and
//     DISCONNECTED carries the peer's (Linux's rdma_cm drops it).
//   - A repeated REQ after the REP is answered with the REP again (cm.c
//     ignores it and counts on the REP's own retries).
//   - Options.MaxRetries is also the REQ's Max CM Retries (at most 15), and
//     timewait is a fixed Options.Timewait rather than computed per path.
//   - A REQ waits Options.ResponseTimeout (4.096 µs × 2^20 ≈ 4.29 s) for
//     its answer; cm.c waits 2 × the packet lifetime plus the remote CM
//     response timeout, in cm_convert_to_ms's powers of two (2 × 1024 +
//     4096 ms ≈ 6.1 s with the lab kernel's packet lifetime 18).
//   - For an ID with a QP the CM answers the REP itself (RTR, RTS, RTU)
//     and delivers ESTABLISHED, as librdmacm does with the kernel's
//     CONNECT_RESPONSE; so such an ID never sends an MRA for a REP.
//   - Listener.Accept (goroce's own, above the rdma_cm calls) keeps at
//     most its backlog of accepted connections waiting for their RTU,
//     and gives up the oldest for a new one.
//   - QP1 caches address handles (at most 256, least recently used
//     first out); cm.c makes one per message.
//   - Connect and Accept without a QP refuse ConnParam.QPNum 0 (EINVAL);
//     Linux sends QPN 0 in the REQ or REP.
package rdmacm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// Linux's CM values (drivers/infiniband/core/cma.c, cm.c), as the rping
// REQ in wire/mad/testdata shows them.
const (
	cmResponseTimeout = 20 // CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20 ≈ 4.3 s
	maxCMRetries      = 15 // CMA_MAX_CM_RETRIES
	localACKTimeout   = 19 // primary local ACK timeout rxe's CM puts in the REQ (≈ 2.1 s)
	targetACKDelay    = 15 // REP target ACK delay: rxe's local_ca_ack_delay
	hopLimit          = 64 // REQ primary hop limit over RoCE
	lidPermissive     = 0xFFFF
	defaultPKey       = 0xFFFF
	udpQKey           = 0x01234567 // RDMA_UDP_QKEY
	grhLen            = 40
	// QP1's queues, as deep as ib_mad makes them (IB_MAD_QP_RECV_SIZE,
	// IB_MAD_QP_SEND_SIZE): a burst of REQs, RTUs and DREQs from many
	// connections at once must not find the receive queue empty: an RTU
	// lost there is never sent again (nor is Destroy's one DREQ), and a
	// lost REQ, REP or DREQ costs a retry's timeout.
	nRecv, nSend = 512, 128
)

// Defaults gives the RoCE mode (a RoCE version: wire.RoCEv1 or
// wire.RoCEv2) and ToS new CM IDs copy from the rdma_cm configfs tree;
// *config.Tree implements it.
type Defaults interface {
	DefaultMode(dev string, port int) (wire.Version, error)
	DefaultTOS(dev string, port int) (uint8, error)
}

// Options tune a CM. Zero values mean Linux's behaviour.
type Options struct {
	// ResponseTimeout is how long a REQ, REP or DREQ waits for its answer
	// before it is sent again; default 4.096 µs × 2^20 ≈ 4.29 s.
	ResponseTimeout time.Duration
	// MaxRetries is how many times it is sent again; default 15. Negative
	// means none.
	MaxRetries int
	// Timewait is how long a disconnected ID stays in timewait before
	// TIMEWAIT_EXIT; default 4.096 µs × 2^19 (the local ACK timeout).
	Timewait time.Duration
	// Defaults supplies default_roce_mode and default_roce_tos; nil means
	// RoCE v2 where the port has it, else v1, and ToS 0.
	Defaults Defaults
	// Logf, if set, gets what the CM diagnoses as soon as it knows it (a
	// peer that answers only the other RoCE version), long before the
	// UNREACHABLE event that carries the same words.
	Logf func(format string, args ...any)
	// OnEvent, if set, sees every event as it is queued, with the name of
	// the ID's device ("" before it has one): for counters and metrics.
	// It is called with the CM's lock held and must not call into the CM.
	OnEvent func(device string, e Event)
	// OnCounter, if set, is told each time one of the CM's counters (see
	// CM.Counters) goes up on a device, with the counter's name. It is
	// called with the CM's lock held and must not call into the CM.
	OnCounter func(device, counter string)
	// MaxBacklog caps Listen's backlog, as the sysctl
	// net.rdma_ucm.max_backlog caps rdma_listen's; default 1024, Linux's.
	MaxBacklog int
}

func expDuration(e uint) time.Duration { return 4096 * time.Nanosecond << e }

// CM is one rdma_cm instance: its devices, their QP1 agents and the CM IDs.
type CM struct {
	opts    Options
	wg      sync.WaitGroup // the agents' receive goroutines
	queries sync.WaitGroup // ResolveAddr's next-hop resolutions (resolve.go)

	mu         sync.Mutex
	closed     bool                                        // guarded by mu
	agents     []*agent                                    // guarded by mu
	listeners  map[portKey]*ID                             // guarded by mu: listening IDs
	bound      map[portKey][]*ID                           // guarded by mu: IDs bound to a port
	byLocal    map[uint32]*ID                              // guarded by mu: IDs by local comm ID
	byRemote   map[remoteKey]*ID                           // guarded by mu: passive IDs by the peer's comm ID and CA GUID
	sidrs      map[sidrKey]*ID                             // guarded by mu: passive SIDR IDs whose request is unanswered
	ids        map[*ID]struct{}                            // guarded by mu: every live ID
	probes     map[uint64]*ID                              // guarded by mu: IDs by the TID of their other-version probe
	peerProbes map[uint64]*peerProbe                       // guarded by mu: Probe's Gets in flight, by TID
	rng        *rand.Rand                                  // guarded by mu
	timers     timerQueue                                  // guarded by mu: every ID's pending timers (timers.go)
	peaks      struct{ ids, byLocal, byRemote, sidrs int } // guarded by mu: see shrunk
	clock      *time.Timer                                 // guarded by mu: fires at the earliest of timers

	// onRecv, if set before AddDevice, sees every MAD received (a test
	// hook); called with mu held.
	onRecv func(in *inbound)
}

type portKey struct {
	ps   PortSpace
	port uint16
}

type remoteKey struct {
	commID uint32
	guid   uint64
}

// New returns a CM without devices.
func New(o Options) *CM {
	if o.ResponseTimeout == 0 {
		o.ResponseTimeout = expDuration(cmResponseTimeout)
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = maxCMRetries
	} else if o.MaxRetries < 0 {
		o.MaxRetries = 0
	}
	if o.Timewait == 0 {
		o.Timewait = expDuration(localACKTimeout)
	}
	if o.MaxBacklog <= 0 {
		o.MaxBacklog = maxBacklog
	}
	return &CM{opts: o, listeners: map[portKey]*ID{}, bound: map[portKey][]*ID{}, byLocal: map[uint32]*ID{},
		byRemote: map[remoteKey]*ID{}, sidrs: map[sidrKey]*ID{}, ids: map[*ID]struct{}{}, probes: map[uint64]*ID{},
		peerProbes: map[uint64]*peerProbe{},
		rng:        rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// CreateEventChannel is rdma_create_event_channel.
func (cm *CM) CreateEventChannel() *EventChannel { return newEventChannel() }

// agent is one device's CM agent: QP1, its CQ and buffers.
type agent struct {
	cm     *CM
	dev    *verbs.Device
	router Router // nil: ResolveAddr guesses from the GIDs
	hiTID  uint32
	pd     *verbs.PD
	cq     *verbs.CQ
	qp     *verbs.QP
	mr     *verbs.MR
	buf    []byte // nRecv receive slots of grhLen+mad.Size, then nSend send slots of mad.Size
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	free    []int  // guarded by cm.mu: free send slots
	nextRes uint32 // guarded by cm.mu: the next ID's IDInfo.Num
	// waiting holds MADs sent while every send slot was busy, in order;
	// each send completion takes the next (guarded by cm.mu). A MAD is
	// never dropped for want of a slot: an RTU or a DREP has no
	// retransmission of its own to cover the loss.
	waiting []waitingMAD
	ahs     ahCache             // guarded by cm.mu
	sent    int                 // guarded by cm.mu: MADs sent
	counts  [numCounters]uint64 // guarded by cm.mu: see CM.Counters

	// unwatch, if set, ends the GIDWatcher subscription (guarded by cm.mu;
	// called without it).
	unwatch func()
}

type ahKey struct {
	dgid netip.Addr
	sgid uint8
	tc   uint8
}

const recvSlot = grhLen + mad.Size

// A Router answers for one device how the host routes to an address, as
// the kernel's routing table does for Linux's rdma_resolve_addr: the source
// address to use if the route leaves through the device, or why not.
// host.Device is one.
type Router interface {
	RouteTo(dst netip.Addr) (src netip.Addr, err error)
}

// A GIDWatcher tells of changes to a device's GID table, as the host
// layer learns of its netdev's addresses from netlink: it calls f after
// each change until remove is called. host.Device is one.
type GIDWatcher interface {
	OnGIDChange(f func()) (remove func())
}

// AddRoutedDevice is AddDevice for a device whose routes r knows:
// ResolveAddr then chooses it, and the source address, by the route. If r
// is also a GIDWatcher (host.Device is), the CM follows the device's GID
// table through it and delivers ADDR_CHANGE (see GIDTableChanged).
//
// Errors: AddDevice's.
func (cm *CM) AddRoutedDevice(dev *verbs.Device, r Router) error {
	if err := cm.AddDevice(dev); err != nil {
		return err
	}
	var remove func()
	if w, ok := r.(GIDWatcher); ok {
		remove = w.OnGIDChange(func() { cm.GIDTableChanged(dev) })
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	for _, a := range cm.agents {
		if a.dev == dev && !cm.closed { // Close collects the unwatch functions: none may come after
			a.router, a.unwatch = r, remove
			return nil
		}
	}
	// Removed, or the CM closed, meanwhile.
	if remove != nil {
		remove()
	}
	return nil
}

// GIDTableChanged tells the CM that dev's GID table has changed (its
// netdev gained or lost an address); AddRoutedDevice arranges the call for
// a device whose Router is a GIDWatcher. Each ID on dev whose source
// address no longer has a GID on dev gets ADDR_CHANGE, once until the
// address comes back and goes again: bound, listening, connecting or
// connected alike, as cma.c tells every ID on the device. Nothing else
// changes: the ID decides (a connection from an address that is gone
// cannot send, so it is usually disconnected and made again). This is
// goroce's occasion for ADDR_CHANGE; Linux's is a bonding failover that
// changes the netdev's hardware address (see the package doc).
func (cm *CM) GIDTableChanged(dev *verbs.Device) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.closed {
		return
	}
	var a *agent
	for _, x := range cm.agents {
		if x.dev == dev {
			a = x
		}
	}
	if a == nil {
		return
	}
	have := map[netip.Addr]bool{}
	for _, e := range dev.GIDs() {
		if e.GID.IsValid() {
			have[e.GID] = true
		}
	}
	for id := range cm.ids {
		s := id.src.Addr()
		if id.ag != a || !s.IsValid() || s.IsUnspecified() {
			continue
		}
		if have[gidOf(s)] {
			id.addrGone = false
			continue
		}
		if id.addrGone {
			continue
		}
		id.addrGone = true
		id.emit(Event{Type: EventAddrChange, ID: id,
			Err: &verbs.Error{Op: "rdmacm", Device: dev.Name(), Err: syscall.EADDRNOTAVAIL,
				Detail: fmt.Sprintf("%v is no longer an address of device %s (its netdev lost it)", s, dev.Name())}})
	}
}

// AddDevice makes the CM serve dev: it creates dev's QP1 (EEXIST if
// something else owns it) and starts receiving CM MADs on it. The CM owns
// QP1 until Close; dev must outlive the CM.
//
// Errors: ESHUTDOWN after Close; EEXIST if dev is added already, or its
// QP1 exists (another CM serves it); else the verbs error that failed
// QP1's setup, which wraps an errno too (ENOMEM, ...).
func (cm *CM) AddDevice(dev *verbs.Device) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.closed {
		return &verbs.Error{Op: "rdmacm: add device", Device: dev.Name(), Err: syscall.ESHUTDOWN}
	}
	for _, a := range cm.agents {
		if a.dev == dev {
			return &verbs.Error{Op: "rdmacm: add device", Device: dev.Name(), Detail: "already added", Err: syscall.EEXIST}
		}
	}
	a := &agent{cm: cm, dev: dev, hiTID: uint32(len(cm.agents) + 1), done: make(chan struct{})}
	if err := a.open(); err != nil {
		a.destroy()
		return &verbs.Error{Op: "rdmacm: add device", Device: dev.Name(), Err: err}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	cm.agents = append(cm.agents, a)
	cm.wg.Add(1)
	go a.run(ctx)
	return nil
}

func (a *agent) open() error {
	var err error
	if a.pd, err = a.dev.AllocPD(); err != nil {
		return err
	}
	if a.cq, err = a.dev.CreateCQ(nRecv + nSend); err != nil {
		return err
	}
	if a.qp, err = a.pd.CreateQP(verbs.QPInitAttr{Type: verbs.GSI, SendCQ: a.cq, RecvCQ: a.cq, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: nSend, MaxRecvWR: nRecv, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	a.buf = make([]byte, nRecv*recvSlot+nSend*mad.Size)
	if a.mr, err = a.pd.RegMR(a.buf, verbs.AccessLocalWrite); err != nil {
		return err
	}
	if err = a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: verbs.GSIQKey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
		return err
	}
	if err = a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		return err
	}
	if err = a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		return err
	}
	for i := range nRecv {
		if err = a.postRecv(i); err != nil {
			return err
		}
	}
	for i := range nSend {
		a.free = append(a.free, i)
	}
	return nil
}

func (a *agent) postRecv(i int) error {
	return a.qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{a.mr.SGE(i*recvSlot, recvSlot)}})
}

// destroy releases what open made; the receive goroutine must have ended.
func (a *agent) destroy() {
	if a.qp != nil {
		a.qp.Destroy()
	}
	if a.mr != nil {
		a.mr.Dereg()
	}
	if a.cq != nil {
		a.cq.Destroy()
	}
}

const sendWRID = 1 << 32

func (a *agent) run(ctx context.Context) {
	defer a.cm.wg.Done()
	defer close(a.done)
	wcs := make([]verbs.WC, 32)
	for {
		n, err := a.cq.PollWait(ctx, wcs)
		if err != nil {
			return
		}
		for _, wc := range wcs[:n] {
			a.complete(wc)
		}
	}
}

// complete handles one completion of QP1.
func (a *agent) complete(wc verbs.WC) {
	if wc.WRID&sendWRID != 0 {
		a.cm.mu.Lock()
		a.free = append(a.free, int(wc.WRID&^sendWRID))
		for len(a.waiting) > 0 && len(a.free) > 0 && !a.cm.closed {
			w := a.waiting[0]
			a.waiting[0] = waitingMAD{} // the array outlives the slice: let the MAD go
			a.waiting = a.waiting[1:]
			if len(a.waiting) == 0 {
				a.waiting = nil // and the array too, once a burst has passed
			}
			a.post(w.dgid, w.sgid, w.tc, w.m, w.rqpn)
		}
		a.cm.mu.Unlock()
		return
	}
	if wc.Status != verbs.WCSuccess {
		return // flushed: QP1 is going away
	}
	i := int(wc.WRID)
	slot := a.buf[i*recvSlot : (i+1)*recvSlot]
	in := inbound{srcQP: wc.SrcQP}
	in.parseGRH(slot[:grhLen])
	ok := int(wc.ByteLen) == recvSlot
	if ok {
		in.mad = append([]byte(nil), slot[grhLen:]...)
	}
	if err := a.postRecv(i); err != nil {
		return
	}
	if !ok {
		return
	}
	a.cm.mu.Lock()
	defer a.cm.mu.Unlock()
	if !a.cm.closed {
		if a.cm.onRecv != nil {
			a.cm.onRecv(&in)
		}
		a.cm.handle(a, &in)
	}
}

// inbound is a received MAD and where it came from.
type inbound struct {
	mad      []byte
	src, dst netip.Addr // GIDs
	v1       bool       // RoCE v1 (GRH next header IBTH)
	tc       uint8
	srcQP    uint32
}

// parseGRH reads the 40 bytes before a UD receive: an IPv4 header in the
// last 20 bytes for RoCE v2 over IPv4, else a GRH/IPv6 header.
func (in *inbound) parseGRH(g []byte) {
	if g[20]>>4 == 4 {
		in.src = netip.AddrFrom16(netip.AddrFrom4([4]byte(g[32:36])).As16())
		in.dst = netip.AddrFrom16(netip.AddrFrom4([4]byte(g[36:40])).As16())
		in.tc = g[21]
		return
	}
	in.src = netip.AddrFrom16([16]byte(g[8:24]))
	in.dst = netip.AddrFrom16([16]byte(g[24:40]))
	in.v1 = g[6] == 0x1B
	in.tc = uint8(binary.BigEndian.Uint16(g[0:2]) >> 4)
}

// netType returns the GID type a received MAD was sent with.
func (in *inbound) netType() verbs.GIDType {
	if in.v1 {
		return verbs.GIDTypeRoCEv1
	}
	return verbs.GIDTypeRoCEv2
}

// gidIndex returns the index of gid of type typ in the agent's table.
func (a *agent) gidIndex(gid netip.Addr, typ verbs.GIDType) (uint8, bool) {
	for i, e := range a.dev.GIDs() {
		if e.GID == gid && e.Type == typ {
			return uint8(i), true
		}
	}
	return 0, false
}

// send sends one 256-byte MAD to QP rqpn (1 for CM) at dgid from GID index
// sgid. A MAD that cannot be sent is dropped, as a lost datagram: the
// sender's retries cover it. Called with cm.mu held.
func (a *agent) send(dgid netip.Addr, sgid, tc uint8, m []byte, rqpn uint32) {
	if len(a.free) == 0 || len(a.waiting) > 0 {
		if len(a.waiting) >= maxWaitingMADs {
			a.count(ctrMADDrops)
			return
		}
		a.waiting = append(a.waiting, waitingMAD{dgid, sgid, tc, append([]byte(nil), m...), rqpn})
		return
	}
	a.post(dgid, sgid, tc, m, rqpn)
}

// waitingMAD is a MAD waiting for a send slot.
type waitingMAD struct {
	dgid     netip.Addr
	sgid, tc uint8
	m        []byte
	rqpn     uint32
}

// maxWaitingMADs bounds the queue behind the send slots (the MAD layer's
// backlog); past it a MAD is dropped and counted, as a lost datagram.
const maxWaitingMADs = 4096

// post sends one MAD in a free send slot. Called with cm.mu held.
func (a *agent) post(dgid netip.Addr, sgid, tc uint8, m []byte, rqpn uint32) {
	k := ahKey{dgid, sgid, tc}
	ah := a.ahs.get(k)
	if ah == nil {
		var err error
		ah, err = a.pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1,
			GRH: verbs.GlobalRoute{DGID: dgid, SGIDIndex: sgid, HopLimit: hopLimit, TrafficClass: tc}})
		if err != nil {
			a.count(ctrMADDrops)
			return
		}
		if a.ahs.put(k, ah) {
			a.count(ctrAHEvictions)
		}
	}
	i := a.free[len(a.free)-1]
	off := nRecv*recvSlot + i*mad.Size
	copy(a.buf[off:off+mad.Size], m)
	err := a.qp.PostSend(verbs.SendWR{WRID: sendWRID | uint64(i), Opcode: verbs.WRSend,
		SGList: []verbs.SGE{a.mr.SGE(off, mad.Size)}, AH: ah, RemoteQPN: rqpn, RemoteQKey: verbs.GSIQKey})
	if err != nil {
		a.count(ctrMADDrops)
		return
	}
	a.free = a.free[:len(a.free)-1]
	a.sent++
}

// tid forms a transaction ID as Linux's cm_form_tid: the MAD agent's high
// 32 bits over the local comm ID as it lies in memory (big-endian bytes
// read little-endian, so rping's comm ID 0xba6bbd67 gives 0x…67bd6bba).
func (a *agent) tid(commID uint32) uint64 {
	return uint64(a.hiTID)<<32 | uint64(bits.ReverseBytes32(commID))
}

// RemoveDevice stops serving dev: its QP1 is destroyed, and every ID on
// it stops its timers and gets DEVICE_REMOVAL (it should then be destroyed,
// as with librdmacm).
//
// Errors: ENODEV if dev is not added, or the CM is closed.
func (cm *CM) RemoveDevice(dev *verbs.Device) error {
	cm.mu.Lock()
	var a *agent
	for i, x := range cm.agents {
		if x.dev == dev {
			a = x
			cm.agents = append(cm.agents[:i:i], cm.agents[i+1:]...)
			break
		}
	}
	if a == nil || cm.closed {
		cm.mu.Unlock()
		return &verbs.Error{Op: "rdmacm: remove device", Device: dev.Name(), Detail: "not added", Err: syscall.ENODEV}
	}
	for id := range cm.ids {
		if id.ag != a {
			continue
		}
		id.disarm()
		id.stopTimewait()
		id.forget()
		if id.state == stListen {
			delete(cm.listeners, portKey{id.ps, id.src.Port()})
		}
		id.state = stDone
		id.emit(Event{Type: EventDeviceRemoval, ID: id, Status: -int(syscall.ENODEV)})
	}
	unwatch := a.unwatch
	a.unwatch = nil
	cm.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	a.cancel()
	<-a.done
	a.destroy()
	return nil
}

// Close stops every agent, destroys the QP1s it created and fails every ID's
// pending operation silently. Event channels stay open. It returns nil.
func (cm *CM) Close() error {
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		return nil
	}
	cm.closed = true
	for tid, w := range cm.peerProbes {
		delete(cm.peerProbes, tid)
		close(w.done) // w.reply stays zero: Probe says ESHUTDOWN
	}
	for id := range cm.ids {
		id.disarm()
		id.cancelQuery()
		id.stopTimewait()
	}
	if cm.clock != nil {
		cm.clock.Stop()
	}
	agents := cm.agents
	var unwatch []func()
	for _, a := range agents {
		if a.unwatch != nil {
			unwatch = append(unwatch, a.unwatch)
			a.unwatch = nil
		}
	}
	cm.mu.Unlock()
	for _, f := range unwatch {
		f()
	}
	for _, a := range agents {
		a.cancel()
	}
	cm.wg.Wait()
	cm.queries.Wait()
	for _, a := range agents {
		a.destroy()
	}
	return nil
}

// buildMAD returns a CM MAD: header then the 232-byte attribute data.
func buildMAD(attr mad.AttributeID, tid uint64, body interface{ Append([]byte) []byte }) []byte {
	b := make([]byte, 0, mad.Size)
	b = mad.NewCMHeader(attr, tid).Append(b)
	return body.Append(b)
}

// handle dispatches one MAD. Called with cm.mu held.
func (cm *CM) handle(a *agent, in *inbound) {
	m, err := mad.Parse(in.mad)
	if err != nil {
		return
	}
	h := m.Header()
	if h.MgmtClass() != mad.ClassCM {
		return
	}
	switch h.Method() {
	case mad.MethodGetResp:
		if w := cm.peerProbes[h.TransactionID()]; w != nil {
			cm.handlePeerProbe(w, in, h)
			return
		}
		cm.handleProbeAnswer(a, in, h)
		return
	case mad.MethodGet, mad.MethodSet:
		// No CM agent handles Get or Set: the MAD layer answers with the
		// request, method GetResp and status "unsupported method/attribute
		// combination" (Linux ib_mad generate_unmatched_resp).
		resp := append([]byte(nil), in.mad...)
		r := mad.Header(resp)
		r.SetMethod(mad.MethodGetResp)
		r.SetStatus(mad.StatusUnsupportedMethodAttribute)
		if sgid, ok := a.gidIndex(in.dst, in.netType()); ok {
			a.send(in.src, sgid, in.tc, resp, in.srcQP)
		}
		return
	case mad.MethodSend:
	default:
		return
	}
	if !m.IsCM() {
		return
	}
	switch h.AttributeID() {
	case mad.AttrREQ:
		req, _ := m.REQ()
		cm.handleREQ(a, in, h, req)
	case mad.AttrREP:
		rep, _ := m.REP()
		cm.handleREP(a, in, rep)
	case mad.AttrRTU:
		rtu, _ := m.RTU()
		cm.handleRTU(rtu)
	case mad.AttrREJ:
		rej, _ := m.REJ()
		cm.handleREJ(rej)
	case mad.AttrMRA:
		mra, _ := m.MRA()
		cm.handleMRA(mra)
	case mad.AttrDREQ:
		dreq, _ := m.DREQ()
		cm.handleDREQ(a, in, h, dreq)
	case mad.AttrDREP:
		drep, _ := m.DREP()
		cm.handleDREP(drep)
	case mad.AttrSIDRREQ:
		cm.handleSIDRREQ(a, in, h, m)
	case mad.AttrSIDRREP:
		rep, _ := m.SIDRREP()
		cm.handleSIDRREP(rep)
	}
}

// newCommID returns an unused random non-zero local comm ID.
func (cm *CM) newCommID() uint32 {
	for {
		c := cm.rng.Uint32()
		if c != 0 && cm.byLocal[c] == nil {
			return c
		}
	}
}
