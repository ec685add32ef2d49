package udp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// UDP checksums: with GSO the link sends real checksums (the kernel
// refuses UDP_SEGMENT on a socket with SO_NO_CHECK or UDP_NO_CHECK6_TX);
// with NoGSO it sends 0, as rxe does. Receivers in both modes must take
// both: the privileged one reads AF_PACKET and ignores the field (the ICRC
// masks it), the unprivileged one relies on the kernel, which accepts a
// zero IPv4 checksum and, with UDP_NO_CHECK6_RX, a zero IPv6 one (RFC 6935
// allows it for tunnels; rxe sends it). A capture on the receiving veth
// checks what was on the wire.
func TestChecksums(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, noGSO := range []bool{true, false} {
			for _, priv := range []bool{true, false} {
				name := fmt.Sprintf("%s/noGSO=%v/privileged-receiver=%v", fam, noGSO, priv)
				t.Run(name, func(t *testing.T) { testChecksums(t, fam == "IPv6", noGSO, priv) })
			}
		}
	}
}

func testChecksums(t *testing.T, v6, noGSO, priv bool) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	var a, b *Link
	err := ha.Do(func() (err error) {
		a, err = New(Config{Addrs: []netip.Addr{ha.IPv4, ha.IPv6}, NoGSO: noGSO})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var capfd int
	err = hb.Do(func() (err error) {
		cfg := Config{Addrs: []netip.Addr{hb.IPv4, hb.IPv6}}
		if priv {
			cfg.Ifindex = hb.Ifindex
		}
		if b, err = New(cfg); err != nil {
			return err
		}
		if capfd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		if err := unix.SetsockoptTimeval(capfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000}); err != nil {
			return err
		}
		return unix.Bind(capfd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: hb.Ifindex})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer unix.Close(capfd)
	if !noGSO {
		testenv.Require(t, a.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	}
	if a.GSO() == noGSO {
		t.Fatalf("GSO() = %v with NoGSO %v", a.GSO(), noGSO)
	}
	src, dst := ha.IPv4, hb.IPv4
	if v6 {
		src, dst = ha.IPv6, hb.IPv6
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(src.As16()), DstGID: netip.AddrFrom16(dst.As16()), HopLimit: 64}
	// WRITE packets (GSO messages unless NoGSO) and tiny SENDs.
	want := writeBatch(a.Headroom(), addr, 0, 8, 8)
	if n, err := a.Send(want); err != nil || n != len(want) {
		t.Fatalf("Send = %d, %v", n, err)
	}
	var got []link.Packet
	// A receiver that drops them would wait forever: closing it ends Recv.
	stop := time.AfterFunc(testenv.Slow, func() { b.Close() })
	for len(got) < len(want) {
		bufs := linktest.NewBuffers(64)
		n, err := b.Recv(bufs)
		if err != nil {
			t.Logf("Recv: %v", err)
			break
		}
		got = append(got, bufs[:n]...)
	}
	stop.Stop()
	if len(got) != len(want) {
		t.Fatalf("received %d packets, want %d", len(got), len(want))
	}
	if s := b.Stats(); s.RxBadICRC.Load() != 0 || s.RxMalformed.Load() != 0 {
		t.Errorf("bad ICRC %d, malformed %d", s.RxBadICRC.Load(), s.RxMalformed.Load())
	}
	// The wire: every RoCE v2 datagram's UDP checksum is 0 without GSO and
	// not 0 with it.
	buf := make([]byte, 1<<17)
	seen := 0
	for {
		n, _, err := unix.Recvfrom(capfd, buf, 0)
		if err != nil {
			break
		}
		f := buf[:n]
		if len(f) < wire.EthernetLen {
			continue
		}
		ip := f[wire.EthernetLen:]
		var udp []byte
		switch binary.BigEndian.Uint16(f[12:]) {
		case wire.EtherTypeIPv4:
			if len(ip) >= 28 && ip[9] == unix.IPPROTO_UDP {
				udp = ip[int(ip[0]&0xF)*4:]
			}
		case wire.EtherTypeIPv6:
			if len(ip) >= 48 && ip[6] == unix.IPPROTO_UDP {
				udp = ip[40:]
			}
		}
		if len(udp) < wire.UDPLen || binary.BigEndian.Uint16(udp[2:]) != wire.RoCEv2Port {
			continue
		}
		seen++
		if c := binary.BigEndian.Uint16(udp[6:]); (c == 0) != noGSO {
			t.Errorf("a datagram on the wire has UDP checksum %#04x (NoGSO %v)", c, noGSO)
		}
	}
	if seen == 0 {
		t.Errorf("the capture saw no RoCE v2 datagram")
	}
}
