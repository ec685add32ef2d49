package udp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/wire"
)

// writeBatch and build are linktest's (WriteBatch, Build).
var (
	writeBatch = linktest.WriteBatch
	build      = linktest.Build
)

// openOn opens a link in h's namespace on both of h's addresses,
// privileged (AF_PACKET on h's interface) or not, closed when the test
// ends.
func openOn(t testing.TB, h *nettest.Host, priv bool) *Link {
	t.Helper()
	var l *Link
	if err := h.Do(func() (err error) {
		cfg := Config{Addrs: []netip.Addr{h.IPv4, h.IPv6}}
		if priv {
			cfg.Ifindex = h.Ifindex
		}
		l, err = New(cfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if l.Privileged() != priv {
		t.Fatalf("Privileged() = %v, want %v", l.Privileged(), priv)
	}
	return l
}

// Over a veth, batches shaped like the engine's RDMA WRITEs go out as GSO
// messages and come back as single packets, in order, every ICRC verified,
// whatever receive batch the caller offers (buffers enough for every
// segment, or a few at a time so segments must wait for the next Recv),
// whether the receiver keeps up (steady: the kernel puts segments in place)
// or finds a backlog (the first read expects single datagrams and copies).
func TestGSOVeth(t *testing.T) {
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, priv := range []bool{true, false} {
			for _, rxBatch := range []int{64, 5} {
				for _, steady := range []bool{true, false} {
					name := fmt.Sprintf("%s/privileged=%v/recv-batch=%d/steady=%v", fam, priv, rxBatch, steady)
					t.Run(name, func(t *testing.T) { testGSO(t, fam == "IPv6", priv, rxBatch, steady) })
				}
			}
		}
	}
}

func testGSO(t *testing.T, v6, priv bool, rxBatch int, steady bool) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	a, b := openOn(t, ha, priv), openOn(t, hb, priv)
	testenv.Require(t, a.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	src, dst := ha.IPv4, hb.IPv4
	if v6 {
		src, dst = ha.IPv6, hb.IPv6
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(src.As16()), DstGID: netip.AddrFrom16(dst.As16()), HopLimit: 64}
	var want []link.Packet
	type result struct {
		got []link.Packet
		err error
	}
	total := 0
	recvd := make(chan result, 1)
	var nGot atomic.Int64 // packets receive has so far
	receive := func() {
		var got []link.Packet
		for len(got) < total {
			bufs := linktest.NewBuffers(rxBatch)
			n, err := b.Recv(bufs)
			if err != nil {
				recvd <- result{got, err}
				return
			}
			got = append(got, bufs[:n]...)
			nGot.Store(int64(len(got)))
		}
		recvd <- result{got, nil}
	}
	const rounds = 6
	total = rounds * (17 + 40)
	if steady {
		go receive()
	}
	for r := range rounds {
		// Steady: the receiver has caught up with the rounds before this
		// one (waiting for that, not for a time that a loaded machine
		// can overrun).
		if steady && !testenv.Poll(testenv.Slow, func() bool { return nGot.Load() >= int64(len(want)) }) {
			t.Fatalf("before round %d: received %d of %d packets", r, nGot.Load(), len(want))
		}
		// 17 WRITE packets (one GSO message of 16 would exceed 64 KB), then
		// 40 tiny SENDs; the third round in engine-sized batches.
		batch := writeBatch(a.Headroom(), addr, wire.PSN(r*100), 17, 40)
		for len(batch) > 0 {
			k := len(batch)
			if r == 2 {
				k = min(k, a.BatchSize())
			}
			if n, err := a.Send(batch[:k]); err != nil || n != k {
				t.Fatalf("Send = %d, %v", n, err)
			}
			want = append(want, batch[:k]...)
			batch = batch[k:]
		}
	}
	if !steady {
		go receive()
	}
	var res result
	drops0 := kernelDrops(hb)
	select {
	case res = <-recvd:
	case <-time.After(testenv.Slow): // a receiver that lost packets would wait forever
		b.Close()
		select {
		case res = <-recvd:
		case <-time.After(testenv.Slow):
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Fatalf("Recv did not return after Close (received %d of %d packets)\n%s", nGot.Load(), len(want), stacks)
		}
	}
	got := res.got
	if res.err != nil && len(got) == len(want) {
		t.Fatal(res.err)
	}
	if len(got) != len(want) {
		// Say where they went: the kernel's counters of drops between the
		// veth and the socket (the per-CPU backlog, which every test on
		// the machine shares, and the namespace's UDP and packet sockets).
		t.Fatalf("received %d packets, want %d (Recv: %v); kernel drop counters before/after: %v / %v; link: bad ICRC %d, malformed %d, kernel refused %d",
			len(got), len(want), res.err, drops0, kernelDrops(hb), b.Stats().RxBadICRC.Load(), b.Stats().RxMalformed.Load(), b.Stats().RxKernelRefused.Load())
	}
	for i := range want {
		if !bytes.Equal(got[i].Transport()[:got[i].Len-wire.ICRCLen], want[i].Transport()[:want[i].Len-wire.ICRCLen]) {
			t.Fatalf("packet %d differs (%d bytes, want %d)", i, got[i].Len, want[i].Len)
		}
		if got[i].Addr.SrcGID != addr.SrcGID || got[i].Addr.DstGID != addr.DstGID {
			t.Fatalf("packet %d: %v → %v", i, got[i].Addr.SrcGID, got[i].Addr.DstGID)
		}
	}
	st := b.Stats()
	if st.RxBadICRC.Load() != 0 || st.RxMalformed.Load() != 0 || a.Stats().TxNoRoute.Load() != 0 || a.GSOFallbacks.Load() != 0 {
		t.Errorf("bad ICRC %d, malformed %d, tx no route %d, GSO fallbacks %d",
			st.RxBadICRC.Load(), st.RxMalformed.Load(), a.Stats().TxNoRoute.Load(), a.GSOFallbacks.Load())
	}
	t.Logf("segments received in place %d, copied %d, queued %d", b.rx.nInPlace, b.rx.nCopied, b.rx.nQueued)
	// Steady, the WRITE packets of every round but the first (read while
	// the link still expected single datagrams) land in place; the tiny
	// SENDs are copied, being smaller than the layout's segments.
	if steady && rxBatch >= 17 && b.rx.nInPlace < (rounds-1)*17 || !steady && b.rx.nQueued == 0 {
		t.Errorf("in place %d, copied %d, queued %d: the paths this test is for were not taken", b.rx.nInPlace, b.rx.nCopied, b.rx.nQueued)
	}
	if !priv && !v6 && b.IDSolved.Load() == 0 {
		t.Errorf("no IPv4 ID was solved for: the segments after the first of a GSO message should carry IDs 1, 2, …")
	}
}

// The kernel numbers the IPv4 IDs of a GSO message's segments from the ID
// of the message, which on an unconnected socket with DF is 0: segment k
// carries ID k. The ICRC covers the ID, so the sender predicts it
// (Link.Send) and the privileged receiver rebuilds it (acceptFrame). This
// test checks the numbering where it happens:
//   - an AF_PACKET capture on the receiving veth sees the GSO message whole
//     (a veth passes it on unsegmented), with DF, ID 0 and the segment size
//     in its virtio-net header;
//   - a UDP socket without UDP_GRO gets the kernel's own segmentation, and
//     solving each segment's ICRC for its ID gives 0, 1, 2, …;
//   - with ethtool, turning tx-udp-segmentation off on the sending veth
//     makes the kernel segment before the wire, and the capture sees the
//     segments with IDs 0, 1, 2, ….
func TestGSOSegmentIDs(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000})
	var l *Link
	err := ha.Do(func() (err error) {
		l, err = New(Config{Addrs: []netip.Addr{ha.IPv4}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testenv.Require(t, l.GSO(), "UDP GSO (UDP_SEGMENT, Linux 4.18)")
	// B: a capture and a plain UDP socket on 4791.
	var capfd, ufd int
	err = hb.Do(func() error {
		var err error
		if capfd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(capfd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
			return err
		}
		if err := unix.Bind(capfd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: hb.Ifindex}); err != nil {
			return err
		}
		if ufd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0); err != nil {
			return err
		}
		return unix.Bind(ufd, &unix.SockaddrInet4{Port: wire.RoCEv2Port, Addr: hb.IPv4.As4()})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(capfd)
	defer unix.Close(ufd)
	for _, fd := range []int{capfd, ufd} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000}); err != nil {
			t.Fatal(err)
		}
	}
	addr := link.Addr{Version: wire.RoCEv2, SrcGID: netip.AddrFrom16(ha.IPv4.As16()), DstGID: netip.AddrFrom16(hb.IPv4.As16()), HopLimit: 64}
	const segs = 5
	send := func() {
		t.Helper()
		// segs MIDDLE packets of 4112 bytes: one GSO message.
		pkts := writeBatch(l.Headroom(), addr, 0, segs+2, 0)[1 : segs+1]
		if n, err := l.Send(pkts); err != nil || n != segs {
			t.Fatalf("Send = %d, %v", n, err)
		}
	}
	// capture returns the IPv4 packets to port 4791 the capture holds, with
	// their virtio-net headers: it waits for the first frame, then reads
	// until none comes for SO_RCVTIMEO.
	capture := func() (ips [][]byte, vnets [][]byte) {
		t.Helper()
		waitReadable(t, capfd)
		buf := make([]byte, 1<<17)
		for {
			n, _, err := unix.Recvfrom(capfd, buf, 0)
			if err != nil {
				return
			}
			f := buf[:n]
			if len(f) < vnetLen+wire.EthernetLen+28 || binary.BigEndian.Uint16(f[vnetLen+12:]) != wire.EtherTypeIPv4 {
				continue
			}
			ip := f[vnetLen+wire.EthernetLen:]
			if ip[9] != unix.IPPROTO_UDP || binary.BigEndian.Uint16(ip[22:]) != wire.RoCEv2Port {
				continue
			}
			ips, vnets = append(ips, append([]byte(nil), ip...)), append(vnets, append([]byte(nil), f[:vnetLen]...))
		}
	}
	// Resolve the neighbour first, so the GSO message is not queued behind
	// ARP: once the warm-up SEND has reached B, it is.
	warm := writeBatch(l.Headroom(), addr, 0, 2, 1)[2:]
	l.Send(warm)
	capture()
	waitReadable(t, ufd)
	drain(ufd)

	send()
	ips, vnets := capture()
	if len(ips) != 1 {
		t.Fatalf("the capture saw %d packets, want the GSO message whole", len(ips))
	}
	ip, vh := ips[0], vnets[0]
	if vh[1] != vnetGSOUDPL4 || int(binary.NativeEndian.Uint16(vh[4:])) != 4112 {
		t.Errorf("virtio-net header: GSO type %d size %d, want %d and 4112", vh[1], binary.NativeEndian.Uint16(vh[4:]), vnetGSOUDPL4)
	}
	if id, flags := binary.BigEndian.Uint16(ip[4:]), ip[6]; id != 0 || flags&0x40 == 0 {
		t.Errorf("GSO message: IPv4 ID %d, flags %#x; want ID 0 and DF", id, flags)
	}
	// The UDP socket: the kernel segmented the message for it.
	ids := segmentIDs(t, ufd, addr)
	if fmt.Sprint(ids) != fmt.Sprint([]uint16{0, 1, 2, 3, 4}) {
		t.Errorf("IDs of the kernel's segments, solved from their ICRCs: %v, want 0 1 2 3 4", ids)
	}

	ethtool, err := exec.LookPath("ethtool")
	if err != nil {
		t.Logf("ethtool not installed: the check of segments on the wire is skipped")
		return
	}
	out, err := exec.Command("ip", "netns", "exec", ha.NSName, ethtool, "-K", ha.Ifname, "tx-udp-segmentation", "off").CombinedOutput()
	if err != nil {
		t.Fatalf("ethtool: %v: %s", err, out)
	}
	send()
	ips, _ = capture()
	var wireIDs []uint16
	for _, ip := range ips {
		wireIDs = append(wireIDs, binary.BigEndian.Uint16(ip[4:]))
	}
	if fmt.Sprint(wireIDs) != fmt.Sprint([]uint16{0, 1, 2, 3, 4}) {
		t.Errorf("IDs of the segments on the wire: %v, want 0 1 2 3 4", wireIDs)
	}
	if ids := segmentIDs(t, ufd, addr); fmt.Sprint(ids) != fmt.Sprint(wireIDs) {
		t.Errorf("IDs solved from the ICRCs %v differ from the wire's %v", ids, wireIDs)
	}
}

func drain(fd int) {
	b := make([]byte, 1<<16)
	for {
		if _, _, err := unix.Recvfrom(fd, b, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// waitReadable waits until fd has something to read, failing t if nothing
// comes within testenv.Slow: a frame's first read waits for it, not for
// a receive timeout a loaded machine can overrun.
func waitReadable(t *testing.T, fd int) {
	t.Helper()
	ok := testenv.Poll(testenv.Slow, func() bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		return err == nil && n == 1
	})
	if !ok {
		t.Fatalf("nothing arrived on fd %d within %v", fd, testenv.Slow)
	}
}

// segmentIDs reads datagrams from fd, once the first has come until none
// comes for SO_RCVTIMEO, and returns, for each, the IPv4 ID that makes its
// ICRC right.
func segmentIDs(t *testing.T, fd int, a link.Addr) []uint16 {
	t.Helper()
	waitReadable(t, fd)
	var s idSolver
	pred := &Link{cfg: Config{Port: wire.RoCEv2Port}}
	var ids []uint16
	buf := make([]byte, link.MaxFrameSize)
	for {
		n, from, err := unix.Recvfrom(fd, buf[link.FrameHeadroom:], 0)
		if err != nil {
			return ids
		}
		sa, ok := from.(*unix.SockaddrInet4)
		if !ok {
			t.Fatalf("from %v", from)
		}
		pk := link.Packet{Buf: buf[:link.FrameHeadroom+n], Off: link.FrameHeadroom, Len: n, Addr: a}
		start, nlen := pred.pseudoHeaders(new(pseudoCache), &pk, uint16(sa.Port), 0)
		end := pk.Off + pk.Len - wire.ICRCLen
		c := wire.ICRC(pk.Buf[start:end], nlen, wire.RoCEv2)
		id, ok := s.basis(end - (start + 6)).solve(c ^ binary.LittleEndian.Uint32(pk.Buf[end:]))
		if !ok {
			t.Fatalf("a segment's ICRC is wrong for every ID")
		}
		ids = append(ids, id)
	}
}

// kernelDrops reads the kernel's counters of packets dropped on the way to
// a socket: the softnet backlog's drops (all CPUs, the whole machine), and
// in h's namespace UDP's and UDP6's receive errors.
func kernelDrops(h *nettest.Host) map[string]uint64 {
	m := map[string]uint64{}
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				v, _ := strconv.ParseUint(f[1], 16, 64)
				m["softnet_dropped"] += v
			}
		}
	}
	h.Do(func() error {
		for _, file := range []string{"snmp", "snmp6"} {
			b, err := os.ReadFile("/proc/thread-self/net/" + file)
			if err != nil {
				continue
			}
			lines := strings.Split(string(b), "\n")
			for i, line := range lines {
				f := strings.Fields(line)
				switch {
				case file == "snmp" && len(f) > 0 && f[0] == "Udp:" && i+1 < len(lines):
					vals := strings.Fields(lines[i+1])
					for k := 1; k < len(f) && k < len(vals); k++ {
						if strings.HasSuffix(f[k], "Errors") {
							v, _ := strconv.ParseUint(vals[k], 10, 64)
							m["Udp"+f[k]] = v
						}
					}
				case file == "snmp6" && len(f) == 2 && strings.HasPrefix(f[0], "Udp6") && strings.HasSuffix(f[0], "Errors"):
					v, _ := strconv.ParseUint(f[1], 10, 64)
					m[f[0]] = v
				}
			}
		}
		return nil
	})
	return m
}
