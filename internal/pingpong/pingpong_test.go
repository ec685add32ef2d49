package pingpong

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
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

// failingLink is a link whose Recv fails with EINVAL from its second call
// on, as link/udp's did on a Linux 6.1 guest when recvmmsg on its
// AF_PACKET socket refused a UDP GRO packet.
type failingLink struct {
	link.Link
	calls atomic.Int32
}

func (l *failingLink) Recv(pkts []link.Packet) (int, error) {
	if l.calls.Add(1) > 1 {
		return 0, syscall.EINVAL
	}
	return l.Link.Recv(pkts)
}

// When the client's device dies after its first packets (its receive
// goroutine ends with IBV_EVENT_DEVICE_FATAL), Run says so instead of
// waiting forever for completions that cannot come: its QP, having heard
// the peer, retries forever (retry_cnt 7, as on rxe).
func TestPingPongDeviceFatal(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			fab := fabric.New()
			gids := verbstest.GIDs(verbstest.NetV2IPv4)
			var devs [2]*verbs.Device
			for i := range devs {
				port, err := fab.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID}})
				if err != nil {
					t.Fatal(err)
				}
				var l link.Link = port
				if i == 1 {
					l = &failingLink{Link: port}
				}
				devs[i], err = verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: l, MAC: port.MAC(),
					GIDs: []verbs.GIDEntry{gids[i]}})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { devs[i].Close() })
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				errc <- Run(ctx, devs[0], Config{Type: verbs.RC, Listener: ln, GIDIndex: 0, Iters: 50, Size: 64, Events: events})
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			err = Run(ctx, devs[1], Config{Type: verbs.RC, Server: "127.0.0.1", Port: port, GIDIndex: 0, Iters: 50, Size: 64, Events: events})
			if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "IBV_EVENT_DEVICE_FATAL") ||
				!strings.Contains(err.Error(), "invalid argument") {
				t.Fatalf("client: %v (context: %v), want IBV_EVENT_DEVICE_FATAL with the link's error", err, ctx.Err())
			}
			t.Log(err)
			cancel()
			<-errc
		})
	}
}
