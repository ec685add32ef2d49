package dissect

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/goroce/goroce/wire"
)

// This file holds what roce decode --verify checks beyond a RoCE packet's
// ICRC and IPv4 header checksum (Packet.Problems):
//
//   - the UDP checksum of RoCE v2, when the packet carries one (rxe sends 0,
//     "none"; RFC 768, RFC 8200 §8.1);
//   - the BTH's reserved bits resv6a, which IBTA Vol 1 §9.2 has senders set to
//     0 and which the ICRC masks along with FECN and BECN;
//   - the IP header of every frame that is not RoCE (SkippedError): the
//     IPv4 header checksum, and an IP version that agrees with the Ethertype;
//   - frames that are not RoCE only because one of the fields that select
//     RoCE (Ethertype, IP version, IPv4 protocol or IPv6 next header, IPv4
//     fragment bits, UDP destination port) was corrupted: restoring that one
//     field gives a RoCE packet whose ICRC is right (CorruptedError).
//
// What no check can see is what changes in transit by design, and so is
// covered by nothing a capture holds: the Ethernet addresses and 802.1Q tag
// (the FCS, which covers them, is not captured), Ethernet padding, the
// IPv6 traffic class, flow label and hop limit (no IPv6 header checksum;
// the ICRC masks them), the same fields of RoCE v1's GRH, and the BTH's
// FECN and BECN bits (masked by the ICRC).

// SkippedError is a frame that is not RoCE (it wraps wire.ErrNotRoCE, so
// callers that count and skip such frames still do) but whose IP header is
// damaged: roce decode --verify reports it.
type SkippedError struct {
	Number  int
	Problem string // "IPv4 header checksum 0x1234, should be 0x5678"
}

func (e *SkippedError) Error() string {
	return "frame " + strconv.Itoa(e.Number) + ": " + e.Problem + " (not RoCE: skipped)"
}

func (e *SkippedError) Unwrap() error { return wire.ErrNotRoCE }

// CorruptedError is the reason of a FrameError for a frame that is not
// RoCE as captured, but becomes a RoCE packet with a valid ICRC when one
// field that selects RoCE is restored: that field was corrupted in transit
// (or in the capture). The ICRC is the proof: nothing else is guessed.
type CorruptedError struct {
	Field string // the field as captured: "UDP destination port"
	Got   string // its value as captured: "4727"
	Is    string // what the frame is with the field restored: "a RoCE v2 packet to port 4791"
}

func (e *CorruptedError) Error() string {
	return e.Field + " " + e.Got + ", but the frame is " + e.Is + " with a valid ICRC: corrupted in transit?"
}

// restoration is one field restored: the bits mask of the big-endian
// 16-bit word at off set to val.
type restoration struct {
	off       int
	mask, val uint16
	field     selector
	got, want uint16 // the field's value as captured and restored, as reported
}

// selector names the fields that decide whether a frame is RoCE.
type selector uint8

const (
	selEtherType selector = iota
	selVLAN               // an 802.1Q TPID that is no longer 0x8100
	selIPVersion
	selIPv4Protocol
	selIPv4Frag
	selIPv6NextHeader
	selUDPPort
)

// corrupted describes a restoration that proved right.
func (r *restoration) corrupted() *CorruptedError {
	e := &CorruptedError{Field: "Ethertype", Got: hex16(r.got)}
	switch r.field {
	case selEtherType:
		e.Is = etherTypeIs(r.want) + " (Ethertype " + hex16(r.want) + ")"
	case selVLAN:
		e.Is = etherTypeIs(r.want) + " with an 802.1Q tag (Ethertype 0x8100)"
	case selIPVersion:
		e.Field, e.Got = "IP version", strconv.Itoa(int(r.got))
		e.Is = "a RoCE v2 packet over IPv" + strconv.Itoa(int(r.want)) + " (version " + strconv.Itoa(int(r.want)) + ")"
	case selIPv4Protocol:
		e.Field, e.Got, e.Is = "IPv4 protocol", strconv.Itoa(int(r.got)), "a RoCE v2 packet (protocol 17, UDP)"
	case selIPv4Frag:
		e.Field, e.Is = "IPv4 flags and fragment offset", "an unfragmented RoCE v2 packet ("+hex16(r.want)+")"
	case selIPv6NextHeader:
		e.Field, e.Got, e.Is = "IPv6 next header", strconv.Itoa(int(r.got)), "a RoCE v2 packet (next header 17, UDP)"
	case selUDPPort:
		e.Field, e.Got = "UDP destination port", strconv.Itoa(int(r.got))
		e.Is = "a RoCE v2 packet to port " + strconv.Itoa(int(r.want))
	}
	return e
}

// maxRestoredPrefix bounds the headers restore looks at before it copies a
// whole frame: Ethernet with an 802.1Q tag, a 60-byte IPv4 header, UDP and
// the BTH.
const maxRestoredPrefix = wire.EthernetLen + wire.VLANTagLen + 60 + wire.UDPLen + wire.BTHLen

// restore looks for the one field whose corruption hides a RoCE packet in
// frame b, which did not parse as RoCE: it restores each field that selects
// RoCE and does not hold the value RoCE needs, and returns the first whose
// restoration makes b a RoCE packet with a valid ICRC, or nil.
//
// It is cheap for frames that are not RoCE: a restoration is tried on a
// copy of the headers first, and the frame is copied and its ICRC computed
// only when the headers then look like RoCE with a known opcode. It
// allocates nothing unless it finds one (or the frame is the longest yet).
func (d *Decoder) restore(b []byte, port uint16) *CorruptedError {
	var rs [8]restoration
	for _, r := range restorations(rs[:0], b, port) {
		var hdr [maxRestoredPrefix]byte
		h := hdr[:copy(hdr[:], b)]
		r.apply(h)
		if !bthPlausible(h, port) {
			continue
		}
		d.scratch = append(d.scratch[:0], b...)
		r.apply(d.scratch)
		var q wire.Packet
		if q.ParseFrame(d.scratch, port) != nil {
			continue
		}
		if want, err := q.ComputeICRC(); err == nil && want == q.ICRC() {
			return r.corrupted()
		}
	}
	return nil
}

func (r *restoration) apply(b []byte) {
	if r.off+2 > len(b) {
		return
	}
	w := binary.BigEndian.Uint16(b[r.off:])
	binary.BigEndian.PutUint16(b[r.off:], w&^r.mask|r.val&r.mask)
}

// isTPID reports whether t is a tag protocol identifier other than
// 802.1Q's: 802.1ad's service tag, or the vendor TPIDs before it. Frames
// behind one are not RoCE to goroce, and no restoration may take the tag
// for a corrupted Ethertype: the ICRC does not cover the Ethernet header,
// so a match after "restoring" it would prove nothing.
func isTPID(t uint16) bool {
	switch t {
	case 0x88A8, 0x9100, 0x9200, 0x9300:
		return true
	}
	return false
}

// restorations appends to rs the restorations worth trying on frame b.
func restorations(rs []restoration, b []byte, port uint16) []restoration {
	if len(b) < wire.EthernetLen {
		return rs
	}
	tagged := be16(b[12:]) == wire.EtherTypeVLAN && len(b) >= wire.EthernetLen+wire.VLANTagLen
	// The Ethertype, from what follows it. Untagged frames have it at 12;
	// tagged ones at 16, but a corrupted Ethertype may also look like a tag.
	for _, at := range [2]int{12, 16} {
		if at == 16 && !tagged {
			break
		}
		t := be16(b[at:])
		if isTPID(t) {
			continue // a real tag goroce does not parse (802.1ad...), not a corrupted Ethertype
		}
		if g := etherTypeOf(b[at+2:]); g != 0 && g != t {
			rs = append(rs, restoration{off: at, mask: 0xFFFF, val: g, field: selEtherType, got: t, want: g})
		}
	}
	// A corrupted 802.1Q TPID: an Ethertype RoCE uses where the tag's
	// inner Ethertype would be, and what it announces after it.
	if !tagged && !isTPID(be16(b[12:])) && len(b) >= wire.EthernetLen+wire.VLANTagLen {
		if inner := be16(b[16:]); inner != 0 && etherTypeOf(b[18:]) == inner {
			rs = append(rs, restoration{off: 12, mask: 0xFFFF, val: wire.EtherTypeVLAN, field: selVLAN, got: be16(b[12:]), want: inner})
		}
	}
	n := wire.EthernetLen
	if tagged {
		n += wire.VLANTagLen
	}
	ip := b[n:]
	switch be16(b[n-2:]) {
	case wire.EtherTypeIPv4:
		if len(ip) < wire.IPv4MinLen {
			return rs
		}
		if v := ip[0] >> 4; v != 4 {
			return append(rs, restoration{off: n, mask: 0xF000, val: 0x4000, field: selIPVersion, got: uint16(v), want: 4})
		}
		hl := int(ip[0]&0xF) * 4
		if hl < wire.IPv4MinLen || len(ip) < hl {
			return rs
		}
		if p := ip[9]; p != wire.IPProtocolUDP {
			rs = append(rs, restoration{off: n + 8, mask: 0x00FF, val: wire.IPProtocolUDP, field: selIPv4Protocol, got: uint16(p)})
		}
		// A fragment, or a first fragment: the header checksum gives the
		// flags and fragment offset the header was sent with.
		if frag := be16(ip[6:]); frag&0x3FFF != 0 {
			if w := solveIPv4Word(wire.IPv4(ip[:hl]), 6); w&0x3FFF == 0 {
				rs = append(rs, restoration{off: n + 6, mask: 0xFFFF, val: w, field: selIPv4Frag, got: frag, want: w})
			}
		}
		if len(ip) >= hl+4 {
			rs = appendPortRestoration(rs, n+hl+2, be16(ip[hl+2:]), port)
		}
	case wire.EtherTypeIPv6:
		if len(ip) < wire.IPv6Len {
			return rs
		}
		if v := ip[0] >> 4; v != 6 {
			return append(rs, restoration{off: n, mask: 0xF000, val: 0x6000, field: selIPVersion, got: uint16(v), want: 6})
		}
		if nh := ip[6]; nh != wire.IPProtocolUDP {
			rs = append(rs, restoration{off: n + 6, mask: 0xFF00, val: wire.IPProtocolUDP << 8, field: selIPv6NextHeader, got: uint16(nh)})
		}
		if len(ip) >= wire.IPv6Len+4 {
			rs = appendPortRestoration(rs, n+wire.IPv6Len+2, be16(ip[wire.IPv6Len+2:]), port)
		}
	}
	return rs
}

func appendPortRestoration(rs []restoration, off int, got, port uint16) []restoration {
	if got == port {
		return rs
	}
	return append(rs, restoration{off: off, mask: 0xFFFF, val: port, field: selUDPPort, got: got, want: port})
}

// etherTypeOf returns the Ethertype RoCE would carry the network header at
// the start of b under, by its version nibble (and, for version 6, its next
// header: the GRH of RoCE v1 announces the IBA transport, 0x1B), or 0.
func etherTypeOf(b []byte) uint16 {
	if len(b) < 1 {
		return 0
	}
	switch b[0] >> 4 {
	case 4:
		return wire.EtherTypeIPv4
	case 6:
		if len(b) > 6 && b[6] == wire.GRHNextHdrIBTH {
			return wire.EtherTypeRoCE
		}
		return wire.EtherTypeIPv6
	}
	return 0
}

func etherTypeIs(t uint16) string {
	switch t {
	case wire.EtherTypeIPv4:
		return "a RoCE v2 packet over IPv4"
	case wire.EtherTypeIPv6:
		return "a RoCE v2 packet over IPv6"
	}
	return "a RoCE v1 packet"
}

// bthPlausible reports whether the headers at the start of b look like
// RoCE and the BTH, if b holds it, has a known opcode and transport header
// version 0: a filter before the costlier parse and ICRC.
func bthPlausible(b []byte, port uint16) bool {
	at, ok := bthOffset(b, port)
	if !ok {
		return false
	}
	if at+2 > len(b) {
		return true // not in the prefix: let the parser decide
	}
	return wire.Opcode(b[at]).Valid() && b[at+1]&0x0F == 0
}

// solveIPv4Word returns the value of the 16-bit word at offset i of IPv4
// header h that makes its header checksum right: the one value the
// checksum allows if only that word was changed (RFC 1624's incremental
// update, solved for the old value). 0xFFFF, the other zero of ones'
// complement arithmetic, is returned as 0.
func solveIPv4Word(h wire.IPv4, i int) uint16 {
	// ^Checksum is the sum of every other word; take away all but word i.
	sum := uint32(^h.Checksum())
	for j := 0; j+1 < len(h); j += 2 {
		if j != 10 && j != i {
			sum += uint32(^be16(h[j:]))
		}
	}
	w := fold(sum)
	if w == 0xFFFF {
		w = 0
	}
	return w
}

// ipProblem returns what is wrong with the IP header of frame b, which is
// not RoCE, or "": an IPv4 header with a wrong checksum or a header length
// below 20, an IP version the Ethertype does not announce. complete is
// whether the capture kept the whole frame; a header the capture cut short
// is not a problem then.
func ipProblem(b []byte, complete bool) string {
	eth, err := wire.ParseEthernet(b)
	if err != nil {
		return ""
	}
	ip := b[len(eth):]
	switch t := eth.EtherType(); t {
	case wire.EtherTypeIPv4:
		if len(ip) < 1 {
			break
		}
		if v := ip[0] >> 4; v != 4 {
			return fmt.Sprintf("Ethertype 0x0800 (IPv4), but IP version %d", v)
		}
		hl := int(ip[0]&0xF) * 4
		switch {
		case hl < wire.IPv4MinLen:
			return fmt.Sprintf("IPv4 header length %d < 20", hl)
		case len(ip) < hl && complete:
			return fmt.Sprintf("IPv4 header of %d bytes, but the frame ends after %d", hl, len(ip))
		case len(ip) < hl:
			return ""
		}
		if h := wire.IPv4(ip[:hl]); h.Checksum() != h.ComputeChecksum() {
			return fmt.Sprintf("IPv4 header checksum 0x%04x, should be 0x%04x", h.Checksum(), h.ComputeChecksum())
		}
	case wire.EtherTypeIPv6:
		if len(ip) >= 1 && ip[0]>>4 != 6 {
			return fmt.Sprintf("Ethertype 0x86dd (IPv6), but IP version %d", ip[0]>>4)
		}
	}
	return ""
}

// udpVerdict is what a RoCE v2 packet's UDP checksum says.
type udpVerdict uint8

const (
	udpNone    udpVerdict = iota // 0: no checksum (as rxe sends), or no UDP header (RoCE v1)
	udpOK                        // the checksum is right
	udpPartial                   // the pseudo-header sum a sender with checksum offload leaves for the NIC
	udpWrong                     // neither
)

// checkUDP verifies p's UDP checksum (RFC 768; over IPv6, RFC 8200 §8.1)
// and returns the verdict and the checksum the datagram should carry.
//
// A capture taken on the sending host holds what the stack handed the NIC:
// with checksum offload (CHECKSUM_PARTIAL; goroce's UDP link with GSO,
// any UDP socket) the field holds the folded pseudo-header sum, which the
// NIC completes. That value is accepted, as it is what such a capture
// shows; a corruption that produces exactly it goes unseen (2⁻¹⁶).
func checkUDP(p *wire.Packet) (udpVerdict, uint16) {
	u := p.UDP()
	if u == nil || u.Checksum() == 0 {
		return udpNone, 0
	}
	var pseudo uint32
	if ip := p.IPv4(); ip != nil {
		pseudo = sum16(ip[12:20], 0) + wire.IPProtocolUDP + uint32(u.Length())
	} else if ip := p.IPv6(); ip != nil {
		pseudo = sum16(ip[8:40], 0) + wire.IPProtocolUDP + uint32(u.Length())
	} else {
		return udpNone, 0
	}
	s := sum16(u[:6], pseudo)
	s = sum16(p.Transport(), s) // the rest of the datagram: BTH through ICRC
	want := ^fold(s)
	if want == 0 {
		want = 0xFFFF // RFC 768: a computed 0 is sent as all ones
	}
	switch u.Checksum() {
	case want:
		return udpOK, want
	case fold(pseudo):
		return udpPartial, want
	}
	return udpWrong, want
}

// sum16 adds b to sum as big-endian 16-bit words (a last odd byte padded
// with a zero), RFC 1071's sum before folding.
func sum16(b []byte, sum uint32) uint32 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
		if sum >= 1<<31 {
			sum = sum>>16 + sum&0xFFFF
		}
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	return sum
}

// fold folds a 32-bit ones'-complement sum to 16 bits.
func fold(sum uint32) uint16 {
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

func hex16(v uint16) string { return fmt.Sprintf("0x%04x", v) }
