//go:build !goroce_turn

package udp

import "sync"

// turnSplit is the turnaround split of a build with the goroce_turn tag
// (turn_on.go); in every other build it is empty and its calls compile to
// nothing.
type turnSplit struct{}

func (*turnSplit) seen(*rxRing, int32) {}
func (*turnSplit) start() int64        { return 0 }
func (*turnSplit) sent(int64)          {}
func (*turnSplit) closed(*sync.Mutex)  {}
