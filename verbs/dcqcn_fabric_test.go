package verbs_test

// DCQCN's convergence in the fabric's deterministic model (issue 16 item
// 6): n senders WRITE to one receiver through a bottleneck that marks CE
// past a queue threshold; in virtual time, each flow's share and the
// bottleneck's use are measured once the flows have settled.

import (
	"fmt"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// dumbbell is n sender devices with a QP each, connected to n QPs of one
// receiver device whose port sits behind bn.
type dumbbell struct {
	fab     *fabric.Fabric
	rx      *fabric.Port
	senders []verbstest.Side
	recv    []verbstest.Side
}

func newDumbbell(t *testing.T, n int, bn fabric.Bottleneck, ecn bool) *dumbbell {
	d := &dumbbell{fab: fabric.New()}
	t.Cleanup(func() { d.fab.Close() })
	gid := func(i int) verbs.GIDEntry {
		return verbs.GIDEntry{GID: netip.MustParseAddr(fmt.Sprintf("::ffff:192.0.2.%d", i+1)), Type: verbs.GIDTypeRoCEv2}
	}
	open := func(i int, cfg fabric.PortConfig) *verbs.Device {
		port, err := d.fab.AddPort(cfg)
		if err != nil {
			t.Fatal(err)
		}
		dev, err := verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: port, MAC: port.MAC(), GIDs: []verbs.GIDEntry{gid(i)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		if cfg.Bottleneck.Rate != 0 {
			d.rx = port
		}
		return dev
	}
	rdev := open(0, fabric.PortConfig{GIDs: []netip.Addr{gid(0).GID}, Bottleneck: bn})
	if ecn {
		setECN(t, rdev, true, false, func(c *verbs.ECNConfig) { c.NP.MinTimeBetweenCNPs = 50 })
	}
	side := func(dev *verbs.Device, g verbs.GIDEntry) verbstest.Side {
		s := verbstest.Side{Dev: dev, GID: g}
		var err error
		if s.PD, err = dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.CQ, err = dev.CreateCQ(256); err != nil {
			t.Fatal(err)
		}
		if s.QP, err = s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.CQ, RecvCQ: s.CQ,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range n {
		sdev := open(i+1, fabric.PortConfig{GIDs: []netip.Addr{gid(i + 1).GID}})
		if ecn {
			setECN(t, sdev, false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
		}
		s, r := side(sdev, gid(i+1)), side(rdev, gid(0))
		if err := verbstest.ConnectQP(s.QP, r.QP.Num(), gid(0).GID, 0, verbstest.Options{}); err != nil {
			t.Fatal(err)
		}
		if err := verbstest.ConnectQP(r.QP, s.QP.Num(), gid(i+1).GID, 0, verbstest.Options{}); err != nil {
			t.Fatal(err)
		}
		d.senders, d.recv = append(d.senders, s), append(d.recv, r)
	}
	return d
}

// flow WRITEs chunk bytes at a time, out outstanding, from start to stop,
// and returns the bytes of the WRITEs completed within [from, stop).
func (d *dumbbell) flow(t *testing.T, i int, start, from, stop time.Time, chunk, out int) (bytes int) {
	s, r := d.senders[i], d.recv[i]
	src := source(t, s.PD, make([]byte, chunk))
	dst := newCanary(t, r.PD, chunk, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	time.Sleep(time.Until(start))
	post := func(id uint64) {
		mustPostSend(t, s.QP, verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, chunk), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
	}
	for id := range out {
		post(uint64(id))
	}
	for id := uint64(out); ; id++ {
		wc := verbstest.MustSucceed(t, s.CQ)
		now := time.Now()
		if !now.Before(stop) {
			for range out - 1 {
				verbstest.MustSucceed(t, s.CQ) // the other outstanding WRITEs
			}
			return bytes
		}
		if !now.Before(from) {
			bytes += chunk
		}
		_ = wc
		post(id)
	}
}

// jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all equal.
func jain(xs []int) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	return s * s / (float64(len(xs)) * s2)
}

// TestDCQCNConvergence: 2 and 4 flows, started 20 ms apart and each
// keeping 512 KiB in flight, share a 400 Mb/s bottleneck with a 256 KiB
// queue that marks past 32 KiB. Without DCQCN (the same run) the queue
// overflows; with it, in the second half of 400 ms of virtual time, no
// frame is dropped, the flows share fairly (Jain's index), and the
// bottleneck is used at least half. Then the bottleneck goes and one flow
// alone recovers to line rate: its RP goes idle, its goodput nears 1 Gb/s.
func TestDCQCNConvergence(t *testing.T) {
	bn := fabric.Bottleneck{Rate: 400_000_000, MarkBytes: 32 << 10, LimitBytes: 256 << 10}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d flows", n), func(t *testing.T) {
			var drops [2]uint64
			for k, ecn := range []bool{false, true} {
				synctest.Test(t, func(t *testing.T) {
					d := newDumbbell(t, n, bn, ecn)
					t0 := time.Now()
					from, stop := t0.Add(200*time.Millisecond), t0.Add(400*time.Millisecond)
					got := make([]int, n)
					done := make(chan int)
					for i := range n {
						go func() {
							got[i] = d.flow(t, i, t0.Add(time.Duration(i)*20*time.Millisecond), from, stop, 64<<10, 8)
							done <- i
						}()
					}
					for range n {
						<-done
					}
					sum := 0
					for _, b := range got {
						sum += b
					}
					util := float64(sum*8) / float64(bn.Rate) / stop.Sub(from).Seconds()
					fs := d.rx.FaultStats()
					drops[k] = fs.TailDropped.Load()
					t.Logf("DCQCN %v: bytes per flow %v: fairness %.3f, utilisation %.3f, marked %d, tail-dropped %d",
						ecn, got, jain(got), util, fs.Marked.Load(), drops[k])
					if !ecn {
						return
					}
					if drops[k] != 0 || jain(got) < 0.9 || util < 0.5 {
						t.Errorf("with DCQCN: %d drops, fairness %.3f, utilisation %.3f; want 0, >= 0.9, >= 0.5", drops[k], jain(got), util)
					}
					// Congestion ends: one flow alone recovers.
					d.rx.SetBottleneck(fabric.Bottleneck{})
					if _, limited := d.senders[0].QP.CongestionRate(); !limited {
						t.Error("flow 0 not rate-limited at the end of congestion")
					}
					t1 := time.Now()
					b := d.flow(t, 0, t1, t1.Add(100*time.Millisecond), t1.Add(200*time.Millisecond), 64<<10, 8)
					rate, limited := d.senders[0].QP.CongestionRate()
					gp := float64(b*8) / 0.1 / 1e6
					t.Logf("alone: goodput %.0f Mb/s, DCQCN rate %.0f Mb/s, limited %v", gp, rate, limited)
					if limited || gp < 800 {
						t.Errorf("after congestion: goodput %.0f Mb/s, limited %v; want >= 800 of 1000 Mb/s line rate, recovered", gp, limited)
					}
				})
			}
			if drops[0] == 0 {
				t.Error("without DCQCN the queue did not overflow: the test shows nothing")
			}
		})
	}
}
