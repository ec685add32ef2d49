package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// probeFabric returns a fabric that closes when the test ends, after
// the devices and CMs on it.
func probeFabric(t *testing.T) *fabric.Fabric {
	f := fabric.New()
	t.Cleanup(func() { f.Close() })
	return f
}

// probeDevice opens a device on a new port of f owning gids, with a CM of
// its own serving it.
func probeDevice(t *testing.T, f *fabric.Fabric, name string, gids ...verbs.GIDEntry) (*CM, *verbs.Device) {
	t.Helper()
	var addrs []netip.Addr
	for _, g := range gids {
		addrs = append(addrs, g.GID)
	}
	port, err := f.AddPort(fabric.PortConfig{Name: name, GIDs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: port, MAC: port.MAC(), GIDs: gids})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	cm := New(Options{})
	if err := cm.AddDevice(dev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() }) // before the device's: LIFO
	return cm, dev
}

// TestProbe: Probe asks a peer's CM over each RoCE version with the
// mismatch diagnosis' ClassPortInfo Get. A peer whose port speaks only
// RoCE v1 answers over v1 (GetResp, "unsupported method/attribute", from
// its GID) and never over v2; the v2 probe ends with ETIMEDOUT when its
// context does. The argument errors are the documented errnos.
func TestProbe(t *testing.T) {
	f := probeFabric(t)
	aIP, bIP := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	cmA, devA := probeDevice(t, f, "rxeA",
		verbs.GIDEntry{GID: gidOf(aIP), Type: verbs.GIDTypeRoCEv2},
		verbs.GIDEntry{GID: gidOf(aIP), Type: verbs.GIDTypeRoCEv1})
	probeDevice(t, f, "rxeB", verbs.GIDEntry{GID: gidOf(bIP), Type: verbs.GIDTypeRoCEv1})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cmA.Probe(ctx, devA, aIP, bIP, verbs.GIDTypeRoCEv1)
	if err != nil {
		t.Fatalf("probe over RoCE v1: %v", err)
	}
	if r.From != gidOf(bIP) || r.Type != verbs.GIDTypeRoCEv1 || r.Status != mad.StatusUnsupportedMethodAttribute || r.RTT <= 0 {
		t.Errorf("RoCE v1 reply %+v: want from %v over RoCE v1, status %v, a round trip", r, gidOf(bIP), mad.StatusUnsupportedMethodAttribute)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	_, err = cmA.Probe(short, devA, aIP, bIP, verbs.GIDTypeRoCEv2)
	if !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("probe over RoCE v2 of a v1-only peer: %v, want ETIMEDOUT and the deadline", err)
	}

	// The errors of a bad call.
	_, err = cmA.Probe(ctx, devA, netip.MustParseAddr("192.0.2.9"), bIP, verbs.GIDTypeRoCEv1)
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("probe from an address without a GID: %v, want EADDRNOTAVAIL", err)
	}
	other := New(Options{})
	_, err = other.Probe(ctx, devA, aIP, bIP, verbs.GIDTypeRoCEv1)
	if !errors.Is(err, syscall.ENODEV) {
		t.Errorf("probe on a CM without the device: %v, want ENODEV", err)
	}
	other.Close()
	_, err = other.Probe(ctx, devA, aIP, bIP, verbs.GIDTypeRoCEv1)
	if !errors.Is(err, syscall.ESHUTDOWN) {
		t.Errorf("probe after Close: %v, want ESHUTDOWN", err)
	}
	cmA.mu.Lock()
	n := len(cmA.peerProbes)
	cmA.mu.Unlock()
	if n != 0 {
		t.Errorf("%d probes left waiting after their calls returned", n)
	}
}

// TestProbeClose: Close ends a Probe that is waiting, with ESHUTDOWN.
func TestProbeClose(t *testing.T) {
	f := probeFabric(t)
	aIP := netip.MustParseAddr("192.0.2.1")
	cmA, devA := probeDevice(t, f, "rxeA", verbs.GIDEntry{GID: gidOf(aIP), Type: verbs.GIDTypeRoCEv2})
	errc := make(chan error, 1)
	go func() {
		_, err := cmA.Probe(context.Background(), devA, aIP, netip.MustParseAddr("192.0.2.77"), verbs.GIDTypeRoCEv2)
		errc <- err
	}()
	for {
		cmA.mu.Lock()
		n := len(cmA.peerProbes)
		cmA.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cmA.Close()
	if err := <-errc; !errors.Is(err, syscall.ESHUTDOWN) {
		t.Errorf("probe ended by Close: %v, want ESHUTDOWN", err)
	}
}
