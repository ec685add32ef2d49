package rdmacm

import (
	"container/heap"
	"time"
)

// The CM's timers (each ID's response timer and timewait) are one queue
// ordered by deadline behind a single time.Timer, whose function runs
// every expiry that is due under the CM's lock. A timer per ID would
// start a goroutine per expiry: a flood of REQs whose REPs all time out
// together would then leave a thousand goroutines queued on the lock at
// once, and stopped timers linger in the runtime's heap, holding their
// IDs, until their deadline. Here a stopped timer leaves the queue at
// once, and at most one expiry goroutine exists at a time.

// cmTimer is one pending expiry.
type cmTimer struct {
	when  time.Time
	fire  func() // called with cm.mu held
	index int    // in the queue; -1 when not queued
}

// timerQueue is a min-heap of timers by deadline (container/heap).
type timerQueue []*cmTimer

func (q timerQueue) Len() int           { return len(q) }
func (q timerQueue) Less(i, j int) bool { return q[i].when.Before(q[j].when) }
func (q timerQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *timerQueue) Push(x any) {
	t := x.(*cmTimer)
	t.index = len(*q)
	*q = append(*q, t)
}
func (q *timerQueue) Pop() any {
	old := *q
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	t.index = -1
	if len(*q) == 0 {
		*q = nil // let a burst's array go
	}
	return t
}

// after schedules f (run with cm.mu held) after d and returns its timer
// for stopTimer. Called with cm.mu held.
func (cm *CM) after(d time.Duration, f func()) *cmTimer {
	t := &cmTimer{when: time.Now().Add(d), fire: f}
	heap.Push(&cm.timers, t)
	if t.index == 0 {
		cm.rearm()
	}
	return t
}

// stopTimer unschedules t (nil or fired: nothing). Called with cm.mu held.
func (cm *CM) stopTimer(t *cmTimer) {
	if t == nil || t.index < 0 || t.index >= len(cm.timers) || cm.timers[t.index] != t {
		return
	}
	heap.Remove(&cm.timers, t.index)
	// The clock may now fire early, for nothing: expire rearms it.
}

// rearm sets the clock to the earliest deadline. Called with cm.mu held.
func (cm *CM) rearm() {
	if len(cm.timers) == 0 || cm.closed {
		return
	}
	d := time.Until(cm.timers[0].when)
	if cm.clock == nil {
		cm.clock = time.AfterFunc(d, cm.expire)
		return
	}
	cm.clock.Reset(d)
}

// expire runs every timer that is due.
func (cm *CM) expire() {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.closed {
		return
	}
	now := time.Now()
	for len(cm.timers) > 0 && !cm.timers[0].when.After(now) {
		t := heap.Pop(&cm.timers).(*cmTimer)
		t.fire()
	}
	cm.rearm()
}
