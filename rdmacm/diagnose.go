package rdmacm

import (
	"fmt"
	"net/netip"

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
// goroce's), and the same question over the REQ's own version. An answer
// over the other version only means the peer speaks only that version (an
// answer over both means the REQ was merely lost or unanswered: a
// dual-version peer answers in the version of the request). The CM says so
// at the REQ's next timeout (Options.Logf) and again in the UNREACHABLE
// event, with the command that fixes it.

// probe is an ID's other-version probe.
type probe struct {
	tid          uint64        // the other-version Get's transaction ID; 0 = none sent
	sameTID      uint64        // the same-version Get's
	typ          verbs.GIDType // the other version
	noSource     bool          // the port has no GID of the other version for our address
	answered     bool          // the peer answered over the other version
	sameAnswered bool          // the peer answered over the REQ's version
	reported     bool          // Logf has the diagnosis
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
// did not use, from the same address, and one over the REQ's version.
// Called with cm.mu held.
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
	id.probe = probe{typ: t}
	id.probe.tid = id.sendProbe(sgid)
	id.probe.sameTID = id.sendProbe(id.sgid)
}

// sendProbe sends a CM ClassPortInfo Get from GID index sgid to the peer's
// QP1 and returns its transaction ID. Called with cm.mu held.
func (id *ID) sendProbe(sgid uint8) uint64 {
	cm := id.cm
	tid := cm.newProbeTID(id.ag)
	cm.probes[tid] = id
	id.ag.sendClassPortInfoGet(id.rgid, sgid, id.tos, tid)
	return tid
}

// newProbeTID returns a transaction ID for a ClassPortInfo Get sent by a
// that no probe in flight uses (an ID's or CM.Probe's). Called with cm.mu
// held.
func (cm *CM) newProbeTID(a *agent) uint64 {
	var tid uint64
	for tid == 0 || cm.probes[tid] != nil || cm.peerProbes[tid] != nil {
		tid = uint64(a.hiTID)<<32 | uint64(cm.rng.Uint32())
	}
	return tid
}

// sendClassPortInfoGet sends the CM class's Get(ClassPortInfo) with
// transaction ID tid from GID index sgid to QP1 at dgid: the one MAD any
// CM answers without a connection (Linux's MAD layer with GetResp status
// "unsupported method/attribute", since no CM agent takes Gets; goroce's
// CM the same). Called with cm.mu held.
func (a *agent) sendClassPortInfoGet(dgid netip.Addr, sgid, tc uint8, tid uint64) {
	m := buildMAD(mad.AttrClassPortInfo, tid, emptyBody{})
	mad.Header(m).SetMethod(mad.MethodGet)
	a.send(dgid, sgid, tc, m, 1)
}

// reportMismatch hands the diagnosis to Logf once it is sure: the other
// version answered and, by the REQ's next timeout, the REQ's own did not.
// Called with cm.mu held.
func (id *ID) reportMismatch() {
	if id.probe.answered && !id.probe.sameAnswered && !id.probe.reported && id.cm.opts.Logf != nil {
		id.probe.reported = true
		id.cm.opts.Logf("%s", id.mismatch())
	}
}

// emptyBody is a MAD body of zeros.
type emptyBody struct{}

func (emptyBody) Append(b []byte) []byte { return append(b, make([]byte, mad.Size-len(b))...) }

// handleProbeAnswer takes a GetResp that answers a probe. Called with
// cm.mu held.
func (cm *CM) handleProbeAnswer(a *agent, in *inbound, h mad.Header) {
	tid := h.TransactionID()
	id := cm.probes[tid]
	if id == nil || in.src != id.rgid {
		return
	}
	switch {
	case tid == id.probe.tid && in.netType() == id.probe.typ:
		id.probe.answered = true
	case tid == id.probe.sameTID && in.netType() == id.gidType:
		id.probe.sameAnswered = true
	default:
		return
	}
	delete(cm.probes, tid)
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
	if err := id.pathError(id.gidType); err != nil {
		return err.Error() // nothing could reach the peer (resolve.go)
	}
	switch {
	case id.mraRcvd:
		return fmt.Sprintf("the peer's CM at %v acknowledged the connection request (MRA) but its consumer neither accepted "+
			"nor rejected it in time", id.dst.Addr())
	case id.probe.answered && !id.probe.sameAnswered:
		return id.mismatch()
	case id.probe.sameAnswered:
		return fmt.Sprintf("the peer's CM at %v answers management queries over %s but never answered the connection request: "+
			"is the server stuck, or dropping REQs?", id.dst.Addr(), roceName(id.gidType))
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
