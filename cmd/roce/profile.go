package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	rtrace "runtime/trace"

	"github.com/goroce/goroce/host"
)

// Profiling a command, for finding where a tool (roce perf, a server and a
// client in two processes) spends its time: GOROCE_CPUPROFILE=FILE writes
// a CPU profile of the whole command to FILE (go tool pprof reads it),
// GOROCE_TRACE=FILE a Go execution trace (go tool trace), as the go
// command's -cpuprofile and -trace flags do for tests. Environment
// variables and not flags, so that no command's flags, which are
// rdma-core's and perftest's, gain any.
//
// GOROCE_STATS=FILE writes the port counters of the device a command
// opened (roce pingpong, perf, cm tools) to FILE when it closes it, as
// `roce stat show` prints them: a device's counters live in the process
// that has it open, and a test that judges a peer's counters (a duplicate
// at rxe is fine only if goroce retransmitted) needs them after the
// command has exited.
const (
	envCPUProfile = "GOROCE_CPUPROFILE"
	envTrace      = "GOROCE_TRACE"
	envStats      = "GOROCE_STATS"
)

// writeStatsFile writes rep's port row to the file name, as roce stat show
// prints it.
func writeStatsFile(name string, rep *host.CounterReport) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	portRow(rep).writeText(f)
	return f.Close()
}

// startProfiles starts what the environment asks for and returns the
// function that stops it and closes the files. A file that cannot be
// written is reported on stderr and the command runs without it.
func startProfiles(stderr io.Writer) (stop func()) {
	var stops []func()
	start := func(env string, begin func(io.Writer) error, end func()) {
		name := os.Getenv(env)
		if name == "" {
			return
		}
		f, err := os.Create(name)
		if err == nil {
			if err = begin(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "roce: %s: %v\n", env, err)
			return
		}
		stops = append(stops, func() { end(); f.Close() })
	}
	start(envCPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)
	start(envTrace, rtrace.Start, rtrace.Stop)
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
