// Package link is the boundary between goroce's engine and a network: a
// batch packet interface in the style of wireguard-go's conn.Bind, with
// caller-owned buffers.
//
// The engine hands a link IBA transport packets (BTH through payload, with
// four bytes reserved at the end for the ICRC) and the addressing of each
// (Addr). The link encapsulates them (RoCE v1: Ethernet + GRH; RoCE v2:
// IPv4/IPv6 + UDP), computes the ICRC over the headers it really sends, and
// transmits. On receive it decapsulates, verifies the ICRC where it can see
// the headers it covers, drops and counts what is malformed, and hands back
// the transport packet and its addressing.
//
// Implementations: link/fabric (an in-memory switch with faults),
// link/pcap (a decorator that records any link's traffic), and later
// link/udp and link/afpacket.
package link

import (
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/wire"
)

// Addr is the addressing of one packet: what the GRH or the IP and UDP
// headers carry. GIDs are IPv6 addresses; an IPv4 RoCE v2 GID is the
// IPv4-mapped IPv6 address (::ffff:a.b.c.d).
type Addr struct {
	Version      wire.Version // RoCEv1 or RoCEv2
	SrcGID       netip.Addr
	DstGID       netip.Addr
	TrafficClass uint8  // IPv4 TOS / IPv6 and GRH traffic class (DSCP and ECN)
	FlowLabel    uint32 // IPv6 / GRH flow label (20 bits)
	HopLimit     uint8  // IPv4 TTL / IPv6 hop limit / GRH hop limit; 0 means 64
	UDPSrcPort   uint16 // RoCE v2 UDP source port; see wire.FlowLabelToUDPSport and wire.UDSport
}

// IsIPv4 reports whether a RoCE v2 packet travels over IPv4 (its GIDs are IPv4-mapped).
func (a *Addr) IsIPv4() bool { return a.Version == wire.RoCEv2 && a.DstGID.Is4In6() }

// Packet is one packet of a batch. Buf is owned by the caller of Send or
// Recv; a link never retains it after the call returns.
type Packet struct {
	// Buf holds the packet. For Send, the transport packet is
	// Buf[Off:Off+Len] including the 4 ICRC bytes, which the link fills;
	// Off should be at least the link's Headroom so it can prepend headers
	// in place. For Recv, Buf is an empty buffer of capacity at least
	// MaxFrameSize, and the link sets Off and Len.
	Buf  []byte
	Off  int
	Len  int
	Addr Addr
	// Parsed is, on Recv, the link's parse of the transport packet (it
	// checks it before delivering it): the engine uses it rather than
	// parsing the transport header again, when Parsed.Holds(Transport(),
	// Addr.Version) says it still describes those bytes, and parses them
	// itself otherwise (a link that does not parse, a decorator that moved
	// or rewrote the packet). Send ignores it.
	Parsed wire.Packet
}

// Transport returns the transport packet, BTH through ICRC.
func (p *Packet) Transport() []byte { return p.Buf[p.Off : p.Off+p.Len] }

// Link is a batch packet interface. Send and Recv may be called
// concurrently with each other; a link serializes concurrent Sends
// itself. After Close, Send and Recv return net.ErrClosed.
type Link interface {
	// Send transmits pkts and returns how many it handed to the network.
	// Packets it cannot send (no route, malformed Addr) are dropped and
	// counted, not returned as errors; an error means the link failed.
	Send(pkts []Packet) (int, error)
	// Recv blocks until at least one packet arrives and fills pkts[:n].
	Recv(pkts []Packet) (n int, err error)
	// BatchSize is the largest batch Send and Recv handle at once.
	BatchSize() int
	// Headroom is the number of bytes Send needs before a transport packet.
	Headroom() int
	// MTU is the largest transport packet (BTH through ICRC) the link carries.
	MTU() int
	// Stats returns the link's counters: the same pointer on every call,
	// which a device reads once (it mirrors them into its port's counters
	// after each batch, and a call through the links wrapping this one
	// costs three calls a batch).
	Stats() *Stats
	// Close stops the link and unblocks Recv.
	Close() error
}

// A Poller is a link whose receive path the engine can drive from any
// goroutine: the one that polls a completion queue receives, processes and
// answers packets itself (run to completion, as DPDK- and eRPC-style
// user-space stacks do), instead of waiting for a hand-off from a receive
// goroutine blocked in Recv. Packets must be taken and handled in the
// order they arrived, so the engine takes them only under a lock of its
// own, mu, which RecvLocked takes before it takes packets, and not while
// it sleeps.
type Poller interface {
	// TryRecv fills pkts[:n] with what has arrived, without waiting: n is
	// 0 when nothing has. The buffers are as Recv's.
	TryRecv(pkts []Packet) (n int, err error)
	// RecvLocked is Recv that takes the packets with mu held: it blocks
	// until at least one packet arrives, without holding mu while it
	// waits, and returns with mu held if and only if err is nil. After
	// Close it returns net.ErrClosed.
	RecvLocked(pkts []Packet, mu sync.Locker) (n int, err error)
}

// A PendingReporter is a Poller that can tell, without locks and without
// waiting, whether TryRecv would find something. While the host preempts
// pollers (verbs: a wait for its receive lock longer than a batch takes),
// the engine asks before it takes that lock to poll, so that a goroutine
// busy-polling an empty link holds it only while packets are there to
// take. Holding it for every empty look, the poller held it most of the
// time, and when the OS preempted the poller's thread there, the device's
// receive goroutine, woken by the next packets, waited for the lock as
// long as the thread stayed off the CPU: 66 ms in one trace, long enough
// for the peer's ACKs to sit unread past the local ACK timeout and the
// requester to resend what had arrived (BENCHMARKS.md, issue 16).
type PendingReporter interface {
	// Pending reports whether packets have arrived that TryRecv has not
	// taken. It may say true when TryRecv then finds nothing (an error, a
	// packet the link drops), never false while packets wait.
	Pending() bool
}

// A PathReporter is a link that can say why packets to a destination could
// not be sent: no route, no answer from the next hop's neighbour
// resolution, a RoCE version that cannot get there. The transport asks it
// when a peer never answered, to say so instead of guessing (a wrong QPN or
// GID). Decorators forward it (PathErrorOf).
type PathReporter interface {
	// PathError returns why packets of version v to dst could not be
	// delivered, as far as the link knows, or nil.
	PathError(dst netip.Addr, v wire.Version) error
}

// PathErrorOf asks l for dst's path error if l is a PathReporter.
func PathErrorOf(l Link, dst netip.Addr, v wire.Version) error {
	if r, ok := l.(PathReporter); ok {
		return r.PathError(dst, v)
	}
	return nil
}

// MaxFrameSize bounds any frame a link sends or receives: an Ethernet jumbo
// frame of 9000 bytes of payload plus an Ethernet header with one 802.1Q tag.
const MaxFrameSize = 9000 + wire.EthernetLen + wire.VLANTagLen

// Stats are a link's counters. Fields are updated atomically.
type Stats struct {
	TxPackets atomic.Uint64 // packets handed to the network
	RxPackets atomic.Uint64 // packets delivered to the engine
	TxBytes   atomic.Uint64
	RxBytes   atomic.Uint64
	// Drops on receive, by cause.
	RxBadICRC   atomic.Uint64 // ICRC mismatch
	RxMalformed atomic.Uint64 // a header failed to parse
	RxNotForUs  atomic.Uint64 // RoCE packet to a GID this port does not own
	// RxKernelRefused counts packets the kernel dropped while handing them
	// over (e.g. a UDP GRO superpacket an AF_PACKET socket cannot describe
	// on Linux 6.1); the sender's retransmission recovers them.
	RxKernelRefused atomic.Uint64
	// RxSocketFull counts packets the kernel dropped because the link's
	// receive socket was full (the receiver fell behind); the sender's
	// retransmission recovers them.
	RxSocketFull atomic.Uint64
	TxNoRoute    atomic.Uint64 // no path to the destination GID
	TxBadAddress atomic.Uint64 // Addr unusable (version/GID family mismatch)
}

// CounterInfo names one of a link's counters and says what it counts: the
// one place its name and meaning are written, for Snapshot, roce stat and
// the metrics exporter.
type CounterInfo struct {
	Name string // rxe-style snake_case
	Help string // what it counts, a phrase without a final period
	// Drop is the cause a drop is filed under in the exporter's
	// goroce_port_drops_total{cause}, set for the drops that roce stat
	// prints after the engine's counters; "" for the others, including the
	// drops the engine counts again as rcvd_bad_icrc and rcvd_bad_header.
	Drop string
}

// StatInfo describes one field of Stats.
type StatInfo struct {
	CounterInfo
	get func(*Stats) *atomic.Uint64
}

// StatTable describes every field of Stats, in the order the link's
// counters are listed.
var StatTable = []StatInfo{
	{CounterInfo{"tx_packets", "packets handed to the network", ""}, func(s *Stats) *atomic.Uint64 { return &s.TxPackets }},
	{CounterInfo{"rx_packets", "packets delivered to the engine", ""}, func(s *Stats) *atomic.Uint64 { return &s.RxPackets }},
	{CounterInfo{"tx_bytes", "bytes handed to the network", ""}, func(s *Stats) *atomic.Uint64 { return &s.TxBytes }},
	{CounterInfo{"rx_bytes", "bytes delivered to the engine", ""}, func(s *Stats) *atomic.Uint64 { return &s.RxBytes }},
	{CounterInfo{"rx_drop_bad_icrc", "packets dropped on receive: ICRC mismatch", ""}, func(s *Stats) *atomic.Uint64 { return &s.RxBadICRC }},
	{CounterInfo{"rx_drop_malformed", "packets dropped on receive: a header failed to parse", ""}, func(s *Stats) *atomic.Uint64 { return &s.RxMalformed }},
	{CounterInfo{"rx_drop_not_for_us", "RoCE packets dropped on receive: to a GID this port does not own", "not_for_us"}, func(s *Stats) *atomic.Uint64 { return &s.RxNotForUs }},
	{CounterInfo{"rx_drop_kernel_refused", "packets the kernel dropped while handing them over (the sender's retransmission recovers them)", "kernel_refused"}, func(s *Stats) *atomic.Uint64 { return &s.RxKernelRefused }},
	{CounterInfo{"rx_drop_socket_full", "packets the kernel dropped because the receive socket was full: the receiver fell behind (the sender's retransmission recovers them)", "socket_full"}, func(s *Stats) *atomic.Uint64 { return &s.RxSocketFull }},
	{CounterInfo{"tx_drop_no_route", "packets not sent: no path to the destination GID", "tx_no_route"}, func(s *Stats) *atomic.Uint64 { return &s.TxNoRoute }},
	{CounterInfo{"tx_drop_bad_address", "packets not sent: the address was unusable (RoCE version and GID family mismatch)", "tx_bad_address"}, func(s *Stats) *atomic.Uint64 { return &s.TxBadAddress }},
}

// Get returns the counter of s that i describes.
func (i StatInfo) Get(s *Stats) uint64 { return i.get(s).Load() }

// Snapshot returns the counters by name (StatTable's names).
func (s *Stats) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, len(StatTable))
	for _, i := range StatTable {
		m[i.Name] = i.Get(s)
	}
	return m
}

// AddrSet is a link's local addresses in the form a GID has (IPv4 as
// IPv4-mapped IPv6), which every received packet's destination is checked
// against. A netdev has a handful, so it is a slice, not a map: comparing
// two addresses takes a tenth of the time of hashing one
// (link/udp's BenchmarkIsLocal: 1.6 against 20 ns for two addresses).
type AddrSet []netip.Addr

// NewAddrSet returns the set of addrs, each once, in GID form.
func NewAddrSet(addrs []netip.Addr) AddrSet {
	s := make(AddrSet, 0, len(addrs))
	for _, a := range addrs {
		if g := netip.AddrFrom16(a.As16()); !slices.Contains(s, g) {
			s = append(s, g)
		}
	}
	return s
}

// Contains reports whether a, in GID form, is in the set.
func (s AddrSet) Contains(a netip.Addr) bool { return slices.Contains(s, a) }
