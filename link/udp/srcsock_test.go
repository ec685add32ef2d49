package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// The source sockets (srcsock.go), between two namespaces: a link opened
// without Bind sends its unicast IPv4 packets through an AF_INET socket
// bound to the source, from that socket's port, and everything else
// through the main socket from 4791; the receiver, privileged, verifies
// all 32 bits of every ICRC over the real headers, so a packet whose
// predicted headers (the source port among them) were wrong is dropped
// and counted. Case by case: a packet, an answer and its ACK as one GSO
// message (twice: the second through shortMsg), a traffic class, IPv6,
// a batch that changes socket twice, a header cache built for the main
// socket (shortMsg must not use it), and mainOnly.
func TestSourceSockets(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{})
	var a, b *Link
	if err := ha.Do(func() (err error) {
		a, err = New(Config{Addrs: []netip.Addr{ha.IPv4, ha.IPv6}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { a.Close() }()
	if err := hb.Do(func() (err error) {
		b, err = New(Config{Addrs: []netip.Addr{hb.IPv4, hb.IPv6}, Ifindex: hb.Ifindex})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if len(a.srcs) != 1 || a.srcs[0].addr.Unmap() != ha.IPv4 || a.srcs[0].sport == 0 || a.srcs[0].sport == a.cfg.Port {
		t.Fatalf("source sockets %+v, want one for %v with a port of its own", a.srcs, ha.IPv4)
	}
	sport := a.srcs[0].sport
	v4 := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16())}
	v6 := link.Addr{Version: wire.RoCEv2, SrcGID: ha.IPv6, DstGID: hb.IPv6}
	psn := wire.PSN(0)
	mk := func(ad link.Addr, n int, tc uint8) link.Packet {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 9, PSN: psn, AckReq: true},
			Payload: make([]byte, n)}
		psn++
		buf := f.AppendTransport(make([]byte, link.FrameHeadroom, link.MaxFrameSize))
		buf = append(buf, 0, 0, 0, 0)
		ad.TrafficClass = tc
		return link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: len(buf) - link.FrameHeadroom, Addr: ad}
	}
	// send sends the batch and checks that b got every packet, in order,
	// with a valid ICRC, from the source port and with the traffic class
	// each should have.
	send := func(name string, batch []link.Packet, ports []uint16) {
		t.Helper()
		first := make([]wire.PSN, len(batch))
		for i := range batch {
			first[i] = wire.BTH(batch[i].Transport()).PSN()
		}
		if n, err := a.Send(batch); n != len(batch) || err != nil {
			t.Fatalf("%s: Send = %d, %v", name, n, err)
		}
		got := 0
		deadline := time.Now().Add(5 * time.Second)
		for got < len(batch) && time.Now().Before(deadline) {
			bufs := make([]link.Packet, b.BatchSize())
			for i := range bufs {
				bufs[i].Buf = make([]byte, 0, link.MaxFrameSize)
			}
			k, err := b.TryRecv(bufs)
			if err != nil {
				t.Fatalf("%s: TryRecv: %v", name, err)
			}
			for _, p := range bufs[:k] {
				want := &batch[got]
				if wire.BTH(p.Transport()).PSN() != first[got] || p.Addr.UDPSrcPort != ports[got] || p.Addr.TrafficClass != want.Addr.TrafficClass ||
					p.Addr.SrcGID != want.Addr.SrcGID {
					t.Errorf("%s: packet %d: PSN %v from %v port %d, TC %d; want PSN %v from %v port %d, TC %d", name, got,
						wire.BTH(p.Transport()).PSN(), p.Addr.SrcGID, p.Addr.UDPSrcPort, p.Addr.TrafficClass, first[got], want.Addr.SrcGID, ports[got], want.Addr.TrafficClass)
				}
				got++
			}
		}
		if got != len(batch) {
			t.Fatalf("%s: b received %d of %d packets (bad ICRC %d, malformed %d)", name, got, len(batch),
				b.Stats().RxBadICRC.Load(), b.Stats().RxMalformed.Load())
		}
	}
	send("one IPv4 packet", []link.Packet{mk(v4, 64, 0)}, []uint16{sport})
	ack := func(ad link.Addr) link.Packet { return mk(ad, 0, 0) }
	send("answer and ACK", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{sport, sport})
	before := a.shortMsgs
	send("answer and ACK again", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{sport, sport})
	if a.shortMsgs != before+1 {
		t.Errorf("the second answer and ACK: shortMsg took %d batches, want 1", a.shortMsgs-before)
	}
	send("traffic class", []link.Packet{mk(v4, 64, 0x68)}, []uint16{sport})
	send("IPv6", []link.Packet{mk(v6, 64, 0)}, []uint16{a.cfg.Port})
	send("IPv4, IPv6, IPv4", []link.Packet{mk(v4, 200, 0), mk(v6, 200, 0), mk(v4, 200, 0), mk(v4, 100, 0)},
		[]uint16{sport, a.cfg.Port, sport, sport})

	// A header cache built for the main socket's port (as resendSingly
	// leaves it) with slot 0 keyed for the source socket: shortMsg must
	// send it the general way.
	send("answer and ACK, to key slot 0", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{sport, sport})
	p := mk(v4, 64, 0)
	a.txMu.Lock()
	a.pseudoHeaders(&a.txPseudo, &p, a.cfg.Port, 0)
	a.txMu.Unlock()
	before = a.shortMsgs
	send("after a cache for the main socket", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{sport, sport})
	if a.shortMsgs != before {
		t.Errorf("shortMsg sent a batch with the header cache of another port")
	}

	// mainOnly (set before a link is used): everything from 4791.
	a.Close()
	if err := ha.Do(func() (err error) {
		a, err = New(Config{Addrs: []netip.Addr{ha.IPv4, ha.IPv6}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a.mainOnly = true
	send("mainOnly", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{a.cfg.Port, a.cfg.Port})
	send("mainOnly, again", []link.Packet{mk(v4, 64, 0), ack(v4)}, []uint16{a.cfg.Port, a.cfg.Port})
	if n := b.Stats().RxBadICRC.Load(); n != 0 {
		t.Errorf("b counted %d bad ICRCs", n)
	}
}
