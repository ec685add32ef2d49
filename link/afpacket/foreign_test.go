package afpacket

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// eui64GID is the link-local GID (RoCE v1's default) a MAC gives.
func eui64GID(m wire.MAC) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, 9: m[1], 10: m[2], 11: 0xff, 12: 0xfe, 13: m[3], 14: m[4], 15: m[5]})
}

// cmREQ is a CM REQ MAD to the IP CM service RDMA_PS_TCP port 7174, as
// rdma_connect sends it to rping's default port.
func cmREQ() []byte {
	req := mad.REQFields{
		LocalCommID: 0x1234abcd, ServiceID: mad.NewIPCMServiceID(mad.PortSpaceTCP, 7174),
		LocalQPN: 0x11, TransportServiceType: mad.TransportRC, StartingPSN: 0x123456,
		PartitionKey: 0xffff, PathPacketPayloadMTU: 3, MaxCMRetries: 15,
		LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20, RetryCount: 7, RNRRetryCount: 7,
	}
	b := mad.NewCMHeader(mad.AttrREQ, 0x42).Append(make([]byte, 0, mad.Size))
	return req.Append(b)
}

// v2Frame builds a RoCE v2 frame from src to dst (both IPv4 or both IPv6)
// between the MACs of two hosts: a UD SEND to QP1 carrying payload, or,
// with qp other than 1, an RC SEND to qp.
func v2Frame(t *testing.T, from, to wire.MAC, src, dst netip.Addr, qp uint32, payload []byte) []byte {
	t.Helper()
	f := wire.PacketFields{Version: wire.RoCEv2, Eth: &wire.EthernetFields{Dst: to, Src: from},
		UDP:     wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port},
		BTH:     wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: 0xffff, DestQP: qp, PSN: 7},
		Payload: payload}
	if qp == 1 {
		f.BTH.Opcode = wire.OpcodeUDSendOnly
		f.Ext.DETH = wire.DETHFields{QKey: 0x80010000, SrcQP: 1}
	}
	if src.Is4() {
		f.IPv4 = &wire.IPv4Fields{Protocol: wire.IPProtocolUDP, TTL: 64, Src: src, Dst: dst}
	} else {
		f.IPv6 = &wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, HopLimit: 64, Src: src, Dst: dst}
	}
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A v1-only link (a ConnectX-3) never delivers RoCE v2: a CM REQ over
// RoCE v2, over IPv4 and IPv6, and a data packet are dropped, counted by
// kind and reported with their source; RoCE v2 to another address is not
// for us; the RoCE v1 packet sent after them is delivered, alone.
func TestV1OnlyDropsV2(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{})
	reports := make(chan Foreign, 16)
	open := func(h *nettest.Host, cfg Config) *Link {
		t.Helper()
		var l *Link
		if err := h.Do(func() (err error) { l, err = New(cfg); return err }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	b := open(hb, Config{Ifindex: hb.Ifindex, GIDs: []netip.Addr{eui64GID(hb.MAC), netip.AddrFrom16(hb.IPv4.As16()), hb.IPv6},
		OnForeign: func(f Foreign) {
			select {
			case reports <- f:
			default:
				t.Errorf("more reports than packets sent: %+v", f)
			}
		}})
	// A sends raw frames of both versions.
	a := open(ha, Config{Ifindex: ha.Ifindex, V2: true})

	req := cmREQ()
	v1 := wire.PacketFields{Version: wire.RoCEv1, Eth: &wire.EthernetFields{Dst: hb.MAC, Src: ha.MAC},
		GRH: &wire.GRHFields{NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1, Src: eui64GID(ha.MAC), Dst: eui64GID(hb.MAC)},
		BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: 0xffff, DestQP: 0x11, PSN: 8}, Payload: []byte("v1 marker")}
	v1Frame, err := v1.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{
		v2Frame(t, ha.MAC, hb.MAC, ha.IPv4, hb.IPv4, 1, req),
		v2Frame(t, ha.MAC, hb.MAC, ha.IPv6, hb.IPv6, 1, req),
		v2Frame(t, ha.MAC, hb.MAC, ha.IPv4, hb.IPv4, 0x11, []byte("data")),
		v2Frame(t, ha.MAC, hb.MAC, ha.IPv4, netip.MustParseAddr("198.18.0.99"), 1, req), // not B's
		v1Frame,
	} {
		if err := a.sendFrame(f); err != nil {
			t.Fatal(err)
		}
	}

	// B receives until the RoCE v1 packet, sent last, arrives.
	type result struct {
		pkts []link.Packet
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got []link.Packet
		for len(got) == 0 {
			pkts := make([]link.Packet, b.BatchSize())
			for i := range pkts {
				pkts[i].Buf = make([]byte, link.MaxFrameSize+link.FrameHeadroom)
			}
			n, err := b.Recv(pkts)
			if err != nil {
				done <- result{got, err}
				return
			}
			got = append(got, pkts[:n]...)
		}
		done <- result{got, nil}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(testenv.Slow):
		b.Close()
		<-done
		t.Fatalf("the RoCE v1 packet did not arrive within %v", testenv.Slow)
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	if len(res.pkts) != 1 || res.pkts[0].Addr.Version != wire.RoCEv1 {
		for _, p := range res.pkts {
			t.Errorf("delivered: %v %x", p.Addr.Version, p.Transport())
		}
		t.Fatalf("delivered %d packets; want only the RoCE v1 one", len(res.pkts))
	}

	c := b.Counters()
	if c[CounterV2OnV1] != 3 || c[CounterV2CMOnV1] != 2 || c[CounterV2OtherOnV1] != 1 {
		t.Errorf("counters %v; want 3 RoCE v2 packets dropped, 2 CM and 1 other", c)
	}
	s := b.Stats()
	if s.RxPackets.Load() != 1 || s.RxNotForUs.Load() != 1 || s.RxBadICRC.Load()+s.RxMalformed.Load() != 0 {
		t.Errorf("link stats %v; want 1 packet delivered, 1 not for us, none bad", s.Snapshot())
	}
	if a.Counters() != nil {
		t.Errorf("a RoCE v2 link reports v1-only counters: %v", a.Counters())
	}

	want := []struct {
		src     netip.Addr
		cm      bool
		msg     string
		service mad.ServiceID
		qp      uint32
	}{
		{ha.IPv4, true, "REQ", mad.NewIPCMServiceID(mad.PortSpaceTCP, 7174), 1},
		{ha.IPv6, true, "REQ", mad.NewIPCMServiceID(mad.PortSpaceTCP, 7174), 1},
		{ha.IPv4, false, "RC_SEND_ONLY", 0, 0x11},
	}
	if len(reports) != len(want) {
		t.Fatalf("%d reports, want %d", len(reports), len(want))
	}
	for i, w := range want {
		f := <-reports
		if f.Src != w.src || f.CM != w.cm || f.Message() != w.msg || f.ServiceID != w.service || f.DestQP != w.qp ||
			f.Version != wire.RoCEv2 || f.SrcPort != 49152 {
			t.Errorf("report %d: %+v (message %s); want from %v, CM %v, %s, service %v, QP %#x",
				i, f, f.Message(), w.src, w.cm, w.msg, w.service, w.qp)
		}
		if f.CM && (f.ServiceID.Port() != 7174 || f.Method != mad.MethodSend) {
			t.Errorf("report %d: service port %d, method %v", i, f.ServiceID.Port(), f.Method)
		}
	}
}
