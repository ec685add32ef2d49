package xsk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
)

// frame is what a test reads from a socket: the bytes of a frame and its
// sockaddr_ll fields, as the synthesized headers give them.
type frame struct {
	data    []byte // vnet header, then the Ethernet frame
	pkttype uint8
	ifindex int32
	proto   uint16
}

// next waits up to d for the head frame, reads it as link/udp does and
// releases it; false when none came.
func next(t *testing.T, s *Socket, d time.Duration) (frame, bool) {
	t.Helper()
	for end := time.Now().Add(d); !s.Ready(); {
		if time.Now().After(end) {
			return frame{}, false
		}
		time.Sleep(time.Millisecond)
	}
	i := s.Head()
	if s.Status(i)&unix.TP_STATUS_USER == 0 || s.ReadyUpTo(64) < 1 {
		t.Fatalf("Ready, but entry %d's status is %#x", i, s.Status(i))
	}
	f, h := s.Frame(i)
	mac, snap := int(h.Mac), int(h.Snaplen)
	if mac < sll+unix.SizeofSockaddrLinklayer+VnetLen || mac+snap > len(f) || snap != int(h.Len) || h.Status&unix.TP_STATUS_USER == 0 {
		t.Fatalf("frame header %+v in a chunk of %d", *h, len(f))
	}
	a := (*unix.RawSockaddrLinklayer)(unsafeAt(f, sll))
	got := frame{data: bytes.Clone(f[mac-VnetLen : mac+snap]), pkttype: a.Pkttype, ifindex: a.Ifindex,
		proto: binary.BigEndian.Uint16(f[sll+2:])}
	if a.Family != unix.AF_PACKET || a.Halen != 6 || !bytes.Equal(a.Addr[:6], f[mac+6:mac+12]) {
		t.Errorf("sockaddr_ll %+v for a frame from %x", *a, f[mac+6:mac+12])
	}
	s.Release(i)
	return got, true
}

func unsafeAt(b []byte, i int) unsafe.Pointer { return unsafe.Pointer(&b[i]) }

// open opens a socket on h's netdev for port 4791 in its namespace.
func open(t *testing.T, h *nettest.Host) *Socket {
	t.Helper()
	var s *Socket
	if err := h.Do(func() (err error) { s, err = Open(h.Ifindex, 4791, 0); return err }); err != nil {
		t.Fatal(err)
	}
	t.Logf("XDP in %s mode", s.Mode())
	return s
}

// openErr opens a socket on ifindex for port 4791 and, if that worked,
// closes it at once: Open's error, for the tests of its refusals.
func openErr(ifindex int) error {
	s, err := Open(ifindex, 4791, 0)
	if err == nil {
		s.Close()
		s.Unmap()
	}
	return err
}

// inject sends Ethernet frame b out of h's netdev with an AF_PACKET socket.
func inject(t *testing.T, h *nettest.Host, b []byte) {
	t.Helper()
	if err := h.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, b, 0, &unix.SockaddrLinklayer{Ifindex: h.Ifindex, Halen: 6})
	}); err != nil {
		t.Fatal(err)
	}
}

// ipv4Frame is an Ethernet frame from a to b carrying an IPv4 header of
// ihl words (options zero) with the flags/offset word frag and a UDP
// datagram to dport with payload p.
func ipv4Frame(a, b *nettest.Host, dst [6]byte, ihl int, frag uint16, dport uint16, p []byte) []byte {
	f := append(append(append([]byte{}, dst[:]...), a.MAC[:]...), 0x08, 0x00)
	ip := make([]byte, ihl*4)
	ip[0] = 0x40 | byte(ihl)
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+8+len(p)))
	binary.BigEndian.PutUint16(ip[6:], frag)
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	copy(ip[12:], a.IPv4.AsSlice())
	copy(ip[16:], b.IPv4.AsSlice())
	var sum uint32
	for i := 0; i < len(ip); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum = sum>>16 + sum&0xFFFF
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum+sum>>16))
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp, 50000)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(p)))
	return append(append(append(f, ip...), udp...), p...)
}

// TestSocket: between two namespaces, the socket on b's netdev gets the
// UDP datagrams to 4791, IPv4 and IPv6, each once, with the headers
// link/udp reads (an empty virtio-net header, the frame, a sockaddr_ll
// with the packet type from the destination MAC); the kernel keeps the
// datagrams to another port and non-first IPv4 fragments; an IPv4 header
// with options is read past; a second socket on the netdev is refused
// with a sentence; and once closed, the netdev's datagrams to 4791 reach
// the kernel's socket again.
func TestSocket(t *testing.T) {
	all := attachModes
	defer func() { attachModes = all }()
	for _, m := range all {
		t.Run(m.name, func(t *testing.T) {
			attachModes = all[:0:0]
			attachModes = append(attachModes, m)
			testSocket(t, m.name)
		})
	}
}

func testSocket(t *testing.T, mode string) {
	ha, hb := nettest.VethPair(t, nettest.Options{})
	s := open(t, hb)
	if s.Mode() != mode {
		t.Fatalf("mode %s, want %s", s.Mode(), mode)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
			s.Unmap()
		}
	}()
	// A kernel socket on another port in b, and one on 4791 for later.
	var other, roce *net.UDPConn
	if err := hb.Do(func() (err error) {
		if other, err = net.ListenUDP("udp", &net.UDPAddr{Port: 4792}); err != nil {
			return err
		}
		roce, err = net.ListenUDP("udp", &net.UDPAddr{Port: 4791})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	defer roce.Close()
	send := func(to netip.AddrPort, p string) {
		t.Helper()
		if err := ha.Do(func() error {
			c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte(p))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string, p string, proto uint16, pkttype uint8) {
		t.Helper()
		f, ok := next(t, s, 5*time.Second)
		if !ok {
			t.Fatalf("%s: no frame", what)
		}
		if !bytes.Equal(f.data[:VnetLen], make([]byte, VnetLen)) || !bytes.HasSuffix(f.data, []byte(p)) ||
			f.proto != proto || f.pkttype != pkttype || f.ifindex != int32(hb.Ifindex) {
			t.Fatalf("%s: frame %x (protocol %#x, packet type %d, ifindex %d), want %q, %#x, %d, %d",
				what, f.data, f.proto, f.pkttype, f.ifindex, p, proto, pkttype, hb.Ifindex)
		}
		if !bytes.Equal(f.data[VnetLen:VnetLen+6], hb.MAC[:]) && pkttype == unix.PACKET_HOST {
			t.Fatalf("%s: destination %x", what, f.data[VnetLen:VnetLen+6])
		}
	}
	send(netip.AddrPortFrom(hb.IPv4, 4791), "four")
	expect("IPv4", "four", unix.ETH_P_IP, unix.PACKET_HOST)
	send(netip.AddrPortFrom(hb.IPv6, 4791), "six")
	expect("IPv6", "six", unix.ETH_P_IPV6, unix.PACKET_HOST)

	// Another port: the kernel's.
	send(netip.AddrPortFrom(hb.IPv4, 4792), "kernel's")
	buf := make([]byte, 64)
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := other.Read(buf); err != nil || string(buf[:n]) != "kernel's" {
		t.Fatalf("the kernel's socket on 4792: %q, %v", buf[:n], err)
	}

	// Crafted frames: a fragment after the first, whose bytes where a
	// port would be say 4791 (the kernel's), then IPv4 with options, to
	// another host's MAC and to a multicast one (ours, typed).
	frag := make([]byte, 16)
	binary.BigEndian.PutUint16(frag[2:], 4791)
	inject(t, ha, ipv4Frame(ha, hb, hb.MAC, 5, 0x0020, 4791, frag)) // offset 32 bytes
	inject(t, ha, ipv4Frame(ha, hb, hb.MAC, 6, 0, 4791, []byte("options")))
	expect("IPv4 with options (after a fragment the kernel keeps)", "options", unix.ETH_P_IP, unix.PACKET_HOST)
	inject(t, ha, ipv4Frame(ha, hb, [6]byte{2, 0, 0, 0, 0, 9}, 5, 0, 4791, []byte("elsewhere")))
	expect("another host's MAC", "elsewhere", unix.ETH_P_IP, unix.PACKET_OTHERHOST)
	inject(t, ha, ipv4Frame(ha, hb, [6]byte{1, 0, 0x5e, 0, 0, 1}, 5, 0, 4791, []byte("group")))
	expect("a multicast MAC", "group", unix.ETH_P_IP, unix.PACKET_MULTICAST)
	inject(t, ha, ipv4Frame(ha, hb, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 5, 0, 4791, []byte("all")))
	expect("broadcast", "all", unix.ETH_P_IP, unix.PACKET_BROADCAST)
	if f, ok := next(t, s, 50*time.Millisecond); ok {
		t.Fatalf("a frame left over: %x", f.data)
	}

	// A second socket on the netdev.
	if err := hb.Do(func() error {
		return openErr(hb.Ifindex)
	}); err == nil || !strings.Contains(err.Error(), "another process reads the netdev with AF_XDP (ss -a --xdp shows it)") {
		t.Fatalf("a second socket: %v, want its likely cause named", err)
	}
	if d := s.Drops(); d != 0 {
		t.Errorf("Drops = %d", d)
	}

	// Closed: 4791 is the kernel's again.
	s.Close()
	s.Unmap()
	closed = true
	send(netip.AddrPortFrom(hb.IPv4, 4791), "back")
	roce.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := roce.Read(buf); err != nil || string(buf[:n]) != "back" {
		t.Fatalf("the kernel's socket on 4791 after Close: %q, %v", buf[:n], err)
	}
}

// TestOpenRefuses: an MTU no chunk holds is refused with the command that
// fixes it, as is a netdev with more than one receive queue.
func TestOpenRefuses(t *testing.T) {
	_, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	err := hb.Do(func() error {
		return openErr(hb.Ifindex)
	})
	if err == nil || !strings.Contains(err.Error(), "MTU 9000") || !strings.Contains(err.Error(), "mtu 3826") {
		t.Fatalf("Open on MTU 9000: %v", err)
	}
	// A veth pair with two queues inside b's namespace (gone with it).
	err = hb.Do(func() error {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "xq0", NumRxQueues: 2, NumTxQueues: 2}, PeerName: "xq1"}
		if err := netlink.LinkAdd(v); err != nil {
			return err
		}
		l, err := netlink.LinkByName("xq0")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return openErr(l.Attrs().Index)
	})
	if err == nil || !strings.Contains(err.Error(), "xq0 has 2 receive queues") || !strings.Contains(err.Error(), "ethtool -L xq0 combined 1") {
		t.Fatalf("Open on two queues: %v", err)
	}
}

// TestFrameRefusesBadDescriptors: a descriptor whose packet leaves no
// room for the headers Frame writes before it, runs past its chunk or is
// shorter than an Ethernet header (never from a working kernel) gets a
// frame header with no packet offset, which pktring.Data refuses, and
// nothing is written outside its chunk; a sound one gets its headers.
func TestFrameRefusesBadDescriptors(t *testing.T) {
	const chunk = 2048
	s := &Socket{chunk: chunk, umem: make([]byte, 4*chunk), rxDesc: make([]unix.XDPDesc, slots), ifindex: 7,
		mac: [6]byte{2, 0, 0, 0, 0, 1}}
	for i := range s.umem {
		s.umem[i] = 0xAA
	}
	for _, c := range []struct {
		name string
		d    unix.XDPDesc
		ok   bool
	}{
		{"sound", unix.XDPDesc{Addr: chunk + kernelHeadroom, Len: 60}, true},
		{"no room before", unix.XDPDesc{Addr: 2*chunk + minOffset - 1, Len: 60}, false},
		{"past the chunk", unix.XDPDesc{Addr: 3*chunk + kernelHeadroom, Len: chunk - kernelHeadroom + 1}, false},
		{"shorter than Ethernet", unix.XDPDesc{Addr: 3*chunk + kernelHeadroom, Len: 13}, false},
	} {
		s.rxDesc[5] = c.d
		base := c.d.Addr &^ (chunk - 1)
		before := bytes.Clone(s.umem)
		f, h := s.Frame(5)
		if &f[0] != &s.umem[base] || len(f) != chunk {
			t.Fatalf("%s: the frame is not its chunk", c.name)
		}
		if (h.Mac != 0) != c.ok {
			t.Errorf("%s: frame header %+v", c.name, *h)
		}
		for i := range s.umem {
			if (uint64(i) < base || uint64(i) >= base+chunk) && s.umem[i] != before[i] {
				t.Fatalf("%s: byte %d outside the chunk written", c.name, i)
			}
		}
		if c.ok {
			a := (*unix.RawSockaddrLinklayer)(unsafeAt(f, sll))
			if int(h.Mac) != kernelHeadroom || a.Ifindex != 7 || a.Pkttype != unix.PACKET_OTHERHOST ||
				!bytes.Equal(f[int(h.Mac)-VnetLen:h.Mac], make([]byte, VnetLen)) {
				t.Errorf("%s: header %+v, sockaddr_ll %+v", c.name, *h, *a)
			}
		}
	}
}

// TestGenericModeDropsSuperpackets: in generic mode the program sees a
// GSO superpacket whole (a veth's peer segments nothing for a netdev
// without native XDP), which fits no chunk: the kernel drops it, and
// Drops counts it — the limit the package comment states.
func TestGenericModeDropsSuperpackets(t *testing.T) {
	all := attachModes
	defer func() { attachModes = all }()
	attachModes = all[1:] // generic
	ha, hb := nettest.VethPair(t, nettest.Options{})
	s := open(t, hb)
	defer func() { s.Close(); s.Unmap() }()
	if err := ha.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: hb.IPv4.AsSlice(), Port: 4791})
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafeAt(oob, 0))
		h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		*(*uint16)(unsafeAt(oob, unix.CmsgLen(0))) = 1000
		var e error
		if err := rc.Control(func(fd uintptr) { e = unix.Sendmsg(int(fd), make([]byte, 8000), oob, nil, 0) }); err != nil {
			return err
		}
		_, err = c.Write([]byte("one datagram"))
		return errors.Join(e, err)
	}); err != nil {
		t.Fatal(err)
	}
	f, ok := next(t, s, 5*time.Second)
	if !ok || !bytes.HasSuffix(f.data, []byte("one datagram")) {
		t.Fatalf("the datagram after the superpacket: %x, %v", f.data, ok)
	}
	if d := s.Drops(); d != 1 {
		t.Errorf("Drops = %d, want 1: the superpacket", d)
	}
}
