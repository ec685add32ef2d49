package kernel_test

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/kernel/kerneltest"
	"github.com/goroce/goroce/verbs"
)

// TestSysfsDevices reads an rxe device and a NIC from a tree laid out as
// the kernel lays it out: names, GUIDs, driver, ports and their states,
// netdevs, table sizes.
func TestSysfsDevices(t *testing.T) {
	tr := kerneltest.NewTree(t)
	tr.AddDevice(kerneltest.MLX5("mlx5_0", "ens1f0"))
	tr.AddDevice(kerneltest.LabRXE())
	s := kernel.Sysfs{Root: tr.Root}
	devs, err := s.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Name != "mlx5_0" || devs[1].Name != "rxe0" {
		t.Fatalf("devices %+v, want mlx5_0 and rxe0 in name order", devs)
	}
	rxe, mlx := devs[1], devs[0]
	if rxe.NodeGUID != 0x505400fffec0020b || rxe.SysImageGUID != rxe.NodeGUID || rxe.NodeType != 1 || rxe.NodeTypeName != "CA" {
		t.Errorf("rxe0 %+v", rxe)
	}
	if rxe.Driver != "rxe" || !rxe.Virtual || rxe.Parent != "eth0" || rxe.VendorID != 0xffffff || !rxe.RoCEOnNetdev() {
		t.Errorf("rxe0 driver %q virtual %v parent %q vendor %#x", rxe.Driver, rxe.Virtual, rxe.Parent, rxe.VendorID)
	}
	if mlx.Driver != "mlx5_core" || mlx.Virtual || mlx.VendorID != 0x15b3 || mlx.PartID != 0x1017 || mlx.FWVer != "16.35.2000" || mlx.RoCEOnNetdev() {
		t.Errorf("mlx5_0 %+v", mlx)
	}
	p, ok := rxe.Port(1)
	if !ok || len(rxe.Ports) != 1 {
		t.Fatalf("rxe0 ports %+v", rxe.Ports)
	}
	if p.State != 4 || p.StateName != "ACTIVE" || p.PhysState != 5 || p.PhysStateName != "LINK_UP" ||
		p.LinkLayer != "Ethernet" || p.Netdev != "eth0" || p.GIDTableLen != 1024 || p.PKeyTableLen != 1 ||
		p.CapMask != 0x00010000 || p.Rate != "2.5 Gb/sec (1X SDR)" {
		t.Errorf("rxe0 port 1 %+v", p)
	}
	if _, ok := rxe.Port(2); ok {
		t.Error("rxe0 has a port 2")
	}
	if got := rxe.PortNums(); got != "1" {
		t.Errorf("PortNums %q", got)
	}
	if mp, _ := mlx.Port(1); mp.Netdev != "ens1f0" || mp.GIDTableLen != 255 {
		t.Errorf("mlx5_0 port 1 %+v", mp)
	}
	if on, err := s.OnNetdev("eth0"); err != nil || len(on) != 1 || on[0].Name != "rxe0" {
		t.Errorf("OnNetdev(eth0) %v %v", on, err)
	}
	if _, err := s.Device("rxe9"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("Device(rxe9): %v, want ENODEV", err)
	}
	for _, bad := range []string{"", "..", "rxe0/ports", "."} {
		if s.Has(bad) {
			t.Errorf("Has(%q)", bad)
		}
	}
	// No RDMA at all: no devices, no error.
	if devs, err := (kernel.Sysfs{Root: t.TempDir()}).Devices(); err != nil || len(devs) != 0 {
		t.Errorf("a sysfs without class/infiniband: %v %v", devs, err)
	}
}

// TestSysfsGIDs reads GID tables as show_gids does: populated entries
// only, with their types (RoCE v1 listed as such) and netdevs; a missing
// device or port is ENODEV or ENOENT.
func TestSysfsGIDs(t *testing.T) {
	tr := kerneltest.NewTree(t)
	tr.AddDevice(kerneltest.MLX5("mlx5_0", "ens1f0"))
	tr.AddDevice(kerneltest.LabRXE())
	s := kernel.Sysfs{Root: tr.Root}
	g, err := s.GIDs("rxe0", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := []kernel.GID{
		{Index: 0, GID: netip.MustParseAddr("fe80::5054:ff:fec0:20b"), Type: verbs.GIDTypeRoCEv2, Netdev: "eth0"},
		{Index: 1, GID: netip.MustParseAddr("::ffff:192.0.2.11"), Type: verbs.GIDTypeRoCEv2, Netdev: "eth0"},
		{Index: 2, GID: netip.MustParseAddr("fd00:c0:2::11"), Type: verbs.GIDTypeRoCEv2, Netdev: "eth0"},
	}
	if len(g) != len(want) {
		t.Fatalf("rxe0 GIDs %v, want %v", g, want)
	}
	for i := range want {
		if g[i] != want[i] {
			t.Errorf("GID %d: %+v, want %+v", i, g[i], want[i])
		}
	}
	m, err := s.GIDs("mlx5_0", 1)
	if err != nil || len(m) != 4 || m[2].Type != verbs.GIDTypeRoCEv1 || m[3].Type != verbs.GIDTypeRoCEv2 || m[3].GID != netip.MustParseAddr("::ffff:192.0.2.5") {
		t.Errorf("mlx5_0 GIDs %v %v", m, err)
	}
	if _, err := s.GIDs("rxe0", 2); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("GIDs(rxe0, 2): %v, want ENOENT", err)
	} else if want := "rxe0 has no port 2 (its ports: 1)"; !strings.Contains(err.Error(), want) {
		t.Errorf("GIDs(rxe0, 2): %v, want it to say %q", err, want)
	}
	if _, err := s.GIDs("nosuch", 1); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("GIDs(nosuch, 1): %v, want ENODEV", err)
	}
}

func TestParseGUID(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"5054:00ff:fec0:020b", 0x505400fffec0020b, true},
		{"0000:0000:0000:0000", 0, true},
		{"5054:00ff:fec0", 0, false},
		{"5054:00ff:fec0:020b:0000", 0, false},
		{"5054:0ff:fec0:020b", 0, false},
		{"5054:00ff:fec0:02xb", 0, false},
		{"", 0, false},
	} {
		got, err := kernel.ParseGUID(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseGUID(%q) = %#x, %v", c.in, got, err)
		}
		if err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("ParseGUID(%q): %v, want EINVAL", c.in, err)
		}
	}
}

// TestActiveMTU: rxe leaves 80 bytes for headers, NICs 96 (iboe_get_mtu):
// the two differ on a netdev MTU between 1104 and 1119.
func TestActiveMTU(t *testing.T) {
	rxe := kernel.Device{Driver: "rxe"}
	nic := kernel.Device{Driver: "mlx5_core"}
	for _, c := range []struct {
		mtu      int
		rxe, nic verbs.MTU
	}{
		{1500, verbs.MTU1024, verbs.MTU1024},
		{9000, verbs.MTU4096, verbs.MTU4096},
		{1110, verbs.MTU1024, verbs.MTU512},
		{300, verbs.MTU256, verbs.MTU256},
	} {
		if got := rxe.ActiveMTU(c.mtu); got != c.rxe {
			t.Errorf("rxe on MTU %d: %v, want %v", c.mtu, got, c.rxe)
		}
		if got := nic.ActiveMTU(c.mtu); got != c.nic {
			t.Errorf("NIC on MTU %d: %v, want %v", c.mtu, got, c.nic)
		}
	}
}
