package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	demopkg "github.com/goroce/goroce/cmd/roce/internal/demo"
	"github.com/goroce/goroce/cmd/roce/internal/dissect"
	"github.com/goroce/goroce/link/pcap"
)

// demoPcap is a real capture of Linux Soft-RoCE running rping; see demo/README.md.
//
//go:embed demo/rping.pcap
var demoPcap []byte

// rpingIntro introduces the bundled capture (roce demo --rping).
const rpingIntro = `A real capture of Linux Soft-RoCE running rping, decoded by goroce's wire
layer, with every ICRC verified.

RoCE v2 (RDMA over Converged Ethernet, version 2) carries InfiniBand transport
packets in UDP datagrams to port 4791: a Base Transport Header (opcode,
destination queue pair "QP", packet sequence number "PSN"), extended headers
for RDMA (RETH: remote virtual address, key, length) and acknowledgements
(AETH), the payload, and a 32-bit invariant CRC (ICRC) over every field that
routers do not change.

The capture: two VMs running Linux Soft-RoCE (rdma_rxe), server 192.0.2.11
and client 192.0.2.12:
    server: rping -s -a 192.0.2.11 -v -C 10
    client: rping -c -a 192.0.2.11 -v -C 10
The client connects with RDMA CM: REQ, REP and RTU are management datagrams
(MADs) to QP 1. In each of 10 rounds the client SENDs its buffer's address and
key, the server RDMA READs the ping data from it and SENDs "go on", the client
SENDs the address of a second buffer, the server RDMA WRITEs the data there
and SENDs "done"; the receiver ACKs each message. DREQ and DREP disconnect.

`

// Lines of the short rping decode: the connection and round 1, then the disconnect.
const demoHead, demoTail = 15, 2

func newDemoCmd() *cobra.Command {
	var (
		rping, all bool
		pcapFile   string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run goroce end to end on loopback: RDMA CM, every operation, numbers, loss, a RoCE v1/v2 mismatch; start here",
		Long: `demo runs goroce's own RDMA engine in this one process, with no root, no setup
and no RDMA hardware: two soft RoCE devices on 127.0.0.1 and 127.0.0.2 (UDP
sockets: RoCE v2) connect with RDMA CM, then

  1. SEND, RDMA WRITE, RDMA READ, fetch-and-add and compare-and-swap, each
     with its data checked;
  2. RDMA WRITE bandwidth and SEND/RECV round-trip latency, measured (loopback
     numbers, not a network's);
  3. a 1 MiB transfer through 10% injected loss each way, checked, with the
     retransmissions it took from the devices' counters;
  4. a client port in RoCE v2 against a RoCE v1-only server, over the
     in-memory fabric (RoCE v1 on a real netdev needs root): the connect
     fails, goroce says why and what fixes it, the fix is applied through
     the rdma_cm config API and the connect succeeds.

It takes a few seconds and exits 0 when every check passes. --pcap writes the
RoCE v2 part's traffic for roce decode, tshark or Wireshark. --rping shows the
earlier demo instead: a real Linux rxe rping capture, decoded.`,
		Example: `  roce demo
  roce demo --pcap demo.pcap && roce decode demo.pcap
  roce demo --rping`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rping {
				return demo(cmd.OutOrStdout(), all)
			}
			if all {
				return usageError{fmt.Errorf("demo: --all goes with --rping")}
			}
			return demoRun(cmd, pcapFile)
		},
	}
	cmd.Flags().StringVar(&pcapFile, "pcap", "", "write the RoCE v2 part's traffic (connection, operations, loss) to `FILE`")
	cmd.Flags().BoolVar(&rping, "rping", false, "decode the bundled capture of Linux rxe running rping instead")
	cmd.Flags().BoolVar(&all, "all", false, "with --rping: print every packet, not just the first round and the disconnect")
	return cmd
}

// demoRun runs cmd/roce/internal/demo, writing the capture to pcapFile if set.
func demoRun(cmd *cobra.Command, pcapFile string) error {
	var o demopkg.Options
	var bw *bufio.Writer
	var f *os.File
	if pcapFile != "" {
		var err error
		if f, err = os.Create(pcapFile); err != nil {
			return opError("demo", err)
		}
		defer f.Close()
		bw = bufio.NewWriter(f)
		o.Pcap = bw
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	if err := demopkg.Run(ctx, cmd.OutOrStdout(), o); err != nil {
		return err
	}
	if f != nil {
		if err := bw.Flush(); err != nil {
			return opError("demo", err)
		}
		if err := f.Close(); err != nil {
			return opError("demo", err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Wrote %s: roce decode %s shows it.\n", pcapFile, pcapFile)
	}
	return nil
}

// demo decodes the bundled rping capture (roce demo --rping).
func demo(w io.Writer, all bool) error {
	var (
		lines []string
		probs []string
		stats dissect.Stats
		d     dissect.Decoder
		p     dissect.Packet
	)
	err := pcap.Read(bytes.NewReader(demoPcap), func(f pcap.Frame) error {
		err := d.Decode(f, &p)
		stats.Add(&p, err)
		var fe *dissect.FrameError
		switch {
		case errors.As(err, &fe):
			probs = append(probs, fe.Error())
		case err == nil:
			lines = append(lines, string(p.AppendLine(nil)))
			for _, s := range p.Problems() {
				probs = append(probs, fmt.Sprintf("frame %d: %s", p.Number, s))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("demo capture: %w", err)
	}
	var b strings.Builder
	b.WriteString(rpingIntro)
	if all || len(lines) <= demoHead+demoTail+1 {
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	} else {
		for _, l := range lines[:demoHead] {
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, "        … %d more packets: rounds 2 to 10 repeat round 1 (roce demo --rping --all shows them) …\n",
			len(lines)-demoHead-demoTail)
		for _, l := range lines[len(lines)-demoTail:] {
			b.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&b, "\nrping.pcap: %s.\n", stats.String())
	if stats.Failed() == 0 {
		fmt.Fprintf(&b, "Every ICRC goroce recomputed matches the one Linux rxe sent.\n")
	}
	b.WriteString(`
Next:
    go run ./cmd/roce decode -V cmd/roce/demo/rping.pcap   # every field of every packet
    go run ./cmd/roce decode --help                        # JSON output, --verify, more
`)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if len(probs) > 0 {
		return fmt.Errorf("demo capture failed verification:\n  %s", strings.Join(probs, "\n  "))
	}
	return nil
}
