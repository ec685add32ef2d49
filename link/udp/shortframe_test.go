package udp

// shortFrame is held to generalFrame here: the same frame through each, on
// two links alike but for generalOnly, must give the same packets,
// addresses, parses, counters and bookkeeping (shortFrame may decline a
// frame, and then generalFrame takes it on the same link, as ringDirect
// does). TestShortFrame has a case per check in which only that check
// fails, and says which frames the short path must take; FuzzShortFrameDiff
// mutates frames at random.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

var (
	sfLocal = netip.MustParseAddr("::ffff:10.9.0.2")
	sfPeer  = netip.MustParseAddr("::ffff:10.9.0.1")
	sfOther = netip.MustParseAddr("::ffff:10.9.0.3")
)

// sfSeg is one segment of a test frame: an RC SEND ONLY of payload
// bytes, or with ack an RC ACKNOWLEDGE.
type sfSeg struct {
	ack     bool
	payload int
	id      uint16 // the IPv4 ID, if not 0
}

// sfFrame builds a frame as the ring holds one: the virtio-net header,
// then an Ethernet frame holding one IPv4 RoCE v2 datagram to sfLocal from
// sfPeer, or, with more than one segment, a UDP GSO message of them
// (segment size: the first's), each segment's ICRC computed for the
// headers its sender sent it with (IPv4 ID id0+s, or id0 for all with
// fixedID), then pad bytes of Ethernet padding.
func sfFrame(t testing.TB, segs []sfSeg, fixedID bool, dst netip.Addr, pad int) []byte {
	t.Helper()
	const id0 = 0x4242
	var ip []byte
	var data [][]byte
	for s, sg := range segs {
		id := uint16(id0 + s)
		if fixedID {
			id = id0
		}
		if sg.id != 0 {
			id = sg.id
		}
		f := wire.PacketFields{
			Version: wire.RoCEv2,
			Eth:     &wire.EthernetFields{Dst: wire.MAC{2, 0, 0, 0, 0, 2}, Src: wire.MAC{2, 0, 0, 0, 0, 1}},
			IPv4:    &wire.IPv4Fields{TOS: 0x02, ID: id, Flags: 2, TTL: 63, Protocol: wire.IPProtocolUDP, Src: sfPeer, Dst: dst},
			UDP:     wire.UDPFields{SrcPort: 0xC123, DstPort: wire.RoCEv2Port},
			BTH:     wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, DestQP: 0x11, PSN: wire.PSN(100 + s), AckReq: true},
			Payload: bytes.Repeat([]byte{byte(s + 1)}, sg.payload),
		}
		if sg.ack {
			f.BTH.Opcode, f.Payload = wire.OpcodeRCAcknowledge, nil
			f.Ext.AETH = wire.AETHFields{MSN: 7}
		}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if s == 0 {
			ip = b[:wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen]
		}
		data = append(data, b[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen:])
	}
	frame := make([]byte, vnetLen, 2048)
	if len(segs) > 1 {
		frame[1] = vnetGSOUDPL4
		binary.NativeEndian.PutUint16(frame[4:], uint16(len(data[0])))
	}
	frame = append(frame, ip...)
	for _, d := range data {
		frame = append(frame, d...)
	}
	h := frame[vnetLen+wire.EthernetLen:]
	n := len(frame) - vnetLen - wire.EthernetLen
	binary.BigEndian.PutUint16(h[2:], uint16(n))
	binary.BigEndian.PutUint16(h[wire.IPv4MinLen+4:], uint16(n-wire.IPv4MinLen))
	return append(frame, make([]byte, pad)...)
}

// sfName is a sockaddr_ll whose packet type is pkttype.
func sfName(pkttype byte) []byte {
	name := make([]byte, nameLen)
	name[10] = pkttype
	return name
}

// sfLink is a link for frames to sfLocal (and sfOther with other).
func sfLink(general, other bool) *Link {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port}, generalOnly: general}
	addrs := []netip.Addr{sfLocal}
	if other {
		addrs = append(addrs, sfOther)
	}
	l.SetAddrs(addrs)
	l.rx.hguess = 99
	return l
}

// sfOutcome is everything a frame's handling leaves that the engine or
// a later read sees.
type sfOutcome struct {
	Took           bool // shortFrame took the frame
	Got, Nseg, Lay int
	Stop           bool
	Pkts           []string
	Stats          map[string]uint64
	Hguess         int
}

// sfRun hands a copy of frame to l as ringDirect does, with pkts buffers
// of capacity bufCap each, and returns the outcome.
func sfRun(l *Link, frame, name []byte, pkts, bufCap int) sfOutcome {
	b := append([]byte(nil), frame...)
	ps := make([]link.Packet, pkts)
	for i := range ps {
		ps[i].Buf = make([]byte, 0, bufCap)
	}
	var o sfOutcome
	var ok bool
	o.Got, o.Nseg, o.Lay, ok = l.shortFrame(ps, b, name)
	o.Took = ok
	if !ok {
		o.Got, o.Nseg, o.Lay, o.Stop = l.generalFrame(ps, b, name)
	}
	for i := range o.Got {
		pk := &ps[i]
		t := pk.Transport()
		parsed := pk.Parsed.Holds(t, wire.RoCEv2)
		o.Pkts = append(o.Pkts, fmt.Sprintf("off %d len %d addr %+v parsed %v op %v payload %x icrc %x",
			pk.Off, pk.Len, pk.Addr, parsed, pk.Parsed.Info.Name, pk.Parsed.Payload(), pk.Parsed.ICRC()))
	}
	o.Stats = l.stats.Snapshot()
	o.Hguess = l.rx.hguess
	return o
}

// sfDiff runs frame through both paths and fails the test if they differ;
// it returns the short path's outcome.
func sfDiff(t testing.TB, frame, name []byte, pkts, bufCap int, other bool) sfOutcome {
	t.Helper()
	g := sfRun(sfLink(true, other), frame, name, pkts, bufCap)
	s := sfRun(sfLink(false, other), frame, name, pkts, bufCap)
	if g.Took {
		t.Fatalf("the general-only link took the frame in its short path")
	}
	took := s.Took
	s.Took = false
	if !reflect.DeepEqual(g, s) {
		t.Fatalf("the paths differ (short took the frame: %v):\ngeneral %+v\nshort   %+v", took, g, s)
	}
	s.Took = took
	return s
}

func TestShortFrame(t *testing.T) {
	one := []sfSeg{{payload: 64}}
	answer := []sfSeg{{payload: 64}, {ack: true}}
	set := func(off int, v ...byte) func([]byte) {
		return func(b []byte) { copy(b[off:], v) }
	}
	const ip = vnetLen + wire.EthernetLen
	const udp = ip + wire.IPv4MinLen
	be16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	cases := []struct {
		name    string
		segs    []sfSeg
		fixedID bool
		dst     netip.Addr
		pad     int
		cut     int // the frame's length, if not 0
		mod     func([]byte)
		pkttype byte
		pkts    int
		bufCap  int
		other   bool
		take    bool // the short path must take it
		got     int  // packets delivered
	}{
		{name: "one SEND", segs: one, take: true, got: 1},
		{name: "the answer and its ACK, one GSO message", segs: answer, take: true, got: 2},
		{name: "three segments", segs: []sfSeg{{payload: 256}, {payload: 256}, {payload: 100}}, take: true, got: 3},
		{name: "GSO, the sender's ID fixed", segs: answer, fixedID: true, take: true, got: 2},
		{name: "to a second local address", segs: one, dst: sfOther, other: true, take: true, got: 1},
		{name: "Ethernet padding after the datagram", segs: []sfSeg{{ack: true}}, pad: 6, take: true, got: 1},
		{name: "the UDP length wrong (the IP length rules)", segs: one, mod: be16(udp+4, 9), take: true, got: 1},
		{name: "GSO, a segment's ID neither its own nor the first's", segs: []sfSeg{{payload: 64}, {ack: true, id: 0x4242 + 5}}, take: true, got: 1},
		{name: "the ICRC wrong", segs: one, mod: func(b []byte) { b[len(b)-1] ^= 1 }, take: true},
		{name: "the second segment's ICRC wrong", segs: answer, mod: func(b []byte) { b[len(b)-1] ^= 1 }, take: true, got: 1},
		{name: "a segment malformed (unknown opcode)", segs: answer, mod: set(udp+wire.UDPLen, 0xFF), take: true, got: 1},
		{name: "a segment longer than its buffer", segs: answer, bufCap: fh + 40, take: true, got: 1},

		{name: "a frame cut short in its headers", segs: one, mod: nil, cut: vnetLen + wire.EthernetLen + 20},
		{name: "another host's frame", segs: one, pkttype: unix.PACKET_OTHERHOST},
		{name: "a group's frame", segs: one, pkttype: unix.PACKET_MULTICAST, got: 1},
		{name: "our own frame", segs: one, pkttype: unix.PACKET_OUTGOING},
		{name: "a GSO type not UDP", segs: answer, mod: set(1, 3)},
		{name: "IPv6's Ethertype", segs: one, mod: be16(vnetLen+12, wire.EtherTypeIPv6)},
		{name: "not IP", segs: one, mod: be16(vnetLen+12, 0x0806)},
		{name: "IP options (IHL 6)", segs: one, mod: set(ip, 0x46)},
		{name: "IP version 6 in an IPv4 Ethertype", segs: one, mod: set(ip, 0x65)},
		{name: "not UDP", segs: one, mod: set(ip+9, 6)},
		{name: "a first fragment (MF)", segs: one, mod: set(ip+6, 0x60)},
		{name: "a later fragment", segs: one, mod: be16(ip+6, 0x4001)},
		{name: "another UDP port", segs: one, mod: be16(udp+2, 4792)},
		{name: "an IP length too short for a BTH and ICRC", segs: one, mod: be16(ip+2, 28+15)},
		{name: "an IP length past the frame", segs: one, mod: be16(ip+2, 28+12+64+4+1)},
		{name: "to another address", segs: one, dst: sfOther},
		{name: "more segments than buffers", segs: answer, pkts: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dst := c.dst
			if !dst.IsValid() {
				dst = sfLocal
			}
			f := sfFrame(t, c.segs, c.fixedID, dst, c.pad)
			if c.mod != nil {
				c.mod(f)
			}
			if c.cut != 0 {
				f = f[:c.cut]
			}
			pkttype := c.pkttype
			if pkttype == 0 {
				pkttype = unix.PACKET_HOST
			}
			pkts, bufCap := c.pkts, c.bufCap
			if pkts == 0 {
				pkts = 4
			}
			if bufCap == 0 {
				bufCap = fh + 2048
			}
			o := sfDiff(t, f, sfName(pkttype), pkts, bufCap, c.other)
			if o.Took != c.take || o.Got != c.got {
				t.Fatalf("short path took the frame: %v, delivered %d; want %v, %d (%+v)", o.Took, o.Got, c.take, c.got, o)
			}
		})
	}
}

// TestShortFrameKeepsUp changes the local addresses between frames from one
// peer: the short path's remembered addressing must follow.
func TestShortFrameKeepsUp(t *testing.T) {
	f := sfFrame(t, []sfSeg{{payload: 64}}, false, sfLocal, 0)
	l := sfLink(false, false)
	run := func() sfOutcome { return sfRun(l, f, sfName(unix.PACKET_HOST), 4, fh+2048) }
	if o := run(); !o.Took || o.Got != 1 {
		t.Fatalf("first frame: %+v", o)
	}
	l.SetAddrs([]netip.Addr{sfOther})
	if o := run(); o.Took || o.Got != 0 || o.Stats["rx_drop_not_for_us"] != 1 {
		t.Fatalf("after the address left: %+v", o)
	}
	l.SetAddrs([]netip.Addr{sfLocal})
	if o := run(); !o.Took || o.Got != 1 {
		t.Fatalf("after it came back: %+v", o)
	}
	// From the same peer to another address, not local.
	f2 := sfFrame(t, []sfSeg{{payload: 64}}, false, sfOther, 0)
	if o := sfRun(l, f2, sfName(unix.PACKET_HOST), 4, fh+2048); o.Took || o.Got != 0 {
		t.Fatalf("to an address not local: %+v", o)
	}
	// A group joined, then left: its frames are local, then not.
	group := netip.MustParseAddr("::ffff:239.1.2.3")
	g := sfFrame(t, []sfSeg{{payload: 64}}, false, group, 0)
	l.mc.groups.Store(&map[netip.Addr]bool{group: true})
	if o := sfRun(l, g, sfName(unix.PACKET_HOST), 4, fh+2048); !o.Took || o.Got != 1 {
		t.Fatalf("to a group joined: %+v", o)
	}
	l.mc.groups.Store(&map[netip.Addr]bool{})
	if o := sfRun(l, g, sfName(unix.PACKET_HOST), 4, fh+2048); o.Took || o.Got != 0 {
		t.Fatalf("to a group left: %+v", o)
	}
}

// FuzzShortFrameDiff builds a frame of up to four segments, overwrites
// bytes of it where the fuzzer says, and holds the two paths to each other.
func FuzzShortFrameDiff(f *testing.F) {
	f.Add(uint8(1), uint8(64), false, uint8(0), []byte{})
	f.Add(uint8(2), uint8(64), true, uint8(0), []byte{30, 0x46})
	f.Add(uint8(3), uint8(200), false, uint8(1), []byte{12, 0x86, 13, 0xDD})
	f.Fuzz(func(t *testing.T, nseg, payload uint8, fixedID bool, knobs uint8, edits []byte) {
		segs := make([]sfSeg, 1+int(nseg)%4)
		for i := range segs {
			segs[i].payload = int(payload)
		}
		if nseg&0x80 != 0 {
			segs[len(segs)-1] = sfSeg{ack: true}
		}
		fr := sfFrame(t, segs, fixedID, sfLocal, 0)
		for i := 0; i+1 < len(edits); i += 2 {
			fr[int(edits[i])%len(fr)] = edits[i+1]
		}
		pkttype := []byte{unix.PACKET_HOST, unix.PACKET_HOST, unix.PACKET_MULTICAST, unix.PACKET_OTHERHOST}[knobs&3]
		pkts := 1 + int(knobs>>2&3)
		bufCap := fh + 2048
		if knobs&0x10 != 0 {
			bufCap = fh + 64 + int(payload)
		}
		sfDiff(t, fr, sfName(pkttype), pkts, bufCap, knobs&0x20 != 0)
	})
}
