package udp

// shortMsg is held to Send's general loop here: the same batches, sent by
// a link with the short path and by one without (generalOnly), must put
// the same datagrams on the wire, leave the same bytes in the packets'
// buffers and the same counters and state, and the short path must take
// exactly the batches the case says (each check fails alone in one).

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// smPkt is a packet to send: an RC SEND of n bytes of transport (BTH,
// payload, ICRC), to peer dst (an index into smAddrs), with traffic class
// tc, at offset off of its buffer (0: the headroom), or (bad) to an
// address the link cannot send to.
type smPkt struct {
	n, dst int
	src    bool // from 127.0.0.4, not the link's own 127.0.0.1
	tc     uint8
	off    int // the packet's offset in its buffer, if not the headroom
	bad    bool
	zero   bool // to and from the zero netip.Addr
}

var smAddrs = []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.2"), netip.MustParseAddr("::ffff:127.0.0.3")}

// smRun sends batches from a fresh link on 127.0.0.1:port (short path
// on or off) to receivers on smAddrs, and returns a transcript: each
// Send's result, the packets' buffers after it, what each receiver got,
// the counters, and the batches shortMsg took.
func smRun(t *testing.T, port uint16, rx []*net.UDPConn, general bool, batch, offAt int, batches [][]smPkt) (string, []int) {
	t.Helper()
	lo := netip.MustParseAddr("127.0.0.1")
	l, err := New(Config{Bind: lo, Port: port, Addrs: []netip.Addr{lo}, BatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.generalOnly = general
	var out string
	var took []int
	for i, b := range batches {
		if i == offAt-1 {
			l.gsoOff.Store(true) // as after the kernel refused a GSO message
		}
		pkts := make([]link.Packet, len(b))
		for j, p := range b {
			buf := make([]byte, link.FrameHeadroom+p.n+64)
			off := link.FrameHeadroom
			if p.off != 0 {
				off = p.off
			}
			tp := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, DestQP: 5, PSN: wire.PSN(i*10 + j)}}
			hdr := tp.AppendTransport(nil)
			copy(buf[off:], hdr[:wire.BTHLen])
			for k := off + wire.BTHLen; k < off+p.n; k++ {
				buf[k] = byte(i + j + k)
			}
			src := netip.MustParseAddr("::ffff:127.0.0.1")
			if p.src {
				src = netip.MustParseAddr("::ffff:127.0.0.4")
			}
			dst := smAddrs[p.dst]
			if p.bad {
				dst = netip.MustParseAddr("fe80::1")
			}
			if p.zero {
				src, dst = netip.Addr{}, netip.Addr{}
			}
			pkts[j] = link.Packet{Buf: buf, Off: off, Len: p.n, Addr: link.Addr{Version: wire.RoCEv2, SrcGID: src, DstGID: dst, TrafficClass: p.tc}}
		}
		before := l.shortMsgs
		n, err := l.Send(pkts)
		if l.shortMsgs != before {
			took = append(took, i)
		}
		out += fmt.Sprintf("batch %d: sent %d err %v\n", i, n, err)
		for j := range pkts {
			out += fmt.Sprintf("  buf %x\n", pkts[j].Buf)
		}
		for r, got := range smCollect(rx, n) {
			for _, d := range got {
				out += fmt.Sprintf("  rx%d %s\n", r, d)
			}
		}
	}
	out += fmt.Sprintf("stats %v gso %d fallbacks %d\n", l.stats.Snapshot(), l.GSOMessages.Load(), l.GSOFallbacks.Load())
	for _, a := range smAddrs {
		if tl := l.dsts[a]; tl != nil {
			out += fmt.Sprintf("tally %v %+v\n", a, *tl)
		}
	}
	return out, took
}

// smCollect reads the datagrams of a batch of n packets from the
// receivers rx (each packet one datagram: the receivers do not ask for
// GRO), waiting up to testenv.Slow for all n, then for any more: each
// receiver's, in the order it got them, as its source address and bytes.
func smCollect(rx []*net.UDPConn, n int) [][]string {
	got := make([][]string, len(rx))
	buf := make([]byte, 65536)
	read := func(r int, wait time.Duration) bool {
		rx[r].SetReadDeadline(time.Now().Add(wait))
		k, from, err := rx[r].ReadFromUDPAddrPort(buf)
		if err != nil {
			return false
		}
		got[r] = append(got[r], fmt.Sprintf("from %v: %x", from.Addr(), buf[:k]))
		return true
	}
	deadline := time.Now().Add(testenv.Slow)
	for have := 0; have < n && time.Now().Before(deadline); {
		for r := range rx {
			if read(r, time.Millisecond) {
				have++
			}
		}
	}
	for r := range rx {
		for read(r, 5*time.Millisecond) {
		}
	}
	return got
}

func TestShortMsg(t *testing.T) {
	answer := []smPkt{{n: 80}, {n: 20}}
	send := []smPkt{{n: 80}}
	cases := []struct {
		name    string
		batch   int
		offAt   int // GSO turned off before batch offAt-1, if not 0
		batches [][]smPkt
		took    []int
	}{
		{name: "the answer and its ACK, again and again", batches: [][]smPkt{answer, answer, answer}, took: []int{1, 2}},
		{name: "one packet, again", batches: [][]smPkt{send, send}, took: []int{1}},
		{name: "two of one size", batches: [][]smPkt{{{n: 80}, {n: 80}}, {{n: 80}, {n: 80}}}, took: []int{1}},
		{name: "the message's segment size changes", batches: [][]smPkt{answer, {{n: 60}, {n: 20}}, send}},
		{name: "an empty batch", batches: [][]smPkt{answer, {}, answer}, took: []int{2}},
		{name: "three packets", batches: [][]smPkt{answer, {{n: 80}, {n: 20}, {n: 20}}}},
		{name: "three packets after one", batches: [][]smPkt{send, send, {{n: 80}, {n: 20}, {n: 20}}}, took: []int{1}},
		{name: "the second longer", batches: [][]smPkt{answer, {{n: 20}, {n: 80}}}},
		{name: "the second longer than the last message's first", batches: [][]smPkt{{{n: 20}, {n: 20}}, {{n: 20}, {n: 80}}}},
		{name: "the second to another peer", batches: [][]smPkt{answer, {{n: 80}, {n: 20, dst: 1}}}},
		{name: "the second with another traffic class", batches: [][]smPkt{answer, {{n: 80}, {n: 20, tc: 4}}}},
		{name: "the second not sendable", batches: [][]smPkt{answer, {{n: 80}, {n: 20, bad: true}}}},
		{name: "the second not sendable, to the same peer", batches: [][]smPkt{answer, {{n: 80}, {n: 20, off: 8}}}},
		{name: "from slot 0's source, not the last message's", batches: [][]smPkt{{{n: 80}, {n: 80, src: true}}, send, send}, took: []int{2}},
		{name: "with no destination GID", batches: [][]smPkt{{{n: 80, zero: true}}, {{n: 80, zero: true}}}},
		{name: "the first not sendable", batches: [][]smPkt{answer, {{n: 80, bad: true}, {n: 20}}, send, {{n: 80, off: 8}}, send}, took: []int{2, 4}},
		{name: "another peer", batches: [][]smPkt{answer, {{n: 80, dst: 1}, {n: 20, dst: 1}}, answer}},
		// The headers' cache and slot 0's name and control messages are
		// for different packets: the batch's last, and its first.
		{name: "to the last message's peer, not slot 0's", batches: [][]smPkt{{{n: 80, dst: 1}, {n: 80}}, send, send}, took: []int{2}},
		{name: "to slot 0's peer, not the last message's", batches: [][]smPkt{{{n: 80}, {n: 80, dst: 1}}, send, send}, took: []int{2}},
		{name: "from the last message's source, not slot 0's", batches: [][]smPkt{{{n: 80}, {n: 80, src: true}}, {{n: 80, src: true}}, {{n: 80, src: true}}}, took: []int{2}},
		{name: "another source", batches: [][]smPkt{send, {{n: 80, src: true}}, send}},
		{name: "another traffic class", batches: [][]smPkt{answer, {{n: 80, tc: 8}, {n: 20, tc: 8}}, {{n: 80, tc: 8}, {n: 20, tc: 8}}}, took: []int{2}},
		// Without GSO (or room for a second message) the answer and the ACK
		// leave as two messages, the answer's in slot 0: a lone packet's.
		{name: "GSO off", offAt: 1, batches: [][]smPkt{answer, answer, send, send}, took: []int{2, 3}},
		{name: "GSO turned off after a GSO message", offAt: 3, batches: [][]smPkt{answer, answer, answer, send, send}, took: []int{1, 3, 4}},
		{name: "a batch of one message slot", batch: 1, batches: [][]smPkt{answer, answer, send, send}, took: []int{2, 3}},
	}
	rx := make([]*net.UDPConn, len(smAddrs))
	port := freeUDPPort(t)
	for i, a := range smAddrs {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: a.Unmap().AsSlice(), Port: int(port)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		rx[i] = c
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			batch := c.batch
			if batch == 0 {
				batch = 8
			}
			g, gtook := smRun(t, port, rx, true, batch, c.offAt, c.batches)
			s, took := smRun(t, port, rx, false, batch, c.offAt, c.batches)
			if gtook != nil {
				t.Fatalf("the general-only link took batches %v", gtook)
			}
			if g != s {
				t.Fatalf("the paths differ:\ngeneral:\n%s\nshort:\n%s", g, s)
			}
			if !reflect.DeepEqual(took, c.took) {
				t.Fatalf("short path took batches %v, want %v\n%s", took, c.took, s)
			}
		})
	}
}

// TestSendableNeedsDestination: a packet to the zero netip.Addr is not
// sendable, on a dual-stack link too, where the families agree (neither
// is IPv4): shortMsg takes a header cache and a message slot not yet set,
// which are for the zero Addr, as not its packet's for that reason.
func TestSendableNeedsDestination(t *testing.T) {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port, MTU: 4096}}
	buf := make([]byte, link.FrameHeadroom+64)
	pk := link.Packet{Buf: buf, Off: link.FrameHeadroom, Len: 64, Addr: link.Addr{Version: wire.RoCEv2}}
	if l.sendable(&pk) {
		t.Fatal("a packet to the zero Addr is sendable")
	}
	pk.Addr.SrcGID, pk.Addr.DstGID = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	if !l.sendable(&pk) {
		t.Fatal("a packet between two IPv6 GIDs is not sendable")
	}
}
