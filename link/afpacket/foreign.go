package afpacket

import (
	"net/netip"
	"sync/atomic"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// The counters of RoCE v2 packets a v1-only link drops (Link.Counters).
const (
	// CounterV2OnV1 counts every RoCE v2 packet to this port's addresses
	// that a v1-only port dropped.
	CounterV2OnV1 = "rcvd_v2_on_v1_port"
	// CounterV2CMOnV1 counts those that were CM MADs to QP1 (RDMA CM's
	// REQ, its version probe, ...).
	CounterV2CMOnV1 = "rcvd_v2_cm_on_v1_port"
	// CounterV2OtherOnV1 counts the rest: data and ACKs of QPs whose peer
	// addresses this port with a RoCE v2 GID.
	CounterV2OtherOnV1 = "rcvd_v2_other_on_v1_port"
)

// CounterTable describes the counters Counters returns, in order. Only the
// total is a drop cause of its own; the other two split it by kind.
var CounterTable = []link.CounterInfo{
	{Name: CounterV2OnV1, Help: "RoCE v2 packets to this port's addresses that a v1-only port dropped", Drop: "v2_on_v1_port"},
	{Name: CounterV2CMOnV1, Help: "of those, CM MADs to QP1"},
	{Name: CounterV2OtherOnV1, Help: "of those, data and ACKs of QPs whose peer addresses this port with a RoCE v2 GID"},
}

// foreignStats counts the RoCE v2 packets a v1-only link drops.
type foreignStats struct {
	cm, other atomic.Uint64
}

// Foreign describes a packet in a RoCE version the link does not speak (RoCE
// v2 on a v1-only link), which it dropped. Its ICRC was verified and it was
// addressed to one of the port's GIDs.
type Foreign struct {
	Version  wire.Version // the packet's: wire.RoCEv2
	Src, Dst netip.Addr   // IP source and destination (IPv4 unmapped)
	SrcPort  uint16       // UDP source port
	Opcode   wire.Opcode
	DestQP   uint32
	// CM is set for an IB CM MAD to QP1 (IBA Vol 1 §12.6): Attr is its
	// message, Method its method, and ServiceID the service a REQ or
	// SIDR_REQ asks for (0 for the other messages).
	CM        bool
	Attr      mad.AttributeID
	Method    mad.Method
	ServiceID mad.ServiceID
}

// Message returns what the packet was: the CM message's name as IBTA
// abbreviates it ("REQ", "SIDR_REQ", "ClassPortInfo" …) for a CM MAD, else
// the opcode's name ("RC_SEND_ONLY" …).
func (f Foreign) Message() string {
	if f.CM {
		return f.Attr.Short()
	}
	return f.Opcode.String()
}

// Counters returns the counts of RoCE v2 packets this link dropped because
// it speaks RoCE v1 only (CounterV2OnV1 and its split by kind); nil for a
// link that carries RoCE v2.
func (l *Link) Counters() map[string]uint64 {
	if l.cfg.V2 {
		return nil
	}
	cm, other := l.foreign.cm.Load(), l.foreign.other.Load()
	return map[string]uint64{CounterV2OnV1: cm + other, CounterV2CMOnV1: cm, CounterV2OtherOnV1: other}
}

// dropForeign counts and reports a RoCE v2 packet (p, parsed and
// ICRC-checked, addressed by a) that a v1-only link drops. Called with rxMu.
func (l *Link) dropForeign(p *wire.Packet, a *link.Addr) {
	f := Foreign{Version: p.Version, Src: a.SrcGID.Unmap(), Dst: a.DstGID.Unmap(), SrcPort: a.UDPSrcPort,
		Opcode: p.Opcode(), DestQP: p.BTH().DestQP()}
	// RDMA CM's MADs are UD SENDs to QP1, the GSI (IBA Vol 1 §13.5.1).
	if f.DestQP == 1 && f.Opcode == wire.OpcodeUDSendOnly {
		if m, err := mad.Parse(p.Payload()); err == nil && m.IsCM() {
			h := m.Header()
			f.CM, f.Attr, f.Method = true, h.AttributeID(), h.Method()
			if req, ok := m.REQ(); ok {
				f.ServiceID = req.ServiceID()
			} else if req, ok := m.SIDRREQ(); ok {
				f.ServiceID = req.ServiceID()
			}
		}
	}
	if f.CM {
		l.foreign.cm.Add(1)
	} else {
		l.foreign.other.Add(1)
	}
	if l.cfg.OnForeign != nil {
		l.cfg.OnForeign(f)
	}
}
