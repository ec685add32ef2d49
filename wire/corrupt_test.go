package wire_test

// Single-bit corruption: the ICRC (IBTA Vol 1 §7.8.1, Annex A16.8, A17.8)
// covers every bit of the packet from the network header to the ICRC
// except the fields routers may change on the way, which it masks by
// design:
//
//	IPv4 (RoCE v2)        byte 1 TOS (DSCP+ECN), byte 8 TTL, bytes 10-11 header checksum
//	IPv6 (v2) / GRH (v1)  the traffic class (low nibble of byte 0, high nibble of byte 1),
//	                      the flow label (rest of bytes 1-3), byte 7 hop limit
//	UDP (RoCE v2)         bytes 6-7 checksum
//	BTH                   byte 4: FECN, BECN and the 6 reserved bits
//
// The Ethernet header (MACs, 802.1Q tag) and any Ethernet padding after
// the packet are outside the ICRC altogether: the Ethernet FCS covers them
// hop by hop. The IPv4 header checksum still covers TOS and TTL hop by hop,
// but this package does not verify it (a NIC or the kernel has).
//
// So: flipping any one bit that the ICRC covers must make ParseFrame fail
// or VerifyICRC fail; flipping a masked bit must leave the packet parsing
// and its ICRC verifying.

import (
	"fmt"
	"testing"

	"github.com/goroce/goroce/wire"
)

// maskedBits returns, for each byte of frame, the bits the ICRC masks,
// following the table above (independently of icrc.go).
func maskedBits(e encap, frame []byte) []byte {
	m := make([]byte, len(frame))
	nh := networkOffset(e)
	nlen := wire.IPv6Len
	if e.ipVer == 4 {
		nlen = int(frame[nh]&0xF) * 4
		m[nh+1], m[nh+8], m[nh+10], m[nh+11] = 0xFF, 0xFF, 0xFF, 0xFF
	} else {
		m[nh] = 0x0F
		m[nh+1], m[nh+2], m[nh+3], m[nh+7] = 0xFF, 0xFF, 0xFF, 0xFF
	}
	bth := nh + nlen
	if e.version == wire.RoCEv2 {
		m[nh+nlen+6], m[nh+nlen+7] = 0xFF, 0xFF
		bth += wire.UDPLen
	}
	m[bth+4] = 0xFF
	return m
}

func TestSingleBitCorruption(t *testing.T) {
	frames := 0
	for _, e := range encaps {
		for _, op := range validOpcodes() {
			payloads := [][]byte{defaultPayload(op)}
			if op.Info().FixedPayload < 0 {
				payloads = append(payloads, samplePayload(64))
			}
			for _, payload := range payloads {
				frame := encode(t, sampleFields(op, e, payload))
				frames++
				t.Run(fmt.Sprintf("%s/%v/%d", e.name, op, len(payload)), func(t *testing.T) {
					checkCorruption(t, e, frame)
				})
			}
		}
	}
	t.Logf("%d frames, every bit flipped", frames)
}

func checkCorruption(t *testing.T, e encap, frame []byte) {
	t.Helper()
	mask := maskedBits(e, frame)
	nh := networkOffset(e)
	b := append([]byte(nil), frame...)
	var p wire.Packet
	for i := range b {
		for bit := range 8 {
			flip := byte(1) << bit
			b[i] ^= flip
			err := p.ParseFrame(b, wire.RoCEv2Port)
			var icrcErr error
			if err == nil {
				icrcErr = p.VerifyICRC()
			}
			switch {
			case i < nh:
				// Ethernet: the addresses and the tag are not covered; the
				// (inner) Ethertype decides whether this is RoCE at all.
				covered := i < 12 || (e.vlan && (i == 14 || i == 15))
				if covered && (err != nil || icrcErr != nil) {
					t.Errorf("Ethernet byte %d bit %d: %v %v, want the packet unchanged", i, bit, err, icrcErr)
				}
				if !covered && err == nil {
					t.Errorf("Ethertype byte %d bit %d: parsed", i, bit)
				}
			case mask[i]&flip != 0:
				if err != nil || icrcErr != nil {
					t.Errorf("masked byte %d (network+%d) bit %d: parse %v, ICRC %v; want both fine", i, i-nh, bit, err, icrcErr)
				}
			default:
				if err == nil && icrcErr == nil {
					t.Errorf("byte %d (network+%d) bit %d: flipped, yet the packet parses and its ICRC verifies", i, i-nh, bit)
				}
			}
			b[i] ^= flip
		}
	}
}
