package rdmacm

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func TestDialListen(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, 0), Endpoint{PD: b.pd, QP: rcInit(b), Param: ConnParam{PrivateData: []byte("srv"), RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
