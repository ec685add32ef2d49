// Package demo is `roce demo`: goroce's engine end to end in one process,
// with no root, no setup and no RDMA hardware. Two soft RoCE devices on
// loopback addresses connect with RDMA CM over RoCE v2 (real UDP sockets),
// run each kind of operation with the data checked, measure loopback
// bandwidth and latency, move data through injected loss, and then, over
// the in-memory fabric, meet a RoCE v1/v2 mismatch, diagnose it and fix it
// through the rdma_cm configuration API.
package demo

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Options tune the demo. Zero values mean the defaults.
type Options struct {
	// Pcap, if set, receives the RoCE v2 part's traffic as demo0 sent and
	// received it (the bandwidth and latency runs left out).
	Pcap io.Writer
	// BWTime is how long the bandwidth run lasts; default 1 s.
	BWTime time.Duration
	// LatIters is the number of latency round trips; default 2000 (at most
	// about a second's worth).
	LatIters int
	// Loss is the injected loss rate, each direction; default 0.1.
	Loss float64
}

func (o *Options) defaults() {
	if o.BWTime == 0 {
		o.BWTime = time.Second
	}
	if o.LatIters == 0 {
		o.LatIters = 2000
	}
	if o.Loss == 0 {
		o.Loss = 0.1
	}
}

// Sizes and layout of the two devices' memory.
const (
	cmPort    = 7174 // rping's port
	bwSize    = 64 << 10
	bwDepth   = 16
	opSize    = 4096
	latSize   = 64
	lossTotal = 1 << 20
	// demo1's buffer: [0, 1 MiB) WRITE target, then the READ source, the
	// atomic counter and receive buffers.
	offRead    = lossTotal
	offAtomic  = offRead + opSize
	offRecv    = offAtomic + 64
	recvSlots  = 32
	recvSlot   = 256
	bufSize    = offRecv + recvSlots*recvSlot
	qpDepth    = 64
	cmTimeout  = 200 * time.Millisecond // CM response timeout: the demo must not wait Linux's 4.3 s
	cmRetries  = 2
	fastTimout = 12 // local ACK timeout attribute: 4.096 µs × 2^12 ≈ 16.8 ms
)

// node is one device and what the demo made on it.
type node struct {
	name   string
	ip     netip.Addr
	port   uint16 // the UDP port both devices use
	dev    *verbs.Device
	loss   *lossy
	cm     *rdmacm.CM
	pd     *verbs.PD
	scq    *verbs.CQ
	rcq    *verbs.CQ
	buf    []byte
	mr     *verbs.MR
	qp     *verbs.QP
	nextRx int
}

// Run runs the demo, writing what happens to w. An error means a check
// failed or something could not be set up.
func Run(ctx context.Context, w io.Writer, o Options) error {
	o.defaults()
	out := &printer{w: bufio.NewWriter(w)}
	defer out.w.Flush()
	start := time.Now()
	out.f("goroce demo: goroce's own RDMA engine, end to end, in this one process (no root, no RDMA hardware).\n")
	if err := roceV2(ctx, out, o); err != nil {
		return err
	}
	out.w.Flush()
	if err := mismatch(ctx, out); err != nil {
		return err
	}
	out.f("\nEvery check passed, in %.1f s. Next: roce decode FILE.pcap (roce demo --pcap FILE writes one), roce demo --rping\n"+
		"(a real Linux rxe rping capture, decoded), roce link add (devices on real netdevs), roce ping, roce perf.\n",
		time.Since(start).Seconds())
	return out.err
}

type printer struct {
	w   *bufio.Writer
	err error
}

func (p *printer) f(format string, args ...any) {
	if _, err := fmt.Fprintf(p.w, format, args...); err != nil && p.err == nil {
		p.err = err
	}
}

// gate sends and receives through rec while on, else around it, so the
// capture can leave out the bandwidth runs.
type gate struct {
	link.Link // the plain link
	rec       link.Link
	on        atomic.Bool
}

func (g *gate) Send(p []link.Packet) (int, error) {
	if g.on.Load() {
		return g.rec.Send(p)
	}
	return g.Link.Send(p)
}

func (g *gate) Recv(p []link.Packet) (int, error) {
	if g.on.Load() {
		return g.rec.Recv(p)
	}
	return g.Link.Recv(p)
}

// openUDP opens a device named name on a UDP link bound to ip:port.
func openUDP(name string, ip netip.Addr, port uint16, seed uint64, rec *pcap.Writer) (*node, *gate, error) {
	u, err := udp.New(udp.Config{Bind: ip, Addrs: []netip.Addr{ip}, Port: port})
	if err != nil {
		return nil, nil, err
	}
	var l link.Link = u
	var g *gate
	if rec != nil {
		g = &gate{Link: u, rec: pcap.New(u, rec)}
		g.on.Store(true)
		l = g
	}
	n := &node{name: name, ip: ip, port: port, loss: newLossy(l, seed)}
	a4 := ip.As4()
	n.dev, err = verbs.Open(verbs.DeviceConfig{Name: name, Link: n.loss, MAC: wire.MAC{0x02, 0, a4[0], a4[1], a4[2], a4[3]},
		GIDs: []verbs.GIDEntry{{GID: netip.AddrFrom16(ip.As16()), Type: verbs.GIDTypeRoCEv2, Netdev: "lo"}}})
	if err != nil {
		u.Close()
		return nil, nil, err
	}
	return n, g, nil
}

// openPair opens demo0 and demo1 on 127.0.0.1 and 127.0.0.2, port 4791 —
// or, when something else holds those, on other loopback addresses or
// another port.
func openPair(rec *pcap.Writer) (a, b *node, ga *gate, err error) {
	type try struct {
		a, b netip.Addr
		port uint16
	}
	tries := []try{{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), wire.RoCEv2Port}}
	for i := range 3 {
		x := byte(rand.IntN(200) + 10)
		tries = append(tries, try{netip.AddrFrom4([4]byte{127, 0, x, 1}), netip.AddrFrom4([4]byte{127, 0, x, 2}), wire.RoCEv2Port})
		tries = append(tries, try{netip.AddrFrom4([4]byte{127, 0, x, 1}), netip.AddrFrom4([4]byte{127, 0, x, 2}), uint16(47910 + rand.IntN(1000) + i)})
	}
	for _, t := range tries {
		a, ga, err = openUDP("demo0", t.a, t.port, 1, rec)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return nil, nil, nil, err
		}
		b, _, err = openUDP("demo1", t.b, t.port, 2, nil)
		if err != nil {
			a.dev.Close()
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return nil, nil, nil, err
		}
		return a, b, ga, nil
	}
	return nil, nil, nil, fmt.Errorf("demo: every loopback address and port tried is in use: %w", err)
}

// setup makes n's PD, CQs, memory and CM.
func (n *node) setup() error {
	var err error
	if n.pd, err = n.dev.AllocPD(); err != nil {
		return err
	}
	if n.scq, err = n.dev.CreateCQ(256); err != nil {
		return err
	}
	if n.rcq, err = n.dev.CreateCQ(256); err != nil {
		return err
	}
	n.buf = make([]byte, bufSize)
	if n.mr, err = n.pd.RegMR(n.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		return err
	}
	n.cm = rdmacm.New(rdmacm.Options{ResponseTimeout: cmTimeout, MaxRetries: cmRetries, Timewait: 20 * time.Millisecond})
	return n.cm.AddDevice(n.dev)
}

func (n *node) close() {
	if n.cm != nil {
		n.cm.Close()
	}
	n.dev.Close()
}

func (n *node) endpoint(src netip.Addr, pd []byte) rdmacm.Endpoint {
	return rdmacm.Endpoint{PD: n.pd, Src: src,
		QP: verbs.QPInitAttr{Type: verbs.RC, SendCQ: n.scq, RecvCQ: n.rcq,
			Cap: verbs.QPCap{MaxSendWR: qpDepth, MaxRecvWR: qpDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}},
		Param: rdmacm.ConnParam{PrivateData: pd, ResponderResources: 16, InitiatorDepth: 16, RetryCount: 7, RNRRetryCount: 7}}
}

// postRecv posts one receive buffer of n's.
func (n *node) postRecv() error {
	i := n.nextRx % recvSlots
	n.nextRx++
	return n.qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{n.mr.SGE(offRecv+i*recvSlot, recvSlot)}})
}

// recvBuf is receive slot wrid's data.
func (n *node) recvBuf(wc verbs.WC) []byte {
	off := offRecv + int(wc.WRID)*recvSlot
	return n.buf[off : off+int(wc.ByteLen)]
}

// wait returns cq's next completion, which must be a success of opcode op.
// It spins briefly before it blocks, as perftest does.
func wait(ctx context.Context, cq *verbs.CQ, op verbs.WCOpcode) (verbs.WC, error) {
	var wc [1]verbs.WC
	for spins := 0; ; spins++ {
		n, err := cq.Poll(wc[:])
		if err == nil && n == 0 {
			if spins < 100 {
				runtime.Gosched()
				continue
			}
			n, err = cq.PollWait(ctx, wc[:])
		}
		if err != nil {
			return wc[0], err
		}
		if n == 0 {
			continue
		}
		if wc[0].Status != verbs.WCSuccess {
			return wc[0], fmt.Errorf("completion failed: %v", &wc[0])
		}
		if wc[0].Opcode != op {
			return wc[0], fmt.Errorf("completion %v, want %v", &wc[0], op)
		}
		return wc[0], nil
	}
}

// remote is where demo1's memory is, as its REP's private data says.
type remote struct {
	addr uint64
	rkey uint32
}

func roceV2(ctx context.Context, out *printer, o Options) error {
	var rec *pcap.Writer
	if o.Pcap != nil {
		var err error
		if rec, err = pcap.NewWriter(o.Pcap); err != nil {
			return err
		}
	}
	a, b, ga, err := openPair(rec)
	if err != nil {
		return fmt.Errorf("demo: opening the loopback devices: %w", err)
	}
	defer b.close()
	defer a.close()
	for _, n := range []*node{a, b} {
		if err := n.setup(); err != nil {
			return fmt.Errorf("demo: %s: %w", n.name, err)
		}
	}
	out.f("\nTwo soft RoCE devices, each on its own UDP socket (RoCE v2 carries RDMA in UDP, port %d):\n", a.port)
	out.f("  %s  %v    %s  %v    (RoCE v2 GIDs ::ffff:%v and ::ffff:%v)\n", a.name, a.ip, b.name, b.ip, a.ip, b.ip)

	// 1. Connect.
	out.f("\n1. Connect with RDMA CM (CM messages REQ, REP, RTU on QP 1, as rping does)\n")
	var pd [12]byte
	binary.BigEndian.PutUint64(pd[:], b.mr.Addr())
	binary.BigEndian.PutUint32(pd[8:], b.mr.RKey())
	l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, cmPort), b.endpoint(netip.Addr{}, pd[:]))
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	defer l.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	type accepted struct {
		c   *rdmacm.Conn
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		c, err := l.Accept(cctx)
		acc <- accepted{c, err}
	}()
	t0 := time.Now()
	ca, err := a.cm.Dial(cctx, netip.AddrPortFrom(b.ip, cmPort), a.endpoint(a.ip, nil))
	if err != nil {
		return fmt.Errorf("demo: connect: %w", err)
	}
	defer ca.Close()
	r := <-acc
	if r.err != nil {
		return fmt.Errorf("demo: accept: %w", r.err)
	}
	defer r.c.Close()
	took := time.Since(t0)
	a.qp, b.qp = ca.QP, r.c.QP
	if len(ca.PrivateData) < 12 {
		return fmt.Errorf("demo: REP private data %x: too short", ca.PrivateData)
	}
	rm := remote{binary.BigEndian.Uint64(ca.PrivateData), binary.BigEndian.Uint32(ca.PrivateData[8:])}
	out.f("   connected in %.1f ms: %s QP %#x <-> %s QP %#x (reliable connection); demo1's REP carried its buffer's\n"+
		"   address %#x and rkey %#x, which demo0 needs for RDMA WRITE, READ and atomics\n",
		float64(took.Microseconds())/1000, a.name, a.qp.Num(), b.name, b.qp.Num(), rm.addr, rm.rkey)
	for range 8 {
		if err := b.postRecv(); err != nil {
			return err
		}
	}
	if err := a.postRecv(); err != nil {
		return err
	}

	// 2. One of each operation.
	out.f("\n2. One operation of each kind, every byte checked\n")
	if err := operations(ctx, out, a, b, rm); err != nil {
		return err
	}

	// 3. Numbers.
	if ga != nil {
		ga.on.Store(false)
	}
	out.f("\n3. Loopback numbers (both devices in this process, through the kernel's loopback: not a network measurement)\n")
	if err := bandwidth(ctx, out, a, rm, o.BWTime); err != nil {
		return err
	}
	if err := latency(ctx, out, a, b, o.LatIters); err != nil {
		return err
	}
	if ga != nil {
		ga.on.Store(true)
	}

	// 4. Loss.
	if err := lossRun(ctx, out, a, b, rm, o.Loss); err != nil {
		return err
	}
	if rec != nil {
		out.f("   (the capture holds demo0's traffic of parts 1, 2 and 4; roce decode reads it)\n")
	}
	return nil
}

// send posts a signaled SEND of n's buf[off:off+size] and waits for it.
func (n *node) send(ctx context.Context, off, size int) error {
	if err := n.qp.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{n.mr.SGE(off, size)}}); err != nil {
		return err
	}
	_, err := wait(ctx, n.scq, verbs.WCSend)
	return err
}

// notify: a SENDs a few bytes and b receives them. b's receive completion
// orders everything demo1's device did for the QP before it, so demo1 may
// then look at its memory.
func notify(ctx context.Context, a, b *node, msg string) error {
	off := offRecv - 32
	copy(a.buf[off:], msg)
	if err := a.send(ctx, off, len(msg)); err != nil {
		return err
	}
	wc, err := wait(ctx, b.rcq, verbs.WCRecv)
	if err != nil {
		return err
	}
	if got := b.recvBuf(wc); string(got) != msg {
		return fmt.Errorf("demo: %s received %q, want %q", b.name, got, msg)
	}
	return b.postRecv()
}

func pattern(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i < len(b); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], r.Uint64())
		copy(b[i:], w[:])
	}
}

func operations(ctx context.Context, out *printer, a, b *node, rm remote) error {
	ok := func(cond bool, what string) error {
		if !cond {
			return fmt.Errorf("demo: %s: data check FAILED", what)
		}
		return nil
	}
	// SEND: into a receive buffer demo1 posted.
	msg := "hello demo1, this is demo0"
	if err := notify(ctx, a, b, msg); err != nil {
		return fmt.Errorf("demo: SEND: %w", err)
	}
	out.f("   SEND       %s -> %s  %q (%d B) landed in a receive buffer demo1 had posted   ok\n", a.name, b.name, msg, len(msg))

	// WRITE: straight into demo1's memory; demo1 looks after the next SEND.
	pattern(a.buf[:opSize], 1)
	if err := a.qp.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, opSize)}, RemoteAddr: rm.addr, RKey: rm.rkey}); err != nil {
		return err
	}
	if _, err := wait(ctx, a.scq, verbs.WCRDMAWrite); err != nil {
		return fmt.Errorf("demo: WRITE: %w", err)
	}
	if err := notify(ctx, a, b, "written"); err != nil {
		return err
	}
	if err := ok(bytes.Equal(b.buf[:opSize], a.buf[:opSize]), "WRITE"); err != nil {
		return err
	}
	out.f("   WRITE      %s -> %s  %d B placed in demo1's memory at %#x; demo1 posted nothing for it   ok\n", a.name, b.name, opSize, rm.addr)

	// READ: demo1's memory into demo0's, demo1's CPU not involved.
	// (demo1 filled it before its last receive was posted.)
	pattern(b.buf[offRead:offRead+opSize], 2)
	binary.NativeEndian.PutUint64(b.buf[offAtomic:], 100)
	if err := b.postRecv(); err != nil { // orders the two writes above before demo1's responder runs
		return err
	}
	dst := offRead
	if err := a.qp.PostSend(verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(dst, opSize)}, RemoteAddr: rm.addr + offRead, RKey: rm.rkey}); err != nil {
		return err
	}
	if _, err := wait(ctx, a.scq, verbs.WCRDMARead); err != nil {
		return fmt.Errorf("demo: READ: %w", err)
	}
	if err := ok(bytes.Equal(a.buf[dst:dst+opSize], b.buf[offRead:offRead+opSize]), "READ"); err != nil {
		return err
	}
	out.f("   READ       %s <- %s  %d B fetched from demo1's memory at %#x   ok\n", a.name, b.name, opSize, rm.addr+offRead)

	// Atomics on an 8-byte counter in demo1's memory.
	atomicOp := func(wr verbs.SendWR, op verbs.WCOpcode) (uint64, error) {
		wr.Flags, wr.RemoteAddr, wr.RKey = verbs.SendSignaled, rm.addr+offAtomic, rm.rkey
		wr.SGList = []verbs.SGE{a.mr.SGE(offAtomic, 8)}
		if err := a.qp.PostSend(wr); err != nil {
			return 0, err
		}
		if _, err := wait(ctx, a.scq, op); err != nil {
			return 0, err
		}
		return binary.NativeEndian.Uint64(a.buf[offAtomic:]), nil
	}
	old, err := atomicOp(verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 23}, verbs.WCFetchAdd)
	if err != nil {
		return fmt.Errorf("demo: FETCH_ADD: %w", err)
	}
	old2, err := atomicOp(verbs.SendWR{WRID: 5, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 123, Swap: 7}, verbs.WCCompSwap)
	if err != nil {
		return fmt.Errorf("demo: CMP_SWAP: %w", err)
	}
	if err := notify(ctx, a, b, "atomics done"); err != nil {
		return err
	}
	final := binary.NativeEndian.Uint64(b.buf[offAtomic:])
	if err := ok(old == 100 && old2 == 123 && final == 7, "atomics"); err != nil {
		return fmt.Errorf("%w (fetch-add returned %d, want 100; compare-and-swap returned %d, want 123; counter %d, want 7)", err, old, old2, final)
	}
	out.f("   FETCH_ADD  %s -> %s  counter 100 + 23: demo0 got the old value 100, the counter is now 123   ok\n", a.name, b.name)
	out.f("   CMP_SWAP   %s -> %s  if counter == 123 then 7: demo0 got 123 (it matched), the counter is now 7   ok\n", a.name, b.name)
	return nil
}

func bandwidth(ctx context.Context, out *printer, a *node, rm remote, d time.Duration) error {
	pattern(a.buf[:bwSize], 3)
	var wcs [bwDepth]verbs.WC
	post := func(i int) error {
		return a.qp.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, bwSize)}, RemoteAddr: rm.addr + uint64(i%(lossTotal/bwSize))*bwSize, RKey: rm.rkey})
	}
	start := time.Now()
	end := start.Add(d)
	posted, done := 0, 0
	for ; posted < bwDepth; posted++ {
		if err := post(posted); err != nil {
			return err
		}
	}
	for done < posted {
		n, err := a.scq.Poll(wcs[:])
		if err != nil {
			return err
		}
		if n == 0 {
			if _, err := wait(ctx, a.scq, verbs.WCRDMAWrite); err != nil {
				return fmt.Errorf("demo: bandwidth run: %w", err)
			}
			n = 0
			done++
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("demo: bandwidth run: %v", &wc)
			}
		}
		done += n
		for ; posted < done+bwDepth && time.Now().Before(end); posted++ {
			if err := post(posted); err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	mb := float64(done) * bwSize / 1e6 / el.Seconds()
	out.f("   RDMA WRITE  64 KiB   bandwidth  %8.1f MB/s  (%.2f Gb/s: %d writes in %.2f s, %d in flight)\n",
		mb, mb*8/1000, done, el.Seconds(), bwDepth)
	return nil
}

func latency(ctx context.Context, out *printer, a, b *node, iters int) error {
	// demo1 echoes every 64-byte message back; demo0 times each round trip.
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	echoErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := wait(ectx, b.rcq, verbs.WCRecv); err != nil {
				if ectx.Err() == nil {
					echoErr <- err
				}
				return
			}
			if err := b.postRecv(); err != nil {
				echoErr <- err
				return
			}
			if err := b.send(ectx, offRecv-latSize-64, latSize); err != nil {
				if ectx.Err() == nil {
					echoErr <- err
				}
				return
			}
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	rtts := make([]time.Duration, 0, iters)
	deadline := time.Now().Add(time.Second)
	off := offRecv - latSize - 64
	for i := 0; i < iters && time.Now().Before(deadline); i++ {
		t := time.Now()
		if err := a.send(ctx, off, latSize); err != nil {
			return fmt.Errorf("demo: latency run: %w", err)
		}
		if _, err := wait(ctx, a.rcq, verbs.WCRecv); err != nil {
			return fmt.Errorf("demo: latency run: %w", err)
		}
		rtts = append(rtts, time.Since(t))
		if err := a.postRecv(); err != nil {
			return err
		}
		select {
		case err := <-echoErr:
			return fmt.Errorf("demo: latency run, demo1: %w", err)
		default:
		}
	}
	slices.Sort(rtts)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	out.f("   SEND/RECV   64 B     round trip %8.1f µs median, %.1f µs at the 99th percentile  (%d round trips)\n",
		us(rtts[len(rtts)/2]), us(rtts[len(rtts)*99/100]), len(rtts))
	return nil
}

// shortenTimeout lowers qp's local ACK timeout: RDMA CM sets 2.1 s (rxe's
// 19), which would make each lost tail packet cost 2 s. The attribute can
// change only in SQD (ibv_modify_qp RTS → SQD → SQD → RTS).
func shortenTimeout(ctx context.Context, qp *verbs.QP, t uint8) error {
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.AttrState); err != nil {
		return err
	}
	for {
		err := qp.Modify(&verbs.QPAttr{State: verbs.QPSSQD, Timeout: t}, verbs.AttrState|verbs.AttrTimeout)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EBUSY) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Millisecond) // the send queue is still draining
	}
	return qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState)
}

// counters returns the recovery counters the loss part shows, by rxe's
// names: the requester's (demo0) then the responder's (demo1).
func counters(ca, cb *verbs.Counters) [5]uint64 {
	sa, sb := ca.Snapshot(), cb.Snapshot()
	return [5]uint64{sa["retrans_pkts"], sa["completer_retry_err"], sa["rcvd_seq_err"], sb["duplicate_request"], sb["out_of_seq_request"]}
}

// transportTimeout is the local ACK timeout attribute t as a duration.
func transportTimeout(t uint8) time.Duration { return 4096 * time.Nanosecond << t }

func lossRun(ctx context.Context, out *printer, a, b *node, rm remote, loss float64) error {
	out.f("\n4. The same kind of transfer through %.0f%% injected loss each way (a wrapper on each device's UDP link drops\n"+
		"   that share of the packets it sends, by a seeded random draw)\n", loss*100)
	if err := shortenTimeout(ctx, a.qp, fastTimout); err != nil {
		return fmt.Errorf("demo: setting the local ACK timeout: %w", err)
	}
	out.f("   (demo0's local ACK timeout lowered from RDMA CM's 2.1 s to %.1f ms, RTS -> SQD -> RTS, so a lost last\n"+
		"   packet costs milliseconds)\n", float64(transportTimeout(fastTimout).Microseconds())/1000)
	pattern(a.buf[:lossTotal], 4)
	ca, cb := a.dev.Counters(), b.dev.Counters()
	before := counters(ca, cb)
	a.loss.setLoss(loss)
	b.loss.setLoss(loss)
	t0 := time.Now()
	const n = lossTotal / bwSize
	for i := range n {
		if err := a.qp.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(i*bwSize, bwSize)}, RemoteAddr: rm.addr + uint64(i*bwSize), RKey: rm.rkey}); err != nil {
			return err
		}
	}
	for range n {
		if _, err := wait(ctx, a.scq, verbs.WCRDMAWrite); err != nil {
			return fmt.Errorf("demo: WRITE through loss: %w", err)
		}
	}
	if err := notify(ctx, a, b, "1 MiB written"); err != nil {
		return err
	}
	took := time.Since(t0)
	a.loss.setLoss(0)
	b.loss.setLoss(0)
	if !bytes.Equal(b.buf[:lossTotal], a.buf[:lossTotal]) {
		return errors.New("demo: WRITE through loss: data check FAILED: demo1's memory differs from what demo0 wrote")
	}
	dropped := a.loss.dropped.Load() + b.loss.dropped.Load()
	offered := a.loss.sent.Load() + b.loss.sent.Load()
	if dropped == 0 {
		return errors.New("demo: the loss wrapper dropped nothing")
	}
	after := counters(ca, cb)
	var dd [len(after)]uint64
	for i := range after {
		dd[i] = after[i] - before[i]
	}
	out.f("   RDMA WRITE  1 MiB (%d × 64 KiB) %s -> %s in %.0f ms: every byte arrived intact   ok\n", n, a.name, b.name, float64(took.Microseconds())/1000)
	out.f("   the links dropped %d of %d packets (%.1f%%); recovery, from the devices' counters:\n", dropped, offered, 100*float64(dropped)/float64(offered))
	out.f("     demo0 retrans_pkts %d (packets sent again), completer_retry_err %d (go-back-N restarts), rcvd_seq_err %d (NAKs heard)\n", dd[0], dd[1], dd[2])
	out.f("     demo1 out_of_seq_request %d (gaps seen), duplicate_request %d (copies already had)\n", dd[4], dd[3])
	return nil
}
