package udp

import (
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// sendBatch builds n SEND_MIDDLEs of size payload bytes from PSN psn0 on,
// to a, as one batch (a GSO message of equal segments): each payload byte
// is its packet's PSN's low byte, the ICRCs are left to the link.
func sendBatch(headroom int, a link.Addr, psn0 wire.PSN, n, size int) []link.Packet {
	pkts := make([]link.Packet, n)
	for i := range pkts {
		psn := psn0 + wire.PSN(i)
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(psn)
		}
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | wire.OpSendMiddle, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn},
			Payload: p}
		buf := f.AppendTransport(make([]byte, headroom, link.MaxFrameSize))
		buf = append(buf, 0, 0, 0, 0)
		pkts[i] = link.Packet{Buf: buf, Off: headroom, Len: len(buf) - headroom, Addr: a}
	}
	return pkts
}

// TestXDPDelivers: a receiver reading an AF_XDP socket gets, in order
// and each once, tiny SENDs and runs of 1 KiB packets the sender sent as
// GSO messages (segmented by its kernel: XDP on the veth took GSO off
// it), every ICRC verified over the real headers, payloads intact; the
// socket dropped nothing, and every packet came from a frame.
func TestXDPDelivers(t *testing.T) {
	a, b, addr, _ := xdpPair(t)
	const rounds = 20
	psn := wire.PSN(0)
	for range rounds {
		send(t, a, writeBatch(a.Headroom(), addr, psn, 0, 1), sendBatch(a.Headroom(), addr, psn+1, 16, 1024))
		psn += 17
	}
	var got []wire.PSN
	var bad int
	for len(got) < int(psn) {
		bufs := make([]link.Packet, 64)
		for i := range bufs {
			bufs[i].Buf = make([]byte, 0, link.MaxFrameSize)
		}
		ps := recvSome(t, b, bufs)
		if len(ps) == 0 {
			break
		}
		for _, p := range ps {
			tr := p.Buf[p.Off : p.Off+p.Len]
			n := wire.BTH(tr).PSN()
			got = append(got, n)
			if len(tr) > 100 {
				for _, c := range tr[wire.BTHLen : len(tr)-wire.ICRCLen] {
					if c != byte(n) {
						bad++
						break
					}
				}
			}
		}
	}
	checkPSNs(t, got, psnRange(0, int(psn)-1)...)
	if bad != 0 {
		t.Errorf("%d payloads changed", bad)
	}
	s := b.Stats()
	if s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 || s.RxSocketFull.Load() != 0 {
		t.Errorf("bad ICRC %d, malformed %d, socket drops %d", s.RxBadICRC.Load(), s.RxMalformed.Load(), s.RxSocketFull.Load())
	}
	if g := b.rx.ring; g.framed.Load() != uint64(psn) || a.GSOMessages.Load() == 0 {
		t.Errorf("%d from frames of %d; the sender's GSO messages %d", g.framed.Load(), psn, a.GSOMessages.Load())
	}
}

// recvSome waits for packets with TryRecv and returns those of one look
// that found any; none when the wait ended.
func recvSome(t *testing.T, b *Link, bufs []link.Packet) []link.Packet {
	t.Helper()
	var n int
	testenv.Poll(testenv.Slow, func() bool {
		var err error
		n, err = b.TryRecv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return bufs[:n]
}

// TestXDPHostile: bytes any peer may send reach the AF_XDP receiver's
// checks as they reach the ring's: a packet with a wrong ICRC is dropped
// as rx_drop_bad_icrc, five bytes that are no BTH as rx_drop_malformed, a
// first IPv4 fragment (more fragments set; the program takes it, the rest
// go to the kernel, which drops them) as rx_drop_malformed, and a good
// packet after them arrives alone.
func TestXDPHostile(t *testing.T) {
	a, b, addr, ha := xdpPair(t)
	small := writeBatch(a.Headroom(), addr, 0, 0, 1)[0]
	sendRaw(t, ha, addr, small.Buf[small.Off:small.Off+small.Len], []byte{1, 2, 3, 4, 5}, make([]byte, 3000))
	send(t, a, writeBatch(a.Headroom(), addr, 7, 0, 1))
	checkPSNs(t, recvPSNs(t, b, 1), 7)
	s := b.Stats()
	if n := s.RxBadICRC.Load(); n != 1 {
		t.Errorf("rx_drop_bad_icrc %d, want 1", n)
	}
	if n := s.RxMalformed.Load(); n != 2 {
		t.Errorf("rx_drop_malformed %d, want 2 (five bytes, a first fragment)", n)
	}
	if n := s.RxPackets.Load(); n != 1 {
		t.Errorf("%d packets delivered, want 1", n)
	}
}

// TestXDPDropsCounted: packets that find the AF_XDP socket's receive ring
// full (the receiver not reading) are counted as rx_drop_socket_full
// (XDP_STATISTICS), read after the full reads that follow, as the ring's
// are (PACKET_STATISTICS); what arrived is at most the ring's worth.
func TestXDPDropsCounted(t *testing.T) {
	a, b, addr, _ := xdpPair(t)
	const batches, per = 160, 64 // 10,240 packets for a ring of 8,192
	for i := range batches {
		send(t, a, sendBatch(a.Headroom(), addr, wire.PSN(i*per), per, 64))
		time.Sleep(time.Millisecond) // the veth's queue (256) keeps up
	}
	got := takeAll(t, b)
	drops := b.Stats().RxSocketFull.Load()
	t.Logf("sent %d, received %d, counted dropped %d", batches*per, got, drops)
	if drops == 0 || got > b.rx.ring.Frames() || got+int(drops) > batches*per {
		t.Errorf("received %d of %d with a ring of %d; rx_drop_socket_full %d", got, batches*per, b.rx.ring.Frames(), drops)
	}
}
