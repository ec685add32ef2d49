package host_test

import (
	"bytes"
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// addDevice records a device on h's veth, as `roce link add` run in h's namespace would.
func addDevice(t *testing.T, reg *host.Registry, h *nettest.Host, name string, v host.Versions) {
	t.Helper()
	err := h.Do(func() error {
		ns, err := host.CurrentNetns()
		if err != nil {
			return err
		}
		if ns.Name != h.NSName {
			t.Errorf("CurrentNetns name %q, want %q", ns.Name, h.NSName)
		}
		return reg.Add(host.DeviceDef{Name: name, Type: "rxe", Netdev: h.Ifname, Netns: ns, Versions: v})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func gidIndex(t *testing.T, d *host.Device, want netip.Addr, typ verbs.GIDType) uint8 {
	for i, e := range d.GIDs() {
		if e.GID == netip.AddrFrom16(want.As16()) && e.Type == typ {
			return uint8(i)
		}
	}
	t.Fatalf("%s has no %v GID %v: %v", d.Def.Name, typ, want, d.GIDs())
	return 0
}

// Two devices bound to netdevs in different namespaces, opened by name
// from this (root) namespace, exchange RC traffic over RoCE v2 (IPv4,
// IPv6) and RoCE v1; a second open of a device says who holds it.
func TestOpenOverVeth(t *testing.T) {
	for _, c := range []struct {
		name string
		v    host.Versions
		typ  verbs.GIDType
		ip6  bool
	}{
		{"v2-IPv4", host.VersionsV2, verbs.GIDTypeRoCEv2, false},
		{"v2-IPv6", host.VersionsV2, verbs.GIDTypeRoCEv2, true},
		{"v1-IPv4", host.VersionsBoth, verbs.GIDTypeRoCEv1, false},
		{"v2-on-both", host.VersionsBoth, verbs.GIDTypeRoCEv2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
			dir := t.TempDir()
			reg := host.NewRegistry(dir)
			addDevice(t, reg, ha, "rxe0", c.v)
			addDevice(t, reg, hb, "rxe1", c.v)
			a, err := host.Open("rxe0", host.Options{RunDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := host.Open("rxe1", host.Options{RunDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := host.Open("rxe0", host.Options{RunDir: dir}); !errors.Is(err, syscall.EBUSY) || !errors.Is(err, host.ErrBusy) {
				t.Errorf("second open: %v, want EBUSY naming the holder", err)
			}
			ipA, ipB := ha.IPv4, hb.IPv4
			if c.ip6 {
				ipA, ipB = ha.IPv6, hb.IPv6
			}
			ia, ib := gidIndex(t, a, ipA, c.typ), gidIndex(t, b, ipB, c.typ)
			mk := func(d *host.Device) (*verbs.PD, *verbs.CQ, *verbs.QP) {
				pd, _ := d.AllocPD()
				cq, _ := d.CreateCQ(64)
				qp, err := pd.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
					Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				return pd, cq, qp
			}
			pdA, cqA, qpA := mk(a)
			pdB, cqB, qpB := mk(b)
			if err := verbstest.ConnectQP(qpA, qpB.Num(), netip.AddrFrom16(ipB.As16()), ia, verbstest.Options{}); err != nil {
				t.Fatal(err)
			}
			if err := verbstest.ConnectQP(qpB, qpA.Num(), netip.AddrFrom16(ipA.As16()), ib, verbstest.Options{}); err != nil {
				t.Fatal(err)
			}
			src := bytes.Repeat([]byte("0123456789abcdef"), 700) // 11200 bytes: 11 packets at MTU 1024
			dst := make([]byte, len(src))
			mrA, _ := pdA.RegMR(src, verbs.AccessLocalWrite)
			mrB, _ := pdB.RegMR(dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			// WRITE_WITH_IMM: B learns of the write from its CQ, which is also
			// what orders B's memory for this goroutine (the race detector does
			// not see the network as synchronization).
			if err := qpB.PostRecv(verbs.RecvWR{WRID: 7}); err != nil {
				t.Fatal(err)
			}
			if err := qpA.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 42, Flags: verbs.SendSignaled,
				SGList: []verbs.SGE{mrA.SGE(0, len(src))}, RemoteAddr: mrB.Addr(), RKey: mrB.RKey()}); err != nil {
				t.Fatal(err)
			}
			if wc := verbstest.Poll(t, cqA, testenv.Slow); wc.Status != verbs.WCSuccess {
				t.Fatalf("WRITE: %v", &wc)
			}
			if wc := verbstest.Poll(t, cqB, testenv.Slow); wc.Status != verbs.WCSuccess || wc.ImmData != 42 || wc.ByteLen != uint32(len(src)) {
				t.Fatalf("WRITE_WITH_IMM at B: %v", &wc)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("written data differs")
			}
		})
	}
}

// TestOpenWhileOwnerAsked: a control command asking who runs a device
// (Registry.OwnerOf, as roce stat and roce link show -d do) holds a
// shared lock on the device's lock file for a moment; an Open that
// falls in that moment used to fail with "device … is in use" (no
// owner named), as bench/perfq.sh's `roce perf` did beside its `roce
// stat` sampler. Every Open must succeed while nobody runs the device.
func TestOpenWhileOwnerAsked(t *testing.T) {
	ha, _ := nettest.VethPair(t, nettest.Options{MTU: 1500})
	dir := t.TempDir()
	reg := host.NewRegistry(dir)
	addDevice(t, reg, ha, "rxe0", host.VersionsV2)
	stop := make(chan struct{})
	done := make(chan int)
	const askers, opens = 2, 200
	for range askers {
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				reg.OwnerOf("rxe0")
				n++
			}
		}()
	}
	failed := 0
	for range opens {
		d, err := host.Open("rxe0", host.Options{RunDir: dir, Unprivileged: true})
		if err != nil {
			failed++
			t.Log(err)
			continue
		}
		d.Close()
	}
	close(stop)
	asked := 0
	for range askers {
		asked += <-done
	}
	if failed > 0 {
		t.Errorf("%d of %d opens failed while OwnerOf was asked %d times", failed, opens, asked)
	}
}
