package rdmacm

import (
	"fmt"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// Mixing RoCE versions is unsupported: a REQ sent over RoCE v2 to a port
// that speaks only v1 (old hardware, or a goroce port made with
// roce-versions v1) is never answered, and Linux reports only a timeout
// after about a minute. goroce keeps that outcome but finds out why: when
// the REQ's first response timeout passes with no answer, the CM asks the
// peer's CM for its ClassPortInfo over the other RoCE version (any CM
// answers a Get, if only with "unsupported": Linux's MAD layer does, and
// goroce's). An answer there means the peer speaks only that version; the
// CM says so at once (Options.Logf) and again in the UNREACHABLE event,
// with the command that fixes it.

// probe is an ID's other-version probe.
type probe struct {
	tid      uint64        // the Get's transaction ID; 0 = none sent
	typ      verbs.GIDType // the version it went out on
	noSource bool          // the port has no GID of the other version for our address
	answered bool          // the peer answered it
}

// other returns the RoCE version that is not t.
func other(t verbs.GIDType) verbs.GIDType {
	if t == verbs.GIDTypeRoCEv1 {
		return verbs.GIDTypeRoCEv2
	}
	return verbs.GIDTypeRoCEv1
}

// modeName is default_roce_mode's spelling of t.
func modeName(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "IB/RoCE v1"
	}
	return "RoCE v2"
}

// modeFlag is cma_roce_mode's -m value for t.
func modeFlag(t verbs.GIDType) int {
	if t == verbs.GIDTypeRoCEv1 {
		return 1
	}
	return 2
}

// probeOtherVersion sends the ClassPortInfo Get over the version the REQ
// did not use, from the same address. Called with cm.mu held.
func (id *ID) probeOtherVersion() {
	if id.probe.tid != 0 || id.ag == nil {
		return
	}
	t := other(id.gidType)
	sgid, ok := id.ag.gidIndex(gidOf(id.src.Addr()), t)
	if !ok {
		id.probe.noSource = true
		return
	}
	cm := id.cm
	var tid uint64
	for tid == 0 || cm.probes[tid] != nil {
		tid = uint64(id.ag.hiTID)<<32 | uint64(cm.rng.Uint32())
	}
	m := buildMAD(mad.AttrClassPortInfo, tid, emptyBody{})
	mad.Header(m).SetMethod(mad.MethodGet)
	id.probe = probe{tid: tid, typ: t}
	cm.probes[tid] = id
	id.ag.send(id.rgid, sgid, id.tos, m, 1)
}

// emptyBody is a MAD body of zeros.
type emptyBody struct{}

func (emptyBody) Append(b []byte) []byte { return append(b, make([]byte, mad.Size-len(b))...) }

// handleProbeAnswer takes a GetResp: if it answers a probe, the peer speaks
// the probe's version, and the REQ's silence says it does not speak the
// REQ's. Called with cm.mu held.
func (cm *CM) handleProbeAnswer(a *agent, in *inbound, h mad.Header) {
	id := cm.probes[h.TransactionID()]
	if id == nil || in.netType() != id.probe.typ || in.src != id.rgid {
		return
	}
	delete(cm.probes, h.TransactionID())
	if id.state != stReqSent || id.probe.answered {
		return
	}
	id.probe.answered = true
	if cm.opts.Logf != nil {
		cm.opts.Logf("%s", id.mismatch())
	}
}

// mismatch says what the answered probe showed and how to fix it.
func (id *ID) mismatch() string {
	dev := id.ag.dev.Name()
	t := id.probe.typ
	return fmt.Sprintf("peer %s answers %s only, this side sent its connection request over %s (%s port 1's default_roce_mode); "+
		"mixing RoCE versions is unsupported: set %s port 1 to %s: roce mode -d %s -p 1 -m %d "+
		"(or: echo %q > <configfs>/rdma_cm/%s/ports/1/default_roce_mode)",
		id.dst.Addr(), roceName(t), roceName(id.gidType), dev, dev, modeName(t), dev, modeFlag(t), modeName(t), dev)
}

func roceName(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "RoCE v1"
	}
	return "RoCE v2"
}

// unreachableDiagnosis explains an unanswered REQ. Called with cm.mu held.
func (id *ID) unreachableDiagnosis() string {
	switch {
	case id.probe.answered:
		return id.mismatch()
	case id.probe.tid != 0:
		return fmt.Sprintf("nothing answered over %s or %s either: is an RDMA CM server listening at %v (rping -s, rdma_server), "+
			"and is %v reachable from %v?", roceName(id.gidType), roceName(id.probe.typ), id.dst, id.dst.Addr(), id.src.Addr())
	case id.probe.noSource:
		return fmt.Sprintf("nothing answered over %s; %s port 1 has no %s GID for %v to try the other version "+
			"(a peer that speaks only %s never answers: mixing RoCE versions is unsupported)",
			roceName(id.gidType), id.ag.dev.Name(), roceName(other(id.gidType)), id.src.Addr(), roceName(other(id.gidType)))
	}
	return ""
}
