package bench_test

// goroce over the same veth: two host devices (host.Open, as `roce link
// add` and an application would), one RC QP each, path MTU 4096, RoCE v2
// over IPv4, with the UDP link in its privileged mode (AF_PACKET receive,
// every ICRC verified over the real IP header) and its unprivileged mode
// (UDP socket receive, the IPv4 ID solved for).

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

var linkModes = []string{"privileged", "unprivileged"}

// roceModes are the devices the engine's benchmarks run on: a RoCE v2
// device's link/udp, privileged and not, and RoCE v1 on a device of both
// versions (roce link add's default), whose link is link/afpacket (raw
// Ethernet, root only).
var roceModes = append(linkModes, "v1")

// BenchmarkRCWrite64K: RC RDMA WRITE of 64 KiB messages on one QP, 16
// WRs in flight (every one signaled; the window is refilled as completions
// arrive), path MTU 4096. x-udp-best is MB/s over the fastest raw-UDP mode
// of the run (the goal is ≥ 0.75).
func BenchmarkRCWrite64K(b *testing.B) {
	ha, hb := newVeth(b)
	for _, mode := range roceModes {
		b.Run(mode, func(b *testing.B) {
			p := openRoCE(b, ha, hb, mode, 0, verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
			benchRCWrite(b, p, ha, hb)
		})
	}
}

// BenchmarkRCSendRecvRTT64: a 64-byte SEND from A to B, then one from B to
// A, each side on its own goroutine waiting in CQ.PollWait; ns/op is one
// round trip (4 packets: two SENDs, two ACKs). Each side reposts its
// receive before it sends, so no RNR NAK happens; sends are unsignaled.
// wait: the links sleep in the netpoller between packets (the default);
// busypoll: they poll their sockets for 50µs after each packet
// (udp.Link.SetBusyPoll). x-udp-busypoll is the ratio to the busy-polled
// UDP round trip. cqpoll: the links wait in the netpoller, and each side
// busy-polls its CQ instead of waiting in PollWait (CQ.Poll in a loop that
// yields with runtime.Gosched but never sleeps), as perftest and roce perf
// do by default. The floors (bench/run.sh's "× floor") are
// UDPRoundTrip64/busypoll+ack for busypoll and cqpoll, and
// UDPRoundTrip64/netpoll+ack for wait.
func BenchmarkRCSendRecvRTT64(b *testing.B) {
	ha, hb := newVeth(b)
	for _, mode := range roceModes {
		for _, poll := range []string{"wait", "busypoll", "cqpoll"} {
			if mode == "v1" && poll == "busypoll" {
				continue // link/udp's busy poll: the raw link has none
			}
			b.Run(mode+"/"+poll, func(b *testing.B) {
				var bp time.Duration
				if poll == "busypoll" {
					bp = 50 * time.Microsecond
				}
				p := openRoCE(b, ha, hb, mode, bp, verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
				benchRCRTT(b, p, ha, hb, poll == "cqpoll")
			})
		}
	}
}

// spinPoll busy-polls cq for one completion, as perftest does: it never
// sleeps, and yields the P between polls.
func spinPoll(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
	for spins := 0; ; spins++ {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if spins&1023 == 1023 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		runtime.Gosched()
	}
}

// rocePair is two host devices on the veth with a connected RC QP each.
type rocePair struct {
	dev      [2]*host.Device
	pd       [2]*verbs.PD
	scq, rcq [2]*verbs.CQ
	qp       [2]*verbs.QP
	ip       [2]netip.Addr // each device's IPv4 address as a GID
	sgid     [2]int        // each device's GID index of ip, RoCE v2
}

var devSeq int

// openRoCE opens a device on each end of the veth (a registry in a
// temporary directory), with an RC QP each, connected at path MTU 4096;
// busyPoll > 0 sets the links' busy-poll time. Everything is closed when the
// calling benchmark returns.
func openRoCE(b *testing.B, ha, hb *nettest.Host, mode string, busyPoll time.Duration, qcap verbs.QPCap) *rocePair {
	b.Helper()
	p := openDevices(b, ha, hb, mode, busyPoll)
	for i := range 2 {
		var err error
		if p.qp[i], err = p.pd[i].CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: p.scq[i], RecvCQ: p.rcq[i], Cap: qcap}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2 {
		if err := p.connect(p.qp[i], p.qp[1-i].Num(), i); err != nil {
			b.Fatal(err)
		}
	}
	return p
}

// openDevices opens a device on each end of the veth (a registry in a
// temporary directory) with a PD and a send and a receive CQ of 4096
// entries each, and finds each device's GID of its IPv4 address (RoCE v1
// in mode "v1", else v2); busyPoll > 0 sets the links' busy-poll time.
// Everything is closed when the calling benchmark returns.
func openDevices(b *testing.B, ha, hb *nettest.Host, mode string, busyPoll time.Duration) *rocePair {
	b.Helper()
	dir := b.TempDir()
	reg := host.NewRegistry(dir)
	p := &rocePair{}
	devSeq++
	for i, h := range []*nettest.Host{ha, hb} {
		name := fmt.Sprintf("bench%d_%d", devSeq, i)
		err := h.Do(func() error {
			ns, err := host.CurrentNetns()
			if err != nil {
				return err
			}
			v := host.VersionsV2
			if mode == "v1" {
				v = host.VersionsBoth
			}
			return reg.Add(host.DeviceDef{Name: name, Type: "rxe", Netdev: h.Ifname, Netns: ns, Versions: v})
		})
		if err != nil {
			b.Fatal(err)
		}
		d, err := host.Open(name, host.Options{RunDir: dir, Unprivileged: mode == "unprivileged", Wrap: func(l link.Link) link.Link {
			switch l := l.(type) {
			case *udp.Link:
				l.SetBusyPoll(busyPoll)
			case *afpacket.Link:
				if mode != "v1" {
					b.Errorf("mode %s: the device's link is a %T", mode, l)
				}
			default:
				b.Errorf("the device's link is a %T", l)
			}
			return l
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { d.Close() })
		p.setSide(b, i, d)
	}
	p.ip = [2]netip.Addr{v4GID(ha), v4GID(hb)}
	for i := range 2 {
		t := verbs.GIDTypeRoCEv2
		if mode == "v1" {
			t = verbs.GIDTypeRoCEv1
		}
		p.sgid[i] = gidIndexOf(b, p.dev[i], p.ip[i], t)
	}
	if p.dev[0].Link().MTU() < pmtu {
		b.Fatalf("link MTU %d", p.dev[0].Link().MTU())
	}
	return p
}

// setSide makes d side i of p, with a PD and a send and a receive CQ of
// 4096 entries.
func (p *rocePair) setSide(b *testing.B, i int, d *host.Device) {
	b.Helper()
	p.dev[i] = d
	var err error
	if p.pd[i], err = d.AllocPD(); err != nil {
		b.Fatal(err)
	}
	if p.scq[i], err = d.CreateCQ(4096); err != nil {
		b.Fatal(err)
	}
	if p.rcq[i], err = d.CreateCQ(4096); err != nil {
		b.Fatal(err)
	}
}

// v4GID is h's IPv4 address as a GID.
func v4GID(h *nettest.Host) netip.Addr { return netip.AddrFrom16(h.IPv4.As16()) }

// gidIndex is the index of d's RoCE v2 GID gid.
func gidIndex(b *testing.B, d *host.Device, gid netip.Addr) int {
	return gidIndexOf(b, d, gid, verbs.GIDTypeRoCEv2)
}

// gidIndexOf is the index of d's GID gid of type t.
func gidIndexOf(b *testing.B, d *host.Device, gid netip.Addr, t verbs.GIDType) int {
	b.Helper()
	for k, e := range d.GIDs() {
		if e.GID == gid && e.Type == t {
			return k
		}
	}
	b.Fatalf("%s has no %v GID %v", d.Def.Name, t, gid)
	return -1
}

// connect takes qp, on side i, to RTS toward QP rqpn on the other side, at
// path MTU 4096 (verbstest.ConnectQP: INIT, RTR, RTS with modify_qp).
func (p *rocePair) connect(qp *verbs.QP, rqpn uint32, i int) error {
	return verbstest.ConnectQP(qp, rqpn, p.ip[1-i], uint8(p.sgid[i]), verbstest.Options{MTU: verbs.MTU4096})
}

// counters sums a counter over both devices.
func (p *rocePair) counter(name string) uint64 {
	var v uint64
	for _, d := range p.dev {
		v += d.Counters().Snapshot()[name]
	}
	return v
}

// linkDrops sums both links' receive drops (bad ICRC, malformed).
func (p *rocePair) linkDrops() (icrc, malformed uint64) {
	for _, d := range p.dev {
		s := d.Link().Stats()
		icrc += s.RxBadICRC.Load()
		malformed += s.RxMalformed.Load()
	}
	return
}

func benchRCWrite(b *testing.B, p *rocePair, ha, hb *nettest.Host) {
	w := newWriteLoop(b, p)
	sent0, re0 := p.counter("sent_pkts"), p.counter("retrans_pkts")
	icrc0, mal0 := p.linkDrops()
	b.SetBytes(msgSize)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := w.run(b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	r := record(b, msgSize, cpu)
	sent, re := p.counter("sent_pkts")-sent0, p.counter("retrans_pkts")-re0
	icrc, mal := p.linkDrops()
	b.ReportMetric(float64(sent)/float64(b.N), "pkts/op")
	b.ReportMetric(float64(re)/float64(b.N), "retrans/op")
	if icrc != icrc0 || mal != mal0 {
		b.Errorf("link drops: %d bad ICRC, %d malformed", icrc-icrc0, mal-mal0)
	}
	if floor, _, _, _ := median(nameUDPThroughput+"/"+floorMode, mbps); floor > 0 {
		b.ReportMetric(r.mbps/floor, "x-roce-floor") // when the run measured it
	}
	if _, best := bestUDP(b, ha, hb); best > 0 {
		b.ReportMetric(r.mbps/best, "x-udp-best")
	}
}

// writeLoop is RCWrite64K's traffic: 64 KiB RDMA WRITEs from p's QP on A
// to B's memory, window WRs in flight, every one signaled, the window
// refilled as PollWait returns completions.
type writeLoop struct {
	ctx  context.Context
	qp   *verbs.QP
	cq   *verbs.CQ
	wrs  []verbs.SendWR
	wcs  []verbs.WC
	spin bool // busy-poll the CQ (spinPoll), as perftest does, not PollWait
}

// newWriteLoop registers the memory on both sides and sends one write
// first (neighbour resolution and the first ACK, outside any timing).
func newWriteLoop(b *testing.B, p *rocePair) *writeLoop {
	b.Helper()
	src, dst := make([]byte, msgSize*window), make([]byte, msgSize*window)
	for i := range src {
		src[i] = byte(i)
	}
	mrA, err := p.pd[0].RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	mrB, err := p.pd[1].RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	w := &writeLoop{ctx: ctx, qp: p.qp[0], cq: p.scq[0], wrs: make([]verbs.SendWR, window), wcs: make([]verbs.WC, window)}
	for i := range w.wrs {
		w.wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mrA.SGE(i*msgSize, msgSize)}, RemoteAddr: mrB.Addr() + uint64(i*msgSize), RKey: mrB.RKey()}
	}
	if err := w.qp.PostSend(w.wrs[0]); err != nil {
		b.Fatal(err)
	}
	if _, err := w.cq.PollWait(ctx, w.wcs[:1]); err != nil || w.wcs[0].Status != verbs.WCSuccess {
		b.Fatalf("warm-up write: %v %v", err, &w.wcs[0])
	}
	return w
}

// run writes n messages and takes their completions.
func (w *writeLoop) run(n int) error {
	posted, done := 0, 0
	for done < n {
		if k := min(n-posted, window-(posted-done)); k > 0 {
			first := posted % window
			var err error
			if first+k <= window {
				err = w.qp.PostSend(w.wrs[first : first+k]...)
			} else {
				err = w.qp.PostSend(w.wrs[first:]...)
				if err == nil {
					err = w.qp.PostSend(w.wrs[:first+k-window]...)
				}
			}
			if err != nil {
				return err
			}
			posted += k
		}
		var k int
		var err error
		if w.spin {
			k, err = spinPoll(w.ctx, w.cq, w.wcs)
		} else {
			k, err = w.cq.PollWait(w.ctx, w.wcs)
		}
		if err != nil {
			return err
		}
		for i := range w.wcs[:k] {
			if w.wcs[i].Status != verbs.WCSuccess {
				return fmt.Errorf("completion %v", &w.wcs[i])
			}
		}
		done += k
	}
	return nil
}

func benchRCRTT(b *testing.B, p *rocePair, ha, hb *nettest.Host, spin bool) {
	type end struct {
		qp   *verbs.QP
		rcq  *verbs.CQ
		send verbs.SendWR
		recv verbs.RecvWR
		wc   [1]verbs.WC
	}
	var ends [2]end
	for i := range ends {
		buf := make([]byte, 2*rttSize)
		mr, err := p.pd[i].RegMR(buf, verbs.AccessLocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		ends[i] = end{qp: p.qp[i], rcq: p.rcq[i],
			send: verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, rttSize)}},
			recv: verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{mr.SGE(rttSize, rttSize)}}}
		if err := p.qp[i].PostRecv(ends[i].recv); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// await takes one receive completion and reposts the receive.
	wait := pollWait
	if spin {
		wait = spinPoll
	}
	await := func(e *end) error {
		if _, err := wait(ctx, e.rcq, e.wc[:]); err != nil {
			return err
		}
		if wc := &e.wc[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != rttSize {
			return fmt.Errorf("receive %v", wc)
		}
		return e.qp.PostRecv(e.recv)
	}
	iters := make(chan int, 1)
	done := make(chan error, 1)
	go func() { // B: echo
		for n := range iters {
			for range n {
				if err := await(&ends[1]); err != nil {
					done <- err
					return
				}
				if err := ends[1].qp.PostSend(ends[1].send); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}
	}()
	defer close(iters)
	run := func(n int) {
		iters <- n
		for range n {
			if err := ends[0].qp.PostSend(ends[0].send); err != nil {
				b.Fatal(err)
			}
			if err := await(&ends[0]); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	run(10) // warm up
	sent0 := p.counter("sent_pkts")
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	run(b.N)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	r := record(b, 0, cpu)
	b.ReportMetric(float64(p.counter("sent_pkts")-sent0)/float64(b.N), "pkts/op")
	if base := busyPollRTT(b, ha, hb); base > 0 {
		b.ReportMetric(r.ns/base, "x-udp-busypoll")
	}
}

// pollWait is CQ.PollWait as a function of the CQ.
func pollWait(ctx context.Context, cq *verbs.CQ, wc []verbs.WC) (int, error) {
	return cq.PollWait(ctx, wc)
}

// BenchmarkLinkRoundTrip64: the UDP link alone, without the engine: a
// 64-byte SEND_ONLY transport packet from A's link to B's and back, each
// side on its own goroutine calling Send and Recv. Between
// UDPRoundTrip64/netpoll (the same sockets' cost with nothing on top) and
// RCSendRecvRTT64/*/wait (the engine and its ACKs on top), it tells the
// link's share of the round trip from the engine's.
//
// wait: the links sleep in the netpoller; busypoll: they poll for 50µs.
func BenchmarkLinkRoundTrip64(b *testing.B) {
	ha, hb := newVeth(b)
	for _, mode := range linkModes {
		for _, poll := range []string{"wait", "busypoll"} {
			b.Run(mode+"/"+poll, func(b *testing.B) { benchLinkRTT(b, ha, hb, mode, poll == "busypoll") })
		}
	}
}

func benchLinkRTT(b *testing.B, ha, hb *nettest.Host, mode string, busyPoll bool) {
	var l [2]*udp.Link
	for i, h := range []*nettest.Host{ha, hb} {
		err := h.Do(func() (err error) {
			cfg := udp.Config{Addrs: []netip.Addr{h.IPv4}, MTU: vethMTU - 48}
			if mode == "privileged" {
				cfg.Ifindex = h.Ifindex
			}
			if busyPoll {
				cfg.BusyPoll = 50 * time.Microsecond
			}
			l[i], err = udp.New(cfg)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		defer l[i].Close()
	}
	ga, gb := netip.AddrFrom16(ha.IPv4.As16()), netip.AddrFrom16(hb.IPv4.As16())
	mk := func(from, to netip.Addr) []link.Packet {
		pk := linktest.TransportPacket(link.FrameHeadroom, 0x11, 1, make([]byte, rttSize))
		pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: from, DstGID: to, HopLimit: 64}
		return []link.Packet{pk}
	}
	done := make(chan error, 1)
	go func() { // B echoes until its link closes
		bufs := linktest.NewBuffers(l[1].BatchSize())
		reply := mk(gb, ga)
		for {
			if _, err := l[1].Recv(bufs); err != nil {
				done <- nil
				return
			}
			if _, err := l[1].Send(reply); err != nil {
				done <- err
				return
			}
		}
	}()
	ping := mk(ga, gb)
	bufs := linktest.NewBuffers(l[0].BatchSize())
	rt := func() {
		if _, err := l[0].Send(ping); err != nil {
			b.Fatal(err)
		}
		if _, err := l[0].Recv(bufs); err != nil {
			b.Fatal(err)
		}
	}
	for range 10 {
		rt()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for range b.N {
		rt()
	}
	b.StopTimer()
	record(b, 0, cpuTime()-cpu0)
	l[1].Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
