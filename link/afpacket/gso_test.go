package afpacket

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/wire"
)

// TestGSOFromUDPLink is issue 13's first case at the link layer: a RoCE v2
// sender on link/udp (a v2-only device) sends multi-packet messages as UDP
// GSO messages, which cross the veth whole; the raw link on the other end
// (a default device) must deliver every packet, in order, each ICRC
// verified — with the segment size from the kernel's virtio-net header, and
// (as on a kernel that cannot give it, Linux < 6.2) found from the RoCE
// headers; with room for every segment in one Recv, and with a few at a
// time so the rest wait for the next.
func TestGSOFromUDPLink(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, vnet := range []bool{true, false} {
			for _, batch := range []int{64, 3} {
				name := fmt.Sprintf("IPv6=%v/vnet=%v/recv-batch=%d", v6, vnet, batch)
				t.Run(name, func(t *testing.T) { testGSOFromUDP(t, v6, vnet, batch) })
			}
		}
	}
}

func testGSOFromUDP(t *testing.T, v6, vnet bool, batch int) {
	ha, hb := nettest.VethPair(t, nettest.Options{})
	gid := func(h *nettest.Host) netip.Addr {
		if v6 {
			return h.IPv6
		}
		return mapped(h.IPv4)
	}
	var tx *udp.Link
	if err := ha.Do(func() (err error) {
		tx, err = udp.New(udp.Config{Addrs: []netip.Addr{gid(ha)}, MTU: 1500 - 48, Zone: ha.Ifindex})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if !tx.GSO() {
		t.Skip("this kernel has no UDP GSO")
	}
	noVnetHdr = !vnet
	rx := openOn(t, hb, true, gid(hb))
	noVnetHdr = false
	if got := rx.vnet.Load(); got != vnet {
		t.Fatalf("PACKET_VNET_HDR = %v, want %v", got, vnet)
	}
	// Messages of 4096 bytes at path MTU 1024, as pingpong sends them: a
	// FIRST, two MIDDLEs and a LAST of 1024 bytes each; and a run of
	// 40-byte SEND_ONLYs (small segments: a superpacket shorter than the MTU).
	a := link.Addr{Version: wire.RoCEv2, SrcGID: gid(ha), DstGID: gid(hb)}
	var pkts []link.Packet
	var want [][]byte
	psn := wire.PSN(100)
	add := func(op wire.Opcode, payload []byte) {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn}, Payload: payload}
		buf := f.AppendTransport(make([]byte, tx.Headroom(), link.MaxFrameSize))
		buf = append(buf, 0, 0, 0, 0)
		pkts = append(pkts, link.Packet{Buf: buf, Off: tx.Headroom(), Len: len(buf) - tx.Headroom(), Addr: a})
		want = append(want, payload)
		psn++
	}
	for m := range 3 {
		for i, op := range []wire.Opcode{wire.TransportRC | wire.OpSendFirst, wire.TransportRC | wire.OpSendMiddle, wire.TransportRC | wire.OpSendMiddle, wire.TransportRC | wire.OpSendLast} {
			add(op, bytes.Repeat([]byte{byte(16*m + i)}, 1024))
		}
	}
	for i := range 10 {
		add(wire.OpcodeRCSendOnly, bytes.Repeat([]byte{byte(0xa0 + i)}, 40))
	}
	c := make(chan link.Packet, len(pkts))
	go func() {
		for {
			b := linktest.NewBuffers(batch)
			n, err := rx.Recv(b)
			if err != nil {
				return
			}
			for _, pk := range b[:n] {
				c <- pk
			}
		}
	}()
	if n, err := tx.Send(pkts); n != len(pkts) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if tx.GSOMessages.Load() == 0 {
		t.Fatal("the UDP link sent no GSO message: the test proves nothing")
	}
	for i, w := range want {
		select {
		case pk := <-c:
			var p wire.Packet
			if err := p.ParseTransport(pk.Transport(), wire.RoCEv2); err != nil {
				t.Fatal(err)
			}
			if p.BTH().PSN() != wire.PSN(100+i) || !bytes.Equal(p.Payload(), w) {
				t.Fatalf("packet %d: PSN %v, %d payload bytes; want PSN %d, %d bytes", i, p.BTH().PSN(), len(p.Payload()), 100+i, len(w))
			}
		case <-time.After(5 * time.Second):
			s := rx.Stats()
			t.Fatalf("packet %d of %d never came (rx_packets %d, bad ICRC %d, malformed %d, kernel refused %d)", i, len(want),
				s.RxPackets.Load(), s.RxBadICRC.Load(), s.RxMalformed.Load(), s.RxKernelRefused.Load())
		}
	}
	if s := rx.Stats(); s.RxBadICRC.Load()+s.RxMalformed.Load() != 0 {
		t.Errorf("%d bad ICRCs, %d malformed", s.RxBadICRC.Load(), s.RxMalformed.Load())
	}
}
