package host

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/wire"
)

// TestConfigDevice: the registry is config's (config.Registry): a device's
// name, creation time and RoCE versions reach the rdma_cm tree, which then
// keeps a v1-only device in RoCE v1 and refuses it RoCE v2; a name the
// registry lacks is ENODEV; a definition with bad roce_versions is EINVAL.
func TestConfigDevice(t *testing.T) {
	dir := t.TempDir()
	r := NewRegistry(dir)
	created := time.Date(2025, 11, 29, 17, 57, 0, 0, time.UTC)
	for _, d := range []DeviceDef{
		{Name: "rxe0", Type: "rxe", Netdev: "eth0", Versions: VersionsV1, Created: created},
		{Name: "rxe1", Type: "rxe", Netdev: "eth1", Created: created}, // no roce_versions: both
	} {
		if err := r.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	var reg config.Registry = r
	for name, want := range map[string]config.Device{
		"rxe0": {Name: "rxe0", Created: created, RoCEv1: true},
		"rxe1": {Name: "rxe1", Created: created, RoCEv1: true, RoCEv2: true},
	} {
		got, err := reg.ConfigDevice(name)
		if err != nil || got.Name != want.Name || !got.Created.Equal(want.Created) || got.RoCEv1 != want.RoCEv1 || got.RoCEv2 != want.RoCEv2 {
			t.Errorf("ConfigDevice(%s) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	if _, err := reg.ConfigDevice("rxe9"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("ConfigDevice(rxe9) = %v, want ENODEV", err)
	}

	tree := config.Open(dir, r)
	if m, err := tree.DefaultMode("rxe0", 1); err != nil || m != wire.RoCEv1 {
		t.Errorf("DefaultMode(rxe0) = %v, %v; want RoCE v1", m, err)
	}
	if err := tree.SetDefaultMode("rxe0", 1, wire.RoCEv2); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("SetDefaultMode(rxe0, RoCE v2) = %v, want EINVAL", err)
	}
	if _, err := tree.DefaultTOS("rxe9", 1); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("DefaultTOS(rxe9) = %v, want ENODEV", err)
	}

	if err := r.Add(DeviceDef{Name: "rxe2", Type: "rxe", Netdev: "eth2", Versions: "v3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.ConfigDevice("rxe2"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("ConfigDevice of roce_versions v3 = %v, want EINVAL", err)
	}
}
