package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	rtrace "runtime/trace"
)

// Profiling a command, for finding where a tool (roce perf, a server and a
// client in two processes) spends its time: GOROCE_CPUPROFILE=FILE writes
// a CPU profile of the whole command to FILE (go tool pprof reads it),
// GOROCE_TRACE=FILE a Go execution trace (go tool trace), as the go
// command's -cpuprofile and -trace flags do for tests. Environment
// variables and not flags, so that no command's flags, which are
// rdma-core's and perftest's, gain any.
const (
	envCPUProfile = "GOROCE_CPUPROFILE"
	envTrace      = "GOROCE_TRACE"
)

// startProfiles starts what the environment asks for and returns the
// function that stops it and closes the files. A file that cannot be
// written is reported on stderr and the command runs without it.
func startProfiles(stderr io.Writer) (stop func()) {
	var stops []func()
	if name := os.Getenv(envCPUProfile); name != "" {
		if f, err := os.Create(name); err != nil {
			fmt.Fprintf(stderr, "roce: %s: %v\n", envCPUProfile, err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "roce: %s: %v\n", envCPUProfile, err)
			f.Close()
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if name := os.Getenv(envTrace); name != "" {
		if f, err := os.Create(name); err != nil {
			fmt.Fprintf(stderr, "roce: %s: %v\n", envTrace, err)
		} else if err := rtrace.Start(f); err != nil {
			fmt.Fprintf(stderr, "roce: %s: %v\n", envTrace, err)
			f.Close()
		} else {
			stops = append(stops, func() { rtrace.Stop(); f.Close() })
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
