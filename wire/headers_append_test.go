package wire_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestHeadersAppend checks that the headers Headers.Append writes before a
// transport packet, with the ICRC computed over them, give the frame
// Append writes, for every encapsulation (VLAN tags included), and that
// it allocates nothing into a buffer with room.
func TestHeadersAppend(t *testing.T) {
	for _, e := range encaps {
		t.Run(e.name, func(t *testing.T) {
			f := sampleFields(0x04, e, samplePayload(100))
			f.Trailer = nil
			want := encode(t, f)
			tr := append(f.AppendTransport(nil), 0, 0, 0, 0)
			h := wire.Headers{Version: f.Version, Eth: f.Eth, IPv4: f.IPv4, IPv6: f.IPv6, GRH: f.GRH, UDP: f.UDP}
			b, nlen, err := h.Append(make([]byte, 0, 128), len(tr))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, tr...)
			net := wire.EthernetLen
			if e.vlan {
				net += wire.VLANTagLen
			}
			c := wire.ICRC(b[net:len(b)-wire.ICRCLen], nlen, e.version)
			b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
			if string(b) != string(want) {
				t.Errorf("Headers.Append + transport + ICRC:\n%x\nAppend:\n%x", b, want)
			}
			buf := make([]byte, 0, 128)
			if n := testing.AllocsPerRun(100, func() { h.Append(buf, len(tr)) }); n != 0 {
				t.Errorf("Headers.Append: %v allocations, want 0", n)
			}
		})
	}
}

// TestIPv4ComputeChecksum checks the header checksum against a known
// header (checksum 0xb861) and, with options, against the RFC 1071 sum
// of 16-bit words that a receiver checks: the header sums to 0xFFFF.
func TestIPv4ComputeChecksum(t *testing.T) {
	h := wire.IPv4{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if c := h.ComputeChecksum(); c != 0xb861 {
		t.Errorf("checksum %#04x, want 0xb861", c)
	}
	for n := range 10 {
		f := wire.IPv4Fields{TOS: byte(n * 37), TotalLen: 1000 + n, ID: uint16(n * 7919), TTL: 255 - byte(n), Protocol: 17,
			Src: netip.AddrFrom4([4]byte{byte(n), 255, 254, 253}), Dst: netip.AddrFrom4([4]byte{255, 255, byte(n), 1}),
			Options: bytes.Repeat([]byte{0xFF, byte(n)}, 2*n)}
		h := wire.IPv4(f.Append(nil))
		h.SetChecksum(h.ComputeChecksum())
		var sum uint32
		for i := 0; i < len(h); i += 2 {
			sum += uint32(h[i])<<8 | uint32(h[i+1])
		}
		for sum > 0xFFFF {
			sum = sum>>16 + sum&0xFFFF
		}
		if sum != 0xFFFF {
			t.Errorf("%d bytes of options: header with its checksum sums to %#04x, want 0xffff", 4*n, sum)
		}
	}
}

// TestHeaderTemplate checks that a template set from headers puts, for any
// transport length and IPv4 Identification, the headers Headers.Append
// writes for them; that a masked one differs only in the IPv4 header
// checksum, which leaves the ICRC as it is; and that Put allocates nothing.
func TestHeaderTemplate(t *testing.T) {
	for _, e := range encaps {
		t.Run(e.name, func(t *testing.T) {
			f := sampleFields(0x04, e, nil)
			var tm, masked wire.HeaderTemplate
			h := wire.Headers{Version: f.Version, Eth: f.Eth, IPv4: f.IPv4, IPv6: f.IPv6, GRH: f.GRH, UDP: f.UDP}
			if err := tm.Set(&h, false); err != nil {
				t.Fatal(err)
			}
			if err := masked.Set(&h, true); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				n  int
				id uint16
			}{{16, 0}, {16, 1}, {1040, 0xBEEF}, {4124, 7}} {
				if f.IPv4 != nil {
					ip := *f.IPv4
					ip.ID = tc.id
					h.IPv4 = &ip
				}
				want, nlen, err := h.Append(nil, tc.n)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, tm.Len())
				if n := tm.Put(got, tc.n, tc.id); n != nlen || tm.NetLen() != nlen || !bytes.Equal(got, want) {
					t.Errorf("%d bytes, ID %d: Put (net %d):\n%x\nHeaders.Append (net %d):\n%x", tc.n, tc.id, n, got, nlen, want)
				}
				m := make([]byte, masked.Len())
				masked.Put(m, tc.n, tc.id)
				net := len(want) - nlen
				if e.version == wire.RoCEv2 {
					net -= wire.UDPLen
				}
				if e.ipVer == 4 {
					m[net+10], m[net+11] = want[net+10], want[net+11] // the header checksum
				}
				if !bytes.Equal(m, want) {
					t.Errorf("%d bytes, ID %d: masked Put:\n%x\nHeaders.Append:\n%x", tc.n, tc.id, m, want)
				}
			}
			buf := make([]byte, tm.Len())
			if n := testing.AllocsPerRun(100, func() { tm.Put(buf, 100, 1) }); n != 0 {
				t.Errorf("Put: %v allocations, want 0", n)
			}
		})
	}
	var tm wire.HeaderTemplate
	bad := wire.Headers{Version: wire.RoCEv2, IPv4: &wire.IPv4Fields{Src: ip6Server, Dst: ip6Client}}
	if err := tm.Set(&bad, true); err == nil || tm.Len() != 0 {
		t.Errorf("Set of an IPv4 header with IPv6 addresses: %v, Len %d; want an error and an empty template", err, tm.Len())
	}
}
