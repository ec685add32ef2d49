package dissect

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/wire"
)

func TestSplitWords(t *testing.T) {
	for name, want := range map[string]string{
		"LocalCommID":          "Local Comm ID",
		"LocalCAGUID":          "Local CA GUID",
		"PrimaryLocalPortGID":  "Primary Local Port GID",
		"RNRRetryCount":        "RNR Retry Count",
		"LocalQPN":             "Local QPN",
		"LocalEEContext":       "Local EE Context",
		"TargetACKDelay":       "Target ACK Delay",
		"MessageMRAed":         "Message MRAed",
		"PathPacketPayloadMTU": "Path Packet Payload MTU",
		"IPVersion":            "IP Version",
		"SRQ":                  "SRQ",
		"QPN":                  "QPN",
		"Reserved90":           "Reserved90",
		"BaseVersion":          "Base Version",
		"RDCExists":            "RDC Exists",
	} {
		if got := strings.Join(splitWords(name), " "); got != want {
			t.Errorf("splitWords(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestKeyOf(t *testing.T) {
	for in, want := range map[string]string{"CNP reserved": "cnp_reserved", "DestQP": "dest_qp", "AtomicAckETH": "atomic_ack_eth", "QPNumber": "qp_number"} {
		if got := keyOf(in); got != want {
			t.Errorf("keyOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExtHeadersComplete checks that every extended header wire knows has a
// dissector here with a unique JSON key.
func TestExtHeadersComplete(t *testing.T) {
	keys := map[string]bool{}
	for _, h := range allHeaders() {
		x, ok := extHeaders[h]
		if !ok {
			t.Errorf("no dissector for %v", h)
			continue
		}
		if !strings.HasPrefix(x.name, h.String()) || keys[x.key] {
			t.Errorf("%v: name %q key %q", h, x.name, x.key)
		}
		keys[x.key] = true
	}
	if len(extHeaders) != len(allHeaders()) {
		t.Errorf("%d dissectors for %d headers", len(extHeaders), len(allHeaders()))
	}
	if got := len(allHeaders()); got != int(wire.HdrCNPReserved)+1 {
		t.Errorf("%d headers", got)
	}
}

func TestValueText(t *testing.T) {
	for _, tc := range []struct {
		v    Value
		text string
		json string
	}{
		{Hex(0x11, 24), "0x000011", "17"},
		{Hex(0x556759fe05c0, 64), "0x0000556759fe05c0", `"0x0000556759fe05c0"`},
		{Uint(7, 8).Named("seven"), "7 (seven)", "7"},
		{Bool(true), "True", "true"},
		{Text("a\"b\x01\xff"), "a\"b\x01\xff", `"a\"b\u0001\ufffd"`},
		{Bytes(nil), "(none)", `""`},
		{Bytes(make([]byte, 40)), strings.Repeat("00", 32) + "… (40 bytes)", `"` + strings.Repeat("00", 40) + `"`},
	} {
		if got := tc.v.String(); got != tc.text {
			t.Errorf("text %q, want %q", got, tc.text)
		}
		if got := string(tc.v.appendJSON(nil)); got != tc.json {
			t.Errorf("json %s, want %s", got, tc.json)
		}
	}
}

func TestUniqueKeys(t *testing.T) {
	nodes := []Node{
		{Key: "a", Value: Uint(1, 8)},
		{Key: "a", Value: Uint(1, 8)},
		{Key: "a_2", Value: Uint(1, 8)},
		{Key: "s", Value: Hex(1, 8), Children: []Node{{Key: "value"}, {Key: "name"}, {Key: "x"}}},
	}
	uniqueKeys(nodes, false)
	var got []string
	for _, n := range nodes {
		got = append(got, n.Key)
	}
	for _, n := range nodes[3].Children {
		got = append(got, n.Key)
	}
	if g := strings.Join(got, " "); g != "a a_2 a_2_2 s value_2 name_2 x" {
		t.Errorf("keys %s", g)
	}
}
