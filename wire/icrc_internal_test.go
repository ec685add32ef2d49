package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestUpdateSlicing checks icrc's own slicing-by-8 loop against
// hash/crc32 for every length up to 200 bytes, from several starting CRCs.
func TestUpdateSlicing8(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	p := make([]byte, 200)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	for _, crc := range []uint32{0, 0xFFFFFFFF, 0x12345678, r.Uint32()} {
		for n := range len(p) + 1 {
			for _, off := range []int{0, 1, 3} { // unaligned starts
				if off > n {
					continue
				}
				b := p[off:n]
				if got, want := updateSlicing8(crc, b), crc32.Update(crc, crc32.IEEETable, b); got != want {
					t.Fatalf("crc %#x, %d bytes at %d: %#08x, want %#08x", crc, len(b), off, got, want)
				}
			}
		}
	}
	checkSlicingTables(t, ieeeSlicing[:8])
}

// checkSlicingTables: table k maps a byte to its CRC register followed by
// k zero bytes.
func checkSlicingTables(t *testing.T, tables [][256]uint32) {
	t.Helper()
	for k := range tables {
		for i := range 256 {
			reg := crc32.IEEETable[i]
			for range k {
				reg = crc32.IEEETable[reg&0xFF] ^ reg>>8
			}
			if tables[k][i] != reg {
				t.Fatalf("table %d of %d, entry %d: %#08x, want %#08x", k, len(tables), i, tables[k][i], reg)
			}
		}
	}
}

// TestICRCPrefixLengths computes the ICRC with and without the split at
// every prefix length the headers allow (IPv4 with 0 to 40 bytes of
// options, IPv6, GRH) against a plain CRC over a masked copy: icrc,
// icrcInPlace and ICRCv2, packets from 40 bytes (updateIEEE's short path)
// to 4 KiB.
func TestICRCPrefixLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		nlen  int
		ipVer uint8
		v     Version
	}{
		{20, 4, RoCEv2}, {24, 4, RoCEv2}, {40, 4, RoCEv2}, {60, 4, RoCEv2}, {40, 6, RoCEv2}, {40, 6, RoCEv1},
	} {
		rests := []int{63, 64, 65, 1500, 4096}
		for n := range 34 {
			rests = append(rests, n)
		}
		for _, rest := range rests {
			udp := 0
			if tc.v == RoCEv2 {
				udp = UDPLen
			}
			pkt := make([]byte, tc.nlen+udp+BTHLen+rest)
			for i := range pkt {
				pkt[i] = byte(r.Uint32())
			}
			m := append(append([]byte{}, ones8[:]...), pkt...)
			nh := m[8:]
			if tc.ipVer == 4 {
				nh[1], nh[8], nh[10], nh[11] = 0xFF, 0xFF, 0xFF, 0xFF
			} else {
				nh[0] |= 0x0F
				nh[1], nh[2], nh[3], nh[7] = 0xFF, 0xFF, 0xFF, 0xFF
			}
			if udp > 0 {
				nh[tc.nlen+6], nh[tc.nlen+7] = 0xFF, 0xFF
			}
			nh[tc.nlen+udp+4] = 0xFF
			want := crc32.ChecksumIEEE(m)
			if got := icrc(pkt, tc.nlen, tc.ipVer, tc.v); got != want {
				t.Errorf("nlen %d IPv%d %v, %d bytes after the BTH: %#08x, want %#08x", tc.nlen, tc.ipVer, tc.v, rest, got, want)
			}
			if cp := append([]byte(nil), pkt...); icrcInPlace(cp, tc.nlen, tc.ipVer, tc.v) != want || string(cp) != string(pkt) {
				t.Errorf("icrcInPlace, nlen %d IPv%d %v, %d bytes after the BTH: not %#08x, or the bytes not put back", tc.nlen, tc.ipVer, tc.v, rest, want)
			}
			if tc.v == RoCEv2 {
				pkt[0] = tc.ipVer<<4 | pkt[0]&0x0F // ICRCv2 reads the version
				m[8] = pkt[0] | 0x0F*uint8(tc.ipVer&2>>1)
				want = crc32.ChecksumIEEE(m)
				before := string(pkt)
				h := tc.nlen + UDPLen
				if got := ICRCv2(pkt[:h], tc.nlen, pkt[h:]); got != want || string(pkt) != before {
					t.Errorf("ICRCv2, nlen %d IPv%d, %d bytes after the BTH: %#08x, want %#08x (bytes kept: %v)",
						tc.nlen, tc.ipVer, rest, got, want, string(pkt) == before)
				}
			}
		}
	}
}

// icrcInPlace agrees with icrc on every sample packet, short (below the 64
// bytes where hash/crc32's carry-less multiply starts; updateIEEE) and
// long, and leaves the bytes as it found them.
func TestICRCInPlace(t *testing.T) {
	for _, f := range inPlaceSamples(t) {
		var p Packet
		if err := p.ParseFrame(f, RoCEv2Port); err != nil {
			t.Fatal(err)
		}
		orig := append([]byte(nil), f...)
		want := icrc(p.Bytes[p.l3:p.icrc], p.l3Len, p.ipVer, p.Version)
		got := icrcInPlace(p.Bytes[p.l3:p.icrc], p.l3Len, p.ipVer, p.Version)
		if got != want || string(f) != string(orig) {
			t.Fatalf("in place %#x, copy %#x; bytes restored: %v", got, want, string(f) == string(orig))
		}
	}
}

func inPlaceSamples(t *testing.T) [][]byte {
	var out [][]byte
	for _, n := range []int{0, 4, 20, 24, 28, 36, 64, 4096} {
		out = append(out, inPlaceSamplesOf(t, n)...)
	}
	return out
}

func inPlaceSamplesOf(t *testing.T, n int) [][]byte {
	var out [][]byte
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = byte(i*7 + 1)
	}
	for _, v := range []string{"v1", "v4", "v6"} {
		f := PacketFields{Version: RoCEv2, Eth: &EthernetFields{}, UDP: UDPFields{SrcPort: 1, DstPort: RoCEv2Port},
			BTH: BTHFields{Opcode: OpcodeRCSendOnly, PKey: 0xffff, FECN: true}, Payload: payload}
		switch v {
		case "v1":
			f.Version = RoCEv1
			f.GRH = &IPv6Fields{TrafficClass: 0x12, FlowLabel: 0x345, HopLimit: 9, NextHeader: GRHNextHdrIBTH,
				Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2")}
		case "v4":
			f.IPv4 = &IPv4Fields{TOS: 0x68, TTL: 3, Protocol: 17, ID: 77, Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")}
		case "v6":
			f.IPv6 = &IPv6Fields{TrafficClass: 0x68, FlowLabel: 0xabcde, HopLimit: 3, NextHeader: 17,
				Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
		}
		b, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}
