package mad

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestIPCMHeader(t *testing.T) {
	tests := []struct {
		name string
		wire string // 36 bytes
		f    IPCMHeaderFields
	}{
		{
			// rping.pcap frame 3: 192.0.2.12:57239 → 192.0.2.11.
			name: "IPv4 rping",
			wire: "0040df97" + "000000000000000000000000c000020c" + "000000000000000000000000c000020b",
			f: IPCMHeaderFields{IPVersion: 4, SrcPort: 0xdf97,
				SrcAddr: netip.MustParseAddr("192.0.2.12"), DstAddr: netip.MustParseAddr("192.0.2.11")},
		},
		{
			// rping6.pcap frame 3: [fd00:c0:2::12]:42938 → fd00:c0:2::11.
			name: "IPv6 rping6",
			wire: "0060a7ba" + "fd0000c0000200000000000000000012" + "fd0000c0000200000000000000000011",
			f: IPCMHeaderFields{IPVersion: 6, SrcPort: 0xa7ba,
				SrcAddr: netip.MustParseAddr("fd00:c0:2::12"), DstAddr: netip.MustParseAddr("fd00:c0:2::11")},
		},
		{
			name: "IPv6 v4-mapped",
			wire: "00600001" + "00000000000000000000ffff0a000001" + "00000000000000000000ffff0a000002",
			f: IPCMHeaderFields{IPVersion: 6, SrcPort: 1,
				SrcAddr: netip.MustParseAddr("::ffff:10.0.0.1"), DstAddr: netip.MustParseAddr("::ffff:10.0.0.2")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire := mustHex(t, tt.wire)
			if err := tt.f.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tt.f.Append(nil); !bytes.Equal(got, wire) {
				t.Fatalf("Append:\n got %x\nwant %x", got, wire)
			}
			// Parse accepts the header followed by consumer data.
			h, err := ParseIPCMHeader(append(bytes.Clone(wire), 0xaa, 0xbb))
			if err != nil {
				t.Fatal(err)
			}
			if len(h) != IPCMHeaderLen {
				t.Errorf("view is %d bytes", len(h))
			}
			if got := h.Fields(); got != tt.f {
				t.Errorf("Fields = %+v, want %+v", got, tt.f)
			}
			// Setters rebuild the same bytes.
			v := IPCMHeader(make([]byte, IPCMHeaderLen))
			v.SetMajorVersion(tt.f.MajorVersion)
			v.SetMinorVersion(tt.f.MinorVersion)
			v.SetIPVersion(tt.f.IPVersion)
			v.SetSrcPort(tt.f.SrcPort)
			v.SetSrcAddr(tt.f.SrcAddr)
			v.SetDstAddr(tt.f.DstAddr)
			if !bytes.Equal(v, wire) {
				t.Errorf("setters:\n got %x\nwant %x", []byte(v), wire)
			}
			// The walker shows the addresses in their family.
			for f, val := range h.All() {
				switch f.Name {
				case "SrcAddr":
					if val.String() != tt.f.SrcAddr.String() {
						t.Errorf("walker SrcAddr %s", val)
					}
				case "DstAddr":
					if val.String() != tt.f.DstAddr.String() {
						t.Errorf("walker DstAddr %s", val)
					}
				}
			}
		})
	}
}

func TestParseIPCMHeaderErrors(t *testing.T) {
	good := sampleIPCM().Append(nil)
	edit := func(f func(h IPCMHeader)) []byte {
		b := bytes.Clone(good)
		f(IPCMHeader(b))
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"35 bytes", good[:35], ErrTruncated},
		{"empty", nil, ErrTruncated},
		{"major version 1", edit(func(h IPCMHeader) { h.SetMajorVersion(1) }), ErrIPCMHeader},
		{"minor version 1", edit(func(h IPCMHeader) { h.SetMinorVersion(1) }), ErrIPCMHeader},
		{"IP version 0", edit(func(h IPCMHeader) { h.SetIPVersion(0) }), ErrIPCMHeader},
		{"IP version 5", edit(func(h IPCMHeader) { h.SetIPVersion(5) }), ErrIPCMHeader},
	}
	for _, tt := range tests {
		if _, err := ParseIPCMHeader(tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestIPCMValidate(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.1")
	v6 := netip.MustParseAddr("fd00::1")
	tests := []struct {
		name string
		f    IPCMHeaderFields
		ok   bool
	}{
		{"v4 ok", IPCMHeaderFields{IPVersion: 4, SrcAddr: v4, DstAddr: v4}, true},
		{"v6 ok", IPCMHeaderFields{IPVersion: 6, SrcAddr: v6, DstAddr: v6}, true},
		{"v4 header, v6 source", IPCMHeaderFields{IPVersion: 4, SrcAddr: v6, DstAddr: v4}, false},
		{"v6 header, v4 destination", IPCMHeaderFields{IPVersion: 6, SrcAddr: v6, DstAddr: v4}, false},
		{"v4 header, no address", IPCMHeaderFields{IPVersion: 4}, false},
		{"major version 16", IPCMHeaderFields{MajorVersion: 16, IPVersion: 4, SrcAddr: v4, DstAddr: v4}, false},
	}
	for _, tt := range tests {
		if err := tt.f.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate = %v", tt.name, err)
		}
	}
}

// TestREQIPCM checks the IP CM header reached through a REQ and a SIDR_REQ.
func TestREQIPCM(t *testing.T) {
	for _, s := range sampleMessages() {
		m, err := Parse(s.bytes())
		if err != nil {
			t.Fatal(err)
		}
		h, err := m.IPCM()
		switch s.attr {
		case AttrREQ, AttrSIDRREQ:
			if err != nil {
				t.Fatalf("%s: IPCM: %v", s.name, err)
			}
			if got := h.Fields(); got != sampleIPCM() {
				t.Errorf("%s: IPCM = %+v", s.name, got)
			}
		default:
			if !errors.Is(err, ErrNotIPCM) {
				t.Errorf("%s: IPCM error %v, want ErrNotIPCM", s.name, err)
			}
		}
	}
	// A REQ to a non-IP CM service ID has no IP CM header.
	f := sampleREQ()
	f.ServiceID = 0x0200000000001234
	b := NewCMHeader(AttrREQ, 1).Append(nil)
	m, _ := Parse(f.Append(b))
	if _, err := m.IPCM(); !errors.Is(err, ErrNotIPCM) {
		t.Errorf("non-IP CM REQ: IPCM error %v", err)
	}
}
