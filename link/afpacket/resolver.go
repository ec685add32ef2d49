package afpacket

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

// Resolver maps destination GIDs to next-hop MAC addresses for one netdev.
type Resolver struct {
	ifindex int
	mac     wire.MAC
	nl      *netlink.Handle          // bound to the netdev's network namespace
	send    func(frame []byte) error // set by the link

	mu     sync.Mutex
	cache  map[netip.Addr]wire.MAC  // guarded by mu
	asked  map[netip.Addr]time.Time // guarded by mu: last own request
	srcs   []netip.Addr             // guarded by mu: our addresses, for ARP/ND sources
	closed bool                     // guarded by mu
}

// NewResolver returns a resolver for the netdev ifindex with MAC mac. It
// reads the neighbour table of the calling thread's network namespace,
// which must be the netdev's.
func NewResolver(ifindex int, mac wire.MAC) (*Resolver, error) {
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &Resolver{ifindex: ifindex, mac: mac, nl: nl, cache: make(map[netip.Addr]wire.MAC), asked: make(map[netip.Addr]time.Time)}, nil
}

// SetSources sets the local addresses used as the sender of ARP requests
// and Neighbor Solicitations.
func (r *Resolver) SetSources(a []netip.Addr) {
	r.mu.Lock()
	r.srcs = append([]netip.Addr(nil), a...)
	r.mu.Unlock()
}

// Add records a neighbour (tests, or a static entry).
func (r *Resolver) Add(ip netip.Addr, mac wire.MAC) {
	r.mu.Lock()
	r.cache[ip.Unmap()] = mac
	r.mu.Unlock()
}

func (r *Resolver) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	if r.nl != nil {
		r.nl.Close()
	}
}

// eui64MAC returns the MAC a link-local EUI-64 GID was made from
// (fe80::XXYY:ZZff:feAA:BBCC, universal/local bit flipped), as RoCE v1 GIDs are.
func eui64MAC(g netip.Addr) (wire.MAC, bool) {
	b := g.As16()
	if b[0] != 0xfe || b[1]&0xc0 != 0x80 || b[11] != 0xff || b[12] != 0xfe {
		return wire.MAC{}, false
	}
	return wire.MAC{b[8] ^ 2, b[9], b[10], b[13], b[14], b[15]}, true
}

// Lookup returns the MAC for gid, starting a resolution when it has none.
func (r *Resolver) Lookup(gid netip.Addr) (wire.MAC, bool) {
	ip := gid.Unmap()
	if ip.IsMulticast() {
		return multicastMAC(ip), true
	}
	if m, ok := eui64MAC(ip); ok && !ip.Is4() {
		return m, true
	}
	r.mu.Lock()
	if m, ok := r.cache[ip]; ok {
		r.mu.Unlock()
		return m, true
	}
	r.mu.Unlock()
	if m, ok := r.kernel(ip); ok {
		r.Add(ip, m)
		return m, true
	}
	r.request(ip)
	return wire.MAC{}, false
}

// LookupWait is Lookup that waits up to timeout for a resolution it starts,
// as the kernel queues a packet while ARP runs.
func (r *Resolver) LookupWait(gid netip.Addr, timeout time.Duration) (wire.MAC, bool) {
	if m, ok := r.Lookup(gid); ok {
		return m, true
	}
	ip := gid.Unmap()
	deadline := time.Now().Add(timeout)
	for wait := 100 * time.Microsecond; time.Now().Before(deadline); wait = min(2*wait, 20*time.Millisecond) {
		time.Sleep(wait)
		r.mu.Lock()
		m, ok := r.cache[ip]
		closed := r.closed
		r.mu.Unlock()
		if ok {
			return m, true
		}
		if closed {
			break
		}
		if m, ok := r.kernel(ip); ok {
			r.Add(ip, m)
			return m, true
		}
	}
	return wire.MAC{}, false
}

func multicastMAC(ip netip.Addr) wire.MAC {
	b := ip.As16()
	if ip.Is4() {
		return wire.MAC{0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]}
	}
	return wire.MAC{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// kernel reads the kernel's neighbour table of the netdev's namespace.
func (r *Resolver) kernel(ip netip.Addr) (wire.MAC, bool) {
	if r.nl == nil {
		return wire.MAC{}, false
	}
	fam := netlink.FAMILY_V4
	if !ip.Is4() {
		fam = netlink.FAMILY_V6
	}
	neighs, err := r.nl.NeighList(r.ifindex, fam)
	if err != nil {
		return wire.MAC{}, false
	}
	for _, n := range neighs {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == ip && len(n.HardwareAddr) == 6 &&
			n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			var m wire.MAC
			copy(m[:], n.HardwareAddr)
			return m, true
		}
	}
	return wire.MAC{}, false
}

// request sends an ARP request or Neighbor Solicitation for ip, at most
// once every 100 ms.
func (r *Resolver) request(ip netip.Addr) {
	r.mu.Lock()
	if r.closed || r.send == nil || time.Since(r.asked[ip]) < 100*time.Millisecond {
		r.mu.Unlock()
		return
	}
	r.asked[ip] = time.Now()
	var src netip.Addr
	for _, s := range r.srcs {
		if s.Unmap().Is4() == ip.Is4() {
			src = s.Unmap()
			break
		}
	}
	send := r.send
	r.mu.Unlock()
	// Ask the kernel to resolve it (NTF_USE: as if it were sending there),
	// and ask ourselves too, for addresses the kernel does not route.
	if r.nl != nil {
		fam := netlink.FAMILY_V4
		if !ip.Is4() {
			fam = netlink.FAMILY_V6
		}
		_ = r.nl.NeighSet(&netlink.Neigh{LinkIndex: r.ifindex, Family: fam, IP: ip.AsSlice(),
			State: netlink.NUD_NONE, Flags: unix.NTF_USE})
	}
	var frame []byte
	if ip.Is4() {
		if !src.IsValid() {
			src = netip.IPv4Unspecified()
		}
		frame = arpRequest(r.mac, src, ip)
	} else {
		if !src.IsValid() {
			return
		}
		frame = neighborSolicitation(r.mac, src, ip)
	}
	_ = send(frame)
}

func arpRequest(mac wire.MAC, src, dst netip.Addr) []byte {
	b := make([]byte, 0, 60)
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	b = append(b, mac[:]...)
	b = binary.BigEndian.AppendUint16(b, wire.EtherTypeARP)
	b = append(b, 0, 1, 0x08, 0, 6, 4, 0, 1) // Ethernet, IPv4, request
	b = append(b, mac[:]...)
	s, d := src.As4(), dst.As4()
	b = append(b, s[:]...)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, d[:]...)
	for len(b) < 60 {
		b = append(b, 0)
	}
	return b
}

func neighborSolicitation(mac wire.MAC, src, dst netip.Addr) []byte {
	d := dst.As16()
	// Solicited-node multicast address ff02::1:ffXX:XXXX.
	snm := [16]byte{0xff, 0x02, 10: 0, 11: 1, 12: 0xff, 13: d[13], 14: d[14], 15: d[15]}
	icmp := make([]byte, 0, 32)
	icmp = append(icmp, 135, 0, 0, 0, 0, 0, 0, 0) // type NS, code, checksum, reserved
	icmp = append(icmp, d[:]...)
	icmp = append(icmp, 1, 1) // source link-layer address option
	icmp = append(icmp, mac[:]...)
	s := src.As16()
	csum := icmpv6Checksum(s, snm, icmp)
	binary.BigEndian.PutUint16(icmp[2:], csum)
	ip := wire.IPv6Fields{PayloadLen: len(icmp), NextHeader: unix.IPPROTO_ICMPV6, HopLimit: 255,
		Src: src, Dst: netip.AddrFrom16(snm)}
	b := make([]byte, 0, 14+40+len(icmp))
	b = append(b, 0x33, 0x33, snm[12], snm[13], snm[14], snm[15])
	b = append(b, mac[:]...)
	b = binary.BigEndian.AppendUint16(b, wire.EtherTypeIPv6)
	b = ip.Append(b)
	return append(b, icmp...)
}

func icmpv6Checksum(src, dst [16]byte, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(src[:])
	add(dst[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[0:], uint32(len(msg)))
	l[7] = unix.IPPROTO_ICMPV6
	add(l[:])
	add(msg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// observe learns from ARP packets and Neighbor Advertisements; it reports
// whether the frame was one (and so is not RoCE).
func (r *Resolver) observe(frame []byte) bool {
	if len(frame) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case wire.EtherTypeARP:
		a := frame[14:]
		if len(a) >= 28 && a[7] == 2 || len(a) >= 28 && a[7] == 1 { // reply, or a request (its sender is a neighbour too)
			var m wire.MAC
			copy(m[:], a[8:14])
			ip := netip.AddrFrom4([4]byte(a[14:18]))
			if !ip.IsUnspecified() {
				r.Add(ip, m)
			}
		}
		return true
	case wire.EtherTypeIPv6:
		if len(frame) < 14+40+24 || frame[14+6] != unix.IPPROTO_ICMPV6 {
			return false
		}
		icmp := frame[14+40:]
		if icmp[0] == 136 { // Neighbor Advertisement: target, then options
			target := netip.AddrFrom16([16]byte(icmp[8:24]))
			for o := icmp[24:]; len(o) >= 8 && o[1] > 0 && int(o[1])*8 <= len(o); o = o[int(o[1])*8:] {
				if o[0] == 2 { // target link-layer address
					var m wire.MAC
					copy(m[:], o[2:8])
					r.Add(target, m)
				}
			}
		}
		return icmp[0] == 135 || icmp[0] == 136
	}
	return false
}
