package wire_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// TestGoldenTraces parses every frame of every real rxe capture in
// ../shared/traces, recomputes each RoCE packet's ICRC and compares it with
// the captured one, and re-encodes each packet from its parsed fields to the
// identical bytes.
func TestGoldenTraces(t *testing.T) {
	total := 0
	for _, path := range testenv.Traces(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var roce, other int
			var p wire.Packet
			err := pcap.ReadFile(path, func(f pcap.Frame) error {
				err := p.ParseFrame(f.Data, wire.RoCEv2Port)
				if errors.Is(err, wire.ErrNotRoCE) {
					other++
					return nil
				}
				if err != nil {
					t.Errorf("frame %d: %v", f.Number, err)
					return nil
				}
				roce++
				// rxe sends UD and QP1 packets from 0xC000 + hash_32(src QP, 14).
				if d, u := p.DETH(), p.UDP(); d != nil && u != nil && p.Opcode().Transport() == wire.TransportUD {
					if want := wire.UDSport(d.SrcQP()); u.SrcPort() != want {
						t.Errorf("frame %d: UD from QP %d: UDP source port %d, want %d", f.Number, d.SrcQP(), u.SrcPort(), want)
					}
				}
				if err := p.VerifyICRC(); err != nil {
					t.Errorf("frame %d: %v", f.Number, err)
				}
				fields := p.Fields()
				got, err := fields.Append(nil)
				if err != nil {
					t.Errorf("frame %d: re-encode: %v", f.Number, err)
				} else if !bytes.Equal(got, f.Data) {
					t.Errorf("frame %d (%v): re-encoded bytes differ\n got %x\nwant %x", f.Number, p.Opcode(), got, f.Data)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if roce == 0 {
				t.Errorf("no RoCE packets found (%d other frames)", other)
			}
			t.Logf("%d RoCE packets, %d other frames", roce, other)
			total += roce
		})
	}
	t.Logf("%d RoCE packets in all", total)
}
