package wire

import (
	"errors"
	"fmt"
)

// ErrNotRoCE is returned by ParseFrame for a frame that is not RoCE (another
// Ethertype, another IP protocol, another UDP port). Callers count and skip
// such frames.
var ErrNotRoCE = errors.New("not a RoCE packet")

// ErrBadICRC is wrapped by VerifyICRC's error when the ICRC does not match.
var ErrBadICRC = errors.New("bad ICRC")

// ParseError reports a malformed header: which layer, and why.
type ParseError struct {
	Layer  string // "Ethernet", "IPv4", "BTH", "RETH", ...
	Reason string
}

func (e *ParseError) Error() string { return e.Layer + ": " + e.Reason }

func truncated(layer string, need, have int) error {
	return &ParseError{Layer: layer, Reason: fmt.Sprintf("truncated: need %d bytes, have %d", need, have)}
}

func malformed(layer, format string, args ...any) error {
	return &ParseError{Layer: layer, Reason: fmt.Sprintf(format, args...)}
}
