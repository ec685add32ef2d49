package demo

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// lossy drops a settable fraction of the packets its link sends, before
// they reach the socket: loss on the wire, as the receiver sees it.
type lossy struct {
	link.Link
	rate    atomic.Uint64 // drop probability × 2^32
	dropped atomic.Uint64
	sent    atomic.Uint64 // packets offered while the rate was above zero

	mu   sync.Mutex // guards rng and kept
	rng  *rand.Rand
	kept []link.Packet
	orig []int
}

func newLossy(l link.Link, seed uint64) *lossy {
	return &lossy{Link: l, rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
}

// setLoss sets the drop probability, in [0, 1].
func (l *lossy) setLoss(p float64) { l.rate.Store(uint64(p * (1 << 32))) }

func (l *lossy) Send(pkts []link.Packet) (int, error) {
	r := l.rate.Load()
	if r == 0 {
		return l.Link.Send(pkts)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kept, l.orig = l.kept[:0], l.orig[:0]
	for i := range pkts {
		l.sent.Add(1)
		if uint64(l.rng.Uint32()) < r {
			l.dropped.Add(1)
			continue
		}
		l.kept = append(l.kept, pkts[i])
		l.orig = append(l.orig, i)
	}
	n, err := l.Link.Send(l.kept)
	if n < len(l.kept) {
		return l.orig[n], err // packets from the first unsent one on were not handed over
	}
	return len(pkts), err
}

// only delivers received packets of one RoCE version and ignores the
// rest, as a port that speaks only that version does (a RoCE v1 NIC
// does not listen on UDP port 4791).
type only struct {
	link.Link
	version wire.Version
	ignored atomic.Uint64
}

func (l *only) Recv(pkts []link.Packet) (int, error) {
	for {
		n, err := l.Link.Recv(pkts)
		k := 0
		for i := range pkts[:n] {
			if pkts[i].Addr.Version != l.version {
				l.ignored.Add(1)
				continue
			}
			// Swap rather than copy: every buffer stays in the caller's slice.
			pkts[k], pkts[i] = pkts[i], pkts[k]
			k++
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}
