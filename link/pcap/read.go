package pcap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Frame is one captured frame.
type Frame struct {
	Number  int       // 1-based, as tshark numbers frames
	Time    time.Time // capture timestamp
	Data    []byte    // the captured bytes (may be shorter than OrigLen)
	OrigLen int       // length on the wire
}

// ErrLinkType is returned for captures whose link type is not Ethernet.
var ErrLinkType = errors.New("unsupported link type")

// ErrNotCapture is returned for a file that is neither pcap nor pcapng.
var ErrNotCapture = errors.New("not a pcap or pcapng file")

// pcapMagic reports whether b starts a pcap file: the microsecond or
// nanosecond magic number, in either byte order.
func pcapMagic(b []byte) bool {
	for _, m := range [][]byte{{0xa1, 0xb2, 0xc3, 0xd4}, {0xa1, 0xb2, 0x3c, 0x4d}} {
		if bytes.Equal(b, m) || bytes.Equal(b, []byte{m[3], m[2], m[1], m[0]}) {
			return true
		}
	}
	return false
}

// ReadFile calls fn for every frame of the pcap or pcapng file at path, in
// order. fn must not retain f.Data. Reading stops at the first error fn
// returns.
func ReadFile(path string, fn func(f Frame) error) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	return Read(file, fn)
}

// Read is ReadFile over an io.Reader.
func Read(r io.Reader, fn func(f Frame) error) error {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	switch {
	case len(magic) == 0 && err == io.EOF:
		return fmt.Errorf("%w: the file is empty", ErrNotCapture)
	case err != nil && len(magic) < 4:
		return fmt.Errorf("%w: it holds only %d of the 4 bytes of a magic number", ErrNotCapture, len(magic))
	case err != nil:
		return err
	}
	var next func() ([]byte, time.Time, int, error)
	if bytes.Equal(magic, []byte{0x0A, 0x0D, 0x0D, 0x0A}) {
		ng, err := pcapgo.NewNgReader(br, pcapgo.DefaultNgReaderOptions)
		if err != nil {
			return fmt.Errorf("pcapng section header: %w", err)
		}
		if lt := ng.LinkType(); lt != layers.LinkTypeEthernet {
			return fmt.Errorf("%w %v: want Ethernet", ErrLinkType, lt)
		}
		next = func() ([]byte, time.Time, int, error) {
			d, ci, err := ng.ReadPacketData()
			return d, ci.Timestamp, ci.Length, err
		}
	} else {
		if !pcapMagic(magic) {
			return fmt.Errorf("%w: it starts with %x, where a pcap file starts with a1b2c3d4 or a1b23c4d "+
				"(in either byte order) and a pcapng file with 0a0d0d0a", ErrNotCapture, magic)
		}
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return fmt.Errorf("pcap file header: %w", err)
		}
		if lt := pr.LinkType(); lt != layers.LinkTypeEthernet {
			return fmt.Errorf("%w %v: want Ethernet", ErrLinkType, lt)
		}
		next = func() ([]byte, time.Time, int, error) {
			d, ci, err := pr.ReadPacketData()
			return d, ci.Timestamp, ci.Length, err
		}
	}
	for n := 1; ; n++ {
		data, ts, orig, err := next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("frame %d: %w", n, err)
		}
		if err := fn(Frame{Number: n, Time: ts, Data: data, OrigLen: orig}); err != nil {
			return err
		}
	}
}
