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
// transport packet, and returns the whole frame (aliasing pkt.Buf; the ICRC
// is computed in place, so pkt.Buf must not be read meanwhile). ipID is
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
	// The headers, by wire's encoder: for RoCE v2 the IPv4 header (DF and
	// ipID, as rxe sends) or the IPv6 header, then UDP with checksum 0 as rxe
	// sends; for RoCE v1 the GRH (NxtHdr 0x1B, IBTA Vol 1 §8.3.1).
	h := wire.Headers{Version: a.Version, Eth: &wire.EthernetFields{Dst: dst, Src: src},
		UDP: wire.UDPFields{SrcPort: a.UDPSrcPort, DstPort: wire.RoCEv2Port}}
	hl := wire.EthernetLen
	switch a.Version {
	case wire.RoCEv1:
		h.GRH = &wire.GRHFields{TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, NextHeader: wire.GRHNextHdrIBTH,
			HopLimit: hop, Src: a.SrcGID, Dst: a.DstGID}
		hl += wire.GRHLen
	case wire.RoCEv2:
		if a.SrcGID.Is4In6() != a.DstGID.Is4In6() {
			return nil, fmt.Errorf("%w: source GID %v and destination GID %v are of different IP families", ErrBadAddress, a.SrcGID, a.DstGID)
		}
		if a.DstGID.Is4In6() {
			h.IPv4 = &wire.IPv4Fields{TOS: a.TrafficClass, ID: ipID, Flags: 2, TTL: hop, Protocol: wire.IPProtocolUDP,
				Src: a.SrcGID, Dst: a.DstGID}
			hl += wire.IPv4MinLen + wire.UDPLen
		} else {
			h.IPv6 = &wire.IPv6Fields{TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, NextHeader: wire.IPProtocolUDP,
				HopLimit: hop, Src: a.SrcGID, Dst: a.DstGID}
			hl += wire.IPv6Len + wire.UDPLen
		}
	default:
		return nil, fmt.Errorf("%w: RoCE version %v", ErrBadAddress, a.Version)
	}
	if pkt.Off < hl {
		return nil, fmt.Errorf("%w: headroom %d < %d", ErrBadAddress, pkt.Off, hl)
	}
	start := pkt.Off - hl
	_, nlen, err := h.Append(pkt.Buf[start:start], pkt.Len)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadAddress, err)
	}
	frame := pkt.Buf[start : pkt.Off+pkt.Len]
	// The ICRC over the headers as written, from what the encoder said of
	// them (the network header's place and length): no parse of the frame.
	icrc := len(frame) - wire.ICRCLen
	binary.LittleEndian.PutUint32(frame[icrc:], wire.ICRC(frame[wire.EthernetLen:icrc], nlen, a.Version))
	return frame, nil
}

// Decapsulate parses frame (which must lie in pkt.Buf) into pkt.Parsed,
// verifies its ICRC and sets pkt.Off, pkt.Len and pkt.Addr to the
// transport packet and its addressing. Errors: wire.ErrNotRoCE, a
// *wire.ParseError (malformed), or one wrapping wire.ErrBadICRC.
func Decapsulate(frame []byte, pkt *Packet) error {
	p := &pkt.Parsed
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
