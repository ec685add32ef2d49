package fabric_test

import (
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var gids = map[string][2]netip.Addr{
	"v2-IPv4": {netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")},
	"v2-IPv6": {netip.MustParseAddr("fd00:c0:2::1"), netip.MustParseAddr("fd00:c0:2::2")},
	"v1":      {netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")},
}

func pair(t *testing.T, name string, fa fabric.Faults) (*fabric.Fabric, *fabric.Port, *fabric.Port, linktest.Pair) {
	f := fabric.New()
	t.Cleanup(func() { f.Close() })
	g := gids[name]
	a, err := f.AddPort(fabric.PortConfig{Name: "a", GIDs: []netip.Addr{g[0]}, Faults: fa, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.AddPort(fabric.PortConfig{Name: "b", GIDs: []netip.Addr{g[1]}, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	v := wire.RoCEv2
	if name == "v1" {
		v = wire.RoCEv1
	}
	return f, a, b, linktest.Pair{A: a, B: b, AGID: g[0], BGID: g[1], Version: v}
}

func TestConformance(t *testing.T) {
	for name := range gids {
		t.Run(name, func(t *testing.T) {
			linktest.Run(t, func(t *testing.T) linktest.Pair {
				_, _, _, p := pair(t, name, fabric.Faults{})
				return p
			})
		})
	}
}

// send sends n numbered packets from a to b.
func send(t *testing.T, p linktest.Pair, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		pk := linktest.TransportPacket(p.A.Headroom(), 0x11, wire.PSN(i), []byte(fmt.Sprintf("%08d", i)))
		pk.Addr = link.Addr{Version: p.Version, SrcGID: p.AGID, DstGID: p.BGID}
		if _, err := p.A.Send([]link.Packet{pk}); err != nil {
			t.Fatal(err)
		}
	}
}

// drain receives until nothing more arrives (in a synctest bubble: until
// every goroutine is blocked) and returns the PSNs in arrival order.
func drain(t *testing.T, p linktest.Pair) []wire.PSN {
	var psns []wire.PSN
	done := make(chan struct{})
	go func() {
		defer close(done)
		bufs := linktest.NewBuffers(64)
		for {
			n, err := p.B.Recv(bufs)
			if err != nil {
				return
			}
			for _, pk := range bufs[:n] {
				var w wire.Packet
				if err := w.ParseTransport(pk.Transport(), p.Version); err != nil {
					t.Errorf("delivered packet does not parse: %v", err)
					continue
				}
				psns = append(psns, w.BTH().PSN())
			}
		}
	}()
	time.Sleep(time.Second) // virtual: every delayed frame is due by now
	synctest.Wait()
	p.B.Close()
	<-done
	return psns
}

func TestFaultsFire(t *testing.T) {
	const n = 5000
	cases := []struct {
		name  string
		fa    fabric.Faults
		check func(t *testing.T, fs *fabric.FaultStats, st *link.Stats, psns []wire.PSN)
	}{
		{"loss", fabric.Faults{Loss: 0.1}, func(t *testing.T, fs *fabric.FaultStats, st *link.Stats, psns []wire.PSN) {
			lost := int(fs.Lost.Load())
			if lost < n/20 || lost > n/5 {
				t.Errorf("lost %d of %d at 10%%", lost, n)
			}
			if len(psns) != n-lost {
				t.Errorf("delivered %d, want %d - %d lost", len(psns), n, lost)
			}
		}},
		{"duplicate", fabric.Faults{Duplicate: 0.05}, func(t *testing.T, fs *fabric.FaultStats, st *link.Stats, psns []wire.PSN) {
			d := int(fs.Duplicated.Load())
			if d == 0 || len(psns) != n+d {
				t.Errorf("duplicated %d, delivered %d of %d", d, len(psns), n)
			}
		}},
		{"corrupt", fabric.Faults{Corrupt: 0.05}, func(t *testing.T, fs *fabric.FaultStats, st *link.Stats, psns []wire.PSN) {
			c := int(fs.Corrupted.Load())
			dropped := int(st.RxBadICRC.Load() + st.RxMalformed.Load() + st.RxNotForUs.Load())
			if c == 0 || st.RxBadICRC.Load() == 0 {
				t.Errorf("corrupted %d, bad ICRC drops %d", c, st.RxBadICRC.Load())
			}
			// A flip in a masked field (TOS, TTL, checksum …) or in the
			// Ethernet header can pass; every other one must be dropped.
			if dropped > c || len(psns) != n-dropped {
				t.Errorf("corrupted %d, dropped %d, delivered %d of %d", c, dropped, len(psns), n)
			}
		}},
		{"reorder", fabric.Faults{Reorder: 0.1, Delay: 10 * time.Microsecond}, func(t *testing.T, fs *fabric.FaultStats, st *link.Stats, psns []wire.PSN) {
			inversions := 0
			for i := 1; i < len(psns); i++ {
				if psns[i].Before(psns[i-1]) {
					inversions++
				}
			}
			if fs.Reordered.Load() == 0 || inversions == 0 || len(psns) != n {
				t.Errorf("reordered %d, inversions seen %d, delivered %d of %d", fs.Reordered.Load(), inversions, len(psns), n)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, a, b, p := pair(t, "v2-IPv4", c.fa)
				psns := make(chan []wire.PSN, 1)
				go func() { psns <- drain(t, p) }()
				// Deliver in small steps so the receive queue never overflows.
				for i := 0; i < n; i += 100 {
					send(t, p, 100)
					// Let virtual time pass so delayed frames are due and
					// delivered before the receive queue could fill.
					time.Sleep(time.Millisecond)
					synctest.Wait()
				}
				got := <-psns
				c.check(t, a.FaultStats(), b.Stats(), got)
				if q := a.FaultStats().QueueFull.Load(); q != 0 {
					t.Errorf("%d frames dropped on a full queue", q)
				}
			})
		})
	}
}

func TestDelayIsVirtual(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, _, p := pair(t, "v2-IPv6", fabric.Faults{Delay: 3 * time.Second})
		start := time.Now()
		send(t, p, 1)
		linktestRecv(t, p)
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("delivered after %v, want exactly 3s of virtual time", d)
		}
	})
}

func linktestRecv(t *testing.T, p linktest.Pair) {
	bufs := linktest.NewBuffers(1)
	if _, err := p.B.Recv(bufs); err != nil {
		t.Fatal(err)
	}
}

func TestNoRoute(t *testing.T) {
	_, a, _, p := pair(t, "v2-IPv4", fabric.Faults{})
	pk := linktest.TransportPacket(a.Headroom(), 1, 1, nil)
	pk.Addr = link.Addr{Version: wire.RoCEv2, SrcGID: p.AGID, DstGID: netip.MustParseAddr("::ffff:198.51.100.9")}
	if n, err := a.Send([]link.Packet{pk}); err != nil || n != 0 {
		t.Fatalf("Send to nowhere = %d, %v", n, err)
	}
	if a.Stats().TxNoRoute.Load() != 1 {
		t.Errorf("tx_drop_no_route = %d, want 1", a.Stats().TxNoRoute.Load())
	}
	f2 := fabric.New()
	defer f2.Close()
	if _, err := f2.AddPort(fabric.PortConfig{Faults: fabric.Faults{Loss: 2}}); err == nil {
		t.Error("Loss 2 accepted")
	}
}
