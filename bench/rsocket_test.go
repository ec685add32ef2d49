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
//   - Stream64K: an rsocket stream fed with 64 KiB Writes, read on the
//     other side (rstream's buffers: SO_SNDBUF and SO_RCVBUF 512 KiB, rings
//     of 1 MiB); MB/s of payload;
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
		p := openRoCE(b, ha, hb, false, 0, verbs.QPCap{MaxSendWR: window, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
		benchRCWrite(b, p, ha, hb)
		rcWrite = lastResult(b).mbps
	})
	b.Run("Stream64K", func(b *testing.B) {
		ca, cb := rsocketPair(b, ha, hb)
		r := benchStream(b, ca, cb)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("TCPStream64K", func(b *testing.B) {
		ca, cb := tcpPair(b, ha, hb)
		r := benchStream(b, ca, cb)
		if rcWrite > 0 {
			b.ReportMetric(r.mbps/rcWrite, "x-rc-write")
		}
	})
	b.Run("RCSendRecvRTT64", func(b *testing.B) {
		p := openRoCE(b, ha, hb, false, 0, verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
		benchRCRTT(b, p, ha, hb, false)
		rcRTT = lastResult(b).ns
	})
	b.Run("RequestResponse64", func(b *testing.B) {
		ca, cb := rsocketPair(b, ha, hb)
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

// rsocketPair connects an rsocket from a device on ha to one on hb, each
// with its own CM, with rstream's buffer sizes.
func rsocketPair(b *testing.B, ha, hb *nettest.Host) (net.Conn, net.Conn) {
	b.Helper()
	p := openDevices(b, ha, hb, false, 0)
	var cms [2]*rdmacm.CM
	for i := range 2 {
		cms[i] = rdmacm.New(rdmacm.Options{})
		if err := cms[i].AddDevice(p.dev[i].Device); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cms[i].Close() })
	}
	o := rsocket.Options{ReadBuffer: 1 << 19, WriteBuffer: 1 << 19}
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
	ca, err := d.Dial(ctx, "rsocket", l.AddrPort().String())
	if err != nil {
		b.Fatal(err)
	}
	cb := <-acc
	if cb == nil {
		b.Fatal("no connection accepted")
	}
	b.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
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

// benchStream writes b.N × 64 KiB on ca and reads them on cb.
func benchStream(b *testing.B, ca, cb net.Conn) result {
	buf := make([]byte, msgSize)
	run := func(n int) error {
		done := make(chan error, 1)
		go func() {
			rb := make([]byte, msgSize)
			_, err := io.CopyBuffer(io.Discard, io.LimitReader(cb, int64(n)*msgSize), rb)
			done <- err
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
	b.SetBytes(msgSize)
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	return record(b, msgSize, cpuTime()-cpu0)
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
