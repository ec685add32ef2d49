package udp

import (
	"bytes"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// RoCE v2 over IPv4 with IP options: the ICRC covers them, and with 40
// bytes of them the IP and UDP headers (68 bytes) outgrow the headroom
// before the transport packet, where the privileged link rebuilds them.
// A plain UDP socket with IP_OPTIONS sends what wire.PacketFields encodes.
func TestIPv4Options(t *testing.T) {
	for _, n := range []int{4, 40} {
		opts := bytes.Repeat([]byte{1}, n) // NOPs ...
		opts[n-1] = 0                      // ... and an end of list
		ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
		var l *Link
		err := hb.Do(func() (err error) {
			l, err = New(Config{Addrs: []netip.Addr{hb.IPv4}, Ifindex: hb.Ifindex})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var fd int
		err = ha.Do(func() (err error) {
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
				return err
			}
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO); err != nil {
				return err
			}
			if err := unix.SetsockoptString(fd, unix.IPPROTO_IP, unix.IP_OPTIONS, string(opts)); err != nil {
				return err
			}
			return unix.Bind(fd, &unix.SockaddrInet4{Port: wire.RoCEv2Port, Addr: ha.IPv4.As4()})
		})
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		payload := bytes.Repeat([]byte{0x5a}, 1000)
		f := wire.PacketFields{Version: wire.RoCEv2,
			IPv4: &wire.IPv4Fields{Flags: 2, TTL: 64, Protocol: wire.IPProtocolUDP, Src: ha.IPv4, Dst: hb.IPv4, Options: opts},
			UDP:  wire.UDPFields{SrcPort: wire.RoCEv2Port, DstPort: wire.RoCEv2Port},
			BTH:  wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 9}, Payload: payload}
		pkt, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		udpPayload := pkt[wire.IPv4MinLen+n+wire.UDPLen:]
		if err := unix.Sendto(fd, udpPayload, 0, &unix.SockaddrInet4{Port: wire.RoCEv2Port, Addr: hb.IPv4.As4()}); err != nil {
			t.Fatal(err)
		}
		bufs := linktest.NewBuffers(4)
		k, err := l.Recv(bufs)
		if err != nil || k != 1 {
			t.Fatalf("%d bytes of options: Recv = %d, %v (bad ICRC %d, malformed %d)", n, k, err,
				l.Stats().RxBadICRC.Load(), l.Stats().RxMalformed.Load())
		}
		if !bytes.Equal(bufs[0].Transport(), udpPayload) {
			t.Errorf("%d bytes of options: the transport packet differs", n)
		}
	}
}
