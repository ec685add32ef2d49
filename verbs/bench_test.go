//go:build unix

package verbs_test

// Benchmarks of the engine over the in-memory fabric, and of the fabric
// alone as the in-run baseline: the engine's cost is the ratio of
// BenchmarkRCWrite64K to BenchmarkFabricRaw, which move the same 64 KiB
// payloads in the same 4096-byte packets. No timing is asserted.
//
//	go test -run='^$' -bench=. -benchmem -count=3 ./verbs/
//
// allocs/pkt is heap allocations (runtime.MemStats.Mallocs, whole process)
// per packet sent (both devices' sent_pkts, or the raw packets), measured
// over the timed loop; pkts/op is packets per operation; cpu-ns/op is the
// process's CPU time (user + system, every goroutine) per operation, which
// other load on the machine disturbs far less than ns/op.

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

const (
	benchMsg    = 64 << 10 // bytes per operation
	benchMTU    = 4096     // bytes per packet
	benchWindow = 32       // outstanding operations
)

// benchMeter measures heap allocations, packets and CPU time over a timed loop.
type benchMeter struct {
	ms      runtime.MemStats
	mallocs uint64
	pkts    func() uint64
	pkts0   uint64
	cpu0    time.Duration
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (m *benchMeter) start(pkts func() uint64) {
	m.pkts = pkts
	runtime.ReadMemStats(&m.ms)
	m.mallocs, m.pkts0 = m.ms.Mallocs, pkts()
	m.cpu0 = cpuTime()
}

// stop reports allocs/pkt, pkts/op and cpu-ns/op.
func (m *benchMeter) stop(b *testing.B) {
	cpu := cpuTime() - m.cpu0
	runtime.ReadMemStats(&m.ms)
	allocs, pkts := m.ms.Mallocs-m.mallocs, m.pkts()-m.pkts0
	if pkts > 0 {
		b.ReportMetric(float64(allocs)/float64(pkts), "allocs/pkt")
		b.ReportMetric(float64(pkts)/float64(b.N), "pkts/op")
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// sentPkts returns a function summing both devices' sent_pkts.
func sentPkts(p *verbstest.Pair) func() uint64 {
	return func() uint64 {
		return counterOf(p.A.Dev.Counters(), "sent_pkts") + counterOf(p.B.Dev.Counters(), "sent_pkts")
	}
}

// BenchmarkRCWrite64K: RC RDMA WRITE throughput of 64 KiB messages on one
// QP, path MTU 4096, benchWindow WRs outstanding, every WR signaled.
func BenchmarkRCWrite64K(b *testing.B) {
	p := verbstest.NewPair(b, verbstest.Options{MTU: verbs.MTU4096,
		Cap: verbs.QPCap{MaxSendWR: benchWindow, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	src, dst := make([]byte, benchMsg*benchWindow), make([]byte, benchMsg*benchWindow)
	for i := range src {
		src[i] = byte(i)
	}
	mrA, err := p.A.PD.RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	mrB, err := p.B.PD.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	wrs := make([]verbs.SendWR, benchWindow)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{mrA.SGE(i*benchMsg, benchMsg)}, RemoteAddr: mrB.Addr() + uint64(i*benchMsg), RKey: mrB.RKey()}
	}
	ctx := context.Background()
	wcs := make([]verbs.WC, benchWindow)
	var m benchMeter
	b.SetBytes(benchMsg)
	b.ReportAllocs()
	b.ResetTimer()
	m.start(sentPkts(p))
	posted, done := 0, 0
	for done < b.N {
		// Refill the window in one post: the slots of the WRs completed.
		if k := min(b.N-posted, benchWindow-(posted-done)); k > 0 {
			first := posted % benchWindow
			if first+k <= benchWindow {
				err = p.A.QP.PostSend(wrs[first : first+k]...)
			} else {
				err = p.A.QP.PostSend(wrs[first:]...)
				if err == nil {
					err = p.A.QP.PostSend(wrs[:first+k-benchWindow]...)
				}
			}
			if err != nil {
				b.Fatal(err)
			}
			posted += k
		}
		n, err := p.A.CQ.PollWait(ctx, wcs)
		if err != nil {
			b.Fatal(err)
		}
		for i := range wcs[:n] {
			if wcs[i].Status != verbs.WCSuccess {
				b.Fatalf("completion %v", &wcs[i])
			}
		}
		done += n
	}
	b.StopTimer()
	m.stop(b)
}

// BenchmarkSendRecvRTT64: a 64-byte SEND from A to B, then one from B to
// A, each received before the next is sent; ns/op is one round trip
// (4 packets: two SENDs, two ACKs). Sends are unsignaled; each side
// reposts its receive before the peer can send again.
func BenchmarkSendRecvRTT64(b *testing.B) {
	const size = 64
	p := verbstest.NewPair(b, verbstest.Options{
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	type end struct {
		side *verbstest.Side
		send verbs.SendWR
		recv verbs.RecvWR
	}
	var ends [2]end
	for i, s := range []*verbstest.Side{&p.A, &p.B} {
		buf := make([]byte, 2*size)
		mr, err := s.PD.RegMR(buf, verbs.AccessLocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		ends[i] = end{side: s,
			send: verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, size)}},
			recv: verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{mr.SGE(size, size)}}}
		if err := s.QP.PostRecv(ends[i].recv); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	var wc [1]verbs.WC
	var m benchMeter
	b.ReportAllocs()
	b.ResetTimer()
	m.start(sentPkts(p))
	for i := 0; i < b.N; i++ {
		for j := range ends {
			from, to := &ends[j], &ends[1-j]
			if err := from.side.QP.PostSend(from.send); err != nil {
				b.Fatal(err)
			}
			if _, err := to.side.RCQ.PollWait(ctx, wc[:]); err != nil {
				b.Fatal(err)
			}
			if wc[0].Status != verbs.WCSuccess || wc[0].ByteLen != size {
				b.Fatalf("receive %v", &wc[0])
			}
			if err := to.side.QP.PostRecv(to.recv); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	m.stop(b)
}

// BenchmarkFabricRaw: the baseline. The same 64 KiB per operation, as 16
// RC SEND packets of 4096 bytes, through two fabric ports with link.Send
// and link.Recv and no engine: encapsulation, ICRC, the switch's copy,
// decapsulation and ICRC check. A receiver goroutine returns a credit per
// operation, so benchWindow operations are in flight, as in
// BenchmarkRCWrite64K.
func BenchmarkFabricRaw(b *testing.B) {
	const per = benchMsg / benchMTU
	f := fabric.New()
	defer f.Close()
	gids := verbstest.GIDs(verbstest.NetV2IPv4)
	pa, err := f.AddPort(fabric.PortConfig{Name: "a", GIDs: []netip.Addr{gids[0].GID}})
	if err != nil {
		b.Fatal(err)
	}
	pb, err := f.AddPort(fabric.PortConfig{Name: "b", GIDs: []netip.Addr{gids[1].GID}})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, benchMTU)
	for i := range payload {
		payload[i] = byte(i)
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: gids[0].GID, DstGID: gids[1].GID, HopLimit: 64, UDPSrcPort: wire.UDSport(0x11)}
	pkts := make([]link.Packet, per)
	for i := range pkts {
		pkts[i] = linktest.TransportPacket(pa.Headroom(), 0x11, wire.PSN(i), payload)
		pkts[i].Addr = addr
	}
	credits := make(chan struct{}, benchWindow)
	for range benchWindow {
		credits <- struct{}{}
	}
	recvDone := make(chan error, 1)
	go func() {
		bufs := linktest.NewBuffers(pb.BatchSize())
		got := 0
		for {
			n, err := pb.Recv(bufs)
			if err != nil {
				recvDone <- nil
				return
			}
			for i := range bufs[:n] {
				if bufs[i].Len != len(pkts[0].Transport()) {
					recvDone <- errBenchLen
					return
				}
			}
			for got += n; got >= per; got -= per {
				credits <- struct{}{}
			}
		}
	}()
	var m benchMeter
	var sent uint64
	b.SetBytes(benchMsg)
	b.ReportAllocs()
	b.ResetTimer()
	m.start(func() uint64 { return sent })
	for i := 0; i < b.N; i++ {
		<-credits
		n, err := pa.Send(pkts)
		if err != nil || n != per {
			b.Fatalf("Send = %d, %v", n, err)
		}
		sent += uint64(n)
	}
	for range benchWindow {
		<-credits // all delivered
	}
	b.StopTimer()
	m.stop(b)
	pb.Close()
	if err := <-recvDone; err != nil {
		b.Fatal(err)
	}
	if q := pa.FaultStats().QueueFull.Load(); q != 0 {
		b.Fatalf("%d frames dropped on a full queue", q)
	}
}

var errBenchLen = errors.New("received packet of the wrong length")
