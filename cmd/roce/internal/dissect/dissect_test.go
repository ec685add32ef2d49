package dissect_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cmd/roce/internal/dissect"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// decodeTrace decodes every frame of a capture and calls fn for each RoCE packet.
func decodeTrace(t testing.TB, path string, fn func(p *dissect.Packet)) dissect.Stats {
	t.Helper()
	var (
		d     dissect.Decoder
		p     dissect.Packet
		stats dissect.Stats
	)
	err := pcap.ReadFile(path, func(f pcap.Frame) error {
		err := d.Decode(f, &p)
		stats.Add(&p, err)
		var fe *dissect.FrameError
		switch {
		case errors.As(err, &fe):
			t.Errorf("%s: %v", filepath.Base(path), fe)
		case err == nil:
			fn(&p)
		case !errors.Is(err, wire.ErrNotRoCE):
			t.Errorf("%s: frame %d: unexpected error %v", filepath.Base(path), f.Number, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

func tracePath(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(testenv.SharedDir(t), "traces", name)
}

// TestTraces dissects every RoCE packet of every real rxe capture: no frame
// is malformed, no packet has a problem, and every summary, tree and JSON
// object is well formed.
func TestTraces(t *testing.T) {
	for _, path := range testenv.Traces(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			t.Parallel()
			stats := decodeTrace(t, path, func(p *dissect.Packet) {
				if probs := p.Problems(); len(probs) > 0 {
					t.Errorf("frame %d: %v", p.Number, probs)
				}
				checkPacket(t, p)
			})
			if stats.RoCE == 0 || stats.Failed() != 0 || stats.ICRCOK != stats.RoCE {
				t.Errorf("stats %+v", stats)
			}
			t.Log(stats.String())
		})
	}
}

// checkPacket checks the three renderings of p.
func checkPacket(t testing.TB, p *dissect.Packet) {
	t.Helper()
	line := string(p.AppendLine(nil))
	if strings.Contains(line, "\n") || !strings.Contains(line, p.Opcode().String()) {
		t.Errorf("frame %d: summary %q", p.Number, line)
	}
	v := string(p.AppendVerbose(nil))
	for _, want := range []string{"Base Transport Header", "Invariant CRC: "} {
		if !strings.Contains(v, want) {
			t.Errorf("frame %d: -V lacks %q:\n%s", p.Number, want, v)
		}
	}
	j := p.AppendJSON(nil, "x.pcap")
	if err := checkJSONObject(j); err != nil {
		t.Errorf("frame %d: %v\n%s", p.Number, err, j)
	}
	if p.Number > 40 {
		return // the stability check below is the same code each time; keep big traces quick
	}
	if !bytes.Equal(j, p.AppendJSON(nil, "x.pcap")) || v != string(p.AppendVerbose(nil)) {
		t.Errorf("frame %d: output is not stable", p.Number)
	}
}

// checkJSONObject checks that b is one compact JSON object in which no
// object repeats a key (encoding/json would silently keep the last).
func checkJSONObject(b []byte) error {
	if !json.Valid(b) {
		return errors.New("invalid JSON")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil || !bytes.Equal(compact.Bytes(), b) {
		return fmt.Errorf("not compact (%v)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var walk func() error
	walk = func() error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				key := k.(string)
				if seen[key] {
					return fmt.Errorf("duplicate key %q", key)
				}
				if key == "" {
					return errors.New("empty key")
				}
				seen[key] = true
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	if err := walk(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}

// TestGoldenSummaries pins the summary of one frame of each kind in
// rping.pcap (compare: tshark -r rping.pcap).
func TestGoldenSummaries(t *testing.T) {
	want := map[int]string{
		3:   "UD_SEND_ONLY QP=0x000001 PSN=0 AckReq CM REQ LocalCommID=0xba6bbd67 ServiceID=0x0000000001061c06 (RDMA_PS_TCP port 7174) LocalQPN=0x000011",
		4:   "UD_SEND_ONLY QP=0x000001 PSN=0 AckReq CM REP LocalCommID=0x4944653c RemoteCommID=0xba6bbd67 LocalQPN=0x000011",
		5:   "UD_SEND_ONLY QP=0x000001 PSN=1 AckReq CM RTU LocalCommID=0xba6bbd67 RemoteCommID=0x4944653c",
		6:   "RC_SEND_ONLY QP=0x000011 PSN=3422671 AckReq Payload=16",
		7:   "RC_ACKNOWLEDGE QP=0x000011 PSN=3422671 ACK (credits: invalid) MSN=1",
		8:   "RC_RDMA_READ_REQUEST QP=0x000011 PSN=3229744 AckReq VA=0x0000556759fe05c0 RKey=0x000005fa Len=64",
		9:   "RC_RDMA_READ_RESPONSE_ONLY QP=0x000011 PSN=3229744 ACK (credits: invalid) MSN=1 Payload=64",
		14:  "RC_RDMA_WRITE_ONLY QP=0x000011 PSN=3229746 AckReq VA=0x0000556759fdcae0 RKey=0x000004ff Len=64 Payload=64",
		126: "UD_SEND_ONLY QP=0x000001 PSN=2 AckReq CM DREQ LocalCommID=0xba6bbd67 RemoteCommID=0x4944653c",
		127: "UD_SEND_ONLY QP=0x000001 PSN=1 AckReq CM DREP LocalCommID=0x4944653c RemoteCommID=0xba6bbd67",
	}
	got := map[int]string{}
	decodeTrace(t, tracePath(t, "rping.pcap"), func(p *dissect.Packet) {
		if _, ok := want[p.Number]; ok {
			got[p.Number] = p.Summary()
		}
		if p.Number == 7 {
			line := string(p.AppendLine(nil))
			if w := "    7    0.102767 192.0.2.11 → 192.0.2.12 RoCEv2 RC_ACKNOWLEDGE QP=0x000011 PSN=3422671 ACK (credits: invalid) MSN=1"; line != w {
				t.Errorf("line\n got %q\nwant %q", line, w)
			}
		}
	})
	for n, w := range want {
		if got[n] != w {
			t.Errorf("frame %d:\n got %q\nwant %q", n, got[n], w)
		}
	}
}

// TestGoldenOtherTraces pins summaries of NAKs, atomics, SIDR, immediate data and IPv6.
func TestGoldenOtherTraces(t *testing.T) {
	for _, tc := range []struct {
		file  string
		frame int
		line  string
	}{
		{"write_bw_loss.pcap", 78, "   78    0.011278 192.0.2.11 → 192.0.2.12 RoCEv2 RC_ACKNOWLEDGE QP=0x000022 PSN=13934543 NAK PSN Sequence Error MSN=0"},
		{"atomic_fadd.pcap", 3, "    3    0.006533 192.0.2.12 → 192.0.2.11 RoCEv2 RC_FETCH_ADD QP=0x00001c PSN=12157682 AckReq VA=0x0000559ab6d34000 RKey=0x00001300 Add=0x0000000000000001"},
		{"udaddy.pcap", 3, "    3    0.008883 192.0.2.12 → 192.0.2.11 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=12 AckReq CM SIDR_REQ RequestID=0xbe6bbd67 ServiceID=0x0000000001111c06 (RDMA_PS_UDP port 7174)"},
		{"udaddy.pcap", 4, "    4    0.023999 192.0.2.11 → 192.0.2.12 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=8 AckReq CM SIDR_REP RequestID=0xbe6bbd67 Status=0 (Success) QPN=0x00001f ServiceID=0x0000000001111c06 (RDMA_PS_UDP port 7174)"},
		{"udaddy.pcap", 5, "    5    0.026432 192.0.2.12 → 192.0.2.11 RoCEv2 UD_SEND_ONLY_WITH_IMMEDIATE QP=0x00001f PSN=0 QKey=0x01234567 SrcQP=0x00001f Imm=0x0000001f Payload=100"},
		{"rping6.pcap", 8, "    8    0.046238 fd00:c0:2::12 → fd00:c0:2::11 RoCEv2 RC_SEND_ONLY QP=0x000013 PSN=13776325 AckReq Payload=16"},
	} {
		found := false
		decodeTrace(t, tracePath(t, tc.file), func(p *dissect.Packet) {
			if p.Number == tc.frame {
				found = true
				if got := string(p.AppendLine(nil)); got != tc.line {
					t.Errorf("%s frame %d:\n got %q\nwant %q", tc.file, tc.frame, got, tc.line)
				}
			}
		})
		if !found {
			t.Errorf("%s: frame %d is not RoCE", tc.file, tc.frame)
		}
	}
}

// TestVerboseNamesEveryHeader checks that -V names every layer of the
// RDMA READ, atomic and CM traces.
func TestVerboseNamesEveryHeader(t *testing.T) {
	for file, names := range map[string][]string{
		"read_bw.pcap": {"Ethernet II", "Internet Protocol Version 4", "User Datagram Protocol",
			"Base Transport Header", "RETH - RDMA Extended Transport Header", "AETH - ACK Extended Transport Header",
			"Opcode: 0x0c (RC_RDMA_READ_REQUEST)", "Opcode: 0x0d (RC_RDMA_READ_RESPONSE_FIRST)",
			"Opcode: 0x0e (RC_RDMA_READ_RESPONSE_MIDDLE)", "Opcode: 0x0f (RC_RDMA_READ_RESPONSE_LAST)",
			"Virtual Address: ", "Remote Key: ", "DMA Length: 4096", "Syndrome: 0x1f (ACK (credits: invalid))",
			"Message Sequence Number: ", "Payload Length: 1024", "Pad: ", "Invariant CRC: ", "(correct)"},
		"atomic_fadd.pcap": {"AtomicETH - Atomic Extended Transport Header", "AtomicAckETH - Atomic ACK Extended Transport Header",
			"AETH - ACK Extended Transport Header", "Add Data: 0x0000000000000001", "Compare Data: ", "Original Remote Data: ",
			"Opcode: 0x12 (RC_ATOMIC_ACKNOWLEDGE)", "Opcode: 0x14 (RC_FETCH_ADD)"},
		"rping.pcap": {"DETH - Datagram Extended Transport Header", "Queue Key: 0x80010000 (GSI)", "MAD Header",
			"Mgmt Class: 0x07 (CM)", "CM ConnectRequest (REQ)", "CM ConnectReply (REP)", "CM ReadyToUse (RTU)",
			"CM DisconnectRequest (DREQ)", "CM DisconnectReply (DREP)", "Local Comm ID: 0xba6bbd67",
			"Service ID: 0x0000000001061c06 (RDMA_PS_TCP port 7174)", "Primary Flow Label: 0xb2f4f",
			"IP CM Header (rdma_cm private data)", "Src Port: 57239", "Src Addr: 192.0.2.12", "Dst Addr: 192.0.2.11"},
		"rping6.pcap": {"Internet Protocol Version 6", "Flow Label: ", "Hop Limit: ", "Src Addr: fd00:c0:2::12"},
		"udaddy.pcap": {"CM ServiceIDResReq (SIDR_REQ)", "CM ServiceIDResReqResp (SIDR_REP)", "ImmDt - Immediate Data"},
	} {
		var all strings.Builder
		decodeTrace(t, tracePath(t, file), func(p *dissect.Packet) { all.Write(p.AppendVerbose(nil)) })
		for _, n := range names {
			if !strings.Contains(all.String(), n) {
				t.Errorf("%s: -V lacks %q", file, n)
			}
		}
	}
}

// frame builds an Ethernet frame from fields with wire's encoder.
func frame(t testing.TB, f wire.PacketFields) []byte {
	t.Helper()
	b, err := f.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func v2Fields(op wire.Opcode) wire.PacketFields {
	info := op.Info()
	var payload []byte
	switch {
	case info.FixedPayload > 0:
		payload = bytes.Repeat([]byte{0xab}, info.FixedPayload)
	case info.FixedPayload < 0:
		payload = []byte("hello, RoCE") // 11 bytes: 1 pad byte
	}
	return wire.PacketFields{
		Version: wire.RoCEv2,
		Eth:     &wire.EthernetFields{Dst: wire.MAC{2, 0, 0, 0, 0, 2}, Src: wire.MAC{2, 0, 0, 0, 0, 1}},
		IPv4: &wire.IPv4Fields{Flags: 2, TTL: 64, Protocol: wire.IPProtocolUDP,
			Src: netip.MustParseAddr("192.0.2.1"), Dst: netip.MustParseAddr("192.0.2.2")},
		UDP: wire.UDPFields{SrcPort: 49152, DstPort: wire.RoCEv2Port},
		BTH: wire.BTHFields{Opcode: op, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: 100, AckReq: true},
		Ext: wire.ExtFields{
			RETH:      wire.RETHFields{VA: 0x1000, RKey: 0x42, DMALength: 11},
			AETH:      wire.AETHFields{Syndrome: wire.RNRNAK(14), MSN: 7},
			AtomicETH: wire.AtomicETHFields{VA: 0x2000, RKey: 0x43, SwapAdd: 5, Compare: 6},
			AtomicAck: 9, ImmDt: 0xdeadbeef, IETH: 0x44, RDETH: 3, XRCETH: 4,
			DETH: wire.DETHFields{QKey: 0x11111111, SrcQP: 0x21},
			FETH: wire.FETHWord(wire.FlushSelWholeMR, wire.FlushPersistence),
		},
		Payload: payload,
	}
}

// TestEveryOpcode dissects a packet of every opcode in wire's table, built
// by wire's encoder, over RoCE v2/IPv4 with a VLAN tag, RoCE v2/IPv6 and
// RoCE v1: every extended header the opcode carries appears in -V and in
// the JSON, and the summary names the opcode.
func TestEveryOpcode(t *testing.T) {
	table := wire.Opcodes()
	n := 0
	for i := range table {
		op := wire.Opcode(i)
		if !op.Valid() {
			continue
		}
		n++
		for _, variant := range []string{"v2-vlan", "v2-ipv6", "v1"} {
			f := v2Fields(op)
			switch variant {
			case "v2-vlan":
				f.Eth.VLAN, f.Eth.VLANTCI = true, 0x6007
			case "v2-ipv6":
				f.IPv4 = nil
				f.IPv6 = &wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, HopLimit: 64, FlowLabel: 0x12345,
					Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
			case "v1":
				f.Version, f.IPv4 = wire.RoCEv1, nil
				f.GRH = &wire.GRHFields{NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1,
					Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("fe80::2")}
			}
			var (
				d dissect.Decoder
				p dissect.Packet
			)
			data := frame(t, f)
			if err := d.Decode(pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}, &p); err != nil {
				t.Fatalf("%v %s: %v", op, variant, err)
			}
			if probs := p.Problems(); len(probs) > 0 {
				t.Errorf("%v %s: %v", op, variant, probs)
			}
			checkPacket(t, &p)
			v := string(p.AppendVerbose(nil))
			for h := wire.Header(0); h.Size() > 0; h++ {
				if op.Info().Has(h) && !strings.Contains(v, "\n    "+h.String()) {
					t.Errorf("%v %s: -V lacks header %v:\n%s", op, variant, h, v)
				}
			}
			if variant == "v1" && !strings.Contains(string(p.AppendLine(nil)), "fe80::1 → fe80::2 RoCEv1 "+op.String()) {
				t.Errorf("%v: v1 line %q", op, p.AppendLine(nil))
			}
			if variant == "v2-vlan" && !strings.Contains(v, "VLAN ID: 7") {
				t.Errorf("%v: no VLAN in\n%s", op, v)
			}
		}
	}
	if n < 80 {
		t.Errorf("only %d valid opcodes", n)
	}
}

// TestProblems checks what Problems and the summary say about a wrong ICRC
// and a wrong IPv4 header checksum.
func TestProblems(t *testing.T) {
	data := frame(t, v2Fields(wire.OpcodeRCSendOnly))
	data[len(data)-6] ^= 0x01 // a payload byte: covered by the ICRC
	var (
		d dissect.Decoder
		p dissect.Packet
	)
	if err := d.Decode(pcap.Frame{Number: 9, Data: data, OrigLen: len(data)}, &p); err != nil {
		t.Fatal(err)
	}
	probs := p.Problems()
	if len(probs) != 1 || !strings.HasPrefix(probs[0], "ICRC mismatch: packet carries 0x") || p.ICRCOK() {
		t.Errorf("problems %q", probs)
	}
	if s := p.Summary(); !strings.HasSuffix(s, " [ICRC WRONG]") {
		t.Errorf("summary %q", s)
	}
	if v := string(p.AppendVerbose(nil)); !strings.Contains(v, "(WRONG, should be 0x") {
		t.Errorf("-V:\n%s", v)
	}
	if j := string(p.AppendJSON(nil, "f")); !strings.Contains(j, `"icrc_ok":false`) {
		t.Errorf("JSON %s", j)
	}

	data = frame(t, v2Fields(wire.OpcodeRCSendOnly))
	data[wire.EthernetLen+10] ^= 0xff // IPv4 header checksum: masked from the ICRC
	if err := d.Decode(pcap.Frame{Number: 10, Data: data, OrigLen: len(data)}, &p); err != nil {
		t.Fatal(err)
	}
	if probs := p.Problems(); len(probs) != 1 || !strings.HasPrefix(probs[0], "IPv4 header checksum") || !p.ICRCOK() {
		t.Errorf("problems %q", probs)
	}
}

// TestMalformedAndOther classifies frames: RoCE-looking frames that do not
// parse are FrameErrors; everything else is wire.ErrNotRoCE.
func TestMalformedAndOther(t *testing.T) {
	good := frame(t, v2Fields(wire.OpcodeRCSendOnly))
	badOpcode := bytes.Clone(good)
	badOpcode[wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen] = 0x1e // undefined opcode
	otherPort := frame(t, func() wire.PacketFields { f := v2Fields(wire.OpcodeRCSendOnly); f.UDP.DstPort = 53; return f }())
	arp := append(bytes.Repeat([]byte{0xff}, 12), 0x08, 0x06, 0, 1)
	for _, tc := range []struct {
		name      string
		data      []byte
		port      uint16
		malformed string // "" for not RoCE
	}{
		{"bad opcode", badOpcode, 0, "frame 1: BTH: unknown opcode 0x1e"},
		{"truncated", good[:len(good)-10], 0, "frame 1: IPv4: truncated"},
		{"RoCE v1 truncated", append(bytes.Clone(good[:12]), 0x89, 0x15, 0x60), 0, "frame 1: GRH: truncated"},
		{"other UDP port", otherPort, 0, ""},
		{"other UDP port is RoCE with --udp-port", otherPort, 53, "-"},
		{"RoCE port is other with --udp-port", good, 53, ""},
		{"ARP", arp, 0, ""},
		{"runt", good[:10], 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := dissect.Decoder{UDPPort: tc.port}
			var p dissect.Packet
			err := d.Decode(pcap.Frame{Number: 1, Data: tc.data, OrigLen: len(good)}, &p)
			var fe *dissect.FrameError
			switch {
			case tc.malformed == "-":
				if err != nil {
					t.Errorf("err %v", err)
				}
			case tc.malformed == "":
				if !errors.Is(err, wire.ErrNotRoCE) {
					t.Errorf("err %v, want ErrNotRoCE", err)
				}
			case !errors.As(err, &fe) || !strings.HasPrefix(fe.Error(), tc.malformed):
				t.Errorf("err %v, want %q…", err, tc.malformed)
			}
		})
	}
}

// TestTruncatedPrefixes decodes every prefix of a CM REQ and an atomic ACK:
// errors, never panics.
func TestTruncatedPrefixes(t *testing.T) {
	var frames [][]byte
	decodeTrace(t, tracePath(t, "rping.pcap"), func(p *dissect.Packet) {
		if p.Number == 3 {
			frames = append(frames, bytes.Clone(p.Bytes))
		}
	})
	frames = append(frames, frame(t, v2Fields(wire.TransportRC|wire.OpAtomicAcknowledge)))
	for _, data := range frames {
		for n := range len(data) {
			var (
				d dissect.Decoder
				p dissect.Packet
			)
			if err := d.Decode(pcap.Frame{Number: 1, Data: data[:n], OrigLen: len(data)}, &p); err == nil {
				t.Errorf("prefix %d of %d decoded", n, len(data))
			}
		}
	}
}

// TestTime checks relative times: from the first frame of the capture.
func TestTime(t *testing.T) {
	data := frame(t, v2Fields(wire.OpcodeRCSendOnly))
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var (
		d dissect.Decoder
		p dissect.Packet
	)
	d.Decode(pcap.Frame{Number: 1, Time: t0, Data: []byte{1}}, &p) // not RoCE, but sets the origin
	if err := d.Decode(pcap.Frame{Number: 2, Time: t0.Add(1500 * time.Microsecond), Data: data, OrigLen: len(data)}, &p); err != nil {
		t.Fatal(err)
	}
	if line := string(p.AppendLine(nil)); !strings.HasPrefix(line, "    2    0.001500 192.0.2.1 → 192.0.2.2 RoCEv2 RC_SEND_ONLY") {
		t.Errorf("line %q", line)
	}
}

func TestStatsString(t *testing.T) {
	for _, tc := range []struct {
		s    dissect.Stats
		want string
	}{
		{dissect.Stats{RoCE: 52, ICRCOK: 52, Other: 4}, "52 RoCE packets (52 ICRC ok), 4 other frames skipped"},
		{dissect.Stats{RoCE: 1, ICRCOK: 0, ICRCBad: 1, Problems: 1, Other: 1}, "1 RoCE packet (0 ICRC ok, 1 ICRC WRONG), 1 other frame skipped"},
		{dissect.Stats{RoCE: 3, ICRCOK: 3, Problems: 1, OtherBad: 1, Malformed: 2}, "3 RoCE packets (3 ICRC ok, 1 with other problems), 2 malformed RoCE frames, 0 other frames skipped"},
		{dissect.Stats{RoCE: 2, ICRCOK: 2, Other: 5, OtherIPBad: 2}, "2 RoCE packets (2 ICRC ok), 5 other frames skipped (2 with a damaged IP header)"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}

// FuzzDecode feeds arbitrary frames to the decoder and every rendering:
// no panics, and JSON output is always one valid object.
func FuzzDecode(f *testing.F) {
	for _, op := range []wire.Opcode{wire.OpcodeRCSendOnly, wire.OpcodeRCAcknowledge, wire.OpcodeUDSendOnly,
		wire.TransportRC | wire.OpReadRequest, wire.TransportRC | wire.OpAtomicAcknowledge, wire.OpcodeCNP} {
		f.Add(frame(f, v2Fields(op)))
	}
	// Real frames too, when ../shared is there (the seeds are a bonus, not a prerequisite).
	for _, name := range []string{"rping.pcap", "udaddy.pcap", "atomic_fadd.pcap"} {
		path := filepath.Join(filepath.Dir(testenv.RepoRoot(f)), "shared", "traces", name)
		_ = pcap.ReadFile(path, func(fr pcap.Frame) error { f.Add(bytes.Clone(fr.Data)); return nil })
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var (
			d dissect.Decoder
			p dissect.Packet
		)
		if err := d.Decode(pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}, &p); err != nil {
			return
		}
		p.AppendLine(nil)
		p.AppendVerbose(nil)
		p.Problems()
		if err := checkJSONObject(p.AppendJSON(nil, "fuzz")); err != nil {
			t.Fatalf("%v: %s", err, p.AppendJSON(nil, "fuzz"))
		}
	})
}

func benchPacket(b *testing.B) *dissect.Packet {
	data := frame(b, v2Fields(wire.TransportRC|wire.OpWriteFirst))
	var (
		d dissect.Decoder
		p dissect.Packet
	)
	if err := d.Decode(pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}, &p); err != nil {
		b.Fatal(err)
	}
	return &p
}

func BenchmarkDecode(b *testing.B) {
	data := frame(b, v2Fields(wire.TransportRC|wire.OpWriteFirst))
	var (
		d dissect.Decoder
		p dissect.Packet
	)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		d.Decode(pcap.Frame{Number: 1, Data: data, OrigLen: len(data)}, &p)
	}
}

func BenchmarkSummaryLine(b *testing.B) {
	p := benchPacket(b)
	var buf []byte
	for b.Loop() {
		buf = p.AppendLine(buf[:0])
	}
}

func BenchmarkJSON(b *testing.B) {
	p := benchPacket(b)
	var buf []byte
	for b.Loop() {
		buf = p.AppendJSON(buf[:0], "bench.pcap")
	}
}

// TestDCQCNPackets: a CNP as goroce's notification point sends it (BECN,
// PSN 0, DSCP 48, Not-ECT; RoCE v2 Annex A17.9.3) and a request the
// switch marked CE decode with their names and a valid ICRC: the ICRC
// masks the ECN bits a switch changes (the TOS) and BECN.
func TestDCQCNPackets(t *testing.T) {
	cnp := v2Fields(wire.OpcodeCNP)
	cnp.BTH = wire.BTHFields{Opcode: wire.OpcodeCNP, PKey: wire.DefaultPKey, DestQP: 0x12, BECN: true}
	cnp.IPv4.TOS = 48 << 2
	ce := v2Fields(wire.OpcodeRCSendOnly)
	ce.IPv4.TOS = 26<<2 | 2
	ceData := frame(t, ce)
	ceData[wire.EthernetLen+1] |= 3 // a switch marks CE on the way: the TOS changes, the ICRC does not
	ip := wire.IPv4(ceData[wire.EthernetLen : wire.EthernetLen+wire.IPv4MinLen])
	ip.SetChecksum(ip.ComputeChecksum())
	for _, tc := range []struct {
		name string
		data []byte
		line []string
		verb []string
	}{
		{"CNP", frame(t, cnp), []string{"CNP", "BECN"}, []string{"Differentiated Services Codepoint: 48", "Explicit Congestion Notification: 0 (Not-ECT)", "BECN: True", "CNP reserved"}},
		{"CE", ceData, []string{"RC_SEND_ONLY"}, []string{"Explicit Congestion Notification: 3 (CE)"}},
	} {
		var (
			d dissect.Decoder
			p dissect.Packet
		)
		if err := d.Decode(pcap.Frame{Number: 1, Data: tc.data, OrigLen: len(tc.data)}, &p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if probs := p.Problems(); len(probs) != 0 || !p.ICRCOK() {
			t.Errorf("%s: problems %q, ICRC ok %v", tc.name, probs, p.ICRCOK())
		}
		s, v := p.Summary(), string(p.AppendVerbose(nil))
		for _, w := range tc.line {
			if !strings.Contains(s, w) {
				t.Errorf("%s: summary %q lacks %q", tc.name, s, w)
			}
		}
		for _, w := range tc.verb {
			if !strings.Contains(v, w) {
				t.Errorf("%s: -V lacks %q:\n%s", tc.name, w, v)
			}
		}
	}
}
