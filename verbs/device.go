package verbs

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/mem"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// DeviceConfig describes a device.
type DeviceConfig struct {
	Name string    // e.g. "rxe0"
	Link link.Link // the network; the device closes it on Close
	// GUID is the node GUID; zero derives it from MAC (EUI-64), as rxe does.
	GUID uint64
	MAC  wire.MAC
	// GIDs is port 1's GID table, in index order.
	GIDs []GIDEntry
	// ActiveMTU is the port's active MTU; zero derives it from the link's MTU.
	ActiveMTU MTU
}

// Device is a soft RDMA device with one port.
type Device struct {
	name      string
	link      link.Link
	linkStats *link.Stats // link.Stats(), the same on every call
	guid      uint64
	activeMTU MTU
	mem       *mem.Table
	events    eventQueue
	counters  Counters                    // port 1's
	ecn       atomic.Pointer[ECNConfig]   // port 1's congestion control; nil: the defaults (off)
	atomicMu  sync.Mutex                  // makes responder atomics atomic across QPs (rxe: atomic_ops_lock)
	txPool    sync.Pool                   // of *[]byte, link.MaxFrameSize each
	spare     [spareBatches]slot[txBatch] // getTxBatch's first choice
	headroom  int                         // the link's, for each packet sent
	batchSize int                         // the link's

	mu      sync.RWMutex
	gids    []GIDEntry     // guarded by mu
	qps     map[uint32]*QP // guarded by mu
	qpGen   atomic.Uint64  // bumped, under mu, whenever qps changes (lookupQPFor)
	closedA atomic.Bool    // closed, for isClosed without mu
	nextQPN uint32         // guarded by mu
	closed  bool           // guarded by mu
	portUp  bool           // guarded by mu

	mcMu  sync.Mutex
	mcast mcastState // guarded by mcMu but its scratch, the receive goroutine's (mcast.go)

	rxDone chan struct{}
	// rxMu is held while a batch is taken from the link and handled, by
	// the receive goroutine or by a goroutine polling a CQ (pollLink):
	// Barrier takes it to order the caller after everything handled so
	// far, and holding it across the take and the handling keeps the
	// packets in the order the link delivered them.
	rxMu sync.Mutex
	rx   rxPath // guarded by rxMu
	// rxSendMu is read-locked, before rxMu is released, by each goroutine
	// that handled a batch, until it has sent what the batch answered
	// (handleBatch): the sending happens without rxMu, so that while it
	// waits for the link another goroutine can take the next packets (the
	// ACKs), and Close takes it to wait for those sends.
	rxSendMu sync.RWMutex
	// poller is the link's link.Poller, or nil: then only the receive
	// goroutine takes packets, in Recv.
	poller link.Poller
	// pending is the poller's readiness, when it can tell
	// (link.PendingReporter): while rxGuard holds, an empty look asks it
	// and takes no rxMu.
	pending link.PendingReporter
	// rxGuard is when the guard ends (UnixNano), or 0. A goroutine that
	// waited longer than rxHeldTooLong for rxMu (the receive goroutine,
	// the ACK timer) sets it rxGuardFor ahead: the goroutine holding rxMu
	// was off the CPU while it held it, and while the host preempts
	// pollers that way, a poller holding rxMu for every empty look keeps
	// the packets that arrive unread for as long as it is preempted.
	// Outside the guard an empty look costs one system call, not two.
	rxGuard atomic.Int64
	// rxWait is rxMu as the receive goroutine and the ACK timer take it:
	// timing the wait when they cannot take it at once.
	rxWait rxWaitLock
	// sched gives the QPs with bulk work their turns (sched.go).
	sched sched
	// held holds a batch of ACKs a CQ poller's receive produced, kept for
	// the device's next send (ackhold.go), if any; heldMu is held from
	// taking it to having sent it, and heldTimer sends it if nothing else
	// does within ackHoldFor.
	held      slot[txBatch]
	heldMu    sync.Mutex
	heldTimer *time.Timer
	// heldDue is when the held ACKs go at the latest (monoNow);
	// heldTimerOn: heldTimer is set (onHeldTimer).
	heldDue     atomic.Int64
	heldTimerOn atomic.Bool
	// generalOnly sends every packet and every post through the general
	// paths, none through the short ones (shortSend, shortACK,
	// shortPost): tests compare the two. Set only while nothing else uses
	// the device: before its first packet, or between the fuzz harness's
	// runs, whose packets come from the one goroutine that sets it.
	generalOnly bool
}

// Open starts a device on cfg.Link. Close it to stop its receive
// goroutine and its scheduler's, and close the link.
func Open(cfg DeviceConfig) (*Device, error) { return openDevice(cfg, true) }

// openDevice opens a device; without sched, nothing serves the scheduler's
// turns but drainSched (tests that step the device themselves).
func openDevice(cfg DeviceConfig, sched bool) (*Device, error) {
	if cfg.Link == nil {
		return nil, errorf("open device", cfg.Name, 0, syscall.EINVAL, "no link")
	}
	if len(cfg.GIDs) > GIDTableLen {
		return nil, errorf("open device", cfg.Name, 0, syscall.EINVAL, "%d GIDs, the table holds %d", len(cfg.GIDs), GIDTableLen)
	}
	d := &Device{
		name:      cfg.Name,
		link:      cfg.Link,
		linkStats: cfg.Link.Stats(),
		guid:      cfg.GUID,
		mem:       newMemTable(),
		gids:      append([]GIDEntry(nil), cfg.GIDs...),
		qps:       make(map[uint32]*QP),
		nextQPN:   firstQPN,
		portUp:    true,
		rxDone:    make(chan struct{}),
	}
	if d.guid == 0 {
		d.guid = NodeGUIDFromMAC(cfg.MAC)
	}
	d.activeMTU = cfg.ActiveMTU
	if d.activeMTU == 0 {
		// The link MTU counts the transport packet; take off the largest
		// header set (BTH + RETH + ImmDt ... 12+16+4) and the ICRC.
		d.activeMTU = MTUFromBytes(cfg.Link.MTU() - 64)
		if d.activeMTU == 0 {
			return nil, errorf("open device", cfg.Name, 0, syscall.EINVAL, "link MTU %d is below the smallest IB MTU", cfg.Link.MTU())
		}
	}
	d.txPool.New = func() any { b := make([]byte, link.MaxFrameSize); return &b }
	d.headroom, d.batchSize = cfg.Link.Headroom(), cfg.Link.BatchSize()
	d.poller, _ = cfg.Link.(link.Poller)
	d.rxWait.d = d
	if d.poller != nil {
		d.pending, _ = cfg.Link.(link.PendingReporter)
	}
	d.rx.init(d)
	d.heldTimer = time.AfterFunc(time.Hour, d.onHeldTimer)
	d.heldTimer.Stop()
	d.events.init(&d.counters[AsyncEventsDropped])
	d.sched.init()
	if sched {
		go d.runSched()
	} else {
		close(d.sched.done)
	}
	go d.receive()
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// GUID returns the node GUID.
func (d *Device) GUID() uint64 { return d.guid }

// Counters returns port 1's counters.
func (d *Device) Counters() *Counters { return &d.counters }

// Link returns the device's link.
func (d *Device) Link() link.Link { return d.link }

// ActiveMTU returns the port's active MTU.
func (d *Device) ActiveMTU() MTU { return d.activeMTU }

// Close destroys every QP, stops the receive goroutine and closes the link.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.closedA.Store(true)
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	d.mu.Unlock()
	// Let the batch being handled send its responses (see receive).
	d.rxMu.Lock()
	d.rxMu.Unlock() //nolint:staticcheck // waiting for the critical section is the point
	d.rxSendMu.Lock()
	d.rxSendMu.Unlock() //nolint:staticcheck // likewise, for the sends after it (handleBatch)
	// And the ACKs a poller held for an answer (ackhold.go), waiting for
	// a send of them in progress.
	d.heldTimer.Stop()
	d.flushHeld()
	d.heldMu.Lock()
	d.heldMu.Unlock() //nolint:staticcheck // likewise
	for _, q := range qps {
		q.Destroy()
	}
	close(d.sched.quit)
	<-d.sched.done
	err := d.link.Close()
	<-d.rxDone
	d.events.close()
	return err
}

// Barrier returns once the packets the device has received so far are
// handled, and orders the caller after that handling and before what the
// device handles next. A responder reads RDMA READ and atomic sources and
// writes RDMA WRITE and atomic targets from the device's receive goroutine;
// a program learns of it over the network (its peer's completion), which
// Go's memory model and race detector do not see as synchronization.
// Reading such memory after Barrier, or writing it before Barrier, is
// properly ordered. Completions need no Barrier: polling a CQ orders the
// reader after what the completion reports. (The scheduler's goroutine
// reads READ sources too, for READs answered in several turns: Barrier
// waits for its turn in progress; a READ whose requester has seen it
// complete has had its last turn.)
func (d *Device) Barrier() {
	d.rxMu.Lock()
	d.rxMu.Unlock() //nolint:staticcheck // an empty critical section is the point
	d.sched.txMu.Lock()
	d.sched.txMu.Unlock() //nolint:staticcheck // likewise
}

// Observe runs f while the device's receive path stands still, so f may
// read memory that the network writes (RDMA WRITE and atomic targets)
// without racing with those writes: how a program polls a flag byte the
// peer WRITEs, as perftest's ib_write_lat spins on the last byte of its
// buffer. f must be short and must not call into the device.
func (d *Device) Observe(f func()) {
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	f()
}

// GIDs returns a copy of port 1's GID table.
func (d *Device) GIDs() []GIDEntry {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return append([]GIDEntry(nil), d.gids...)
}

// SetGIDs replaces port 1's GID table and reports IBV_EVENT_GID_CHANGE.
func (d *Device) SetGIDs(g []GIDEntry) error {
	if len(g) > GIDTableLen {
		return errorf("set GID table", d.name, 0, syscall.EINVAL, "%d GIDs, the table holds %d", len(g), GIDTableLen)
	}
	d.mu.Lock()
	d.gids = append([]GIDEntry(nil), g...)
	d.mu.Unlock()
	d.events.post(AsyncEvent{Type: EventGIDChange, Port: 1})
	return nil
}

// GID returns GID table entry index of port 1; an unused index is EINVAL,
// as reading its gid_attrs in sysfs is.
func (d *Device) GID(index int) (GIDEntry, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if index < 0 || index >= len(d.gids) || !d.gids[index].GID.IsValid() {
		return GIDEntry{}, errorf("query_gid", d.name, 0, syscall.EINVAL, "GID index %d: no such entry (port 1 has %d)", index, len(d.gids))
	}
	return d.gids[index], nil
}

// SetPortState changes port 1's state, reporting PORT_ACTIVE or PORT_ERR.
func (d *Device) SetPortState(up bool) {
	d.mu.Lock()
	changed := d.portUp != up
	d.portUp = up
	d.mu.Unlock()
	if !changed {
		return
	}
	if up {
		d.events.post(AsyncEvent{Type: EventPortActive, Port: 1})
	} else {
		d.counters[LinkDowned].Add(1)
		d.events.post(AsyncEvent{Type: EventPortErr, Port: 1})
	}
}

// PortActive reports whether port 1 is active.
func (d *Device) PortActive() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.portUp
}

// GetAsyncEvent waits for the next asynchronous event, like ibv_get_async_event.
func (d *Device) GetAsyncEvent(ctx context.Context) (AsyncEvent, error) { return d.events.get(ctx) }

// PD is a protection domain.
type PD struct {
	dev *Device
	pd  *mem.PD
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (*PD, error) {
	if d.isClosed() {
		return nil, net.ErrClosed
	}
	return &PD{dev: d, pd: d.mem.AllocPD()}, nil
}

// Device returns the PD's device.
func (pd *PD) Device() *Device { return pd.dev }

// MR is a registered memory region.
type MR struct {
	pd *PD
	r  *mem.Region
}

// RegMR registers buf for access; its IOVA is buf's address, as ibv_reg_mr's is.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.RegMRIOVA(buf, mem.AddressOf(buf), access)
}

// RegMRIOVA registers buf with an IOVA of the caller's choice (ibv_reg_mr_iova).
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	r, err := pd.dev.mem.Register(pd.pd, buf, iova, access)
	if err != nil {
		return nil, errorf("reg_mr", pd.dev.name, 0, syscall.EINVAL, "%v", err)
	}
	return &MR{pd: pd, r: r}, nil
}

func (m *MR) LKey() uint32   { return m.r.LKey() }
func (m *MR) RKey() uint32   { return m.r.RKey() }
func (m *MR) Addr() uint64   { return m.r.IOVA() }
func (m *MR) Len() int       { return m.r.Len() }
func (m *MR) Access() Access { return m.r.Access() }

// SGE returns a scatter/gather element for buf[off:off+n] of this region.
func (m *MR) SGE(off, n int) SGE {
	return SGE{Addr: m.r.IOVA() + uint64(off), Length: uint32(n), LKey: m.r.LKey()}
}

// Dereg deregisters the region; its keys stop working at once. A region
// with memory windows bound to it is not deregistered: EINVAL, as rxe's
// rxe_dereg_mr refuses while windows hold it (unbind, invalidate or
// deallocate them first).
func (m *MR) Dereg() error {
	if err := m.pd.dev.mem.Deregister(m.r); err != nil {
		return errorf("dereg_mr", m.pd.dev.name, 0, syscall.EINVAL, "lkey %#x: %v", m.r.LKey(), err)
	}
	return nil
}

// path is a resolved address vector: what goes in the GRH or IP/UDP headers.
type path struct {
	version wire.Version
	sgid    netip.Addr
	dgid    netip.Addr
	tc      uint8
	flow    uint32
	hop     uint8
}

// resolvePath checks an AH attribute against the GID table. The source GID's
// type picks the RoCE version, as on Linux.
func (d *Device) resolvePath(a *AHAttr) (path, error) {
	if a.PortNum != 0 && a.PortNum != 1 {
		return path{}, invalid("ah_attr.port_num %d: the device has port 1 only", a.PortNum)
	}
	if !a.IsGlobal {
		return path{}, invalid("ah_attr.is_global is 0: RoCE needs a GRH (set is_global and grh.dgid)")
	}
	g, err := d.GID(int(a.GRH.SGIDIndex))
	if err != nil {
		return path{}, invalid("ah_attr.grh.sgid_index: %s", err.(*Error).Detail)
	}
	dg := a.GRH.DGID
	if !dg.IsValid() {
		return path{}, invalid("ah_attr.grh.dgid is not set")
	}
	dg = netip.AddrFrom16(dg.As16())
	if g.Type == GIDTypeRoCEv2 && g.GID.Is4In6() != dg.Is4In6() {
		return path{}, invalid("ah_attr: source GID %v (index %d) and destination GID %v are of different IP families",
			g.GID, a.GRH.SGIDIndex, dg)
	}
	if a.GRH.FlowLabel > wire.FlowLabelMask {
		return path{}, invalid("ah_attr.grh.flow_label %#x exceeds 20 bits", a.GRH.FlowLabel)
	}
	hop := a.GRH.HopLimit
	if hop == 0 {
		hop = 64
	}
	return path{version: g.Type.Version(), sgid: g.GID, dgid: dg, tc: a.GRH.TrafficClass, flow: a.GRH.FlowLabel, hop: hop}, nil
}

// CreateAH creates an address handle for UD sends.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	p, err := pd.dev.resolvePath(&attr)
	if err != nil {
		return nil, withOp(err, "create_ah", pd.dev.name, 0)
	}
	return &AH{pd: pd, attr: attr, path: p}, nil
}

func (d *Device) isClosed() bool { return d.closedA.Load() }

// lookupQPFor is lookupQP through out's one-entry cache, which holds while
// no QP has been created or destroyed since (qpGen): the packets of a
// receive batch are mostly one QP's, and the lookup (a read lock and a
// map) cost 86 instructions a packet (bench/callgrind.sh).
func (d *Device) lookupQPFor(out *txBatch, qpn uint32) *QP {
	g := d.qpGen.Load()
	if c := &out.qpCache; c.q != nil && c.num == qpn && c.gen == g {
		return c.q
	}
	q := d.lookupQP(qpn)
	out.qpCache = qpCacheEntry{num: qpn, q: q, gen: g}
	return q
}

func (d *Device) lookupQP(qpn uint32) *QP {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.qps[qpn]
}

// rxPath is what taking and handling a batch of packets needs; whoever
// holds Device.rxMu uses it.
type rxPath struct {
	bufs              []link.Packet
	prevICRC, prevMal uint64 // the link's drop counters, as last mirrored
}

func (r *rxPath) init(d *Device) {
	r.bufs = make([]link.Packet, d.link.BatchSize())
	for i := range r.bufs {
		r.bufs[i].Buf = make([]byte, 0, link.MaxFrameSize)
	}
}

// receive is the device's receive goroutine: it takes batches from the
// link and hands each packet to its QP. With a link.Poller it only does so
// while nobody polls: a goroutine spinning on a CQ takes the packets
// itself (pollLink), and the receive goroutine, woken by the same
// packets, finds nothing left and waits again.
func (d *Device) receive() {
	defer close(d.rxDone)
	var turn txBatch // for the scheduler's turns, served without rxMu
	turn.dev = d
	for {
		var k int
		var err error
		d.sched.rxIdle(true)
		if d.poller != nil {
			// The packets are taken under rxMu, which the link lets go
			// of while it waits, so that pollLink can take them instead.
			k, err = d.poller.RecvLocked(d.rx.bufs, &d.rxWait)
			d.sched.rxIdle(false)
			if err == nil {
				out := d.handleBatch(k)
				d.rxMu.Unlock()
				d.sendHandled(out)
			}
		} else {
			// Recv blocks, so it runs without rxMu; the goroutine is the
			// only one that takes packets, and their order holds.
			k, err = d.link.Recv(d.rx.bufs)
			d.sched.rxIdle(false)
			if err == nil {
				d.rxMu.Lock()
				out := d.handleBatch(k)
				d.rxMu.Unlock()
				d.sendHandled(out)
			}
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				d.events.post(AsyncEvent{Type: EventDeviceFatal, Detail: "link receive failed: " + err.Error()})
			}
			return
		}
		// One turn of the scheduler's per batch received: while packets
		// keep the receive goroutine busy, the scheduler's goroutine waits
		// (runSched), and bulk work still moves a burst at a time.
		if k > 0 && d.sched.waitingQPs.Load() > 0 {
			d.serveShared(&turn)
		}
	}
}

// pollLink is run to completion: a goroutine that polls a CQ and finds it
// empty takes what the link has received and handles it itself —
// receive, process, respond, complete — instead of waiting for the
// receive goroutine to be woken and to hand it over. It reports whether
// it handled packets. Without a link.Poller, or while another goroutine
// handles a batch, it does nothing.
func (d *Device) pollLink() bool {
	// ACKs held since this poller's last look go now (ackhold.go).
	d.flushHeld()
	if !d.tryReceive(true) {
		return false
	}
	if d.sched.waitingQPs.Load() > 0 {
		// As the receive goroutine does after a batch.
		out := getTxBatch(d)
		d.serveShared(out)
		putTxBatch(out)
	}
	return true
}

// tryReceive takes what the link has received, without waiting, and
// handles it on the calling goroutine; it reports whether it handled
// packets. Without a link.Poller, or while another goroutine handles a
// batch, it does nothing. With hold (a CQ poller), ACKs alone are held
// for the answer the program may post next (ackhold.go).
func (d *Device) tryReceive(hold bool) bool {
	if d.poller == nil || d.pending != nil && d.rxGuard.Load() != 0 && !d.pendingGuarded() || !d.rxMu.TryLock() {
		return false
	}
	// An error is the receive goroutine's to report: it gets the same.
	k, _ := d.poller.TryRecv(d.rx.bufs)
	if k == 0 {
		d.rxMu.Unlock()
		return false
	}
	out := d.handleBatch(k)
	d.rxMu.Unlock()
	if hold && d.holdACKs(out) {
		d.rxSendMu.RUnlock()
		return true
	}
	d.sendHandled(out)
	return true
}

// receiveNow takes what the link has received and handles it, as
// tryReceive does, up to batches batches; unlike tryReceive it waits for a
// batch another goroutine is handling to be done, so that every packet
// that arrived before the call is handled when it returns. Without a
// link.Poller it does nothing.
func (d *Device) receiveNow(batches int) {
	if d.poller == nil {
		return
	}
	for range batches {
		d.rxWait.Lock()
		if d.pending != nil && !d.pending.Pending() {
			d.rxMu.Unlock()
			return
		}
		k, _ := d.poller.TryRecv(d.rx.bufs)
		if k == 0 {
			d.rxMu.Unlock()
			return
		}
		out := d.handleBatch(k)
		d.rxMu.Unlock()
		d.sendHandled(out)
	}
}

const (
	// rxHeldTooLong is a wait for rxMu that says its holder was off the
	// CPU: a batch's handling takes microseconds (a burst of 64 KiB
	// inline), the OS's time slices milliseconds.
	rxHeldTooLong = time.Millisecond
	// rxGuardFor is how long the guard holds after such a wait.
	rxGuardFor = 10 * time.Second
)

// pendingGuarded is an empty look's question while rxGuard is set: it
// reports whether the link says packets wait. Only then does it read the
// clock, to end a guard whose time is up: reading it on every empty look
// (time.Now) was 7% of `roce perf write`'s client samples in the lab's VMs,
// whose pollers are guarded most of the time. Until a packet comes, a
// guard past its time only keeps asking the link, which is never wrong.
func (d *Device) pendingGuarded() bool {
	if !d.pending.Pending() {
		return false
	}
	d.guarded()
	return true
}

// guardClock is time.Now; tests count its calls.
var guardClock = time.Now

// guarded reports whether empty looks must ask the link first (rxGuard),
// and ends a guard whose time is up.
func (d *Device) guarded() bool {
	g := d.rxGuard.Load()
	if g == 0 {
		return false
	}
	if guardClock().UnixNano() < g {
		return true
	}
	d.rxGuard.CompareAndSwap(g, 0)
	return false
}

// rxWaitLock is rxMu, timing a wait for it (rxGuard).
type rxWaitLock struct{ d *Device }

func (l *rxWaitLock) Lock() {
	if l.d.rxMu.TryLock() {
		return
	}
	t := time.Now()
	l.d.rxMu.Lock()
	if now := time.Now(); now.Sub(t) > rxHeldTooLong {
		l.d.rxGuard.Store(now.Add(rxGuardFor).UnixNano())
	}
}

func (l *rxWaitLock) Unlock() { l.d.rxMu.Unlock() }

// handleBatch handles d.rx.bufs[:k] and returns the batch of what they
// answered, for sendHandled once rxMu is released. Called with rxMu held;
// it read-locks rxSendMu.
func (d *Device) handleBatch(k int) *txBatch {
	r := &d.rx
	// Mirror the link's drop counters into the port's.
	st := d.linkStats
	if v := st.RxBadICRC.Load(); v != r.prevICRC {
		d.counters[RcvdBadICRC].Add(v - r.prevICRC)
		r.prevICRC = v
	}
	if v := st.RxMalformed.Load(); v != r.prevMal {
		d.counters[RcvdBadHeader].Add(v - r.prevMal)
		r.prevMal = v
	}
	// The batch's responses (ACKs, READ responses) go out before Close
	// can close the link: a program that sees a completion from this
	// batch and closes the device at once must not lose the ACK its peer
	// waits for, or the peer, which has heard from us, retries forever.
	// They go out after rxMu is released, though (sendHandled): a send
	// waits for the link's lock behind every other sender, and while it
	// waited holding rxMu nobody could take the ACKs that had arrived
	// meanwhile (issue 15's holes, BENCHMARKS.md). rxSendMu, read-locked
	// before rxMu is released, is what Close waits for.
	//
	// The batch's responses and the requester runs it triggers may send
	// burstBytes inline; the rest of any bulk work waits for the QPs'
	// turns in the scheduler, so a READ of 256 MiB does not hold the
	// receive path (and every other QP) while it is answered.
	out := getTxBatch(d) // burstBytes
	for i := range r.bufs[:k] {
		d.dispatch(&r.bufs[i], out)
	}
	d.rxSendMu.RLock()
	return out
}

// sendHandled sends what handleBatch's batch holds, and gives its QPs
// back (release). Called with rxMu released.
func (d *Device) sendHandled(out *txBatch) {
	putTxBatch(out)
	d.rxSendMu.RUnlock()
}

// dispatch checks a packet's transport headers and hands it to its QP.
func (d *Device) dispatch(pk *link.Packet, out *txBatch) {
	d.counters[RcvdPkts].Add(1)
	// The transport header is parsed once: the link's parse when it still
	// describes the packet (link.Packet.Parsed), else here: Holds is true
	// only when parsing again would check and find the same.
	p := &pk.Parsed
	if !p.Holds(pk.Transport(), pk.Addr.Version) {
		if err := p.ParseTransport(pk.Transport(), pk.Addr.Version); err != nil {
			d.counters[RcvdBadHeader].Add(1)
			return
		}
	}
	bth := p.BTH()
	if bth.PKey()&0x7FFF != wire.DefaultPKey&0x7FFF {
		d.counters[RcvdBadPKey].Add(1)
		return
	}
	if bth.DestQP() == MulticastQPN {
		d.dispatchMcast(pk, p, out)
		return
	}
	q := d.lookupQPFor(out, bth.DestQP())
	if q == nil {
		d.counters[RcvdBadQP].Add(1)
		return
	}
	if !q.bulk.Load() && d.sched.bulkQPs.Load() > 0 {
		// A QP without bulk work is active while others have some: they
		// keep to their share of the time (sched.go).
		d.sched.active(q)
	}
	if p.Opcode() == wire.OpcodeCNP {
		q.onCNP(&pk.Addr) // DCQCN's reaction point (ecn.go)
		return
	}
	if pk.Addr.TrafficClass&3 == ECNCE && pk.Addr.Version == wire.RoCEv2 {
		// DCQCN's notification point (ecn.go).
		c := d.ecn.Load()
		if c == nil {
			c = &defaultECN
		}
		q.onCE(c, p, &pk.Addr, out)
	}
	q.receive(p, &pk.Addr, out)
}
