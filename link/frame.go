package link

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/wire"
)

// FrameHeadroom is the room Encapsulate needs before a transport packet:
// Ethernet (14) + IPv6 or GRH (40) + UDP (8), rounded up.
const FrameHeadroom = 64

// ErrBadAddress is returned by Encapsulate for an Addr it cannot encode.
var ErrBadAddress = errors.New("unusable packet address")

// Encapsulate writes the Ethernet, IP/GRH and UDP headers for pkt in the
// headroom before pkt.Off, computes the ICRC into the last four bytes of the
// transport packet, and returns the whole frame (aliasing pkt.Buf). ipID is
// the IPv4 Identification to send (the ICRC covers it).
func Encapsulate(pkt *Packet, src, dst wire.MAC, ipID uint16) ([]byte, error) {
	a := &pkt.Addr
	if pkt.Len < wire.BTHLen+wire.ICRCLen || pkt.Off+pkt.Len > len(pkt.Buf) {
		return nil, fmt.Errorf("%w: transport packet of %d bytes", ErrBadAddress, pkt.Len)
	}
	hop := a.HopLimit
	if hop == 0 {
		hop = 64
	}
	var hl int
	var etype uint16
	v4 := false
	switch a.Version {
	case wire.RoCEv1:
		hl, etype = wire.EthernetLen+wire.GRHLen, wire.EtherTypeRoCE
	case wire.RoCEv2:
		if a.SrcGID.Is4In6() != a.DstGID.Is4In6() {
			return nil, fmt.Errorf("%w: source GID %v and destination GID %v are of different IP families", ErrBadAddress, a.SrcGID, a.DstGID)
		}
		if v4 = a.DstGID.Is4In6(); v4 {
			hl, etype = wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen, wire.EtherTypeIPv4
		} else {
			hl, etype = wire.EthernetLen+wire.IPv6Len+wire.UDPLen, wire.EtherTypeIPv6
		}
	default:
		return nil, fmt.Errorf("%w: RoCE version %v", ErrBadAddress, a.Version)
	}
	if pkt.Off < hl {
		return nil, fmt.Errorf("%w: headroom %d < %d", ErrBadAddress, pkt.Off, hl)
	}
	start := pkt.Off - hl
	h := pkt.Buf[start:pkt.Off]
	copy(h[0:6], dst[:])
	copy(h[6:12], src[:])
	binary.BigEndian.PutUint16(h[12:], etype)
	n := h[wire.EthernetLen:]

	switch {
	case v4:

		n[0], n[1] = 0x45, a.TrafficClass
		binary.BigEndian.PutUint16(n[2:], uint16(wire.IPv4MinLen+wire.UDPLen+pkt.Len))
		binary.BigEndian.PutUint16(n[4:], ipID)
		binary.BigEndian.PutUint16(n[6:], 0x4000) // DF, as rxe sends
		n[8], n[9] = hop, wire.IPProtocolUDP
		s, d := a.SrcGID.Unmap().As4(), a.DstGID.Unmap().As4()
		copy(n[12:16], s[:])
		copy(n[16:20], d[:])
		ip := wire.IPv4(n[:wire.IPv4MinLen])
		ip.SetChecksum(ip.ComputeChecksum())
		putUDP(n[wire.IPv4MinLen:], a.UDPSrcPort, pkt.Len+wire.UDPLen)
	default:
		next := uint8(wire.IPProtocolUDP)
		plen := pkt.Len + wire.UDPLen
		if a.Version == wire.RoCEv1 {
			next, plen = wire.GRHNextHdrIBTH, pkt.Len
		}

		binary.BigEndian.PutUint32(n, 6<<28|uint32(a.TrafficClass)<<20|a.FlowLabel&wire.FlowLabelMask)
		binary.BigEndian.PutUint16(n[4:], uint16(plen))
		n[6], n[7] = next, hop
		s, d := a.SrcGID.As16(), a.DstGID.As16()
		copy(n[8:24], s[:])
		copy(n[24:40], d[:])
		if a.Version == wire.RoCEv2 {
			putUDP(n[wire.IPv6Len:], a.UDPSrcPort, pkt.Len+wire.UDPLen)
		}
	}
	frame := pkt.Buf[start : pkt.Off+pkt.Len]
	// Compute the ICRC over the headers as sent.
	var p wire.Packet
	if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAddress, err)
	}
	c, err := p.ComputeICRC()
	if err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint32(frame[len(frame)-wire.ICRCLen:], c)
	return frame, nil
}

func putUDP(u []byte, sport uint16, length int) {
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], wire.RoCEv2Port)
	binary.BigEndian.PutUint16(u[4:], uint16(length))
	binary.BigEndian.PutUint16(u[6:], 0) // rxe sends checksum 0
}

// Decapsulate parses frame (which must lie in pkt.Buf), verifies its ICRC
// and sets pkt.Off, pkt.Len and pkt.Addr to the transport packet and its
// addressing. Errors: wire.ErrNotRoCE, a *wire.ParseError (malformed), or
// one wrapping wire.ErrBadICRC. p is scratch space, reused across calls.
func Decapsulate(frame []byte, pkt *Packet, p *wire.Packet) error {
	if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
		return err
	}
	if err := p.VerifyICRC(); err != nil {
		return err
	}
	a := &pkt.Addr
	*a = Addr{Version: p.Version}
	switch {
	case p.IPv4() != nil:
		ip := p.IPv4()
		a.SrcGID = netip.AddrFrom16(ip.Src().As16())
		a.DstGID = netip.AddrFrom16(ip.Dst().As16())
		a.TrafficClass, a.HopLimit = ip.TOS(), ip.TTL()
	default:
		ip := wire.IPv6(p.Network())
		a.SrcGID, a.DstGID = ip.Src(), ip.Dst()
		a.TrafficClass, a.FlowLabel, a.HopLimit = ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit()
	}
	if u := p.UDP(); u != nil {
		a.UDPSrcPort = u.SrcPort()
	}
	t := p.Transport()
	pkt.Off = cap(pkt.Buf[:0]) - cap(t) // offset of t within pkt.Buf
	pkt.Len = len(t)
	return nil
}
