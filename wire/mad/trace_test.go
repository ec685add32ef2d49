package mad

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/internal/testenv"
)

// traceMAD is one CM MAD found in a capture.
type traceMAD struct {
	file  string // base name of the pcap
	frame int    // 1-based frame number, as tshark numbers them
	mad   []byte // 256 bytes
}

// findTraces returns the pcap files of the shared traces (the repository
// root's ../shared/traces). Without them it skips the test, or fails it
// when CI=true.
func findTraces(t testing.TB) []string {
	t.Helper()
	return testenv.Traces(t)
}

// traceMADs extracts every CM MAD from the shared traces: RoCE v2 frames
// (UDP destination port 4791) carrying a UD SEND-only (BTH opcode 0x64) to
// QP1, whose payload after BTH and DETH is one 256-byte MAD and the ICRC.
func traceMADs(t testing.TB) []traceMAD {
	t.Helper()
	var out []traceMAD
	for _, path := range findTraces(t) {
		out = append(out, madsInPcap(t, path)...)
	}
	return out
}

func madsInPcap(t testing.TB, path string) []traceMAD {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []traceMAD
	for frame := 1; ; frame++ {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s frame %d: %v", path, frame, err)
		}
		payload, ok := qp1Payload(data)
		if !ok {
			continue
		}
		if len(payload) != Size+4 { // MAD + ICRC
			t.Fatalf("%s frame %d: QP1 payload is %d bytes, want %d", path, frame, len(payload), Size+4)
		}
		out = append(out, traceMAD{filepath.Base(path), frame, payload[:Size:Size]})
	}
	return out
}

// qp1Payload returns what follows the DETH of a RoCE v2 UD SEND-only to QP1.
func qp1Payload(frame []byte) ([]byte, bool) {
	const (
		ethLen, udpLen, bthLen, dethLen = 14, 8, 12, 8
		roceV2Port                      = 4791
		opUDSendOnly                    = 0x64
	)
	if len(frame) < ethLen {
		return nil, false
	}
	var l4 []byte
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800: // IPv4
		ip := frame[ethLen:]
		if len(ip) < 20 || ip[9] != 17 {
			return nil, false
		}
		ihl := int(ip[0]&0x0f) * 4
		if len(ip) < ihl {
			return nil, false
		}
		l4 = ip[ihl:]
	case 0x86dd: // IPv6, no extension headers in these traces
		ip := frame[ethLen:]
		if len(ip) < 40 || ip[6] != 17 {
			return nil, false
		}
		l4 = ip[40:]
	default:
		return nil, false
	}
	if len(l4) < udpLen+bthLen+dethLen || binary.BigEndian.Uint16(l4[2:]) != roceV2Port {
		return nil, false
	}
	bth := l4[udpLen:]
	destQP := uint32(bth[5])<<16 | uint32(bth[6])<<8 | uint32(bth[7])
	if bth[0] != opUDSendOnly || destQP != 1 {
		return nil, false
	}
	return bth[bthLen+dethLen:], true
}
