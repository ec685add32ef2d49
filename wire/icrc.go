package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The ICRC (IBTA Vol 1 §7.8.1; RoCE v1 Annex A16.8; RoCE v2 Annex A17.8) is
// the IEEE CRC-32 (the one zlib and hash/crc32 compute: reflected, initial
// value all ones, final complement) over the packet with its variant fields
// replaced by ones:
//
//   - 8 bytes of ones in place of the LRH, which RoCE does not carry;
//   - RoCE v2 over IPv4: the IPv4 header with TOS, TTL and header checksum
//     all ones (the Identification and the flags and fragment offset ARE
//     covered), then the UDP header with its checksum all ones;
//   - RoCE v2 over IPv6, and the GRH of RoCE v1: the header with traffic
//     class, flow label and hop limit all ones (then, for v2, UDP as above);
//   - the BTH with byte 4 (FECN, BECN, reserved) all ones;
//   - everything after the BTH up to the ICRC, pad bytes included.
//
// The result goes on the wire least-significant byte first. This is what
// Linux rxe computes (rxe_icrc.c) and what every packet in the lab's rxe
// traces carries.

// maxMaskedPrefix bounds the masked prefix: 8 + a 60-byte IPv4 header + 8 + 12.
const maxMaskedPrefix = 8 + 60 + UDPLen + BTHLen

// icrc computes the ICRC of pkt, which starts at the IP header (or GRH) of
// length nlen and ends just before the ICRC.
func icrc(pkt []byte, nlen int, ipVer uint8, v Version) uint32 {
	var buf [maxMaskedPrefix + 64]byte
	n := copy(buf[:8], ones8[:])
	n += copy(buf[n:], pkt[:nlen])
	net := buf[8 : 8+nlen]
	if ipVer == 4 {
		net[1] = 0xFF                 // TOS
		net[8] = 0xFF                 // TTL
		net[10], net[11] = 0xFF, 0xFF // header checksum
	} else {
		net[0] |= 0x0F                            // traffic class (high nibble) ...
		net[1], net[2], net[3] = 0xFF, 0xFF, 0xFF // ... traffic class (low nibble) and flow label
		net[7] = 0xFF                             // hop limit
	}
	rest := pkt[nlen:]
	if v == RoCEv2 {
		n += copy(buf[n:], rest[:UDPLen])
		buf[n-2], buf[n-1] = 0xFF, 0xFF // UDP checksum
		rest = rest[UDPLen:]
	}
	n += copy(buf[n:], rest[:BTHLen])
	buf[n-BTHLen+4] = 0xFF // BTH byte 4: FECN, BECN, resv6a
	rest = rest[BTHLen:]
	// hash/crc32 only uses its carry-less-multiply path on blocks of at least
	// 64 bytes, so top the masked prefix up to 64 bytes from the rest.
	if n < 64 {
		k := copy(buf[n:64], rest)
		n += k
		rest = rest[k:]
	}
	c := crc32.Update(0, crc32.IEEETable, buf[:n])
	return crc32.Update(c, crc32.IEEETable, rest)
}

var ones8 = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// putICRC writes crc at b[0:4], least-significant byte first.
func putICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }
