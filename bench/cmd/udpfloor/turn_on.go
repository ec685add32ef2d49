//go:build goroce_turn

package main

// The floor's side of link/udp's turnaround split (link/udp/turn_on.go,
// internal/turnsplit, bench/vm.sh -T), for -lat with the receive ring: a
// message's frame (not an ACK's) starts a round trip, the next sendmmsg
// ends it; printed to stderr every 1,000 round trips and when the ring
// closes. One goroutine reads and sends.

import (
	"os"
	"time"

	"github.com/goroce/goroce/internal/turnsplit"
)

type turnSplit struct {
	kts, at int64 // the frame's kernel timestamp and when the ring gave it, ns; at 0: none since the last send
	s       turnsplit.Samples
}

func (t *turnSplit) seen(sec, nsec uint32) {
	if t.at == 0 {
		t.kts, t.at = int64(sec)*1e9+int64(nsec), time.Now().UnixNano()
	}
}

func (t *turnSplit) start() int64 { return time.Now().UnixNano() }

func (t *turnSplit) sent(t0 int64) {
	t1 := time.Now().UnixNano()
	if t.at != 0 {
		t.s.Add(os.Stderr, t.at-t.kts, t0-t.at, t1-t0)
		t.at = 0
	}
}

func (t *turnSplit) flush() { t.s.Flush(os.Stderr) }
