// Package fabric is an in-memory Ethernet switch for goroce's engine tests:
// any number of ports, each a link.Link, carrying real RoCE v1/v2 frames
// (so link/pcap and tshark see what a wire would carry), with per-port
// seeded loss, reordering, duplication, delay and bit corruption on egress,
// and counters that show each fault fired.
//
// The fabric runs one scheduler goroutine for delayed frames and nothing
// else; it works under testing/synctest, where delays cost no wall time.
package fabric

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Faults are the impairments a port applies to the frames it sends. Each
// probability is per frame, in [0, 1].
type Faults struct {
	Loss      float64       // drop the frame
	Duplicate float64       // deliver it twice
	Corrupt   float64       // flip one random bit anywhere in the frame
	Reorder   float64       // hold it back by ReorderDelay so later frames overtake it
	Delay     time.Duration // latency added to every frame
	// ReorderDelay is how long a reordered frame is held back beyond Delay;
	// zero means 20 µs.
	ReorderDelay time.Duration
}

func (f *Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"Loss", f.Loss}, {"Duplicate", f.Duplicate}, {"Corrupt", f.Corrupt}, {"Reorder", f.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("fabric: %s probability %v outside [0, 1]", p.name, p.v)
		}
	}
	if f.Delay < 0 || f.ReorderDelay < 0 {
		return errors.New("fabric: negative delay")
	}
	return nil
}

// FaultStats count the faults a port's egress applied.
type FaultStats struct {
	Lost       atomic.Uint64
	Duplicated atomic.Uint64
	Corrupted  atomic.Uint64
	Reordered  atomic.Uint64
	Delayed    atomic.Uint64
	// QueueFull counts frames dropped because the destination port's
	// receive queue was full (a NIC ring overflow).
	QueueFull atomic.Uint64
	// Marked and TailDropped count what the bottleneck toward this port
	// (PortConfig.Bottleneck) did: frames marked ECN Congestion
	// Experienced, and frames dropped because its queue was full.
	Marked      atomic.Uint64
	TailDropped atomic.Uint64
}

// Bottleneck is the switch's egress queue toward a port, a model of a
// congested hop in virtual time: frames switched to the port leave it one
// after the other at Rate, so a frame waits for the bytes queued ahead of
// it. A frame that finds MarkBytes or more queued ahead is marked ECN
// Congestion Experienced if it is ECN-capable (ECT(0) or ECT(1); RFC 3168
// §5): step marking at one threshold, as DCTCP's switches do (RED with
// Kmin = Kmax and Pmax = 1, Zhu et al. SIGCOMM 2015 §5). A frame that
// would make the queue exceed LimitBytes is dropped (tail drop). RoCE v1
// frames have no IP ECN field and are never marked. The model is
// deterministic: the same sends at the same (virtual) times give the same
// marks, drops and departures.
type Bottleneck struct {
	Rate       uint64 // bits per second; zero: no bottleneck
	MarkBytes  int    // zero: no marking
	LimitBytes int    // zero: 1 MiB
}

func (b *Bottleneck) validate() error {
	if b.MarkBytes < 0 || b.LimitBytes < 0 {
		return errors.New("fabric: negative bottleneck queue size")
	}
	return nil
}

// PortConfig configures a port.
type PortConfig struct {
	Name string
	MAC  wire.MAC     // zero: derived from the port number
	GIDs []netip.Addr // the GIDs this port owns; frames to them are delivered here
	// MTU is the largest transport packet (BTH..ICRC) the port carries;
	// zero means 4096 + 64 (path MTU 4096 plus the largest header set).
	MTU       int
	Faults    Faults
	Seed      uint64 // seeds the fault generator (with the port number)
	QueueLen  int    // receive queue length in frames; zero means 4096
	BatchSize int    // zero means 64
	// Bottleneck is the egress queue toward this port; zero: none.
	Bottleneck Bottleneck
}

// Fabric is an in-memory switch.
type Fabric struct {
	mu     sync.Mutex
	ports  []*Port              // guarded by mu
	byGID  map[netip.Addr]*Port // guarded by mu
	closed bool                 // guarded by mu
	// groups are the multicast groups' members (Port.JoinGroup); guarded by mu.
	groups map[netip.Addr]map[*Port]bool

	sched scheduler
	pool  sync.Pool // of *frame
	wg    sync.WaitGroup
}

// New returns an empty fabric. Close it to stop its scheduler goroutine.
func New() *Fabric {
	f := &Fabric{byGID: make(map[netip.Addr]*Port)}
	f.pool.New = func() any { return &frame{buf: make([]byte, 0, link.MaxFrameSize)} }
	f.sched.init()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.sched.run(f.deliver)
	}()
	return f
}

// Close closes every port and stops the scheduler; frames in flight are dropped.
func (f *Fabric) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	ports := f.ports
	f.mu.Unlock()
	for _, p := range ports {
		p.Close()
	}
	f.sched.stop()
	f.wg.Wait()
	return nil
}

// AddPort attaches a new port.
func (f *Fabric) AddPort(cfg PortConfig) (*Port, error) {
	if err := cfg.Faults.validate(); err != nil {
		return nil, err
	}
	if err := cfg.Bottleneck.validate(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = 4096 + 64
	}
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 4096
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 64
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, net.ErrClosed
	}
	for _, g := range cfg.GIDs {
		if o := f.byGID[g]; o != nil {
			return nil, fmt.Errorf("fabric: GID %v already belongs to port %q", g, o.cfg.Name)
		}
	}
	n := len(f.ports)
	if cfg.MAC == (wire.MAC{}) {
		cfg.MAC = wire.MAC{0x02, 0x00, 0x00, 0x00, byte(n >> 8), byte(n)}
	}
	p := &Port{
		fab:    f,
		cfg:    cfg,
		queue:  make(chan *frame, cfg.QueueLen),
		ready:  make(chan struct{}, 1),
		closed: make(chan struct{}),
		rng:    rand.New(rand.NewPCG(cfg.Seed, uint64(n))),
		bn:     cfg.Bottleneck,
	}
	f.ports = append(f.ports, p)
	for _, g := range cfg.GIDs {
		f.byGID[g] = p
	}
	return p, nil
}

func (f *Fabric) route(gid netip.Addr) *Port {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byGID[gid]
}

func (f *Fabric) getFrame() *frame { return f.pool.Get().(*frame) }

func (f *Fabric) putFrame(fr *frame) {
	fr.buf = fr.buf[:0]
	fr.src, fr.dst = nil, nil
	f.pool.Put(fr)
}

// deliver puts fr on its destination's queue, or drops it; a frame that
// arrives at a port's bottleneck first waits its turn there.
func (f *Fabric) deliver(fr *frame) {
	dst, src := fr.dst, fr.src
	if dst.isClosed() {
		f.putFrame(fr)
		return
	}
	if !fr.queued {
		if d, ok := dst.enqueue(fr); !ok {
			f.putFrame(fr)
			return
		} else if d > 0 {
			fr.queued = true
			f.sched.add(d, fr)
			return
		}
	}
	fr.queued = false
	select {
	case dst.queue <- fr:
		// After the frame is queued, so that a WaitRecv that found the
		// queue empty hears of it.
		select {
		case dst.ready <- struct{}{}:
		default:
		}
	default:
		src.faults.QueueFull.Add(1)
		f.putFrame(fr)
	}
}

type frame struct {
	buf      []byte
	src, dst *Port
	queued   bool // it has passed dst's bottleneck
}

// enqueue puts fr in p's bottleneck queue: it returns how long fr takes to
// leave it (waiting behind the queued bytes, then its own serialization),
// or false if the queue is full and fr is dropped.
func (p *Port) enqueue(fr *frame) (time.Duration, bool) {
	p.bnMu.Lock()
	defer p.bnMu.Unlock()
	if p.bn.Rate == 0 {
		return 0, true
	}
	now := time.Now()
	var ahead time.Duration
	if p.busyUntil.After(now) {
		ahead = p.busyUntil.Sub(now)
	}
	queued := int(uint64(ahead) * p.bn.Rate / 8 / uint64(time.Second))
	limit := p.bn.LimitBytes
	if limit == 0 {
		limit = 1 << 20
	}
	if queued+len(fr.buf) > limit {
		p.faults.TailDropped.Add(1)
		return 0, false
	}
	if p.bn.MarkBytes > 0 && queued >= p.bn.MarkBytes && markCE(fr.buf) {
		p.faults.Marked.Add(1)
	}
	tx := time.Duration(uint64(len(fr.buf)) * 8 * uint64(time.Second) / p.bn.Rate)
	p.busyUntil = now.Add(ahead + tx)
	return ahead + tx, true
}

// markCE sets ECN Congestion Experienced in a RoCE v2 frame that is
// ECN-capable, and reports whether it did. The ICRC masks the IPv4 TOS
// and the IPv6 traffic class (IBTA RoCEv2 Annex A17.4.5.1), so it stays
// valid; the IPv4 header checksum is recomputed.
func markCE(b []byte) bool {
	if len(b) < wire.EthernetLen {
		return false
	}
	off := wire.EthernetLen
	et := binary.BigEndian.Uint16(b[12:])
	if et == 0x8100 {
		if len(b) < wire.EthernetLen+wire.VLANTagLen {
			return false
		}
		off += wire.VLANTagLen
		et = binary.BigEndian.Uint16(b[16:])
	}
	switch et {
	case 0x0800:
		if len(b) < off+wire.IPv4MinLen {
			return false
		}
		hl := int(b[off]&0xF) * 4
		if hl < wire.IPv4MinLen || len(b) < off+hl {
			return false
		}
		ip := wire.IPv4(b[off : off+hl])
		if ip.ECN() == 0 {
			return false
		}
		ip.SetTOS(ip.TOS() | 3)
		ip.SetChecksum(ip.ComputeChecksum())
		return true
	case 0x86DD:
		if len(b) < off+wire.IPv6Len || (b[off+1]>>4)&3 == 0 {
			return false
		}
		b[off+1] |= 0x30 // the traffic class's low two bits: ECN
		return true
	}
	return false
}

// SetBottleneck changes the bottleneck toward p; frames already queued
// keep their departure times.
func (p *Port) SetBottleneck(b Bottleneck) error {
	if err := b.validate(); err != nil {
		return err
	}
	p.bnMu.Lock()
	p.bn = b
	p.bnMu.Unlock()
	return nil
}

// Port is one port of the fabric; it implements link.Link.
type Port struct {
	fab    *Fabric
	queue  chan *frame
	ready  chan struct{} // a token after each frame queued, for WaitRecv
	closed chan struct{}
	once   sync.Once
	stats  link.Stats
	faults FaultStats

	mu   sync.Mutex // serializes Send
	cfg  PortConfig // Faults guarded by mu; the rest is immutable
	rng  *rand.Rand // guarded by mu
	ipID uint16     // guarded by mu
	// mcDsts is Send's scratch list of a packet's destinations; guarded by mu.
	mcDsts []*Port

	rxMu sync.Mutex // serializes Recv

	bnMu      sync.Mutex
	bn        Bottleneck // guarded by bnMu
	busyUntil time.Time  // guarded by bnMu: when the bottleneck's queue empties
}

var (
	_ link.Link   = (*Port)(nil)
	_ link.Poller = (*Port)(nil)
)

// Name returns the port's name.
func (p *Port) Name() string { return p.cfg.Name }

// MAC returns the port's MAC address.
func (p *Port) MAC() wire.MAC { return p.cfg.MAC }

// GIDs returns the GIDs the port owns.
func (p *Port) GIDs() []netip.Addr { return p.cfg.GIDs }

// FaultStats returns the counters of the faults this port's egress applied.
func (p *Port) FaultStats() *FaultStats { return &p.faults }

// SetFaults changes the port's egress faults.
func (p *Port) SetFaults(fl Faults) error {
	if err := fl.validate(); err != nil {
		return err
	}
	p.mu.Lock()
	p.cfg.Faults = fl
	p.mu.Unlock()
	return nil
}

func (p *Port) BatchSize() int     { return p.cfg.BatchSize }
func (p *Port) Headroom() int      { return link.FrameHeadroom }
func (p *Port) MTU() int           { return p.cfg.MTU }
func (p *Port) Stats() *link.Stats { return &p.stats }

// Close detaches the port: Recv returns net.ErrClosed and frames to it are dropped.
func (p *Port) Close() error {
	p.once.Do(func() {
		close(p.closed)
		f := p.fab
		f.mu.Lock()
		for _, g := range p.cfg.GIDs {
			if f.byGID[g] == p {
				delete(f.byGID, g)
			}
		}
		f.leaveAllLocked(p)
		f.mu.Unlock()
		for {
			select {
			case fr := <-p.queue:
				f.putFrame(fr)
			default:
				return
			}
		}
	})
	return nil
}

func (p *Port) isClosed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// Send encapsulates each packet in a frame (in the packet's headroom, which
// also fills its ICRC) and switches it to the port owning its destination
// GID, applying this port's faults.
func (p *Port) Send(pkts []link.Packet) (int, error) {
	if p.isClosed() {
		return 0, net.ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fl := p.cfg.Faults
	sent := 0
	for i := range pkts {
		pk := &pkts[i]
		if pk.Len > p.cfg.MTU {
			p.stats.TxBadAddress.Add(1)
			continue
		}
		var dsts []*Port
		var dmac wire.MAC
		if mac, ok := link.MulticastMAC(pk.Addr.DstGID); ok {
			// A multicast packet goes to every other member of its group,
			// and on a wire without members it is sent and lost.
			dsts, dmac = p.fab.members(pk.Addr.DstGID, p, p.mcDsts[:0]), mac
			p.mcDsts = dsts[:0]
		} else {
			dst := p.fab.route(pk.Addr.DstGID)
			if dst == nil {
				p.stats.TxNoRoute.Add(1)
				continue
			}
			dsts, dmac = append(p.mcDsts[:0], dst), dst.cfg.MAC
		}
		p.ipID++
		fb, err := link.Encapsulate(pk, p.cfg.MAC, dmac, p.ipID)
		if err != nil {
			p.stats.TxBadAddress.Add(1)
			continue
		}
		p.stats.TxPackets.Add(1)
		p.stats.TxBytes.Add(uint64(len(fb)))
		sent++
		if fl.Loss > 0 && p.rng.Float64() < fl.Loss {
			p.faults.Lost.Add(1)
			continue
		}
		copies := 1
		if fl.Duplicate > 0 && p.rng.Float64() < fl.Duplicate {
			p.faults.Duplicated.Add(1)
			copies = 2
		}
		for c := 0; c < copies*len(dsts); c++ {
			fr := p.fab.getFrame()
			fr.buf = append(fr.buf[:0], fb...)
			fr.src, fr.dst = p, dsts[c%len(dsts)]
			if fl.Corrupt > 0 && p.rng.Float64() < fl.Corrupt {
				p.faults.Corrupted.Add(1)
				fr.buf[p.rng.IntN(len(fr.buf))] ^= 1 << p.rng.IntN(8)
			}
			delay := fl.Delay
			if fl.Reorder > 0 && p.rng.Float64() < fl.Reorder {
				p.faults.Reordered.Add(1)
				rd := fl.ReorderDelay
				if rd == 0 {
					rd = 20 * time.Microsecond
				}
				delay += rd
			}
			if delay > 0 {
				p.faults.Delayed.Add(1)
				p.fab.sched.add(delay, fr)
			} else {
				p.fab.deliver(fr)
			}
		}
	}
	return sent, nil
}

// Recv waits for at least one frame, then decapsulates up to len(pkts)
// queued frames into the callers' buffers (each needs capacity
// link.MaxFrameSize). Frames that fail to parse or whose ICRC is wrong are
// counted and dropped.
func (p *Port) Recv(pkts []link.Packet) (int, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	n := 0
	for n == 0 {
		var fr *frame
		select {
		case fr = <-p.queue:
		case <-p.closed:
			return 0, net.ErrClosed
		}
	drain:
		for {
			if p.recvOne(fr, &pkts[n]) {
				n++
				if n == len(pkts) {
					break
				}
			}
			select {
			case fr = <-p.queue:
			default:
				break drain
			}
		}
	}
	return n, nil
}

// TryRecv is Recv without the wait (link.Poller).
func (p *Port) TryRecv(pkts []link.Packet) (int, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	if p.isClosed() {
		return 0, net.ErrClosed
	}
	n := 0
	for n < len(pkts) {
		select {
		case fr := <-p.queue:
			if p.recvOne(fr, &pkts[n]) {
				n++
			}
		default:
			return n, nil
		}
	}
	return n, nil
}

// RecvLocked is Recv that takes the frames with mu held (link.Poller). A
// frame queued after its look at the queue leaves a token in ready, so
// none is missed; a stale token only makes a wake-up with nothing to take.
func (p *Port) RecvLocked(pkts []link.Packet, mu sync.Locker) (int, error) {
	for {
		if len(p.queue) == 0 {
			select {
			case <-p.ready:
			case <-p.closed:
				return 0, net.ErrClosed
			}
		}
		mu.Lock()
		n, err := p.TryRecv(pkts)
		if err != nil {
			mu.Unlock()
			return 0, err
		}
		if n > 0 {
			return n, nil
		}
		mu.Unlock()
	}
}

// recvOne decapsulates fr into pk and releases fr; it reports whether pk
// now holds a packet for the engine.
func (p *Port) recvOne(fr *frame, pk *link.Packet) bool {
	defer p.fab.putFrame(fr)
	if cap(pk.Buf) < len(fr.buf) {
		p.stats.RxMalformed.Add(1)
		return false
	}
	pk.Buf = append(pk.Buf[:0], fr.buf...)
	err := link.Decapsulate(pk.Buf, pk)
	switch {
	case err == nil:
	case errors.Is(err, wire.ErrBadICRC):
		p.stats.RxBadICRC.Add(1)
		return false
	default: // malformed, or no longer RoCE after corruption
		p.stats.RxMalformed.Add(1)
		return false
	}
	if !p.owns(pk.Addr.DstGID) && !p.fab.isMember(pk.Addr.DstGID, p) {
		p.stats.RxNotForUs.Add(1)
		return false
	}
	p.stats.RxPackets.Add(1)
	p.stats.RxBytes.Add(uint64(len(pk.Buf)))
	return true
}

func (p *Port) owns(g netip.Addr) bool {
	for _, o := range p.cfg.GIDs {
		if o == g {
			return true
		}
	}
	return false
}

// scheduler releases delayed frames at their due time, in (due, arrival) order.
type scheduler struct {
	mu   sync.Mutex
	h    frameHeap // guarded by mu
	seq  uint64    // guarded by mu
	kick chan struct{}
	done chan struct{}
	once sync.Once
}

func (s *scheduler) init() {
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
}

func (s *scheduler) add(d time.Duration, fr *frame) {
	s.mu.Lock()
	s.seq++
	heap.Push(&s.h, delayed{at: time.Now().Add(d), seq: s.seq, fr: fr})
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *scheduler) stop() { s.once.Do(func() { close(s.done) }) }

func (s *scheduler) run(deliver func(*frame)) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		for len(s.h) > 0 && !s.h[0].at.After(now) {
			d := heap.Pop(&s.h).(delayed)
			s.mu.Unlock()
			deliver(d.fr)
			s.mu.Lock()
		}
		var wait <-chan time.Time
		if len(s.h) > 0 {
			timer.Reset(s.h[0].at.Sub(now))
			wait = timer.C
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-s.kick:
		case <-s.done:
			return
		}
	}
}

type delayed struct {
	at  time.Time
	seq uint64
	fr  *frame
}

type frameHeap []delayed

func (h frameHeap) Len() int { return len(h) }
func (h frameHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h frameHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *frameHeap) Push(x any)   { *h = append(*h, x.(delayed)) }
func (h *frameHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
