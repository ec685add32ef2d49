package bench_test

// rsocket (package rsocket) over the same veth as the RC benchmarks, beside
// goroce's own RC WRITE and SEND/RECV round trip and the kernel's TCP, each
// round measuring all of them one after another (paired rounds: -count N
// runs N rounds).

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/verbs"
)

// BenchmarkRsocket: per round, in this order:
//
//   - RCWrite64K: goroce's RC RDMA WRITE of 64 KiB (as BenchmarkRCWrite64K,
//     privileged link), the reference for the stream;
//   - RCWriteImm64K: the same with RDMA WRITE WITH IMMEDIATE, as the
//     stream's messages are, the receiver polling its completions and
//     reposting its receives: what the stream's messages cost at the
//     verbs layer, without the stream's copies and credits;
//   - RCWriteImm64Kminus4: the same with messages 4 bytes short of 64 KiB,
//     whose LAST packet, ImmDt included, is no longer than a MIDDLE: two
//     GSO messages per WRITE WITH IMMEDIATE, as an RDMA WRITE of 64 KiB,
//     instead of three (the FIRST, the MIDDLEs, the LAST alone); so
//     RCWriteImm64K ÷ RCWriteImm64Kminus4 is what the third message costs
//     goroce, and RCWriteImm64Kminus4 ÷ RCWrite64K what consuming a
//     receive and completing it costs;
//   - UDPFloor64K and UDPFloorImm64K: BenchmarkUDPThroughput's floor
//     (RoCE's copies and CRCs by hand over raw UDP, no engine) with the
//     datagrams of each 64 KiB grouped as a WRITE's (two GSO messages)
//     and as a WRITE WITH IMMEDIATE's (three): what the third message
//     costs the kernel alone (x-floor);
//   - Stream64K: an rsocket stream fed with 64 KiB Writes, read on the
//     other side (rstream's buffers: SO_SNDBUF and SO_RCVBUF 512 KiB, rings
//     of 1 MiB); MB/s of payload;
//   - Stream64KBuf1M: the same with SO_SNDBUF and SO_RCVBUF 1 MiB, rings
//     of 2 MiB: per-half-ring costs (an RS_OP_SGL and its ACK, the
//     writer's wait for the freed half) over twice the bytes;
//   - TCPStream64K: the same over a TCP connection on the veth;
//   - RCSendRecvRTT64: goroce's 64-byte SEND/RECV round trip (as
//     BenchmarkRCSendRecvRTT64/privileged/wait), the reference for
//     request/response;
//   - RequestResponse64: a 64-byte Write and a 64-byte response read back,
//     over rsocket (the peer echoes);
//   - TCPRequestResponse64: the same over TCP.
//
// x-rc-write and x-rc-rtt are the ratios to the round's RC figures (the
// goals: stream ≥ 0.8× RC WRITE, request/response ≤ 1.3× SEND/RECV).
func BenchmarkRsocket(b *testing.B) {
	ha, hb := newVeth(b)
	var rcWrite, rcRTT float64
	b.Run("RCWrite64K", func(b *testing.B) {
		label("RCWrite64K")
		p := openRoCE(b, ha, hb, "privileged", 0, verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
		benchRCWrite(b, p, ha, hb)
		rcWrite = lastResult(b).mbps
	})
	b.Run("RCWriteImm64K", func(b *testing.B) {
		label("RCWriteImm64K")
		p := openRoCE(b, ha, hb, "privileged", 0, verbs.QPCap{MaxSendWR: window, MaxRecvWR: immRecvs, MaxSendSGE: 1, MaxRecvSGE: 1})
		r := benchRCWriteImm(b, p, msgSize)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("RCWriteImm64Kminus4", func(b *testing.B) {
		label("RCWriteImm64Kminus4")
		p := openRoCE(b, ha, hb, "privileged", 0, verbs.QPCap{MaxSendWR: window, MaxRecvWR: immRecvs, MaxSendSGE: 1, MaxRecvSGE: 1})
		r := benchRCWriteImm(b, p, msgSize-4)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	var floor float64
	b.Run("UDPFloor64K", func(b *testing.B) {
		label("UDPFloor64K")
		benchUDPThroughput(b, ha, hb, floorMode, basePort+300)
		floor = lastResult(b).mbps
	})
	b.Run("UDPFloorImm64K", func(b *testing.B) {
		label("UDPFloorImm64K")
		benchUDPThroughput(b, ha, hb, floorImmMode, basePort+301)
		if floor > 0 {
			b.ReportMetric(lastResult(b).mbps/floor, "x-floor")
		}
	})
	b.Run("Stream64K", func(b *testing.B) {
		label("Stream64K")
		ca, cb, p := rsocketPair(b, ha, hb, rstreamBuf)
		r := benchStream(b, ca, cb, p)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("Stream64KBuf1M", func(b *testing.B) {
		label("Stream64KBuf1M")
		ca, cb, p := rsocketPair(b, ha, hb, 1<<20)
		r := benchStream(b, ca, cb, p)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("TCPStream64K", func(b *testing.B) {
		label("TCPStream64K")
		ca, cb := tcpPair(b, ha, hb)
		r := benchStream(b, ca, cb, nil)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("RCSendRecvRTT64", func(b *testing.B) {
		p := openRoCE(b, ha, hb, "privileged", 0, verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		benchRCRTT(b, p, ha, hb, false)
		rcRTT = lastResult(b).ns
	})
	b.Run("RequestResponse64", func(b *testing.B) {
		ca, cb, _ := rsocketPair(b, ha, hb, rstreamBuf)
		r := benchReqResp(b, ca, cb)
		if rcRTT > 0 {
			b.ReportMetric(r.ns/rcRTT, "x-rc-rtt")
		}
	})
	b.Run("TCPRequestResponse64", func(b *testing.B) {
		ca, cb := tcpPair(b, ha, hb)
		r := benchReqResp(b, ca, cb)
		if rcRTT > 0 {
			b.ReportMetric(r.ns/rcRTT, "x-rc-rtt")
		}
	})
}

// label marks the calling goroutine, and the goroutines it starts (the
// devices' own among them), with the sub-benchmark's name, so that one
// -cpuprofile of BenchmarkRsocket separates them: go tool pprof
// -tagfocus bench=RCWriteImm64K.
func label(name string) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("bench", name)))
}

// lastResult is the result record stored last for b.
func lastResult(b *testing.B) result {
	results.mu.Lock()
	defer results.mu.Unlock()
	rs := results.runs[b.Name()]
	if len(rs) == 0 {
		return result{}
	}
	return rs[len(rs)-1]
}

// rstreamBuf is what rstream sets SO_SNDBUF and SO_RCVBUF to unless told
// (-B): 512 KiB.
const rstreamBuf = 1 << 19

// rsocketPair connects an rsocket from a device on ha to one on hb, each
// with its own CM, SO_SNDBUF and SO_RCVBUF buf bytes (rings of twice
// that); p has the devices, for their counters.
func rsocketPair(b *testing.B, ha, hb *nettest.Host, buf int) (ca, cb net.Conn, p *rocePair) {
	b.Helper()
	p = openDevices(b, ha, hb, "privileged", 0)
	var cms [2]*rdmacm.CM
	for i := range 2 {
		cms[i] = rdmacm.New(rdmacm.Options{})
		if err := cms[i].AddDevice(p.dev[i].Device); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cms[i].Close() })
	}
	o := rsocket.Options{ReadBuffer: buf, WriteBuffer: buf}
	lc := rsocket.ListenConfig{CM: cms[1], Options: o}
	l, err := lc.Listen(context.Background(), "rsocket", netip.AddrPortFrom(hb.IPv4, 7471).String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acc := make(chan *rsocket.Conn, 1)
	go func() {
		c, _ := l.AcceptContext(ctx)
		acc <- c
	}()
	d := rsocket.Dialer{CM: cms[0], Options: o}
	a, err := d.Dial(ctx, "rsocket", l.AddrPort().String())
	if err != nil {
		b.Fatal(err)
	}
	c := <-acc
	if c == nil {
		b.Fatal("no connection accepted")
	}
	b.Cleanup(func() { a.Close(); c.Close() })
	return a, c, p
}

// tcpPair connects TCP across the veth: the listener in hb's namespace,
// the client in ha's; kernel defaults but the buffers rstream sets
// (512 KiB).
func tcpPair(b *testing.B, ha, hb *nettest.Host) (net.Conn, net.Conn) {
	b.Helper()
	var ln net.Listener
	if err := hb.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(hb.IPv4, 0).String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	var ca net.Conn
	if err := ha.Do(func() (err error) {
		ca, err = net.Dial("tcp", ln.Addr().String())
		return err
	}); err != nil {
		b.Fatal(err)
	}
	cb := <-acc
	if cb == nil {
		b.Fatal("no connection accepted")
	}
	for _, c := range []net.Conn{ca, cb} {
		tc := c.(*net.TCPConn)
		tc.SetReadBuffer(1 << 19)
		tc.SetWriteBuffer(1 << 19)
	}
	b.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

// benchStream writes b.N × 64 KiB on ca and reads them on cb; with p (an
// rsocket pair's devices) it reports the packets per 64 KiB, both
// directions (16 are data at path MTU 4096; the rest are ACKs and credits),
// and the retransmissions.
func benchStream(b *testing.B, ca, cb net.Conn, p *rocePair) result {
	buf := make([]byte, msgSize)
	run := func(n int) error {
		done := make(chan error, 1)
		go func() {
			// Reads of 64 KiB, as the Writes: not io.Copy to io.Discard,
			// whose ReadFrom reads 8 KiB at a time.
			rb := make([]byte, msgSize)
			for left := n * msgSize; left > 0; {
				k, err := cb.Read(rb[:min(len(rb), left)])
				if err != nil {
					done <- err
					return
				}
				left -= k
			}
			done <- nil
		}()
		for range n {
			if _, err := ca.Write(buf); err != nil {
				return err
			}
		}
		return <-done
	}
	if err := run(16); err != nil { // warm up
		b.Fatal(err)
	}
	var sent0, re0 uint64
	if p != nil {
		sent0, re0 = p.counter("sent_pkts"), p.counter("retrans_pkts")
	}
	b.SetBytes(msgSize)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	r := record(b, msgSize, cpuTime()-cpu0)
	if p != nil {
		b.ReportMetric(float64(p.counter("sent_pkts")-sent0)/float64(b.N), "pkts/op")
		b.ReportMetric(float64(p.counter("retrans_pkts")-re0)/float64(b.N), "retrans/op")
	}
	return r
}

// benchReqResp sends a 64-byte request on ca and reads the 64-byte
// response cb echoes, b.N times.
func benchReqResp(b *testing.B, ca, cb net.Conn) result {
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, rttSize)
		for {
			if _, err := io.ReadFull(cb, buf); err != nil {
				done <- nil
				return
			}
			if _, err := cb.Write(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	buf := make([]byte, rttSize)
	rt := func() {
		if _, err := ca.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(ca, buf); err != nil {
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
	r := record(b, 0, cpuTime()-cpu0)
	ca.Close()
	if err := <-done; err != nil {
		b.Fatal(fmt.Errorf("echo: %w", err))
	}
	return r
}

// immRecvs receives are posted for RCWriteImm64K: far more than the
// WRITEs in flight, so the receiver's poller, reposting as it goes, never
// leaves the requester an RNR NAK (retrans/op would show one).
const immRecvs = 1024

// benchRCWriteImm is benchRCWrite with RDMA WRITE WITH IMMEDIATE (16 in
// flight): each message also consumes a receive on the responder, whose
// completion a goroutine there polls, reposting the receive, as an
// rsocket reader's would be. The time runs until the receiver has seen
// the last message.
func benchRCWriteImm(b *testing.B, p *rocePair, size int) result {
	src, dst := make([]byte, msgSize*window), make([]byte, msgSize*window)
	mrA, err := p.pd[0].RegMR(src, verbs.AccessLocalWrite)
	if err != nil {
		b.Fatal(err)
	}
	mrB, err := p.pd[1].RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		b.Fatal(err)
	}
	wrs := make([]verbs.SendWR, window)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, ImmData: uint32(size),
			SGList: []verbs.SGE{mrA.SGE(i*msgSize, size)}, RemoteAddr: mrB.Addr() + uint64(i*msgSize), RKey: mrB.RKey()}
	}
	recvs := make([]verbs.RecvWR, immRecvs)
	if err := p.qp[1].PostRecv(recvs...); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The receiver: counts messages, reposting their receives.
	var want atomic.Int64
	got := make(chan error, 1)
	go func() {
		wcs := make([]verbs.WC, 32)
		seen := int64(0)
		for {
			n, err := p.rcq[1].PollWait(ctx, wcs)
			if err != nil {
				got <- err
				return
			}
			for i := range wcs[:n] {
				if wcs[i].Status != verbs.WCSuccess || wcs[i].ImmData != uint32(size) {
					got <- fmt.Errorf("receive completion %v", &wcs[i])
					return
				}
			}
			if err := p.qp[1].PostRecv(recvs[:n]...); err != nil {
				got <- err
				return
			}
			if seen += int64(n); seen == want.Load() {
				seen = 0
				got <- nil
			}
		}
	}()
	qp, cq := p.qp[0], p.scq[0]
	wcs := make([]verbs.WC, window)
	run := func(n int) error {
		want.Store(int64(n))
		posted, done := 0, 0
		for done < n {
			if k := min(n-posted, window-(posted-done)); k > 0 {
				first := posted % window
				var err error
				if first+k <= window {
					err = qp.PostSend(wrs[first : first+k]...)
				} else if err = qp.PostSend(wrs[first:]...); err == nil {
					err = qp.PostSend(wrs[:first+k-window]...)
				}
				if err != nil {
					return err
				}
				posted += k
			}
			m, err := cq.PollWait(ctx, wcs)
			if err != nil {
				return err
			}
			for i := range wcs[:m] {
				if wcs[i].Status != verbs.WCSuccess {
					return fmt.Errorf("send completion %v", &wcs[i])
				}
			}
			done += m
		}
		return <-got
	}
	// Warm up: one message alone first, as benchRCWrite does, while the
	// neighbour is resolved (sixteen at once lost to that wait a 67 ms
	// retransmission timeout), then a window's worth.
	for _, n := range []int{1, 16} {
		if err := run(n); err != nil {
			b.Fatal(err)
		}
	}
	sent0, re0 := p.counter("sent_pkts"), p.counter("retrans_pkts")
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	r := record(b, int64(size), cpuTime()-cpu0)
	b.ReportMetric(float64(p.counter("sent_pkts")-sent0)/float64(b.N), "pkts/op")
	b.ReportMetric(float64(p.counter("retrans_pkts")-re0)/float64(b.N), "retrans/op")
	return r
}
