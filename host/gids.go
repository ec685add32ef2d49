package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// Netdev is what goroce needs to know of a netdev.
type Netdev struct {
	Name    string
	Index   int
	MAC     wire.MAC
	MTU     int
	Up      bool
	Running bool
	Addrs   []netip.Addr // in the kernel's order: IPv4, then IPv6
}

// LookupNetdev reads a netdev of the calling thread's namespace.
func LookupNetdev(nl *netlink.Handle, name string) (Netdev, error) {
	l, err := nl.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return Netdev{}, &verbs.Error{Op: "netdev", Detail: fmt.Sprintf("netdev %s not found", name), Err: syscall.ENODEV}
		}
		return Netdev{}, &verbs.Error{Op: "netdev", Detail: "netdev " + name, Err: err}
	}
	a := l.Attrs()
	nd := Netdev{Name: a.Name, Index: a.Index, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0,
		Running: a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown && a.Flags&net.FlagUp != 0}
	copy(nd.MAC[:], a.HardwareAddr)
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		addrs, err := nl.AddrList(l, fam)
		if err != nil {
			return Netdev{}, &verbs.Error{Op: "netdev", Detail: "netdev " + name + " addresses", Err: err}
		}
		for _, ad := range addrs {
			if ad.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				continue
			}
			if ip, ok := netip.AddrFromSlice(ad.IP); ok {
				nd.Addrs = append(nd.Addrs, ip.Unmap())
			}
		}
	}
	return nd, nil
}

// DefaultGID is the link-local GID Linux derives from a port's MAC (the
// EUI-64 interface identifier under fe80::/64): GID index 0.
func DefaultGID(mac wire.MAC) netip.Addr {
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: mac[0] ^ 2, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe,
		13: mac[3], 14: mac[4], 15: mac[5]})
}

// GIDTable is a port's GID table, kept in the order Linux keeps it: the
// default GID first, then one entry per address in the order addresses
// appeared; with both RoCE versions each address has an "IB/RoCE v1" entry
// then a "RoCE v2" one (as mlx5 ports show them). A removed address frees
// its slots (they read as unused) and a new one takes the first free slots,
// so indices in use never move.
type GIDTable struct {
	Versions Versions
	Netdev   string
	slots    []verbs.GIDEntry
}

func (t *GIDTable) wanted(nd Netdev) []verbs.GIDEntry {
	var want []verbs.GIDEntry
	add := func(ip netip.Addr) {
		g := netip.AddrFrom16(ip.As16())
		if t.Versions.V1() {
			want = append(want, verbs.GIDEntry{GID: g, Type: verbs.GIDTypeRoCEv1, Netdev: nd.Name})
		}
		if t.Versions.V2() {
			want = append(want, verbs.GIDEntry{GID: g, Type: verbs.GIDTypeRoCEv2, Netdev: nd.Name})
		}
	}
	def := DefaultGID(nd.MAC)
	add(def)
	for _, a := range nd.Addrs {
		if a == def {
			continue
		}
		add(a)
	}
	return want
}

// Update brings the table up to date with nd's addresses; it reports
// whether anything changed.
func (t *GIDTable) Update(nd Netdev) bool {
	want := t.wanted(nd)
	key := func(e verbs.GIDEntry) [2]any { return [2]any{e.GID, e.Type} }
	keep := make(map[[2]any]bool, len(want))
	for _, w := range want {
		keep[key(w)] = true
	}
	changed := false
	have := make(map[[2]any]bool)
	for i, s := range t.slots {
		if !s.GID.IsValid() {
			continue
		}
		if !keep[key(s)] {
			t.slots[i] = verbs.GIDEntry{}
			changed = true
			continue
		}
		have[key(s)] = true
	}
	free := 0
	for _, w := range want {
		if have[key(w)] {
			continue
		}
		for free < len(t.slots) && t.slots[free].GID.IsValid() {
			free++
		}
		if free == len(t.slots) {
			t.slots = append(t.slots, w)
		} else {
			t.slots[free] = w
		}
		changed = true
	}
	// Drop unused slots at the end, so the table is as short as it can be.
	for len(t.slots) > 0 && !t.slots[len(t.slots)-1].GID.IsValid() {
		t.slots = t.slots[:len(t.slots)-1]
	}
	return changed
}

// Entries returns the table; unused slots have an invalid GID.
func (t *GIDTable) Entries() []verbs.GIDEntry { return append([]verbs.GIDEntry(nil), t.slots...) }

// Addrs returns the distinct addresses of the table's entries.
func (t *GIDTable) Addrs() []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, s := range t.slots {
		if s.GID.IsValid() && !seen[s.GID] {
			seen[s.GID] = true
			out = append(out, s.GID)
		}
	}
	return out
}

// ActiveMTU is the IB MTU a netdev MTU allows, as rxe computes it: the
// netdev MTU less the largest RoCE header set, rounded down to an IB MTU
// (1500 → 1024, 9000 → 4096).
func ActiveMTU(netdevMTU int) verbs.MTU { return verbs.MTUFromBytes(netdevMTU - rxeMaxHdr) }

// rxeMaxHdr is RXE_MAX_HDR_LENGTH: the room rxe leaves for headers when it
// turns a netdev MTU into a path MTU.
const rxeMaxHdr = 80
