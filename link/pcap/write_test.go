package pcap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type frameIn struct {
	ts   time.Time
	data []byte
}

func testFrames() []frameIn {
	big := make([]byte, 9018) // a jumbo frame
	for i := range big {
		big[i] = byte(i * 7)
	}
	return []frameIn{
		{time.Unix(1700000000, 123456789), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00}},
		{time.Unix(1700000001, 999999999), bytes.Repeat([]byte{0xAB}, 60)},
		{time.Unix(0, 1), []byte{}},
		{time.Unix(4294967295, 0), big},
		{time.Unix(1700000002, 5000), bytes.Repeat([]byte{0, 0xFF}, 757)},
	}
}

func readAll(t *testing.T, b []byte) []Frame {
	t.Helper()
	var got []Frame
	err := Read(bytes.NewReader(b), func(f Frame) error {
		f.Data = bytes.Clone(f.Data)
		got = append(got, f)
		return nil
	})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return got
}

func TestWriterRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		new   func(*bytes.Buffer) (*Writer, error)
		magic uint32
		res   time.Duration
	}{
		{"nanoseconds", func(b *bytes.Buffer) (*Writer, error) { return NewWriter(b) }, 0xA1B23C4D, time.Nanosecond},
		{"microseconds", func(b *bytes.Buffer) (*Writer, error) { return NewWriterMicros(b) }, 0xA1B2C3D4, time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := tc.new(&buf)
			if err != nil {
				t.Fatal(err)
			}
			hdr := buf.Bytes()
			if len(hdr) != 24 {
				t.Fatalf("file header is %d bytes, want 24", len(hdr))
			}
			if m := binary.LittleEndian.Uint32(hdr[0:]); m != tc.magic {
				t.Errorf("magic %#x, want %#x", m, tc.magic)
			}
			if v := [2]uint16{binary.LittleEndian.Uint16(hdr[4:]), binary.LittleEndian.Uint16(hdr[6:])}; v != [2]uint16{2, 4} {
				t.Errorf("version %v, want 2.4", v)
			}
			if s := binary.LittleEndian.Uint32(hdr[16:]); s != SnapLen {
				t.Errorf("snaplen %d, want %d", s, SnapLen)
			}
			if lt := binary.LittleEndian.Uint32(hdr[20:]); lt != 1 {
				t.Errorf("link type %d, want 1 (Ethernet)", lt)
			}
			in := testFrames()
			for _, f := range in {
				frame := bytes.Clone(f.data)
				if err := w.WritePacket(f.ts, frame); err != nil {
					t.Fatal(err)
				}
				for i := range frame { // WritePacket must not retain frame
					frame[i] ^= 0xFF
				}
			}
			got := readAll(t, buf.Bytes())
			if len(got) != len(in) {
				t.Fatalf("read %d frames, wrote %d", len(got), len(in))
			}
			for i, f := range got {
				want := in[i]
				if f.Number != i+1 {
					t.Errorf("frame %d: Number %d", i+1, f.Number)
				}
				if !bytes.Equal(f.Data, want.data) {
					t.Errorf("frame %d: data differs", i+1)
				}
				if f.OrigLen != len(want.data) {
					t.Errorf("frame %d: OrigLen %d, want %d", i+1, f.OrigLen, len(want.data))
				}
				if wt := want.ts.Truncate(tc.res); !f.Time.Equal(wt) {
					t.Errorf("frame %d: time %v, want %v", i+1, f.Time.UTC(), wt.UTC())
				}
			}
		})
	}
}

// TestWriterFile writes a file on disk and reads it back with ReadFile.
func TestWriterFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(file)
	if err != nil {
		t.Fatal(err)
	}
	in := testFrames()
	for _, f := range in {
		if err := w.WritePacket(f.ts, f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := file.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := ReadFile(path, func(f Frame) error {
		if !bytes.Equal(f.Data, in[n].data) {
			t.Errorf("frame %d differs", f.Number)
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != len(in) {
		t.Errorf("read %d frames, wrote %d", n, len(in))
	}
}

// TestWriterSnapLen checks that a frame longer than SnapLen is truncated to
// SnapLen with its original length kept, and that the file still reads.
func TestWriterSnapLen(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, SnapLen+100)
	for i := range frame {
		frame[i] = byte(i)
	}
	for _, n := range []int{SnapLen, SnapLen + 1, SnapLen + 100} {
		if err := w.WritePacket(time.Unix(1, 0), frame[:n]); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, buf.Bytes())
	if len(got) != 3 {
		t.Fatalf("read %d frames, want 3", len(got))
	}
	for i, n := range []int{SnapLen, SnapLen + 1, SnapLen + 100} {
		if !bytes.Equal(got[i].Data, frame[:SnapLen]) {
			t.Errorf("frame %d: captured %d bytes, want the first %d", i+1, len(got[i].Data), SnapLen)
		}
		if got[i].OrigLen != n {
			t.Errorf("frame %d: OrigLen %d, want %d", i+1, got[i].OrigLen, n)
		}
	}
}

// TestWriterConcurrent writes from many goroutines at once (run with
// -race) and checks that every record arrives whole.
func TestWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 8, 200
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frame := make([]byte, 64)
			for i := range perWriter {
				// Each frame is filled with one byte and carries its
				// writer and index, so a torn record shows.
				for j := range frame {
					frame[j] = byte(g)
				}
				binary.BigEndian.PutUint32(frame[:4], uint32(g<<16|i))
				if err := w.WritePacket(time.Unix(int64(1000+i), int64(g)), frame[:16+i%48]); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	seen := map[uint32]bool{}
	for _, f := range readAll(t, buf.Bytes()) {
		id := binary.BigEndian.Uint32(f.Data)
		g, i := int(id>>16), int(id&0xFFFF)
		if len(f.Data) != 16+i%48 || !bytes.Equal(f.Data[4:], bytes.Repeat([]byte{byte(g)}, len(f.Data)-4)) {
			t.Fatalf("frame %d torn: %x", f.Number, f.Data)
		}
		if seen[id] {
			t.Fatalf("frame %d: writer %d index %d seen twice", f.Number, g, i)
		}
		seen[id] = true
	}
	if len(seen) != writers*perWriter {
		t.Errorf("read %d distinct frames, wrote %d", len(seen), writers*perWriter)
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

// TestWriterErrors checks that header and record write errors are
// returned, and that a failed record makes the Writer refuse further
// records (the stream may hold a torn record).
func TestWriterErrors(t *testing.T) {
	boom := errors.New("disk full")
	if _, err := NewWriter(&failAfter{n: 10, err: boom}); !errors.Is(err, boom) {
		t.Errorf("NewWriter on a failing writer: %v, want %v", err, boom)
	}
	fw := &failAfter{n: 24 + 16 + 14 + 16 + 5, err: boom}
	w, err := NewWriter(fw)
	if err != nil {
		t.Fatal(err)
	}
	frame := make([]byte, 14)
	if err := w.WritePacket(time.Unix(1, 0), frame); err != nil {
		t.Fatalf("first record: %v", err)
	}
	err = w.WritePacket(time.Unix(2, 0), frame)
	if err == nil {
		t.Fatal("second record: no error from a failing writer")
	}
	fw.n = 1 << 20 // the writer would work again, but the stream is torn
	if err2 := w.WritePacket(time.Unix(3, 0), frame); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("after a failure: %v, want the first error %v", err2, err)
	}
}

func ExampleWriter() {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		panic(err)
	}
	frame := make([]byte, 60)
	if err := w.WritePacket(time.Unix(1700000000, 0), frame); err != nil {
		panic(err)
	}
	_ = Read(&buf, func(f Frame) error {
		fmt.Println(f.Number, len(f.Data), f.Time.UTC().Format(time.RFC3339))
		return nil
	})
	// Output: 1 60 2023-11-14T22:13:20Z
}
