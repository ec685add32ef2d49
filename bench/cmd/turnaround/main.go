// Command turnaround splits a RoCE ping-pong's round trip (ib_send_lat,
// ibv_rc_pingpong, roce perf send --lat, udpfloor -lat) into each side's
// turnaround and the wire, from two packet captures, one taken on each
// side's interface (tcpdump -w; each side's own clock, so no figure mixes
// the two):
//
//	turnaround 192.0.2.11=vm1.pcap 192.0.2.12=vm2.pcap
//
// A side's turnaround is the time from a message's arrival from its peer
// to the side's next message's departure: its kernel's receive after the
// capture's tap, the program, and its send up to the tap. A side's round
// trip is the time between two of its messages' departures; less both
// sides' turnarounds (medians) it leaves the wire both ways: each kernel's
// driver, the link, and whatever carries it (in the lab, QEMU and the
// host's bridge). A message is a UDP datagram to or from -port carrying a
// BTH whose opcode is not an ACKNOWLEDGE or a CNP; its PSN says whether
// the capture missed one (tcpdump drops under load): a turnaround or round
// trip counts only between messages whose PSNs follow on.
//
// It prints each side's turnaround and round trip (median, quartiles and
// how many were counted) and the wire's time; -tsv prints one line for
// scripts (bench/vm.sh -c): the two sides' median turnarounds, the wire
// from the first side's round trip, and the counts, in µs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// BTH opcodes that are no message: RC ACKNOWLEDGE and CNP.
const (
	opAck = 0x11
	opCNP = 0x81
)

// msg is a message in a side's capture: when, out (sent by the side) or
// in, and its PSN.
type msg struct {
	t   time.Time
	out bool
	psn uint32
}

// side is one capture's analysis.
type side struct {
	addr             netip.Addr
	file             string
	turn, roundTrips []time.Duration
}

func main() {
	port := flag.Int("port", 4791, "the UDP `port` the messages go to or come from (udpfloor: 4792)")
	tsv := flag.Bool("tsv", false, "print one tab-separated line: turnaround of each side, the wire, the counts (µs)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: turnaround [-port N] [-tsv] ADDR=CAPTURE ADDR=CAPTURE\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 2 {
		flag.Usage()
		os.Exit(2)
	}
	var sides [2]*side
	for i, arg := range flag.Args() {
		a, file, ok := strings.Cut(arg, "=")
		addr, err := netip.ParseAddr(a)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "turnaround: %q: want ADDR=CAPTURE, ADDR the side's own IP address\n", arg)
			os.Exit(2)
		}
		f, err := os.Open(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, "turnaround:", err)
			os.Exit(1)
		}
		msgs, err := readMsgs(f, addr.Unmap(), uint16(*port))
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "turnaround: %s: %v\n", file, err)
			os.Exit(1)
		}
		s := &side{addr: addr.Unmap(), file: file}
		s.turn, s.roundTrips = analyse(msgs)
		if len(s.turn) == 0 || len(s.roundTrips) == 0 {
			fmt.Fprintf(os.Stderr, "turnaround: %s: no message of %v's answered one from its peer on UDP port %d (%d messages)\n", file, addr, *port, len(msgs))
			os.Exit(1)
		}
		sides[i] = s
	}
	report(os.Stdout, sides, *tsv)
}

// readMsgs reads the messages to and from addr in the capture r (pcap,
// Ethernet frames).
func readMsgs(r io.Reader, addr netip.Addr, port uint16) ([]msg, error) {
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not a pcap capture (tcpdump -w writes one): %w", err)
	}
	if pr.LinkType() != layers.LinkTypeEthernet {
		return nil, fmt.Errorf("link type %v: want Ethernet", pr.LinkType())
	}
	var (
		eth  layers.Ethernet
		ip4  layers.IPv4
		ip6  layers.IPv6
		udp  layers.UDP
		pay  gopacket.Payload
		dec  []gopacket.LayerType
		msgs []msg
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &ip6, &udp, &pay)
	parser.IgnoreUnsupported = true
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return msgs, nil
		}
		if err != nil {
			return msgs, err
		}
		if parser.DecodeLayers(data, &dec) != nil || !slices.Contains(dec, layers.LayerTypeUDP) {
			continue
		}
		var src, dst netip.Addr
		if slices.Contains(dec, layers.LayerTypeIPv4) {
			src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
			dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
		} else {
			src, _ = netip.AddrFromSlice(ip6.SrcIP)
			dst, _ = netip.AddrFromSlice(ip6.DstIP)
		}
		src, dst = src.Unmap(), dst.Unmap()
		p := udp.Payload
		if uint16(udp.DstPort) != port && uint16(udp.SrcPort) != port || len(p) < 12 || p[0] == opAck || p[0] == opCNP {
			continue
		}
		psn := uint32(p[9])<<16 | uint32(p[10])<<8 | uint32(p[11])
		switch {
		case src == addr:
			msgs = append(msgs, msg{ci.Timestamp, true, psn})
		case dst == addr:
			msgs = append(msgs, msg{ci.Timestamp, false, psn})
		}
	}
}

// analyse returns the side's turnarounds (an arrival to the next
// departure) and round trips (a departure to the next, one arrival
// between), each only where the PSNs say no message is missing.
func analyse(msgs []msg) (turn, rt []time.Duration) {
	var lastIn, lastOut *msg
	next := func(a, b uint32) bool { return (a+1)&0xFFFFFF == b }
	for i := range msgs {
		m := &msgs[i]
		if !m.out {
			if lastIn != nil && !next(lastIn.psn, m.psn) {
				lastOut = nil // a message of the peer's missing: start again
			}
			lastIn = m
			continue
		}
		if lastOut != nil && lastIn != nil && lastIn.t.After(lastOut.t) && next(lastOut.psn, m.psn) {
			rt = append(rt, m.t.Sub(lastOut.t))
		}
		if lastIn != nil && (lastOut == nil || lastIn.t.After(lastOut.t)) && (lastOut == nil || next(lastOut.psn, m.psn)) {
			turn = append(turn, m.t.Sub(lastIn.t))
		}
		lastOut = m
	}
	return turn, rt
}

// quart returns the 25th, 50th and 75th percentiles of d, sorting it.
func quart(d []time.Duration) (p25, p50, p75 float64) {
	slices.Sort(d)
	at := func(f float64) float64 { return float64(d[int(f*float64(len(d)-1)+0.5)]) / 1e3 }
	return at(0.25), at(0.5), at(0.75)
}

func report(w io.Writer, sides [2]*side, tsv bool) {
	// Each side's quartiles of its turnarounds (t) and round trips (r).
	var t, r [2][3]float64
	for i, s := range sides {
		t[i][0], t[i][1], t[i][2] = quart(s.turn)
		r[i][0], r[i][1], r[i][2] = quart(s.roundTrips)
	}
	wire := func(i int) float64 { return r[i][1] - t[0][1] - t[1][1] }
	if tsv {
		fmt.Fprintf(w, "%.1f\t%.1f\t%.1f\t%d\t%d\n", t[0][1], t[1][1], wire(0), len(sides[0].turn), len(sides[1].turn))
		return
	}
	for i, s := range sides {
		fmt.Fprintf(w, "%v (%s): turnaround %.1f µs [%.1f–%.1f] of %d; round trip %.1f µs [%.1f–%.1f] of %d\n",
			s.addr, s.file, t[i][1], t[i][0], t[i][2], len(s.turn), r[i][1], r[i][0], r[i][2], len(s.roundTrips))
	}
	fmt.Fprintf(w, "the wire, both ways (a side's round trip less both turnarounds, medians): %.1f µs from %v's, %.1f µs from %v's\n",
		wire(0), sides[0].addr, wire(1), sides[1].addr)
}
