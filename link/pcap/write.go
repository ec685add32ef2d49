package pcap

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// SnapLen is the snapshot length Writer declares in the file header and
// truncates longer frames to: 262144, tcpdump's and dumpcap's default
// (libpcap MAXIMUM_SNAPLEN), far above any RoCE frame (a 4096-byte path MTU
// gives frames of about 4.2 KB; a 9000-byte jumbo MTU, about 9 KB).
const SnapLen = 262144

// Writer writes Ethernet frames to a classic pcap stream (libpcap format
// 2.4, little-endian, link type Ethernet, snap length SnapLen), the format
// tcpdump writes and tshark, Wireshark and Read read.
//
// A Writer is safe for concurrent use: each WritePacket writes its record
// header and frame as one unit under a mutex, so records never interleave.
// It does no buffering of its own; wrap a file in a bufio.Writer (and flush
// it) for speed.
type Writer struct {
	mu  sync.Mutex     // guards pw and err
	pw  *pcapgo.Writer // writes to the caller's io.Writer
	err error          // the first write error; sticky, so a torn record is never followed by more
}

// NewWriter writes the pcap file header to w and returns a Writer whose
// records carry nanosecond timestamps (magic 0xa1b23c4d, which libpcap,
// tshark and Read understand).
func NewWriter(w io.Writer) (*Writer, error) { return newWriter(pcapgo.NewWriterNanos(w)) }

// NewWriterMicros is NewWriter with microsecond timestamps (magic
// 0xa1b2c3d4), for tools that know only the original pcap format.
// Timestamps are truncated to the microsecond.
func NewWriterMicros(w io.Writer) (*Writer, error) { return newWriter(pcapgo.NewWriter(w)) }

func newWriter(pw *pcapgo.Writer) (*Writer, error) {
	if err := pw.WriteFileHeader(SnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap: writing the file header: %w", err)
	}
	return &Writer{pw: pw}, nil
}

// WritePacket writes one Ethernet frame captured at ts. A frame longer
// than SnapLen is written truncated to SnapLen bytes, with its full length
// recorded as the original length, as tcpdump -s does.
//
// WritePacket does not retain frame: it is written to the underlying
// io.Writer before WritePacket returns, and the caller may reuse it at once.
//
// The pcap record stores seconds as a 32-bit unsigned number, so ts must
// lie between 1970 and 2106; a zero ts is written as the current time
// (pcapgo's rule). After a write error the stream may hold a partial
// record, so every later call returns that first error.
func (w *Writer) WritePacket(ts time.Time, frame []byte) error {
	data := frame
	if len(data) > SnapLen {
		data = data[:SnapLen]
	}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(frame)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if err := w.pw.WritePacket(ci, data); err != nil {
		w.err = fmt.Errorf("pcap: writing a %d-byte frame: %w", len(frame), err)
		return w.err
	}
	return nil
}
