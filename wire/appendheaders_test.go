package wire_test

import (
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestAppendHeaders checks that the headers AppendHeaders writes before a
// transport packet, with the ICRC computed over them, give the frame
// Append writes, for every encapsulation (VLAN tags included), and that
// it allocates nothing into a buffer with room.
func TestAppendHeaders(t *testing.T) {
	for _, e := range encaps {
		t.Run(e.name, func(t *testing.T) {
			f := sampleFields(0x04, e, samplePayload(100))
			f.Trailer = nil
			want := encode(t, f)
			tr := append(f.AppendTransport(nil), 0, 0, 0, 0)
			b, nlen, err := f.AppendHeaders(make([]byte, 0, 128), len(tr))
			if err != nil {
				t.Fatal(err)
			}
			b = append(b, tr...)
			net := wire.EthernetLen
			if e.vlan {
				net += wire.VLANTagLen
			}
			c := wire.ICRC(b[net:len(b)-wire.ICRCLen], nlen, e.version)
			b[len(b)-4], b[len(b)-3], b[len(b)-2], b[len(b)-1] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
			if string(b) != string(want) {
				t.Errorf("AppendHeaders + transport + ICRC:\n%x\nAppend:\n%x", b, want)
			}
			buf := make([]byte, 0, 128)
			if n := testing.AllocsPerRun(100, func() { f.AppendHeaders(buf, len(tr)) }); n != 0 {
				t.Errorf("AppendHeaders: %v allocations, want 0", n)
			}
		})
	}
}
