//go:build !goroce_turn

package main

// turnSplit is the turnaround split of a build with the goroce_turn tag
// (turn_on.go); in every other build its calls compile to nothing.
type turnSplit struct{}

func (*turnSplit) seen(sec, nsec uint32) {}
func (*turnSplit) start() int64          { return 0 }
func (*turnSplit) sent(int64)            {}
func (*turnSplit) flush()                {}
