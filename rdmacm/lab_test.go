package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// toolLimit bounds an rdma-core tool's run in the VM (timeout(1)): the
// emulated VM on a loaded 2-core host can take most of a minute to run one
// (it hung at 50 s in loaded CI runs). A subtest's context gives goroce's
// side a little longer.
const toolLimit = 140 * time.Second

// labSide is a goroce device on the lab's bridge with a CM on it.
type labSide struct {
	dev *host.Device
	cm  *rdmacm.CM
	pd  *verbs.PD
	cq  *verbs.CQ
}

func openLab(t *testing.T, l *lab.Lab) *labSide {
	d := l.OpenDevice(t, host.VersionsBoth)
	cm := rdmacm.New(rdmacm.Options{})
	if err := cm.AddDevice(d.Device); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	return &labSide{dev: d, cm: cm, pd: pd, cq: cq}
}

// postRecv posts the 16-byte receive exchange completes, as a librdmacm
// program does before it connects or accepts (Endpoint.Prepare).
func (s *labSide) postRecv(qp *verbs.QP) ([]byte, error) {
	rbuf := make([]byte, 16)
	rmr, err := s.pd.RegMR(rbuf, verbs.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	return rbuf, qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rmr.SGE(0, 16)}})
}

// exchange sends msg (16 bytes), first or after the receive postRecv
// posted into rbuf completes, and returns what arrived: rdma_client's and
// rdma_server's traffic.
func (s *labSide) exchange(ctx context.Context, qp *verbs.QP, rbuf []byte, msg string, sendFirst bool) (string, error) {
	send := func() error {
		return qp.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
			InlineData: []byte(fmt.Sprintf("%-16s", msg))})
	}
	if sendFirst {
		if err := send(); err != nil {
			return "", err
		}
	}
	var got string // what arrived, returned with an error too
	for n := 0; n < 2; {
		var wc [1]verbs.WC
		k, err := s.cq.PollWait(ctx, wc[:])
		if err != nil {
			return got, err
		}
		if k == 0 {
			continue
		}
		if wc[0].Status != verbs.WCSuccess {
			return got, fmt.Errorf("completion %v", &wc[0])
		}
		n++
		if wc[0].WRID == 1 {
			got = string(rbuf[:wc[0].ByteLen])
			if !sendFirst {
				if err := send(); err != nil {
					return got, err
				}
			}
		}
	}
	return got, nil
}

// TestLabRDMAServerClient: goroce's rdmacm against librdmacm's rdma_server
// and rdma_client on Linux rxe, both roles, IPv4 and IPv6: connect, one
// 16-byte SEND each way, disconnect (the server disconnects first when it
// is Linux, the client when it is goroce); and a connection to a port no
// one listens on is REJECTED with reason 8 (invalid service ID) both ways.
func TestLabRDMAServerClient(t *testing.T) {
	l := lab.Start(t)
	s := openLab(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall rdma_server rdma_client 2>/dev/null; true")
	// Each subtest gets a CQ of its own (newCQ), so a completion flushed
	// from one subtest's QP can never be taken for the next one's.
	var qpInit verbs.QPInitAttr
	newCQ := func(t *testing.T) {
		cq, err := s.pd.Device().CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		s.cq = cq
		qpInit = verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}}
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		t.Run(fam+"/goroce-client", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			newCQ(t)
			job := l.Background(t, vm, "/tmp/rs.log", toolLimit, fmt.Sprintf("rdma_server -s %s -p 7471", theirs))
			var c *rdmacm.Conn
			var rbuf []byte
			prepare := func(qp *verbs.QP) (err error) { rbuf, err = s.postRecv(qp); return err }
			err := lab.UntilListening(ctx, job, "REJECTED", func() (err error) {
				c, err = s.cm.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(theirs), 7471), rdmacm.Endpoint{PD: s.pd, QP: qpInit, Prepare: prepare})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := s.exchange(ctx, c.QP, rbuf, "hello rxe", true)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rdma_server answered %q", got)
			// rdma_server disconnects after its send: DISCONNECTED here.
			e, err := c.Events.Get(ctx)
			if err != nil || e.Type != rdmacm.EventDisconnected {
				t.Errorf("after the exchange: %v, %v; want DISCONNECTED", e, err)
			}
			c.Close() // the DREP rdma_server's destroy waits for, as rping's rdma_disconnect sends it
			log := job.Wait()
			if !strings.Contains(log, "EXIT 0") || !strings.Contains(log, "rdma_server: end 0") {
				t.Errorf("rdma_server:\n%s", log)
			}
		})
		t.Run(fam+"/goroce-server", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			newCQ(t)
			// The receive is posted before the REP goes (Prepare), as
			// rdma_server does: rdma_client sends as soon as it has the
			// REP, and its QP takes the RNR retry count our REP gives
			// (0 here), so one RNR NAK ends it (seen in CI when the
			// receive was posted after Accept returned).
			var rbuf []byte
			ln, err := s.cm.Listen(netip.AddrPortFrom(netip.MustParseAddr(ours), 7471), rdmacm.Endpoint{PD: s.pd, QP: qpInit,
				Prepare: func(qp *verbs.QP) (err error) { rbuf, err = s.postRecv(qp); return err }})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			type result struct {
				got string
				err error
			}
			res := make(chan result, 1)
			go func() {
				c, err := ln.Accept(ctx)
				if err != nil {
					res <- result{err: err}
					return
				}
				defer c.Close()
				// As a librdmacm program does, answer the peer's DREQ
				// (DISCONNECTED) at once: rdma_client disconnects as soon as
				// it has our message, and Linux rxe has at times not ACKed
				// our SEND before its QP went away; rdma_disconnect then
				// flushes the SEND rather than leave it retrying.
				ectx, ecancel := context.WithCancel(ctx)
				defer ecancel()
				go func() {
					if e, err := c.Events.Get(ectx); err == nil && e.Type == rdmacm.EventDisconnected {
						c.ID.Disconnect()
					}
				}()
				got, err := s.exchange(ectx, c.QP, rbuf, "hello goroce", false)
				if err != nil && got != "" && strings.Contains(err.Error(), "IBV_WC_WR_FLUSH_ERR") {
					t.Logf("the send was flushed by the disconnect before its ACK came: %v", err)
					err = nil
				}
				res <- result{got, err}
			}()
			out, rc, err := l.Exec(vm, fmt.Sprintf("timeout %d rdma_client -s %s -p 7471", int(toolLimit.Seconds()), ours))
			if err != nil || rc != 0 || !strings.Contains(out, "rdma_client: end 0") {
				t.Errorf("rdma_client: exit %d %v\n%s", rc, err, out)
			}
			r := <-res
			if r.err != nil {
				// Say where the connection stood: the CM IDs' states and
				// the device's counters.
				vmSide, _, _ := l.Exec(vm, "ip -6 neigh; ip neigh; rdma statistic show link rxe0/1")
				t.Fatalf("%v\nCM IDs: %+v\ncounters: %v\nlink: %v\nthe VM's neighbours and rxe counters:\n%s",
					r.err, s.cm.IDs(nil), s.dev.Counters().Snapshot(), s.dev.Link().Stats().Snapshot(), vmSide)
			}
			t.Logf("rdma_client sent %q", r.got)
		})
		t.Run(fam+"/rejected", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			newCQ(t)
			_, err := s.cm.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(theirs), 7999), rdmacm.Endpoint{PD: s.pd, QP: qpInit})
			if err == nil || !strings.Contains(err.Error(), "REJECTED") || !strings.Contains(err.Error(), "reason 8") {
				t.Errorf("goroce to a port nobody listens on in the VM: %v", err)
			}
			out, rc, _ := l.Exec(vm, fmt.Sprintf("timeout %d rdma_client -s %s -p 7999", int(toolLimit.Seconds()), ours))
			if rc == 0 || !strings.Contains(out, "rdma_connect") {
				t.Errorf("rdma_client to a port nobody listens on here: exit %d\n%s", rc, out)
			}
		})
	}
}
