// Package busypoll is what the busy-polling loops of goroce's tools
// (`roce perf`, `roce pingpong`) share: how often such a loop yields its
// P when the process has only one.
package busypoll

import "runtime"

// OnePYield is how many empty polls a busy-polling loop makes between
// yields when the process has one P (GOMAXPROCS 1: a one-vCPU machine, as
// the lab's VMs). There a yield can wake no other thread; it only lets the
// process's other goroutines have the P, and it costs a pass through the
// scheduler, its timers and their clock reads: yielding after every poll,
// the scheduler took a third of `roce perf send --lat`'s and `roce
// pingpong`'s client CPU in the VMs (BENCHMARKS.md). A goroce CQ's poll
// drives the link itself, so what waits for the P is timers and the
// device's background work, for sixteen polls at most.
const OnePYield = 16

// Every is how many empty polls a loop makes between yields: OnePYield
// when the process has one P, else the loop's own rule, other.
func Every(other int) int {
	if runtime.GOMAXPROCS(0) == 1 {
		return OnePYield
	}
	return other
}
