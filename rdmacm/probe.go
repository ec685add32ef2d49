package rdmacm

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// ProbeReply is a peer CM's answer to Probe.
type ProbeReply struct {
	From   netip.Addr    // the GID the answer came from
	Type   verbs.GIDType // the RoCE version it came over
	RTT    time.Duration // from sending the Get to receiving its answer
	Status mad.Status    // the GetResp's status: Linux's MAD layer and goroce say 0x000c, unsupported method/attribute
}

// peerProbe is a Probe waiting for its answer.
type peerProbe struct {
	dst   netip.Addr // the GID asked
	sent  time.Time
	reply ProbeReply    // set before done closes; zero if the CM closed
	done  chan struct{} // closed once, under cm.mu, by the answer or Close
}

// Probe asks the RDMA CM at dst whether it answers over RoCE version t,
// with the question the mismatch diagnosis asks when a REQ goes
// unanswered (see diagnose.go): the CM class's Get(ClassPortInfo) from
// dev's GID of type t for src to QP1 at dst. Any CM answers it — Linux's
// MAD layer with GetResp, status "unsupported method/attribute", and
// goroce's CM the same — unless it does not speak t: a dual-version peer
// answers over the version asked. Probe sends the Get once and waits for
// the answer until ctx ends; dev must have been added to the CM.
//
// Errors: ENODEV if dev is not added; EADDRNOTAVAIL if dev has no GID of
// type t for src; ETIMEDOUT (wrapping ctx.Err() as well) if nothing
// answered before ctx ended; ESHUTDOWN after Close.
func (cm *CM) Probe(ctx context.Context, dev *verbs.Device, src, dst netip.Addr, t verbs.GIDType) (ProbeReply, error) {
	cm.mu.Lock()
	if cm.closed {
		cm.mu.Unlock()
		return ProbeReply{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: probe %v", dst), Err: syscall.ESHUTDOWN}
	}
	var a *agent
	for _, x := range cm.agents {
		if x.dev == dev {
			a = x
		}
	}
	if a == nil {
		cm.mu.Unlock()
		return ProbeReply{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: probe %v", dst), Device: dev.Name(), Err: syscall.ENODEV,
			Detail: fmt.Sprintf("device %s is not added to the CM", dev.Name())}
	}
	sgid, ok := a.gidIndex(gidOf(src), t)
	if !ok {
		cm.mu.Unlock()
		return ProbeReply{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: probe %v over %s", dst, roceName(t)), Device: dev.Name(),
			Detail: fmt.Sprintf("%s has no %s GID for %v", dev.Name(), roceName(t), src), Err: syscall.EADDRNOTAVAIL}
	}
	w := &peerProbe{dst: gidOf(dst), sent: time.Now(), done: make(chan struct{})}
	tid := cm.newProbeTID(a)
	cm.peerProbes[tid] = w
	a.sendClassPortInfoGet(w.dst, sgid, 0, tid)
	cm.mu.Unlock()

	select {
	case <-w.done:
	case <-ctx.Done():
		cm.mu.Lock()
		if cm.peerProbes[tid] == w {
			delete(cm.peerProbes, tid)
			cm.mu.Unlock()
			return ProbeReply{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: probe %v over %s from %s", dst, roceName(t), dev.Name()),
				Detail: "no answer", Err: withErrno{ctx.Err(), syscall.ETIMEDOUT}}
		}
		cm.mu.Unlock() // answered (or closed) meanwhile
		<-w.done
	}
	if !w.reply.From.IsValid() {
		return ProbeReply{}, &verbs.Error{Op: fmt.Sprintf("rdmacm: probe %v", dst), Err: syscall.ESHUTDOWN}
	}
	return w.reply, nil
}

// handlePeerProbe takes a GetResp to one of Probe's Gets: it must come
// from the GID asked and be about ClassPortInfo. Called with cm.mu held.
func (cm *CM) handlePeerProbe(w *peerProbe, in *inbound, h mad.Header) {
	if in.src != w.dst || h.AttributeID() != mad.AttrClassPortInfo {
		return
	}
	w.reply = ProbeReply{From: in.src, Type: in.netType(), RTT: time.Since(w.sent), Status: h.Status()}
	delete(cm.peerProbes, h.TransactionID())
	close(w.done)
}
