package pcap_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/linktest"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// The decorated link still passes the conformance suite, and what it wrote
// is a capture in which every RoCE frame parses and its ICRC verifies.
func TestRecordsEveryPacket(t *testing.T) {
	var file bytes.Buffer
	w, err := pcap.NewWriter(&file)
	if err != nil {
		t.Fatal(err)
	}
	var recorded []*pcap.Link
	gids := [2]netip.Addr{netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")}
	linktest.Run(t, func(t *testing.T) linktest.Pair {
		f := fabric.New()
		t.Cleanup(func() { f.Close() })
		a, _ := f.AddPort(fabric.PortConfig{GIDs: gids[:1]})
		b, _ := f.AddPort(fabric.PortConfig{GIDs: gids[1:]})
		pa, pb := pcap.New(a, w), pcap.New(b, w)
		recorded = append(recorded, pa, pb)
		return linktest.Pair{A: pa, B: pb, AGID: gids[0], BGID: gids[1], Version: wire.RoCEv2}
	})
	var written uint64
	for _, l := range recorded {
		n, failed := l.Frames()
		if failed != 0 {
			t.Errorf("%d frames could not be recorded", failed)
		}
		written += n
	}
	var frames, ok uint64
	err = pcap.Read(&file, func(f pcap.Frame) error {
		frames++
		var p wire.Packet
		if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			if errors.Is(err, wire.ErrNotRoCE) {
				t.Errorf("frame %d is not RoCE", f.Number)
			} else {
				t.Errorf("frame %d: %v", f.Number, err)
			}
			return nil
		}
		if err := p.VerifyICRC(); err != nil {
			t.Errorf("frame %d: %v", f.Number, err)
			return nil
		}
		ok++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if frames == 0 || frames != written || ok != frames {
		t.Errorf("recorded %d, read back %d frames, %d verified", written, frames, ok)
	}
}
