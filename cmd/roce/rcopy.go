package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/rsocket"
)

// rcopy's messages (librdmacm/examples/rcopy.c): a 16-byte header,
// little-endian as the x86 hosts rcopy runs on write it (rcopy does no
// byte swapping).
const (
	rcopyCmdOpen  = 1
	rcopyCmdClose = 2
	rcopyCmdWrite = 3
	rcopyCmdResp  = 0x80
	rcopyHdrLen   = 16
	rcopyPort     = "7427"
)

// rcopyHdr is struct msg_hdr: version (0), command, len (of the whole
// message), data (a mode or a status), id.
type rcopyHdr struct {
	version, command uint8
	len              uint16
	data             uint32
	id               uint64
}

func (h rcopyHdr) append(b []byte) []byte {
	b = append(b, h.version, h.command)
	b = binary.LittleEndian.AppendUint16(b, h.len)
	b = binary.LittleEndian.AppendUint32(b, h.data)
	return binary.LittleEndian.AppendUint64(b, h.id)
}

func parseRcopyHdr(b []byte) rcopyHdr {
	return rcopyHdr{version: b[0], command: b[1], len: binary.LittleEndian.Uint16(b[2:]),
		data: binary.LittleEndian.Uint32(b[4:]), id: binary.LittleEndian.Uint64(b[8:])}
}

func newRcopyCmd() *cobra.Command {
	var (
		port     string
		devs     []string
		pcapFile string
	)
	cmd := &cobra.Command{
		Use:   "rcopy [source server[:destination]] [-p port]",
		Short: "rcopy: copy a file over rsockets, wire-compatible with librdmacm's rcopy",
		Long: `rcopy is librdmacm's rcopy over goroce's rsockets: without arguments it
serves on port -p (7427), writing each file a client sends to the path the
client names (any path this process may write, as rcopy's server does), until
interrupted; with a source file and a server it sends the file there, to
destination (default: the source's path). Either side can be goroce or Linux
rcopy.`,
		Example: `  roce rcopy                                  # server
  roce rcopy /tmp/f 192.0.2.11:/tmp/copy     # client`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return fmt.Errorf("rcopy takes no arguments (server) or a source file and server[:destination] (client), not %d", len(args))
			}
			return nil
		}),
		RunE: func(cmd *cobra.Command, args []string) error {
			if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
				return usageError{fmt.Errorf("-p %q: a port number 1-65535: %w", port, syscall.EINVAL)}
			}
			busypoll.OneP()
			ctx := commandContext(cmd)
			var want, fam netip.Addr
			var dst, src, dstFile string
			if len(args) == 2 {
				src, dst = args[0], args[1]
				dstFile = src
				dst, dstFile = splitRcopyDest(dst, src)
				if a, err := netip.ParseAddr(dst); err == nil {
					fam = a.Unmap()
				}
			}
			cm, closeCM, err := openCM(cmd, devs, pcapFile, want, fam)
			if err != nil {
				return err
			}
			defer closeCM()
			out := cmd.OutOrStdout()
			if dst == "" {
				files, err := rcopyServe(ctx, cm, port, out)
				if ctx.Err() != nil {
					return interruptedAfter(ctx, "after receiving %d %s", files, plural(files, "file", "files"))
				}
				return err
			}
			return rcopyClient(ctx, cm, src, net.JoinHostPort(dst, port), dstFile, out)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&port, "port", "p", rcopyPort, "`port`")
	f.StringSliceVar(&devs, "dev", nil, "use only these devices (default: found by address)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	return cmd
}

// splitRcopyDest splits server[:destination] at the first colon, as rcopy
// does; an IPv6 server goes in brackets: [fd00::1]:/tmp/f.
func splitRcopyDest(arg, src string) (host, file string) {
	if strings.HasPrefix(arg, "[") {
		if j := strings.IndexByte(arg, ']'); j > 0 {
			host, rest := arg[1:j], arg[j+1:]
			if f, ok := strings.CutPrefix(rest, ":"); ok && f != "" {
				return host, f
			}
			return host, src
		}
	}
	if h, f, ok := strings.Cut(arg, ":"); ok && f != "" {
		return h, f
	}
	return strings.TrimSuffix(arg, ":"), src
}

// rcopyClient is rcopy's client_run.
func rcopyClient(ctx context.Context, cm *rdmacm.CM, src, addr, dstFile string, out io.Writer) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	c, err := rsocket.Dial(ctx, cm, "rsocket", addr)
	if err != nil {
		return fmt.Errorf("rconnect failed: %w", err)
	}
	defer c.Close()
	defer context.AfterFunc(ctx, func() { c.Close() })()
	fmt.Fprint(out, "opening...")
	// msg_open: the header, then the path, NUL-padded to a multiple of 8.
	plen := (len(dstFile) + 8) &^ 7
	msg := rcopyHdr{command: rcopyCmdOpen, len: uint16(rcopyHdrLen + plen), data: uint32(unixMode(st.Mode()))}.append(nil)
	msg = append(msg, dstFile...)
	msg = append(msg, make([]byte, plen-len(dstFile))...)
	if rcopyHdrLen+plen > 0xFFFF {
		return fmt.Errorf("destination path of %d bytes: rcopy's message length is 16 bits: %w", len(dstFile), syscall.ENAMETOOLONG)
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	if err := rcopyResp(c, rcopyCmdOpen); err != nil {
		return err
	}
	fmt.Fprint(out, "transferring")
	msg = rcopyHdr{command: rcopyCmdWrite, len: rcopyHdrLen + 8}.append(nil)
	msg = binary.LittleEndian.AppendUint64(msg, uint64(len(data)))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	fmt.Fprint(out, "...")
	start := time.Now()
	if _, err := c.Write(data); err != nil {
		return err
	}
	werr := rcopyResp(c, rcopyCmdWrite)
	elapsed := time.Since(start)
	fmt.Fprint(out, "closing...")
	if _, err := c.Write(rcopyHdr{command: rcopyCmdClose, len: rcopyHdrLen}.append(nil)); err != nil {
		return err
	}
	if err := rcopyResp(c, rcopyCmdClose); err != nil {
		return err
	}
	fmt.Fprintln(out, "done")
	if err := c.Close(); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	usec := float64(elapsed.Microseconds())
	if usec <= 0 {
		usec = 1
	}
	fmt.Fprintf(out, "%d bytes in %.2f seconds = %.2f Gb/sec\n", len(data), usec/1e6, float64(len(data)*8)/(1000*usec))
	return nil
}

// rcopyResp reads the response to cmd (msg_get_resp) and returns its
// status as an error.
func rcopyResp(c net.Conn, cmd uint8) error {
	var b [rcopyHdrLen]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("waiting for the server's response: %w", err)
	}
	h := parseRcopyHdr(b[:])
	if h.version != 0 || h.len != rcopyHdrLen || h.command != cmd|rcopyCmdResp {
		return fmt.Errorf("invalid length %d or bad command response %x:%x", h.len, h.command, cmd|rcopyCmdResp)
	}
	if h.data != 0 {
		return fmt.Errorf("the server refused: %w", syscall.Errno(h.data))
	}
	return nil
}

// unixMode is st_mode of a regular file with mode m's permissions.
func unixMode(m os.FileMode) uint32 {
	v := uint32(m.Perm()) | syscall.S_IFREG
	if m&os.ModeSetuid != 0 {
		v |= syscall.S_ISUID
	}
	if m&os.ModeSetgid != 0 {
		v |= syscall.S_ISGID
	}
	if m&os.ModeSticky != 0 {
		v |= syscall.S_ISVTX
	}
	return v
}

// rcopyServe is rcopy's server_run: connections one after another, each
// served until the client goes (server_process).
func rcopyServe(ctx context.Context, cm *rdmacm.CM, port string, out io.Writer) (files int, err error) {
	l, err := rsocket.Listen(cm, "rsocket", net.JoinHostPort("", port))
	if err != nil {
		return 0, fmt.Errorf("rlisten failed: %w", err)
	}
	defer l.Close()
	for ; ; files++ {
		fmt.Fprint(out, "waiting for connection...")
		c, err := l.AcceptContext(ctx)
		if err != nil {
			if ctx.Err() != nil {
				fmt.Fprintln(out)
			}
			return files, err
		}
		fmt.Fprintf(out, "client: %v\n", c.RemoteAddr().(rsocket.Addr).Addr())
		stop := context.AfterFunc(ctx, func() { c.Close() })
		s := &rcopySession{c: c, out: out}
		s.serve()
		stop()
		c.Close()
	}
}

// rcopySession is one client of the server.
type rcopySession struct {
	c     net.Conn
	out   io.Writer
	f     *os.File
	bytes int64
}

func (s *rcopySession) serve() {
	defer func() {
		if s.f != nil {
			s.f.Close()
		}
	}()
	for {
		var b [rcopyHdrLen]byte
		if _, err := io.ReadFull(s.c, b[:]); err != nil {
			return
		}
		h := parseRcopyHdr(b[:])
		if h.version != 0 || h.len < rcopyHdrLen {
			fmt.Fprintf(s.out, "invalid version %d or length %d\n", h.version, h.len)
			return
		}
		var status uint32
		switch h.command {
		case rcopyCmdOpen:
			status = s.open(h)
		case rcopyCmdClose:
			fmt.Fprint(s.out, "closing...")
			s.resp(h, 0)
			if s.f != nil {
				s.f.Close()
				s.f = nil
			}
			fmt.Fprintln(s.out, "done")
			continue
		case rcopyCmdWrite:
			status = s.write(h)
		default:
			s.resp(h, uint32(syscall.EINVAL))
			return
		}
		s.resp(h, status)
		if status != 0 {
			return
		}
	}
}

func (s *rcopySession) resp(h rcopyHdr, status uint32) {
	s.c.Write(rcopyHdr{command: h.command | rcopyCmdResp, len: rcopyHdrLen, data: status, id: h.id}.append(nil))
}

// open is server_open: the path follows the header.
func (s *rcopySession) open(h rcopyHdr) uint32 {
	fmt.Fprint(s.out, "opening: ")
	if s.f != nil {
		fmt.Fprintln(s.out, "cannot open another file")
		return uint32(syscall.EBUSY)
	}
	path := make([]byte, int(h.len)-rcopyHdrLen)
	if _, err := io.ReadFull(s.c, path); err != nil {
		fmt.Fprintln(s.out, "error receiving path")
		return uint32(syscall.EIO)
	}
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	fmt.Fprintf(s.out, "%s, ", path)
	f, err := os.OpenFile(string(path), os.O_RDWR|os.O_CREATE|os.O_TRUNC, os.FileMode(h.data&0o777))
	if err != nil {
		fmt.Fprintln(s.out, "unable to open destination file")
		return errnoOf(err)
	}
	s.f = f
	return 0
}

// write is server_write: the size, then that many bytes.
func (s *rcopySession) write(h rcopyHdr) uint32 {
	fmt.Fprint(s.out, "transferring")
	if s.f == nil {
		fmt.Fprintln(s.out, "...file not opened")
		return uint32(syscall.EINVAL)
	}
	if h.len != rcopyHdrLen+8 {
		fmt.Fprintf(s.out, "...invalid message length %d\n", h.len)
		return uint32(syscall.EINVAL)
	}
	var b [8]byte
	if _, err := io.ReadFull(s.c, b[:]); err != nil {
		return uint32(syscall.EIO)
	}
	s.bytes = int64(binary.LittleEndian.Uint64(b[:]))
	if s.bytes < 0 {
		return uint32(syscall.EFBIG)
	}
	fmt.Fprintf(s.out, "...%d bytes...", s.bytes)
	if n, err := io.Copy(s.f, io.LimitReader(s.c, s.bytes)); err != nil || n != s.bytes {
		fmt.Fprintln(s.out, "...error receiving data")
		if err != nil {
			return errnoOf(err)
		}
		return uint32(syscall.EIO)
	}
	return 0
}

func errnoOf(err error) uint32 {
	var e syscall.Errno
	if errors.As(err, &e) {
		return uint32(e)
	}
	return uint32(syscall.EIO)
}

// plural picks the word for n things.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
