package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
)

// roce runs the CLI in-process and returns its exit status and output.
func roce(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func trace(t *testing.T, name string) string {
	t.Helper()
	return filepath.Join(testenv.SharedDir(t), "traces", name)
}

// statsLine matches decode's per-file line on stderr.
var statsLine = regexp.MustCompile(`^(.*): (\d+) RoCE packets? \((\d+) ICRC ok\), (\d+) other frames? skipped$`)

// TestDecodeVerifyEveryTrace runs `roce decode --verify` over every real
// rxe capture: exit 0, and a clean count line for each file.
func TestDecodeVerifyEveryTrace(t *testing.T) {
	traces := testenv.Traces(t)
	code, stdout, stderr := roce(t, append([]string{"decode", "--verify"}, traces...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(traces) {
		t.Fatalf("stderr has %d lines for %d files:\n%s", len(lines), len(traces), stderr)
	}
	for i, l := range lines {
		m := statsLine.FindStringSubmatch(l)
		if m == nil || m[1] != traces[i] || m[2] != m[3] || m[2] == "0" {
			t.Errorf("stderr line %q", l)
		}
	}
	for _, tr := range traces {
		if !strings.Contains(stdout, "==> "+tr+" <==\n") {
			t.Errorf("stdout has no header for %s", tr)
		}
	}
}

// TestDecodeRping pins whole summary lines of rping.pcap: the CM handshake,
// each data opcode, an ACK and the disconnect.
func TestDecodeRping(t *testing.T) {
	path := trace(t, "rping.pcap")
	code, stdout, stderr := roce(t, "decode", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := path + ": 125 RoCE packets (125 ICRC ok), 2 other frames skipped\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	lines := strings.Split(stdout, "\n")
	if len(lines) != 126 || lines[125] != "" {
		t.Fatalf("%d lines", len(lines))
	}
	byFrame := map[int]string{}
	for _, l := range lines[:125] {
		n, err := strconv.Atoi(strings.Fields(l)[0])
		if err != nil {
			t.Fatalf("line %q", l)
		}
		byFrame[n] = l
	}
	for n, want := range map[int]string{
		3:   "    3    0.029491 192.0.2.12 → 192.0.2.11 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=0 AckReq CM REQ LocalCommID=0xba6bbd67 ServiceID=0x0000000001061c06 (RDMA_PS_TCP port 7174) LocalQPN=0x000011",
		4:   "    4    0.089871 192.0.2.11 → 192.0.2.12 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=0 AckReq CM REP LocalCommID=0x4944653c RemoteCommID=0xba6bbd67 LocalQPN=0x000011",
		5:   "    5    0.097169 192.0.2.12 → 192.0.2.11 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=1 AckReq CM RTU LocalCommID=0xba6bbd67 RemoteCommID=0x4944653c",
		6:   "    6    0.101224 192.0.2.12 → 192.0.2.11 RoCEv2 RC_SEND_ONLY QP=0x000011 PSN=3422671 AckReq Payload=16",
		7:   "    7    0.102767 192.0.2.11 → 192.0.2.12 RoCEv2 RC_ACKNOWLEDGE QP=0x000011 PSN=3422671 ACK (credits: invalid) MSN=1",
		8:   "    8    0.104427 192.0.2.11 → 192.0.2.12 RoCEv2 RC_RDMA_READ_REQUEST QP=0x000011 PSN=3229744 AckReq VA=0x0000556759fe05c0 RKey=0x000005fa Len=64",
		9:   "    9    0.106255 192.0.2.12 → 192.0.2.11 RoCEv2 RC_RDMA_READ_RESPONSE_ONLY QP=0x000011 PSN=3229744 ACK (credits: invalid) MSN=1 Payload=64",
		14:  "   14    0.111003 192.0.2.11 → 192.0.2.12 RoCEv2 RC_RDMA_WRITE_ONLY QP=0x000011 PSN=3229746 AckReq VA=0x0000556759fdcae0 RKey=0x000004ff Len=64 Payload=64",
		126: "  126    0.144947 192.0.2.12 → 192.0.2.11 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=2 AckReq CM DREQ LocalCommID=0xba6bbd67 RemoteCommID=0x4944653c",
		127: "  127    0.149717 192.0.2.11 → 192.0.2.12 RoCEv2 UD_SEND_ONLY QP=0x000001 PSN=1 AckReq CM DREP LocalCommID=0x4944653c RemoteCommID=0xba6bbd67",
	} {
		if got := byFrame[n]; got != want {
			t.Errorf("frame %d\n got %q\nwant %q", n, got, want)
		}
	}
	// Byte-stable: a second run prints the same bytes.
	if _, again, _ := roce(t, "decode", path); again != stdout {
		t.Error("second run differs")
	}
}

// TestDecodeJSON checks --json: stdout is only JSON Lines, one compact
// object per RoCE packet; counts go to stderr.
func TestDecodeJSON(t *testing.T) {
	for _, name := range []string{"rping.pcap", "rping6.pcap", "atomic_fadd.pcap", "udaddy.pcap", "write_bw_loss.pcap"} {
		path := trace(t, name)
		code, stdout, stderr := roce(t, "decode", "--json", path)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		m := statsLine.FindStringSubmatch(strings.TrimSuffix(stderr, "\n"))
		if m == nil {
			t.Fatalf("%s: stderr %q", name, stderr)
		}
		want, _ := strconv.Atoi(m[2])
		if !strings.HasSuffix(stdout, "\n") {
			t.Fatalf("%s: stdout does not end in a newline", name)
		}
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		if len(lines) != want {
			t.Errorf("%s: %d JSON lines for %d RoCE packets", name, len(lines), want)
		}
		for i, l := range lines {
			var obj map[string]any
			if err := json.Unmarshal([]byte(l), &obj); err != nil {
				t.Fatalf("%s line %d: %v\n%s", name, i+1, err, l)
			}
			var c bytes.Buffer
			json.Compact(&c, []byte(l))
			if c.String() != l {
				t.Fatalf("%s line %d is not compact", name, i+1)
			}
			if obj["file"] != path || obj["icrc_ok"] != true || obj["bth"] == nil {
				t.Fatalf("%s line %d: %s", name, i+1, l)
			}
		}
	}
	// A CM REQ in JSON: the MAD header, CM fields and the IP CM header.
	_, stdout, _ := roce(t, "decode", "--json", trace(t, "rping.pcap"))
	var req struct {
		Frame int
		Info  string
		CM    struct {
			LocalCommID uint32 `json:"local_comm_id"`
			ServiceID   string `json:"service_id"`
			ServiceName string `json:"service_id_name"`
			GID         string `json:"primary_local_port_gid"`
		} `json:"cm"`
		IPCM struct {
			SrcPort int    `json:"src_port"`
			SrcAddr string `json:"src_addr"`
		} `json:"ipcm"`
		MAD struct {
			Attr string `json:"attribute_id_name"`
		} `json:"mad"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &req); err != nil {
		t.Fatal(err)
	}
	if req.Frame != 3 || req.CM.LocalCommID != 0xba6bbd67 || req.CM.ServiceID != "0x0000000001061c06" ||
		req.CM.ServiceName != "RDMA_PS_TCP port 7174" || req.CM.GID != "::ffff:192.0.2.12" ||
		req.IPCM.SrcPort != 0xdf97 || req.IPCM.SrcAddr != "192.0.2.12" || req.MAD.Attr != "ConnectRequest" {
		t.Errorf("REQ: %+v", req)
	}
}

// TestDecodeVerbose checks that -V names every header of the RDMA READ
// (request, responses, ACK) and atomic traces, and every CM message.
func TestDecodeVerbose(t *testing.T) {
	for name, want := range map[string][]string{
		"read_bw.pcap": {"Frame 3: ", "Ethernet II", "Internet Protocol Version 4", "User Datagram Protocol",
			"Base Transport Header", "RETH - RDMA Extended Transport Header", "AETH - ACK Extended Transport Header",
			"RC_RDMA_READ_REQUEST", "RC_RDMA_READ_RESPONSE_FIRST", "RC_RDMA_READ_RESPONSE_MIDDLE", "RC_RDMA_READ_RESPONSE_LAST",
			"Payload Length: ", "Pad: ", "Invariant CRC: ", "(correct)"},
		"atomic_fadd.pcap": {"AtomicETH - Atomic Extended Transport Header", "AtomicAckETH - Atomic ACK Extended Transport Header",
			"AETH - ACK Extended Transport Header", "RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE", "Original Remote Data: "},
		"write_bw_loss.pcap": {"Syndrome: 0x60 (NAK PSN Sequence Error)", "NAK Code: 0"},
		"rping.pcap": {"DETH - Datagram Extended Transport Header", "MAD Header", "CM ConnectRequest (REQ)",
			"CM ConnectReply (REP)", "CM ReadyToUse (RTU)", "CM DisconnectRequest (DREQ)", "CM DisconnectReply (DREP)",
			"IP CM Header (rdma_cm private data)"},
	} {
		code, stdout, stderr := roce(t, "decode", "-V", trace(t, name))
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		for _, w := range want {
			if !strings.Contains(stdout, w) {
				t.Errorf("%s: -V lacks %q", name, w)
			}
		}
	}
}

// corrupt copies a trace to a temporary file in which byte off of frame n
// (counted from the frame's end when negative) is XORed with mask.
func corrupt(t *testing.T, name string, n, off int, mask byte) string {
	t.Helper()
	raw, err := os.ReadFile(trace(t, name))
	if err != nil {
		t.Fatal(err)
	}
	var frame []byte
	pcap.Read(bytes.NewReader(raw), func(f pcap.Frame) error {
		if f.Number == n {
			frame = bytes.Clone(f.Data)
		}
		return nil
	})
	at := bytes.Index(raw, frame)
	if frame == nil || at < 0 || bytes.Count(raw, frame) != 1 {
		t.Fatalf("frame %d not found once", n)
	}
	if off < 0 {
		off += len(frame)
	}
	raw[at+off] ^= mask
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVerifyCorrupted flips one bit of a byte the ICRC covers (the last
// payload byte of frame 6, a SEND): --verify exits 1 naming the frame;
// without --verify the summary flags it and the exit is 0.
func TestVerifyCorrupted(t *testing.T) {
	path := corrupt(t, "rping.pcap", 6, -5, 0x01)
	code, stdout, stderr := roce(t, "decode", "--verify", path)
	if code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(path) + `: frame 6: ICRC mismatch: packet carries 0x[0-9a-f]{8}, should be 0x[0-9a-f]{8}$`).MatchString(stderr) {
		t.Errorf("stderr:\n%s", stderr)
	}
	if !strings.Contains(stderr, "125 RoCE packets (124 ICRC ok, 1 ICRC WRONG)") || !strings.Contains(stderr, "roce: verify: 1 RoCE frame failed") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if !strings.Contains(stdout, "RC_SEND_ONLY QP=0x000011 PSN=3422671 AckReq Payload=16 [ICRC WRONG]\n") {
		t.Errorf("stdout lacks the flagged frame")
	}

	code, stdout, stderr = roce(t, "decode", path)
	if code != 0 || strings.Contains(stderr, "frame 6:") || !strings.Contains(stdout, "[ICRC WRONG]") {
		t.Errorf("without --verify: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestMalformedFrame makes a RoCE frame unparseable (an undefined opcode):
// it is reported on stderr with or without --verify, and only --verify
// turns it into exit status 1.
func TestMalformedFrame(t *testing.T) {
	// The BTH opcode of an ACK (after Ethernet, IPv4 and UDP): 0x11 ^ 0x08
	// is 0x19, which IBTA does not define.
	path := corrupt(t, "rping.pcap", 7, 14+20+8, 0x08)
	for _, verify := range []bool{false, true} {
		args := []string{"decode", path}
		want := 0
		if verify {
			args = []string{"decode", "--verify", path}
			want = exitError
		}
		code, stdout, stderr := roce(t, args...)
		if code != want {
			t.Errorf("verify=%v: exit %d, want %d", verify, code, want)
		}
		if !strings.Contains(stderr, path+": frame 7: ") || !strings.Contains(stderr, "1 malformed RoCE frame") {
			t.Errorf("verify=%v: stderr:\n%s", verify, stderr)
		}
		if strings.Contains(stdout, "\n    7 ") {
			t.Errorf("verify=%v: frame 7 printed", verify)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pcap")
	notPcap := filepath.Join(t.TempDir(), "text.pcap")
	os.WriteFile(notPcap, []byte("hello, world, this is not a capture file\n"), 0o644)
	binary := filepath.Join(t.TempDir(), "binary.pcap")
	os.WriteFile(binary, []byte{0x8b, 0xb8, 0x39, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}, 0o644)
	empty, short := filepath.Join(t.TempDir(), "empty.pcap"), filepath.Join(t.TempDir(), "short.pcap")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(short, []byte{0xd4}, 0o644)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"decode", missing}, exitError, "no such file or directory"},
		// A file that is not a capture says so, whatever it holds.
		{[]string{"decode", notPcap}, exitError, "roce: " + notPcap + ": not a pcap or pcapng file: it starts with 68656c6c, where a pcap file starts with a1b2c3d4"},
		{[]string{"decode", binary}, exitError, "roce: " + binary + ": not a pcap or pcapng file: it starts with 8bb83900"},
		{[]string{"decode", empty}, exitError, "roce: " + empty + ": not a pcap or pcapng file: the file is empty\n"},
		{[]string{"decode", short}, exitError, "roce: " + short + ": not a pcap or pcapng file: it holds only 1 of the 4 bytes of a magic number\n"},
		{[]string{"decode"}, exitUsage, "requires at least 1 arg"},
		{[]string{"decode", "--bogus", "x"}, exitUsage, "unknown flag: --bogus"},
		{[]string{"decode", "--udp-port", "70000", "x"}, exitUsage, "roce: decode: Invalid argument: --udp-port 70000: the UDP port should be between 1 and 65535\n"},
		{[]string{"decode", "--udp-port", "0", "x"}, exitUsage, "roce: decode: Invalid argument: --udp-port 0: the UDP port should be between 1 and 65535\n"},
		{[]string{"decode", "-V", "--json", "x"}, exitUsage, "mutually exclusive"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate" for "roce"`},
		{[]string{"dmeo"}, exitUsage, "did you mean demo"}, // "demo or dev?"
	} {
		code, stdout, stderr := roce(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) || !strings.HasPrefix(stderr, "roce: ") && tc.code == exitUsage {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
		if stdout != "" {
			t.Errorf("%q: stdout %q", tc.args, stdout)
		}
	}
}

// TestDecodeKeepsGoing decodes a good file after a missing one.
func TestDecodeKeepsGoing(t *testing.T) {
	code, stdout, stderr := roce(t, "decode", "/nonexistent.pcap", trace(t, "rping.pcap"))
	if code != exitError || !strings.Contains(stdout, "CM DREP") || !strings.Contains(stderr, "1 of 2 files could not be read") {
		t.Errorf("exit %d\nstderr %s", code, stderr)
	}
}

// TestDemoCaptureIsTheSharedTrace checks the embedded capture is an exact
// copy of ../shared/traces/rping.pcap.
func TestDemoCaptureIsTheSharedTrace(t *testing.T) {
	b, err := os.ReadFile(trace(t, "rping.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, demoPcap) {
		t.Error("cmd/roce/demo/rping.pcap differs from ../shared/traces/rping.pcap")
	}
}

func TestRootHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{nil, {"--help"}, {"help"}} {
		code, stdout, stderr := roce(t, args...)
		if code != 0 || stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
		for _, want := range []string{"Usage:", "decode", "demo", "no kernel module, no cgo, no RDMA hardware"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q: help lacks %q", args, want)
			}
		}
	}
	code, stdout, _ := roce(t, "--version")
	if code != 0 || !strings.HasPrefix(stdout, "roce ") || !strings.Contains(stdout, "go1.") {
		t.Errorf("--version: %d %q", code, stdout)
	}
	code, stdout, _ = roce(t, "decode", "--help")
	if code != 0 || !strings.Contains(stdout, "--verify") || !strings.Contains(stdout, "--udp-port uint16") {
		t.Errorf("decode --help: %d\n%s", code, stdout)
	}
}
