// Package kerneltest makes fake sysfs trees of kernel RDMA devices, laid
// out as Linux 6.1 lays them out (../shared/lab/KERNEL-BEHAVIOUR.md), for
// tests of package kernel and of what uses it with a sysfs root of their
// own.
package kerneltest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Tree is a fake sysfs mount: Root/class/infiniband and Root/class/net.
type Tree struct {
	Root string
	t    testing.TB
}

// NewTree makes an empty tree in a temporary directory of t.
func NewTree(t testing.TB) *Tree {
	t.Helper()
	tr := &Tree{Root: t.TempDir(), t: t}
	for _, d := range []string{"class/infiniband", "class/net", "devices/virtual/infiniband"} {
		if err := os.MkdirAll(filepath.Join(tr.Root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// GID is a populated GID table entry.
type GID struct {
	Index  int
	Addr   string // an IPv4 or IPv6 address
	Type   string // "RoCE v2" or "IB/RoCE v1", as gid_attrs/types shows it
	Netdev string
}

// Port is a port of a device.
type Port struct {
	State       string // "4: ACTIVE"
	PhysState   string // "5: LinkUp"
	LinkLayer   string // "Ethernet"
	Rate        string
	GIDTableLen int // how many gids/N files; default 1024, rxe's
	GIDs        []GID
}

// Device is an RDMA device.
type Device struct {
	Name     string
	NodeType string // "1: CA"
	NodeGUID string // "5054:00ff:fec0:020b"
	FWVer    string
	Parent   string // rxe's parent attribute, "" for none
	// PCIDriver, if set, makes a PCI NIC: device/driver links to it, and
	// device/vendor and device/device hold Vendor and PartID.
	PCIDriver      string
	Vendor, PartID string
	Ports          []Port
}

func (tr *Tree) write(p, content string) {
	tr.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o444); err != nil {
		tr.t.Fatal(err)
	}
}

// SysfsGID writes addr as sysfs' gids/N does.
func SysfsGID(addr string) string {
	a := netip.MustParseAddr(addr)
	b := a.As16()
	s := ""
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02x%02x", b[i], b[i+1])
	}
	return s
}

// AddDevice adds d to the tree (and replaces a device of its name).
func (tr *Tree) AddDevice(d Device) {
	tr.t.Helper()
	dir := filepath.Join(tr.Root, "devices/virtual/infiniband", d.Name)
	os.RemoveAll(dir)
	link := filepath.Join(tr.Root, "class/infiniband", d.Name)
	os.Remove(link)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("../../devices/virtual/infiniband", d.Name), link); err != nil {
		tr.t.Fatal(err)
	}
	nt := d.NodeType
	if nt == "" {
		nt = "1: CA"
	}
	tr.write(filepath.Join(dir, "node_type"), nt+"\n")
	tr.write(filepath.Join(dir, "node_guid"), d.NodeGUID+"\n")
	tr.write(filepath.Join(dir, "sys_image_guid"), d.NodeGUID+"\n")
	tr.write(filepath.Join(dir, "fw_ver"), d.FWVer+"\n")
	tr.write(filepath.Join(dir, "node_desc"), d.Name+"\n")
	if d.Parent != "" {
		tr.write(filepath.Join(dir, "parent"), d.Parent+"\n")
	}
	if d.PCIDriver != "" {
		pci := filepath.Join(tr.Root, "devices/pci0000:00/0000:00:03.0")
		drv := filepath.Join(tr.Root, "bus/pci/drivers", d.PCIDriver)
		if err := os.MkdirAll(drv, 0o755); err != nil {
			tr.t.Fatal(err)
		}
		tr.write(filepath.Join(pci, "vendor"), d.Vendor+"\n")
		tr.write(filepath.Join(pci, "device"), d.PartID+"\n")
		os.Remove(filepath.Join(pci, "driver"))
		if err := os.Symlink(drv, filepath.Join(pci, "driver")); err != nil {
			tr.t.Fatal(err)
		}
		if err := os.Symlink(pci, filepath.Join(dir, "device")); err != nil {
			tr.t.Fatal(err)
		}
	}
	for i, p := range d.Ports {
		pd := filepath.Join(dir, "ports", strconv.Itoa(i+1))
		def := func(v, d string) string {
			if v == "" {
				return d
			}
			return v
		}
		tr.write(filepath.Join(pd, "state"), def(p.State, "4: ACTIVE")+"\n")
		tr.write(filepath.Join(pd, "phys_state"), def(p.PhysState, "5: LinkUp")+"\n")
		tr.write(filepath.Join(pd, "link_layer"), def(p.LinkLayer, "Ethernet")+"\n")
		tr.write(filepath.Join(pd, "rate"), def(p.Rate, "2.5 Gb/sec (1X SDR)")+"\n")
		tr.write(filepath.Join(pd, "cap_mask"), "0x00010000\n")
		tr.write(filepath.Join(pd, "lid"), "0x0\n")
		tr.write(filepath.Join(pd, "sm_lid"), "0x0\n")
		tr.write(filepath.Join(pd, "lid_mask_count"), "0\n")
		tr.write(filepath.Join(pd, "sm_sl"), "0\n")
		tr.write(filepath.Join(pd, "pkeys/0"), "0xffff\n")
		n := p.GIDTableLen
		if n == 0 {
			n = 1024
		}
		set := map[int]GID{}
		for _, g := range p.GIDs {
			set[g.Index] = g
		}
		for j := 0; j < n; j++ {
			g, ok := set[j]
			if !ok {
				// An unused entry: zeros, and no readable gid_attrs (the
				// kernel's read fails EINVAL; here the files are absent).
				tr.write(filepath.Join(pd, "gids", strconv.Itoa(j)), "0000:0000:0000:0000:0000:0000:0000:0000\n")
				continue
			}
			tr.write(filepath.Join(pd, "gids", strconv.Itoa(j)), SysfsGID(g.Addr)+"\n")
			tr.write(filepath.Join(pd, "gid_attrs/types", strconv.Itoa(j)), g.Type+"\n")
			tr.write(filepath.Join(pd, "gid_attrs/ndevs", strconv.Itoa(j)), g.Netdev+"\n")
		}
	}
}

// RemoveDevice removes the device name.
func (tr *Tree) RemoveDevice(name string) {
	os.Remove(filepath.Join(tr.Root, "class/infiniband", name))
	os.RemoveAll(filepath.Join(tr.Root, "devices/virtual/infiniband", name))
}

// AddNetdev adds a netdev with its ifindex and MTU.
func (tr *Tree) AddNetdev(name string, ifindex, mtu int) {
	tr.t.Helper()
	dir := filepath.Join(tr.Root, "class/net", name)
	tr.write(filepath.Join(dir, "ifindex"), strconv.Itoa(ifindex)+"\n")
	tr.write(filepath.Join(dir, "mtu"), strconv.Itoa(mtu)+"\n")
}

// LabRXE is rxe0 of lab VM vm1 as KERNEL-BEHAVIOUR.md records it: on eth0
// (MAC 52:54:00:c0:02:0b), GIDs 0 fe80::5054:ff:fec0:20b, 1
// ::ffff:192.0.2.11 and 2 fd00:c0:2::11, all RoCE v2, 1024 entries.
func LabRXE() Device {
	return Device{Name: "rxe0", NodeGUID: "5054:00ff:fec0:020b", Parent: "eth0",
		Ports: []Port{{GIDs: []GID{
			{0, "fe80::5054:ff:fec0:20b", "RoCE v2", "eth0"},
			{1, "192.0.2.11", "RoCE v2", "eth0"},
			{2, "fd00:c0:2::11", "RoCE v2", "eth0"},
		}}}}
}

// MLX5 is a ConnectX-5-like NIC port: mlx5_core, vendor 0x15b3 part
// 0x1017, each address twice, RoCE v1 then v2, as mlx5 lists them.
func MLX5(name, netdev string) Device {
	return Device{Name: name, NodeGUID: "b859:9f03:00d4:2e6a", FWVer: "16.35.2000", PCIDriver: "mlx5_core",
		Vendor: "0x15b3", PartID: "0x1017",
		Ports: []Port{{Rate: "25 Gb/sec (1X EDR)", GIDTableLen: 255, GIDs: []GID{
			{0, "fe80::ba59:9fff:fed4:2e6a", "IB/RoCE v1", netdev},
			{1, "fe80::ba59:9fff:fed4:2e6a", "RoCE v2", netdev},
			{2, "192.0.2.5", "IB/RoCE v1", netdev},
			{3, "192.0.2.5", "RoCE v2", netdev},
		}}}}
}
