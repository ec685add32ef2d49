package main

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/dissect"
)

// demoPcap is a real capture of Linux Soft-RoCE running rping; see demo/README.md.
//
//go:embed demo/rping.pcap
var demoPcap []byte

const demoIntro = `The loopback demo of goroce's own engine comes with RDMA CM; meanwhile, here is
a real Linux rxe capture of rping decoded by goroce's wire layer, with every
ICRC verified.

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

// Lines of the short demo: the connection and round 1, then the disconnect.
const demoHead, demoTail = 15, 2

func newDemoCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show a real Soft-RoCE exchange (rping) decoded by goroce; start here",
		Long: `demo decodes a real capture of Linux Soft-RoCE (rdma_rxe) running rping,
bundled in the binary: RDMA CM connection setup, SEND, RDMA READ, RDMA WRITE,
ACKs and disconnect, with every ICRC recomputed and checked. It needs no
root, no network and no RDMA hardware.

The loopback demo of goroce's own engine comes with RDMA CM; until then demo
shows this capture.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			return demo(cmd.OutOrStdout(), all)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "print every packet, not just the first round and the disconnect")
	return cmd
}

func demo(w io.Writer, all bool) error {
	var (
		lines []string
		probs []string
		stats dissect.Stats
		d     dissect.Decoder
		p     dissect.Packet
	)
	err := capture.Read(bytes.NewReader(demoPcap), func(f capture.Frame) error {
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
	b.WriteString(demoIntro)
	if all || len(lines) <= demoHead+demoTail+1 {
		for _, l := range lines {
			b.WriteString(l + "\n")
		}
	} else {
		for _, l := range lines[:demoHead] {
			b.WriteString(l + "\n")
		}
		fmt.Fprintf(&b, "        … %d more packets: rounds 2 to 10 repeat round 1 (roce demo --all shows them) …\n",
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
