package udp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// For packets with random IP IDs, the solver recovers the ID from the ICRC
// computed with ID 0, and rejects a packet corrupted elsewhere.
func TestIDSolver(t *testing.T) {
	var s idSolver
	for _, paylen := range []int{0, 5, 1024, 4096} {
		f := wire.PacketFields{Version: wire.RoCEv2,
			IPv4: &wire.IPv4Fields{Flags: 2, TTL: 64, Protocol: 17, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")},
			UDP:  wire.UDPFields{SrcPort: 50000, DstPort: 4791},
			BTH:  wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: 0xffff, DestQP: 17}, Payload: make([]byte, paylen)}
		for _, id := range []uint16{0, 1, 0x8000, 0x1234, 0xffff} {
			f.IPv4.ID = id
			pkt, err := f.Append(nil)
			if err != nil {
				t.Fatal(err)
			}
			rx := binary.LittleEndian.Uint32(pkt[len(pkt)-4:])
			binary.BigEndian.PutUint16(pkt[4:], 0)
			base := wire.ICRC(pkt[:len(pkt)-4], 20, wire.RoCEv2)
			b := s.basis(len(pkt) - 4 - 6)
			got, ok := b.solve(rx ^ base)
			if !ok || got != id {
				t.Errorf("payload %d id %#x: solved %#x ok=%v", paylen, id, got, ok)
			}
			pkt[30] ^= 0x10 // corrupt the BTH's P_Key
			bad := wire.ICRC(pkt[:len(pkt)-4], 20, wire.RoCEv2)
			if _, ok := b.solve(rx ^ bad); ok {
				// Possible with probability 2^-16; these fixed cases must not hit it.
				t.Errorf("payload %d id %#x: corruption accepted", paylen, id)
			}
		}
	}
}
