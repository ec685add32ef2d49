package pingpong

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
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

// An rdma-core peer run without -g sends an all-zero GID (gidx -1), and
// RoCE cannot reach it: where the server said "ah_attr.is_global is 0:
// RoCE needs a GRH" and the client "Couldn't read/write remote address:
// EOF", each says which side lacks -g and what to pass. The peers here
// speak the tools' TCP exchange as rdma-core's do without -g.
func TestPeerWithoutGID(t *testing.T) {
	noGID := Dest{QPN: 0x11, PSN: 0x123456, GID: netip.IPv6Unspecified()}.Marshal()
	const hint = "pass -g N there (roce gids, or show_gids on Linux, shows which index)"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UD} {
		p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})

		// A goroce server, an rdma-core client without -g.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() { errc <- Run(ctx, p.A.Dev, Config{Type: typ, Listener: ln, GIDIndex: 0, Iters: 5, Size: 64}) }()
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(noGID)
		if n, err := conn.Read(make([]byte, msgLen)); err == nil {
			t.Errorf("%v server: answered %d bytes to a client without a GID", typ, n)
		}
		conn.Close()
		if err := <-errc; err == nil || !strings.Contains(err.Error(), "the client sent no GID (it runs without -g?): RoCE needs a GID on both sides: "+hint) {
			t.Errorf("%v server: %v", typ, err)
		}

		// A goroce client, an rdma-core server without -g: RC's closes the
		// connection without answering (its QP would not connect), UD's
		// answers with no GID.
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			c, err := ln.Accept()
			ln.Close()
			if err != nil {
				return
			}
			defer c.Close()
			io.ReadFull(c, make([]byte, msgLen))
			if typ == verbs.UD {
				c.Write(noGID)
				io.ReadAll(c)
			}
		}()
		err = Run(ctx, p.B.Dev, Config{Type: typ, Server: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, GIDIndex: 0, Iters: 5, Size: 64})
		want := "Couldn't read/write remote address: EOF: the server closed the connection without answering; " +
			"if it runs without -g, RoCE needs a GID on both sides: " + hint
		if typ == verbs.UD {
			want = "the server sent no GID (it runs without -g?): RoCE needs a GID on both sides: " + hint
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v client: %v, want %q", typ, err, want)
		}
	}
	// Without a GID index goroce says so before anything else.
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	if err := Run(ctx, p.A.Dev, Config{Server: "127.0.0.1", GIDIndex: -1}); !errors.Is(err, syscall.EINVAL) ||
		!strings.Contains(err.Error(), "RoCE needs a GID: pass -g N (roce gids shows which index)") {
		t.Errorf("GIDIndex -1: %v", err)
	}
}

// gatedLink holds every packet its device sends until open says so: the
// server of TestPingPongBusyPoll answers nothing until the client has
// polled its empty CQ many times.
type gatedLink struct {
	link.Link
	open func() bool
	ctx  context.Context
}

func (l *gatedLink) Send(pkts []link.Packet) (int, error) {
	for !l.open() && l.ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	return l.Link.Send(pkts)
}

// As ibv_rc_pingpong, pingpong busy-polls its CQ by default (CQ.Poll in a
// loop, which drives the link when the CQ is empty) and sleeps on the CQ
// only with -e. The server here sends nothing until the client has polled
// 1000 times: a client that stops polling to sleep on the CQ (as goroce's
// did after 64 polls) never gets there, and the run times out. With -e the
// client never calls Poll and waits in PollWait.
func TestPingPongBusyPoll(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprintf("events=%v", events), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var st pollStats
			const gate = 1000
			open := func() bool { return events || st.polls.Load() >= gate }
			fab := fabric.New()
			gids := verbstest.GIDs(verbstest.NetV2IPv4)
			var devs [2]*verbs.Device
			for i := range devs {
				port, err := fab.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID}})
				if err != nil {
					t.Fatal(err)
				}
				var l link.Link = port // the client's: a link.Poller
				if i == 0 {
					l = &gatedLink{Link: port, open: open, ctx: ctx}
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
			const iters = 20
			var sout, cout bytes.Buffer
			errc := make(chan error, 1)
			go func() {
				errc <- Run(ctx, devs[0], Config{Type: verbs.RC, Listener: ln, GIDIndex: 0, Iters: iters, Size: 64, Events: events, Out: &sout})
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			if err := Run(ctx, devs[1], Config{Type: verbs.RC, Server: "127.0.0.1", Port: port, GIDIndex: 0, Iters: iters,
				Size: 64, Events: events, Out: &cout, stats: &st}); err != nil {
				t.Fatalf("client: %v (polls %d, waits %d)\n%s", err, st.polls.Load(), st.waits.Load(), cout.String())
			}
			if err := <-errc; err != nil {
				t.Fatalf("server: %v\n%s", err, sout.String())
			}
			for _, o := range []string{sout.String(), cout.String()} {
				if !strings.Contains(o, fmt.Sprintf("%d iters in ", iters)) {
					t.Errorf("output:\n%s", o)
				}
			}
			polls, waits := st.polls.Load(), st.waits.Load()
			if events {
				if polls != 0 || waits < iters {
					t.Errorf("-e: %d busy polls, %d waits; want 0 polls and at least %d waits", polls, waits, iters)
				}
			} else if polls < gate || waits != 0 {
				t.Errorf("default: %d polls, %d waits; want at least %d polls and no wait", polls, waits, gate)
			}
		})
	}
}

// TestPollYields: the busy poll yields its P after every empty poll, but
// every busypoll.OnePYield polls in a process of one P (where a yield wakes no
// other thread and costs a pass through the scheduler). With ctx already
// done, poll returns after its 1024th poll, which is not followed by a
// yield.
func TestPollYields(t *testing.T) {
	pair := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	var yields int
	var cancel context.CancelFunc
	prev := gosched
	// The context ends at the first yield, so the poll returns at its
	// next look, after 1,024 polls (it looks on entry too).
	gosched = func() { yields++; cancel(); runtime.Gosched() }
	defer func() { gosched = prev }()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct {
		procs, yields int
	}{{1, 1023 / busypoll.OnePYield}, {2, 1023}} {
		runtime.GOMAXPROCS(c.procs)
		yields = 0
		ctx, stop := context.WithCancel(context.Background())
		cancel = stop
		s := &session{cq: pair.A.CQ}
		if n, err := s.poll(ctx, make([]verbs.WC, 1)); n != 0 || err == nil {
			t.Fatalf("poll of an empty CQ with ctx done: %d, %v", n, err)
		}
		if yields != c.yields {
			t.Errorf("GOMAXPROCS %d: %d yields in 1024 empty polls, want %d", c.procs, yields, c.yields)
		}
	}
}

// TestPollSeesCancel: a run whose context ended stops at its next poll
// even while the CQ holds completions; before, only 1,024 empty polls in a
// row looked at the context.
func TestPollSeesCancel(t *testing.T) {
	pair := verbstest.NewPair(t, verbstest.Options{})
	for i := range 4 {
		if err := pair.B.QP.PostRecv(verbs.RecvWR{WRID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		if err := pair.A.QP.PostSend(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled}); err != nil {
			t.Fatal(err)
		}
	}
	if err := pair.A.CQ.Wait(context.Background()); err != nil { // a completion is queued
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &session{cq: pair.A.CQ}
	if n, err := s.poll(ctx, make([]verbs.WC, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll after cancel, with completions queued: %d, %v; want %v", n, err, context.Canceled)
	}
}
