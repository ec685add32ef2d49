package link

import (
	"encoding/binary"
	"errors"

	"github.com/goroce/goroce/wire"
)

// A UDP GSO superpacket is one frame carrying several RoCE v2 packets of
// one size (the last may be shorter) behind a single set of Ethernet, IP
// and UDP headers whose lengths cover them all. A sender's UDP socket makes
// one with UDP_SEGMENT (link/udp does, Linux ≥ 4.18) and the kernel cuts it
// into datagrams where it leaves the host, but a veth (and a router between
// veths) hands it over whole, and so does GRO on a receive path. A packet
// socket reading the netdev sees the superpacket: the kernel gives the
// segment size in a virtio-net header (PACKET_VNET_HDR) on Linux ≥ 6.2 and
// refuses the packet on older kernels (virtio_net_hdr_from_skb knows no
// SKB_GSO_UDP_L4: recvmsg returns EINVAL), while a socket without the
// header reads it whole with no size at all. Superpacket splits it as the
// kernel's segmentation would have (__udp_gso_segment, inet_gso_segment):
// each segment gets the headers with its own lengths and, over IPv4, the
// Identification of the first plus its index.

// Superpacket is a received UDP frame (Ethernet header first) that may hold
// several RoCE v2 packets.
type Superpacket struct {
	Frame   []byte
	ipOff   int // offset of the IP header
	udpOff  int // offset of the UDP header
	v4      bool
	id0     uint16
	payload []byte
}

// ErrNotUDP is ParseSuperpacket's error for a frame that is not IPv4 or
// IPv6 UDP without options it could copy.
var ErrNotUDP = errors.New("not a UDP frame")

// ParseSuperpacket reads frame's Ethernet, IP and UDP headers. The IP
// length field may disagree with the frame's length (a superpacket's says
// the whole, or says nothing useful): the payload is the frame's rest,
// bounded by the IP length when that is smaller (Ethernet padding).
func ParseSuperpacket(frame []byte) (Superpacket, error) {
	sp := Superpacket{Frame: frame, ipOff: wire.EthernetLen}
	if len(frame) < wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen {
		return sp, ErrNotUDP
	}
	ip := frame[wire.EthernetLen:]
	end := len(frame)
	switch binary.BigEndian.Uint16(frame[12:]) {
	case wire.EtherTypeIPv4:
		ihl := int(ip[0]&0xf) * 4
		if ip[0]>>4 != 4 || ihl < wire.IPv4MinLen || ip[9] != wire.IPProtocolUDP || len(ip) < ihl+wire.UDPLen {
			return sp, ErrNotUDP
		}
		sp.v4, sp.id0 = true, binary.BigEndian.Uint16(ip[4:])
		sp.udpOff = sp.ipOff + ihl
		if tl := int(binary.BigEndian.Uint16(ip[2:])); tl >= ihl+wire.UDPLen && sp.ipOff+tl < end {
			end = sp.ipOff + tl
		}
	case wire.EtherTypeIPv6:
		if ip[0]>>4 != 6 || len(ip) < wire.IPv6Len+wire.UDPLen || ip[6] != wire.IPProtocolUDP {
			return sp, ErrNotUDP
		}
		sp.udpOff = sp.ipOff + wire.IPv6Len
		if pl := int(binary.BigEndian.Uint16(ip[4:])); pl >= wire.UDPLen && sp.udpOff+pl < end {
			end = sp.udpOff + pl
		}
	default:
		return sp, ErrNotUDP
	}
	sp.payload = frame[sp.udpOff+wire.UDPLen : end]
	return sp, nil
}

// PayloadLen is the length of all the segments together.
func (sp *Superpacket) PayloadLen() int { return len(sp.payload) }

// Segments is how many segments of segSize bytes the payload holds.
func (sp *Superpacket) Segments(segSize int) int {
	if segSize <= 0 || segSize >= len(sp.payload) {
		return 1
	}
	return (len(sp.payload) + segSize - 1) / segSize
}

// AppendSegment appends segment s of segSize bytes as a frame of its own:
// the superpacket's headers with this segment's lengths, and over IPv4 the
// Identification id0+s (fixedID: id0, for a sender that keeps the ID fixed
// across a GSO message), its header checksum recomputed.
func (sp *Superpacket) AppendSegment(dst []byte, segSize, s int, fixedID bool) []byte {
	if segSize <= 0 {
		segSize = len(sp.payload)
	}
	lo := s * segSize
	hi := min(lo+segSize, len(sp.payload))
	start := len(dst)
	dst = append(dst, sp.Frame[:sp.udpOff+wire.UDPLen]...)
	dst = append(dst, sp.payload[lo:hi]...)
	h := dst[start:]
	n := hi - lo
	ip := h[sp.ipOff:]
	if sp.v4 {
		ihl := sp.udpOff - sp.ipOff
		binary.BigEndian.PutUint16(ip[2:], uint16(ihl+wire.UDPLen+n))
		id := sp.id0
		if !fixedID {
			id += uint16(s)
		}
		binary.BigEndian.PutUint16(ip[4:], id)
		v4 := wire.IPv4(ip[:ihl])
		v4.SetChecksum(v4.ComputeChecksum())
	} else {
		binary.BigEndian.PutUint16(ip[4:], uint16(wire.UDPLen+n))
	}
	binary.BigEndian.PutUint16(h[sp.udpOff+4:], uint16(wire.UDPLen+n))
	return dst
}

// InferSegmentSize finds the segment size of a superpacket read without a
// virtio-net header, from what RoCE v2 packets are: every segment starts
// with a BTH (a known opcode, transport version 0, the first segment's
// P_Key, zero reserved bits), and the first segment's ICRC, over the
// headers it would have had on its own, verifies. The smallest size that
// passes wins: a CRC-32 match by chance is a 2^-32 event. scratch is
// reused (a frame's worth). It reports false when no size passes; a
// single packet (whose own ICRC verifies) is not a superpacket.
func (sp *Superpacket) InferSegmentSize(scratch []byte) (int, bool) {
	p := sp.payload
	if len(p) < 2*(wire.BTHLen+wire.ICRCLen) || !plausibleBTH(p, p) {
		return 0, false
	}
	var pkt wire.Packet
	for g := wire.BTHLen + wire.ICRCLen; g < len(p); g += 4 { // RoCE packets are 4-byte multiples (IBA 9.3: pad)
		k := (len(p) + g - 1) / g
		if len(p)-(k-1)*g < wire.BTHLen+wire.ICRCLen {
			continue
		}
		ok := true
		for s := 1; s < k && ok; s++ {
			ok = plausibleBTH(p[s*g:], p)
		}
		if !ok {
			continue
		}
		// Segment 0 carries the superpacket's own IPv4 ID either way.
		f := sp.AppendSegment(scratch[:0], g, 0, false)
		if pkt.ParseFrame(f, wire.RoCEv2Port) == nil && pkt.VerifyICRC() == nil {
			return g, true
		}
	}
	return 0, false
}

// plausibleBTH reports whether b starts with a BTH that could follow
// first's in one GSO message (IBA Vol 1 §9.2: BTH layout).
func plausibleBTH(b, first []byte) bool {
	if len(b) < wire.BTHLen+wire.ICRCLen {
		return false
	}
	op := wire.Opcode(b[0])
	return op.Valid() && b[1]&0x0f == 0 && b[2] == first[2] && b[3] == first[3] && b[8]&0x7f == 0 &&
		len(b) >= op.Info().HeaderLen+wire.ICRCLen
}
