package rsocket

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// TestNetConn runs golang.org/x/net/nettest's net.Conn conformance suite
// (the one the standard library's connections pass) on rsocket pairs,
// over the in-memory fabric and over UDP sockets on loopback.
func TestNetConn(t *testing.T) {
	for _, netw := range testNets {
		t.Run(netw, func(t *testing.T) {
			a, b := newSides(t, netw)
			l := b.listen(t, 7471, Options{})
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				type res struct {
					c   *Conn
					err error
				}
				acc := make(chan res, 1)
				go func() {
					c, err := l.AcceptContext(ctx)
					acc <- res{c, err}
				}()
				d := Dialer{CM: a.cm}
				ca, err := d.Dial(ctx, "rsocket", l.AddrPort().String())
				r := <-acc
				if err != nil || r.err != nil {
					if ca != nil {
						ca.Close()
					}
					if r.c != nil {
						r.c.Close()
					}
					if err == nil {
						err = r.err
					}
					return nil, nil, nil, err
				}
				return ca, r.c, func() { ca.Close(); r.c.Close() }, nil
			})
		})
	}
}
