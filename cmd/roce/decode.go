package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/dissect"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

type decodeOptions struct {
	verbose bool
	json    bool
	verify  bool
	udpPort uint16
	ctx     context.Context // Ctrl-C stops the decoding between frames; nil: never
}

func newDecodeCmd() *cobra.Command {
	var o decodeOptions
	cmd := &cobra.Command{
		Use:   "decode [flags] FILE...",
		Short: "Decode RoCE v1/v2 packets in pcap/pcapng captures",
		Long: `decode prints one line per RoCE packet of each capture (pcap or pcapng,
Ethernet link type): frame number, seconds since the first frame, source →
destination (IP addresses for RoCE v2, GIDs for RoCE v1), RoCE version,
opcode, destination QP, PSN, AckReq, and what the extended headers say
(RETH address/key/length, ACK/NAK syndrome and MSN, ...). MADs to QP1 are
decoded: CM messages show their name, communication IDs and service ID.

RoCE v1 is Ethertype 0x8915; RoCE v2 is UDP to port 4791 (--udp-port).
Other frames (ARP, IGMP, neighbour discovery, other UDP) are counted and
skipped. A frame that looks like RoCE but does not parse is reported on
stderr as "FILE: frame N: reason", and so is a frame that is RoCE with a
valid ICRC once one corrupted field (Ethertype, IP version, IPv4 protocol
or fragment bits, IPv6 next header, UDP destination port) is restored.
After each capture a line on stderr counts its RoCE packets, ICRC
verdicts and skipped frames.

--verify checks every RoCE packet's ICRC, IPv4 header checksum, UDP
checksum (unless 0, none), BTH reserved bits (0) and MADs, and the IP
header of every other frame (IPv4 header checksum, IP version). What
changes in transit by design is covered by nothing a capture holds, so a
corruption there cannot be seen: Ethernet addresses, 802.1Q tag and
padding; IPv6 traffic class, flow label and hop limit (and those of RoCE
v1's GRH); the BTH's FECN and BECN bits.

Exit status: 0 on success; 1 if a file cannot be read or, with --verify,
if any frame is malformed or fails a check; 2 for a bad command line.`,
		Example: `  roce decode rping.pcap
  roce decode -V rping.pcap
  roce decode --json rping.pcap | jq -c 'select(.bth.opcode_name == "RC_ACKNOWLEDGE")'
  roce decode --verify --udp-port 4791 a.pcap b.pcapng`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.verbose && o.json {
				return usageError{errors.New("-V and --json are mutually exclusive")}
			}
			o.ctx = commandContext(cmd)
			return decodeFiles(args, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.verbose, "verbose", "V", false, "print every field of every layer")
	f.BoolVar(&o.json, "json", false, "print one compact JSON object per RoCE packet (JSON Lines); nothing else goes to stdout")
	f.BoolVar(&o.verify, "verify", false, "exit 1 if any frame is malformed or fails a check (ICRC, IPv4 and UDP checksums, BTH reserved bits, MAD); list each on stderr")
	f.Uint16Var(&o.udpPort, "udp-port", wire.RoCEv2Port, "UDP destination port of RoCE v2")
	flagRange(cmd, "udp-port", 1, 65535, "the UDP port", "")
	return cmd
}

// decodeFiles decodes each file in turn. It keeps going after a file that
// cannot be read, and returns an error if any could not be or, with
// --verify, if any frame failed.
func decodeFiles(files []string, o decodeOptions, stdout, stderr io.Writer) error {
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	// Keep stdout and stderr in order on a terminal: flush stdout before
	// every message to stderr.
	warn := func(format string, args ...any) {
		out.Flush()
		fmt.Fprintf(stderr, format, args...)
	}
	var unreadable, failedRoCE, failedOther int
	for i, path := range files {
		if len(files) > 1 && !o.json {
			if i > 0 {
				out.WriteByte('\n')
			}
			fmt.Fprintf(out, "==> %s <==\n", path)
		}
		stats, err := decodeFile(path, o, out, warn)
		if o.ctx != nil && o.ctx.Err() != nil {
			return err
		}
		if err != nil {
			warn("roce: %s: %v\n", path, err)
			unreadable++
			continue
		}
		warn("%s: %s\n", path, stats.String())
		failedOther += stats.OtherIPBad
		failedRoCE += stats.Failed() - stats.OtherIPBad
	}
	switch {
	case unreadable > 0:
		return fmt.Errorf("%d of %d files could not be read", unreadable, len(files))
	case o.verify && failedRoCE > 0 && failedOther > 0:
		return fmt.Errorf("verify: %s and %s failed", pluralFrames(failedRoCE, "RoCE frame"), pluralFrames(failedOther, "other frame"))
	case o.verify && failedRoCE > 0:
		return fmt.Errorf("verify: %s failed", pluralFrames(failedRoCE, "RoCE frame"))
	case o.verify && failedOther > 0:
		return fmt.Errorf("verify: %s failed", pluralFrames(failedOther, "other frame"))
	}
	return nil
}

// pluralFrames says "1 RoCE frame", "2 RoCE frames".
func pluralFrames(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// decodeFile decodes one capture, writing packets to out and problems to warn.
func decodeFile(path string, o decodeOptions, out *bufio.Writer, warn func(string, ...any)) (*dissect.Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeCapture(f, path, o, out, warn)
}

func decodeCapture(r io.Reader, name string, o decodeOptions, out *bufio.Writer, warn func(string, ...any)) (*dissect.Stats, error) {
	var (
		stats dissect.Stats
		d     = dissect.Decoder{UDPPort: o.udpPort}
		p     dissect.Packet
		buf   []byte
	)
	err := pcap.Read(r, func(f pcap.Frame) error {
		if o.ctx != nil && f.Number%256 == 0 && o.ctx.Err() != nil {
			return interruptedAfter(o.ctx, "after %d frames of %s", f.Number-1, name)
		}
		err := d.Decode(f, &p)
		stats.Add(&p, err)
		var (
			fe *dissect.FrameError
			se *dissect.SkippedError
		)
		switch {
		case errors.As(err, &fe):
			warn("%s: %v\n", name, fe)
			return nil
		case errors.As(err, &se): // not RoCE, with a damaged IP header
			if o.verify {
				warn("%s: %v\n", name, se)
			}
			return nil
		case err != nil: // not RoCE
			return nil
		}
		if o.verify {
			for _, prob := range p.Problems() {
				warn("%s: frame %d: %s\n", name, p.Number, prob)
			}
		}
		buf = buf[:0]
		switch {
		case o.json:
			buf = p.AppendJSON(buf, name)
			buf = append(buf, '\n')
		case o.verbose:
			buf = p.AppendVerbose(buf)
			buf = append(buf, '\n')
		default:
			buf = p.AppendLine(buf)
			buf = append(buf, '\n')
		}
		_, err = out.Write(buf)
		return err
	})
	return &stats, err
}
