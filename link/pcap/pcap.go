// Package pcap reads and writes packet captures, and records a link's
// traffic in one. Read and ReadFile take pcap or pcapng files (with
// gopacket's pcapgo), for `roce decode`, the golden tests and the tests
// that check what went on the wire; Writer writes classic pcap, as tcpdump
// -w does; Link is a link.Link decorator that writes every packet the
// wrapped link sends and receives, as an Ethernet frame, to a Writer, in a
// file that tshark, Wireshark and `roce decode` read, or hands it to
// subscribers (a tap: the host's devices stream captures with it).
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// Link records the traffic of the link it wraps: into a Writer (New),
// and to every current Subscription (Subscribe). A Link from NewTap has no
// Writer and records only while subscribed; with nothing to record it
// costs one atomic load per batch.
type Link struct {
	link.Link
	paths link.PathReporter // asked before the wrapped link (NewTap); may be nil
	w     *Writer           // nil for a tap
	now   func() time.Time
	sinks atomic.Int32 // w (if any) and len(subs); read without mu on the data path

	mu    sync.Mutex // guards what follows
	buf   []byte
	subs  []*Subscription
	count uint64 // frames written to w
	errs  uint64 // frames that could not be rebuilt or written
	seq   int    // frames rebuilt
}

// New wraps l; every packet it sends or receives is written to w.
func New(l link.Link, w *Writer) *Link {
	r := &Link{Link: l, w: w, now: time.Now, buf: make([]byte, FrameBufSize)}
	r.sinks.Store(1)
	return r
}

// NewTap wraps l; the packets it sends or receives are recorded for the
// subscriptions current at the time, and not at all while there are none.
// paths, if not nil, answers PathError before l does (the host's device:
// its neighbour resolver), so that no decorator of its own sits between
// the tap and l on every Send.
func NewTap(l link.Link, paths link.PathReporter) *Link {
	return &Link{Link: l, paths: paths, now: time.Now}
}

// A Subscription receives the frames a Link records, through a queue of
// bounded length: a subscriber that does not keep up loses frames, never
// the link's traffic (the tap never blocks the data path).
type Subscription struct {
	ch      chan Frame
	dropped atomic.Uint64
}

// C is the channel the frames arrive on. A Frame's Data is shared by every
// subscriber and must not be modified; its Number is the link's count of
// frames recorded, so a subscriber sees gaps where it dropped frames.
func (s *Subscription) C() <-chan Frame { return s.ch }

// Dropped returns how many frames did not fit s's queue.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Subscribe returns a subscription to the frames l records from now on,
// queue of them at most waiting to be read.
func (l *Link) Subscribe(queue int) *Subscription {
	s := &Subscription{ch: make(chan Frame, queue)}
	l.mu.Lock()
	l.subs = append(l.subs, s)
	l.sinks.Add(1)
	if l.buf == nil {
		l.buf = make([]byte, FrameBufSize)
	}
	l.mu.Unlock()
	return s
}

// Unsubscribe ends s: no frame is queued for it after Unsubscribe returns.
func (l *Link) Unsubscribe(s *Subscription) {
	l.mu.Lock()
	if i := slices.Index(l.subs, s); i >= 0 {
		l.subs = slices.Delete(l.subs, i, i+1)
		l.sinks.Add(-1)
	}
	l.mu.Unlock()
}

// Send records pkts, then sends them through the wrapped link.
func (l *Link) Send(pkts []link.Packet) (int, error) {
	if l.sinks.Load() > 0 {
		for i := range pkts {
			l.record(&pkts[i])
		}
	}
	return l.Link.Send(pkts)
}

// Recv receives through the wrapped link, then records what arrived.
func (l *Link) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	if n > 0 && l.sinks.Load() > 0 {
		for i := range pkts[:n] {
			l.record(&pkts[i])
		}
	}
	return n, err
}

// WithPoller returns l as a link.Poller over p, the link.Poller that l
// wraps (perhaps through decorators that hide it), recording what p's
// TryRecv and RecvLocked take as Recv records, so that a recorded link's
// CQ pollers still drive it (verbs' run to completion).
func (l *Link) WithPoller(p link.Poller) link.Link { return &pollerLink{l, p} }

// pollerLink is a Link whose wrapped link is a link.Poller. A pointer in
// the interface, its methods with pointer receivers: a value's would be
// reached through a wrapper, one call more on each empty look of a CQ
// poller.
type pollerLink struct {
	*Link
	p link.Poller
}

// TryRecv takes what has arrived, then records it.
func (l *pollerLink) TryRecv(pkts []link.Packet) (int, error) {
	n, err := l.p.TryRecv(pkts)
	l.recordRecv(pkts[:max(n, 0)])
	return n, err
}

// Pending asks the wrapped link (link.PendingReporter); a link that
// cannot tell is taken to have packets, so that TryRecv looks.
func (l *pollerLink) Pending() bool {
	if r, ok := l.p.(link.PendingReporter); ok {
		return r.Pending()
	}
	return true
}

// RecvLocked takes what arrives with mu held, then records it.
func (l *pollerLink) RecvLocked(pkts []link.Packet, mu sync.Locker) (int, error) {
	n, err := l.p.RecvLocked(pkts, mu)
	l.recordRecv(pkts[:max(n, 0)])
	return n, err
}

func (l *Link) recordRecv(pkts []link.Packet) {
	if len(pkts) > 0 && l.sinks.Load() > 0 {
		for i := range pkts {
			l.record(&pkts[i])
		}
	}
}

// PathError is the reporter's answer (NewTap's paths), else the wrapped
// link's (link.PathReporter).
func (l *Link) PathError(dst netip.Addr, v wire.Version) error {
	if l.paths != nil {
		if err := l.paths.PathError(dst, v); err != nil {
			return err
		}
	}
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
	if l.w == nil && len(l.subs) == 0 {
		return // the last subscriber left since Send looked
	}
	frame, err := RebuildFrame(l.buf, pk)
	if err != nil {
		l.errs++
		return
	}
	ts := l.now()
	l.seq++
	if l.w != nil {
		if err := l.w.WritePacket(ts, frame); err != nil {
			l.errs++
		} else {
			l.count++
		}
	}
	if len(l.subs) > 0 {
		f := Frame{Number: l.seq, Time: ts, Data: slices.Clone(frame), OrigLen: len(frame)}
		for _, s := range l.subs {
			select {
			case s.ch <- f:
			default:
				s.dropped.Add(1)
			}
		}
	}
}
