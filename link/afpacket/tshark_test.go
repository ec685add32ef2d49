package afpacket

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// TestV1OnTheWireInTshark captures, with an AF_PACKET socket of its own on
// the receiving veth, the RoCE v1 frames one link sends another, and has
// tshark decode them: Ethertype 0x8915, GRH, InfiniBand BTH, no malformed
// or error marks; goroce's decoder verifies every ICRC.
func TestV1OnTheWireInTshark(t *testing.T) {
	tshark := testenv.Tshark(t)
	ha, hb := nettest.VethPair(t, nettest.Options{MTU: 1500})
	gid := func(h *nettest.Host) netip.Addr { return netip.AddrFrom16(h.IPv4.As16()) }
	var a, b *Link
	var sniff *Link
	if err := ha.Do(func() (err error) {
		a, err = New(Config{Ifindex: ha.Ifindex, GIDs: []netip.Addr{gid(ha)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := hb.Do(func() (err error) {
		if b, err = New(Config{Ifindex: hb.Ifindex, GIDs: []netip.Addr{gid(hb)}}); err != nil {
			return err
		}
		// A second socket on B's netdev sees the same frames, raw.
		sniff, err = New(Config{Ifindex: hb.Ifindex, GIDs: []netip.Addr{gid(hb)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer sniff.Close()
	a.Resolver().SetSources([]netip.Addr{ha.IPv4})
	const n = 20
	for i := 0; i < n; i++ {
		pk := linktest.TransportPacket(a.Headroom(), 0x11, wire.PSN(i), bytes.Repeat([]byte{byte(i)}, 50*i)) // up to 950 bytes: within the 1460-byte MTU
		pk.Addr = link.Addr{Version: wire.RoCEv1, SrcGID: gid(ha), DstGID: gid(hb), TrafficClass: 0x20, FlowLabel: 7}
		if _, err := a.Send([]link.Packet{pk}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(t.TempDir(), "v1.pcap")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcap.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	bufs := linktest.NewBuffers(n)
	for got < n {
		k, err := sniff.Recv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, pk := range bufs[:k] {
			// Recv points into the whole frame it read: Buf[0:] is the frame.
			if err := w.WritePacket(time.Now(), pk.Buf[:pk.Off+pk.Len]); err != nil {
				t.Fatal(err)
			}
		}
		got += k
	}
	f.Close()
	var verified int
	if err := pcap.ReadFile(file, func(fr pcap.Frame) error {
		var p wire.Packet
		if err := p.ParseFrame(fr.Data, wire.RoCEv2Port); err != nil {
			t.Errorf("frame %d: %v", fr.Number, err)
			return nil
		}
		if p.Version != wire.RoCEv1 {
			t.Errorf("frame %d is %v", fr.Number, p.Version)
		}
		if err := p.VerifyICRC(); err != nil {
			t.Errorf("frame %d: %v", fr.Number, err)
		}
		verified++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tshark, "-r", file, "--disable-protocol", "rpcordma", "-T", "fields",
		"-e", "eth.type", "-e", "frame.protocols", "-e", "infiniband.bth.opcode", "-e", "_ws.malformed", "-e", "_ws.expert.severity")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) != n || verified != n {
		t.Fatalf("tshark saw %d frames, goroce verified %d, want %d", len(lines), verified, n)
	}
	for i, l := range lines {
		f := append(strings.Split(l, "\t"), "", "", "", "", "")
		if f[0] != "0x8915" || !strings.Contains(f[1], "eth:ethertype:infiniband") || f[2] != "4" || f[3] != "" || f[4] != "" {
			t.Errorf("frame %d in tshark: %q", i+1, l)
		}
	}
}
