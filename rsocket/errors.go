package rsocket

import (
	"net"
	"net/netip"
	"syscall"
)

// ProtocolError is what ends a connection whose peer broke the rsocket
// protocol: Violation says how, in words. It unwraps to syscall.EPROTO.
type ProtocolError struct {
	Violation string
}

func (e *ProtocolError) Error() string {
	return "rsocket: protocol violation by the peer: " + e.Violation
}

// Unwrap returns syscall.EPROTO.
func (e *ProtocolError) Unwrap() error { return syscall.EPROTO }

// Addr is the address of one end of an rsocket connection: an IP address
// and an rdma_cm port (port space TCP).
type Addr struct {
	netip.AddrPort
}

// Network returns "rsocket".
func (Addr) Network() string { return "rsocket" }

var _ net.Addr = Addr{}
