package pktring

import (
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ethLen is an Ethernet header's length, where a SOCK_RAW frame's network
// header starts.
const ethLen = 14

// UDPPortFilter is a socket filter over Ethernet frames that accepts IPv4
// and IPv6 UDP datagrams to port (and not IPv4 fragments after the first),
// whole, and drops everything else, so that the socket copies nothing it
// does not read. The jumps are counted by hand: link/udp's TestRoCEFilter
// runs the program in x/net/bpf's VM over real frames.
func UDPPortFilter(port uint16) []bpf.Instruction {
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2}, // Ethertype
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.ETH_P_IP, SkipFalse: 7}, // IPv4, else 9
		/* 2 */ bpf.LoadAbsolute{Off: ethLen + 9, Size: 1}, // protocol
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 11},
		/* 4 */ bpf.LoadAbsolute{Off: ethLen + 6, Size: 2}, // flags + fragment offset
		/* 5 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1FFF, SkipTrue: 9}, // a later fragment
		/* 6 */ bpf.LoadMemShift{Off: ethLen}, // X = IHL*4
		/* 7 */ bpf.LoadIndirect{Off: ethLen + 2, Size: 2}, // UDP destination port
		/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipTrue: 5, SkipFalse: 6},
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.ETH_P_IPV6, SkipTrue: 5},
		/* 10 */ bpf.LoadAbsolute{Off: ethLen + 6, Size: 1}, // IPv6 next header
		/* 11 */ bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 3},
		/* 12 */ bpf.LoadAbsolute{Off: ethLen + 42, Size: 2}, // UDP destination port
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipFalse: 1},
		/* 14 */ bpf.RetConstant{Val: 0x40000},
		/* 15 */ bpf.RetConstant{Val: 0},
	}
}

// DropAll is a socket filter that drops every packet: for a UDP socket
// that only holds its port while another socket reads its datagrams.
func DropAll() []bpf.Instruction { return []bpf.Instruction{bpf.RetConstant{Val: 0}} }

// Attach assembles prog and attaches it to fd (SO_ATTACH_FILTER).
func Attach(fd int, prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	p := unix.SockFprog{Len: uint16(len(raw)), Filter: (*unix.SockFilter)(unsafe.Pointer(&raw[0]))}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &p)
}
