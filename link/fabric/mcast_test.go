package fabric_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// TestMulticast: a packet to a group reaches every other member, and
// stops reaching a port once it leaves; non-members count it not for us.
func TestMulticast(t *testing.T) {
	f := fabric.New()
	defer f.Close()
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	var ports [3]*fabric.Port
	for i := range ports {
		p, err := f.AddPort(fabric.PortConfig{GIDs: []netip.Addr{netip.AddrFrom16(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}).As16())}})
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	if err := ports[0].JoinGroup(netip.MustParseAddr("::ffff:192.0.2.9")); err == nil {
		t.Error("JoinGroup accepted a unicast GID")
	}
	for _, p := range ports[1:] {
		if err := p.JoinGroup(group); err != nil {
			t.Fatal(err)
		}
	}
	send := func() {
		pk := linktest.TransportPacket(ports[0].Headroom(), 0xFFFFFF, 0, []byte("hello"))
		pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: netip.MustParseAddr("::ffff:192.0.2.1"), DstGID: group}
		if n, err := ports[0].Send([]link.Packet{pk}); n != 1 || err != nil {
			t.Fatalf("Send = %d, %v", n, err)
		}
	}
	send()
	bufs := linktest.NewBuffers(4)
	for _, p := range ports[1:] {
		n, err := p.Recv(bufs)
		if err != nil || n != 1 {
			t.Fatalf("Recv = %d, %v", n, err)
		}
		if bufs[0].Addr.DstGID != group {
			t.Errorf("delivered to %v, want %v", bufs[0].Addr.DstGID, group)
		}
		if mac := bufs[0].Buf[:6]; string(mac) != "\x01\x00\x5e\x01\x02\x03" {
			t.Errorf("destination MAC % x, want 01 00 5e 01 02 03", mac)
		}
	}
	if err := ports[2].LeaveGroup(group); err != nil {
		t.Fatal(err)
	}
	send()
	if n, err := ports[1].Recv(bufs); err != nil || n != 1 {
		t.Fatalf("member Recv = %d, %v", n, err)
	}
	// The port that left has nothing queued: a packet it sends itself
	// now is the first and only one it receives.
	own := netip.MustParseAddr("::ffff:192.0.2.3")
	pk := linktest.TransportPacket(ports[2].Headroom(), 0x11, 0, nil)
	pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: own, DstGID: own}
	if _, err := ports[2].Send([]link.Packet{pk}); err != nil {
		t.Fatal(err)
	}
	if n, err := ports[2].Recv(bufs); err != nil || n != 1 || bufs[0].Addr.DstGID != own {
		t.Fatalf("after LeaveGroup: Recv = %d, %v, first to %v; want only the packet to itself", n, err, bufs[0].Addr.DstGID)
	}
}
