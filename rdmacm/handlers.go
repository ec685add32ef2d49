package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

func wirePSN(p uint32) wire.PSN { return wire.PSN(p & 0xFFFFFF) }

// replyREJ answers a REQ no ID takes (cm_issue_rej): local comm ID 0,
// remote comm ID the REQ's, sent back in the network type it came in.
func (cm *CM) replyREJ(a *agent, in *inbound, tid uint64, rcid uint32, reason mad.RejectReason) {
	sgid, ok := a.gidIndex(in.dst, in.netType())
	if !ok {
		return
	}
	f := mad.REJFields{RemoteCommID: rcid, MessageRejected: mad.MsgREQ, Reason: reason}
	a.send(in.src, sgid, in.tc, buildMAD(mad.AttrREJ, tid, f), in.srcQP)
}

// listenerFor returns the listener of service ID svc for destination
// address dst on device a.
func (cm *CM) listenerFor(a *agent, svc mad.ServiceID, dst netip.Addr) *ID {
	if !svc.IsIPCM() {
		return nil
	}
	l := cm.listeners[portKey{svc.PortSpace(), svc.Port()}]
	if l == nil {
		return nil
	}
	if la := l.src.Addr(); la.IsValid() && !la.IsUnspecified() && la != dst.Unmap() {
		return nil
	}
	if l.ag != nil && l.ag != a {
		return nil
	}
	return l
}

// newChild makes the passive ID of a request to l, answering in the
// network type the request came in (cma_ib_req_handler, cm_req_handler).
func (cm *CM) newChild(a *agent, in *inbound, l *ID, tid uint64, hdr mad.IPCMHeader) (*ID, bool) {
	sgid, ok := a.gidIndex(in.dst, in.netType())
	if !ok {
		return nil, false
	}
	c := &ID{cm: cm, ec: l.ec, ps: l.ps, state: stReqRcvd, ag: a, listen: l, sgid: sgid, gidType: in.netType(),
		rgid: in.src, tid: tid, mtu: a.dev.ActiveMTU(), psn: cm.rng.Uint32() & 0xFFFFFF}
	c.src = netip.AddrPortFrom(hdr.DstAddr(), l.src.Port())
	c.dst = netip.AddrPortFrom(hdr.SrcAddr(), hdr.SrcPort())
	c.lcid = cm.newCommID()
	cm.byLocal[c.lcid] = c
	cm.ids[c] = struct{}{}
	a.track(c)
	return c, true
}

func (cm *CM) handleREQ(a *agent, in *inbound, h mad.Header, req mad.REQ) {
	rk := remoteKey{req.LocalCommID(), req.LocalCAGUID()}
	if c := cm.byRemote[rk]; c != nil {
		// A retransmitted REQ (cm_dup_req_handler).
		switch {
		case c.state == stReqRcvd:
			// The consumer has the CONNECT_REQUEST but has not accepted or
			// rejected it yet: tell the active side to wait (cma.c's
			// ib_prepare_cm_mra; cm.c sends this MRA only for a repeated REQ).
			cm.sendMRA(a, in, c, mad.MsgREQ)
		case c.state == stRepSent && c.msg != nil:
			// cm.c ignores it and counts on the REP's own retries; resending
			// the REP costs nothing and saves the active side a timeout.
			c.ag.send(c.rgid, c.sgid, c.tos, c.msg, 1)
		}
		return
	}
	hdr, err := req.IPCM()
	l := (*ID)(nil)
	if err == nil {
		l = cm.listenerFor(a, req.ServiceID(), hdr.DstAddr())
	}
	if l == nil || l.ps == PSUDP || req.TransportServiceType() != mad.TransportRC {
		cm.replyREJ(a, in, h.TransactionID(), req.LocalCommID(), mad.RejectInvalidServiceID)
		return
	}
	if !l.admit() {
		// The backlog is full: no ID, no REJ, so the requester's next try
		// may find room (ucma_connect_event_handler's -ENOMEM, which
		// cm_destroy_id answers with no REJ "to allow future retries").
		a.count(ctrListenDrops)
		return
	}
	c, ok := cm.newChild(a, in, l, h.TransactionID(), hdr)
	if !ok {
		l.queued.Add(-1) // no CONNECT_REQUEST after all
		return
	}
	c.rcid, c.rguid, c.remoteKey = rk.commID, rk.guid, rk
	cm.byRemote[rk] = c
	c.rqpn, c.rpsn = req.LocalQPN(), req.StartingPSN()
	c.tos, c.flow = req.PrimaryTrafficClass(), req.PrimaryFlowLabel()
	if m := verbs.MTU(req.PathPacketPayloadMTU()); m >= verbs.MTU256 && m < c.mtu {
		c.mtu = m
	}
	// Until Accept says otherwise, the READ depths are the REQ's, mirrored
	// (cm_req_handler), and the retry counts are the REQ's for good.
	c.rd = rdParams{maxDestRd: req.InitiatorDepth(), maxRd: req.ResponderResources(),
		retry: req.RetryCount(), rnr: req.RNRRetryCount()}
	c.peer = ConnParam{ResponderResources: req.InitiatorDepth(), InitiatorDepth: req.ResponderResources(),
		RetryCount: req.RetryCount(), RNRRetryCount: req.RNRRetryCount(), QPNum: req.LocalQPN(),
		FlowControl: req.EndToEndFlowControl()}
	p := c.peer
	p.PrivateData = append([]byte(nil), req.PrivateData()[mad.IPCMHeaderLen:]...)
	if !c.emit(Event{Type: EventConnectRequest, ID: c, Listen: l, PrivateData: p.PrivateData, Param: p}) {
		// The listener's channel is closed: no one will see the request.
		l.queued.Add(-1)
		c.destroy() // rejects it
	}
}

func (cm *CM) handleREP(a *agent, in *inbound, rep mad.REP) {
	id := cm.byLocal[rep.RemoteCommID()]
	if id == nil {
		return
	}
	switch id.state {
	case stEstablished:
		if id.rcid == rep.LocalCommID() && id.lastRTU != nil {
			id.ag.send(id.rgid, id.sgid, id.tos, id.lastRTU, 1) // the RTU was lost
		}
		return
	case stRepRcvd:
		// The consumer has CONNECT_RESPONSE but has not called Establish:
		// cma.c prepared an MRA when the REP came (ib_prepare_cm_mra), and
		// cm_dup_rep_handler sends it for each repeat of the REP.
		if id.rcid == rep.LocalCommID() {
			cm.sendMRA(a, in, id, mad.MsgREP)
		}
		return
	case stReqSent:
	default:
		return
	}
	id.disarm()
	id.rcid, id.rqpn, id.rpsn, id.rguid = rep.LocalCommID(), rep.LocalQPN(), rep.StartingPSN(), rep.LocalCAGUID()
	p := ConnParam{ResponderResources: rep.InitiatorDepth(), InitiatorDepth: rep.ResponderResources(),
		RNRRetryCount: rep.RNRRetryCount(), QPNum: rep.LocalQPN(), FlowControl: rep.EndToEndFlowControl(),
		PrivateData: append([]byte(nil), rep.PrivateData()...)}
	id.peer = p
	id.rd = rdParams{maxDestRd: id.local.ResponderResources, maxRd: min(id.local.InitiatorDepth, rep.ResponderResources()),
		retry: id.local.RetryCount, rnr: rep.RNRRetryCount()}
	if id.qp == nil {
		// cma_ib_handler: an ID without a QP gets CONNECT_RESPONSE and
		// completes the connection itself (Establish).
		id.state = stRepRcvd
		id.emit(Event{Type: EventConnectResponse, ID: id, PrivateData: p.PrivateData, Param: p})
		return
	}
	// librdmacm's ucma_process_conn_resp: RTR, RTS, then rdma_accept (RTU).
	id.state = stRepRcvd
	if err := id.rtrRTS(); err != nil {
		id.sendREJ(mad.MsgREP, mad.RejectNoResources, nil)
		id.forget()
		id.state = stDone
		id.emit(Event{Type: EventConnectError, ID: id, Status: -int(syscall.EINVAL), Err: err})
		return
	}
	id.lastRTU = buildMAD(mad.AttrRTU, id.tid, mad.RTUFields{LocalCommID: id.lcid, RemoteCommID: id.rcid})
	id.ag.send(id.rgid, id.sgid, id.tos, id.lastRTU, 1)
	id.state = stEstablished
	id.emit(Event{Type: EventEstablished, ID: id, PrivateData: p.PrivateData, Param: p})
}

func (cm *CM) handleRTU(rtu mad.RTU) {
	id := cm.byLocal[rtu.RemoteCommID()]
	if id == nil || id.state != stRepSent || id.rcid != rtu.LocalCommID() {
		return
	}
	id.disarm()
	id.state = stEstablished
	id.emit(Event{Type: EventEstablished, ID: id, Param: id.peer})
}

func (cm *CM) handleREJ(rej mad.REJ) {
	id := cm.byLocal[rej.RemoteCommID()]
	if id == nil {
		return
	}
	// The REJ's Local Communication ID (IBTA Vol 1 §12.6.7) must be the
	// peer's, as cm.c's cm_acquire_rejected_id checks with cm_acquire_id:
	// a REJ of a REQ is for an ID that has not learned the peer's comm ID
	// (remote ID 0), any other for the ID whose peer has that comm ID.
	// Without it one 32-bit guess, not two, would end a connection.
	if rej.MessageRejected() == mad.MsgREQ {
		if id.rcid != 0 {
			return
		}
	} else if id.rcid != rej.LocalCommID() {
		return
	}
	switch id.state {
	case stReqSent, stRepSent, stRepRcvd:
	case stEstablished:
		// Only a REJ of the REP ends an established connection, and
		// only at the end that sent a REP: the passive one. The active
		// end sent none, so a REJ of "its" REP cannot be its peer's
		// (cm.c's cm_rej_handler takes any REJ in IB_CM_ESTABLISHED that
		// carries both comm IDs; goroce only one that can be real).
		if rej.MessageRejected() != mad.MsgREP || id.listen == nil {
			return
		}
	default:
		return
	}
	id.disarm()
	id.forget()
	id.state = stDone
	r := rej.Reason()
	id.emit(Event{Type: EventRejected, ID: id, Status: int(r),
		Err: &verbs.Error{Op: "rdmacm", Err: syscall.ECONNREFUSED,
			Detail: fmt.Sprintf("%v rejected the connection: reason %d (%v)", id.dst, uint16(r), r)},
		PrivateData: append([]byte(nil), rej.PrivateData()...)})
}

// MRA (IBTA Vol 1 §12.6.6), as Linux's cm.c and cma.c use it.
const (
	// mraServiceTimeout is the service timeout of every MRA Linux sends
	// (cma.c CMA_CM_MRA_SETTING, cm.c CM_MRA_SETTING): 4.096 µs × 2^24 ≈ 68.7 s.
	mraServiceTimeout = 24
	// packetLifeTime is the path's packet lifetime over RoCE, cma.c's
	// CMA_IBOE_PACKET_LIFETIME: 18 in the lab's kernel (6.1), as the local
	// ACK timeout 19 of its REQs shows (cm_ack_timeout with rxe's ACK delay
	// 15); later kernels have 16.
	packetLifeTime = 18
)

// cmConvert is cm.c's cm_convert_to_ms: 4.096 µs × 2^t rounded to a power
// of two milliseconds, 2^(t-8) ms.
func cmConvert(t uint8) time.Duration { return time.Millisecond << max(int(t)-8, 0) }

// sendMRA acknowledges the message of type msg from c's peer, which the
// consumer is still working on, in answer to its repeat in (cm_format_mra
// with the connection's transaction ID, sent back where the repeat came
// from as cm_alloc_response_msg does). Called with cm.mu held.
func (cm *CM) sendMRA(a *agent, in *inbound, c *ID, msg mad.MsgType) {
	sgid, ok := a.gidIndex(in.dst, in.netType())
	if !ok {
		return
	}
	f := mad.MRAFields{LocalCommID: c.lcid, RemoteCommID: c.rcid, MessageMRAed: msg, ServiceTimeout: mraServiceTimeout}
	a.send(in.src, sgid, in.tc, buildMAD(mad.AttrMRA, c.tid, f), in.srcQP)
}

// handleMRA: the peer has the REQ (or REP) and needs longer to answer. As
// cm_mra_handler does, the first MRA for the waiting message sets its timer
// to the MRA's service timeout plus the packet lifetime, from now and for
// each retry left (the retry count goes on); later MRAs change nothing.
func (cm *CM) handleMRA(mra mad.MRA) {
	id := cm.byLocal[mra.RemoteCommID()]
	if id == nil || id.msg == nil || id.mraRcvd {
		return
	}
	if (id.state == stReqSent && mra.MessageMRAed() == mad.MsgREQ && mad.Header(id.msg).AttributeID() == mad.AttrREQ) ||
		(id.state == stRepSent && mra.MessageMRAed() == mad.MsgREP && id.rcid == mra.LocalCommID()) {
		id.mraRcvd = true
		id.rto = cmConvert(mra.ServiceTimeout()) + cmConvert(packetLifeTime+1)
		id.arm(id.rto)
	}
}

// handleDREQ answers a DREQ. The DISCONNECTED it causes carries the DREQ's
// private data (Linux's cm.c passes it up; its rdma_cm drops it).
func (cm *CM) handleDREQ(a *agent, in *inbound, h mad.Header, dreq mad.DREQ) {
	id := cm.byLocal[dreq.RemoteCommID()]
	if id == nil || id.rcid != dreq.LocalCommID() {
		// No such connection: answer anyway (cm_issue_drep).
		if sgid, ok := a.gidIndex(in.dst, in.netType()); ok {
			f := mad.DREPFields{LocalCommID: dreq.RemoteCommID(), RemoteCommID: dreq.LocalCommID()}
			a.send(in.src, sgid, in.tc, buildMAD(mad.AttrDREP, h.TransactionID(), f), in.srcQP)
		}
		return
	}
	pd := append([]byte(nil), dreq.PrivateData()...)
	switch id.state {
	case stEstablished, stRepSent:
		id.disarm()
		id.lastDREP = id.drep(h.TransactionID(), nil)
		id.state = stDreqRcvd
		id.emit(Event{Type: EventDisconnected, ID: id, PrivateData: pd})
	case stDreqSent:
		// Crossing DREQs: both sides answer (rdma_client.pcap).
		id.disarm()
		id.lastDREP = id.drep(h.TransactionID(), nil)
		id.ag.send(id.rgid, id.sgid, id.tos, id.lastDREP, 1)
		id.emit(Event{Type: EventDisconnected, ID: id, PrivateData: pd})
		id.enterTimewait()
	case stTimewait:
		if id.lastDREP == nil {
			id.lastDREP = id.drep(h.TransactionID(), nil)
		}
		id.ag.send(id.rgid, id.sgid, id.tos, id.lastDREP, 1)
	}
}

// handleDREP ends a disconnection; DISCONNECTED carries the DREP's private
// data.
func (cm *CM) handleDREP(drep mad.DREP) {
	id := cm.byLocal[drep.RemoteCommID()]
	if id == nil || id.state != stDreqSent || id.rcid != drep.LocalCommID() {
		return
	}
	id.disarm()
	id.emit(Event{Type: EventDisconnected, ID: id, PrivateData: append([]byte(nil), drep.PrivateData()...)})
	id.enterTimewait()
}

// SIDR (IBTA §12.11): UD service resolution.

func (id *ID) connectSIDR(p ConnParam) error {
	if len(p.PrivateData) > mad.RDMACMMaxSIDRREQPrivateData {
		return id.errorf("connect", syscall.EINVAL, "private data of %d bytes: at most %d", len(p.PrivateData), mad.RDMACMMaxSIDRREQPrivateData)
	}
	cm := id.cm
	id.local = p
	id.lcid = cm.newCommID() // the request ID
	cm.byLocal[id.lcid] = id
	id.tid = id.ag.tid(id.lcid)
	f := mad.SIDRREQFields{RequestID: id.lcid, PartitionKey: defaultPKey, ServiceID: mad.NewIPCMServiceID(id.ps, id.dst.Port())}
	n := copy(f.PrivateData[:], id.ipcmHeader())
	copy(f.PrivateData[n:], p.PrivateData)
	id.msg = buildMAD(mad.AttrSIDRREQ, id.tid, f)
	id.msgQPN = 1
	id.state = stReqSent
	id.sendArm()
	return nil
}

// sidrKey identifies a SIDR request: the requester's request ID and GID.
type sidrKey struct {
	reqID uint32
	src   netip.Addr
}

func (cm *CM) handleSIDRREQ(a *agent, in *inbound, h mad.Header, m mad.MAD) {
	req, ok := m.SIDRREQ()
	if !ok {
		return
	}
	// A repeat of a request whose CONNECT_REQUEST is still unanswered
	// (the requester's retry) is dropped, as cm_sidr_req_handler drops it
	// when cm_insert_remote_sidr finds it in remote_sidr_table. The entry
	// goes when the SIDR_REP is sent (Accept, Reject, Destroy): a repeat
	// after that is a new request, as in cm.c, which keeps no copy of the
	// reply.
	k := sidrKey{req.RequestID(), in.src}
	if cm.sidrs[k] != nil {
		return
	}
	reply := func(st mad.SIDRStatus) {
		if sgid, ok := a.gidIndex(in.dst, in.netType()); ok {
			f := mad.SIDRREPFields{RequestID: req.RequestID(), Status: st, ServiceID: req.ServiceID()}
			a.send(in.src, sgid, in.tc, buildMAD(mad.AttrSIDRREP, h.TransactionID(), f), in.srcQP)
		}
	}
	hdr, err := m.IPCM()
	var l *ID
	if err == nil {
		l = cm.listenerFor(a, req.ServiceID(), hdr.DstAddr())
	}
	if l == nil || l.ps == PSTCP {
		reply(mad.SIDRUnsupported)
		return
	}
	if !l.admit() {
		// The backlog is full: cm_destroy_id answers a SIDR_REQ_RCVD ID
		// with SIDR_REP status Reject whatever the handler's error.
		a.count(ctrListenDrops)
		reply(mad.SIDRReject)
		return
	}
	c, ok := cm.newChild(a, in, l, h.TransactionID(), hdr)
	if !ok {
		l.queued.Add(-1) // no CONNECT_REQUEST after all
		return
	}
	c.rcid = req.RequestID()
	c.rqkey = udpQKey // marks the child as SIDR
	c.tos = in.tc
	c.sidr = k
	cm.sidrs[k] = c
	pd := append([]byte(nil), req.PrivateData()[mad.IPCMHeaderLen:]...)
	if !c.emit(Event{Type: EventConnectRequest, ID: c, Listen: l, PrivateData: pd, Param: ConnParam{PrivateData: pd}}) {
		l.queued.Add(-1)
		c.destroy() // SIDR_REP status Reject
	}
}

func (id *ID) acceptSIDR(p ConnParam) error {
	if len(p.PrivateData) > mad.RDMACMMaxSIDRREPPrivateData {
		return id.errorf("accept", syscall.EINVAL, "private data of %d bytes: at most %d", len(p.PrivateData), mad.RDMACMMaxSIDRREPPrivateData)
	}
	if id.qp == nil && p.QPNum == 0 {
		return id.errorf("accept", syscall.EINVAL, "no QP: call CreateQP first, or give ConnParam.QPNum for a QP you drive yourself")
	}
	id.local = p
	id.sendSIDRREP(mad.SIDRSuccess, id.qpNum(), p.PrivateData)
	id.forget()
	id.state = stEstablished
	return nil
}

func (id *ID) rejectSIDR(pd []byte) error {
	if len(pd) > mad.RDMACMMaxSIDRREPPrivateData {
		return id.errorf("reject", syscall.EINVAL, "private data of %d bytes: at most %d", len(pd), mad.RDMACMMaxSIDRREPPrivateData)
	}
	id.sendSIDRREP(mad.SIDRReject, 0, pd)
	id.forget()
	id.state = stDone
	return nil
}

// sendSIDRREP answers the ID's SIDR request: with the QP (qpn, Q_Key) on
// success, else with status st alone.
func (id *ID) sendSIDRREP(st mad.SIDRStatus, qpn uint32, pd []byte) {
	f := mad.SIDRREPFields{RequestID: id.rcid, Status: st, ServiceID: mad.NewIPCMServiceID(id.ps, id.src.Port())}
	if st == mad.SIDRSuccess {
		f.QPN, f.QKey = qpn, udpQKey
	}
	copy(f.PrivateData[:], pd)
	id.ag.send(id.rgid, id.sgid, id.tos, buildMAD(mad.AttrSIDRREP, id.tid, f), 1)
}

// UDParam is what an ESTABLISHED event of a UD ID tells (rdma_ud_param):
// the remote QPN and Q_Key, and an AH for sending to the peer.
type UDParam struct {
	QPNum uint32
	QKey  uint32
	AH    verbs.AHAttr
}

// UD returns the UD parameters learned from the SIDR_REP (active side) or
// the SIDR_REQ (passive side).
func (id *ID) UD() UDParam {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return UDParam{QPNum: id.rqpn, QKey: id.rqkey, AH: verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: id.rgid, SGIDIndex: id.sgid, HopLimit: hopLimit, TrafficClass: id.tos}}}
}

func (cm *CM) handleSIDRREP(rep mad.SIDRREP) {
	id := cm.byLocal[rep.RequestID()]
	if id == nil || id.state != stReqSent || id.ps != PSUDP && (id.qp == nil || id.qp.Type() != verbs.UD) {
		return
	}
	id.disarm()
	id.forget()
	pd := append([]byte(nil), rep.PrivateData()...)
	if st := rep.Status(); st != mad.SIDRSuccess {
		id.state = stDone
		// cma_sidr_rep_handler: UNREACHABLE with the SIDR status.
		id.emit(Event{Type: EventUnreachable, ID: id, Status: int(st), PrivateData: pd,
			Err: &verbs.Error{Op: "rdmacm", Err: syscall.ECONNREFUSED,
				Detail: fmt.Sprintf("%v: SIDR_REP status %d (%v)", id.dst, uint8(st), st)}})
		return
	}
	id.rqpn, id.rqkey = rep.QPN(), rep.QKey()
	id.state = stEstablished
	id.emit(Event{Type: EventEstablished, ID: id, PrivateData: pd, Param: ConnParam{PrivateData: pd, QPNum: id.rqpn}})
}
