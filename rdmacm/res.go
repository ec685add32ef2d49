package rdmacm

import (
	"net/netip"

	"github.com/goroce/goroce/verbs"
)

// emit queues e on the ID's event channel and tells Options.OnEvent; it
// reports whether e was queued (not on a closed channel). Called with
// cm.mu held.
func (id *ID) emit(e Event) bool {
	if f := id.cm.opts.OnEvent; f != nil {
		dev := ""
		if id.ag != nil {
			dev = id.ag.dev.Name()
		}
		f(dev, e)
	}
	return id.ec.push(e)
}

// track numbers id on a's device (none: nil), once (rdma_restrack_add in
// cma_attach_to_dev). Called with cm.mu held.
func (a *agent) track(id *ID) {
	if a != nil && !id.resSet {
		id.resNum, id.resSet = a.nextRes, true
		a.nextRes++
	}
}

// IDInfo describes a CM ID as `rdma res show cm_id` does.
type IDInfo struct {
	Device string // "" while the ID has no device
	Port   int
	// Num is the ID's number on its device, as rdma res show cm_id's
	// cm-idn: 0, 1, 2 ... in the order IDs got the device, never reused
	// (the kernel's restrack ids, which cma_attach_to_dev allocates
	// cyclically per device).
	Num    uint32
	ID     uint32 // the local comm ID (0 before a connection is attempted)
	LQPN   uint32 // 0: no QP
	QPType string // RC, UD, ...; "" without a QP
	State  string // rdma's names: IDLE, ADDR_QUERY, ADDR_RESOLVED, ROUTE_RESOLVED, CONNECT, DISCONNECT, ADDR_BOUND, LISTEN, DESTROYING
	PS     string // TCP, UDP, IB
	Src    netip.AddrPort
	Dst    netip.AddrPort
}

// rdmaState maps an ID's state to the name rdma res show gives the
// kernel's enum rdma_cm_state.
func (id *ID) rdmaState() string {
	switch id.state {
	case stIdle:
		return "IDLE"
	case stAddrBound:
		if id.dst.Addr().IsValid() {
			return "ADDR_RESOLVED"
		}
		return "ADDR_BOUND"
	case stRouteResolved:
		return "ROUTE_RESOLVED"
	case stListen:
		return "LISTEN"
	case stReqSent, stReqRcvd, stRepSent, stRepRcvd, stEstablished:
		return "CONNECT"
	case stDreqSent, stDreqRcvd, stTimewait, stDone:
		return "DISCONNECT"
	}
	return "DESTROYING"
}

// IDs lists the live CM IDs on dev (every ID when dev is nil), as
// `rdma res show cm_id` lists them.
func (cm *CM) IDs(dev *verbs.Device) []IDInfo {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	var out []IDInfo
	for id := range cm.ids {
		if dev != nil && (id.ag == nil || id.ag.dev != dev) {
			continue
		}
		in := IDInfo{Port: 1, Num: id.resNum, ID: id.lcid, State: id.rdmaState(), PS: psName(id.ps), Src: id.src, Dst: id.dst}
		if id.ag != nil {
			in.Device = id.ag.dev.Name()
		}
		if id.qp != nil {
			in.LQPN, in.QPType = id.qp.Num(), id.qp.Type().String()
		}
		out = append(out, in)
	}
	return out
}

func psName(ps PortSpace) string {
	switch ps {
	case PSTCP:
		return "TCP"
	case PSUDP:
		return "UDP"
	case PSIB:
		return "IB"
	}
	return "IPOIB"
}
