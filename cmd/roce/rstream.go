package main

import (
	"context"
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

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/rsocket"
)

// rstream's sizes: 64 B to 6 MiB, the "option 1" ones only with -S all
// (rstream.c's test_size table).
var rstreamSizes = func() (s []struct{ size, option int }) {
	s = append(s, struct{ size, option int }{1 << 6, 0})
	for shift := 7; shift <= 22; shift++ {
		opt := 1
		if shift == 12 || shift == 16 || shift == 20 {
			opt = 0
		}
		s = append(s, struct{ size, option int }{1 << shift, opt}, struct{ size, option int }{1<<shift + 1<<(shift-1), 1})
	}
	return s
}()

// rstreamConfig is rstream's command line.
type rstreamConfig struct {
	dst, src   string // -s, -b
	port       string
	bufferSize int // -B
	inline     int // -i
	iterations int
	count      int
	size       int
	custom     bool
	sizeOption int
	keepalive  int
	verify     bool
	tcp        bool // -T s: plain TCP sockets, for reference
}

func newRstreamCmd() *cobra.Command {
	var (
		c        rstreamConfig
		format   string
		sizeArg  string
		tests    []string
		devs     []string
		pcapFile string
	)
	cmd := &cobra.Command{
		Use:   "rstream [-s server_address] [-b bind_address] [-B buffer_size] [-i inline_size] [-I iterations] [-C transfer_count] [-S size|all] [-p port] [-k keepalive_time] [-T test_option]",
		Short: "rstream: stream throughput and latency over rsockets, wire-compatible with librdmacm's rstream",
		Long: `rstream is librdmacm's rstream over goroce's rsockets (package rsocket):
the server (no -s) listens on -b (default every address) port -p (7471); the
client (-s) connects, and the two exchange transfers of each size in turn,
first ping-pong (latency, _lat) and then in bulk (bandwidth, _bw), printing
rstream's table. Either side can be goroce or Linux rstream.

-T options (repeat -T for several): v verify the data (rstream's pattern,
continuous across tests); b blocking and n nonblocking calls, a async (poll)
and r resolve (rdma_getaddrinfo) are accepted: Go's calls block, and the
wire is the same; s uses TCP sockets instead of rsockets, for reference. f
(fork) is not supported.

The devices are found by address, as librdmacm does (--dev picks one). Unlike
rstream, a failed transfer or verification makes the exit status 1.

Like rstream's one thread, it runs on one P (GOMAXPROCS 1) unless the
environment sets GOMAXPROCS.`,
		Example: `  roce rstream                                  # server
  roce rstream -s 192.0.2.11 -S all -T v        # client: every size, data checked
  roce rstream -s fd00:c0:2::11 -S 65536 -C 1000 # one size`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			c.custom = f.Changed("iterations") || f.Changed("transfer-count")
			busypoll.OneP()
			switch {
			case strings.HasPrefix(strings.ToLower(sizeArg), "all"):
				c.sizeOption = 1
			case f.Changed("size"):
				n, err := strconv.Atoi(sizeArg)
				if err != nil || n < 1 {
					return usageError{fmt.Errorf("-S %q: a transfer size in bytes (1 or more) or all: %w", sizeArg, syscall.EINVAL)}
				}
				c.custom, c.size = true, n
			}
			if c.bufferSize != 0 && c.bufferSize < 2048 {
				return usageError{fmt.Errorf("-B %d: a buffer size of 2048 to %d bytes (SO_SNDBUF, SO_RCVBUF): %w", c.bufferSize, 1<<30, syscall.EINVAL)}
			}
			if p, err := strconv.ParseUint(c.port, 10, 16); err != nil || p == 0 {
				return usageError{fmt.Errorf("-p %q: a port number 1-65535: %w", c.port, syscall.EINVAL)}
			}
			switch strings.ToLower(format) {
			case "", "name", "ip", "ipv6":
			case "gid":
				return usageError{fmt.Errorf("-f gid: AF_IB addresses are not supported; use ip or ipv6: %w", syscall.EAFNOSUPPORT)}
			default:
				fmt.Fprintln(cmd.ErrOrStderr(), "Warning: unknown address format")
			}
			for _, t := range tests {
				if err := c.testOption(t); err != nil {
					return usageError{err}
				}
			}
			ctx := commandContext(cmd)
			r := &rstreamRun{cfg: c, out: cmd.OutOrStdout(), errw: cmd.ErrOrStderr(), ctx: ctx}
			if !c.tcp {
				// The device: the bind address's, else any that routes to
				// the server (client) or every one (server), as
				// rdma_resolve_addr and rdma_bind_addr find it.
				var want, fam netip.Addr
				if c.src != "" {
					a, err := netip.ParseAddr(c.src)
					if err != nil {
						return usageError{fmt.Errorf("-b %q: not an IPv4 or IPv6 address: %w", c.src, syscall.EINVAL)}
					}
					want = a.Unmap()
				}
				if c.dst != "" {
					if a, err := netip.ParseAddr(c.dst); err == nil {
						fam = a.Unmap()
					}
				}
				cm, closeCM, err := openCM(cmd, devs, pcapFile, want, fam)
				if err != nil {
					return err
				}
				defer closeCM()
				r.cm = cm
			}
			err := r.run()
			if ctx.Err() != nil {
				return interruptedAfter(ctx, "after %d %s", r.done, plural(r.done, "test", "tests"))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringVarP(&c.dst, "server", "s", "", "connect to the server at `address` (client); without it, serve")
	f.StringVarP(&c.src, "bind", "b", "", "bind to `address`")
	f.StringVarP(&format, "format", "f", "", "address `format`: name, ip, ipv6 (gid is not supported)")
	f.IntVarP(&c.bufferSize, "buffer-size", "B", 0, "SO_SNDBUF and SO_RCVBUF `bytes` (default 512 KiB: rings of 1 MiB)")
	f.IntVarP(&c.inline, "inline-size", "i", 64, "inline `bytes` for the latency tests")
	f.IntVarP(&c.iterations, "iterations", "I", 1, "`iterations` of one custom test")
	f.IntVarP(&c.count, "transfer-count", "C", 1000, "transfers per iteration of one custom test")
	f.StringVarP(&sizeArg, "size", "S", "1000", "transfer `size` in bytes, or all (every size, with the in-between ones)")
	f.StringVarP(&c.port, "port", "p", "7471", "`port`")
	f.IntVarP(&c.keepalive, "keepalive", "k", 0, "keepalive time in `seconds` (SO_KEEPALIVE, TCP_KEEPIDLE)")
	flagRange(cmd, "buffer-size", 0, 1<<30, "the buffer size", "bytes (0: the default; else 2048 or more)")
	flagRange(cmd, "inline-size", 0, 256, "the inline size", "bytes (the device's max_inline_data)")
	flagRange(cmd, "iterations", 1, math.MaxInt32, "the iterations", "")
	flagRange(cmd, "transfer-count", 1, math.MaxInt32, "the transfer count", "")
	flagRange(cmd, "keepalive", 0, math.MaxInt32, "the keepalive time", "seconds (0: off)")
	f.StringArrayVarP(&tests, "test-option", "T", nil, "test `option`: s|sockets, a|async, b|blocking, n|nonblocking, r|resolve, v|verify")
	f.StringSliceVar(&devs, "dev", nil, "use only these devices (default: found by address)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	return cmd
}

// testOption takes one -T option (rstream's set_test_opt).
func (c *rstreamConfig) testOption(t string) error {
	low := strings.ToLower(t)
	short := len(t) == 1
	switch {
	case short && t == "s" || !short && strings.HasPrefix(low, "socket"):
		c.tcp = true
	case short && t == "v" || !short && strings.HasPrefix(low, "verify"):
		c.verify = true
	case short && (t == "a" || t == "b" || t == "n" || t == "r"),
		!short && (strings.HasPrefix(low, "async") || strings.HasPrefix(low, "block") ||
			strings.HasPrefix(low, "nonblock") || strings.HasPrefix(low, "resolve")):
		// Go's calls block; the wire is the same either way.
	case short && t == "f" || !short && strings.HasPrefix(low, "fork"):
		return fmt.Errorf("-T %s: fork is not supported (one process serves): %w", t, syscall.EINVAL)
	default:
		return fmt.Errorf("-T %q: s|sockets, a|async, b|blocking, n|nonblocking, r|resolve or v|verify: %w", t, syscall.EINVAL)
	}
	return nil
}

// rstreamRun is one run of rstream.
type rstreamRun struct {
	cfg  rstreamConfig
	cm   *rdmacm.CM // nil with -T s
	out  io.Writer
	errw io.Writer
	ctx  context.Context

	ln       net.Listener      // the server's
	rln      *rsocket.Listener // the same, as an rsocket listener
	conn     net.Conn
	unwatch  func() bool // stops closing conn when ctx ends
	buf      []byte
	fmtData  byte  // format_buf's counter
	verData  byte  // verify_buf's counter
	verTotal int64 // verify_buf's byte count
	failed   error
	done     int // tests completed
}

// Test parameters of the current test (rstream's globals).
type rstreamTest struct {
	name                    string
	size, count, iterations int
}

func (r *rstreamRun) run() error {
	c := r.cfg
	bufSize := rstreamSizes[len(rstreamSizes)-1].size
	if c.custom {
		bufSize = c.size
	}
	r.buf = make([]byte, bufSize)
	if c.dst == "" {
		if err := r.listen(); err != nil {
			return err
		}
		defer r.ln.Close()
		// Ctrl-C ends a wait for the next connection too.
		defer context.AfterFunc(r.ctx, func() { r.ln.Close() })()
	}
	fmt.Fprintf(r.out, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	if !c.custom {
		if err := r.connect(true); err != nil {
			return err
		}
		for _, s := range rstreamSizes {
			if s.option > c.sizeOption || r.ctx.Err() != nil {
				continue
			}
			t := rstreamTest{name: sizeStr(s.size, 4) + "_lat", size: s.size, count: 1, iterations: sizeToCount(s.size)}
			r.test(t)
		}
		r.closeConn()
		if r.ctx.Err() != nil {
			return r.failed
		}
		if err := r.connect(false); err != nil {
			return err
		}
		for _, s := range rstreamSizes {
			if s.option > c.sizeOption || r.ctx.Err() != nil {
				continue
			}
			t := rstreamTest{name: sizeStr(s.size, 4) + "_bw", size: s.size, count: sizeToCount(s.size), iterations: 1}
			r.test(t)
		}
	} else {
		if err := r.connect(true); err != nil {
			return err
		}
		r.test(rstreamTest{name: "custom", size: c.size, count: c.count, iterations: c.iterations})
	}
	r.closeConn()
	return r.failed
}

// options are the rsocket options of a connection: rstream's 512 KiB
// buffers unless -B, inline -i for latency and none for bandwidth.
func (r *rstreamRun) options(latency bool) rsocket.Options {
	o := rsocket.Options{ReadBuffer: 1 << 19, WriteBuffer: 1 << 19, Inline: r.cfg.inline}
	if r.cfg.bufferSize != 0 {
		o.ReadBuffer, o.WriteBuffer = r.cfg.bufferSize, r.cfg.bufferSize
	}
	if r.cfg.inline == 0 || !latency {
		o.Inline = rsocket.NoInline
	}
	return o
}

func (r *rstreamRun) hostPort(host string) string {
	return net.JoinHostPort(host, r.cfg.port)
}

func (r *rstreamRun) network() string {
	switch {
	case r.cfg.tcp:
		return "tcp"
	}
	return "rsocket"
}

func (r *rstreamRun) listen() error {
	addr := r.hostPort(r.cfg.src)
	if r.cfg.tcp {
		ln, err := (&net.ListenConfig{}).Listen(r.ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("rlisten: %w", err)
		}
		r.ln = ln
		return nil
	}
	lc := rsocket.ListenConfig{CM: r.cm, Backlog: 1, Options: r.options(true),
		Logf: func(format string, args ...any) { fmt.Fprintf(r.errw, "roce: "+format+"\n", args...) }}
	ln, err := lc.Listen(r.ctx, "rsocket", addr)
	if err != nil {
		return fmt.Errorf("rlisten: %w", err)
	}
	r.ln, r.rln = ln, ln
	return nil
}

// connect makes the connection of the latency or the bandwidth tests, as
// client_connect or server_connect.
func (r *rstreamRun) connect(latency bool) error {
	var err error
	if r.cfg.dst != "" {
		err = r.clientConnect(latency)
	} else {
		err = r.serverConnect(latency)
	}
	if err != nil {
		return err
	}
	c := r.conn
	r.unwatch = context.AfterFunc(r.ctx, func() { c.Close() }) // Ctrl-C ends a blocked Read or Write
	return r.setOptions(r.conn)
}

func (r *rstreamRun) clientConnect(latency bool) error {
	if r.cfg.tcp {
		d := net.Dialer{}
		if r.cfg.src != "" {
			a, err := netip.ParseAddr(r.cfg.src)
			if err != nil {
				return fmt.Errorf("rbind: %q: %w", r.cfg.src, syscall.EINVAL)
			}
			d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
		}
		c, err := d.DialContext(r.ctx, "tcp", r.hostPort(r.cfg.dst))
		if err != nil {
			return fmt.Errorf("rconnect: %w", err)
		}
		tc := c.(*net.TCPConn)
		o := r.options(latency)
		tc.SetReadBuffer(o.ReadBuffer)
		tc.SetWriteBuffer(o.WriteBuffer)
		r.conn = c
		return nil
	}
	d := rsocket.Dialer{CM: r.cm, Options: r.options(latency)}
	if r.cfg.src != "" {
		// rstream binds the client to -b with the same port as the server's.
		a, err := netip.ParseAddr(r.cfg.src)
		if err != nil {
			return fmt.Errorf("rbind: %q: %w", r.cfg.src, syscall.EINVAL)
		}
		p, _ := strconv.ParseUint(r.cfg.port, 10, 16)
		d.LocalAddr = netip.AddrPortFrom(a.Unmap(), uint16(p))
	}
	c, err := d.Dial(r.ctx, "rsocket", r.hostPort(r.cfg.dst))
	if err != nil {
		return fmt.Errorf("rconnect: %w", err)
	}
	r.conn = c
	return nil
}

func (r *rstreamRun) serverConnect(latency bool) error {
	if r.rln != nil {
		if err := r.rln.SetOptions(r.options(latency)); err != nil {
			return err
		}
	}
	c, err := r.ln.Accept()
	if err != nil {
		if r.ctx.Err() != nil {
			return fmt.Errorf("raccept: %w", r.ctx.Err())
		}
		return fmt.Errorf("raccept: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		o := r.options(latency)
		tc.SetReadBuffer(o.ReadBuffer)
		tc.SetWriteBuffer(o.WriteBuffer)
	}
	r.conn = c
	return nil
}

// setOptions applies -k, printing what rstream prints.
func (r *rstreamRun) setOptions(c net.Conn) error {
	if nd, ok := c.(interface{ SetNoDelay(bool) error }); ok {
		nd.SetNoDelay(true)
	}
	if r.cfg.keepalive == 0 {
		return nil
	}
	ka, ok := c.(interface {
		SetKeepAlive(bool) error
		SetKeepAlivePeriod(time.Duration) error
	})
	if !ok {
		return nil
	}
	if err := ka.SetKeepAlive(true); err != nil {
		return fmt.Errorf("rsetsockopt SO_KEEPALIVE: %w", err)
	}
	if err := ka.SetKeepAlivePeriod(time.Duration(r.cfg.keepalive) * time.Second); err != nil {
		return fmt.Errorf("rsetsockopt TCP_KEEPIDLE: %w", err)
	}
	fmt.Fprintf(r.out, "Keepalive: ON\n  time: %d\n", r.cfg.keepalive)
	return nil
}

// closeConn is rshutdown(SHUT_RDWR) and rclose.
func (r *rstreamRun) closeConn() {
	if r.conn != nil {
		r.unwatch()
		if err := r.conn.Close(); err != nil && r.failed == nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintf(r.errw, "rclose: %v\n", err)
		}
		r.conn = nil
	}
}

// test runs one test (run_test) and prints its line; a failure is
// reported and remembered.
func (r *rstreamRun) test(t rstreamTest) {
	if err := r.runTest(t); err != nil {
		if r.ctx.Err() != nil {
			err = r.ctx.Err()
		}
		if rc, ok := r.conn.(*rsocket.Conn); ok && rc.PeerIOMapSize() > 0 {
			err = fmt.Errorf("%w; the peer asked for iomapped buffers (target_iomap_size %d, as riostream's riomap and riowrite do), "+
				"which goroce does not implement: it offers the peer no iomap space, so the peer's riomap fails (Cannot allocate memory)",
				err, rc.PeerIOMapSize())
		}
		fmt.Fprintln(r.errw, err)
		if r.failed == nil {
			r.failed = fmt.Errorf("%s: %w", t.name, err)
		}
		return
	}
	r.done++
}

func (r *rstreamRun) runTest(t rstreamTest) error {
	client := r.cfg.dst != ""
	xfer := func(send bool, size int) error {
		if send {
			return r.sendXfer(size)
		}
		return r.recvXfer(size)
	}
	// sync_test: the client sends 16 bytes, the server answers with 16.
	if err := xfer(client, 16); err != nil {
		return err
	}
	if err := xfer(!client, 16); err != nil {
		return err
	}
	start := time.Now()
	for range t.iterations {
		for range t.count {
			if err := xfer(client, t.size); err != nil {
				return err
			}
		}
		for range t.count {
			if err := xfer(!client, t.size); err != nil {
				return err
			}
		}
	}
	r.showPerf(t, time.Since(start))
	return nil
}

func (r *rstreamRun) sendXfer(size int) error {
	b := r.buf[:size]
	if r.cfg.verify {
		for i := range b { // format_buf
			b[i] = r.fmtData
			r.fmtData++
		}
	}
	if _, err := r.conn.Write(b); err != nil {
		return fmt.Errorf("rsend: %w", err)
	}
	return nil
}

func (r *rstreamRun) recvXfer(size int) error {
	b := r.buf[:size]
	if _, err := io.ReadFull(r.conn, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("the peer closed the connection: %w", err)
		}
		return fmt.Errorf("rrecv: %w", err)
	}
	if r.cfg.verify {
		for i := range b { // verify_buf
			if b[i] != r.verData {
				return fmt.Errorf("data verification failed byte %d", r.verTotal)
			}
			r.verData++
			r.verTotal++
		}
	}
	return nil
}

// showPerf prints a test's line as rstream's show_perf.
func (r *rstreamRun) showPerf(t rstreamTest, d time.Duration) {
	usec := float64(d.Microseconds())
	if usec <= 0 {
		usec = 1
	}
	bytes := int64(t.iterations) * int64(t.count) * int64(t.size) * 2
	fmt.Fprintf(r.out, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", t.name, sizeStr(int64(t.size), 31), cntStr(int64(t.count)),
		cntStr(int64(t.iterations)), sizeStr(bytes, 31), usec/1e6, float64(bytes*8)/(1000*usec),
		usec/float64(t.iterations)/float64(t.count*2))
}

// sizeStr is librdmacm's examples' size_str, truncated to max characters
// as snprintf into a buffer of max+1 truncates it.
func sizeStr[T int | int64](size T, max int) string {
	s := int64(size)
	var base int64 = 1
	mag := ""
	switch {
	case s >= 1<<30:
		base, mag = 1<<30, "g"
	case s >= 1<<20:
		base, mag = 1<<20, "m"
	case s >= 1<<10:
		base, mag = 1<<10, "k"
	}
	var fraction int64
	if s/base < 10 {
		fraction = (s % base) * 10 / base
	}
	out := fmt.Sprintf("%d%s", s/base, mag)
	if fraction != 0 {
		out = fmt.Sprintf("%d.%d%s", s/base, fraction, mag)
	}
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// cntStr is cnt_str.
func cntStr(n int64) string {
	switch {
	case n >= 1000000000:
		return fmt.Sprintf("%db", n/1000000000)
	case n >= 1000000:
		return fmt.Sprintf("%dm", n/1000000)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprintf("%d", n)
}

// sizeToCount is size_to_count.
func sizeToCount(size int) int {
	switch {
	case size >= 1<<20:
		return 100
	case size >= 1<<16:
		return 1000
	case size >= 1<<10:
		return 10000
	}
	return 100000
}
