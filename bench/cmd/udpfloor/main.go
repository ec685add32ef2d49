// Command udpfloor is the floor under `roce perf write -s 65536` between two
// machines: the work any RoCE v2 stack in user space must do over the
// kernel's UDP sockets to move the same bytes, done by hand with no RDMA
// engine, as bench/'s UDPThroughput/gso+gro+roce does inside one process.
// bench/vm.sh -f runs it between the lab's VMs beside ib_write_bw and `roce
// perf write`, where the emulated CPU and the virtio link are the limits.
//
// Per message of -size bytes (perftest's -s), cut into datagrams of the path
// MTU's payload (-m) behind a 12-byte BTH and before a 4-byte ICRC, as a
// RoCE WRITE's MIDDLE packets:
//
//   - the sender copies each payload from a source ring (the MR) into its
//     datagram, computes a CRC-32 over the datagram (the ICRC, by the loop
//     goroce's ICRC uses: wire.UpdateCRC32, GOROCE_ICRC) and sends the
//     message with one sendmmsg(2) of UDP GSO messages;
//   - the receiver reads with UDP GRO and recvmmsg(2), checks each
//     datagram's CRC-32, copies its payload into a destination ring (the MR)
//     and answers each whole message with one small datagram (the ACK);
//   - -t messages are in flight at most (perftest's tx depth, 128);
//   - with -zerocopy the sender's sendmmsg carries MSG_ZEROCOPY: the kernel
//     sends from the sender's pages instead of copying them into its
//     buffers (the copy goroce's sender could save with the payload sent
//     from the MR), and says when it is done with them on the socket's
//     error queue.
//
// It leaves out what a real stack adds: headers that differ from packet to
// packet (RETH, ImmDt, PSNs), retransmission, completions, the verbs.
// Nothing is resent: a datagram lost stalls its message for 200 ms, after
// which the sender counts it lost and goes on; the report says how much, and
// the client then exits 1, as its figure is no floor. (Between the lab's VMs
// perftest's 128 messages in flight, 8,192 datagrams, overflow eth0's queue
// of 1,000: bench/vm.sh -f runs it with -t 8.)
//
// With -lat it is the floor under `ib_send_lat -s 64` and `ibv_rc_pingpong
// -s 64` instead (lat.go): a ping-pong of one SEND-sized datagram each way,
// each ACKed, both sides busy-polling an AF_PACKET receive ring (ring.go).
//
// The server prints nothing until its client is done; the client prints
// perftest's table (and with -lat ibv_rc_pingpong's line too), so that
// bench/vm.sh reads both tools alike:
//
//	udpfloor -s -a 192.0.2.11                  # vm1: data on 192.0.2.11:4792, control on TCP 18515
//	udpfloor -a 192.0.2.11 -n 300 198.51.100.11   # vm2: to vm1, the control over the management link
//	udpfloor -a 192.0.2.11 -lat -size 64 -n 1000 198.51.100.11   # vm2: the latency floor
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/wire"
)

const (
	bthLen  = 12
	icrcLen = 4
	// defCtlPort is perftest's exchange port: bench/vm.sh waits for a
	// server to listen there.
	defCtlPort = 18515
	// maxUDP is the longest UDP payload, a GSO message's too (udp_sendmsg).
	maxUDP = 65507
	// stall is how long the sender waits for an ACK before it counts the
	// oldest message in flight lost.
	stall = 200 * time.Millisecond
)

type params struct {
	n, size, mtu, window int
	lat                  bool   // the latency floor (lat.go), not the throughput one
	block                bool   // -lat's sides wait in recvfrom(2) instead of spinning
	rx                   string // -lat's busy poll looks at: ring, socket
	pktinfo              bool   // -lat: send as goroce's link does (unconnected, IP_PKTINFO)
	gso                  bool   // -lat: the ACK and the message as one UDP GSO message
	entersyscall         bool   // send through Go's ordinary system call even with one P
	ackNow               bool   // -lat: each ACK alone at once, the next message alone after it
	zerocopy             bool   // the throughput sender sends with MSG_ZEROCOPY
}

func (p params) dgramLen() int { return bthLen + p.mtu + icrcLen }
func (p params) perMsg() int   { return (p.size + p.mtu - 1) / p.mtu }
func (p params) payload(i int) int { // of datagram i of a message
	return min(p.mtu, p.size-i*p.mtu)
}

func main() {
	server := flag.Bool("s", false, "be the server")
	addr := flag.String("a", "", "the server's data `address` (the server binds it)")
	port := flag.Int("p", 4792, "the UDP data `port`")
	ctlPort := flag.Int("P", defCtlPort, "the TCP control `port` (perftest's exchange port)")
	var p params
	flag.IntVar(&p.n, "n", 300, "messages (perftest's -n)")
	flag.IntVar(&p.size, "size", 65536, "bytes per message (perftest's -s)")
	flag.IntVar(&p.mtu, "m", 1024, "the path MTU: payload bytes per datagram")
	flag.IntVar(&p.window, "t", 128, "messages in flight (perftest's -t)")
	flag.BoolVar(&p.block, "block", false, "with -lat: both sides wait for each datagram in recvfrom(2) instead of busy-polling")
	flag.StringVar(&p.rx, "rx", "ring", "with -lat: what each side's busy poll looks at, `ring|socket|xdp`: an AF_PACKET receive ring (a load from memory per look, as goroce's privileged link), the UDP socket (a recvfrom(2) per look) or an AF_XDP socket's ring that an XDP program on the netdev feeds (as goroce's rx-path xdp; the netdev's one receive queue)")
	flag.BoolVar(&p.pktinfo, "pktinfo", false, "with -lat: send as goroce's UDP link does, every datagram with its destination and an IP_PKTINFO naming its source, on a socket not connected")
	flag.BoolVar(&p.gso, "gso", true, "with -lat: send the ACK and the next message as one UDP GSO message (the message, then the ACK as its shorter last segment), as goroce's link sends an answer with its held ACK; false: as two datagrams of one sendmmsg(2)")
	flag.BoolVar(&p.entersyscall, "entersyscall", false, "send with Go's ordinary system call even with one P (GOMAXPROCS 1), not a raw one: the runtime then lets sysmon hand the P to another thread during each send that outlasts a sysmon tick, which goroce's link avoids with one P (link/udp, mmsg.go)")
	flag.BoolVar(&p.ackNow, "acknow", false, "with -lat: send each ACK alone the moment its message arrives, then the next message alone (two sendmmsg(2) calls per side and round trip), as Linux rxe's responder acknowledges from the kernel before the program sees the message")
	flag.BoolVar(&p.zerocopy, "zerocopy", false, "the throughput floor (no effect with -lat): send with MSG_ZEROCOPY (SO_ZEROCOPY; UDP since Linux 5.0), the kernel sending the datagrams from the sender's pages instead of a copy of them; each message in flight has its own buffer, reused once the message is ACKed and the kernel has said it is done with it (the socket's error queue)")
	flag.BoolVar(&p.lat, "lat", false, "the latency floor: a ping-pong of one -size message each way, each ACKed (ib_send_lat, ibv_rc_pingpong)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to `file` (go tool pprof reads it), as roce's GOROCE_CPUPROFILE; the server's when it is stopped (SIGINT, SIGTERM)")
	flag.Parse()
	if *cpuprofile != "" {
		stop, err := startProfile(*cpuprofile)
		if err != nil {
			fail(2, fmt.Errorf("-cpuprofile: %w", err))
		}
		defer stop()
	}
	a, err := netip.ParseAddr(*addr)
	if err != nil {
		fail(2, fmt.Errorf("-a: the server's data address: %v", err))
	}
	data := netip.AddrPortFrom(a, uint16(*port))
	if *server {
		if flag.NArg() != 0 {
			fail(2, errors.New("the server takes no arguments"))
		}
		err = serve(data, *ctlPort)
	} else {
		if flag.NArg() != 1 {
			fail(2, errors.New("the client takes one argument: the server's control address"))
		}
		if err = p.check(); err != nil {
			fail(2, err)
		}
		err = client(p, data, flag.Arg(0), *ctlPort, os.Stdout)
	}
	if err != nil {
		fail(1, err)
	}
}

// atExit runs before fail exits, and on SIGINT or SIGTERM: the profile's
// end (os.Exit runs no deferred calls).
var atExit = func() {}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, "udpfloor:", err)
	atExit()
	os.Exit(code)
}

// startProfile starts a CPU profile into the file name and returns what
// ends it. A signal that stops the process (the server serves until one
// does) ends it too, then exits as the signal would have (128+n).
func startProfile(name string) (stop func(), err error) {
	// The handler first: whoever waits for the file to appear (as
	// TestCPUProfile does) and then signals must find it in place, not the
	// default action, which kills the process before the profile is
	// written. A signal that comes before the profile has started waits
	// in sigs until the goroutine below takes it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	f, err := os.Create(name)
	if err != nil {
		signal.Stop(sigs)
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		signal.Stop(sigs)
		f.Close()
		return nil, err
	}
	var once sync.Once
	stop = func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }
	atExit = stop
	go func() {
		sig := <-sigs
		stop()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	return stop, nil
}

func (p params) check() error {
	switch {
	case p.n < 1, p.size < 1, p.window < 1:
		return errors.New("-n, -size and -t must be positive")
	case p.rx != "ring" && p.rx != "socket" && p.rx != "xdp":
		return fmt.Errorf("-rx %q: ring, socket or xdp", p.rx)
	case p.lat && (p.n < 5 || p.size > p.mtu):
		return fmt.Errorf("-lat: at least 5 iterations (-n %d) of one packet each (-size %d, at most -m %d)", p.n, p.size, p.mtu)
	case p.mtu < 256 || p.mtu > 4096:
		return fmt.Errorf("-m %d: a path MTU from 256 to 4096", p.mtu)
	}
	return nil
}

// serve takes one client on TCP ctlPort, receives its messages on data and
// reports what arrived when the client says it is done.
func serve(data netip.AddrPort, ctlPort int) error {
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", ctlPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	var p params
	if _, err := fmt.Fscanln(rd, &p.n, &p.size, &p.mtu, &p.window, &p.lat, &p.block, &p.rx, &p.pktinfo, &p.gso, &p.entersyscall, &p.ackNow); err != nil {
		return fmt.Errorf("the client's parameters: %w", err)
	}
	if err := p.check(); err != nil {
		return err
	}
	fd, err := udpSocket(data, netip.AddrPort{})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if p.lat {
		return serveLat(c, rd, fd, p)
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		return fmt.Errorf("UDP_GRO: %w", err)
	}
	r := newReceiver(fd, p)
	done := make(chan error, 1)
	go func() { done <- r.run() }()
	if _, err := io.WriteString(c, "go\n"); err != nil {
		return err
	}
	// The client's "end" line, or its connection closing, ends the run.
	rd.ReadString('\n')
	r.stop()
	if err := <-done; err != nil {
		return err
	}
	_, err = fmt.Fprintf(c, "%d %d\n", r.bytes, r.badCRC)
	return err
}

// udpSocket opens a UDP socket bound to local (any port when it is zero),
// connected to peer if given, with large buffers (a window of 64 KiB
// messages must fit in the receiver's).
func udpSocket(local, peer netip.AddrPort) (int, error) {
	fam := unix.AF_INET
	if !local.Addr().Unmap().Is4() {
		fam = unix.AF_INET6
	}
	fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, o := range []int{unix.SO_RCVBUFFORCE, unix.SO_SNDBUFFORCE} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o, 64<<20); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("socket buffers (root only): %w", err)
		}
	}
	if err = unix.Bind(fd, sockaddr(local)); err == nil && peer.IsValid() {
		err = unix.Connect(fd, sockaddr(peer))
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Unmap().Is4() {
		return &unix.SockaddrInet4{Addr: a.Addr().Unmap().As4(), Port: int(a.Port())}
	}
	return &unix.SockaddrInet6{Addr: a.Addr().As16(), Port: int(a.Port())}
}

// receiver reads the client's datagrams and ACKs each whole message.
type receiver struct {
	fd     int
	p      params
	done   chan struct{}
	bytes  int64 // payload bytes received
	badCRC int64
}

func newReceiver(fd int, p params) *receiver {
	// Wake now and then to see whether the run is over.
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 50000})
	return &receiver{fd: fd, p: p, done: make(chan struct{})}
}

func (r *receiver) stop() { close(r.done) }

func (r *receiver) run() error {
	const batch, bufLen = 8, 1 << 16
	p := r.p
	dl := p.dgramLen()
	dst := make([]byte, p.window*p.size)
	off := 0
	bufs := make([]byte, batch*bufLen)
	hdrs := make([]unix.Mmsghdr, batch)
	iovs := make([]unix.Iovec, batch)
	names := make([]unix.RawSockaddrInet6, batch)
	for i := range hdrs {
		iovs[i].Base = &bufs[i*bufLen]
		iovs[i].SetLen(bufLen)
		hdrs[i].Hdr.Iov = &iovs[i]
		hdrs[i].Hdr.SetIovlen(1)
		hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&names[i]))
	}
	var ack [8]byte
	var peer unix.Sockaddr
	seen, msg := 0, 0 // datagrams of the current message; messages whole
	for {
		select {
		case <-r.done:
			return nil
		default:
		}
		for i := range hdrs {
			hdrs[i].Hdr.Namelen = uint32(unsafe.Sizeof(names[i]))
		}
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(r.fd), uintptr(unsafe.Pointer(&hdrs[0])), batch, unix.MSG_WAITFORONE, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("recvmmsg: %w", e)
		}
		if peer == nil && n > 0 {
			peer = peerOf(&names[0])
		}
		for i := range int(n) {
			b := bufs[i*bufLen : i*bufLen+int(hdrs[i].Len)]
			// GRO returns datagrams back to back, every one dl long
			// but a message's last, which ends the buffer.
			for len(b) > 0 {
				k := min(len(b), bthLen+p.payload(seen)+icrcLen, dl)
				d := b[:k]
				b = b[k:]
				if k < bthLen+icrcLen || wire.UpdateCRC32(0, d[:k-icrcLen]) != binary.BigEndian.Uint32(d[k-icrcLen:]) {
					r.badCRC++
					continue
				}
				pl := d[bthLen : k-icrcLen]
				if off+len(pl) > len(dst) {
					off = 0
				}
				off += copy(dst[off:], pl)
				r.bytes += int64(len(pl))
				if seen++; seen == p.perMsg() {
					seen = 0
					msg++
					binary.BigEndian.PutUint64(ack[:], uint64(msg))
					if peer != nil {
						unix.Sendto(r.fd, ack[:], 0, peer)
					}
				}
			}
		}
	}
}

func peerOf(sa *unix.RawSockaddrInet6) unix.Sockaddr {
	if sa.Family == unix.AF_INET {
		s4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return &unix.SockaddrInet4{Addr: s4.Addr, Port: int(s4.Port>>8 | s4.Port<<8)}
	}
	return &unix.SockaddrInet6{Addr: sa.Addr, Port: int(sa.Port>>8 | sa.Port<<8), ZoneId: sa.Scope_id}
}

// client sends p.n messages to data, p.window in flight, and prints
// perftest's table: the bytes the server received over the time from the
// first send to the last ACK.
func client(p params, data netip.AddrPort, ctl string, ctlPort int, out io.Writer) error {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ctl, fmt.Sprint(ctlPort)), 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	if _, err := fmt.Fprintf(c, "%d %d %d %d %t %t %s %t %t %t %t\n", p.n, p.size, p.mtu, p.window, p.lat, p.block, p.rx, p.pktinfo, p.gso, p.entersyscall, p.ackNow); err != nil {
		return err
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "go\n" {
		return fmt.Errorf("the server did not start (%q, %v)", l, err)
	}
	local := netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
	if !data.Addr().Unmap().Is4() {
		local = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
	}
	peer := data
	if p.pktinfo {
		// Bound to the source the route gives, not connected: each
		// datagram names its destination, as goroce's link sends.
		if local, err = sourceFor(data); err != nil {
			return err
		}
		peer = netip.AddrPort{}
	}
	fd, err := udpSocket(local, peer)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if p.lat {
		return clientLat(c, rd, fd, p, data, out)
	}
	if p.zerocopy {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1); err != nil {
			return fmt.Errorf("-zerocopy: SO_ZEROCOPY: %w (Linux 4.14)", err)
		}
	}
	s := newSender(fd, p)
	start := time.Now()
	acked, lost, err := s.run()
	elapsed := time.Since(start)
	if err != nil {
		return err
	}
	if s.zc != nil {
		// The last sends' completions, for the report (after the clock).
		for end := time.Now().Add(time.Second); s.zc.done < int64(s.zc.next) && time.Now().Before(end); {
			if err := s.reap(stall); err != nil {
				return err
			}
		}
	}
	if _, err := io.WriteString(c, "end\n"); err != nil {
		return err
	}
	var got, bad int64
	if _, err := fmt.Fscanln(rd, &got, &bad); err != nil {
		return fmt.Errorf("the server's report: %w", err)
	}
	mbs := float64(got) / elapsed.Seconds() / (1 << 20)
	fmt.Fprintln(out, " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")
	fmt.Fprintf(out, " %-10d %-10d       %-7.2f            %-7.2f              %.6f\n", p.size, p.n, mbs, mbs, float64(acked)/elapsed.Seconds()/1e6)
	fmt.Fprintf(out, "udpfloor: %d of %d bytes received in %.3f s; %d messages ACKed, %d counted lost; %d datagrams with a bad CRC-32\n",
		got, int64(p.n)*int64(p.size), elapsed.Seconds(), acked, lost, bad)
	fmt.Fprintf(out, "udpfloor: sendmmsg calls made raw (no entersyscall): %d\n", s.rawSent)
	if s.zc != nil {
		fmt.Fprintf(out, "udpfloor: -zerocopy: %d of %d sends reported done, %d of them copied by the kernel after all\n", s.zc.done, s.zc.next, s.zc.copied)
	}
	if bad > 0 {
		return fmt.Errorf("%d datagrams arrived with a CRC-32 that does not match", bad)
	}
	if lost > 0 {
		// Each waited out a stall: the figure is no floor.
		return fmt.Errorf("%d messages lost datagrams (a qdisc or socket that overflowed: try a smaller -t)", lost)
	}
	return nil
}

// sender builds and sends the messages and reads the ACKs.
type sender struct {
	fd     int
	p      params
	src    []byte
	srcOff int
	buf    []byte // one message's datagrams
	// raw: sendmmsg is a raw system call (one P, unless -entersyscall),
	// as goroce's link makes it, so that sysmon does not hand the P to
	// another thread while a message's sendmmsg lasts.
	raw     bool
	rawSent int
	hdrs    []unix.Mmsghdr
	iovs    []unix.Iovec
	cmsg    []byte
	zc      *zeroCopy // -zerocopy, or nil
}

// zeroCopy is -zerocopy's state: a buffer per message in flight, and the
// sends (the kernel numbers each message of a sendmmsg sent with
// MSG_ZEROCOPY) whose pages the kernel may still read.
type zeroCopy struct {
	bufs   [][]byte
	next   uint32 // the kernel's number for the next send
	slotOf []int  // a send's buffer, by its number & mask
	mask   uint32
	out    []int // sends outstanding, by buffer
	oob    []byte
	done   int64 // sends the kernel reported done
	copied int64 // of them, sends it copied after all (SO_EE_CODE_ZEROCOPY_COPIED)
}

func newSender(fd int, p params) *sender {
	s := &sender{fd: fd, p: p, src: make([]byte, p.window*p.size), buf: make([]byte, p.perMsg()*p.dgramLen()),
		raw: runtime.GOMAXPROCS(0) == 1 && !p.entersyscall}
	for i := range s.src {
		s.src[i] = byte(i * 7)
	}
	groups := (p.perMsg() + maxUDP/p.dgramLen() - 1) / (maxUDP / p.dgramLen())
	s.hdrs = make([]unix.Mmsghdr, groups)
	s.iovs = make([]unix.Iovec, groups)
	cs := unix.CmsgSpace(2)
	s.cmsg = make([]byte, groups*cs)
	for i := range s.hdrs {
		c := s.cmsg[i*cs : (i+1)*cs]
		h := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		h.Level, h.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(c[unix.CmsgLen(0):], uint16(p.dgramLen()))
		s.hdrs[i].Hdr.Iov = &s.iovs[i]
		s.hdrs[i].Hdr.SetIovlen(1)
		s.hdrs[i].Hdr.Control = &c[0]
		s.hdrs[i].Hdr.SetControllen(cs)
	}
	if p.zerocopy {
		z := &zeroCopy{bufs: make([][]byte, p.window), out: make([]int, p.window), oob: make([]byte, 256)}
		for i := range z.bufs {
			z.bufs[i] = make([]byte, len(s.buf))
		}
		n := uint32(1)
		for n < uint32(2*p.window*groups) {
			n <<= 1
		}
		z.slotOf, z.mask = make([]int, n), n-1
		s.zc = z
	}
	return s
}

// reap reads the kernel's zero-copy completions from the socket's error
// queue, waiting up to wait for the first when there is none.
func (s *sender) reap(wait time.Duration) error {
	z := s.zc
	for {
		_, oobn, _, _, err := unix.Recvmsg(s.fd, nil, z.oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EAGAIN) {
			if wait <= 0 {
				return nil
			}
			// An error queue not empty is POLLERR, which poll always reports.
			if _, err := unix.Poll([]unix.PollFd{{Fd: int32(s.fd)}}, int(wait/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("poll: %w", err)
			}
			wait = 0
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the zero-copy completions: %w", err)
		}
		msgs, err := unix.ParseSocketControlMessage(z.oob[:oobn])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if !(m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) &&
				!(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR) || len(m.Data) < int(unsafe.Sizeof(unix.SockExtendedErr{})) {
				continue
			}
			ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
			if ee.Origin != unix.SO_EE_ORIGIN_ZEROCOPY {
				return fmt.Errorf("the error queue: %w", unix.Errno(ee.Errno))
			}
			for id := ee.Info; ; id++ { // the sends Info to Data, inclusive
				z.out[z.slotOf[id&z.mask]]--
				z.done++
				if ee.Code&unix.SO_EE_CODE_ZEROCOPY_COPIED != 0 {
					z.copied++
				}
				if id == ee.Data {
					break
				}
			}
		}
		wait = 0
	}
}

// send builds message m's datagrams and sends them with one sendmmsg.
func (s *sender) send(m int) error {
	p := s.p
	dl, per := p.dgramLen(), maxUDP/p.dgramLen()
	buf, flags := s.buf, 0
	if s.zc != nil {
		// The kernel may read the buffer of the message sent window
		// messages ago until it says it is done with it.
		slot := m % p.window
		for i := 0; s.zc.out[slot] > 0; i++ {
			if i == 10 {
				return fmt.Errorf("-zerocopy: the kernel has not said it is done with message %d's %d sends after %v", m-p.window, s.zc.out[slot], 10*stall)
			}
			if err := s.reap(stall); err != nil {
				return err
			}
		}
		buf, flags = s.zc.bufs[slot], unix.MSG_ZEROCOPY
	}
	pos := 0
	for i := range p.perMsg() {
		pl := p.payload(i)
		d := buf[pos : pos+bthLen+pl+icrcLen]
		binary.BigEndian.PutUint32(d[8:], uint32(m*p.perMsg()+i)) // a PSN
		if s.srcOff+pl > len(s.src) {
			s.srcOff = 0
		}
		s.srcOff += copy(d[bthLen:bthLen+pl], s.src[s.srcOff:])
		binary.BigEndian.PutUint32(d[bthLen+pl:], wire.UpdateCRC32(0, d[:bthLen+pl]))
		pos += len(d)
	}
	k := 0
	for off := 0; off < pos; off += per * dl {
		s.iovs[k].Base = &buf[off]
		s.iovs[k].SetLen(min(per*dl, pos-off))
		k++
	}
	if s.zc != nil {
		for range k {
			s.zc.slotOf[s.zc.next&s.zc.mask] = m % p.window
			s.zc.next++
		}
		s.zc.out[m%p.window] += k
	}
	calls, err := sendAll(s.fd, s.hdrs[:k], s.raw, flags)
	if s.raw {
		s.rawSent += calls
	}
	if err == nil && s.zc != nil {
		err = s.reap(0)
	}
	return err
}

// sendAll sends every message of hdrs with sendmmsg, as many calls as it
// takes (again after EINTR, or EAGAIN on a non-blocking socket), each a
// raw system call when raw; it returns how many calls it made.
func sendAll(fd int, hdrs []unix.Mmsghdr, raw bool, flags int) (calls int, err error) {
	sys := unix.Syscall6
	if raw {
		sys = unix.RawSyscall6
	}
	for off := 0; off < len(hdrs); {
		n, _, e := sys(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&hdrs[off])), uintptr(len(hdrs)-off), uintptr(flags), 0, 0)
		calls++
		if e == unix.EINTR || e == unix.EAGAIN {
			continue
		}
		if e != 0 {
			return calls, fmt.Errorf("sendmmsg: %w", e)
		}
		off += int(n)
	}
	return calls, nil
}

// run sends every message, p.window in flight, and returns how many the
// server ACKed and how many were counted lost.
func (s *sender) run() (acked, lost int, err error) {
	p := s.p
	unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: int64(stall / time.Microsecond)})
	var ack [8]byte
	sent := 0
	for acked+lost < p.n {
		for sent < p.n && sent-acked-lost < p.window {
			if err := s.send(sent); err != nil {
				return acked, lost, err
			}
			sent++
		}
		// Wait for an ACK (blocking: the floor spends no CPU waiting).
		n, err := unix.Read(s.fd, ack[:])
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			if errors.Is(err, unix.EAGAIN) {
				lost++ // no ACK for stall: the oldest message lost a datagram
			}
			continue
		case err != nil:
			return acked, lost, fmt.Errorf("reading ACKs: %w", err)
		case n == len(ack):
			if v := int(binary.BigEndian.Uint64(ack[:])); v > acked {
				acked = min(v, p.n-lost)
			}
		}
	}
	return acked, lost, nil
}
