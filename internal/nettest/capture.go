package nettest

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pcap"
)

// Capture records what a netdev carries, both ways, into a pcap file, as
// tcpdump -i would on a router's interface. A UDP GSO superpacket (which a
// veth, and a Linux router between veths, passes whole) is written as the
// segments a wire would carry, so the file holds real RoCE packets.
type Capture struct {
	File string
	fd   int
	f    *os.File
	w    *pcap.Writer
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	frames int // guarded by mu
	supers int // guarded by mu: UDP GSO superpackets split
	err    error
}

// Superpackets returns how many UDP GSO superpackets the capture split.
func (c *Capture) Superpackets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.supers
}

// StartCapture starts capturing on ifname in ns into file; the capture
// stops at Stop or at the end of t.
func StartCapture(t testing.TB, ns netns.NsHandle, ifname, file string) *Capture {
	t.Helper()
	c := &Capture{File: file, stop: make(chan struct{}), done: make(chan struct{})}
	err := Do(ns, func() error {
		ifi, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		c.fd = ifi
		idx, err := ifindex(ifname)
		if err != nil {
			return err
		}
		_ = unix.SetsockoptInt(c.fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1)
		_ = unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(c.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: idx})
	})
	if err != nil {
		if c.fd > 0 {
			unix.Close(c.fd)
		}
		t.Fatalf("capture on %s: %v", ifname, err)
	}
	if c.f, err = os.Create(file); err == nil {
		c.w, err = pcap.NewWriter(c.f)
	}
	if err != nil {
		unix.Close(c.fd)
		t.Fatal(err)
	}
	go c.run()
	t.Cleanup(func() { c.Stop() })
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func ifindex(name string) (int, error) {
	ifs, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(ifs)
	req, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(ifs, unix.SIOCGIFINDEX, req); err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return int(req.Uint32()), nil
}

func (c *Capture) run() {
	defer close(c.done)
	var vh [10]byte
	buf := make([]byte, 1<<16+64)
	iov := [2]unix.Iovec{}
	iov[0].Base, iov[1].Base = &vh[0], &buf[0]
	iov[0].SetLen(len(vh))
	iov[1].SetLen(len(buf))
	var seg []byte
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		msg := unix.Msghdr{Iov: &iov[0]}
		msg.SetIovlen(2)
		n, _, e := unix.Syscall(unix.SYS_RECVMSG, uintptr(c.fd), uintptr(unsafe.Pointer(&msg)), 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			continue
		}
		if e != 0 {
			c.fail(e)
			return
		}
		if int(n) < len(vh) {
			continue
		}
		frame := buf[:int(n)-len(vh)]
		now := time.Now()
		// VIRTIO_NET_HDR_F_NEEDS_CSUM: the checksum is the offload's to
		// finish (a locally sent packet seen before the "NIC"); finish it.
		partial := vh[0]&1 != 0
		if vh[1]&^0x80 == 5 { // VIRTIO_NET_HDR_GSO_UDP_L4: a UDP superpacket
			if sp, err := link.ParseSuperpacket(frame); err == nil {
				g := int(binary.NativeEndian.Uint16(vh[4:]))
				c.mu.Lock()
				c.supers++
				c.mu.Unlock()
				for s := range sp.Segments(g) {
					seg = sp.AppendSegment(seg[:0], g, s, false)
					if partial {
						finishUDPChecksum(seg)
					}
					c.write(now, seg)
				}
				continue
			}
		}
		if partial {
			finishUDPChecksum(frame)
		}
		c.write(now, frame)
	}
}

// finishUDPChecksum computes the UDP checksum of an IPv4 or IPv6 UDP frame
// whose checksum field holds an offload's partial sum (RFC 768, RFC 8200
// §8.1), as the segmentation and checksum offload would have sent it.
func finishUDPChecksum(f []byte) {
	if len(f) < 14+20+8 || binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[14+9] != 17 ||
		binary.BigEndian.Uint16(f[12:]) == 0x86dd && (len(f) < 14+40+8 || f[14+6] != 17) {
		return // not UDP (TCP's partial sums are left as they are)
	}
	const eth = 14
	var pseudo []byte
	var udp []byte
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		ihl := int(f[eth]&0xf) * 4
		tl := int(binary.BigEndian.Uint16(f[eth+2:]))
		if eth+tl > len(f) || tl < ihl+8 {
			return
		}
		udp = f[eth+ihl : eth+tl]
		pseudo = append(append([]byte{}, f[eth+12:eth+20]...), 0, 17, byte(len(udp)>>8), byte(len(udp)))
	case 0x86dd:
		pl := int(binary.BigEndian.Uint16(f[eth+4:]))
		if eth+40+pl > len(f) || pl < 8 {
			return
		}
		udp = f[eth+40 : eth+40+pl]
		pseudo = append(append([]byte{}, f[eth+8:eth+40]...), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, 17)
	default:
		return
	}
	udp[6], udp[7] = 0, 0
	var sum uint32
	for _, b := range [][]byte{pseudo, udp} {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff // 0 means "no checksum"
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

func (c *Capture) write(ts time.Time, frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.w.WritePacket(ts, frame); err != nil && c.err == nil {
		c.err = err
	}
	c.frames++
}

func (c *Capture) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// Stop ends the capture, closes the file and returns how many frames it
// holds and the first error met.
func (c *Capture) Stop() (int, error) {
	select {
	case <-c.stop:
	default:
		close(c.stop)
		<-c.done
		unix.Close(c.fd)
		c.f.Close()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames, c.err
}
