package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link/pcap"
)

// captureDrainTimeout bounds the wait, after a capture is told to stop,
// for what the owner still has queued and its final statistics.
const captureDrainTimeout = 5 * time.Second

func newCaptureCmd() *cobra.Command {
	var (
		dev, file string
		count     int
	)
	cmd := &cobra.Command{
		Use:   "capture -d DEV -w FILE [-c COUNT]",
		Short: "write a running device's packets to a pcap file, as tcpdump -w does",
		Long: `capture asks the process running device DEV, over its control socket, for
every packet the device sends and receives, and writes them to FILE as pcap
('-' is stdout), which tshark, Wireshark and 'roce decode' read. The
device keeps running; several captures may run at once.

It stops after COUNT packets (-c), or on Ctrl-C or SIGTERM, and says how
many packets it captured and how many the device dropped because the
capture did not keep up with it.

Frames are rebuilt from what the device sends and receives, as --pcap's
are: MAC addresses are derived from the GIDs and the ICRC is recomputed.`,
		Example: `  roce capture -d rxe0 -w rxe0.pcap
  roce capture -d rxe0 -w - -c 100 | tshark -r -`,
		Args: argsWithFix(cobra.NoArgs, "the device goes with -d and the file with -w: roce capture -d DEV -w FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dev == "" {
				return usageError{errors.New("-d DEV is required")}
			}
			if file == "" {
				return usageError{errors.New("-w FILE is required ('-' for stdout)")}
			}
			return captureRun(cmd, dev, file, count)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&dev, "ib-dev", "d", "", "capture on device `DEV`")
	f.StringVarP(&file, "write", "w", "", "write the packets to `FILE` as pcap ('-': stdout)")
	f.IntVarP(&count, "count", "c", 0, "stop after `COUNT` packets (default: until interrupted)")
	// tcpdump -c 0 is "invalid packet count" too.
	flagRange(cmd, "count", 1, math.MaxInt32, "the packet count", "(omit -c to capture until interrupted)")
	return cmd
}

func captureRun(cmd *cobra.Command, name, file string, count int) error {
	reg, dir := registryOf(cmd)
	if _, err := getDevice(reg, dir, "capture", name); err != nil {
		return err
	}
	ctx := commandContext(cmd)
	dctx, cancel := context.WithTimeout(ctx, controlTimeout)
	s, err := reg.Capture(dctx, name)
	cancel()
	if errors.Is(err, host.ErrNotRunning) {
		return opError("capture", fmt.Errorf("%s is not open by any process, so nothing moves on it: run the program that uses it first (roce pingpong -d %s ...)", name, name))
	}
	if err != nil {
		return opError("capture", err)
	}
	defer s.Close()

	var out io.Writer
	var closeOut func() error
	if file == "-" {
		bw := bufio.NewWriter(cmd.OutOrStdout())
		out, closeOut = bw, bw.Flush
	} else {
		f, err := os.Create(file)
		if err != nil {
			return opError("capture", err)
		}
		bw := bufio.NewWriterSize(f, 1<<16)
		out = bw
		closeOut = func() error {
			err := bw.Flush()
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}
	}
	w, err := pcap.NewWriter(out)
	if err != nil {
		closeOut()
		return opError("capture", err)
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "roce: capture: listening on %s, link-type EN10MB (Ethernet), snapshot length %d bytes\n", name, pcap.SnapLen)

	var (
		captured, received atomic.Uint64
		dropped            atomic.Uint64
		gotStats           atomic.Bool
	)
	full := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		opts := pcapgo.DefaultNgReaderOptions
		opts.StatisticsCallback = func(_ int, st pcapgo.NgInterfaceStatistics) {
			if st.PacketsDropped != pcapgo.NgNoValue64 {
				dropped.Store(st.PacketsDropped)
			}
			gotStats.Store(true)
		}
		ng, err := pcapgo.NewNgReader(s, opts)
		if err != nil {
			done <- err
			return
		}
		for {
			data, ci, err := ng.ReadPacketData()
			if err != nil {
				// EOF ends the stream; an abrupt end (the owner exited
				// mid-block, or the drain deadline passed) ends it too, and
				// what was written stays a valid file.
				if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) {
					err = nil
				}
				done <- err
				return
			}
			received.Add(1)
			if count > 0 && captured.Load() >= uint64(count) {
				continue // draining after -c; counted, not written
			}
			if err := w.WritePacket(ci.Timestamp, data); err != nil {
				done <- err
				return
			}
			if n := captured.Add(1); count > 0 && n == uint64(count) {
				close(full)
			}
		}
	}()

	var rerr error
	ended := false
	select {
	case <-ctx.Done():
	case <-full:
	case rerr = <-done:
		ended = true
	}
	if !ended {
		// Ask the owner to finish: it sends what it queued, the statistics, EOF.
		s.Stop()
		s.SetReadDeadline(time.Now().Add(captureDrainTimeout))
		rerr = <-done
	}
	if err := closeOut(); err != nil && rerr == nil {
		rerr = err
	}
	fmt.Fprintf(stderr, "%d packets captured\n", captured.Load())
	fmt.Fprintf(stderr, "%d packets received by capture\n", received.Load()+dropped.Load())
	fmt.Fprintf(stderr, "%d packets dropped by %s (the capture did not keep up)\n", dropped.Load(), name)
	if rerr != nil {
		return opError("capture", rerr)
	}
	if ended && !gotStats.Load() {
		fmt.Fprintf(stderr, "roce: capture: %s stopped running; the capture ended with it\n", name)
	}
	if ctx.Err() != nil {
		return interruptedAfter(ctx, "after capturing %d packets", captured.Load())
	}
	return nil
}
