package verbs

import "sync/atomic"

// slot holds at most one *T, handed from goroutine to goroutine with
// atomic operations on an integer alone, which the compiler makes single
// instructions. atomic.Pointer's Swap and CompareAndSwap are calls instead
// (sync/atomic's pointer operations carry the garbage collector's write
// barrier), two calls each; a round trip of `roce perf send --lat` made
// seven of them per side (getTxBatch, putTxBatch, the held ACKs), and in
// the lab's QEMU VMs a call costs some 15-25 ns when the round trip runs
// the callee anyway, up to 150 when it runs it nowhere else (BENCHMARKS.md,
// "What the VMs charge for").
//
// Put and Take fail (false, nil) while another Put or Take is halfway
// through, as they would a moment earlier or later: callers take that as
// a full or an empty slot.
type slot[T any] struct {
	state atomic.Uint32 // slotEmpty, slotFull or slotBusy
	p     *T            // only the goroutine that set slotBusy reads or writes it
}

const (
	slotEmpty uint32 = iota
	slotFull
	slotBusy // a Put or a Take is under way
)

// Full reports whether the slot holds a value (a hint: another goroutine
// may take it or fill it at once).
func (s *slot[T]) Full() bool { return s.state.Load() == slotFull }

// Put stores p in the slot if it is empty, and reports whether it did.
func (s *slot[T]) Put(p *T) bool {
	if s.state.Load() != slotEmpty || !s.state.CompareAndSwap(slotEmpty, slotBusy) {
		return false
	}
	s.p = p
	s.state.Store(slotFull)
	return true
}

// Take empties the slot and returns what it held, or nil.
func (s *slot[T]) Take() *T {
	if s.state.Load() != slotFull || !s.state.CompareAndSwap(slotFull, slotBusy) {
		return nil
	}
	p := s.p
	s.p = nil
	s.state.Store(slotEmpty)
	return p
}
