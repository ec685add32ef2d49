package pingpong

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

func TestDestMessage(t *testing.T) {
	d := Dest{QPN: 0x14, PSN: 0xa49eec, GID: netip.MustParseAddr("::ffff:192.0.2.11")}
	b := d.Marshal()
	if len(b) != 52 || b[51] != 0 {
		t.Fatalf("message %q: want 51 characters and a NUL", b)
	}
	if want := "0000:000014:a49eec:00000000000000000000ffffc000020b"; string(b[:51]) != want {
		t.Fatalf("message %q, want %q (gid_to_wire_gid)", b[:51], want)
	}
	got, err := ParseDest(b)
	if err != nil || got != d {
		t.Fatalf("ParseDest = %+v, %v", got, err)
	}
	if _, err := ParseDest([]byte("0000:000014:a49eec:zz")); err == nil {
		t.Error("malformed message accepted")
	}
}

// A server and a client on two devices of an in-memory fabric, for each QP
// type, exchange over a real TCP connection on loopback and ping-pong.
func TestPingPongFabric(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC, verbs.UD} {
		for _, net6 := range []string{verbstest.NetV2IPv4, verbstest.NetV1} {
			t.Run(typ.String()+"/"+net6, func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Net: net6, NoConnect: true})
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				var sout, cout bytes.Buffer
				errc := make(chan error, 1)
				go func() {
					errc <- Run(ctx, p.A.Dev, Config{Type: typ, Listener: ln, GIDIndex: 0, Iters: 50, Size: 1000, Out: &sout})
				}()
				port := ln.Addr().(*net.TCPAddr).Port
				if err := Run(ctx, p.B.Dev, Config{Type: typ, Server: "127.0.0.1", Port: port, GIDIndex: 0, Iters: 50, Size: 1000, Out: &cout}); err != nil {
					t.Fatalf("client: %v\n%s", err, cout.String())
				}
				if err := <-errc; err != nil {
					t.Fatalf("server: %v\n%s", err, sout.String())
				}
				for _, o := range []string{sout.String(), cout.String()} {
					if !strings.Contains(o, "  local address:  LID 0x0000, QPN 0x") || !strings.Contains(o, "100000 bytes in ") ||
						!strings.Contains(o, "50 iters in ") {
						t.Errorf("output:\n%s", o)
					}
				}
				t.Logf("server:\n%sclient:\n%s", sout.String(), cout.String())
			})
		}
	}
}
