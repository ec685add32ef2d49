package wire_test

// CM MADs for tshark to judge (registered through tsharkExtensions, see
// tshark_test.go): every IB CM message wire/mad encodes — REQ, MRA, REJ
// (consumer reject with private data, and the CM's own invalid service ID
// reject), REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP — each as Linux sends
// it, a 256-byte MAD in a UD SEND ONLY to QP1 (DETH Q_Key 0x80010000, source
// QP 1, UDP source port 55410 on RoCE v2), over RoCE v1, v2/IPv4 and v2/IPv6.
// The values follow one rping connection and one udaddy resolution of the
// lab's rxe traces (../shared/traces): comm IDs, transaction IDs, CA GUIDs,
// the RDMA_PS_TCP and RDMA_PS_UDP service IDs of port 7174, the IP CM header
// rdma_cm puts in the REQ and SIDR_REQ private data (IPv4 on v2/IPv4, IPv6
// on v2/IPv6; on RoCE v1, whose GIDs here are the link-local addresses,
// IPv6), rdma_cm's UD Q_Key.
//
// tshark must decode each frame as the intended CM message: its Info column
// ("CM: ConnectRequest", …), the MAD header (class, method, transaction ID,
// attribute ID), the whole 232-byte attribute data where tshark expects it,
// and the message's key fields (comm IDs, service ID, QPN, starting PSN,
// reject reason, …), with no malformed or expert warning/error mark.
//
// What tshark 4.0.17 cannot judge, and so is checked only in part:
//   - SIDR_REQ and SIDR_REP: it prints "Dissector Not Implemented" after the
//     MAD header, so only the MAD header (and the attribute data it shows as
//     the MAD data payload) is checked.
//   - MRA: it has no MsgRcptAck dissector either (no infiniband.cm.mra.*
//     field exists; the body shows as nothing but the MAD data payload), so
//     only the MAD header and that payload are checked.
//   - REQ Primary Flow Label and Packet Rate: it reads their 32-bit word one
//     byte early (see mad/testdata/README.md), so neither is
//     asserted; the fields before and after that word are.
//   - The zero UDP checksum over IPv6 that rxe sends is an error to it, so
//     the frames carry a real checksum (as in tshark_test.go), and one REQ
//     over v2/IPv6 with rxe's zero checksum pins that known complaint.

import (
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

func init() {
	tsharkExtensions = append(tsharkExtensions, tsharkCMFrames)
}

// cmHost is one end of the CM exchange.
type cmHost struct {
	mac      wire.MAC
	ip4, ip6 netip.Addr
	gid      netip.Addr // RoCE v1 GID (link-local, from the MAC)
	commID   uint32     // rdma_cm's local communication ID
	qpn      uint32     // the RC QP being connected
	psn      uint32     // its starting PSN
	caGUID   uint64
	cmPort   uint16 // IP CM port: the active side's source port, the passive side's listening port
}

var (
	// The active side, vm2 in the traces (rping -c).
	cmClient = cmHost{mac: macClient, ip4: ip4Client, ip6: ip6Client, gid: gidClient,
		commID: 0xba6bbd67, qpn: 0x000011, psn: 0x314830, caGUID: 0x505400fffec0020c, cmPort: 0xdf97}
	// The passive side, vm1 (rping -s), listening on port 7174.
	cmServer = cmHost{mac: macServer, ip4: ip4Server, ip6: ip6Server, gid: gidServer,
		commID: 0x4944653c, qpn: 0x000012, psn: 0x3439cf, caGUID: 0x505400fffec0020b, cmPort: 7174}
)

const (
	cmTID       = 0x0000000267bd6bba // the connection's transaction ID (every message of it)
	cmSIDRTID   = 0x0000000267bd6bbe // the SIDR exchange's
	cmSIDRReqID = 0xbe6bbd67
	cmSIDRQPN   = 0x00001f
	cmUDPQKey   = 0x01234567 // rdma_cm's RDMA_UDP_QKEY
)

// cmAddr returns h's address as the encapsulation carries it: the IPv4 or
// IPv6 address for RoCE v2, the link-local GID (an IPv6 address) for v1.
func cmAddr(e encap, h cmHost) netip.Addr {
	switch {
	case e.version == wire.RoCEv1:
		return h.gid
	case e.ipVer == 4:
		return h.ip4
	}
	return h.ip6
}

// cmGID returns h's GID for e: the IPv4-mapped address for v2/IPv4.
func cmGID(e encap, h cmHost) [16]byte { return cmAddr(e, h).As16() }

// cmIPCM returns the IP CM header of the active side's REQ or SIDR_REQ.
func cmIPCM(e encap) mad.IPCMHeaderFields {
	src, dst := cmAddr(e, cmClient), cmAddr(e, cmServer)
	v := uint8(6)
	if src.Is4() {
		v = 4
	}
	return mad.IPCMHeaderFields{IPVersion: v, SrcPort: cmClient.cmPort, SrcAddr: src, DstAddr: dst}
}

// cmFlowLabel is the REQ's primary flow label as rdma_cm sets it: on RoCE v2
// (sport × 31 + dport) & 0xFFFFF, 0xB2F4F for rping's ports; none on v1.
func cmFlowLabel(e encap) uint32 {
	if e.version == wire.RoCEv1 {
		return 0
	}
	return (uint32(cmClient.cmPort)*31 + uint32(cmServer.cmPort)) & wire.FlowLabelMask
}

// cmPrivate copies text into a private data field of n bytes.
func cmPrivate(text string, n int) []byte {
	b := make([]byte, n)
	copy(b, text)
	return b
}

// cmMsg is one CM message to send: who sends it, its MAD, and the tshark
// fields that say what it is.
type cmMsg struct {
	name     string // IBTA abbreviation
	from, to cmHost
	attr     mad.AttributeID
	tid      uint64
	data     []byte            // the 232-byte attribute data
	want     map[string]string // message fields tshark must show
}

// cmMessages returns every CM message, as sent in encapsulation e.
func cmMessages(e encap) []cmMsg {
	c, s := cmClient, cmServer
	hexs := hex.EncodeToString
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }

	// REQ: RC, RDMA_PS_TCP port 7174, the IP CM header and 24 bytes of
	// consumer private data (rdma_connect's conn_param).
	svc := mad.NewIPCMServiceID(mad.PortSpaceTCP, cmServer.cmPort)
	reqPD := string(cmIPCM(e).Append(nil)) + "goroce rdma_connect v1.0"
	req := mad.REQFields{
		LocalCommID: c.commID, ServiceID: svc, LocalCAGUID: c.caGUID, LocalQPN: c.qpn,
		ResponderResources: 1, InitiatorDepth: 1, RemoteCMResponseTimeout: 20,
		TransportServiceType: mad.TransportRC, StartingPSN: c.psn, LocalCMResponseTimeout: 20,
		RetryCount: 7, PartitionKey: wire.DefaultPKey, PathPacketPayloadMTU: 3 /* 1024 */, RNRRetryCount: 7,
		MaxCMRetries: 15,
		Primary: mad.REQPath{
			LocalPortLID: 0xffff, RemotePortLID: 0xffff, // the permissive LID, as on every RoCE port
			LocalPortGID: cmGID(e, c), RemotePortGID: cmGID(e, s),
			FlowLabel: cmFlowLabel(e), HopLimit: 64, LocalACKTimeout: 19,
		},
		PrivateData: [mad.REQPrivateDataLen]byte(cmPrivate(reqPD, mad.REQPrivateDataLen)),
	}
	reqWant := map[string]string{
		"infiniband.cm.req":                    u(uint64(c.commID)), // tshark's name for the Local Communication ID
		"infiniband.cm.req.serviceid":          u(uint64(svc)),
		"infiniband.cm.req.serviceid.protocol": u(uint64(mad.PortSpaceTCP)),
		"infiniband.cm.req.serviceid.dport":    u(uint64(s.cmPort)),
		"infiniband.cm.req.localcaguid":        u(c.caGUID),
		"infiniband.cm.req.localqpn":           u(uint64(c.qpn)),
		"infiniband.cm.req.responderres":       "1",
		"infiniband.cm.req.initdepth":          "1",
		"infiniband.cm.req.remoteresptout":     "20",
		"infiniband.cm.req.transpsvctype":      "0",
		"infiniband.cm.req.startpsn":           u(uint64(c.psn)),
		"infiniband.cm.req.localresptout":      "20",
		"infiniband.cm.req.retrcount":          "7",
		"infiniband.cm.req.pkey":               u(wire.DefaultPKey),
		"infiniband.cm.req.pppmtu":             "3",
		"infiniband.cm.req.rnrretrcount":       "7",
		"infiniband.cm.req.maxcmretr":          "15",
		"infiniband.cm.req.prim_locallid":      "65535",
		"infiniband.cm.req.prim_remotelid":     "65535",
		"infiniband.cm.req.prim_hoplim":        "64",
		"infiniband.cm.req.prim_localacktout":  "19",
		"infiniband.cm.req.ip_cm.majv":         "0",
		"infiniband.cm.req.ip_cm.minv":         "0",
		"infiniband.cm.req.ip_cm.ipv":          u(uint64(cmIPCM(e).IPVersion)),
		"infiniband.cm.req.ip_cm.sport":        u(uint64(c.cmPort)),
		"infiniband.cm.req.ip_cm.private":      hexs(req.PrivateData[mad.IPCMHeaderLen:]),
	}
	if cmIPCM(e).IPVersion == 4 {
		// tshark shows IPv4-mapped GIDs in fields of their own, as IPv4 addresses.
		reqWant["infiniband.cm.req.prim_localgid_ipv4"] = cmAddr(e, c).String()
		reqWant["infiniband.cm.req.prim_remotegid_ipv4"] = cmAddr(e, s).String()
		reqWant["infiniband.cm.req.ip_cm.sip4"] = cmAddr(e, c).String()
		reqWant["infiniband.cm.req.ip_cm.dip4"] = cmAddr(e, s).String()
	} else {
		reqWant["infiniband.cm.req.prim_localgid"] = cmAddr(e, c).String()
		reqWant["infiniband.cm.req.prim_remotegid"] = cmAddr(e, s).String()
		reqWant["infiniband.cm.req.ip_cm.sip6"] = cmAddr(e, c).String()
		reqWant["infiniband.cm.req.ip_cm.dip6"] = cmAddr(e, s).String()
	}

	// MRA of the REQ: rdma_cm's CMA_CM_MRA_SETTING, service timeout 24.
	mra := mad.MRAFields{LocalCommID: s.commID, RemoteCommID: c.commID, MessageMRAed: mad.MsgREQ, ServiceTimeout: 24}

	// REJ by the consumer (rdma_reject with private data).
	rejText := "goroce: no listener resources for this connection"
	rejConsumer := mad.REJFields{
		LocalCommID: s.commID, RemoteCommID: c.commID, MessageRejected: mad.MsgREQ,
		Reason:      mad.RejectConsumer,
		PrivateData: [mad.REJPrivateDataLen]byte(cmPrivate(rejText, mad.REJPrivateDataLen)),
	}
	// REJ by the CM when nothing listens on the service ID (Linux
	// cm_issue_rej): its local comm ID is the REQ's reserved word, 0.
	rejService := mad.REJFields{
		LocalCommID: 0, RemoteCommID: c.commID, MessageRejected: mad.MsgREQ,
		Reason: mad.RejectInvalidServiceID,
	}
	rejWant := func(f mad.REJFields) map[string]string {
		return map[string]string{
			"infiniband.cm.rej.localcommid":  u(uint64(f.LocalCommID)),
			"infiniband.cm.rej.remotecommid": u(uint64(f.RemoteCommID)),
			"infiniband.cm.rej.msgrej":       u(uint64(f.MessageRejected)),
			"infiniband.cm.rej.rejinfolen":   u(uint64(f.RejectInfoLength)),
			"infiniband.cm.rej.reason":       u(uint64(f.Reason)),
			"infiniband.cm.rej.private":      hexs(f.PrivateData[:]),
		}
	}

	rep := mad.REPFields{
		LocalCommID: s.commID, RemoteCommID: c.commID, LocalQPN: s.qpn, StartingPSN: s.psn,
		ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7,
		LocalCAGUID: s.caGUID,
	}
	rtu := mad.RTUFields{LocalCommID: c.commID, RemoteCommID: s.commID}
	dreq := mad.DREQFields{LocalCommID: c.commID, RemoteCommID: s.commID, RemoteQPN: s.qpn}
	drep := mad.DREPFields{LocalCommID: s.commID, RemoteCommID: c.commID}

	// SIDR for a UD QP: RDMA_PS_UDP port 7174, the IP CM header in the
	// SIDR_REQ; the SIDR_REP names the QP and rdma_cm's UD Q_Key.
	sidrSvc := mad.NewIPCMServiceID(mad.PortSpaceUDP, cmServer.cmPort)
	sidrIPCM := cmIPCM(e)
	sidrIPCM.SrcPort = 0xbf9f
	sidrReq := mad.SIDRREQFields{
		RequestID: cmSIDRReqID, PartitionKey: wire.DefaultPKey, ServiceID: sidrSvc,
		PrivateData: [mad.SIDRREQPrivateDataLen]byte(cmPrivate(string(sidrIPCM.Append(nil)), mad.SIDRREQPrivateDataLen)),
	}
	sidrRep := mad.SIDRREPFields{
		RequestID: cmSIDRReqID, Status: mad.SIDRSuccess, QPN: cmSIDRQPN, ServiceID: sidrSvc, QKey: cmUDPQKey,
	}

	return []cmMsg{
		{"REQ", c, s, mad.AttrREQ, cmTID, req.Append(nil), reqWant},
		{"MRA", s, c, mad.AttrMRA, cmTID, mra.Append(nil), nil}, // no MRA dissector in tshark 4.0
		{"REJ consumer", s, c, mad.AttrREJ, cmTID, rejConsumer.Append(nil), rejWant(rejConsumer)},
		{"REJ invalid service ID", s, c, mad.AttrREJ, cmTID, rejService.Append(nil), rejWant(rejService)},
		{"REP", s, c, mad.AttrREP, cmTID, rep.Append(nil), map[string]string{
			"infiniband.cm.rep":              u(uint64(s.commID)), // the Local Communication ID
			"infiniband.cm.rep.remotecommid": u(uint64(c.commID)),
			"infiniband.cm.rep.localqkey":    "0",
			"infiniband.cm.rep.localqpn":     u(uint64(s.qpn)),
			"infiniband.cm.rep.startpsn":     u(uint64(s.psn)),
			"infiniband.cm.rep.respres":      "1",
			"infiniband.cm.rep.initdepth":    "1",
			"infiniband.cm.rep.tgtackdelay":  "15",
			"infiniband.cm.rep.failoveracc":  "0",
			"infiniband.cm.rep.rnrretrcount": "7",
			"infiniband.cm.rep.srq":          "0",
			"infiniband.cm.rep.localcaguid":  u(s.caGUID),
		}},
		{"RTU", c, s, mad.AttrRTU, cmTID, rtu.Append(nil), map[string]string{
			"infiniband.cm.rtu.localcommid":  u(uint64(c.commID)),
			"infiniband.cm.rtu.remotecommid": u(uint64(s.commID)),
		}},
		{"DREQ", c, s, mad.AttrDREQ, cmTID, dreq.Append(nil), map[string]string{
			"infiniband.cm.dreq.localcommid":  u(uint64(c.commID)),
			"infiniband.cm.dreq.remotecommid": u(uint64(s.commID)),
			"infiniband.cm.req.remoteqpneecn": u(uint64(s.qpn)), // tshark files the DREQ's Remote QPN/EECN under cm.req
		}},
		{"DREP", s, c, mad.AttrDREP, cmTID, drep.Append(nil), map[string]string{
			"infiniband.cm.drsp.localcommid":  u(uint64(s.commID)),
			"infiniband.cm.drsp.remotecommid": u(uint64(c.commID)),
		}},
		{"SIDR_REQ", c, s, mad.AttrSIDRREQ, cmSIDRTID, sidrReq.Append(nil), nil}, // "Dissector Not Implemented"
		{"SIDR_REP", s, c, mad.AttrSIDRREP, cmSIDRTID, sidrRep.Append(nil), nil}, // "Dissector Not Implemented"
	}
}

// cmPacket is a UD SEND ONLY carrying m from m.from to m.to on QP1, as rxe
// sends it (GSI Q_Key, source QP 1, UDP source port 55410).
func cmPacket(e encap, m cmMsg, psn wire.PSN, ipID uint16) wire.PacketFields {
	hdr := mad.NewCMHeader(m.attr, m.tid)
	payload := append(hdr.Append(nil), m.data...)
	f := wire.PacketFields{
		Version: e.version,
		Eth:     &wire.EthernetFields{Dst: m.to.mac, Src: m.from.mac},
		BTH:     wire.BTHFields{Opcode: wire.OpcodeUDSendOnly, PKey: wire.DefaultPKey, DestQP: 1, PSN: psn, AckReq: true},
		Ext:     wire.ExtFields{DETH: wire.DETHFields{QKey: wire.GSIQKey, SrcQP: 1}},
		Payload: payload,
	}
	switch {
	case e.version == wire.RoCEv1:
		f.GRH = &wire.GRHFields{NextHeader: wire.GRHNextHdrIBTH, HopLimit: 1, Src: m.from.gid, Dst: m.to.gid}
	case e.ipVer == 4:
		f.IPv4 = &wire.IPv4Fields{ID: ipID, Flags: 2, TTL: 64, Protocol: wire.IPProtocolUDP,
			Src: m.from.ip4, Dst: m.to.ip4}
	default:
		f.IPv6 = &wire.IPv6Fields{NextHeader: wire.IPProtocolUDP, HopLimit: 64, Src: m.from.ip6, Dst: m.to.ip6}
	}
	if e.version == wire.RoCEv2 {
		f.UDP = wire.UDPFields{SrcPort: wire.UDSport(1), DstPort: wire.RoCEv2Port}
	}
	return f
}

// cmFrame encodes m in e and lists what tshark must decode from it.
func cmFrame(t testing.TB, e encap, m cmMsg, psn wire.PSN, ipID uint16) tsharkFrame {
	t.Helper()
	f := cmPacket(e, m, psn, ipID)
	if len(f.Payload) != mad.Size {
		t.Fatalf("CM %s: MAD of %d bytes, want %d", m.name, len(f.Payload), mad.Size)
	}
	tf := tsharkFromFields(t, e.name+"/CM "+m.name, f, false)
	w := tf.want
	// tshark decodes a SEND to QP1 as a MAD, not as data.
	delete(w, "data.data")
	w["frame.protocols"] = strings.TrimSuffix(w["frame.protocols"], ":data")
	if e.version == wire.RoCEv2 {
		w["udp.srcport"] = strconv.Itoa(int(wire.UDSport(1)))
		w["udp.dstport"] = strconv.Itoa(wire.RoCEv2Port)
		if e.ipVer == 6 {
			w["udp.checksum.status"] = "1" // Good: tshark verified it
		}
	}
	w["_ws.col.Info"] = "CM: " + m.attr.String()
	w["infiniband.mad.baseversion"] = strconv.Itoa(mad.BaseVersion)
	w["infiniband.mad.mgmtclass"] = "0x07"
	w["infiniband.mad.classversion"] = strconv.Itoa(mad.CMClassVersion)
	w["infiniband.mad.method"] = "0x03" // Send
	w["infiniband.mad.status"] = "0"
	w["infiniband.mad.transactionid"] = strconv.FormatUint(m.tid, 10)
	w["infiniband.mad.attributeid"] = "0x" + strconv.FormatUint(uint64(m.attr), 16)
	w["infiniband.mad.attributemodifier"] = "0"
	w["infiniband.mad.data"] = hex.EncodeToString(m.data)
	for k, v := range m.want {
		w[k] = v
	}
	return tf
}

// tsharkCMFrames returns every CM message in RoCE v1, v2/IPv4 and v2/IPv6,
// and rxe's REQ over IPv6 with a zero UDP checksum.
func tsharkCMFrames(tb testing.TB) []tsharkFrame {
	tb.Helper()
	var frames []tsharkFrame
	for _, e := range encapsNoVLAN {
		for i, m := range cmMessages(e) {
			frames = append(frames, cmFrame(tb, e, m, wire.PSN(i), uint16(0x015f+i)))
		}
	}
	// rping6's REQ: rxe leaves the UDP checksum 0 over IPv6 too.
	e := encaps[4]
	m := cmMessages(e)[0]
	rxe := cmFrame(tb, e, m, 6, 0)
	rxe.name += " (UDP checksum 0, as rxe sends)"
	rxe.frame = encode(tb, cmPacket(e, m, 6, 0))
	rxe.want["udp.checksum"] = "0"
	rxe.want["udp.checksum.status"] = "4" // Illegal
	rxe.allowExperts = []string{"Illegal checksum value (0)"}
	frames = append(frames, rxe)
	tb.Logf("tshark judges %d CM MADs: %d messages in %d encapsulations, and rxe's zero UDP checksum over IPv6",
		len(frames), len(cmMessages(e)), len(encapsNoVLAN))
	return frames
}
