package main

import (
	"errors"
	"math"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/busypoll"
	"github.com/goroce/goroce/cmd/roce/internal/perftest"
)

func newPerfCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf write|read|send|atomic [--lat] [flags] [server]",
		Short: "perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw and the _lat tools",
		Long: `perf is linux-rdma perftest: 'roce perf write' is ib_write_bw, with --lat
ib_write_lat; likewise read, send and atomic. The flags, the TCP exchange of
versions, MTU and QP data on port 18515 (-p), the traffic, the banner and
the result tables are perftest 6.06's, so either side can be goroce or
perftest. With a server address it is the client; without, the server,
which serves one test and exits.

RoCE needs a GID: without -x the index is picked as perftest picks it (an
IPv4 GID, or IPv6 with --ipv6; RoCE v2 before v1).

With -R (perftest's --rdma_cm) the QPs are connected through RDMA CM and
the exchange runs over an RDMA CM connection of its own on port -p instead
of TCP, as perftest does: the client's argument is then the server's RoCE
address, and the devices are found by address (-d picks one). -T sets the
type of service of the test's connections (not the exchange's), -R only,
as perftest does: the client's packets carry it as their IP TOS, and the
server's too, which take it from the client's connect request.

Give -D to both sides, as perftest wants: perftest does not exchange it, and
with -D on one side only ib_send_bw's two sides wait for each other forever.
Two goroce sides agree: the one without -D (the server, when both have one)
takes the other's and says so on stderr. A side whose peer exits mid-test
ends with an error saying so.

Like perftest's one thread, the test runs on one P (GOMAXPROCS 1) unless
the environment sets GOMAXPROCS: its CQ poll drives the link itself, and
more Ps only compete with the peer and the kernel for the CPUs (two
processes on two CPUs ran twice as fast on one P each).`,
		Example: `  roce perf write -d rxe0 -x 1                      # server (ib_write_bw)
  roce perf write -d rxe0 -x 1 198.51.100.11        # client
  roce perf send --lat -d rxe0 -a 198.51.100.11     # ib_send_lat, all sizes
  roce perf read -d rxe0 -q 4 -D 10 198.51.100.11   # 4 QPs for 10 seconds
  roce perf send -d rxe0 -b 198.51.100.11           # both ways (server with -b too)
  roce perf write -R                                # server (ib_write_bw -R)
  roce perf write -R 192.0.2.11                     # client, through RDMA CM
  roce perf write -R -T 106 192.0.2.11              # the same with TOS 106 (DSCP 26, ECT(0))`,
		Args: unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageError{errors.New("choose a test: write, read, send or atomic")}
		},
	}
	for _, v := range []struct {
		name string
		verb perftest.Verb
		bw   string
		lat  string
	}{{"write", perftest.Write, "ib_write_bw", "ib_write_lat"}, {"read", perftest.Read, "ib_read_bw", "ib_read_lat"},
		{"send", perftest.Send, "ib_send_bw", "ib_send_lat"}, {"atomic", perftest.Atomic, "ib_atomic_bw", "ib_atomic_lat"}} {
		cmd.AddCommand(newPerfVerbCmd(v.name, v.verb, v.bw, v.lat))
	}
	return cmd
}

func newPerfVerbCmd(name string, verb perftest.Verb, bw, lat string) *cobra.Command {
	var (
		c             perftest.Config
		dev, pcapFile string
		duration, mtu int
		rdmaCM        bool
		cpuFreq       bool
		noRelaxed     bool
		tos           int
	)
	cmd := &cobra.Command{
		Use:   name + " [--lat] [flags] [server]",
		Short: bw + " (with --lat " + lat + ")",
		Args:  usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.Verb = verb
			c.RDMACM = rdmaCM
			if cmd.Flags().Changed("duration") {
				c.Duration = time.Duration(duration) * time.Second
			}
			if cmd.Flags().Changed("mtu") {
				c.MTU = mtu
			}
			if !cmd.Flags().Changed("gid-index") {
				c.GIDIndex = -1
			}
			if cmd.Flags().Changed("tos") {
				c.TOS, c.SetTOS = tos, true
			}
			c.SetQPTimeout = cmd.Flags().Changed("qp-timeout")
			c.RelaxedOrderingOff = noRelaxed
			if len(args) == 1 {
				c.Server = args[0]
			}
			_ = cpuFreq // -F: goroce reads no cpufreq, so there is nothing to warn about
			// Check the flags before opening the device, so a bad line
			// exits 2 without side effects.
			if err := c.Validate(); err != nil {
				return usageError{err}
			}
			busypoll.OneP()
			ctx := commandContext(cmd)
			c.Out, c.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if rdmaCM {
				// The devices are found by address, as librdmacm finds
				// them (-d picks one); perftest's -R is IPv4 only.
				var devs []string
				if dev != "" {
					devs = []string{dev}
				}
				family := netip.IPv4Unspecified()
				if c.IPv6 {
					family = netip.IPv6Unspecified()
				}
				if a, err := netip.ParseAddr(c.Server); err == nil {
					family = a.Unmap()
				}
				// -T is set on the test QPs' CM IDs (perftest.Config.TOS);
				// the exchange's connection has the rundir's
				// default_roce_tos, as perftest's has the kernel's.
				cm, closeCM, err := openCM(cmd, devs, pcapFile, netip.Addr{}, family)
				if err != nil {
					return err
				}
				defer closeCM()
				c.CM = cm
				_, err = perftest.Run(ctx, nil, c)
				return err
			}
			d, closeDev, err := openDevice(cmd, dev, pcapFile)
			if err != nil {
				return err
			}
			defer closeDev()
			c.Device = d.Name()
			_, err = perftest.Run(ctx, d.Device, c)
			return err
		},
	}
	f := cmd.Flags()
	f.BoolVar(&c.Lat, "lat", false, "latency test ("+lat+") instead of bandwidth")
	f.StringVarP(&dev, "ib-dev", "d", "", "use IB device `dev` (default first device found)")
	f.IntVarP(&c.IBPort, "ib-port", "i", 1, "use `port` of IB device")
	f.IntVarP(&c.Port, "port", "p", perftest.DefaultPort, "listen on/connect to `port`")
	f.IntVarP(&c.Size, "size", "s", 0, "`size` of message to exchange (default BW 65536, latency 2, atomic 8)")
	f.IntVarP(&c.Iters, "iters", "n", 0, "number of exchanges, at least 5 (default 1000, ib_write_bw 5000)")
	f.IntVarP(&duration, "duration", "D", 0, "run for `seconds` instead of -n (a progress line a second on stderr)")
	f.BoolVarP(&c.All, "all", "a", false, "run sizes from 2 till 2^23")
	f.BoolVarP(&c.Bidirectional, "bidirectional", "b", false, "measure bidirectional bandwidth (default unidirectional); BW tests only, on both sides")
	f.IntVarP(&c.GIDIndex, "gid-index", "x", -1, "use the GID with `index` (default: an IPv4 RoCE v2 GID, as perftest picks)")
	f.BoolVar(&c.IPv6, "ipv6", false, "pick an IPv6 GID when -x is not given")
	f.IntVarP(&mtu, "mtu", "m", 0, "path MTU: 256 - 4096 (0: the port's active MTU)")
	f.IntVarP(&c.NumQPs, "qp", "q", 1, "number of QPs, each driven by its own goroutine")
	f.IntVarP(&c.TxDepth, "tx-depth", "t", 0, "size of tx queue (default BW 128, latency 1)")
	f.IntVarP(&c.RxDepth, "rx-depth", "r", 0, "size of rx queue (default 512; SEND only)")
	f.IntVarP(&c.CQMod, "cq-mod", "Q", 0, "a CQE only every `n` completions (default 100)")
	f.IntVarP(&c.OutReads, "outs", "o", 0, "outstanding reads/atomics, READ and atomic only (0: the device maximum)")
	f.IntVarP(&c.QPTimeout, "qp-timeout", "u", 14, "QP timeout: 4.096 usec * 2^timeout (0: none)")
	f.StringVarP(&c.Connection, "connection", "c", "RC", "connection type RC, UC (write and send only) or UD (send only, messages up to the path MTU)")
	f.BoolVar(&c.ReportGbits, "report_gbits", false, "report BW in Gbit/sec instead of MiB/sec")
	f.BoolVarP(&c.Histogram, "report-histogram", "H", false, "print out all results (default print summary only); latency tests only, with -D too")
	f.BoolVarP(&c.Unsorted, "report-unsorted", "U", false, "(implies -H) print out unsorted results (default sorted); latency tests only, with -D too")
	f.BoolVar(&c.OutJSON, "out_json", false, "also write the report to a file in perftest's format")
	f.StringVar(&c.JSONFile, "out_json_file", "perftest_out.json", "the --out_json `file`")
	f.BoolVarP(&cpuFreq, "CPU-freq", "F", false, "accepted for perftest's command lines (no cpufreq check to silence)")
	f.BoolVarP(&rdmaCM, "rdma_cm", "R", false, "connect QPs with RDMA CM and exchange over RDMA CM (the server argument is then the peer's RoCE address)")
	f.IntVarP(&tos, "tos", "T", 0, "set `tos` (0-255) on the test's RDMA CM QPs, with -R only: the IP TOS of their packets both ways (the server's QPs take the client's)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	// perftest's -e, --events (its use_event); ib_write_* refuse it, in
	// perftest's words (Config.Validate). --use_event, the name of
	// perftest's field, is accepted too, unlisted.
	f.BoolVarP(&c.UseEvent, "events", "e", false, "sleep on CQ events (default poll); not with write or -D")
	f.BoolVar(&c.UseEvent, "use_event", false, "the same as --events")
	_ = f.MarkHidden("use_event")
	if name == "atomic" {
		f.StringVarP(&c.Atomic, "atomic_type", "A", "", "CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD)")
	}
	f.BoolVar(&noRelaxed, "disable_pcie_relaxed", false, "Disable PCIe relaxed ordering (the banner says OFF; goroce has no PCIe to order)")
	perfRanges(cmd)
	return cmd
}

// perfRanges are the values perf's numeric flags take: perftest 6.06's
// (perftest_parameters.h: MIN_ITER..MAX_ITER, MIN_TX..MAX_TX, ...) where
// goroce's device allows them, goroce's where it allows less (-s: max_msg_sz;
// -q: a goroutine per QP).
func perfRanges(cmd *cobra.Command) {
	dev, port := goroceLimits()
	flagRange(cmd, "ib-port", 1, 255, "IB Port", "(goroce devices have port 1)")
	flagRange(cmd, "port", 1, 65535, "Port", "")
	flagRange(cmd, "size", 1, int64(dev.MaxMsgSize), "Message Size", "(the device's max_msg_sz)")
	flagRange(cmd, "iters", 5, 100000000, "Iteration num", "")
	flagRange(cmd, "duration", 1, math.MaxInt32, "Duration period", "seconds")
	flagRange(cmd, "gid-index", 0, int64(port.GIDTableLen-1), "Gid index", "(roce gids shows which to use)")
	flagRange(cmd, "mtu", 0, 4096, "MTU", "bytes: 256, 512, 1024, 2048 or 4096 (0: the port's active MTU, as perftest)")
	flagRange(cmd, "qp", 1, 1024, "num of Qps", "")
	flagRange(cmd, "tx-depth", 1, 15000, "Tx depth", "")
	flagRange(cmd, "rx-depth", 1, 16384, "Rx depth", "")
	flagRange(cmd, "cq-mod", 1, 1024, "CQ moderation", "")
	flagRange(cmd, "outs", 0, math.MaxInt32, "Outstanding Reads", "(0: the device maximum, as perftest)")
	flagRange(cmd, "qp-timeout", 0, 31, "QP Timeout", "(4.096 usec * 2^timeout; 0: none, wait forever)")
	flagRange(cmd, "tos", 0, 255, "TOS", "")
}
