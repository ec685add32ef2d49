// Package pcap reads and writes packet captures, and records a link's
// traffic in one. Read and ReadFile take pcap or pcapng files (with
// gopacket's pcapgo), for `roce decode`, the golden tests and the tests
// that check what went on the wire; Writer writes classic pcap, as tcpdump
// -w does; Link is a link.Link decorator that writes every packet the
// wrapped link sends and receives, as an Ethernet frame, to a Writer, in a
// file that tshark, Wireshark and `roce decode` read.
//
// The frames are rebuilt from each packet's transport bytes and addressing
// (link.Addr) with link.Encapsulate, so any link can be recorded, including
// ones whose real headers the process never sees (the UDP link). What the
// rebuilt frame cannot know is synthesized: MAC addresses are derived from
// the GIDs (02:00 followed by the GID's last four bytes) and the IPv4
// Identification is 0. The ICRC is computed over the frame as written, so
// `roce decode --verify` checks every recorded packet.
package pcap

import (
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Link records the traffic of the link it wraps.
type Link struct {
	link.Link
	w     *Writer
	now   func() time.Time
	mu    sync.Mutex // guards buf
	buf   []byte
	count uint64 // frames written; guarded by mu
	errs  uint64 // frames that could not be rebuilt or written; guarded by mu
}

// New wraps l; every packet it sends or receives is written to w.
func New(l link.Link, w *Writer) *Link {
	return &Link{Link: l, w: w, now: time.Now, buf: make([]byte, FrameBufSize)}
}

// Send records pkts, then sends them through the wrapped link.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	for i := range pkts {
		l.record(&pkts[i])
	}
	return l.Link.Send(pkts)
}

// Recv receives through the wrapped link, then records what arrived.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	for i := range pkts[:n] {
		l.record(&pkts[i])
	}
	return n, err
}

// PathError forwards the wrapped link's (link.PathReporter).
func (l *Link) PathError(dst netip.Addr, v wire.Version) error {
	return link.PathErrorOf(l.Link, dst, v)
}

// Frames returns how many frames were written and how many could not be.
func (l *Link) Frames() (written, failed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count, l.errs
}

// macOf is the MAC a rebuilt frame carries for a GID: 02:00 (a locally
// administered unicast address) and the GID's last four bytes.
func macOf(g netip.Addr) wire.MAC {
	b := g.As16()
	return wire.MAC{0x02, 0x00, b[12], b[13], b[14], b[15]}
}

// FrameBufSize is the size of the buffer RebuildFrame needs.
const FrameBufSize = link.FrameHeadroom + link.MaxFrameSize

// RebuildFrame rebuilds the Ethernet frame of pk from its transport bytes
// and addressing, as Link records it (MACs synthesized from the GIDs, IPv4
// Identification 0, ICRC computed over the frame as rebuilt). It copies
// the transport bytes into buf, which must hold FrameBufSize bytes, and
// returns the frame, a slice of buf: pk is not changed or retained.
func RebuildFrame(buf []byte, pk *link.Packet) ([]byte, error) {
	n := copy(buf[link.FrameHeadroom:], pk.Transport())
	cp := link.Packet{Buf: buf[:link.FrameHeadroom+n], Off: link.FrameHeadroom, Len: n, Addr: pk.Addr}
	return link.Encapsulate(&cp, macOf(pk.Addr.SrcGID), macOf(pk.Addr.DstGID), 0)
}

func (l *Link) record(pk *link.Packet) {
	l.mu.Lock()
	defer l.mu.Unlock()
	frame, err := RebuildFrame(l.buf, pk)
	if err == nil {
		err = l.w.WritePacket(l.now(), frame)
	}
	if err != nil {
		l.errs++
		return
	}
	l.count++
}
