package linktest

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// WriteBatch builds, to a, an RC WRITE of n×4096 bytes as the engine sends
// it at path MTU 4096 (FIRST with a RETH, 4128 bytes; MIDDLEs and LAST,
// 4112; none when n is 0) from PSN psn0 on, then tiny SEND_ONLYs of 4
// bytes: GSO messages of the large and of the smallest kind. Each
// payload byte is its packet's PSN's low byte; the ICRCs are left 0, for
// the link to compute.
func WriteBatch(headroom int, a link.Addr, psn0 wire.PSN, n, tiny int) []link.Packet {
	var pkts []link.Packet
	psn := psn0
	for i := range n {
		op := wire.TransportRC | wire.OpWriteMiddle
		f := wire.PacketFields{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: 0x11}}
		switch i {
		case 0:
			op = wire.TransportRC | wire.OpWriteFirst
			f.Ext.RETH = wire.RETHFields{VA: 0x1000, RKey: 7, DMALength: uint32(n * 4096)}
		case n - 1:
			op = wire.TransportRC | wire.OpWriteLast
		}
		f.BTH.Opcode, f.BTH.PSN = op, psn
		f.Payload = bytes.Repeat([]byte{byte(psn)}, 4096)
		pkts = append(pkts, Build(headroom, &f, a))
		psn++
	}
	for range tiny {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn},
			Payload: []byte{byte(psn), 2, 3, 4}}
		pkts = append(pkts, Build(headroom, &f, a))
		psn++
	}
	return pkts
}

// Build lays out f's transport packet behind headroom bytes, with room
// for its ICRC (0), addressed to a.
func Build(headroom int, f *wire.PacketFields, a link.Addr) link.Packet {
	buf := f.AppendTransport(make([]byte, headroom, link.MaxFrameSize))
	buf = append(buf, 0, 0, 0, 0)
	return link.Packet{Buf: buf, Off: headroom, Len: len(buf) - headroom, Addr: a}
}

// ParkedInRecvLocked reports whether a goroutine sleeps in the netpoller
// inside a link's RecvLocked (its stack is "[IO wait]" with RecvLocked on
// it).
func ParkedInRecvLocked() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		s := string(g)
		if strings.Contains(s, "[IO wait") && strings.Contains(s, ").RecvLocked(") {
			return true
		}
	}
	return false
}

// Receivers is what RecvLockedAfterTryRecv's two receivers took: the
// poller's TryRecv, then RecvLocked's first batch, then the rest (by
// TryRecv), and all of them in that order.
type Receivers struct {
	Polled, First, All []link.Packet
}

// RecvLockedAfterTryRecv plays the case link.Poller's order promise is
// about. l's RecvLocked sleeps in the netpoller (the device's receive
// goroutine); holding its lock, as verbs does, a poller takes three of
// the packets sendFirst sends with TryRecv, and queued must then say how
// many segments the link holds for later (a superpacket cut short: none
// is a test that proves nothing, and fails); sendNext sends a later
// packet, which wakes RecvLocked once the lock is free: it must hand over
// the queued segments before it. The packets are taken until total have
// come, or 20 s.
func RecvLockedAfterTryRecv(t testing.TB, l link.Poller, sendFirst, sendNext func(), queued func() int, total int) Receivers {
	t.Helper()
	var mu sync.Mutex
	type result struct {
		pkts []link.Packet
		err  error
	}
	first := make(chan result, 1)
	go func() {
		bufs := NewBuffers(64)
		n, err := l.RecvLocked(bufs, &mu)
		if err == nil {
			mu.Unlock() // RecvLocked returns with mu held
		}
		first <- result{bufs[:n], err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !ParkedInRecvLocked() {
		if time.Now().After(deadline) {
			t.Fatal("RecvLocked never slept in the netpoller")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	sendFirst()
	var r Receivers
	for len(r.Polled) < 3 {
		bufs := NewBuffers(3 - len(r.Polled))
		n, err := l.TryRecv(bufs)
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		r.Polled = append(r.Polled, bufs[:n]...)
		if time.Now().After(deadline) {
			mu.Unlock()
			t.Fatalf("TryRecv took %d packets, want 3", len(r.Polled))
		}
	}
	if queued() == 0 {
		mu.Unlock()
		t.Fatal("TryRecv queued no segments: the receiver got no superpacket to split")
	}
	sendNext()
	mu.Unlock()
	res := <-first
	if res.err != nil {
		t.Fatal(res.err)
	}
	r.First = res.pkts
	r.All = append(append([]link.Packet(nil), r.Polled...), r.First...)
	// The rest by TryRecv: a RecvLocked that failed to hand the queued
	// segments over first would then wait for nothing.
	for len(r.All) < total && time.Now().Before(deadline) {
		bufs := NewBuffers(64)
		n, err := l.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		r.All = append(r.All, bufs[:n]...)
		if n == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return r
}
