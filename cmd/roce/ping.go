package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/rping"
)

func newPingCmd() *cobra.Command {
	var (
		server, client bool
		addr, src      string
		port           int
		devs           []string
		pcapFile       string
		selfQP         bool
		c              rping.Config
	)
	cmd := &cobra.Command{
		Use:   "ping -s|-c [-vVd] [-S size] [-C count] [-I addr] [-a addr] [-p port] [-P]",
		Short: "rping: an RDMA CM connection with RDMA READ and WRITE, wire-compatible with librdmacm's rping",
		Long: `ping is librdmacm's rping: the server (-s) listens on -a (default every
address) port -p (7174); the client (-c) connects to -a through RDMA CM over
the device's default RoCE mode (roce mode), then per ping advertises a
buffer, which the server RDMA READs and RDMA WRITEs back. Either side can be
goroce or Linux rping. -v prints the data, -V checks it, -C stops after a
count (the client; the server serves one connection, or many with -P).

The devices are found by address, as librdmacm does (--dev picks one); a
failed connection says why, in words, after rping's own message.`,
		Example: `  roce ping -s -a 192.0.2.1 -v           # server
  roce ping -c -a 192.0.2.1 -C 3 -v -V     # client: 3 pings, checked
  roce ping -c -a fd00:c0:2::11 -S 4096 -C 10`,
		Args: argsWithFix(cobra.NoArgs, "the address goes with -a: roce ping -s -a ADDR (server), roce ping -c -a ADDR (client)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if server == client {
				return usageError{errors.New("choose one of -s (server) and -c (client)")}
			}
			c.Server = server
			var a netip.Addr
			switch {
			case addr != "":
				var err error
				if a, err = resolveAddr(cmd.Context(), "-a", addr); err != nil {
					return usageError{err}
				}
			case client:
				return usageError{errors.New("-c needs the server's address: -a addr")}
			default:
				a = netip.IPv4Unspecified()
			}
			c.Addr = netip.AddrPortFrom(a.Unmap(), uint16(port))
			if src != "" {
				if server {
					return usageError{errors.New("-I is the client's source address; the server binds to -a")}
				}
				s, err := resolveAddr(cmd.Context(), "-I", src)
				if err != nil {
					return usageError{err}
				}
				c.Source = s.Unmap()
			}
			if c.Persistent && client {
				return usageError{errors.New("-P is for the server (-s)")}
			}
			_ = selfQP // the QP is made and moved by goroce either way; the wire is the same
			want, family := c.Source, c.Addr.Addr()
			if server {
				want, family = c.Addr.Addr(), netip.Addr{}
			}
			cm, closeCM, err := openCM(cmd, devs, pcapFile, want, family)
			if err != nil {
				return err
			}
			defer closeCM()
			c.Out, c.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return rping.Run(commandContext(cmd), cm, c)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&server, "server", "s", false, "server side (to bind to any IPv6 address use -a ::0)")
	f.BoolVarP(&client, "client", "c", false, "client side")
	f.StringVarP(&addr, "addr", "a", "", "`address` or host name: the server's (client) or the one to bind (server)")
	f.StringVarP(&src, "source", "I", "", "source `address` (or host name) to bind to for the client")
	f.IntVarP(&port, "port", "p", rping.DefaultPort, "`port`")
	f.IntVarP(&c.Count, "count", "C", 0, "ping `count` times (0: until interrupted)")
	f.IntVarP(&c.Size, "size", "S", rping.DefaultSize, fmt.Sprintf("ping data `size` (%d-%d)", rping.MinSize, rping.MaxSize))
	f.BoolVarP(&c.Verbose, "verbose", "v", false, "display ping data to stdout")
	f.BoolVarP(&c.Validate, "validate", "V", false, "validate ping data")
	f.BoolVarP(&c.Debug, "debug", "d", false, "debug printfs")
	f.BoolVarP(&c.Persistent, "persistent", "P", false, "persistent server mode allowing multiple connections")
	f.BoolVarP(&selfQP, "self-qp", "q", false, "use self-created, self-modified QPs (the same on the wire; accepted for rping's sake)")
	f.StringSliceVar(&devs, "dev", nil, "use only these devices (default: found by address)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	pingRanges(cmd)
	return cmd
}

// resolveAddr is rping's get_addr: an IPv4 or IPv6 address, or a host
// name looked up as getaddrinfo would (/etc/hosts, then DNS), taking the
// first address. A name that does not resolve is a bad command line.
func resolveAddr(ctx context.Context, flag, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil || len(as) == 0 {
		why := "no address"
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			why = dnsErr.Err
		}
		return netip.Addr{}, fmt.Errorf("%s %q: not an IPv4 or IPv6 address, and the name does not resolve (%s): %w", flag, s, why, syscall.EINVAL)
	}
	return as[0].Unmap(), nil
}

// pingRanges are the values ping's numeric flags take: rping's (-S:
// RPING_MIN_BUFSIZE to RPING_BUFSIZE-1; -C: 0, until interrupted, or a
// count), and a port RDMA CM can connect to.
func pingRanges(cmd *cobra.Command) {
	flagRange(cmd, "port", 1, 65535, "the port", "")
	flagRange(cmd, "count", 0, math.MaxInt32, "the count", "(0: until interrupted)")
	flagRange(cmd, "size", rping.MinSize, rping.MaxSize, "the ping data size", "bytes")
}
