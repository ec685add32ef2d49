// Package turnsplit keeps and prints the turnaround split of the
// diagnostic builds (the goroce_turn build tag): link/udp's and the UDP
// floor's (bench/cmd/udpfloor), which bench/vm.sh -T reads.
//
// Each round trip a side makes is split in three, in nanoseconds: wake
// (the kernel's timestamp of a message's first frame in the receive ring
// to the program taking it), path (then to the start of the answer's
// sendmmsg) and send (the sendmmsg call).
package turnsplit

import (
	"fmt"
	"io"
	"slices"
)

// Every is how many round trips a print covers; what is left at the end
// is printed when it is at least Least.
const (
	Every = 1000
	Least = 100
)

// Samples are round trips' splits since the last print.
type Samples struct {
	wake, path, send []int64
}

// Add records a round trip and prints the samples to w when there are
// Every of them.
func (s *Samples) Add(w io.Writer, wake, path, send int64) {
	s.wake = append(s.wake, wake)
	s.path = append(s.path, path)
	s.send = append(s.send, send)
	if len(s.wake) >= Every {
		s.Flush(w)
	}
}

// Flush prints the samples to w, if there are at least Least, in the line
// bench/vm.sh -T reads, and forgets them.
func (s *Samples) Flush(w io.Writer) {
	if len(s.wake) >= Least {
		fmt.Fprintf(w, "goroce_turn: %d round trips, µs p25/median/p75: wake %s path %s send %s\n",
			len(s.wake), quartiles(s.wake), quartiles(s.path), quartiles(s.send))
	}
	s.wake, s.path, s.send = s.wake[:0], s.path[:0], s.send[:0]
}

// quartiles formats v's quartiles, in nanoseconds, in microseconds as
// P25/MEDIAN/P75.
func quartiles(v []int64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	us := func(x int64) float64 { return float64(x) / 1e3 }
	return fmt.Sprintf("%.1f/%.1f/%.1f", us(s[len(s)/4]), us(s[len(s)/2]), us(s[3*len(s)/4]))
}
