package mad

import (
	"fmt"
	"strconv"
)

// ServiceID is a 64-bit IB CM service ID (IBTA Vol 1 §12.6.5, Service ID). The
// RDMA IP CM service IDs (IBTA Vol 1 Annex A11) that rdma_cm uses for IP
// addressing have the 40-bit prefix 0x0000000001, then an 8-bit port space,
// then the 16-bit port the passive side listens on:
//
//	bits 63..24  0x0000000001
//	bits 23..16  port space (RDMA_PS_TCP 0x06, RDMA_PS_UDP 0x11, …)
//	bits 15..0   port
//
// (Linux builds it as ((u64)ps << 16) + port with ps = 0x0106 for TCP, which
// is where the prefix's final 0x01 comes from; see cma_get_service_id.)
type ServiceID uint64

// IPCMServicePrefix is the top 40 bits of every IP CM service ID.
const IPCMServicePrefix = 0x0000000001

// PortSpace is the rdma_cm port space of an IP CM service ID (Linux enum
// rdma_ucm_port_space, low byte).
//
//enum:string PortSpace(0x%02x)
type PortSpace uint8

// Port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x02 // "RDMA_PS_IPOIB"
	PortSpaceTCP   PortSpace = 0x06 // "RDMA_PS_TCP": RC connections
	PortSpaceUDP   PortSpace = 0x11 // "RDMA_PS_UDP": UD, resolved with SIDR
	PortSpaceIB    PortSpace = 0x3F // "RDMA_PS_IB": RC or UD
)

// NewIPCMServiceID returns the IP CM service ID for port space ps and port.
func NewIPCMServiceID(ps PortSpace, port uint16) ServiceID {
	return ServiceID(IPCMServicePrefix<<24 | uint64(ps)<<16 | uint64(port))
}

// ParseIPCMServiceID checks that v carries the IP CM prefix and returns it as
// a ServiceID. It fails, wrapping [ErrNotIPCM], when the prefix is wrong.
func ParseIPCMServiceID(v uint64) (ServiceID, error) {
	s := ServiceID(v)
	if !s.IsIPCM() {
		return 0, fmt.Errorf("%w: service ID 0x%016x has prefix 0x%010x, want 0x%010x",
			ErrNotIPCM, v, v>>24, IPCMServicePrefix)
	}
	return s, nil
}

// IsIPCM reports whether s has the IP CM prefix.
func (s ServiceID) IsIPCM() bool { return uint64(s)>>24 == IPCMServicePrefix }

// PortSpace returns bits 23..16, the port space of an IP CM service ID.
func (s ServiceID) PortSpace() PortSpace { return PortSpace(s >> 16) }

// Port returns bits 15..0, the port of an IP CM service ID.
func (s ServiceID) Port() uint16 { return uint16(s) }

// String returns "RDMA_PS_TCP port 7174" for an IP CM service ID and the hex
// value, "0x…", for any other.
func (s ServiceID) String() string {
	if !s.IsIPCM() {
		return fmt.Sprintf("0x%016x", uint64(s))
	}
	return s.PortSpace().String() + " port " + strconv.Itoa(int(s.Port()))
}
