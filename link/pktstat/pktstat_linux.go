// Package pktstat reads an AF_PACKET socket's statistics for the links
// that receive through one (link/udp's privileged mode, link/afpacket).
package pktstat

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// SocketDrops counts what the kernel dropped at an AF_PACKET socket that a
// link reads in batches, from PACKET_STATISTICS (which resets the kernel's
// counts as it reads them), into the link's link.Stats.RxSocketFull.
//
// Only a read that filled every buffer it offered can follow drops (the
// socket held a backlog at least that long), and while a backlog lasts
// one such read in DropsEvery asks the kernel; the first read after it
// that does not fill them all (the backlog drained) asks once more, so
// every drop is counted by the time the receiver has caught up. Asking
// after every full read cost a getsockopt(2) per 64 buffers: 1.8 µs per
// 64 KiB of a stream's CPU (BENCHMARKS.md, "The stream's own CPU").
type SocketDrops struct {
	FullReads uint64 // reads that filled every buffer offered
	Samples   uint64 // PACKET_STATISTICS reads
	owed      bool   // full reads not sampled since the last sample
	// Count, if set, replaces PACKET_STATISTICS for a socket of another
	// kind: the drops since its last call (an AF_XDP socket's).
	Count func(fd uintptr) uint64
}

// Owed reports whether full reads have not been sampled yet: the next
// read that succeeds or finds the socket empty will ask the kernel.
func (d *SocketDrops) Owed() bool { return d.owed }

// DropsEvery is how many reads in a row that fill every buffer make one
// PACKET_STATISTICS sample.
const DropsEvery = 16

// Read records a read of the socket fd: full if it filled every buffer
// offered, ok if it succeeded or found the socket empty (EAGAIN). The
// drops it learns of are added to into.
func (d *SocketDrops) Read(fd uintptr, full, ok bool, into *atomic.Uint64) {
	switch {
	case full:
		d.FullReads++
		if d.FullReads%DropsEvery != 0 {
			d.owed = true
			return
		}
	case d.owed && ok:
	default:
		return
	}
	d.owed = false
	d.Samples++
	if d.Count != nil {
		into.Add(d.Count(fd))
		return
	}
	if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil && st.Drops > 0 {
		into.Add(uint64(st.Drops))
	}
}
