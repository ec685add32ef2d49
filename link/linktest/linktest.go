// Package linktest is the conformance suite every link.Link passes: the same
// test body runs over link/fabric, link/pcap and (later) the real links.
package linktest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Pair is two links that can reach each other, with the GIDs each owns.
type Pair struct {
	A, B       link.Link
	AGID, BGID netip.Addr
	Version    wire.Version
}

// MakePair returns a fresh pair for one subtest; the suite closes both links.
type MakePair func(t *testing.T) Pair

// Run runs the conformance suite.
func Run(t *testing.T, mk MakePair) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, mk(t)) })
	t.Run("Batch", func(t *testing.T) { testBatch(t, mk(t)) })
	t.Run("CloseUnblocksRecv", func(t *testing.T) { testClose(t, mk(t)) })
	t.Run("ECN", func(t *testing.T) { testECN(t, mk(t)) })
}

// NewBuffers returns n packets with buffers of capacity link.MaxFrameSize.
func NewBuffers(n int) []link.Packet {
	pk := make([]link.Packet, n)
	for i := range pk {
		pk[i].Buf = make([]byte, 0, link.MaxFrameSize)
	}
	return pk
}

// TransportPacket builds an RC SEND_ONLY transport packet with payload in a
// buffer with headroom, ready for Send.
func TransportPacket(headroom int, qpn uint32, psn wire.PSN, payload []byte) link.Packet {
	f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn, AckReq: true}, Payload: payload}
	buf := make([]byte, headroom, link.MaxFrameSize)
	buf = f.AppendTransport(buf)
	buf = append(buf, 0, 0, 0, 0) // ICRC, filled by the link
	return link.Packet{Buf: buf, Off: headroom, Len: len(buf) - headroom}
}

func addr(p Pair, fromA bool) link.Addr {
	a := link.Addr{Version: p.Version, SrcGID: p.AGID, DstGID: p.BGID, HopLimit: 64, UDPSrcPort: wire.UDSport(2)}
	if !fromA {
		a.SrcGID, a.DstGID = p.BGID, p.AGID
	}
	return a
}

func recvN(t *testing.T, l link.Link, n int) []link.Packet {
	t.Helper()
	var got []link.Packet
	for len(got) < n {
		bufs := NewBuffers(l.BatchSize())
		k, err := l.Recv(bufs)
		if err != nil {
			t.Fatalf("Recv after %d of %d packets: %v", len(got), n, err)
		}
		got = append(got, bufs[:k]...)
	}
	return got
}

func testRoundTrip(t *testing.T, p Pair) {
	defer p.A.Close()
	defer p.B.Close()
	for _, size := range []int{0, 1, 3, 64, 1000, p.A.MTU() - 64} {
		payload := bytes.Repeat([]byte{byte(size)}, size)
		pk := TransportPacket(p.A.Headroom(), 0x11, wire.PSN(size), payload)
		pk.Addr = addr(p, true)
		pk.Addr.TrafficClass = 0x68
		if n, err := p.A.Send([]link.Packet{pk}); err != nil || n != 1 {
			t.Fatalf("Send(%d bytes) = %d, %v", size, n, err)
		}
		got := recvN(t, p.B, 1)[0]
		var w wire.Packet
		if err := w.ParseTransport(got.Transport(), p.Version); err != nil {
			t.Fatalf("received packet does not parse: %v", err)
		}
		// The link hands its parse over, so the engine parses once.
		if !got.Parsed.Holds(got.Transport(), got.Addr.Version) {
			t.Errorf("size %d: the packet's Parsed does not hold its transport packet", size)
		}
		if !bytes.Equal(w.Payload(), payload) || w.BTH().DestQP() != 0x11 || w.BTH().PSN() != wire.PSN(size) {
			t.Fatalf("size %d: got QP %#x PSN %v payload %d bytes", size, w.BTH().DestQP(), w.BTH().PSN(), len(w.Payload()))
		}
		if got.Addr.SrcGID != p.AGID || got.Addr.DstGID != p.BGID || got.Addr.Version != p.Version {
			t.Fatalf("addr %+v, want %v → %v %v", got.Addr, p.AGID, p.BGID, p.Version)
		}
		if got.Addr.TrafficClass != 0x68 {
			t.Errorf("traffic class %#x, want 0x68", got.Addr.TrafficClass)
		}
	}
	// And back.
	pk := TransportPacket(p.B.Headroom(), 0x12, 7, []byte("pong"))
	pk.Addr = addr(p, false)
	if _, err := p.B.Send([]link.Packet{pk}); err != nil {
		t.Fatal(err)
	}
	if got := recvN(t, p.A, 1)[0]; got.Addr.SrcGID != p.BGID {
		t.Errorf("reply from %v, want %v", got.Addr.SrcGID, p.BGID)
	}
}

func testBatch(t *testing.T, p Pair) {
	defer p.A.Close()
	defer p.B.Close()
	const n = 200
	var batch []link.Packet
	for i := 0; i < n; i++ {
		pk := TransportPacket(p.A.Headroom(), 0x11, wire.PSN(i), []byte(fmt.Sprintf("packet %d", i)))
		pk.Addr = addr(p, true)
		batch = append(batch, pk)
		if len(batch) == p.A.BatchSize() || i == n-1 {
			if k, err := p.A.Send(batch); err != nil || k != len(batch) {
				t.Fatalf("Send batch = %d, %v", k, err)
			}
			batch = batch[:0]
		}
	}
	got := recvN(t, p.B, n)
	for i, g := range got {
		var w wire.Packet
		if err := w.ParseTransport(g.Transport(), p.Version); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("packet %d", i); string(w.Payload()) != want {
			t.Fatalf("packet %d: %q, want %q (in order, on a link without faults)", i, w.Payload(), want)
		}
	}
	if s := p.B.Stats(); s.RxPackets.Load() < n {
		t.Errorf("B counted %d received packets, want ≥ %d", s.RxPackets.Load(), n)
	}
}

// testECN: the IP ECN bits (RFC 3168 §5) a packet is sent with arrive as
// sent, each packet's own, in batches that mix codepoints among runs of
// one (which a UDP link may send as one GSO message and receive as one GRO
// batch: Linux merges only datagrams of one TOS or traffic class, so a
// batch's one control message speaks for all of them) — what DCQCN's ECT
// marking and its notification point's CE detection rely on.
func testECN(t *testing.T, p Pair) {
	defer p.A.Close()
	defer p.B.Close()
	const dscp = 26 << 2
	var ecns []uint8
	for _, run := range []struct {
		ecn uint8
		n   int
	}{{2, 8}, {3, 1}, {2, 8}, {1, 3}, {0, 4}, {3, 5}, {2, 1}} {
		for range run.n {
			ecns = append(ecns, run.ecn)
		}
	}
	payload := bytes.Repeat([]byte{0xec}, 1000)
	var batch []link.Packet
	for i, e := range ecns {
		pk := TransportPacket(p.A.Headroom(), 0x11, wire.PSN(i), payload)
		pk.Addr = addr(p, true)
		pk.Addr.TrafficClass = dscp | e
		batch = append(batch, pk)
		if len(batch) == p.A.BatchSize() || i == len(ecns)-1 {
			if k, err := p.A.Send(batch); err != nil || k != len(batch) {
				t.Fatalf("Send batch = %d, %v", k, err)
			}
			batch = batch[:0]
		}
	}
	for i, g := range recvN(t, p.B, len(ecns)) {
		var w wire.Packet
		if err := w.ParseTransport(g.Transport(), p.Version); err != nil {
			t.Fatal(err)
		}
		psn := int(w.BTH().PSN())
		if psn >= len(ecns) {
			t.Fatalf("packet %d: PSN %d", i, psn)
		}
		if want := dscp | ecns[psn]; g.Addr.TrafficClass != want {
			t.Errorf("PSN %d: traffic class %#x, want %#x (ECN %d)", psn, g.Addr.TrafficClass, want, ecns[psn])
		}
	}
}

func testClose(t *testing.T, p Pair) {
	defer p.A.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := p.B.Recv(NewBuffers(1))
		errc <- err
	}()
	p.B.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Recv after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if _, err := p.B.Recv(NewBuffers(1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv on a closed link: %v, want net.ErrClosed", err)
	}
	pk := TransportPacket(p.B.Headroom(), 1, 1, nil)
	pk.Addr = addr(p, false)
	if _, err := p.B.Send([]link.Packet{pk}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send on a closed link: %v, want net.ErrClosed", err)
	}
}
