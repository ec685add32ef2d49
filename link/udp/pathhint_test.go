package udp

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestPathErrorNamesSuperpackets: when every packet sent to a destination
// left in a UDP GSO superpacket, PathError says so (a raw receiver that does
// not split them drops them all, which a wrong QPN would not explain
// better); once one left on its own, it says nothing.
func TestPathErrorNamesSuperpackets(t *testing.T) {
	src, dst := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")
	l, err := New(Config{Bind: src, Addrs: []netip.Addr{src}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !l.GSO() {
		t.Skip("this kernel has no UDP GSO")
	}
	a := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(src.As16()), DstGID: netip.AddrFrom16(dst.As16())}
	// A 4096-byte SEND at path MTU 1024, as pingpong sends it: four
	// packets of one size, one GSO message.
	var batch []link.Packet
	for i, op := range []wire.Opcode{wire.OpSendFirst, wire.OpSendMiddle, wire.OpSendMiddle, wire.OpSendLast} {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.TransportRC | op, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: wire.PSN(i)},
			Payload: make([]byte, 1024)}
		batch = append(batch, build(l.Headroom(), &f, a))
	}
	if n, err := l.Send(batch); n != len(batch) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if l.GSOMessages.Load() == 0 {
		t.Fatal("no GSO message went out: the test proves nothing")
	}
	err = l.PathError(a.DstGID, wire.RoCEv2)
	if err == nil || !strings.Contains(err.Error(), "every packet sent to 127.0.0.3 left in a UDP GSO superpacket") {
		t.Fatalf("PathError after superpackets only = %v", err)
	}
	pk := linktest.TransportPacket(l.Headroom(), 0x11, 9, []byte("alone"))
	pk.Addr = a
	if n, err := l.Send([]link.Packet{pk}); n != 1 || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if err := l.PathError(a.DstGID, wire.RoCEv2); err != nil {
		t.Errorf("PathError after a single packet = %v, want nil", err)
	}
}
