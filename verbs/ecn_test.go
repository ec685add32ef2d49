package verbs_test

// DCQCN end to end on the fabric: request packets carry ECT only with the
// RP enabled, a bottleneck marks them CE, the receiver's NP answers with
// CNPs, the sender's RP cuts its rate; with everything off nothing changes.

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

func setECN(t *testing.T, d *verbs.Device, np, rp bool, tune func(*verbs.ECNConfig)) {
	t.Helper()
	c := verbs.DefaultECNConfig()
	if np {
		c.NPEnable = verbs.AllPriorities
	}
	if rp {
		c.RPEnable = verbs.AllPriorities
	}
	if tune != nil {
		tune(&c)
	}
	if err := d.SetECN(1, c); err != nil {
		t.Fatal(err)
	}
}

// writeThrough WRITEs size bytes from p.A to p.B and checks them.
func writeThrough(t *testing.T, p *verbstest.Pair, size int, wrid uint64) time.Duration {
	t.Helper()
	data := randBytes(size, wrid)
	src := source(t, p.A.PD, data)
	dst := newCanary(t, p.B.PD, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	start := time.Now()
	mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGList: sgl(src, size), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
	wantOK(t, p.A.CQ, wrid, verbs.WCRDMAWrite)
	d := time.Since(start)
	dst.check(t, piece{0, data})
	return d
}

// bottleneck: 400 Mb/s toward B, marking past 32 KiB queued.
var bottleneck = fabric.Bottleneck{Rate: 400_000_000, MarkBytes: 32 << 10, LimitBytes: 16 << 20}

// TestECNOff: with congestion control off (the default) request packets
// are Not-ECT, so the bottleneck marks none, and no CNP flows.
func TestECNOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		p.B.Port.SetBottleneck(bottleneck)
		writeThrough(t, p, 4<<20, 1)
		if m := p.B.Port.FaultStats().Marked.Load(); m != 0 {
			t.Errorf("%d frames marked CE with ECN off", m)
		}
		for _, d := range []*verbs.Device{p.A.Dev, p.B.Dev} {
			for _, n := range []string{"np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored"} {
				if v := counterOf(d.Counters(), n); v != 0 {
					t.Errorf("%s %s = %d with ECN off", d.Name(), n, v)
				}
			}
		}
	})
}

// TestDCQCNEndToEnd: A's RP and B's NP on: the bottleneck marks A's ECT
// packets, B counts them and sends CNPs no closer than
// min_time_between_cnps, A handles them and its rate drops below the
// bottleneck's; the data arrive intact.
func TestDCQCNEndToEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		p.B.Port.SetBottleneck(bottleneck)
		setECN(t, p.A.Dev, false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
		const gap = 50
		setECN(t, p.B.Dev, true, false, func(c *verbs.ECNConfig) { c.NP.MinTimeBetweenCNPs = gap })
		d := writeThrough(t, p, 8<<20, 2)
		a, b := p.A.Dev.Counters(), p.B.Dev.Counters()
		marked := p.B.Port.FaultStats().Marked.Load()
		ce, cnps := counterOf(b, "np_ecn_marked_roce_packets"), counterOf(b, "np_cnp_sent")
		handled, ignored := counterOf(a, "rp_cnp_handled"), counterOf(a, "rp_cnp_ignored")
		t.Logf("%v: marked %d, np_ecn_marked_roce_packets %d, np_cnp_sent %d, rp_cnp_handled %d, rp_cnp_ignored %d, A %s",
			d, marked, ce, cnps, handled, ignored, nonzeroCounters(a))
		if marked == 0 || ce != marked {
			t.Errorf("bottleneck marked %d, B counted %d CE packets", marked, ce)
		}
		if cnps == 0 || cnps > ce || cnps > uint64(d/(gap*time.Microsecond))+1 {
			t.Errorf("%d CNPs for %d CE packets in %v at most one per %d µs", cnps, ce, d, gap)
		}
		if handled+ignored != cnps || handled == 0 {
			t.Errorf("A handled %d and ignored %d of %d CNPs", handled, ignored, cnps)
		}
		if counterOf(b, "rp_cnp_handled")+counterOf(a, "np_cnp_sent") != 0 {
			t.Error("CNPs the other way")
		}
	})
}

// TestCNPIgnored: CNPs within rate_reduce_monitor_period of the last cut
// are counted rp_cnp_ignored and cut nothing; after the RP is turned off,
// CNPs for packets still queued are ignored, and new packets are Not-ECT.
func TestCNPIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		p.B.Port.SetBottleneck(bottleneck)
		setECN(t, p.A.Dev, false, true, func(c *verbs.ECNConfig) {
			c.LineRate = 1000
			c.RP.RateReduceMonitorPeriod = 1_000_000 // 1 s: one cut per write
		})
		setECN(t, p.B.Dev, true, false, nil)
		writeThrough(t, p, 2<<20, 3)
		a := p.A.Dev.Counters()
		cnps := counterOf(p.B.Dev.Counters(), "np_cnp_sent")
		if h, i := counterOf(a, "rp_cnp_handled"), counterOf(a, "rp_cnp_ignored"); h != 1 || i != cnps-1 || i == 0 {
			t.Fatalf("rate_reduce_monitor_period 1 s: %d of %d CNPs handled, %d ignored; want 1 handled", h, cnps, i)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		// Marking past 4 KiB: the requester's first window (cwnd.go's
		// initialCwnd, 16 packets) queues past it at once, so packets
		// marked after the first are still queued when the RP goes off.
		// (At 32 KiB the window's slow start marked one packet, and the
		// rate's cut drained the queue before another.)
		low := bottleneck
		low.MarkBytes = 4 << 10
		p.B.Port.SetBottleneck(low)
		setECN(t, p.A.Dev, false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
		setECN(t, p.B.Dev, true, false, nil)
		const size = 4 << 20
		data := randBytes(size, 4)
		src := source(t, p.A.PD, data)
		dst := newCanary(t, p.B.PD, size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, size), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
		a := p.A.Dev.Counters()
		for counterOf(a, "rp_cnp_handled") == 0 {
			time.Sleep(10 * time.Microsecond)
		}
		setECN(t, p.A.Dev, false, false, nil)
		wantOK(t, p.A.CQ, 4, verbs.WCRDMAWrite)
		dst.check(t, piece{0, data})
		if counterOf(a, "rp_cnp_ignored") == 0 {
			t.Errorf("no CNP ignored after the RP went off: %s", nonzeroCounters(a))
		}
		marked := p.B.Port.FaultStats().Marked.Load()
		writeThrough(t, p, 4<<20, 5)
		if m := p.B.Port.FaultStats().Marked.Load(); m != marked {
			t.Errorf("%d packets marked CE after the RP went off", m-marked)
		}
	})
}

// TestSetECNInvalid: out-of-range values get EINVAL naming the range.
func TestSetECNInvalid(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	for _, tc := range []struct {
		tune func(*verbs.ECNConfig)
		want string
	}{
		{func(c *verbs.ECNConfig) { c.ECT = 3 }, "ect 3: valid values are 1 (ECT(1)) and 2 (ECT(0))"},
		{func(c *verbs.ECNConfig) { c.NP.CNPDSCP = 64 }, "cnp_dscp 64: valid values are 0 to 63"},
		{func(c *verbs.ECNConfig) { c.RP.TimeReset = 0 }, "rpg_time_reset 0: valid values are 1 to 1000000"},
		{func(c *verbs.ECNConfig) { c.LineRate = 200_000 }, "line rate 200000 Mb/s: valid values are 1 to 100000"},
	} {
		c := verbs.DefaultECNConfig()
		tc.tune(&c)
		err := p.A.Dev.SetECN(1, c)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want EINVAL with %q", err, tc.want)
		}
	}
	if err := p.A.Dev.SetECN(2, verbs.DefaultECNConfig()); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("port 2: %v", err)
	}
	if c := p.A.Dev.ECN(1); c.NPEnable != 0 || c.RPEnable != 0 {
		t.Error("a rejected configuration was applied")
	}
}

// TestDCQCNUD: the notification point answers a UD datagram marked CE
// with a CNP to the source QP its DETH names, at the address it came
// from; that QP's reaction point cuts its rate.
func TestDCQCNUD(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD})
		p.B.Port.SetBottleneck(bottleneck)
		setECN(t, p.A.Dev, false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
		setECN(t, p.B.Dev, true, false, nil)
		src := source(t, p.A.PD, make([]byte, 1000))
		for i := range 200 {
			mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 1000)}))
			wantOK(t, p.A.CQ, uint64(i), verbs.WCSend)
		}
		time.Sleep(time.Second) // virtual: the bottleneck's queue drains
		a, b := p.A.Dev.Counters(), p.B.Dev.Counters()
		if counterOf(b, "np_cnp_sent") == 0 || counterOf(a, "rp_cnp_handled") == 0 ||
			counterOf(a, "rp_cnp_handled")+counterOf(a, "rp_cnp_ignored") != counterOf(b, "np_cnp_sent") {
			t.Errorf("B: %s; A: %s", nonzeroCounters(b), nonzeroCounters(a))
		}
	})
}

// TestHostileCNP: a CNP whose source is not the QP's peer is ignored
// (rp_cnp_ignored) and cuts nothing; one from the peer's address cuts the
// rate, as on hardware (a CNP carries no credential beyond its path).
func TestHostileCNP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{})
		setECN(t, p.A.Dev, false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
		stranger := netip.MustParseAddr("::ffff:192.0.2.66")
		port, err := p.Fabric.AddPort(fabric.PortConfig{GIDs: []netip.Addr{stranger}})
		if err != nil {
			t.Fatal(err)
		}
		cnp := func(from netip.Addr) {
			f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeCNP, PKey: wire.DefaultPKey, DestQP: p.A.QP.Num(), BECN: true}}
			buf := f.AppendTransport(make([]byte, port.Headroom(), link.MaxFrameSize))
			buf = append(buf, 0, 0, 0, 0)
			pk := link.Packet{Buf: buf, Off: port.Headroom(), Len: len(buf) - port.Headroom(),
				Addr: link.Addr{Version: wire.RoCEv2, SrcGID: from, DstGID: p.A.GID.GID}}
			if _, err := port.Send([]link.Packet{pk}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		a := p.A.Dev.Counters()
		cnp(stranger)
		if h, i := counterOf(a, "rp_cnp_handled"), counterOf(a, "rp_cnp_ignored"); h != 0 || i != 1 {
			t.Fatalf("stranger's CNP: handled %d, ignored %d", h, i)
		}
		if _, limited := p.A.QP.CongestionRate(); limited {
			t.Fatal("a stranger's CNP cut the rate")
		}
		cnp(p.B.GID.GID)
		if rate, limited := p.A.QP.CongestionRate(); !limited || rate >= 1000 || counterOf(a, "rp_cnp_handled") != 1 {
			t.Fatalf("peer's CNP: rate %v limited %v, %s", rate, limited, nonzeroCounters(a))
		}
	})
}

// TestECNPerPriority: the points are enabled per priority (MLNX_OFED's
// enable/<prio>), a packet's priority its DSCP / 8. The pair's QPs send
// with traffic class 0, priority 0: an RP on for every priority but 0
// leaves their packets Not-ECT (nothing marked, nothing paced); on for
// priority 0 alone, they are marked; then an NP on for every priority
// but 0 counts the CE packets but sends no CNP, and one on for priority 0
// alone sends them.
func TestECNPerPriority(t *testing.T) {
	if verbs.PriorityOf(0) != 0 || verbs.PriorityOf(26<<2|2) != 3 || verbs.PriorityOf(0xff) != 7 {
		t.Fatal("PriorityOf is not DSCP / 8")
	}
	notZero := verbs.AllPriorities &^ 1
	for _, c := range []struct {
		name        string
		rp, np      verbs.Priorities
		marked, cnp bool // frames marked; CNPs sent
	}{
		{"rp-not-0", notZero, verbs.AllPriorities, false, false},
		{"rp-0-np-not-0", 1, notZero, true, false},
		{"rp-0-np-0", 1, 1, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{})
				p.B.Port.SetBottleneck(bottleneck)
				for _, d := range []*verbs.Device{p.A.Dev, p.B.Dev} {
					e := verbs.DefaultECNConfig()
					e.RPEnable, e.NPEnable, e.LineRate = c.rp, c.np, 1000
					if err := d.SetECN(1, e); err != nil {
						t.Fatal(err)
					}
				}
				writeThrough(t, p, 4<<20, 1)
				marked := p.B.Port.FaultStats().Marked.Load()
				ce, cnps := counterOf(p.B.Dev.Counters(), "np_ecn_marked_roce_packets"), counterOf(p.B.Dev.Counters(), "np_cnp_sent")
				handled := counterOf(p.A.Dev.Counters(), "rp_cnp_handled")
				t.Logf("marked %d, B np_ecn_marked_roce_packets %d np_cnp_sent %d, A rp_cnp_handled %d", marked, ce, cnps, handled)
				if (marked != 0) != c.marked || ce != marked {
					t.Errorf("marked %d, B counted %d CE packets: want marks %v", marked, ce, c.marked)
				}
				if (cnps != 0) != c.cnp || (handled != 0) != c.cnp {
					t.Errorf("np_cnp_sent %d, rp_cnp_handled %d: want CNPs %v", cnps, handled, c.cnp)
				}
			})
		})
	}
}
