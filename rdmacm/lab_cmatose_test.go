package rdmacm_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// The traffic of rdma-core's cmatose (ucmatose) and udaddy with their
// defaults: 10 messages of 100 bytes each way.
const (
	toseCount = 10
	toseSize  = 100
	grhLen    = 40
)

// msgBufs registers count receive slots of size bytes (after grh bytes of
// room) and one send buffer.
type msgBufs struct {
	recv, send     []byte
	rmr, smr       *verbs.MR
	size, grh, cnt int
}

func newMsgBufs(t *testing.T, pd *verbs.PD, count, size, grh int) *msgBufs {
	m := &msgBufs{recv: make([]byte, count*(grh+size)), send: make([]byte, size), size: size, grh: grh, cnt: count}
	for i := range m.send {
		m.send[i] = byte('a' + i%26)
	}
	var err error
	if m.rmr, err = pd.RegMR(m.recv, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if m.smr, err = pd.RegMR(m.send, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.rmr.Dereg(); m.smr.Dereg() })
	return m
}

func (m *msgBufs) postRecvs(qp *verbs.QP) error {
	for i := 0; i < m.cnt; i++ {
		if err := qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{m.rmr.SGE(i*(m.grh+m.size), m.grh+m.size)}}); err != nil {
			return err
		}
	}
	return nil
}

// connectWhenUp connects a new CM ID in port space ps to dst as the
// clients of ucmatose and udaddy do (address, route, QP, receives posted,
// connect) and returns it with its event channel once ESTABLISHED. While
// peer, the tool in the VM, does not listen yet (an error containing
// notYet) it starts over (lab.UntilListening).
func connectWhenUp(ctx context.Context, t *testing.T, s *labSide, peer *lab.Job, ps rdmacm.PortSpace, dst netip.AddrPort,
	init verbs.QPInitAttr, m *msgBufs, param rdmacm.ConnParam, notYet string) (*rdmacm.EventChannel, *rdmacm.ID) {
	t.Helper()
	var ec *rdmacm.EventChannel
	var id *rdmacm.ID
	err := lab.UntilListening(ctx, peer, notYet, func() error {
		ec = s.cm.CreateEventChannel()
		var err error
		if id, err = s.cm.CreateID(ec, ps); err != nil {
			ec.Close()
			return err
		}
		err = func() error {
			if err := id.ResolveAddr(netip.Addr{}, dst, 2*time.Second); err != nil {
				return err
			}
			if e, err := ec.Get(ctx); err != nil || e.Type != rdmacm.EventAddrResolved {
				return fmt.Errorf("%v %v", e, err)
			}
			if err := id.ResolveRoute(2 * time.Second); err != nil {
				return err
			}
			if e, err := ec.Get(ctx); err != nil || e.Type != rdmacm.EventRouteResolved {
				return fmt.Errorf("%v %v", e, err)
			}
			qp, err := id.CreateQP(s.pd, init)
			if err != nil {
				return err
			}
			if err := m.postRecvs(qp); err != nil { // before connecting, as cmatose does
				return err
			}
			if err := id.Connect(param); err != nil {
				return err
			}
			if e, err := ec.Get(ctx); err != nil || e.Type != rdmacm.EventEstablished {
				return fmt.Errorf("%v %v", e, err)
			}
			return nil
		}()
		if err != nil {
			id.Destroy()
			ec.Close()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ec, id
}

// completions sorts a CQ's completions into sends and receives, so that a
// wait for one kind never throws the other away: ucmatose's SENDs can
// arrive while goroce's server still waits for its own send completions.
type completions struct {
	cq           *verbs.CQ
	sends, recvs []verbs.WC
}

// wait returns the next n completions of one kind, failing on the first
// error completion of either kind.
func (c *completions) wait(ctx context.Context, n int, recv bool) ([]verbs.WC, error) {
	kind, q := "send", &c.sends
	if recv {
		kind, q = "receive", &c.recvs
	}
	for len(*q) < n {
		var wc [4]verbs.WC
		k, err := c.cq.PollWait(ctx, wc[:])
		if err != nil {
			return nil, fmt.Errorf("after %d of %d %s completions (%d of the other kind waiting): %w",
				len(*q), n, kind, len(c.sends)+len(c.recvs)-len(*q), err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.WCSuccess {
				return nil, fmt.Errorf("completion %v", &w)
			}
			if w.Opcode == verbs.WCRecv || w.Opcode == verbs.WCRecvRDMAWithImm {
				c.recvs = append(c.recvs, w)
			} else {
				c.sends = append(c.sends, w)
			}
		}
	}
	out := (*q)[:n:n]
	*q = (*q)[n:]
	return out, nil
}

// TestLabCmatose: goroce's rdmacm against ucmatose on Linux rxe, both
// roles, IPv4 and IPv6: RC connect, ten 100-byte SENDs each way (server
// first), the server disconnects.
func TestLabCmatose(t *testing.T) {
	l := lab.Start(t)
	s := openLab(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall ucmatose 2>/dev/null; true")
	cq, err := s.pd.Device().CreateCQ(4 * toseCount)
	if err != nil {
		t.Fatal(err)
	}
	cc := &completions{cq: cq}
	init := verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: toseCount, MaxRecvWR: toseCount, MaxSendSGE: 1, MaxRecvSGE: 1}}
	send := func(qp *verbs.QP, m *msgBufs) error {
		for i := 0; i < toseCount; i++ {
			if err := qp.PostSend(verbs.SendWR{WRID: 100 + uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{m.smr.SGE(0, toseSize)}}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		t.Run(fam+"/goroce-client", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			job := l.Background(t, vm, "/tmp/tose.log", toolLimit, fmt.Sprintf("ucmatose -b %s", theirs))
			m := newMsgBufs(t, s.pd, toseCount, toseSize, 0)
			ec, id := connectWhenUp(ctx, t, s, job, rdmacm.PSTCP, netip.AddrPortFrom(netip.MustParseAddr(theirs), 7471), init, m,
				rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 7}, "REJECTED") // until ucmatose listens
			defer ec.Close()
			defer id.Destroy()
			wcs, err := cc.wait(ctx, toseCount, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wcs {
				if w.ByteLen != toseSize {
					t.Errorf("received %d bytes, want %d", w.ByteLen, toseSize)
				}
			}
			if err := send(id.QP(), m); err != nil { // "sending replies"
				t.Fatal(err)
			}
			if _, err := cc.wait(ctx, toseCount, false); err != nil {
				t.Fatal(err)
			}
			if e, err := ec.Get(ctx); err != nil || e.Type != rdmacm.EventDisconnected {
				t.Errorf("want DISCONNECTED from ucmatose, got %v %v", e, err)
			}
			id.Disconnect() // the DREP
			log := job.Wait()
			if !strings.Contains(log, "data transfers complete") || !strings.Contains(log, "EXIT 0") {
				t.Errorf("ucmatose (server):\n%s", log)
			}
		})
		t.Run(fam+"/goroce-server", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			m := newMsgBufs(t, s.pd, toseCount, toseSize, 0)
			ln, err := s.cm.Listen(netip.AddrPortFrom(netip.MustParseAddr(ours), 7471), rdmacm.Endpoint{PD: s.pd, QP: init,
				Param:   rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7},
				Prepare: m.postRecvs}) // before accepting, as cmatose does
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			errc := make(chan error, 1)
			go func() {
				errc <- func() error {
					c, err := ln.Accept(ctx)
					if err != nil {
						return err
					}
					defer c.Close()
					if err := send(c.QP, m); err != nil { // "initiating data transfers"
						return err
					}
					if _, err := cc.wait(ctx, toseCount, false); err != nil {
						return err
					}
					wcs, err := cc.wait(ctx, toseCount, true)
					if err != nil {
						return err
					}
					for _, w := range wcs {
						if w.ByteLen != toseSize {
							return fmt.Errorf("received %d bytes, want %d", w.ByteLen, toseSize)
						}
					}
					if err := c.ID.Disconnect(); err != nil { // "cmatose: disconnecting"
						return err
					}
					if e, err := c.Events.Get(ctx); err != nil || e.Type != rdmacm.EventDisconnected {
						return fmt.Errorf("want DISCONNECTED after the DREQ, got %v %v", e, err)
					}
					return nil
				}()
			}()
			out, rc, err := l.Exec(vm, fmt.Sprintf("timeout %d ucmatose -s %s", int(toolLimit.Seconds()), ours))
			if err != nil || rc != 0 || !strings.Contains(out, "data transfers complete") {
				t.Errorf("ucmatose -s: exit %d %v\n%s", rc, err, out)
				cancel() // the accept waits for nothing more (not toolLimit)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLabUdaddy: goroce's rdmacm against udaddy on Linux rxe (UD QPs
// resolved with SIDR_REQ/SIDR_REP), both roles, IPv4 and IPv6: ten
// 100-byte SEND_WITH_IMMs (immediate: the sender's QPN) from the client,
// ten replies from the server.
func TestLabUdaddy(t *testing.T) {
	l := lab.Start(t)
	s := openLab(t, l)
	vm := lab.VM1
	l.Exec(vm, "killall udaddy 2>/dev/null; true")
	cq, err := s.pd.Device().CreateCQ(4 * toseCount)
	if err != nil {
		t.Fatal(err)
	}
	cc := &completions{cq: cq}
	init := verbs.QPInitAttr{Type: verbs.UD, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: toseCount, MaxRecvWR: toseCount, MaxSendSGE: 1, MaxRecvSGE: 1}}
	send := func(qp *verbs.QP, m *msgBufs, ah *verbs.AH, qpn, qkey uint32) error {
		for i := 0; i < toseCount; i++ {
			if err := qp.PostSend(verbs.SendWR{WRID: 100 + uint64(i), Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled,
				ImmData: qp.Num(), AH: ah, RemoteQPN: qpn, RemoteQKey: qkey,
				SGList: []verbs.SGE{m.smr.SGE(0, toseSize)}}); err != nil {
				return err
			}
		}
		return nil
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		ours, theirs := lab.HostIPv4, vm.IPv4
		if fam == "IPv6" {
			ours, theirs = lab.HostIPv6, vm.IPv6
		}
		t.Run(fam+"/goroce-client", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			job := l.Background(t, vm, "/tmp/udaddy.log", toolLimit, fmt.Sprintf("udaddy -b %s", theirs))
			m := newMsgBufs(t, s.pd, toseCount, toseSize, grhLen)
			// until udaddy listens (SIDR_REP status: unsupported service)
			ec, id := connectWhenUp(ctx, t, s, job, rdmacm.PSUDP, netip.AddrPortFrom(netip.MustParseAddr(theirs), 7174), init, m,
				rdmacm.ConnParam{}, "UNREACHABLE")
			defer ec.Close()
			defer id.Destroy()
			ud := id.UD()
			ah, err := s.pd.CreateAH(ud.AH)
			if err != nil {
				t.Fatal(err)
			}
			if err := send(id.QP(), m, ah, ud.QPNum, ud.QKey); err != nil {
				t.Fatal(err)
			}
			if _, err := cc.wait(ctx, toseCount, false); err != nil {
				t.Fatal(err)
			}
			wcs, err := cc.wait(ctx, toseCount, true)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range wcs {
				if w.ByteLen != grhLen+toseSize || w.Flags&verbs.WCWithImm == 0 || w.ImmData != ud.QPNum {
					t.Errorf("reply: %d bytes, flags %v, imm %#x; want %d, WITH_IMM, %#x", w.ByteLen, w.Flags, w.ImmData, grhLen+toseSize, ud.QPNum)
				}
			}
			log := job.Wait()
			if !strings.Contains(log, "data transfers complete") || !strings.Contains(log, "EXIT 0") {
				t.Errorf("udaddy (server):\n%s", log)
			}
		})
		t.Run(fam+"/goroce-server", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), toolLimit+10*time.Second)
			defer cancel()
			m := newMsgBufs(t, s.pd, toseCount, toseSize, grhLen)
			ec := s.cm.CreateEventChannel()
			defer ec.Close()
			lid, err := s.cm.CreateID(ec, rdmacm.PSUDP)
			if err != nil {
				t.Fatal(err)
			}
			defer lid.Destroy()
			if err := lid.BindAddr(netip.AddrPortFrom(netip.MustParseAddr(ours), 7174)); err != nil {
				t.Fatal(err)
			}
			if err := lid.Listen(0); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				errc <- func() error {
					e, err := ec.Get(ctx)
					if err != nil || e.Type != rdmacm.EventConnectRequest {
						return fmt.Errorf("want CONNECT_REQUEST, got %v %v", e, err)
					}
					c := e.ID
					defer c.Destroy()
					qp, err := c.CreateQP(s.pd, init)
					if err != nil {
						return err
					}
					if err := m.postRecvs(qp); err != nil {
						return err
					}
					if err := c.Accept(rdmacm.ConnParam{}); err != nil {
						return err
					}
					wcs, err := cc.wait(ctx, toseCount, true)
					if err != nil {
						return err
					}
					for _, w := range wcs {
						if w.ByteLen != grhLen+toseSize || w.Flags&verbs.WCWithImm == 0 {
							return fmt.Errorf("received %d bytes, flags %v", w.ByteLen, w.Flags)
						}
					}
					// Reply as udaddy's create_reply_ah does: to the sender's
					// address, its QPN from the immediate data, our own Q_Key.
					ud := c.UD()
					ah, err := s.pd.CreateAH(ud.AH)
					if err != nil {
						return err
					}
					if err := send(qp, m, ah, wcs[0].ImmData, 0x01234567); err != nil {
						return err
					}
					_, err = cc.wait(ctx, toseCount, false)
					return err
				}()
			}()
			out, rc, err := l.Exec(vm, fmt.Sprintf("timeout %d udaddy -s %s", int(toolLimit.Seconds()), ours))
			if err != nil || rc != 0 || !strings.Contains(out, "data transfers complete") {
				t.Errorf("udaddy -s: exit %d %v\n%s", rc, err, out)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}
