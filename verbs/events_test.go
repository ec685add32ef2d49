package verbs

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// TestEventQueueBounded: the async event queue holds maxAsyncEvents
// events; the ones beyond are dropped and counted (async_events_dropped),
// and the last event kept says so. It used to grow without bound (133
// bytes an event, one per bad UC packet). Once read, it takes events
// again.
func TestEventQueueBounded(t *testing.T) {
	var dropped atomic.Uint64
	var e eventQueue
	e.init(&dropped)
	const extra = 100
	for i := 0; i < maxAsyncEvents+extra; i++ {
		e.post(AsyncEvent{Type: EventQPAccessErr, QPNum: uint32(i), Detail: fmt.Sprint(i)})
	}
	if n := e.len(); n != maxAsyncEvents {
		t.Fatalf("%d events queued, want %d", n, maxAsyncEvents)
	}
	if d := dropped.Load(); d != extra {
		t.Errorf("async_events_dropped %d, want %d", d, extra)
	}
	ctx := context.Background()
	for i := 0; i < maxAsyncEvents; i++ {
		ev, err := e.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.QPNum != uint32(i) {
			t.Fatalf("event %d is QP %d's: out of order", i, ev.QPNum)
		}
		last := i == maxAsyncEvents-1
		if noted := strings.Contains(ev.Detail, "async_events_dropped"); noted != last {
			t.Errorf("event %d Detail %q: the drop note belongs on the last event kept only", i, ev.Detail)
		}
	}
	e.post(AsyncEvent{Type: EventCommEst, QPNum: 7})
	if ev, err := e.get(ctx); err != nil || ev.QPNum != 7 || ev.Detail != "" {
		t.Errorf("after the queue was read: %v, %v; want the new event", ev, err)
	}
	if d := dropped.Load(); d != extra {
		t.Errorf("async_events_dropped %d after room was made, want %d", d, extra)
	}
}
