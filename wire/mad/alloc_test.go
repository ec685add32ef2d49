package mad

import "testing"

// TestDecodeAllocs checks that decoding allocates nothing: Parse, the typed
// accessors, the getters, Fields and the IP CM header; and that encoding into
// a buffer with room allocates nothing either.
func TestDecodeAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	b := sampleMessages()[0].bytes()
	var sink uint64
	decode := testing.AllocsPerRun(100, func() {
		m, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		req, ok := m.REQ()
		if !ok {
			t.Fatal("not a REQ")
		}
		f := req.Fields()
		sink += uint64(f.LocalQPN) + uint64(req.PrimaryFlowLabel()) + m.Header().TransactionID()
		h, err := m.IPCM()
		if err != nil {
			t.Fatal(err)
		}
		a := h.SrcAddr()
		sink += uint64(a.BitLen())
	})
	if decode != 0 {
		t.Errorf("decoding a REQ allocates %.1f times", decode)
	}

	buf := make([]byte, 0, Size)
	hdr := NewCMHeader(AttrREQ, 1)
	req := sampleREQ()
	encode := testing.AllocsPerRun(100, func() {
		buf = hdr.Append(buf[:0])
		buf = req.Append(buf)
		if err := req.Validate(); err != nil {
			t.Fatal(err)
		}
	})
	if encode != 0 {
		t.Errorf("encoding a REQ into a buffer with room allocates %.1f times", encode)
	}

	walk := testing.AllocsPerRun(100, func() {
		r := REQ(b[HeaderLen:])
		for _, v := range r.All() {
			sink += v.Uint()
		}
	})
	if walk != 0 {
		t.Errorf("walking a REQ allocates %.1f times", walk)
	}
	_ = sink
}
