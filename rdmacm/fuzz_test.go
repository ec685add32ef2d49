package rdmacm

// FuzzCMSequence sends a live CM a sequence of hand-made CM MADs, as an
// attacker on the fabric would (RoCE has no authentication: anyone who can
// send to UDP port 4791 is a peer): REQ, MRA, REJ, REP, RTU, DREQ, DREP,
// LAP and APR (which the CM does not handle), SIDR_REQ and SIDR_REP, and
// ClassPortInfo, with every field the input's: comm IDs random or those
// of an established connection (either end), of the attacker's own
// earlier REQs or of the IDs the victim made for them; transaction IDs
// random or matching; source addresses spoofed, the real peer's or the
// victim's own; to the passive side (a listener on an RC and a UDP port,
// and one end of the established connection) or to the active side;
// methods other than Send, and truncated MADs. The passive side's
// consumer reads every event and accepts (with a QP), rejects, destroys or
// leaves each CONNECT_REQUEST as the input says. Virtual time
// (testing/synctest): every retry, MRA wait and timewait runs out. It
// checks:
//
//   - no panic;
//   - every event is of a documented type and one its ID may get
//     (CONNECT_REQUEST only for a new passive ID of a listener; nothing
//     but DISCONNECTED, REJECTED (of its REP: cm.c's cm_rej_handler in
//     IB_CM_ESTABLISHED; at the passive end only, which sent the REP) and
//     TIMEWAIT_EXIT for a connected one);
//   - the listener never has more CONNECT_REQUESTs unread than its
//     backlog, and the CM holds no ID but the listeners, the connection's
//     and those its consumer holds (bounds.go);
//   - once every CM timeout has passed and the consumer has let go of its
//     IDs, each CM's tables (IDs, comm IDs, remote keys, SIDR requests)
//     and timers are back to what they were before the attack;
//   - the established connection, if no MAD named it (both its comm IDs,
//     as Local and Remote Communication ID one way or the other, or the
//     peer's address, CA GUID and QPN in a REQ), still carries data, and
//     neither end got an event: one comm ID is not enough to end it;
//   - the listener still accepts a well-behaved connection, which
//     carries data.

import (
	"context"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// MAD kinds of an input.
const (
	cmfREQ = iota
	cmfMRA
	cmfREJ
	cmfREP
	cmfRTU
	cmfDREQ
	cmfDREP
	cmfLAP
	cmfAPR
	cmfSIDRREQ
	cmfSIDRREP
	cmfClassPortInfo
	cmfWait // let virtual time pass: retries and timers run
	numCMF
)

const (
	cmfMaxMADs = 32
	cmfRCPort  = 7174
	cmfUDPort  = 7175
)

// cmfIn hands out an input's bytes; past the end, zeros.
type cmfIn struct{ b []byte }

func (in *cmfIn) u8() uint8 {
	if len(in.b) == 0 {
		return 0
	}
	v := in.b[0]
	in.b = in.b[1:]
	return v
}

func (in *cmfIn) u16() uint16 { return uint16(in.u8()) | uint16(in.u8())<<8 }
func (in *cmfIn) u32() uint32 { return uint32(in.u16()) | uint32(in.u16())<<16 }

// cmfRun is one input's run.
type cmfRun struct {
	t       *testing.T
	a, b    *side
	at      *attacker
	l, lu   *ID // b's listeners: RC and UDP
	ca, cb  *ID // the established connection: a's end, b's
	policy  uint8
	nreq    int
	reqCIDs []uint32     // comm IDs of the attacker's REQs
	held    map[*ID]bool // IDs b's consumer holds (CONNECT_REQUESTs accepted or left)
	named   bool         // a MAD named the established connection
	base    [2]cmCounts
	events  int
}

// cmCounts is what a CM holds.
type cmCounts struct{ ids, byLocal, byRemote, sidrs, timers int }

func counts(cm *CM) cmCounts {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return cmCounts{len(cm.ids), len(cm.byLocal), len(cm.byRemote), len(cm.sidrs), len(cm.timers)}
}

// FuzzCMSequence: see the top of the file.
func FuzzCMSequence(f *testing.F) {
	for _, s := range cmSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		synctest.Test(t, func(t *testing.T) { cmfSequence(t, data) })
	})
}

func cmfSequence(t *testing.T, data []byte) {
	a, b := newSides(t, "", Options{}, Options{})
	r := &cmfRun{t: t, a: a, b: b, held: map[*ID]bool{}}
	r.l = listen(t, b, PSTCP, cmfRCPort)
	r.lu = listen(t, b, PSUDP, cmfUDPort)
	r.ca = dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, cmfRCPort))
	if err := r.ca.Connect(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	r.cb = acceptRC(t, b)
	a.want(t, EventEstablished)
	b.want(t, EventEstablished)
	synctest.Wait()
	r.base = [2]cmCounts{counts(a.cm), counts(b.cm)}
	r.at = newAttacker(t, b)

	in := &cmfIn{b: data}
	r.policy = in.u8()
	for i := 0; i < cmfMaxMADs && len(in.b) > 0; i++ {
		read := r.step(in)
		synctest.Wait()
		if read {
			r.consume()
		}
		r.bounded()
	}
	// Every retry, MRA wait and timewait runs out; the consumer lets go
	// of what it held.
	for range 3 {
		time.Sleep(cmTimeout(Options{}) + 70*time.Second)
		synctest.Wait()
		r.consume()
	}
	for id := range r.held {
		id.Destroy()
		delete(r.held, id)
	}
	time.Sleep(time.Minute)
	synctest.Wait()
	r.consume()
	t.Logf("%d MADs sent (%d REQs), %d events, the connection named: %v; passive CM: %v", r.at.psn, len(r.reqCIDs), r.events, r.named, b.cm.Counters(b.dev))
	for i, cm := range []*CM{a.cm, b.cm} {
		got, base := counts(cm), r.base[i]
		if r.named {
			// A MAD that named the connection may have ended it (a REJ of
			// its REP forgets its comm IDs; a DREQ leaves them until
			// Destroy): its ID stays, what it is known by may go.
			if got.byLocal <= base.byLocal && got.byLocal >= base.byLocal-1 {
				got.byLocal = base.byLocal
			}
			if got.byRemote <= base.byRemote && got.byRemote >= base.byRemote-1 {
				got.byRemote = base.byRemote
			}
		}
		if got != base {
			t.Errorf("%s's CM after every timeout: %+v, before the attack %+v", "ab"[i:i+1], counts(cm), base)
		}
	}
	if t.Failed() {
		return
	}
	// The connection no MAD named still carries data.
	if !r.named {
		send(t, a, b, r.ca.QP(), r.cb.QP(), []byte("still connected"))
		send(t, b, a, r.cb.QP(), r.ca.QP(), []byte("both ways"))
	}
	// A well-behaved connect is accepted.
	c := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, cmfRCPort))
	if err := c.Connect(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	var cb *ID
	for cb == nil {
		e, err := b.ec.Get(ctx)
		if err != nil {
			t.Fatalf("no CONNECT_REQUEST for a well-behaved connect after the attack: %v", err)
		}
		if e.Type == EventConnectRequest && e.Listen == r.l {
			cb = e.ID
		}
	}
	if _, err := cb.CreateQP(b.pd, rcInit(b)); err != nil {
		t.Fatal(err)
	}
	if err := cb.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := a.ec.Get(ctx)
		if err != nil {
			t.Fatalf("a well-behaved connect after the attack: %v", err)
		}
		if e.ID == c {
			if e.Type != EventEstablished {
				t.Fatalf("a well-behaved connect after the attack: %v", e)
			}
			break
		}
	}
	b.want(t, EventEstablished)
	send(t, a, b, c.QP(), cb.QP(), []byte("new connection"))
	c.Destroy()
	cb.Destroy()
	r.ca.Destroy()
	r.cb.Destroy()
}

// cid picks a comm ID; naming the established connection is noted.
func (r *cmfRun) cid(in *cmfIn) uint32 {
	r.a.cm.mu.Lock()
	calcid := r.ca.lcid
	r.a.cm.mu.Unlock()
	r.b.cm.mu.Lock()
	cblcid := r.cb.lcid
	r.b.cm.mu.Unlock()
	var c uint32
	switch in.u8() % 6 {
	case 0:
		c = in.u32()
	case 1:
		c = calcid
	case 2:
		c = cblcid
	case 3:
		if len(r.reqCIDs) > 0 {
			c = r.reqCIDs[int(in.u8())%len(r.reqCIDs)]
		}
	case 4:
		// The comm ID the victim gave one of the attacker's REQs (as an
		// attacker on the path would see it in the REP).
		if len(r.reqCIDs) > 0 {
			rc := r.reqCIDs[int(in.u8())%len(r.reqCIDs)]
			r.b.cm.mu.Lock()
			for k, id := range r.b.cm.byRemote {
				if k.commID == rc {
					c = id.lcid
				}
			}
			r.b.cm.mu.Unlock()
		}
	}
	return c
}

// pair notes whether a MAD's Local and Remote Communication IDs are the
// established connection's, one way or the other: the CM takes a message
// for a connection only if both are (cm.c's cm_acquire_id checks the
// remote ID with the local one).
func (r *cmfRun) pair(local, remote uint32) {
	r.a.cm.mu.Lock()
	a := r.ca.lcid
	r.a.cm.mu.Unlock()
	r.b.cm.mu.Lock()
	b := r.cb.lcid
	r.b.cm.mu.Unlock()
	if local == a && remote == b || local == b && remote == a {
		r.named = true
	}
}

// tid picks a transaction ID.
func (r *cmfRun) tid(in *cmfIn) uint64 {
	switch in.u8() % 4 {
	case 1:
		r.a.cm.mu.Lock()
		defer r.a.cm.mu.Unlock()
		return r.ca.tid
	case 2:
		r.b.cm.mu.Lock()
		defer r.b.cm.mu.Unlock()
		return r.cb.tid
	case 3:
		if len(r.reqCIDs) > 0 {
			return uint64(r.reqCIDs[len(r.reqCIDs)-1])
		}
	}
	return uint64(in.u32())
}

// addrs picks the source and destination: spoofed, the real peer's, the
// victim's own; to b (the listener, the connection's passive end) or a.
func (r *cmfRun) addrs(in *cmfIn) (src, dst netip.Addr) {
	s := in.u8()
	switch s % 4 {
	case 0, 3:
		src = spoofed(int(in.u8()))
	case 1:
		src = r.a.ip
	case 2:
		src = r.b.ip
	}
	dst = r.b.ip
	if s&0x80 != 0 {
		dst = r.a.ip
	}
	return src, dst
}

// step sends one MAD (or lets time pass), and reports whether the
// consumers read their events after it (a kind byte of 0xC0 and above
// says not: requests pile up in the backlog).
func (r *cmfRun) step(in *cmfIn) (read bool) {
	raw := in.u8()
	k, read := raw%numCMF, raw < 0xC0
	if k == cmfWait {
		time.Sleep(time.Duration(in.u16()) * 10 * time.Millisecond)
		return read
	}
	src, dst := r.addrs(in)
	var m []byte
	switch k {
	case cmfREQ:
		port := uint16(cmfRCPort)
		switch x := in.u8(); x % 4 {
		case 1:
			port = cmfUDPort
		case 2:
			port = uint16(in.u16())
		}
		cid := in.u32()
		if in.u8()%4 == 3 {
			cid = r.cid(in)
		}
		f := mad.REQFields{LocalCommID: cid, ServiceID: mad.NewIPCMServiceID(PSTCP, port), LocalCAGUID: 0xbad0000000000000 | uint64(cid),
			LocalQPN: uint32(in.u16()) | 0x100, ResponderResources: in.u8(), InitiatorDepth: in.u8(), RemoteCMResponseTimeout: in.u8() % 32,
			TransportServiceType: mad.TransportType(in.u8() % 4), StartingPSN: in.u32() & 0xFFFFFF, LocalCMResponseTimeout: in.u8() % 32,
			RetryCount: 7, PartitionKey: defaultPKey, PathPacketPayloadMTU: in.u8() % 16, RNRRetryCount: 7, MaxCMRetries: in.u8() % 16,
			Primary: mad.REQPath{LocalPortLID: lidPermissive, RemotePortLID: lidPermissive, LocalPortGID: gidOf(src).As16(),
				RemotePortGID: gidOf(dst).As16(), HopLimit: hopLimit, LocalACKTimeout: localACKTimeout}}
		if in.u8()%4 == 3 {
			// The established connection's peer, by its CA GUID and QPN.
			f.LocalCAGUID = r.a.dev.GUID()
			f.LocalQPN = r.ca.QP().Num()
			r.named = true
		}
		if src == r.a.ip {
			r.named = true
		}
		ver := uint8(4)
		if in.u8()%8 == 7 {
			ver = in.u8() // a bad IP CM header
		}
		copy(f.PrivateData[:], mad.IPCMHeaderFields{IPVersion: ver, SrcPort: 40000, SrcAddr: src, DstAddr: dst}.Append(nil))
		r.reqCIDs = append(r.reqCIDs, cid)
		m = buildMAD(mad.AttrREQ, uint64(cid), f)
	case cmfMRA:
		f := mad.MRAFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		f.MessageMRAed, f.ServiceTimeout = mad.MsgType(in.u8()%4), in.u8()%32
		m = buildMAD(mad.AttrMRA, r.tid(in), f)
	case cmfREJ:
		f := mad.REJFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		f.MessageRejected, f.RejectInfoLength, f.Reason = mad.MsgType(in.u8()%4), in.u8()%128, mad.RejectReason(in.u8()%40)
		m = buildMAD(mad.AttrREJ, r.tid(in), f)
	case cmfREP:
		f := mad.REPFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		f.LocalQPN, f.StartingPSN = uint32(in.u16())|0x100, in.u32()&0xFFFFFF
		f.ResponderResources, f.InitiatorDepth, f.RNRRetryCount, f.LocalCAGUID = in.u8(), in.u8(), 7, uint64(in.u32())
		m = buildMAD(mad.AttrREP, r.tid(in), f)
	case cmfRTU:
		f := mad.RTUFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		m = buildMAD(mad.AttrRTU, r.tid(in), f)
	case cmfDREQ:
		f := mad.DREQFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		f.RemoteQPN = uint32(in.u16())
		m = buildMAD(mad.AttrDREQ, r.tid(in), f)
	case cmfDREP:
		f := mad.DREPFields{LocalCommID: r.cid(in)}
		f.RemoteCommID = r.cid(in)
		r.pair(f.LocalCommID, f.RemoteCommID)
		m = buildMAD(mad.AttrDREP, r.tid(in), f)
	case cmfLAP, cmfAPR:
		attr := mad.AttrLAP
		if k == cmfAPR {
			attr = mad.AttrAPR
		}
		body := make([]byte, mad.DataLen)
		for i := range 8 {
			body[i] = in.u8()
		}
		m = append(mad.NewCMHeader(attr, r.tid(in)).Append(make([]byte, 0, mad.Size)), body...)
	case cmfSIDRREQ:
		port := uint16(cmfUDPort)
		if in.u8()%2 == 1 {
			port = uint16(in.u16())
		}
		f := mad.SIDRREQFields{RequestID: in.u32(), PartitionKey: defaultPKey, ServiceID: mad.NewIPCMServiceID(PSUDP, port)}
		copy(f.PrivateData[:], mad.IPCMHeaderFields{IPVersion: 4, SrcPort: 40000, SrcAddr: src, DstAddr: dst}.Append(nil))
		m = buildMAD(mad.AttrSIDRREQ, uint64(f.RequestID), f)
	case cmfSIDRREP:
		f := mad.SIDRREPFields{RequestID: r.cid(in)}
		f.Status = mad.SIDRStatus(in.u8() % 8)
		f.QPN = uint32(in.u16())
		f.QKey = in.u32()
		m = buildMAD(mad.AttrSIDRREP, r.tid(in), f)
	case cmfClassPortInfo:
		m = append(mad.NewCMHeader(mad.AttrClassPortInfo, r.tid(in)).Append(make([]byte, 0, mad.Size)), make([]byte, mad.DataLen)...)
	}
	// Another method, or a truncated MAD.
	switch x := in.u8(); {
	case x%16 == 1:
		mad.Header(m).SetMethod(mad.Method(in.u8()))
	case x%16 == 2:
		m = m[:int(in.u8())%len(m)]
	}
	r.at.send(src, dst, 0, m)
	return read
}

// consume reads both sides' events, checks them, and does what the
// consumer does.
func (r *cmfRun) consume() {
	t := r.t
	t.Helper()
	for {
		e, ok, err := r.b.ec.tryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		r.events++
		if e.Type < EventAddrResolved || e.Type > EventTimewaitExit {
			t.Fatalf("the passive side got an event of no documented type: %v", e)
		}
		switch {
		case e.ID == r.cb:
			if !r.named && e.Type != EventTimewaitExit {
				t.Fatalf("the established connection's passive end got %v, though no MAD named it", e)
			}
			if e.Type != EventDisconnected && e.Type != EventRejected && e.Type != EventTimewaitExit {
				t.Fatalf("the established connection's passive end got %v", e)
			}
		case e.Type == EventConnectRequest:
			if e.Listen != r.l && e.Listen != r.lu || e.ID == nil || r.held[e.ID] {
				t.Fatalf("CONNECT_REQUEST for ID %p of listener %p (the listeners: %p, %p)", e.ID, e.Listen, r.l, r.lu)
			}
			r.policy = r.policy>>2 | r.policy<<6
			switch r.policy % 4 {
			case 0:
				e.ID.Reject(nil)
				e.ID.Destroy()
			case 1:
				init := rcInit(r.b)
				if e.Listen == r.lu {
					init.Type = verbs.UD
				}
				if _, err := e.ID.CreateQP(r.b.pd, init); err != nil {
					t.Fatal(err)
				}
				r.held[e.ID] = true
				if err := e.ID.Accept(ConnParam{RNRRetryCount: 7}); err != nil {
					t.Fatalf("Accept of a CONNECT_REQUEST: %v", err)
				}
			case 2:
				r.held[e.ID] = true // left for later
			case 3:
				e.ID.Destroy()
			}
		case r.held[e.ID]:
			switch e.Type {
			case EventEstablished, EventTimewaitExit:
			case EventDisconnected, EventUnreachable, EventRejected, EventConnectError:
				e.ID.Destroy()
				delete(r.held, e.ID)
			default:
				t.Fatalf("an accepted request's ID got %v", e)
			}
		default:
			t.Fatalf("the passive side got %v for ID %p, which is neither the connection's nor one its consumer holds", e, e.ID)
		}
	}
	for {
		e, ok, err := r.a.ec.tryGet()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		r.events++
		if e.ID != r.ca {
			t.Fatalf("the active side got %v for ID %p, not its connection's", e, e.ID)
		}
		if !r.named && e.Type != EventTimewaitExit {
			t.Fatalf("the established connection's active end got %v, though no MAD named it", e)
		}
		if e.Type != EventDisconnected && e.Type != EventTimewaitExit {
			t.Fatalf("the established connection's active end got %v", e)
		}
	}
}

// bounded checks what the CMs hold against what their consumers hold.
func (r *cmfRun) bounded() {
	t := r.t
	t.Helper()
	if q := r.l.queued.Load(); q < 0 || int(q) > r.l.backlogOf() {
		t.Fatalf("the listener has %d CONNECT_REQUESTs unread, its backlog is %d", q, r.l.backlogOf())
	}
	if q := r.lu.queued.Load(); q < 0 || int(q) > r.lu.backlogOf() {
		t.Fatalf("the UDP listener has %d requests unread, its backlog is %d", q, r.lu.backlogOf())
	}
	b := counts(r.b.cm)
	unread := int(r.l.queued.Load() + r.lu.queued.Load())
	if b.ids > r.base[1].ids+len(r.held)+unread {
		t.Fatalf("the passive CM holds %d IDs: at most the %d before the attack, the %d its consumer holds and the %d of requests unread", b.ids, r.base[1].ids, len(r.held), unread)
	}
	if b.byLocal > b.ids+len(r.held)+cmfMaxMADs || b.byRemote > b.ids || b.sidrs > b.ids {
		t.Fatalf("the passive CM's tables outgrow its IDs: %+v", b)
	}
	if a := counts(r.a.cm); a.ids != r.base[0].ids {
		t.Fatalf("the active CM holds %d IDs, %d before the attack", a.ids, r.base[0].ids)
	}
}

// cmfSeed writes an input as step reads it.
type cmfSeed struct {
	b    []byte
	last int // where the last REQ's kind is
}

// unread is kind k's byte that says the consumers read nothing after it.
func unread(k uint8) uint8 { return (0xC0/numCMF+1)*numCMF + k }

func (w *cmfSeed) u8(v ...uint8) *cmfSeed { w.b = append(w.b, v...); return w }
func (w *cmfSeed) u16(v uint16) *cmfSeed  { return w.u8(byte(v), byte(v>>8)) }
func (w *cmfSeed) u32(v uint32) *cmfSeed  { return w.u16(uint16(v)).u16(uint16(v >> 16)) }

// spoof: from spoofed address i, to b (or a).
func (w *cmfSeed) spoof(i uint8, toA bool) *cmfSeed {
	if toA {
		return w.u8(0x80, i)
	}
	return w.u8(0, i)
}

// req: a well-formed REQ of comm ID cid to port sel (0 the RC listener, 1
// the UDP one), the rest zeros (RC, no special fields), untruncated.
func (w *cmfSeed) req(src uint8, port uint8, cid uint32) *cmfSeed {
	w.last = len(w.b)
	w.u8(cmfREQ).spoof(src, false).u8(port).u32(cid).u8(0)
	w.u16(0x200).u8(1, 1, 20, 0).u32(cid&0xFFFF).u8(20, 3, 15, 0, 0)
	return w.u8(0)
}

// cids: comm ID selectors (each 1: a's, 2: b's, 4: the victim's for the
// attacker's REQ n, 3: the attacker's REQ n).
func (w *cmfSeed) cid(sel uint8, n uint8) *cmfSeed {
	switch sel {
	case 0:
		return w.u8(0).u32(uint32(n) + 0x77)
	case 3, 4:
		return w.u8(sel, n)
	}
	return w.u8(sel)
}

// cmSeeds are the seed inputs: one of each MAD kind, aimed at the
// connection and at nothing, and the sequences of the handshake.
func cmSeeds() [][]byte {
	var seeds [][]byte
	for k := range uint8(numCMF) {
		// From a spoofed source, comm IDs random (what follows: zeros).
		seeds = append(seeds, new(cmfSeed).u8(0x1b, k).spoof(1, false).b)
	}
	// An attacker's REQ, accepted (policy 1), then its RTU with the comm
	// IDs the victim gave it, then its DREQ.
	w := new(cmfSeed).u8(0x55).req(9, 0, 0x1234)
	w.u8(cmfRTU).spoof(9, false).cid(3, 0).cid(4, 0).u8(3).u8(0)
	w.u8(cmfWait).u16(10)
	w.u8(cmfDREQ).spoof(9, false).cid(3, 0).cid(4, 0).u16(0).u8(3).u8(0)
	seeds = append(seeds, w.b)
	// The connection's own comm IDs: a DREQ to the passive end, from the
	// real peer's address.
	seeds = append(seeds, new(cmfSeed).u8(0, cmfDREQ, 1).cid(1, 0).cid(2, 0).u16(0).u8(1).u8(0).b)
	// A REP to the active end naming its comm ID.
	seeds = append(seeds, new(cmfSeed).u8(0, cmfREP).spoof(3, true).cid(0, 0).cid(1, 0).b)
	// An MRA and a REJ (of a REQ) for the connection, then a REJ of its
	// REP.
	w = new(cmfSeed).u8(0, cmfMRA).spoof(4, false).cid(0, 0).cid(2, 0).u8(0, 24, 2).u8(0)
	w.u8(cmfREJ).spoof(4, false).cid(1, 0).cid(2, 0).u8(0, 0, 1, 2).u8(0)
	w.u8(cmfREJ).spoof(4, false).cid(1, 0).cid(2, 0).u8(1, 0, 1, 2).u8(0)
	seeds = append(seeds, w.b)
	// A REJ of its REP to the passive end with its comm ID, but not the
	// peer's.
	seeds = append(seeds, new(cmfSeed).u8(0, cmfREJ).spoof(4, false).cid(0, 0).cid(2, 0).u8(1, 0, 1, 2).u8(0).b)
	// A REQ from the connection's peer's CA and QP: a stale connection.
	w = new(cmfSeed).u8(0)
	w.u8(cmfREQ).u8(1).u8(0).u32(0x4242).u8(0).u16(0x200).u8(1, 1, 20, 0).u32(1).u8(20, 3, 15, 3, 0).u8(0)
	seeds = append(seeds, w.b)
	// A REQ at a closed port, one at the UDP listener, one with a bad IP
	// CM header.
	w = new(cmfSeed).u8(0)
	w.u8(cmfREQ).spoof(5, false).u8(2).u16(9999).u32(7).u8(0).u16(0x200).u8(1, 1, 20, 0).u32(1).u8(20, 3, 15, 0, 0).u8(0)
	w.req(6, 1, 8)
	w.u8(cmfREQ).spoof(7, false).u8(0).u32(9).u8(0).u16(0x200).u8(1, 1, 20, 0).u32(1).u8(20, 3, 15, 0, 7, 6).u8(0)
	seeds = append(seeds, w.b)
	// SIDR_REQs to the UDP listener, left unanswered (policy 2), then a
	// SIDR_REP naming one.
	w = new(cmfSeed).u8(0xaa)
	w.u8(cmfSIDRREQ).spoof(3, false).u8(0).u32(0x51).u8(0)
	w.u8(cmfSIDRREQ).spoof(4, false).u8(0).u32(0x52).u8(0)
	w.u8(cmfSIDRREP).spoof(4, false).cid(0, 0).u8(0).u16(0).u32(0).u8(0, 0)
	seeds = append(seeds, w.b)
	// Truncated MADs and another method.
	w = new(cmfSeed).u8(0).req(5, 0, 0x99)
	w.b[len(w.b)-1] = 2
	w.u8(40)
	w.u8(cmfDREQ).spoof(5, false).cid(1, 0).cid(2, 0).u16(0).u8(1, 1)
	seeds = append(seeds, w.b)
	// A flood of REQs past the backlog, unread until the last ones, then
	// left; then time for their retries.
	w = new(cmfSeed).u8(0xaa)
	for i := range uint8(cmfMaxMADs - 1) {
		w.req(i, 0, 0x100+uint32(i))
		if i < 20 {
			w.b[w.last] = unread(cmfREQ)
		}
	}
	seeds = append(seeds, w.u8(cmfWait).u16(6000).b)
	// The same, accepted.
	w = new(cmfSeed).u8(0x55)
	for i := range uint8(cmfMaxMADs - 1) {
		w.req(i, 0, 0x200+uint32(i))
	}
	seeds = append(seeds, w.u8(cmfWait).u16(6000).b)
	return seeds
}
