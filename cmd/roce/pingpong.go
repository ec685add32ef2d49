package main

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/cmd/roce/internal/pingpong"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// rundirOf returns the --rundir flag's value where the command has one,
// else GOROCE_RUNDIR or /run/goroce.
func rundirOf(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("rundir"); f != nil && f.Value.String() != "" {
		return f.Value.String()
	}
	return host.RunDir()
}

// openDevice opens the named device (the first registered one when name
// is empty, as the pingpong tools take the first device), with --pcap.
func openDevice(cmd *cobra.Command, name, pcapFile string) (*host.Device, func(), error) {
	dir := rundirOf(cmd)
	if name == "" {
		defs, err := host.NewRegistry(dir).List()
		if err != nil {
			return nil, nil, err
		}
		if len(defs) == 0 {
			return nil, nil, fmt.Errorf("No IB devices found (create one: roce link add rxe0 type rxe netdev eth0)")
		}
		name = defs[0].Name
	}
	o := host.Options{RunDir: dir}
	var flush func() error
	if pcapFile != "" {
		f, err := os.Create(pcapFile)
		if err != nil {
			return nil, nil, err
		}
		bw := bufio.NewWriterSize(f, 1<<20)
		w, err := pcap.NewWriter(bw)
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		o.Wrap = func(l link.Link) link.Link { return pcap.New(l, w) }
		flush = func() error {
			err := bw.Flush()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	d, err := host.Open(name, o)
	if err != nil {
		if flush != nil {
			flush()
		}
		if errors.Is(err, syscall.ENODEV) {
			return nil, nil, fmt.Errorf("IB device %s not found: %w", name, err)
		}
		return nil, nil, err
	}
	return d, func() {
		rep := d.CounterReport()
		d.Close()
		if name := os.Getenv(envStats); name != "" {
			// After Close, so that the last ACKs' counts are in.
			rep.Counters = d.Device.Counters().Snapshot()
			if err := writeStatsFile(name, rep); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "roce: %s: %v\n", envStats, err)
			}
		}
		if flush != nil {
			if err := flush(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "roce: --pcap %s: %v\n", pcapFile, err)
			}
		}
	}, nil
}

func mtuFlag(n int) (verbs.MTU, error) {
	if m := verbs.MTUFromBytes(n); m != 0 && m.Bytes() == n {
		return m, nil
	}
	return 0, usageError{fmt.Errorf("-m %d: path MTU must be 256, 512, 1024, 2048 or 4096", n)}
}

func newPingpongCmd() *cobra.Command {
	var (
		rc, uc, ud    bool
		dev, pcapFile string
		c             pingpong.Config
		mtu           int
	)
	cmd := &cobra.Command{
		Use:   "pingpong [--rc|--uc|--ud] [flags] [server]",
		Short: "ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong, wire-compatible with them",
		Long: `pingpong is rdma-core's ibv_rc_pingpong (--rc, the default), ibv_uc_pingpong
(--uc) and ibv_ud_pingpong (--ud): the same flags, the same TCP exchange of
LID:QPN:PSN:GID on port 18515 (-p), the same traffic and output, so either
side can be goroce or rdma-core. With a server address it is the client;
without, the server. The server address may be on another network than the
GID (-g): the exchange only carries the QP data.

RoCE needs a GID: give -g with the index 'roce gids' suggests.

Like ibv_rc_pingpong's one thread, it runs on one P (GOMAXPROCS 1) unless
the environment sets GOMAXPROCS.`,
		Example: `  roce pingpong -d rxe0 -g 1                 # server
  roce pingpong -d rxe0 -g 1 198.51.100.11   # client
  roce pingpong --ud -d rxe0 -g 1 -s 512 198.51.100.11`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			c.Type = verbs.RC
			for _, f := range []struct {
				set bool
				t   verbs.QPType
			}{{rc, verbs.RC}, {uc, verbs.UC}, {ud, verbs.UD}} {
				if f.set {
					n++
					c.Type = f.t
				}
			}
			if n > 1 {
				return usageError{errors.New("choose one of --rc, --uc and --ud")}
			}
			if cmd.Flags().Changed("mtu") {
				if c.Type == verbs.UD {
					return usageError{errors.New("-m: UD has no path MTU option (ibv_ud_pingpong has none either)")}
				}
				m, err := mtuFlag(mtu)
				if err != nil {
					return err
				}
				c.MTU = m
			}
			if err := needGID(cmd, c.GIDIndex); err != nil {
				return err
			}
			if len(args) == 1 {
				c.Server = args[0]
			}
			busypoll.OneP()
			d, closeDev, err := openDevice(cmd, dev, pcapFile)
			if err != nil {
				return err
			}
			defer closeDev()
			c.Out = cmd.OutOrStdout()
			stderr := cmd.ErrOrStderr()
			c.Notice = func(format string, args ...any) { fmt.Fprintf(stderr, "roce: "+format+"\n", args...) }
			return pingpong.Run(commandContext(cmd), d.Device, c)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&rc, "rc", false, "reliable connection (ibv_rc_pingpong; the default)")
	f.BoolVar(&uc, "uc", false, "unreliable connection (ibv_uc_pingpong)")
	f.BoolVar(&ud, "ud", false, "unreliable datagram (ibv_ud_pingpong)")
	f.IntVarP(&c.Port, "port", "p", 18515, "listen on/connect to port `port`")
	f.StringVarP(&dev, "ib-dev", "d", "", "use IB device `dev` (default first device found)")
	f.IntVarP(&c.IBPort, "ib-port", "i", 1, "use `port` of IB device")
	f.IntVarP(&c.Size, "size", "s", 0, "`size` of message to exchange (default 4096, UD 2048)")
	f.IntVarP(&mtu, "mtu", "m", 1024, "path MTU `size` (RC, UC)")
	f.IntVarP(&c.RxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	f.IntVarP(&c.Iters, "iters", "n", 1000, "number of exchanges")
	f.IntVarP(&c.SL, "sl", "l", 0, "service level value")
	f.BoolVarP(&c.Events, "events", "e", false, "sleep on CQ events (default poll)")
	f.IntVarP(&c.GIDIndex, "gid-idx", "g", -1, "local port gid `index` (required: RoCE needs a GID; roce gids shows which)")
	f.BoolVarP(&c.Check, "chk", "c", false, "validate received buffer")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	pingpongRanges(cmd)
	return cmd
}

// pingpongRanges are the values pingpong's numeric flags take. rdma-core's
// tools take more, and misbehave with them: -r 0 posts no receive and
// waits forever, -r -1 wraps to a CQ of 0 entries, -l 16 wraps into
// sl 0, -p 0 listens on a port nobody can name.
func pingpongRanges(cmd *cobra.Command) {
	dev, port := goroceLimits()
	flagRange(cmd, "port", 1, 65535, "the TCP port", "")
	flagRange(cmd, "ib-port", 1, 255, "the port number", "(goroce devices have port 1)")
	flagRange(cmd, "size", 1, int64(dev.MaxMsgSize), "the message size", "bytes (the device's max_msg_sz)")
	flagRange(cmd, "mtu", 256, 4096, "the path MTU", "bytes: 256, 512, 1024, 2048 or 4096")
	flagRange(cmd, "rx-depth", 1, int64(dev.MaxCQE-1), "the receive depth",
		fmt.Sprintf("(its CQ holds rx-depth+1 completions, at most %d, max_cqe)", dev.MaxCQE))
	flagRange(cmd, "iters", 1, math.MaxInt32, "the number of iterations", "")
	flagRange(cmd, "sl", 0, 15, "the service level", "")
	flagRange(cmd, "gid-idx", 0, int64(port.GIDTableLen-1), "the GID index", "(roce gids shows which to use)")
}

// goroceLimits are what every goroce device reports (ibv_query_device,
// ibv_query_port), known before one is opened.
func goroceLimits() (verbs.DeviceAttr, verbs.PortAttr) {
	return host.DeviceAttrOf(wire.MAC{}), host.PortAttrOf(host.Netdev{})
}

// needGID refuses a pingpong without -g: RoCE addresses every packet with
// a GID (a GRH or IP header), which rdma-core's tools only find out when
// the QP is connected ("Failed to modify QP to RTR" on one side, "Couldn't
// read/write remote address" on the other).
func needGID(cmd *cobra.Command, index int) error {
	if cmd.Flags().Changed("gid-idx") && index >= 0 {
		return nil
	}
	return usageError{fmt.Errorf("%s: RoCE needs a GID: pass -g N (roce gids shows which index)", opName(cmd))}
}
