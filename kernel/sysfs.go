package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/goroce/goroce/verbs"
)

// Sysfs reads the kernel's RDMA devices from sysfs, as rdma-core's
// libibverbs (ibverbs_get_device_list) and mlnx-tools' show_gids do.
type Sysfs struct {
	// Root is where sysfs is mounted; default "/sys". Devices are read
	// from Root/class/infiniband, netdevs from Root/class/net.
	Root string
}

func (s Sysfs) root() string {
	if s.Root == "" {
		return "/sys"
	}
	return s.Root
}

// ClassDir is the directory that lists the RDMA devices.
func (s Sysfs) ClassDir() string { return filepath.Join(s.root(), "class", "infiniband") }

func (s Sysfs) devDir(name string) string { return filepath.Join(s.ClassDir(), name) }

// Device is a kernel RDMA device as sysfs shows it.
type Device struct {
	Name         string
	NodeType     int    // node_type's number: 1 CA, 2 switch, 3 router, 4 RNIC (iWARP)
	NodeTypeName string // its name: "CA", "RNIC", …
	NodeGUID     uint64
	SysImageGUID uint64
	FWVer        string // fw_ver; empty for rxe and siw
	// Driver is the kernel driver: the PCI driver of a NIC (mlx5_core,
	// bnxt_en, …); "rxe" or "siw" for the software devices, which have no
	// parent device (they live under /sys/devices/virtual/infiniband).
	Driver   string
	Virtual  bool   // a software device (rxe, siw): no hardware under it
	Parent   string // the netdev of an rxe device (its parent attribute)
	VendorID uint32 // the PCI vendor ID, or the software driver's (rxe: 0xffffff)
	PartID   uint32 // the PCI device ID
	Ports    []Port
}

// Port is a port of a kernel RDMA device.
type Port struct {
	Num           int
	State         int    // 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER
	StateName     string // "ACTIVE": rdma link show's word for State
	PhysState     int    // 1 SLEEP … 5 LinkUp …
	PhysStateName string // "LINK_UP": rdma link show's word for PhysState
	LinkLayer     string // "Ethernet" or "InfiniBand"
	Rate          string // "2.5 Gb/sec (1X SDR)"
	CapMask       uint32
	LID, SMLID    uint16
	LMC           uint8
	SMSL          uint8
	GIDTableLen   int
	PKeyTableLen  int
	Netdev        string // the netdev of GID 0 (RoCE ports), else of the rxe parent; "" for InfiniBand
}

// GID is one populated entry of a port's GID table, as show_gids reads
// it: gids/N, gid_attrs/types/N and gid_attrs/ndevs/N.
type GID struct {
	Index  int
	GID    netip.Addr // 16 bytes (IPv4-mapped for IPv4 addresses)
	Type   verbs.GIDType
	Netdev string // empty when the entry has none (InfiniBand)
}

// readAttr reads a sysfs attribute, without its trailing newline.
func readAttr(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// Devices lists the kernel's RDMA devices, by name. No RDMA subsystem at
// all (no Root/class/infiniband: ib_core not loaded, or a kernel without
// RDMA) is no devices, not an error.
func (s Sysfs) Devices() ([]Device, error) {
	ents, err := os.ReadDir(s.ClassDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var devs []Device
	for _, n := range names {
		d, err := s.Device(n)
		if errors.Is(err, syscall.ENODEV) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Has reports whether the kernel has an RDMA device name.
func (s Sysfs) Has(name string) bool {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return false
	}
	_, err := os.Stat(filepath.Join(s.devDir(name), "node_type"))
	return err == nil
}

// Device reads the device name; ENODEV if the kernel has none of that name.
func (s Sysfs) Device(name string) (Device, error) {
	if !s.Has(name) {
		return Device{}, &Error{Op: "read device", Dev: name, Err: syscall.ENODEV,
			Detail: fmt.Sprintf("the kernel has no RDMA device %s (%s lists them)", name, s.ClassDir())}
	}
	dir := s.devDir(name)
	d := Device{Name: name}
	nt, err := readAttr(filepath.Join(dir, "node_type"))
	if err != nil {
		return d, fmt.Errorf("%s: %w", name, err)
	}
	d.NodeType, d.NodeTypeName = splitCoded(nt)
	if g, err := readAttr(filepath.Join(dir, "node_guid")); err == nil {
		d.NodeGUID, _ = ParseGUID(g)
	}
	if g, err := readAttr(filepath.Join(dir, "sys_image_guid")); err == nil {
		d.SysImageGUID, _ = ParseGUID(g)
	}
	d.FWVer, _ = readAttr(filepath.Join(dir, "fw_ver"))
	d.Parent, _ = readAttr(filepath.Join(dir, "parent"))
	if drv, err := os.Readlink(filepath.Join(dir, "device", "driver")); err == nil {
		d.Driver = filepath.Base(drv)
		if v, err := readAttr(filepath.Join(dir, "device", "vendor")); err == nil {
			n, _ := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
			d.VendorID = uint32(n)
		}
		if v, err := readAttr(filepath.Join(dir, "device", "device")); err == nil {
			n, _ := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
			d.PartID = uint32(n)
		}
	} else {
		// No hardware below it: a software device. rxe is a CA and says
		// which netdev it runs on (rxe_parent's "parent" attribute); siw is
		// an RNIC (iWARP) and does not.
		d.Virtual = true
		switch {
		case d.NodeType == 1:
			d.Driver = "rxe"
			d.VendorID = rxeVendorID
		case d.NodeType == 4:
			d.Driver = "siw"
			d.VendorID = siwVendorID
		}
	}
	ents, err := os.ReadDir(filepath.Join(dir, "ports"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return d, fmt.Errorf("%s: %w", name, err)
	}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n < 1 {
			continue
		}
		d.Ports = append(d.Ports, s.port(d, n))
	}
	sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
	return d, nil
}

// The vendor IDs the software drivers report (ibv_devinfo's vendor_id):
// RXE_VENDOR_ID in rxe_param.h, SIW_VENDOR_ID in siw.h ('b','m','t').
const (
	rxeVendorID = 0xffffff
	siwVendorID = 0x626d74
)

// Port returns port n of d, if it has it.
func (d Device) Port(n int) (Port, bool) {
	for _, p := range d.Ports {
		if p.Num == n {
			return p, true
		}
	}
	return Port{}, false
}

// PortNums lists d's ports ("1", "1 and 2", "none").
func (d Device) PortNums() string {
	var s []string
	for _, p := range d.Ports {
		s = append(s, strconv.Itoa(p.Num))
	}
	switch len(s) {
	case 0:
		return "none"
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// port reads port n of d; an attribute that cannot be read stays zero.
func (s Sysfs) port(d Device, n int) Port {
	dir := filepath.Join(s.devDir(d.Name), "ports", strconv.Itoa(n))
	p := Port{Num: n}
	if v, err := readAttr(filepath.Join(dir, "state")); err == nil {
		p.State, _ = splitCoded(v)
	}
	p.StateName = PortStateName(p.State)
	if v, err := readAttr(filepath.Join(dir, "phys_state")); err == nil {
		p.PhysState, _ = splitCoded(v)
	}
	p.PhysStateName = PhysStateName(p.PhysState)
	p.LinkLayer, _ = readAttr(filepath.Join(dir, "link_layer"))
	p.Rate, _ = readAttr(filepath.Join(dir, "rate"))
	if v, err := readAttr(filepath.Join(dir, "cap_mask")); err == nil {
		c, _ := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 32)
		p.CapMask = uint32(c)
	}
	hex16 := func(attr string) uint16 {
		v, _ := readAttr(filepath.Join(dir, attr))
		c, _ := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 16)
		return uint16(c)
	}
	p.LID, p.SMLID = hex16("lid"), hex16("sm_lid")
	if v, err := readAttr(filepath.Join(dir, "lid_mask_count")); err == nil {
		c, _ := strconv.Atoi(v)
		p.LMC = uint8(c)
	}
	if v, err := readAttr(filepath.Join(dir, "sm_sl")); err == nil {
		c, _ := strconv.Atoi(v)
		p.SMSL = uint8(c)
	}
	p.GIDTableLen = countEntries(filepath.Join(dir, "gids"))
	p.PKeyTableLen = countEntries(filepath.Join(dir, "pkeys"))
	if p.LinkLayer != "InfiniBand" {
		// The netdev a RoCE port runs on is that of its default GID
		// (index 0, always populated while the netdev exists), else the
		// rxe parent.
		if nd, err := readAttr(filepath.Join(dir, "gid_attrs", "ndevs", "0")); err == nil && nd != "" {
			p.Netdev = nd
		} else {
			p.Netdev = d.Parent
		}
	}
	return p
}

func countEntries(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	return len(ents)
}

// splitCoded splits a sysfs "4: ACTIVE" into 4 and "ACTIVE".
func splitCoded(v string) (int, string) {
	num, name, _ := strings.Cut(v, ":")
	n, _ := strconv.Atoi(strings.TrimSpace(num))
	return n, strings.TrimSpace(name)
}

// PortStateName is iproute2 rdma's word for a port state (rdma/link.c).
func PortStateName(s int) string {
	names := []string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if s >= 0 && s < len(names) {
		return names[s]
	}
	return "UNKNOWN"
}

// PhysStateName is iproute2 rdma's word for a physical port state.
func PhysStateName(s int) string {
	names := []string{"UNKNOWN", "SLEEP", "POLLING", "DISABLED", "ARMED", "LINK_UP",
		"LINK_ERROR_RECOVER", "PHY_TEST", "UNKNOWN", "OPA_OFFLINE", "UNKNOWN", "OPA_LINK_UP"}
	if s >= 0 && s < len(names) {
		return names[s]
	}
	return "UNKNOWN"
}

// ParseGUID parses a GUID as sysfs writes it: "5054:00ff:fec0:020b".
func ParseGUID(s string) (uint64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return 0, fmt.Errorf("GUID %q: want four groups of four hex digits: %w", s, syscall.EINVAL)
	}
	var g uint64
	for _, p := range parts {
		n, err := strconv.ParseUint(p, 16, 16)
		if err != nil || len(p) != 4 {
			return 0, fmt.Errorf("GUID %q: want four groups of four hex digits: %w", s, syscall.EINVAL)
		}
		g = g<<16 | n
	}
	return g, nil
}

// GIDs reads the populated entries of a port's GID table as show_gids
// does: every gids/N that is not all zeros, with its type and netdev from
// gid_attrs. An unused entry's gid_attrs cannot be read (EINVAL, see
// KERNEL-BEHAVIOUR.md); it is skipped. ENODEV for a device the kernel
// does not have, ENOENT for a port it does not have.
func (s Sysfs) GIDs(dev string, port int) ([]GID, error) {
	if !s.Has(dev) {
		return nil, &Error{Op: "read GIDs", Dev: dev, Err: syscall.ENODEV,
			Detail: fmt.Sprintf("the kernel has no RDMA device %s (%s lists them)", dev, s.ClassDir())}
	}
	dir := filepath.Join(s.devDir(dev), "ports", strconv.Itoa(port))
	ents, err := os.ReadDir(filepath.Join(dir, "gids"))
	if errors.Is(err, fs.ErrNotExist) {
		d, _ := s.Device(dev)
		return nil, &Error{Op: "read GIDs", Dev: dev, Port: port, Err: syscall.ENOENT,
			Detail: fmt.Sprintf("%s has no port %d (its ports: %s)", dev, port, d.PortNums())}
	}
	if err != nil {
		return nil, err
	}
	var idx []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			idx = append(idx, n)
		}
	}
	sort.Ints(idx)
	var out []GID
	for _, i := range idx {
		n := strconv.Itoa(i)
		v, err := readAttr(filepath.Join(dir, "gids", n))
		if err != nil {
			continue
		}
		a, err := ParseSysfsGID(v)
		if err != nil || a == (netip.AddrFrom16([16]byte{})) {
			continue
		}
		typ, err := readAttr(filepath.Join(dir, "gid_attrs", "types", n))
		if err != nil {
			continue // unused meanwhile
		}
		g := GID{Index: i, GID: a, Type: verbs.GIDTypeRoCEv2}
		if typ != "RoCE v2" {
			g.Type = verbs.GIDTypeRoCEv1 // "IB/RoCE v1", as show_gids tells v1
		}
		g.Netdev, _ = readAttr(filepath.Join(dir, "gid_attrs", "ndevs", n))
		out = append(out, g)
	}
	return out, nil
}

// ParseSysfsGID parses a GID as sysfs writes it (show_port_gid: "%pI6",
// 8 groups of 4 hex digits).
func ParseSysfsGID(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, fmt.Errorf("GID %q: %w", s, syscall.EINVAL)
	}
	return netip.AddrFrom16(a.As16()), nil
}

// NetdevIndex is the ifindex of a netdev (Root/class/net/NAME/ifindex).
func (s Sysfs) NetdevIndex(name string) (int, error) {
	v, err := readAttr(filepath.Join(s.root(), "class", "net", name, "ifindex"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

// NetdevMTU is the MTU of a netdev (Root/class/net/NAME/mtu).
func (s Sysfs) NetdevMTU(name string) (int, error) {
	v, err := readAttr(filepath.Join(s.root(), "class", "net", name, "mtu"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(v)
}

// OnNetdev returns the kernel devices with a port on netdev.
func (s Sysfs) OnNetdev(netdev string) ([]Device, error) {
	devs, err := s.Devices()
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.Netdev == netdev || d.Parent == netdev {
				out = append(out, d)
				break
			}
		}
	}
	return out, nil
}

// ActiveMTU is the IB MTU a RoCE port of d runs at on a netdev of this
// MTU (ibv_query_port's active_mtu), as the kernel's drivers compute it:
// rxe leaves RXE_MAX_HDR_LENGTH, 80 bytes, for headers (rxe_set_mtu); the
// NIC drivers leave iboe_get_mtu's 96 (GRH, UDP, BTH, XRC ETH, AtomicETH
// and ICRC). At least 256, at most 4096.
func (d Device) ActiveMTU(netdevMTU int) verbs.MTU {
	hdr := 96
	if d.Driver == "rxe" {
		hdr = 80
	}
	if m := verbs.MTUFromBytes(netdevMTU - hdr); m != 0 {
		return m
	}
	return verbs.MTU256
}

// RoCEOnNetdev reports whether d's RoCE packets pass through its netdev,
// where a goroce device on that netdev sees and sends them (roce probe):
// true for rxe, which sends and receives through the kernel's IP stack and
// the netdev's queues. A NIC (mlx5, bnxt_re, qedr …) terminates RoCE in
// hardware: its RoCE traffic never reaches the netdev.
func (d Device) RoCEOnNetdev() bool { return d.Driver == "rxe" }
