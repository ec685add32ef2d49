package rdmacm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

func TestDialListen(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, 0), Endpoint{PD: b.pd, QP: rcInit(b), Param: ConnParam{PrivateData: []byte("srv"), RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	type res struct {
		c   *Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept(ctx)
		ch <- res{c, err}
	}()
	ca, err := a.cm.Dial(ctx, l.Addr(), Endpoint{PD: a.pd, QP: rcInit(a), Param: ConnParam{PrivateData: []byte("cli"), RetryCount: 7, RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	cb := r.c
	if string(ca.PrivateData[:3]) != "srv" || string(cb.PrivateData[:3]) != "cli" {
		t.Errorf("private data %q / %q", ca.PrivateData[:3], cb.PrivateData[:3])
	}
	send(t, a, b, ca.QP, cb.QP, []byte("over Dial"))
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := next(ctx, cb.Events, EventDisconnected); err != nil {
		t.Fatal(err)
	}
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	// Dial to a port nobody listens on fails with the REJ.
	if _, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 1), Endpoint{PD: a.pd, QP: rcInit(a)}); err == nil {
		t.Error("Dial to a closed port succeeded")
	} else {
		t.Log(err)
	}
}

// TestDialListenPrepare: with receives posted in Endpoint.Prepare, both
// sides may SEND the moment Dial and Accept return, even with an RNR retry
// count of 0 (one RNR NAK is fatal): each receive was posted before the
// connection was requested or accepted. Without Prepare a receive posted
// after Accept returns often comes after the client's SEND.
func TestDialListenPrepare(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	prepare := func(s *side, buf []byte) func(*verbs.QP) error {
		return func(qp *verbs.QP) error {
			mr, err := s.pd.RegMR(buf, verbs.AccessLocalWrite)
			if err != nil {
				return err
			}
			return qp.PostRecv(verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{mr.SGE(0, len(buf))}})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		bufA, bufB := make([]byte, 16), make([]byte, 16)
		l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, 0), Endpoint{PD: b.pd, QP: rcInit(b),
			Param: ConnParam{RNRRetryCount: 0}, Prepare: prepare(b, bufB)})
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			c   *Conn
			err error
		}
		ch := make(chan res, 1)
		go func() {
			c, err := l.Accept(ctx)
			if err == nil {
				err = c.QP.PostSend(verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("from b")})
			}
			ch <- res{c, err}
		}()
		ca, err := a.cm.Dial(ctx, l.Addr(), Endpoint{PD: a.pd, QP: rcInit(a),
			Param: ConnParam{RetryCount: 7, RNRRetryCount: 0}, Prepare: prepare(a, bufA)})
		if err != nil {
			t.Fatal(err)
		}
		if err := ca.QP.PostSend(verbs.SendWR{WRID: 8, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: []byte("from a")}); err != nil {
			t.Fatal(err)
		}
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		for _, s := range []*side{a, b} {
			for range 2 { // the receive and the send
				if wc := verbstest.MustSucceed(t, s.cq); wc.Opcode == verbs.WCRecv && wc.ByteLen != 6 {
					t.Fatalf("round %d: received %d bytes", i, wc.ByteLen)
				}
			}
		}
		if string(bufA[:6]) != "from b" || string(bufB[:6]) != "from a" {
			t.Fatalf("round %d: received %q and %q", i, bufA[:6], bufB[:6])
		}
		ca.Close()
		r.c.Close()
		l.Close()
	}
	if n := a.dev.Counters().Snapshot()["rcvd_rnr_err"] + b.dev.Counters().Snapshot()["rcvd_rnr_err"]; n != 0 {
		t.Errorf("%d RNR NAKs", n)
	}
}
