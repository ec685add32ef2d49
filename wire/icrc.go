package wire

import (
	"encoding/binary"
	"hash/crc32"
	"runtime"
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

// maxMaskedPrefix bounds the headers the ICRC masks fields in: a 60-byte
// IPv4 header, UDP and the BTH.
const maxMaskedPrefix = 60 + UDPLen + BTHLen

// icrc computes the ICRC of pkt, which starts at the IP header (or GRH) of
// length nlen and ends just before the ICRC.
//
// The variant fields all lie in the network, UDP and BTH headers, the first
// 40 to 80 bytes (the masked prefix). icrc copies the prefix to a stack
// buffer, masks it there and runs it through its own slicing-by-8 loop
// (updateSlicing8), starting from the CRC of the 8 bytes of ones that stand
// for the LRH; then it hands the rest of the packet, in place, to
// updateIEEE in one call: crc32.Update, which uses the CPU's carry-less
// multiply (on amd64 and arm64; elsewhere hash/crc32's own slicing-by-8),
// or where that measured slower, slicing-by-16 (crcsel.go).
// Passing the stack buffer to crc32.Update instead would move it to the
// heap (hash/crc32 reaches its assembly through a function variable, which
// escape analysis cannot see through): an allocation per packet.
func icrc(pkt []byte, nlen int, ipVer uint8, v Version) uint32 {
	hdrs := nlen + BTHLen
	if v == RoCEv2 {
		hdrs += UDPLen
	}
	// Copy the prefix and up to 15 bytes more: as many as leave the rest a
	// multiple of 16 bytes long, for crc32.Update's carry-less multiply
	// works in 16-byte steps and does a shorter tail byte by byte.
	var buf [maxMaskedPrefix + 15]byte
	n := copy(buf[:hdrs+(len(pkt)-hdrs)&15], pkt)
	b := buf[:n]
	maskPrefix(b, nlen, hdrs-BTHLen, ipVer, v)
	return updateIEEE(updateSlicing8(icrcLRH, b), pkt[n:])
}

// maskPrefix sets the variant fields of b, a copy of a packet's network,
// UDP (RoCE v2) and base transport headers, to ones; the BTH starts at bth.
func maskPrefix(b []byte, nlen, bth int, ipVer uint8, v Version) {
	if ipVer == 4 {
		b[1] = 0xFF               // TOS
		b[8] = 0xFF               // TTL
		b[10], b[11] = 0xFF, 0xFF // header checksum
	} else {
		b[0] |= 0x0F                        // traffic class (high nibble) ...
		b[1], b[2], b[3] = 0xFF, 0xFF, 0xFF // ... traffic class (low nibble) and flow label
		b[7] = 0xFF                         // hop limit
	}
	if v == RoCEv2 {
		b[nlen+6], b[nlen+7] = 0xFF, 0xFF // UDP checksum
	}
	b[bth+4] = 0xFF // BTH byte 4: FECN, BECN, resv6a
}

// ICRCv2 computes the ICRC of a RoCE v2 packet from its headers apart: hdrs
// is the IP header (netLen bytes, IPv4 or IPv6) and the UDP header, t the
// transport packet from the BTH up to, not including, the ICRC. It is ICRC
// of the two laid end to end, for a link that has the headers elsewhere
// than before the transport packet (link/udp's receive ring), and writes
// neither. len(hdrs) is at most 68 (an IPv4 header with options and UDP).
func ICRCv2(hdrs []byte, netLen int, t []byte) uint32 {
	if len(hdrs) != netLen+UDPLen || len(hdrs) > maxMaskedPrefix-BTHLen || len(t) < BTHLen {
		panic("wire.ICRCv2: bad header lengths")
	}
	ipVer := uint8(6)
	if hdrs[0]>>4 == 4 {
		ipVer = 4
	}
	// As icrc: the headers, the BTH and as many bytes more as leave the
	// rest a multiple of 16 long go through the stack copy, in moves of
	// constant lengths where they can be (IP without options, the
	// transport's first 16 or 32 bytes): see CopyHeaders.
	var buf [maxMaskedPrefix - BTHLen + 32]byte
	h := CopyHeaders(buf[:], hdrs)
	k := BTHLen + (len(t)-BTHLen)&15
	switch {
	// buf has room for 32 bytes past h, at most maxMaskedPrefix-BTHLen;
	// the bytes past k are copied and left out of b. In 16-byte moves:
	// at a variable offset, a longer or odd one the compiler leaves to
	// memmove (go tool objdump).
	case len(t) >= 32:
		*(*[16]byte)(buf[h:]) = [16]byte(t)
		*(*[16]byte)(buf[h+16:]) = [16]byte(t[16:])
	case k <= 16 && len(t) >= 16: // an ACK: BTH and AETH
		*(*[16]byte)(buf[h:]) = [16]byte(t)
	default:
		copy(buf[h:h+k], t)
	}
	b := buf[:h+k]
	maskPrefix(b, netLen, h, ipVer, RoCEv2)
	crc := updateSlicing8(icrcLRH, b)
	if len(t) == k {
		return crc
	}
	return updateIEEE(crc, t[k:])
}

// icrcInPlace computes the same ICRC as icrc, for callers that own pkt: it
// writes the masks into pkt's variant fields, runs the whole packet through
// updateIEEE in one call (hash/crc32's carry-less-multiply path end to end,
// from 64 bytes), and puts the fields back. pkt must not be read or written concurrently.
func icrcInPlace(pkt []byte, nlen int, ipVer uint8, v Version) uint32 {
	off := nlen
	if v == RoCEv2 {
		off += UDPLen
	}
	_ = pkt[off+BTHLen-1]
	bth4 := pkt[off+4]
	pkt[off+4] = 0xFF // BTH byte 4: FECN, BECN, resv6a
	var c uint32
	if ipVer == 4 {
		tos, ttl, sum := pkt[1], pkt[8], binary.BigEndian.Uint16(pkt[10:])
		pkt[1], pkt[8] = 0xFF, 0xFF                  // TOS, TTL
		binary.BigEndian.PutUint16(pkt[10:], 0xFFFF) // header checksum
		usum := binary.BigEndian.Uint16(pkt[nlen+6:])
		binary.BigEndian.PutUint16(pkt[nlen+6:], 0xFFFF) // UDP checksum
		c = updateIEEE(icrcLRH, pkt)
		pkt[1], pkt[8] = tos, ttl
		binary.BigEndian.PutUint16(pkt[10:], sum)
		binary.BigEndian.PutUint16(pkt[nlen+6:], usum)
	} else {
		// Version, traffic class and flow label in the first word; hop limit at 7.
		w0, hop := binary.BigEndian.Uint32(pkt), pkt[7]
		binary.BigEndian.PutUint32(pkt, w0|0x0FFFFFFF)
		pkt[7] = 0xFF
		var usum uint16
		if v == RoCEv2 {
			usum = binary.BigEndian.Uint16(pkt[nlen+6:])
			binary.BigEndian.PutUint16(pkt[nlen+6:], 0xFFFF)
		}
		c = updateIEEE(icrcLRH, pkt)
		binary.BigEndian.PutUint32(pkt, w0)
		pkt[7] = hop
		if v == RoCEv2 {
			binary.BigEndian.PutUint16(pkt[nlen+6:], usum)
		}
	}
	pkt[off+4] = bth4
	return c
}

// icrcLRH is the CRC of the 8 bytes of ones that stand in for the LRH at
// the start of every ICRC computation.
var icrcLRH = crc32.ChecksumIEEE(ones8[:])

// ieeeSlicing are the slicing-by-8 tables of the IEEE CRC-32 (Kounavis and
// Berry, "A Systematic Approach to Building High Performance Software-Based
// CRC Generators", 2005), and eight more for slicing-by-16 (crcsel.go),
// built from crc32.IEEETable: table k maps a byte to its CRC followed by k
// zero bytes. updateSlicing8 uses the first eight.
var ieeeSlicing = func() *[16][256]uint32 {
	var t [16][256]uint32
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 16; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][i] = c
		}
	}
	return &t
}()

// updateSlicing8 returns crc32.Update(crc, crc32.IEEETable, p), eight bytes
// a step. It is for icrc's short masked prefix: unlike crc32.Update, p does
// not escape, so p may be a stack buffer.
func updateSlicing8(crc uint32, p []byte) uint32 {
	t := ieeeSlicing
	crc = ^crc
	for ; len(p) >= 8; p = p[8:] {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][crc&0xFF] ^ t[6][crc>>8&0xFF] ^ t[5][crc>>16&0xFF] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// slicingShort: on amd64 hash/crc32 takes the carry-less multiply only
// for runs of 64 bytes and more and hands shorter ones to its own
// slicing-by-8, after an initialisation check (a sync.OnceFunc call) and
// two more calls; updateSlicing8 does the same work without them (an ACK's
// ICRC: 44 bytes). Elsewhere hash/crc32 may have a CRC instruction for every
// length (arm64), so it gets them all.
const slicingShort = runtime.GOARCH == "amd64"

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p), by the loop
// chooseCRC chose (crcsel.go). p escapes, as into crc32.Update: not for
// stack buffers (updateSlicing8 is).
func updateIEEE(crc uint32, p []byte) uint32 {
	if crcTable {
		return updateSlicing16(crc, p)
	}
	if slicingShort && len(p) < 64 {
		return updateSlicing8(crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

var ones8 = [8]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

// putICRC writes crc at b[0:4], least-significant byte first.
func putICRC(b []byte, crc uint32) { binary.LittleEndian.PutUint32(b, crc) }
