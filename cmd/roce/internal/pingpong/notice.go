package pingpong

import (
	"sync"
	"sync/atomic"
	"time"
)

// noticeAfter is how long a wait goes on before Config.Notice hears what it
// is waiting for: the tools are silent while they wait, and a wait for a
// peer that never answers looks like a hang.
const noticeAfter = 2 * time.Second

// watcher tells Config.Notice, once per wait, what a wait of more than
// noticeAfter is waiting for. A wait is a phase (what) with no progress.
type watcher struct {
	notice   func(format string, args ...any)
	progress atomic.Uint64 // completions so far; any change ends a wait

	mu   sync.Mutex
	what func() string // guarded by mu: the wait in progress; nil: none
	seq  uint64        // guarded by mu: bumped by each set

	stop chan struct{}
	done chan struct{}
}

// startWatch starts a watcher; nil notice: none (a nil *watcher is inert).
func startWatch(notice func(format string, args ...any)) *watcher {
	if notice == nil {
		return nil
	}
	w := &watcher{notice: notice, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

// set says what is waited for from now on (nil: nothing).
func (w *watcher) set(what func() string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.what = what
	w.seq++
	w.mu.Unlock()
}

// step records progress (a completion).
func (w *watcher) step() {
	if w != nil {
		w.progress.Add(1)
	}
}

// close stops the watcher and waits for its goroutine.
func (w *watcher) close() {
	if w == nil {
		return
	}
	close(w.stop)
	<-w.done
}

func (w *watcher) run() {
	defer close(w.done)
	t := time.NewTicker(noticeAfter / 8)
	defer t.Stop()
	var seq, prog uint64
	since := time.Now()
	told := false
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		what, s := w.what, w.seq
		w.mu.Unlock()
		p := w.progress.Load()
		if s != seq || p != prog {
			seq, prog, since, told = s, p, time.Now(), false
			continue
		}
		if what != nil && !told && time.Since(since) >= noticeAfter {
			told = true
			w.notice("waiting for %s (%v so far)", what(), time.Since(since).Round(100*time.Millisecond))
		}
	}
}
