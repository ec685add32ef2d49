package verbs

import (
	"sync"
	"testing"
)

// peek is what the slot holds, for tests that have it to themselves.
func (s *slot[T]) peek() *T {
	if !s.Full() {
		return nil
	}
	return s.p
}

// TestSlotOneAtATime: a slot holds one value, which one Take returns once.
func TestSlotOneAtATime(t *testing.T) {
	var s slot[int]
	a, b := new(int), new(int)
	if s.Full() || s.Take() != nil {
		t.Fatal("a new slot is not empty")
	}
	if !s.Put(a) || !s.Full() {
		t.Fatal("Put into an empty slot failed")
	}
	if s.Put(b) {
		t.Fatal("Put into a full slot succeeded")
	}
	if got := s.Take(); got != a {
		t.Fatalf("Take = %p, want %p", got, a)
	}
	if s.Full() || s.Take() != nil {
		t.Fatal("the slot is not empty after its Take")
	}
}

// TestSlotConcurrent: goroutines putting and taking at once (run with
// -race) move every value at most once: each value is taken once or is
// left in the slot, or its Put failed.
func TestSlotConcurrent(t *testing.T) {
	var s slot[int]
	const workers, each = 4, 2000
	taken := make([][]*int, workers)
	put := make([][]*int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v := new(int)
				*v = w*each + i
				if s.Put(v) {
					put[w] = append(put[w], v)
				}
				if p := s.Take(); p != nil {
					taken[w] = append(taken[w], p)
				}
			}
		}()
	}
	wg.Wait()
	seen := map[*int]int{}
	for w := range workers {
		for _, p := range taken[w] {
			seen[p]++
		}
	}
	if p := s.Take(); p != nil {
		seen[p]++
	}
	n := 0
	for w := range workers {
		for _, p := range put[w] {
			n++
			if seen[p] != 1 {
				t.Fatalf("value %d put, taken %d times", *p, seen[p])
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("%d values taken, %d put", len(seen), n)
	}
}
