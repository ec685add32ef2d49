package verbs_test

// Hostile peers: each attack of issue 11 driven packet by packet, as a peer
// that owns no QP would send it, into a live device. Every test runs over
// the fabric (an injecting port) and over a real link: the device on
// link/udp on loopback, the attacker a plain UDP socket sending datagrams
// built with package wire and a correct ICRC.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// injector sends transport packets (BTH to payload; the ICRC is the
// injector's business) from the attacker's address to the victim's, and
// collects what the victim sends back to that address.
type injector interface {
	send(t testing.TB, transport []byte)
	// responses returns the transport packets the victim has sent to the
	// attacker's address so far.
	responses() [][]byte
	close()
}

// victim is a live device under attack: an RC and a UC QP in RTS whose
// peer is the address the attacker sends from, and a UD QP the test uses
// as a probe.
type victim struct {
	dev     *verbs.Device
	pd      *verbs.PD
	cq      *verbs.CQ // the RC and UC QPs' send and receive completions
	rc, uc  *verbs.QP
	probe   *verbs.QP // UD, for the application's own sends
	probeCQ *verbs.CQ
	ping    *verbs.QP // RC, for sync
	pingN   int
	inj     injector
	mtu     int
	peer    netip.Addr // the attacker's (spoofed) address, the connected QPs' peer
}

const (
	hostilePeerQPN = 0x77   // the QPN the victim's connected QPs think their peer has
	hostilePSN     = 0x1000 // rq_psn of the victim's connected QPs
)

// hostileLinks are the networks an attack runs over.
var hostileLinks = []string{"fabric", "udp-loopback"}

// eachHostileLink runs f with a fresh victim on every link.
func eachHostileLink(t *testing.T, f func(t *testing.T, v *victim)) {
	for _, l := range hostileLinks {
		t.Run(l, func(t *testing.T) { f(t, newVictim(t, l)) })
	}
}

func newVictim(t *testing.T, kind string) *victim {
	t.Helper()
	var (
		lk        link.Link
		vgid, src netip.Addr
		inj       injector
	)
	switch kind {
	case "fabric":
		fab := fabric.New()
		t.Cleanup(func() { fab.Close() })
		vgid, src = netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")
		port, err := fab.AddPort(fabric.PortConfig{Name: "victim", GIDs: []netip.Addr{vgid}})
		if err != nil {
			t.Fatal(err)
		}
		ap, err := fab.AddPort(fabric.PortConfig{Name: "attacker", GIDs: []netip.Addr{src}})
		if err != nil {
			t.Fatal(err)
		}
		lk = port
		inj = newFabricInjector(ap, src, vgid)
	case "udp-loopback":
		var ul *udp.Link
		ul, inj, vgid, src = newUDPVictimLink(t)
		lk = ul
	default:
		t.Fatalf("no link %q", kind)
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Name: "victim0", Link: lk, GIDs: []verbs.GIDEntry{{GID: vgid, Type: verbs.GIDTypeRoCEv2}}})
	if err != nil {
		t.Fatal(err)
	}
	v := &victim{dev: dev, inj: inj, mtu: 1024}
	t.Cleanup(func() {
		dev.Close()
		inj.close()
	})
	if v.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if v.cq, err = dev.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if v.probeCQ, err = dev.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	mk := func(typ verbs.QPType, cq *verbs.CQ) *verbs.QP {
		qp, err := v.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
		if err != nil {
			t.Fatal(err)
		}
		return qp
	}
	v.rc, v.uc, v.probe = mk(verbs.RC, v.cq), mk(verbs.UC, v.cq), mk(verbs.UD, v.probeCQ)
	v.ping = mk(verbs.RC, v.probeCQ)
	for _, qp := range []*verbs.QP{v.rc, v.uc, v.ping} {
		init := &verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: allRemote}
		if err := qp.Modify(init, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
		dqpn := uint32(hostilePeerQPN)
		if qp == v.ping {
			dqpn++
		}
		rtr := &verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: dqpn, RQPSN: hostilePSN,
			MaxDestRdAtomic: 16, MinRNRTimer: 12, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: src, HopLimit: 64}}}
		m := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
		if qp.Type() == verbs.RC {
			m |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		}
		if err := qp.Modify(rtr, m); err != nil {
			t.Fatal(err)
		}
		rts := &verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x2000, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
		m = verbs.AttrState | verbs.AttrSQPSN
		if qp.Type() == verbs.RC {
			m |= verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		}
		if err := qp.Modify(rts, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.probe.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: udQKey},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	if err := v.probe.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := v.probe.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		t.Fatal(err)
	}
	v.peer = src
	return v
}

// sync returns once the victim has handled every packet sent before and
// its answers have reached the attacker: an RDMA WRITE of no data to the
// victim's ping QP, which the device's one receive goroutine handles after
// them, is acknowledged, and the ACK arrives behind theirs.
func (v *victim) sync(t testing.TB) {
	t.Helper()
	psn := wire.PSN(hostilePSN + v.pingN)
	v.pingN++
	v.send(t, v.ping, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, int(psn-hostilePSN), nil), 0, 0, 0))
	deadline := time.Now().Add(pollTimeout)
	for {
		for _, b := range v.inj.responses() {
			if bth := wire.BTH(b); bth.DestQP() == hostilePeerQPN+1 && bth.PSN() == psn {
				// Order the test after the device's handling (the race
				// detector does not see through a UDP socket).
				v.dev.Barrier()
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ACK of ping PSN %v within %v: the device stopped handling packets", psn, pollTimeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// answers returns what the victim sent to the attacker's address, but the
// ping QP's ACKs.
func (v *victim) answers() [][]byte {
	var out [][]byte
	for _, b := range v.inj.responses() {
		if wire.BTH(b).DestQP() != hostilePeerQPN+1 {
			out = append(out, b)
		}
	}
	return out
}

// send injects one packet built from f, addressed to qp.
func (v *victim) send(t testing.TB, qp *verbs.QP, f wire.PacketFields) {
	t.Helper()
	f.BTH.PKey, f.BTH.DestQP = wire.DefaultPKey, qp.Num()
	v.dev.Barrier() // what the test did to memory comes before the packet's handling
	v.inj.send(t, f.AppendTransport(nil))
}

// pkt is shorthand for a packet's fields.
func pkt(op wire.Opcode, psn int, payload []byte) wire.PacketFields {
	return wire.PacketFields{BTH: wire.BTHFields{Opcode: op, PSN: wire.PSN(hostilePSN + psn), AckReq: true}, Payload: payload}
}

func withRETH(f wire.PacketFields, va uint64, rkey uint32, n uint32) wire.PacketFields {
	f.Ext.RETH = wire.RETHFields{VA: va, RKey: rkey, DMALength: n}
	return f
}

// counter returns a counter of qp by name.
func qpCounter(qp *verbs.QP, name string) uint64 { return counterOf(qp.Counters(), name) }

// fabricInjector is an attacker port on the fabric; the fabric computes
// the ICRC.
type fabricInjector struct {
	port     *fabric.Port
	src, dst netip.Addr
	mu       sync.Mutex
	got      [][]byte // guarded by mu: the first maxKept packets
	n        int      // guarded by mu: packets received
	done     chan struct{}
}

// maxKept bounds the packets an injector keeps (a READ of megabytes
// answers with thousands); it counts the rest.
const maxKept = 4096

func newFabricInjector(p *fabric.Port, src, dst netip.Addr) *fabricInjector {
	f := &fabricInjector{port: p, src: src, dst: dst, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		bufs := make([]link.Packet, 64)
		for i := range bufs {
			bufs[i].Buf = make([]byte, 0, link.MaxFrameSize)
		}
		for {
			n, err := p.Recv(bufs)
			if err != nil {
				return
			}
			f.mu.Lock()
			for i := range bufs[:n] {
				tr := bufs[i].Transport()
				if f.n++; len(f.got) < maxKept {
					f.got = append(f.got, append([]byte(nil), tr[:len(tr)-wire.ICRCLen]...))
				}
			}
			f.mu.Unlock()
		}
	}()
	return f
}

func (f *fabricInjector) send(t testing.TB, transport []byte) {
	t.Helper()
	b := make([]byte, link.FrameHeadroom, link.FrameHeadroom+len(transport)+wire.ICRCLen)
	b = append(b, transport...)
	b = append(b, 0, 0, 0, 0)
	pk := link.Packet{Buf: b, Off: link.FrameHeadroom, Len: len(b) - link.FrameHeadroom,
		Addr: link.Addr{Version: wire.RoCEv2, SrcGID: f.src, DstGID: f.dst, UDPSrcPort: 4791, HopLimit: 64}}
	if n, err := f.port.Send([]link.Packet{pk}); err != nil || n != 1 {
		t.Fatalf("inject: %d sent, %v", n, err)
	}
}

func (f *fabricInjector) responses() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.got...)
}

func (f *fabricInjector) close() {
	f.port.Close()
	<-f.done
}

// udpInjector is a plain UDP socket: it sends each packet as a datagram
// whose ICRC it computes over the IPv4 and UDP headers the victim's link
// reconstructs (IPv4 with DF, Identification 0, the ports of the socket).
type udpInjector struct {
	conn     *net.UDPConn
	src, dst netip.AddrPort
	mu       sync.Mutex
	got      [][]byte // guarded by mu: the first maxKept packets
	n        int      // guarded by mu: packets received
	done     chan struct{}
}

// newUDPVictimLink binds a link/udp link for the victim on a fresh
// loopback address and a free port, and the attacker's socket on another
// loopback address and the same port (where the victim's responses to its
// peer arrive).
func newUDPVictimLink(t *testing.T) (*udp.Link, *udpInjector, netip.Addr, netip.Addr) {
	t.Helper()
	for try := 0; try < 20; try++ {
		x := byte(time.Now().UnixNano()>>10) | 1
		y := byte(try*7 + 3)
		vip, aip := netip.AddrFrom4([4]byte{127, 77, x, y}), netip.AddrFrom4([4]byte{127, 77, x, y + 1})
		conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(aip, 0)))
		if err != nil {
			continue
		}
		port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
		l, err := udp.New(udp.Config{Bind: vip, Port: port, Addrs: []netip.Addr{vip}, MTU: 4096 + 64})
		if err != nil {
			conn.Close()
			continue
		}
		u := &udpInjector{conn: conn, src: netip.AddrPortFrom(aip, port), dst: netip.AddrPortFrom(vip, port), done: make(chan struct{})}
		go u.read()
		return l, u, netip.AddrFrom16(vip.As16()), netip.AddrFrom16(aip.As16())
	}
	t.Fatal("no free loopback address and port for the UDP victim")
	return nil, nil, netip.Addr{}, netip.Addr{}
}

func (u *udpInjector) read() {
	defer close(u.done)
	buf := make([]byte, 65536)
	for {
		n, err := u.conn.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // an ICMP error of an earlier datagram
		}
		if n >= wire.BTHLen+wire.ICRCLen {
			u.mu.Lock()
			if u.n++; len(u.got) < maxKept {
				u.got = append(u.got, append([]byte(nil), buf[:n-wire.ICRCLen]...))
			}
			u.mu.Unlock()
		}
	}
}

func (u *udpInjector) send(t testing.TB, transport []byte) {
	t.Helper()
	b := buildUDPDatagram(u.src, u.dst, transport)
	if _, err := u.conn.WriteToUDPAddrPort(b, u.dst); err != nil {
		t.Fatalf("send: %v", err)
	}
}

// buildUDPDatagram returns the UDP payload (transport packet and ICRC) of
// a RoCE v2 packet from src to dst, the ICRC computed as IBTA A17.8
// defines it over an IPv4 header with DF and Identification 0.
func buildUDPDatagram(src, dst netip.AddrPort, transport []byte) []byte {
	const hl = wire.IPv4MinLen + wire.UDPLen
	b := make([]byte, hl, hl+len(transport)+wire.ICRCLen)
	b = append(b, transport...)
	total := len(b) + wire.ICRCLen
	ip := b[:wire.IPv4MinLen]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(total))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8], ip[9] = 64, wire.IPProtocolUDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	u := b[wire.IPv4MinLen:hl]
	binary.BigEndian.PutUint16(u[0:], src.Port())
	binary.BigEndian.PutUint16(u[2:], dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(total-wire.IPv4MinLen))
	crc := wire.ICRC(b, wire.IPv4MinLen, wire.RoCEv2)
	b = binary.LittleEndian.AppendUint32(b, crc)
	return b[hl:]
}

func (u *udpInjector) responses() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.got...)
}

func (u *udpInjector) close() {
	u.conn.Close()
	<-u.done
}

// readResponses returns the READ responses among pkts, parsed.
func readResponses(t testing.TB, pkts [][]byte) []*wire.Packet {
	t.Helper()
	var out []*wire.Packet
	for _, b := range pkts {
		p := new(wire.Packet)
		if err := p.ParseTransport(append(b, 0, 0, 0, 0), wire.RoCEv2); err != nil {
			t.Fatalf("the victim sent a packet that does not parse: %v", err)
		}
		if p.Info.Is(wire.FlagReadResponse) {
			out = append(out, p)
		}
	}
	return out
}

// TestHostileUCSendFirstWriteMiddle is the remote crash: on a UC QP that
// has completed an RDMA WRITE (of two packets: its target and DMA length
// stayed behind) and has a receive posted, SEND_FIRST then WRITE_MIDDLE.
// The WRITE_MIDDLE continued the SEND as if it were a WRITE and copied
// into the old target at the SEND's offset: slice bounds out of range
// [1024:0], a panic that ended every QP of the process. It is dropped now
// (a MIDDLE of another kind than the message in progress, IBTA
// §9.7.4.1.4), the message with it; the QP keeps working, and the receive
// the SEND took is filled by the next SEND.
func TestHostileUCSendFirstWriteMiddle(t *testing.T) {
	eachHostileLink(t, func(t *testing.T, v *victim) {
		target := newCanary(t, v.pd, 4096, allRemote)
		rbuf := newCanary(t, v.pd, 2048, verbs.AccessLocalWrite)
		mustPostRecv(t, v.uc, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rbuf.mr.SGE(0, 2048)}})
		w := randBytes(2048, 1)
		v.send(t, v.uc, withRETH(pkt(wire.TransportUC|wire.OpWriteFirst, 0, w[:1024]), target.addr(0), target.mr.RKey(), 2048))
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpWriteLast, 1, w[1024:]))
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendFirst, 2, randBytes(1024, 2)))
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpWriteMiddle, 3, randBytes(1024, 3)))
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpWriteLast, 4, randBytes(10, 4)))
		v.sync(t)
		target.check(t, piece{0, w})
		wantEmpty(t, v.cq)
		if n := qpCounter(v.uc, "rcvd_bad_op_seq"); n != 1 {
			t.Errorf("rcvd_bad_op_seq %d, want 1 (the WRITE_MIDDLE; the WRITE_LAST behind it is dropped with the message)", n)
		}
		// The QP works, and the receive the lost SEND took is filled
		// from its start by the next SEND.
		msg := randBytes(1500, 5)
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendFirst, 5, msg[:1024]))
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendLast, 6, msg[1024:]))
		if wc := wantOK(t, v.cq, 1, verbs.WCRecv); wc.ByteLen != 1500 {
			t.Errorf("byte_len %d, want 1500", wc.ByteLen)
		}
		rbuf.check(t, piece{0, msg}, piece{1500, rbuf.region()[1500:]})
		if s := v.uc.State(); s != verbs.QPSRTS {
			t.Errorf("UC QP in %v, want RTS", s)
		}
	})
}

// TestHostileUCWriteFirstSendLast is the write into a completed receive:
// WRITE_FIRST with DMA length 0 (no rkey checked) then SEND_LAST. The SEND
// continued the WRITE, placed its payload into the receive that had
// completed last (memory the application owns again, registered
// LOCAL_WRITE only) and completed it a second time. The WRITE_FIRST now
// fails the length check (a FIRST carries the path MTU, and an RDMA WRITE
// no more than its DMA length), the SEND_LAST continues no message of its
// kind, and both are dropped and counted.
func TestHostileUCWriteFirstSendLast(t *testing.T) {
	eachHostileLink(t, func(t *testing.T, v *victim) {
		rbuf := newCanary(t, v.pd, 1024, verbs.AccessLocalWrite)
		next := newCanary(t, v.pd, 1024, verbs.AccessLocalWrite)
		mustPostRecv(t, v.uc, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rbuf.mr.SGE(0, 1024)}},
			verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{next.mr.SGE(0, 1024)}})
		first := randBytes(100, 6)
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendOnly, 0, first))
		if wc := wantOK(t, v.cq, 1, verbs.WCRecv); wc.ByteLen != 100 {
			t.Fatalf("byte_len %d, want 100", wc.ByteLen)
		}
		done := bytes2(rbuf.region())
		for _, payload := range [][]byte{nil, randBytes(1024, 7)} {
			v.send(t, v.uc, withRETH(pkt(wire.TransportUC|wire.OpWriteFirst, 1, payload), 0, 0, 0))
			v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendLast, 2, randBytes(200, 8)))
			v.sync(t)
		}
		rbuf.check(t, piece{0, done})
		next.check(t)
		wantEmpty(t, v.cq)
		if n := qpCounter(v.uc, "rcvd_bad_length"); n != 2 {
			t.Errorf("rcvd_bad_length %d, want 2 (the WRITE_FIRSTs)", n)
		}
		if n := qpCounter(v.uc, "rcvd_bad_op_seq"); n != 0 {
			t.Errorf("rcvd_bad_op_seq %d, want 0 (the SEND_LASTs are dropped with the messages)", n)
		}
		// The next message goes to the next receive, once.
		v.send(t, v.uc, pkt(wire.TransportUC|wire.OpSendOnly, 3, first[:50]))
		wantOK(t, v.cq, 2, verbs.WCRecv)
		v.sync(t)
		wantEmpty(t, v.cq)
	})
}

func bytes2(b []byte) []byte { return append([]byte(nil), b...) }

// acks returns the syndromes of the ACKs and NAKs among pkts, with their PSNs.
func acks(t testing.TB, pkts [][]byte) (syn []wire.Syndrome, psn []wire.PSN) {
	t.Helper()
	for _, b := range pkts {
		var p wire.Packet
		if err := p.ParseTransport(append(b, 0, 0, 0, 0), wire.RoCEv2); err != nil {
			t.Fatalf("the victim sent a packet that does not parse: %v", err)
		}
		if p.Opcode() == wire.OpcodeRCAcknowledge {
			syn, psn = append(syn, p.AETH().Syndrome()), append(psn, p.BTH().PSN())
		}
	}
	return syn, psn
}

// useLocally sends len bytes of mr from the victim's probe QP (a UD
// datagram to the attacker's address): the application's own use of its
// region, which fails with IBV_WC_LOC_PROT_ERR if the region was
// invalidated.
func (v *victim) useLocally(t testing.TB, mr *verbs.MR, n int) verbs.WC {
	t.Helper()
	ah, err := v.pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: v.peer}})
	if err != nil {
		t.Fatal(err)
	}
	mustPostSend(t, v.probe, verbs.SendWR{WRID: 77, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, n)}, AH: ah, RemoteQPN: 5, RemoteQKey: udQKey})
	return poll(t, v.probeCQ)
}

// TestHostileInvalidatePlainMR: SEND_WITH_INVALIDATE naming the rkey of a
// region registered with LOCAL_WRITE only (and of a region of another PD,
// and an unknown key). goroce used to invalidate the first: the
// application's next use of its own region failed with
// IBV_WC_LOC_PROT_ERR. Only fast-registration MRs and type 2 memory
// windows may be invalidated remotely (rxe_invalidate_mr; IBTA §10.6.5),
// and goroce has neither: the request is refused as rxe refuses it (the
// receive completes with IBV_WC_REM_INV_REQ_ERR and the QP goes to ERR;
// goroce NAKs it Invalid Request where rxe ACKs it) and the region stays
// valid.
func TestHostileInvalidatePlainMR(t *testing.T) {
	for _, c := range []string{"plain-mr", "other-pd", "unknown-key"} {
		t.Run(c, func(t *testing.T) {
			eachHostileLink(t, func(t *testing.T, v *victim) {
				pd := v.pd
				if c == "other-pd" {
					var err error
					if pd, err = v.dev.AllocPD(); err != nil {
						t.Fatal(err)
					}
				}
				region := newCanary(t, pd, 256, verbs.AccessLocalWrite)
				rkey := region.mr.RKey()
				if c == "unknown-key" {
					rkey = 0xDEADBE00
				}
				rbuf := newCanary(t, v.pd, 256, verbs.AccessLocalWrite)
				mustPostRecv(t, v.rc, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rbuf.mr.SGE(0, 256)}})
				f := pkt(wire.TransportRC|wire.OpSendOnlyWithInvalidate, 0, randBytes(16, 9))
				f.Ext.IETH = rkey
				v.send(t, v.rc, f)
				rwc := poll(t, v.cq)
				want(t, rwc, verbs.WCRemInvReqErr, 1)
				wantWord(t, "receive Detail", rwc.Detail, fmt.Sprintf("%#x", rkey))
				ev := waitEvent(t, v.dev, verbs.EventQPReqErr, v.rc.Num())
				wantWord(t, "event Detail", ev.Detail, fmt.Sprintf("%#x", rkey))
				v.sync(t)
				if syn, psn := acks(t, v.answers()); len(syn) != 1 || syn[0].Value() != wire.NAKInvalidRequest || !syn[0].IsNAK() || psn[0] != hostilePSN {
					t.Errorf("responses %v at %v, want one NAK Invalid Request at PSN %#x", syn, psn, hostilePSN)
				}
				if pd == v.pd {
					if wc := v.useLocally(t, region.mr, 64); wc.Status != verbs.WCSuccess {
						t.Errorf("the application's own use of its region: %v (the region was invalidated)", &wc)
					}
				}
				region.check(t)
			})
		})
	}
}

// TestHostileRKeyOracle: a READ request whose PSN is behind the expected
// one was executed again from its RETH whatever its key and range, and a
// failure was a NAK the QP survived: a peer could try keys (tens of
// thousands a second) until one read a region never shared with it. A
// duplicate READ is executed again now only if it repeats a READ the QP
// executed (the same rkey; its PSNs and range, or the part of them a retry
// asks for); any other is dropped and counted, without an answer. A wrong
// key on a new request is fatal to the QP, as before.
func TestHostileRKeyOracle(t *testing.T) {
	eachHostileLink(t, func(t *testing.T, v *victim) {
		shared := newCanary(t, v.pd, 4096, allRemote)
		sdata := shared.set(0, randBytes(4096, 10))
		secret := newCanary(t, v.pd, 4096, allRemote)
		secret.set(0, randBytes(4096, 11))
		// The peer's own READ of 2 packets (PSNs 0 and 1).
		v.send(t, v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 0, nil), shared.addr(0), shared.mr.RKey(), 2048))
		v.sync(t)
		if got := len(readResponses(t, v.answers())); got != 2 {
			t.Fatalf("%d READ responses, want 2", got)
		}
		probes := []struct {
			name       string
			psn        int
			va         uint64
			rkey       uint32
			n          uint32
			replayed   int // READ responses it draws
			readsShare bool
		}{
			{"secret region, its right key", 0, secret.addr(0), secret.mr.RKey(), 2048, 0, false},
			{"secret region, a wrong key", 0, secret.addr(0), secret.mr.RKey() ^ 1, 2048, 0, false},
			{"unknown key", 1, shared.addr(1024), 0xDEADBE00, 1024, 0, false},
			{"shared region, beyond the READ", 0, shared.addr(0), shared.mr.RKey(), 4096, 0, false},
			{"shared region, another range", 0, shared.addr(2048), shared.mr.RKey(), 2048, 0, false},
			{"the READ again", 0, shared.addr(0), shared.mr.RKey(), 2048, 2, true},
			{"the rest of the READ, as a retry asks", 1, shared.addr(1024), shared.mr.RKey(), 1024, 1, true},
		}
		dropped := 0
		for _, pr := range probes {
			before := len(readResponses(t, v.answers()))
			v.send(t, v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, pr.psn, nil), pr.va, pr.rkey, pr.n))
			v.sync(t)
			got := readResponses(t, v.answers())[before:]
			if len(got) != pr.replayed {
				t.Errorf("%s: %d READ responses, want %d", pr.name, len(got), pr.replayed)
			}
			for _, r := range got {
				off := int(r.BTH().PSN()-hostilePSN) * 1024
				if !bytesEqual(r.Payload(), sdata.data[off:off+len(r.Payload())]) {
					t.Errorf("%s: response PSN %v carries bytes that are not the shared region's at offset %d", pr.name, r.BTH().PSN(), off)
				}
			}
			if pr.replayed == 0 {
				dropped++
			}
		}
		if n := qpCounter(v.rc, "duplicate_request_dropped"); n != uint64(dropped) {
			t.Errorf("duplicate_request_dropped %d, want %d", n, dropped)
		}
		if syn, _ := acks(t, v.answers()); len(syn) != 0 {
			t.Errorf("the victim answered with %v; a dropped duplicate draws no answer", syn)
		}
		if s := v.rc.State(); s != verbs.QPSRTS {
			t.Fatalf("RC QP in %v, want RTS", s)
		}
		// A wrong key on a new request is fatal.
		v.send(t, v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 2, nil), secret.addr(0), secret.mr.RKey()^1, 64))
		waitEvent(t, v.dev, verbs.EventQPAccessErr, v.rc.Num())
		v.sync(t)
		if syn, psn := acks(t, v.answers()); len(syn) != 1 || !syn[0].IsNAK() || syn[0].Value() != wire.NAKRemoteAccessError || psn[0] != hostilePSN+2 {
			t.Errorf("answer %v at %v, want NAK Remote Access Error at PSN %#x", syn, psn, hostilePSN+2)
		}
		if s := v.rc.State(); s != verbs.QPSErr {
			t.Errorf("RC QP in %v after a wrong key on a new request, want ERR", s)
		}
		shared.check(t, sdata)
	})
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// TestHostileUCEventFlood: UC RDMA WRITEs with bad rkeys each queued an
// IBV_EVENT_QP_ACCESS_ERR (300,000 of them grew the process by 77 MiB).
// rxe drops such packets silently (UC has no NAK; check_rkey, class E
// without an SRQ); goroce now does too, and counts them in rcvd_bad_rkey.
func TestHostileUCEventFlood(t *testing.T) {
	eachHostileLink(t, func(t *testing.T, v *victim) {
		target := newCanary(t, v.pd, 1024, allRemote)
		const n = 5000
		for i := 0; i < n; i++ {
			v.send(t, v.uc, withRETH(pkt(wire.TransportUC|wire.OpWriteOnly, i, randBytes(64, uint64(i))), target.addr(0), target.mr.RKey()^uint32(1+i%255), 64))
		}
		v.sync(t)
		noEvent(t, v.dev, verbs.EventQPAccessErr)
		if got := qpCounter(v.uc, "rcvd_bad_rkey"); got != n {
			t.Errorf("rcvd_bad_rkey %d, want %d", got, n)
		}
		target.check(t)
		if s := v.uc.State(); s != verbs.QPSRTS {
			t.Errorf("UC QP in %v, want RTS", s)
		}
	})
}

// TestHostileHeld: what held against a hostile peer, and must keep
// holding, packet by packet on an RC QP at its expected PSN: each case
// leaves every byte of every region as it was (or writes only what a
// correct request may), draws the IBTA answer, and leaves the QP in the
// state IBTA gives it.
func TestHostileHeld(t *testing.T) {
	type env struct {
		v            *victim
		mr, ro, lw   *canary // all remote rights; REMOTE_READ only; LOCAL_WRITE only
		other, dereg *canary // another PD's region; a deregistered one
	}
	nak := func(v uint8) wire.Syndrome { return wire.Syndrome(wire.SynNAK)<<5 | wire.Syndrome(v) }
	cases := []struct {
		name  string
		send  func(t *testing.T, e *env)
		syn   []wire.Syndrome // the answers, in order (none: nil)
		state verbs.QPState
		ctr   string // a counter of the RC QP that must be 1
	}{
		{"write past the end", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(4096-63), e.mr.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"write whose end wraps 2^64", func(t *testing.T, e *env) {
			// A region at the top of the address space: VA+length wraps.
			buf := make([]byte, 4096)
			mr, err := e.v.pd.RegMRIOVA(buf, ^uint64(0)-4096, allRemote)
			if err != nil {
				t.Fatal(err)
			}
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(512, 1)), ^uint64(0)-255, mr.RKey(), 512))
			e.v.sync(t)
			if !bytesEqual(buf, make([]byte, 4096)) {
				t.Error("the region at the top of the address space was written")
			}
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"write with a DMA length beyond 2^31", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteFirst, 0, randBytes(1024, 1)), e.mr.addr(64), e.mr.mr.RKey(), 0xFFFFFFFF))
		}, []wire.Syndrome{nak(wire.NAKInvalidRequest)}, verbs.QPSErr, "rcvd_bad_length"},
		{"write of a VA below the region", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), ^uint64(0)-31, e.mr.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"payload longer than the DMA length", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 32))
		}, []wire.Syndrome{nak(wire.NAKInvalidRequest)}, verbs.QPSErr, "rcvd_bad_length"},
		{"too many MIDDLEs", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteFirst, 0, randBytes(1024, 1)), e.mr.addr(0), e.mr.mr.RKey(), 2048))
			e.v.send(t, e.v.rc, pkt(wire.TransportRC|wire.OpWriteMiddle, 1, randBytes(1024, 2)))
			e.v.send(t, e.v.rc, pkt(wire.TransportRC|wire.OpWriteMiddle, 2, randBytes(1024, 3)))
		}, []wire.Syndrome{wire.SyndromeACK, wire.SyndromeACK, nak(wire.NAKInvalidRequest)}, verbs.QPSErr, "rcvd_bad_length"},
		{"region without REMOTE_WRITE", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.ro.addr(0), e.ro.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"READ of a region without REMOTE_READ", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 0, nil), e.lw.addr(0), e.lw.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"region of another PD", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.other.addr(0), e.other.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"deregistered key", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 0, nil), e.dereg.addr(0), e.dereg.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"unaligned atomic", func(t *testing.T, e *env) {
			f := pkt(wire.TransportRC|wire.OpFetchAdd, 0, nil)
			f.Ext.AtomicETH = wire.AtomicETHFields{VA: e.mr.addr(4), RKey: e.mr.mr.RKey(), SwapAdd: 1}
			e.v.send(t, e.v.rc, f)
		}, []wire.Syndrome{nak(wire.NAKInvalidRequest)}, verbs.QPSErr, ""},
		{"READ of 2 GiB", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 0, nil), e.mr.addr(0), e.mr.mr.RKey(), 1<<31))
		}, []wire.Syndrome{nak(wire.NAKRemoteAccessError)}, verbs.QPSErr, "rcvd_bad_rkey"},
		{"READ beyond 2 GiB", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpReadRequest, 0, nil), e.mr.addr(0), e.mr.mr.RKey(), 1<<31+1))
		}, []wire.Syndrome{nak(wire.NAKInvalidRequest)}, verbs.QPSErr, "rcvd_bad_length"},
		{"far-out PSN", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 1<<22, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64))
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, -(1<<22), randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64))
		}, []wire.Syndrome{nak(wire.NAKPSNSequenceError), wire.SyndromeACK}, verbs.QPSRTS, "out_of_seq_request"},
		{"no such QP", func(t *testing.T, e *env) {
			f := withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64)
			f.BTH.PKey, f.BTH.DestQP = wire.DefaultPKey, 0xABCDE
			e.v.inj.send(t, f.AppendTransport(nil))
		}, nil, verbs.QPSRTS, ""},
		{"bad P_Key", func(t *testing.T, e *env) {
			f := withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64)
			f.BTH.PKey, f.BTH.DestQP = 0x8001, e.v.rc.Num()
			e.v.inj.send(t, f.AppendTransport(nil))
		}, nil, verbs.QPSRTS, ""},
		{"UC opcode to an RC QP", func(t *testing.T, e *env) {
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportUC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64))
		}, nil, verbs.QPSRTS, "rcvd_bad_opcode"},
		{"QP in INIT", func(t *testing.T, e *env) {
			if err := e.v.rc.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState); err != nil {
				t.Fatal(err)
			}
			if err := e.v.rc.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: allRemote},
				verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
				t.Fatal(err)
			}
			e.v.send(t, e.v.rc, withRETH(pkt(wire.TransportRC|wire.OpWriteOnly, 0, randBytes(64, 1)), e.mr.addr(0), e.mr.mr.RKey(), 64))
		}, nil, verbs.QPSInit, "rcvd_bad_qp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eachHostileLink(t, func(t *testing.T, v *victim) {
				e := &env{v: v, mr: newCanary(t, v.pd, 4096, allRemote), ro: newCanary(t, v.pd, 4096, verbs.AccessRemoteRead),
					lw: newCanary(t, v.pd, 4096, verbs.AccessLocalWrite)}
				opd, err := v.dev.AllocPD()
				if err != nil {
					t.Fatal(err)
				}
				e.other, e.dereg = newCanary(t, opd, 4096, allRemote), newCanary(t, v.pd, 4096, allRemote)
				if err := e.dereg.mr.Dereg(); err != nil {
					t.Fatal(err)
				}
				before := map[*canary][]byte{}
				for _, cn := range []*canary{e.mr, e.ro, e.lw, e.other, e.dereg} {
					before[cn] = bytes2(cn.region())
				}
				c.send(t, e)
				v.sync(t)
				// Positive ACKs in a row may be one (coalesced): compare
				// the answers with runs of ACKs folded.
				fold := func(s []wire.Syndrome) string {
					var out []wire.Syndrome
					for i, x := range s {
						if i > 0 && x == wire.SyndromeACK && s[i-1] == wire.SyndromeACK {
							continue
						}
						out = append(out, x)
					}
					return fmt.Sprint(out)
				}
				syn, _ := acks(t, v.answers())
				if fold(syn) != fold(c.syn) {
					t.Errorf("answers %v, want %v", syn, c.syn)
				}
				if s := v.rc.State(); s != c.state {
					t.Errorf("QP in %v, want %v", s, c.state)
				}
				if c.ctr != "" {
					if n := qpCounter(v.rc, c.ctr); n != 1 {
						t.Errorf("%s %d, want 1", c.ctr, n)
					}
				}
				for _, cn := range []*canary{e.ro, e.lw, e.other, e.dereg} {
					cn.check(t, piece{0, before[cn]})
				}
				// The far-out PSN's duplicate and the too-many-MIDDLEs
				// case write what a correct request may; nothing else does.
				if c.name != "too many MIDDLEs" {
					e.mr.check(t, piece{0, before[e.mr]})
				}
			})
		})
	}
}
