package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is the perftest version goroce speaks on the TCP exchange: the
// first 16 bytes each side sends (exchange_versions). perftest 6.06 is what
// Debian 12's package "perftest 4.5-0.17" reports (ib_write_bw -V); it
// refuses peers older than 5.70 (check_version_compatibility).
const Version = "6.06"

const (
	versionLen   = 16  // MAX_VERSION
	keyMsgLenGID = 108 // KEY_MSG_SIZE_GID: the message with a GID
	pageSize     = 4096
	cacheLine    = 64
)

// Dest is one QP's data as the tools exchange it (struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads uint32 // max outstanding RDMA READs/atomics this side accepts
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64 // where the peer writes, reads or adds
	GID      netip.Addr
	SRQN     uint32
}

// Marshal formats d as ethernet_write_keys does with a GID index
// (KEY_PRINT_FMT_GID), NUL-terminated in a 108-byte message.
func (d Dest) Marshal() []byte {
	g := d.GID.As16()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%04x:%04x:%06x:%06x:%08x:%016x", d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr)
	for _, b := range g {
		fmt.Fprintf(&sb, ":%02x", b)
	}
	fmt.Fprintf(&sb, ":%08x:", d.SRQN)
	b := make([]byte, keyMsgLenGID)
	copy(b, sb.String())
	return b
}

// ParseDest parses a message written by Marshal or by perftest.
func ParseDest(b []byte) (Dest, error) {
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	// LID, OUT, QPN, PSN, RKEY, VADDR, 16 GID bytes, SRQN, "" after the last ':'.
	if len(f) < 23 {
		return Dest{}, fmt.Errorf("Couldn't parse line <%s>: %d fields, want 23", s, len(f))
	}
	var errs []error
	num := func(s string, bits int) uint64 {
		v, err := strconv.ParseUint(s, 16, bits)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	d := Dest{LID: uint16(num(f[0], 16)), OutReads: uint32(num(f[1], 32)), QPN: uint32(num(f[2], 24)),
		PSN: uint32(num(f[3], 24)), RKey: uint32(num(f[4], 32)), VAddr: num(f[5], 64)}
	var g [16]byte
	for i := range g {
		g[i] = byte(num(f[6+i], 8))
	}
	d.GID = netip.AddrFrom16(g)
	d.SRQN = uint32(num(f[22], 32))
	if err := errors.Join(errs...); err != nil {
		return Dest{}, fmt.Errorf("Couldn't parse line <%s>: %w", s, err)
	}
	return d, nil
}

// comm is perftest's side channel (struct perftest_comm): every exchange
// is "client writes, then reads; server reads, then writes" of a fixed
// size (ctx_xchg_data). It runs over TCP (rdma_params->sockfd) or, with
// -R, over SEND and RECV on an RDMA CM connection of its own (cmLink).
type comm struct {
	link       commLink
	rdmaCM     bool // QP data goes as struct pingpong_dest, not as text
	gidIndex   int  // for struct pingpong_dest
	client     bool
	remVersion float64
	// remGoroce says the peer is goroce (goroceMark), and remDuration is
	// its -D then (0: none).
	remGoroce   bool
	remDuration time.Duration
}

// commLink carries the exchange's messages.
type commLink interface {
	send(b []byte) error
	recv(n int) ([]byte, error)
	close()
}

// tcpLink is the TCP exchange's socket.
type tcpLink struct {
	conn net.Conn
	stop func() bool
}

func (l *tcpLink) send(b []byte) error {
	if _, err := l.conn.Write(b); err != nil {
		return fmt.Errorf("Unable to write to socket: %w", err)
	}
	return nil
}

func (l *tcpLink) recv(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(l.conn, b); err != nil {
		return nil, fmt.Errorf("Unable to read from socket: %w", err)
	}
	return b, nil
}

func (l *tcpLink) close() {
	l.stop()
	l.conn.Close()
}

func dialComm(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), server string, port int) (*comm, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", net.JoinHostPort(server, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			// perftest's words, then the fix: the server side runs
			// first, on the same -p.
			return nil, fmt.Errorf("Couldn't connect to %s:%d: %w: no server listens there: start it first "+
				"(the same roce perf test, without an address, on that host) with the same -p", server, port, err)
		}
		return nil, fmt.Errorf("Couldn't connect to %s:%d: %w", server, port, err)
	}
	return newComm(ctx, conn, true), nil
}

func acceptComm(ctx context.Context, ln net.Listener, port int) (*comm, error) {
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", ":"+strconv.Itoa(port)); err != nil {
			return nil, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
		}
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil { // interrupted while waiting for a client
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return newComm(ctx, conn, false), nil
}

func newComm(ctx context.Context, conn net.Conn, client bool) *comm {
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return &comm{link: &tcpLink{conn: conn, stop: stop}, client: client}
}

// xchg sends my and returns the peer's message of the same length.
func (c *comm) xchg(my []byte) ([]byte, error) {
	if c.client {
		if err := c.link.send(my); err != nil {
			return nil, err
		}
	}
	rem, err := c.link.recv(len(my))
	if err != nil {
		return nil, err
	}
	if !c.client {
		if err := c.link.send(my); err != nil {
			return nil, err
		}
	}
	return rem, nil
}

// handShake is ctx_hand_shake: exchange one QP's Dest.
func (c *comm) handShake(my Dest) (Dest, error) {
	msg := my.Marshal()
	if c.rdmaCM {
		msg = my.marshalBinary(c.gidIndex)
	}
	b, err := c.xchg(msg)
	if err != nil {
		return Dest{}, fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	if c.rdmaCM {
		return parseBinaryDest(b), nil
	}
	return ParseDest(b)
}

// goroceMark follows the NUL that ends the version string in the
// version message when goroce sends it, with this side's -D after it:
// perftest reads the version with atof, which stops at the NUL (it does
// in 6.06 and in perftest's master), so it never sees them; a goroce peer
// learns the duration perftest's exchange does not carry, and both sides
// run for the same time (run.agreeDuration).
const goroceMark = "goroce"

// versions is exchange_versions + check_version_compatibility; dur is
// this side's -D, sent after goroceMark, and the peer's is noted.
func (c *comm) versions(dur time.Duration) error {
	my := make([]byte, versionLen)
	n := copy(my, Version) + 1
	n += copy(my[n:], goroceMark)
	binary.BigEndian.PutUint32(my[n:], uint32(min(dur/time.Second, math.MaxUint32)))
	rem, err := c.xchg(my)
	if err != nil {
		return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	s := string(rem)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
		if t := rem[i+1:]; len(t) >= len(goroceMark)+4 && string(t[:len(goroceMark)]) == goroceMark {
			c.remGoroce = true
			c.remDuration = time.Duration(binary.BigEndian.Uint32(t[len(goroceMark):])) * time.Second
		}
	}
	c.remVersion = atof(s)
	if c.remVersion < 5.70 {
		return fmt.Errorf("peer perftest version %q: Current implementation is not compatible with versions older than 5.70", s)
	}
	return nil
}

// atof reads the leading decimal number of s, as C's atof does.
func atof(s string) float64 {
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !strings.Contains(s[:end], ".")) {
		end++
	}
	v, _ := strconv.ParseFloat(s[:end], 64)
	return v
}

// sysData is check_sys_data: each side's page size ("cycle buffer") and
// cache line size, as big-endian 32-bit ints; both sides take the larger.
func (c *comm) sysData(cycle, line int) (int, int, error) {
	if c.remVersion < 5.32 {
		return cycle, line, nil
	}
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], uint32(cycle))
	r1, err := c.xchg(v[:])
	if err != nil {
		return 0, 0, err
	}
	binary.BigEndian.PutUint32(v[:], uint32(line))
	r2, err := c.xchg(v[:])
	if err != nil {
		return 0, 0, err
	}
	return max(cycle, int(int32(binary.BigEndian.Uint32(r1)))), max(line, int(int32(binary.BigEndian.Uint32(r2)))), nil
}

// mtu is check_mtu's exchange: the enum ibv_mtu value as a decimal string
// in 2 bytes ("3\0"); both sides take the smaller valid one.
func (c *comm) mtu(cur int) (int, error) {
	n := 4
	if c.remVersion >= 5.31 {
		n = 2
	}
	my := make([]byte, n)
	copy(my, strconv.Itoa(cur))
	rem, err := c.xchg(my)
	if err != nil {
		return 0, fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	s := string(rem)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	r, _ := strconv.Atoi(s)
	if r >= 1 && r <= 5 && r < cur {
		return r, nil
	}
	return cur, nil
}

// BWReport is struct bw_report_data as the tools exchange it.
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64 // Mpps
}

// xchgReports is xchg_bw_reports: size and iterations as big-endian
// 64-bit integers (iterations 32-bit before 5.33), then peak, average
// and message rate as byte-swapped doubles.
func (c *comm) xchgReports(my BWReport) (BWReport, error) {
	var rem BWReport
	u64 := func(v uint64, n int) ([]byte, error) {
		b := make([]byte, n)
		if n == 8 {
			binary.BigEndian.PutUint64(b, v)
		} else {
			binary.BigEndian.PutUint32(b, uint32(v))
		}
		return c.xchg(b)
	}
	get := func(b []byte) uint64 {
		if len(b) == 8 {
			return binary.BigEndian.Uint64(b)
		}
		return uint64(binary.BigEndian.Uint32(b))
	}
	b, err := u64(my.Size, 8)
	if err != nil {
		return rem, err
	}
	rem.Size = get(b)
	n := 4
	if c.remVersion >= 5.33 {
		n = 8
	}
	if b, err = u64(my.Iters, n); err != nil {
		return rem, err
	}
	rem.Iters = get(b)
	for _, f := range []struct {
		my  float64
		rem *float64
	}{{my.BWPeak, &rem.BWPeak}, {my.BWAvg, &rem.BWAvg}, {my.MsgRate, &rem.MsgRate}} {
		if b, err = u64(math.Float64bits(f.my), 8); err != nil {
			return rem, err
		}
		*f.rem = math.Float64frombits(get(b))
	}
	return rem, nil
}

// closeConn is ctx_close_connection: a last handshake, then over TCP
// "done" with its NUL (nobody reads it) and close.
func (c *comm) closeConn(my Dest) error {
	_, err := c.handShake(my)
	if !c.rdmaCM {
		c.link.send([]byte("done\x00"))
		c.Close()
	}
	return err
}

func (c *comm) Close() {
	c.link.close()
}
