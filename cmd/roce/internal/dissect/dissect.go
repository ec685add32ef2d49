// Package dissect turns parsed RoCE packets into what people read: a
// one-line summary in the spirit of tshark's, a tree of every field of every
// layer (roce decode -V) and a JSON object (roce decode --json).
//
// Parsing is wire's (wire.Packet.ParseFrame, the opcode table, the header
// views) and, for the management datagrams on QP1, wire/mad's; this package
// only names and formats what they decode, so it holds no offset tables of
// its own. The exception is verify.go, which knows where the few fields
// that select RoCE lie, to restore them in frames that did not parse as
// RoCE, and checks what the ICRC masks (the UDP checksum, BTH reserved
// bits). Output is byte-stable: the same frame always gives the same bytes.
package dissect

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// Decoder decodes the frames of one capture, in order. Times are relative
// to the capture's first frame, as tshark shows them, so Decode must see
// every frame, RoCE or not. The zero Decoder uses UDP port 4791.
type Decoder struct {
	// UDPPort is the UDP destination port of RoCE v2; 0 means 4791.
	UDPPort uint16

	first   time.Time
	begun   bool
	scratch []byte // a frame with one field restored (restore)
}

// Packet is one decoded RoCE frame. It aliases the frame's bytes and is
// valid only as long as they are.
type Packet struct {
	Number  int           // frame number in the capture, from 1
	Time    time.Duration // since the capture's first frame
	CapLen  int           // bytes captured
	WireLen int           // bytes on the wire
	wire.Packet

	// WantICRC is the ICRC computed over the packet's invariant fields.
	WantICRC uint32
	udp      udpVerdict // what the UDP checksum says
	wantUDP  uint16     // the UDP checksum the packet should carry, when it carries one
	mad      madDissection
}

// FrameError is a frame that looks like RoCE (Ethertype 0x8915, or UDP to
// the RoCE v2 port) but does not parse, or that becomes a RoCE packet with
// a valid ICRC when one field that selects RoCE is restored (its Err is
// then a *CorruptedError).
type FrameError struct {
	Number int
	Err    error
}

func (e *FrameError) Error() string { return "frame " + strconv.Itoa(e.Number) + ": " + e.Err.Error() }
func (e *FrameError) Unwrap() error { return e.Err }

// Decode parses frame f into p. It returns nil for a RoCE packet; an error
// that is wire.ErrNotRoCE, or a *SkippedError wrapping it, for frames that
// are not RoCE (ARP, IGMP, neighbour discovery, other UDP, ...); and a
// *FrameError for frames that look like RoCE but are malformed or that
// are RoCE packets with a corrupted Ethertype, IP version, IPv4 protocol
// or fragment bits, IPv6 next header or UDP destination port (see
// CorruptedError). A SkippedError is a frame that is not RoCE with a
// damaged IP header. An ICRC that does not match is not an error here (see
// Packet.Problems).
func (d *Decoder) Decode(f pcap.Frame, p *Packet) error {
	if !d.begun {
		d.first, d.begun = f.Time, true
	}
	port := d.UDPPort
	if port == 0 {
		port = wire.RoCEv2Port
	}
	*p = Packet{Number: f.Number, Time: f.Time.Sub(d.first), CapLen: len(f.Data), WireLen: f.OrigLen}
	err := p.ParseFrame(f.Data, port)
	if err != nil {
		if errors.Is(err, wire.ErrNotRoCE) || !looksLikeRoCE(f.Data, port) {
			if ce := d.restore(f.Data, port); ce != nil {
				return &FrameError{Number: f.Number, Err: ce}
			}
			if prob := ipProblem(f.Data, len(f.Data) >= f.OrigLen); prob != "" {
				return &SkippedError{Number: f.Number, Problem: prob}
			}
			return wire.ErrNotRoCE
		}
		if len(f.Data) < f.OrigLen {
			err = fmt.Errorf("%w (the capture kept %d of the frame's %d bytes)", err, len(f.Data), f.OrigLen)
		}
		return &FrameError{Number: f.Number, Err: err}
	}
	want, err := p.ComputeICRC()
	if err != nil { // cannot happen for a whole frame: it has its network header
		return &FrameError{Number: f.Number, Err: err}
	}
	p.WantICRC = want
	p.udp, p.wantUDP = checkUDP(&p.Packet)
	if isGSI(&p.Packet) {
		p.mad = dissectMAD(p.Payload())
	}
	return nil
}

// looksLikeRoCE reports whether a frame that failed to parse was meant to be
// RoCE: Ethertype 0x8915, or IPv4/IPv6 carrying UDP to the RoCE v2 port.
// Other malformed frames (a truncated TCP segment, say) are not RoCE's
// business and are skipped like any other non-RoCE frame.
func looksLikeRoCE(b []byte, port uint16) bool {
	_, ok := bthOffset(b, port)
	return ok
}

// bthOffset returns where the BTH of frame b would start and whether b
// looks like RoCE (see looksLikeRoCE), looking only at the headers before
// the BTH.
func bthOffset(b []byte, port uint16) (int, bool) {
	eth, err := wire.ParseEthernet(b)
	if err != nil {
		return 0, false
	}
	n := len(eth)
	rest := b[n:]
	switch eth.EtherType() {
	case wire.EtherTypeRoCE:
		return n + wire.GRHLen, true
	case wire.EtherTypeIPv4:
		if len(rest) < wire.IPv4MinLen || rest[0]>>4 != 4 {
			return 0, false
		}
		ip := wire.IPv4(rest)
		hl := ip.HeaderLen()
		if ip.Protocol() != wire.IPProtocolUDP || ip.FragOffset() != 0 || len(rest) < hl+4 {
			return 0, false
		}
		return n + hl + wire.UDPLen, wire.UDP(rest[hl:]).DstPort() == port
	case wire.EtherTypeIPv6:
		if len(rest) < wire.IPv6Len+4 || rest[0]>>4 != 6 {
			return 0, false
		}
		ok := wire.IPv6(rest).NextHeader() == wire.IPProtocolUDP && wire.UDP(rest[wire.IPv6Len:]).DstPort() == port
		return n + wire.IPv6Len + wire.UDPLen, ok
	}
	return 0, false
}

// isGSI reports whether the packet is a management datagram for QP1, the
// General Services Interface (IBTA Vol 1 §13.5): a UD packet to QP1. This is
// how rdma_cm's CM messages travel on RoCE.
func isGSI(p *wire.Packet) bool {
	return p.DETH() != nil && p.BTH().DestQP() == 1
}

// ICRCOK reports whether the packet carries the ICRC its invariant fields give.
func (p *Packet) ICRCOK() bool { return p.ICRC() == p.WantICRC }

// Problems lists what is wrong with a packet that parsed: an ICRC that does
// not match, a wrong IPv4 header checksum, a wrong UDP checksum, BTH
// reserved bits that are not 0, a malformed management datagram.
// roce decode --verify fails on any.
func (p *Packet) Problems() []string {
	var probs []string
	if !p.ICRCOK() {
		// In wire byte order, as -V and Wireshark show it.
		probs = append(probs, fmt.Sprintf("ICRC mismatch: packet carries 0x%08x, should be 0x%08x",
			bits.ReverseBytes32(p.ICRC()), bits.ReverseBytes32(p.WantICRC)))
	}
	if ip := p.IPv4(); ip != nil && ip.Checksum() != ip.ComputeChecksum() {
		probs = append(probs, fmt.Sprintf("IPv4 header checksum 0x%04x, should be 0x%04x", ip.Checksum(), ip.ComputeChecksum()))
	}
	if p.udp == udpWrong {
		probs = append(probs, fmt.Sprintf("UDP checksum 0x%04x, should be 0x%04x (or 0, none)", p.UDP().Checksum(), p.wantUDP))
	}
	// IBTA Vol 1 §9.2: reserved, sent as 0. The ICRC masks the byte (for
	// FECN and BECN, which switches set), so nothing else would notice.
	if r := p.BTH().Resv6a(); r != 0 {
		probs = append(probs, fmt.Sprintf("BTH reserved bits (resv6a) 0x%02x, should be 0", r))
	}
	if p.mad.err != nil {
		probs = append(probs, "MAD: "+p.mad.err.Error())
	}
	return probs
}

// Src and Dst return the packet's source and destination: IP addresses for
// RoCE v2, GIDs (written as IPv6 addresses) for RoCE v1.
func (p *Packet) Src() netip.Addr { return p.addrs(true) }

// Dst returns the destination address or GID; see Src.
func (p *Packet) Dst() netip.Addr { return p.addrs(false) }

func (p *Packet) addrs(src bool) netip.Addr {
	if ip := p.IPv4(); ip != nil {
		if src {
			return ip.Src()
		}
		return ip.Dst()
	}
	var h wire.IPv6
	if h = p.IPv6(); h == nil {
		h = p.GRH()
	}
	if h == nil {
		return netip.Addr{}
	}
	if src {
		return h.Src()
	}
	return h.Dst()
}

// Tree returns every field of every layer, outermost first: Ethernet (and
// 802.1Q), IPv4/IPv6 or GRH, UDP, BTH, each extended header the opcode
// carries, the MAD header and CM message on QP1, payload, pad, ICRC and any
// Ethernet trailer.
func (p *Packet) Tree() []Node {
	var nodes []Node
	if e := p.Ethernet(); e != nil {
		nodes = append(nodes, ethernetNode(e))
	}
	switch {
	case p.IPv4() != nil:
		nodes = append(nodes, ipv4Node(p.IPv4()))
	case p.IPv6() != nil:
		nodes = append(nodes, ipv6Node(p.IPv6(), false))
	case p.GRH() != nil:
		nodes = append(nodes, ipv6Node(p.GRH(), true))
	}
	if u := p.UDP(); u != nil {
		nodes = append(nodes, udpNode(u, p.udp, p.wantUDP))
	}
	nodes = append(nodes, bthNode(p.BTH()))
	nodes = append(nodes, extNodes(&p.Packet)...)
	payload := p.Payload()
	nodes = append(nodes, field("Payload Length", "payload_len", Uint(uint64(len(payload)), 32)))
	if len(p.mad.nodes) > 0 {
		nodes = append(nodes, p.mad.nodes...)
	} else if len(payload) > 0 {
		nodes = append(nodes, field("Payload", "payload", Bytes(payload)))
	}
	nodes = append(nodes,
		field("Pad", "pad", Bytes(p.Pad())),
		icrcNode(p.ICRC(), p.WantICRC))
	if t := p.Trailer(); len(t) > 0 {
		nodes = append(nodes, field("Ethernet Trailer", "trailer", Bytes(t)))
	}
	uniqueKeys(nodes, false)
	return nodes
}

// AppendVerbose appends the -V dissection of p: a frame line, then the tree.
func (p *Packet) AppendVerbose(b []byte) []byte {
	b = append(b, "Frame "...)
	b = strconv.AppendInt(b, int64(p.Number), 10)
	b = append(b, ": "...)
	b = append(b, plural(p.WireLen, "byte", "bytes")...)
	b = append(b, " on wire, "...)
	b = strconv.AppendInt(b, int64(p.CapLen), 10)
	b = append(b, " captured, "...)
	b = appendSeconds(b, p.Time)
	b = append(b, " s, "...)
	b = append(b, p.Version.String()...)
	b = append(b, '\n')
	return AppendTree(b, p.Tree(), 1)
}

// AppendJSON appends p as one compact JSON object (no newline). file names
// the capture it came from.
func (p *Packet) AppendJSON(b []byte, file string) []byte {
	b = append(b, `{"file":`...)
	b = appendJSONString(b, file)
	b = append(b, `,"frame":`...)
	b = strconv.AppendInt(b, int64(p.Number), 10)
	b = append(b, `,"time":`...)
	b = appendSeconds(b, p.Time)
	b = append(b, `,"len":`...)
	b = strconv.AppendInt(b, int64(p.WireLen), 10)
	b = append(b, `,"caplen":`...)
	b = strconv.AppendInt(b, int64(p.CapLen), 10)
	b = append(b, `,"version":`...)
	b = appendJSONString(b, p.Version.String())
	b = append(b, `,"src":`...)
	b = appendJSONString(b, p.Src().String())
	b = append(b, `,"dst":`...)
	b = appendJSONString(b, p.Dst().String())
	b = append(b, `,"info":`...)
	b = appendJSONString(b, p.Summary())
	b = append(b, `,"icrc_ok":`...)
	b = strconv.AppendBool(b, p.ICRCOK())
	b = append(b, `,"problems":[`...)
	for i, s := range p.Problems() {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	b = append(b, "],"...)
	b = appendJSONMembers(b, p.Tree(), true)
	return append(b, '}')
}

// appendSeconds appends d in seconds with six decimals, as tshark shows
// relative times ("0.029491").
func appendSeconds(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, d.Seconds(), 'f', 6, 64)
}
