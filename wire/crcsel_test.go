package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

// withCRC makes updateIEEE use method for the rest of the test.
func withCRC(t *testing.T, method string) {
	t.Helper()
	saved, savedWhy := crcTable, crcChoice
	t.Cleanup(func() { crcTable, crcChoice = saved, savedWhy })
	crcTable, crcChoice = chooseCRC(method, nil)
	if m, _ := ICRCMethod(); m != method {
		t.Fatalf("chooseCRC(%q): method %q", method, m)
	}
}

// TestUpdateSlicing16 checks the slicing-by-16 loop against hash/crc32 for
// every length up to 300 bytes and some longer, from unaligned starts and
// several starting CRCs, and its tables entry by entry against the
// bytewise CRC.
func TestUpdateSlicing16(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	p := make([]byte, 4104)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	lens := []int{1023, 1024, 1025, 4096, 4099}
	for n := range 301 {
		lens = append(lens, n)
	}
	for _, crc := range []uint32{0, 0xFFFFFFFF, 0x12345678, r.Uint32()} {
		for _, n := range lens {
			for _, off := range []int{0, 1, 3} {
				b := p[off : off+n]
				if got, want := updateSlicing16(crc, b), crc32.Update(crc, crc32.IEEETable, b); got != want {
					t.Fatalf("crc %#x, %d bytes at %d: %#08x, want %#08x", crc, n, off, got, want)
				}
			}
		}
	}
	checkSlicingTables(t, ieeeSlicing[:])
}

// TestChooseCRC: the variable fixes the method; auto (or nothing) measures
// and says so with the times; another value is reported, naming the valid
// ones, and measured.
func TestChooseCRC(t *testing.T) {
	if table, why := chooseCRC("hash", nil); table || why != "GOROCE_ICRC=hash" {
		t.Errorf("hash: table %v, %q", table, why)
	}
	if table, why := chooseCRC("table", nil); !table || why != "GOROCE_ICRC=table" {
		t.Errorf("table: table %v, %q", table, why)
	}
	for _, env := range []string{"", "auto"} {
		if _, why := chooseCRC(env, nil); !strings.HasPrefix(why, "measured: 1 KiB in ") || !strings.Contains(why, "hash/crc32") || !strings.Contains(why, "slicing-by-16") {
			t.Errorf("%q: %q", env, why)
		}
	}
	var warn strings.Builder
	if _, why := chooseCRC("tables", &warn); !strings.HasPrefix(why, "measured: ") ||
		warn.String() != "goroce: GOROCE_ICRC=\"tables\" is not one of auto, hash, table: measuring (auto)\n" {
		t.Errorf("bad value: %q, warned %q", why, warn.String())
	}
	m, why := ICRCMethod()
	t.Logf("this process: %s (%s)", m, why)
}

// TestICRCBothMethods runs the ICRC tests with each loop in updateIEEE.
func TestICRCBothMethods(t *testing.T) {
	for _, m := range []string{ICRCHash, ICRCTable} {
		t.Run(m, func(t *testing.T) {
			withCRC(t, m)
			TestICRCPrefixLengths(t)
			TestICRCInPlace(t)
			for _, n := range []int{0, 1, 63, 64, 1024, 4097} {
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(i*13 + 5)
				}
				if got, want := UpdateCRC32(7, p), crc32.Update(7, crc32.IEEETable, p); got != want {
					t.Errorf("UpdateCRC32 %d bytes: %#08x, want %#08x", n, got, want)
				}
			}
		})
	}
	// The same results either way, so that the table loop is the one in
	// use is seen by spoiling a copy of its tables: the ICRC must change.
	withCRC(t, ICRCTable)
	spoilt := *ieeeSlicing
	for i := range spoilt[15] { // the first byte's table in every 16-byte step
		spoilt[15][i] ^= 1
	}
	saved := ieeeSlicing
	ieeeSlicing = &spoilt
	defer func() { ieeeSlicing = saved }()
	var p Packet
	if err := p.ParseFrame(inPlaceSamplesOf(t, 4096)[1], RoCEv2Port); err != nil {
		t.Fatal(err)
	}
	if p.VerifyICRC() == nil {
		t.Error("spoilt tables did not change the ICRC: updateIEEE does not use updateSlicing16")
	}
}

// FuzzUpdateSlicing16: the table loop agrees with hash/crc32 on any bytes
// from any starting CRC.
func FuzzUpdateSlicing16(f *testing.F) {
	f.Add(uint32(0), []byte("123456789"))
	f.Add(uint32(0xFFFFFFFF), make([]byte, 1024))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := updateSlicing16(crc, p), crc32.Update(crc, crc32.IEEETable, p); got != want {
			t.Fatalf("crc %#x, %d bytes: %#08x, want %#08x", crc, len(p), got, want)
		}
	})
}
