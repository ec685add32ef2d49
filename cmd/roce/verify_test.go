package main

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// traceFrame returns a copy of frame n of a shared trace.
func traceFrame(t *testing.T, name string, n int) []byte {
	t.Helper()
	var frame []byte
	err := pcap.ReadFile(trace(t, name), func(f pcap.Frame) error {
		if f.Number == n {
			frame = bytes.Clone(f.Data)
		}
		return nil
	})
	if err != nil || frame == nil {
		t.Fatalf("%s: frame %d: %v", name, n, err)
	}
	return frame
}

// v1Frame encodes a RoCE v1 RC SEND ONLY with 16 bytes of payload and a
// GRH whose traffic class, flow label and hop limit are not zero (the
// shared traces are all RoCE v2: rxe speaks no v1).
func v1Frame(t *testing.T) []byte {
	t.Helper()
	f := wire.PacketFields{
		Version: wire.RoCEv1,
		Eth:     &wire.EthernetFields{Dst: wire.MAC{0x52, 0x54, 0, 0xc0, 2, 0x0b}, Src: wire.MAC{0x52, 0x54, 0, 0xc0, 2, 0x0c}},
		GRH: &wire.GRHFields{TrafficClass: 0x60, FlowLabel: 0xb2f4f, NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1,
			Src: netip.MustParseAddr("fe80::5054:ff:fec0:20c"), Dst: netip.MustParseAddr("fe80::5054:ff:fec0:20b")},
		BTH:     wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: 3422671, AckReq: true},
		Payload: []byte("rdma-ping-0: ABC"),
	}
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writePcap writes frames to a classic pcap file with link/pcap's writer.
func writePcap(t *testing.T, path string, frames ...[]byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcap.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, f := range frames {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Millisecond), f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCatchesEveryCorruptedByte is issue 2's acceptance: a corrupted
// byte anywhere in a packet is caught by roce decode --verify. For a RoCE
// v2/IPv4 frame (rping.pcap frame 6), a RoCE v2/IPv6 frame (rping6.pcap
// frame 8) and a RoCE v1 frame, every byte is XORed in turn with 0x01, 0x80
// and 0xFF and the one-frame capture decoded: --verify must exit 1 naming
// frame 1, unless every flipped bit lies in a field that is undetectable by
// design (undetectable below), and then it must exit 0, so the list is
// exactly as long as it has to be.
func TestVerifyCatchesEveryCorruptedByte(t *testing.T) {
	// The bits of each byte that nothing a capture holds covers, because
	// they may change in transit: offset → bits.
	macs := func(m map[int]byte) map[int]byte {
		for i := range 12 { // Ethernet destination and source: only the FCS (not captured) covers them
			m[i] = 0xFF
		}
		return m
	}
	// IPv6 header or RoCE v1 GRH at 14 (IBTA Vol 1 §7.8.1, Annex A17.8: the
	// ICRC masks them; IPv6 has no header checksum, and the UDP checksum,
	// if any, does not cover them either), and the BTH at bth.
	ipv6Like := func(bth int) map[int]byte {
		return macs(map[int]byte{
			14:      0x0F, // traffic class, high nibble (the version nibble is checked)
			15:      0xFF, // traffic class, low nibble; flow label
			16:      0xFF, // flow label
			17:      0xFF, // flow label
			21:      0xFF, // hop limit
			bth + 4: 0xC0, // FECN, BECN: switches set them (the ICRC masks the byte; resv6a must be 0)
		})
	}
	for _, tc := range []struct {
		name         string
		frame        []byte
		undetectable map[int]byte
	}{
		// IPv4's TOS and TTL are masked by the ICRC but covered by the
		// header checksum, so only the addresses and FECN/BECN are left.
		{"v2-ipv4 rping.pcap#6", traceFrame(t, "rping.pcap", 6), macs(map[int]byte{14 + 20 + 8 + 4: 0xC0})},
		{"v2-ipv6 rping6.pcap#8", traceFrame(t, "rping6.pcap", 8), ipv6Like(14 + 40 + 8)},
		{"v1", v1Frame(t), ipv6Like(14 + 40)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "one.pcap")
			writePcap(t, path, tc.frame)
			if code, _, stderr := roce(t, "decode", "--verify", path); code != 0 || !strings.Contains(stderr, ": 1 RoCE packet (1 ICRC ok), 0 other frames skipped\n") {
				t.Fatalf("the frame itself: exit %d\n%s", code, stderr)
			}
			var variants, caught, allowed int
			for off := range tc.frame {
				for _, mask := range []byte{0x01, 0x80, 0xFF} {
					variants++
					bad := bytes.Clone(tc.frame)
					bad[off] ^= mask
					writePcap(t, path, bad)
					code, _, stderr := roce(t, "decode", "--verify", path)
					if mask&^tc.undetectable[off] == 0 {
						allowed++
						if code != 0 {
							t.Errorf("byte %d ^ 0x%02x is on the undetectable list, but --verify exits %d:\n%s", off, mask, code, stderr)
						}
						continue
					}
					if code != exitError || !strings.Contains(stderr, path+": frame 1: ") {
						t.Errorf("byte %d ^ 0x%02x: exit %d, want %d and a report on frame 1:\n%s", off, mask, code, exitError, stderr)
						continue
					}
					caught++
				}
			}
			t.Logf("%d bytes: %d corrupted variants, %d caught, %d undetectable by design", len(tc.frame), variants, caught, allowed)
		})
	}
}

// TestVerifyCorruptedSelectors pins what --verify says about the fields
// that decide whether a frame is RoCE at all, corrupted in rping.pcap's
// frame 6 (IPv4) and rping6.pcap's frame 8 (IPv6): each becomes "not RoCE"
// as captured and is reported, not silently skipped.
func TestVerifyCorruptedSelectors(t *testing.T) {
	v4, v6 := traceFrame(t, "rping.pcap", 6), traceFrame(t, "rping6.pcap", 8)
	const transit = " with a valid ICRC: corrupted in transit?"
	for _, tc := range []struct {
		frame []byte
		off   int
		mask  byte
		want  string
	}{
		{v4, 12, 0x01, "Ethertype 0x0900, but the frame is a RoCE v2 packet over IPv4 (Ethertype 0x0800)" + transit},
		{v4, 14, 0x80, "IP version 12, but the frame is a RoCE v2 packet over IPv4 (version 4)" + transit},
		{v4, 14, 0x01, "IPv4 header length 16 < 20 (not RoCE: skipped)"},
		{v4, 14, 0xFF, "Ethertype 0x0800 (IPv4), but IP version 11 (not RoCE: skipped)"},
		{v4, 20, 0x01, "IPv4 flags and fragment offset 0x4100, but the frame is an unfragmented RoCE v2 packet (0x4000)" + transit},
		{v4, 21, 0xFF, "IPv4 flags and fragment offset 0x40ff, but the frame is an unfragmented RoCE v2 packet (0x4000)" + transit},
		{v4, 23, 0x01, "IPv4 protocol 16, but the frame is a RoCE v2 packet (protocol 17, UDP)" + transit},
		{v4, 37, 0x01, "UDP destination port 4790, but the frame is a RoCE v2 packet to port 4791" + transit},
		{v4, 36, 0x80, "UDP destination port 37559, but the frame is a RoCE v2 packet to port 4791" + transit},
		{v4, 40, 0x01, "UDP checksum 0x0100, should be 0x"},
		{v4, 46, 0x01, "BTH reserved bits (resv6a) 0x01, should be 0"},
		{v6, 13, 0xFF, "Ethertype 0x8622, but the frame is a RoCE v2 packet over IPv6 (Ethertype 0x86dd)" + transit},
		{v6, 14, 0x80, "IP version 14, but the frame is a RoCE v2 packet over IPv6 (version 6)" + transit},
		{v6, 20, 0x80, "IPv6 next header 145, but the frame is a RoCE v2 packet (next header 17, UDP)" + transit},
		{v6, 57, 0xFF, "UDP destination port 4680, but the frame is a RoCE v2 packet to port 4791" + transit},
		{v6, 61, 0x80, "UDP checksum 0x0080, should be 0x"},
		{v6, 66, 0xFF, "BTH reserved bits (resv6a) 0x3f, should be 0"},
	} {
		bad := bytes.Clone(tc.frame)
		bad[tc.off] ^= tc.mask
		path := filepath.Join(t.TempDir(), "one.pcap")
		writePcap(t, path, bad)
		code, _, stderr := roce(t, "decode", "--verify", path)
		if code != exitError || !strings.Contains(stderr, path+": frame 1: "+tc.want) {
			t.Errorf("byte %d ^ 0x%02x: exit %d, stderr:\n%s\nwant %q", tc.off, tc.mask, code, stderr, tc.want)
		}
	}
}

// TestVerifyDamagedOtherFrame: --verify checks the IPv4 header checksum of
// frames that are not RoCE too (here the IGMP of mckey.pcap); without
// --verify they are counted, not reported, and the exit status is 0.
func TestVerifyDamagedOtherFrame(t *testing.T) {
	var igmp []byte
	pcap.ReadFile(trace(t, "mckey.pcap"), func(f pcap.Frame) error {
		if igmp == nil && len(f.Data) > 23 && f.Data[12] == 0x08 && f.Data[13] == 0x00 && f.Data[23] == 2 {
			igmp = bytes.Clone(f.Data)
		}
		return nil
	})
	if igmp == nil {
		t.Fatal("mckey.pcap has no IGMP frame")
	}
	igmp[14+8] ^= 0x01 // TTL: only the header checksum covers it
	path := filepath.Join(t.TempDir(), "igmp.pcap")
	writePcap(t, path, igmp)
	code, _, stderr := roce(t, "decode", "--verify", path)
	if code != exitError || !strings.Contains(stderr, path+": frame 1: IPv4 header checksum 0x") ||
		!strings.Contains(stderr, "(not RoCE: skipped)\n") ||
		!strings.Contains(stderr, "0 RoCE packets (0 ICRC ok), 1 other frame skipped (1 with a damaged IP header)\n") ||
		!strings.Contains(stderr, "roce: verify: 1 other frame failed\n") {
		t.Errorf("--verify: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := roce(t, "decode", path); code != 0 || strings.Contains(stderr, "frame 1:") {
		t.Errorf("without --verify: exit %d\n%s", code, stderr)
	}
}

// TestDecodeUDPPort: with --udp-port 4792 nothing in rping.pcap is RoCE v2
// (and nothing is reported as a corrupted port either: restoring port 4792
// never gives a valid ICRC); the default port finds all 125 packets.
func TestDecodeUDPPort(t *testing.T) {
	path := trace(t, "rping.pcap")
	code, stdout, stderr := roce(t, "decode", "--verify", "--udp-port", "4792", path)
	if code != 0 || stdout != "" || stderr != path+": 0 RoCE packets (0 ICRC ok), 127 other frames skipped\n" {
		t.Errorf("--udp-port 4792: exit %d\nstdout %q\nstderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = roce(t, "decode", "--verify", path)
	if code != 0 || strings.Count(stdout, "\n") != 125 || stderr != path+": 125 RoCE packets (125 ICRC ok), 2 other frames skipped\n" {
		t.Errorf("default port: exit %d, %d lines\nstderr %q", code, strings.Count(stdout, "\n"), stderr)
	}
}

// TestDecodePcapng decodes rping.pcap rewritten as pcapng (with pcapgo's
// NgWriter: link/pcap writes only classic pcap): the same lines,
// JSON objects and counts as the classic file.
func TestDecodePcapng(t *testing.T) {
	src := trace(t, "rping.pcap")
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = pcap.ReadFile(src, func(f pcap.Frame) error {
		n++
		return w.WritePacket(gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(f.Data), Length: f.OrigLen, InterfaceIndex: 0}, f.Data)
	})
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		t.Fatal(err)
	}
	ng := filepath.Join(t.TempDir(), "rping.pcapng")
	if err := os.WriteFile(ng, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if magic := buf.Bytes()[:4]; !bytes.Equal(magic, []byte{0x0a, 0x0d, 0x0d, 0x0a}) || n != 127 {
		t.Fatalf("not a pcapng file of 127 frames: % x, %d", magic, n)
	}
	for _, args := range [][]string{{"decode", "--verify"}, {"decode", "--json"}, {"decode", "-V"}} {
		code1, out1, err1 := roce(t, append(args, src)...)
		code2, out2, err2 := roce(t, append(args, ng)...)
		out1, err1 = strings.ReplaceAll(out1, src, "FILE"), strings.ReplaceAll(err1, src, "FILE")
		out2, err2 = strings.ReplaceAll(out2, ng, "FILE"), strings.ReplaceAll(err2, ng, "FILE")
		if code1 != 0 || code2 != 0 || err1 != err2 {
			t.Errorf("%q: pcap exit %d, pcapng exit %d; stderr\n%s%s", args, code1, code2, err1, err2)
		}
		if out1 != out2 || strings.Count(out2, "\n") < 125 {
			t.Errorf("%q: stdout differs (%d and %d bytes)", args, len(out1), len(out2))
		}
	}
}
