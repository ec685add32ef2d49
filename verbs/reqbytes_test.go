package verbs_test

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

var updateReq = flag.Bool("update-req", false, "rewrite testdata/req_packets.golden from the requester as it is")

// recLink records the packets a device sends: their transport bytes
// (without the ICRC, which a link computes) and addressing. Nothing
// arrives.
type recLink struct {
	mu     sync.Mutex
	sent   []string // guarded by mu
	closed chan struct{}
	stats  link.Stats
}

func (l *recLink) Send(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range pkts {
		pk := &pkts[i]
		a := pk.Addr
		// The headers in full; the payload and pad by length and digest.
		tr := pk.Transport()[:pk.Len-wire.ICRCLen]
		var p wire.Packet
		h := len(tr)
		if p.ParseTransport(pk.Transport(), a.Version) == nil {
			h = p.Info.HeaderLen
		}
		sum := sha256.Sum256(tr[h:])
		l.sent = append(l.sent, fmt.Sprintf("%x +%d:%x | %v %v>%v tc=%#x fl=%#x hop=%d sport=%d", tr[:h], len(tr)-h, sum[:6],
			a.Version, a.SrcGID, a.DstGID, a.TrafficClass, a.FlowLabel, a.HopLimit, a.UDPSrcPort))
	}
	return len(pkts), nil
}

func (l *recLink) Recv([]link.Packet) (int, error) {
	<-l.closed
	return 0, net.ErrClosed
}

func (l *recLink) BatchSize() int     { return 64 }
func (l *recLink) Headroom() int      { return link.FrameHeadroom }
func (l *recLink) MTU() int           { return 4096 + 64 }
func (l *recLink) Stats() *link.Stats { return &l.stats }
func (l *recLink) Close() error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *recLink) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sent
	l.sent = nil
	return s
}

// TestRequesterBytes pins every byte the requester sends: for a matrix of
// QP types × work request opcodes × message lengths × path MTUs × flags
// (solicited, inline, immediate data and invalidated keys), the packets
// of the first transmission and of the retransmission after the ACK
// timeout (RC), with their addressing, against testdata/req_packets.golden,
// which was recorded from the requester before its opcode selection became
// table-driven (go test -run TestRequesterBytes -update-req rewrites it).
func TestRequesterBytes(t *testing.T) {
	var got bytes.Buffer
	for _, net := range []string{verbstest.NetV2IPv4, verbstest.NetV1} {
		synctest.Test(t, func(t *testing.T) { recordRequests(t, &got, net) })
	}
	const golden = "testdata/req_packets.golden"
	if *updateReq {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		g, w := bytes.Split(got.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range min(len(g), len(w)) {
			if !bytes.Equal(g[i], w[i]) {
				t.Fatalf("line %d differs:\n got %s\nwant %s", i+1, g[i], w[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(g), len(w))
	}
}

func recordRequests(t *testing.T, out *bytes.Buffer, network string) {
	local, peer, typ := netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2"), verbs.GIDTypeRoCEv2
	if network == verbstest.NetV1 {
		local, peer, typ = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2"), verbs.GIDTypeRoCEv1
	}
	lk := &recLink{closed: make(chan struct{})}
	dev, err := verbs.Open(verbs.DeviceConfig{Name: "req0", Link: lk, GIDs: []verbs.GIDEntry{{GID: local, Type: typ}}, ActiveMTU: verbs.MTU4096})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5*4096)
	for i := range buf {
		buf[i] = byte(i*13 + i>>8)
	}
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := pd.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer, HopLimit: 9, TrafficClass: 0x20, FlowLabel: 0x321}})
	if err != nil {
		t.Fatal(err)
	}
	ops := map[verbs.QPType][]verbs.WROpcode{
		verbs.RC: {verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm,
			verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRFlush, verbs.WRAtomicWrite},
		verbs.UC: {verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm},
		verbs.UD: {verbs.WRSend, verbs.WRSendWithImm},
	}
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC, verbs.UD} {
		for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU1024, verbs.MTU4096} {
			pmtu := mtu.Bytes()
			for _, op := range ops[typ] {
				lengths := []int{0, 1, 3, 4, 5, 63, pmtu - 1, pmtu, pmtu + 1, 2*pmtu + 3, 3 * pmtu, 4*pmtu + 7}
				switch op {
				case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicWrite:
					lengths = []int{8}
				}
				for _, n := range lengths {
					if typ == verbs.UD && n > pmtu {
						continue
					}
					for variant := range 3 {
						qp, err := pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
							Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 3, MaxRecvSGE: 1, MaxInlineData: 64}})
						if err != nil {
							t.Fatal(err)
						}
						if err := verbstest.ConnectQP(qp, 0xABCDE, peer, 0, verbstest.Options{MTU: mtu}); err != nil {
							t.Fatal(err)
						}
						wr := verbs.SendWR{WRID: 1, Opcode: op, RemoteAddr: 0x1122334455667788, RKey: 0xA1B2C3D4,
							ImmData: 0xC0FFEE00 + uint32(variant), InvalidateRKey: 0x5566AA00 + uint32(variant),
							CompareAdd: 0x0102030405060708, Swap: 0x1112131415161718, FlushSel: wire.FlushSelWholeMR, FlushPlacement: 1,
							AH: ah, RemoteQPN: 0x12345, RemoteQKey: 0x11111111}
						switch variant {
						case 0: // one SGE
							wr.SGList = []verbs.SGE{mr.SGE(7, n)}
						case 1: // solicited, three SGEs (or inline when short)
							wr.Flags |= verbs.SendSolicited | verbs.SendSignaled
							if n <= 64 && op != verbs.WRRDMARead && op != verbs.WRAtomicCmpAndSwp && op != verbs.WRAtomicFetchAndAdd {
								wr.Flags |= verbs.SendInline
								wr.InlineData = buf[100 : 100+n]
							} else {
								a := n / 3
								wr.SGList = []verbs.SGE{mr.SGE(1, a), mr.SGE(4096+5, n-2*a), mr.SGE(3*4096, a)}
							}
						case 2: // the QP's own Q_Key for UD; range FLUSH
							wr.SGList = []verbs.SGE{mr.SGE(0, n)}
							wr.RemoteQKey = 0x80000000
							wr.FlushSel, wr.FlushPlacement = wire.FlushSelMRRange, 3
						}
						fmt.Fprintf(out, "%s %v mtu=%d %v len=%d variant=%d qpn=%#x\n", network, typ, pmtu, op, n, variant, qp.Num())
						if err := qp.PostSend(wr); err != nil {
							fmt.Fprintf(out, "  post: %v\n", err)
						}
						synctest.Wait()
						sent := lk.take()
						for _, p := range sent {
							fmt.Fprintf(out, "  %s\n", p)
						}
						if typ == verbs.RC {
							time.Sleep(100 * time.Millisecond) // the ACK timeout (14: 67 ms): go back and send again
							synctest.Wait()
							if again := lk.take(); slices.Equal(again, sent) {
								fmt.Fprintf(out, "  retry: the same %d packets\n", len(again))
							} else {
								for _, p := range again {
									fmt.Fprintf(out, "  retry %s\n", p)
								}
							}
						}
						if err := qp.Destroy(); err != nil {
							t.Fatal(err)
						}
						synctest.Wait()
						lk.take()
						var wc [8]verbs.WC
						for {
							if k, _ := cq.Poll(wc[:]); k == 0 {
								break
							}
						}
					}
				}
			}
		}
	}
}
