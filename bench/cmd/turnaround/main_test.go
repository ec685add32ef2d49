package main

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// pingPong writes the two captures of n round trips between a (the
// client, its turnaround ta) and b (tb), the wire one way w, each message
// followed 5 µs later by the ACK of the peer's last one; drop leaves out
// b's message of that index from a's capture and dropOut from b's own (a
// tap's loss).
func pingPong(t *testing.T, dir string, n int, ta, tb, w time.Duration, drop, dropOut int) (fa, fb string) {
	t.Helper()
	a, b := netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.2")
	type pkt struct {
		at       time.Time
		src, dst netip.Addr
		op       byte
		psn      uint32
	}
	var capA, capB []pkt
	now := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	for i := range n {
		psn := uint32(0xFFFFF0 + i) // wraps past 2^24
		// a sends; b receives after the wire, answers after tb.
		capA = append(capA, pkt{now, a, b, 0x04, psn}, pkt{now.Add(5 * time.Microsecond), a, b, opAck, psn})
		arr := now.Add(w)
		capB = append(capB, pkt{arr, a, b, 0x04, psn}, pkt{arr.Add(5 * time.Microsecond), a, b, opAck, psn})
		dep := arr.Add(tb)
		if i != dropOut {
			capB = append(capB, pkt{dep, b, a, 0x04, psn + 7})
		}
		capB = append(capB, pkt{dep.Add(5 * time.Microsecond), b, a, opAck, psn})
		back := dep.Add(w)
		if i != drop {
			capA = append(capA, pkt{back, b, a, 0x04, psn + 7})
		}
		capA = append(capA, pkt{back.Add(5 * time.Microsecond), b, a, opAck, psn})
		now = back.Add(ta)
	}
	write := func(name string, pkts []pkt) string {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pw := pcapgo.NewWriter(f)
		if err := pw.WriteFileHeader(96, layers.LinkTypeEthernet); err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			bth := make([]byte, 16)
			bth[0] = p.op
			bth[9], bth[10], bth[11] = byte(p.psn>>16), byte(p.psn>>8), byte(p.psn)
			eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
			ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: p.src.AsSlice(), DstIP: p.dst.AsSlice()}
			udp := &layers.UDP{SrcPort: 4791, DstPort: 4791}
			udp.SetNetworkLayerForChecksum(ip)
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(bth)); err != nil {
				t.Fatal(err)
			}
			d := buf.Bytes()
			if err := pw.WritePacket(gopacket.CaptureInfo{Timestamp: p.at, CaptureLength: len(d), Length: len(d)}, d); err != nil {
				t.Fatal(err)
			}
		}
		return f.Name()
	}
	return write("a.pcap", capA), write("b.pcap", capB)
}

// TestSplit: each side's turnaround and the wire come out as they were
// made, the ACKs ignored, and a message the tap missed (its PSN skipped)
// counts as no turnaround of a whole round trip.
func TestSplit(t *testing.T) {
	fa, fb := pingPong(t, t.TempDir(), 50, 100*time.Microsecond, 60*time.Microsecond, 50*time.Microsecond, 20, 30)
	var sides [2]*side
	for i, arg := range []struct{ addr, file string }{{"10.9.0.1", fa}, {"10.9.0.2", fb}} {
		f, err := os.Open(arg.file)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := readMsgs(f, netip.MustParseAddr(arg.addr), 4791)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		s := &side{addr: netip.MustParseAddr(arg.addr), file: arg.file}
		s.turn, s.roundTrips = analyse(msgs)
		sides[i] = s
	}
	// a answered 49 of b's 50 messages, and saw 49 of them (one missed):
	// 48 turnarounds, and no round trip across the gap.
	if got := len(sides[0].turn); got != 48 {
		t.Errorf("a's turnarounds: %d, want 48", got)
	}
	// b's tap missed its own 31st message: 48 turnarounds (the next one
	// is not counted either: its departure's PSN does not follow the last
	// seen), and 47 round trips (none across the gap).
	if got := len(sides[1].turn); got != 48 {
		t.Errorf("b's turnarounds: %d, want 48", got)
	}
	if got := len(sides[1].roundTrips); got != 47 {
		t.Errorf("b's round trips: %d, want 47", got)
	}
	for _, s := range sides {
		for _, d := range s.turn {
			if d > 100*time.Microsecond {
				t.Errorf("%v: a turnaround of %v: longer than any made", s.addr, d)
			}
		}
		for _, d := range s.roundTrips {
			if d > 260*time.Microsecond {
				t.Errorf("%v: a round trip of %v: longer than any made", s.addr, d)
			}
		}
	}
	var out bytes.Buffer
	report(&out, sides, true)
	if got, want := out.String(), "100.0\t60.0\t100.0\t48\t48\n"; got != want {
		t.Errorf("-tsv: %q, want %q (turnarounds 100 and 60 µs, the wire 2 × 50)", got, want)
	}
	out.Reset()
	report(&out, sides, false)
	if !strings.Contains(out.String(), "the wire, both ways (a side's round trip less both turnarounds, medians): 100.0 µs from 10.9.0.1's, 100.0 µs from 10.9.0.2's") {
		t.Errorf("the report:\n%s", out.String())
	}
}

// TestCLI: the command reads the two captures named on its command line
// and says what is wrong with a bad argument or file.
func TestCLI(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "turnaround")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fa, fb := pingPong(t, dir, 10, 30*time.Microsecond, 20*time.Microsecond, 40*time.Microsecond, -1, -1)
	out, err := exec.Command(bin, "-tsv", "10.9.0.1="+fa, "10.9.0.2="+fb).CombinedOutput()
	if err != nil || string(out) != "30.0\t20.0\t80.0\t9\t10\n" {
		t.Errorf("turnaround -tsv: %v, %q", err, out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{fa, fb}, 2, "want ADDR=CAPTURE"},
		{[]string{"10.9.0.1=" + fa}, 2, "usage: turnaround"},
		{[]string{"10.9.0.1=" + filepath.Join(dir, "none"), "10.9.0.2=" + fb}, 1, "no such file"},
		{[]string{"10.9.0.1=" + bin, "10.9.0.2=" + fb}, 1, "not a pcap capture"},
		{[]string{"10.9.0.3=" + fa, "10.9.0.2=" + fb}, 1, "no message of 10.9.0.3's answered"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("turnaround %q: %v, want exit status %d and %q:\n%s", c.args, err, c.code, c.want, out)
		}
	}
}
