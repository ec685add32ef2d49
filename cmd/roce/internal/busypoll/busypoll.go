// Package busypoll is what the busy-polling loops of goroce's tools
// (`roce perf`, `roce pingpong`) share: how often such a loop yields its
// P when the process has only one, and OneP, which gives the tools that
// mirror one-threaded C tools their one P.
package busypoll

import (
	"os"
	"runtime"
)

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

// OneP runs the process on one P (GOMAXPROCS 1), as perftest,
// ibv_*_pingpong, rstream and rcopy run on one thread, unless the
// environment sets GOMAXPROCS (the user's choice stands). Call it before
// the device is opened: the links and the loops read GOMAXPROCS when they
// start.
//
// Such a tool needs one P: its CQ poll, spinning or waiting, drives the
// link itself (it receives, answers and completes), so the device's
// background receive goroutine has nothing to do meanwhile. A second P
// only lets the runtime wake threads that look for work, steal the loop
// back and forth and run the receive goroutine against it, on CPUs the
// peer and the kernel's packet processing need. Between two namespaces
// on the 2-vCPU test host (BENCHMARKS.md, "One P per tool"), one P per
// process ran `roce perf write -s 65536` 1.5–1.9x as fast, `-s 4096` 2x,
// `roce pingpong -s 64` in 0.6–0.85x the time, `roce perf send --lat`
// with half the 99th percentile, `roce rstream` 1.6–2x as fast (64 KiB)
// in half the time per transfer (64 B), and `roce rcopy` 1.3–1.9x.
func OneP() {
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(1)
	}
}
