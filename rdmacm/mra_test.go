package rdmacm

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// getWithin waits up to d (virtual time in a synctest bubble) for s's next
// event.
func getWithin(t *testing.T, s *side, d time.Duration) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e, err := s.ec.Get(ctx)
	if err != nil {
		t.Fatalf("no event within %v: %v", d, err)
	}
	return e
}

// mraWait is how long a REQ's retries wait after Linux's MRA: cm_mra_handler
// adds cm_convert_to_ms of the service timeout (24) and of the packet
// lifetime + 1 (19): 2^16 + 2^11 ms.
const mraWait = 65536*time.Millisecond + 2048*time.Millisecond

// TestMRASlowAccept: with Linux's timeouts, a listener that accepts 5
// minutes after the CONNECT_REQUEST (far past the 16 × 4.3 s ≈ 68.7 s after
// which an unanswered REQ gives UNREACHABLE) still connects: the REQ's
// first repeat draws an MRA that makes each later try wait ≈ 67.6 s. The
// MRA has the fields Linux's cm.c gives it. Virtual time.
func TestMRASlowAccept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mraHook, mras := capture(mad.AttrMRA)
		var reqs atomic.Int32
		reqHook := func(in *inbound) {
			if mad.Header(in.mad).AttributeID() == mad.AttrREQ {
				reqs.Add(1)
			}
		}
		a, b := newSidesHook(t, "", Options{}, Options{}, mraHook, reqHook)
		listen(t, b, PSTCP, 7174)
		ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
		if err := ca.Connect(ConnParam{PrivateData: []byte("patience"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		cb := b.want(t, EventConnectRequest).ID

		time.Sleep(5 * time.Minute) // the consumer thinks it over

		if _, err := cb.CreateQP(b.pd, rcInit(b)); err != nil {
			t.Fatal(err)
		}
		if err := cb.Accept(ConnParam{PrivateData: []byte("at last"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		if e := getWithin(t, a, time.Minute); e.Type != EventEstablished {
			t.Fatalf("active side got %v, want ESTABLISHED", e)
		}
		b.want(t, EventEstablished)

		// REQs at 0 and 4.29 s (the repeat draws the MRA), then every
		// 67.584 s: 71.9, 139.5, 207.0 and 274.6 s; each repeat draws an MRA.
		if n := reqs.Load(); n != 6 {
			t.Errorf("passive side got %d REQs in 5 minutes, want 6", n)
		}
		if n := len(mras); n != 5 {
			t.Errorf("active side got %d MRAs, want 5 (one per repeated REQ)", n)
		}
		in := recvMAD(t, mras)
		m, err := mad.Parse(in.mad)
		if err != nil {
			t.Fatal(err)
		}
		mra, _ := m.MRA()
		h := m.Header()
		a.cm.mu.Lock()
		wantTID, alcid := ca.tid, ca.lcid
		a.cm.mu.Unlock()
		b.cm.mu.Lock()
		blcid := cb.lcid
		b.cm.mu.Unlock()
		for _, c := range []struct {
			what      string
			got, want uint64
		}{
			{"method", uint64(h.Method()), uint64(mad.MethodSend)},
			{"transaction ID (the REQ's)", h.TransactionID(), wantTID},
			{"MessageMRAed", uint64(mra.MessageMRAed()), uint64(mad.MsgREQ)},
			{"ServiceTimeout", uint64(mra.ServiceTimeout()), 24},
			{"LocalCommID", uint64(mra.LocalCommID()), uint64(blcid)},
			{"RemoteCommID", uint64(mra.RemoteCommID()), uint64(alcid)},
		} {
			if c.got != c.want {
				t.Errorf("MRA %s %#x, want %#x", c.what, c.got, c.want)
			}
		}
		if in.srcQP != 1 || in.src != gidOf(b.ip) {
			t.Errorf("MRA from QP %d at %v, want QP1 at %v", in.srcQP, in.src, gidOf(b.ip))
		}
		ca.Destroy()
		cb.Destroy()
	})
}

// TestMRAExtendsTimer: an MRA for the waiting REQ makes it and each
// remaining retry wait the MRA's service timeout plus the packet lifetime;
// the retry count goes on. An MRA for another message, and any MRA after
// the first, change nothing (cm_mra_handler). Nothing reaches the peer
// here; the MRAs are sent from its QP1 by hand. Virtual time.
func TestMRAExtendsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSides(t, "", Options{}, Options{})
		if err := a.fab.SetFaults(fabric.Faults{Loss: 1}); err != nil { // a's REQs are lost
			t.Fatal(err)
		}
		ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
		start := time.Now()
		if err := ca.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		a.cm.mu.Lock()
		lcid, tid := ca.lcid, ca.tid
		a.cm.mu.Unlock()
		sendMRA := func(msg mad.MsgType, st uint8) {
			b.cm.mu.Lock()
			defer b.cm.mu.Unlock()
			ag := b.cm.agents[0]
			sgid, ok := ag.gidIndex(gidOf(b.ip), verbs.GIDTypeRoCEv2)
			if !ok {
				t.Fatal("no RoCE v2 GID on the passive side")
			}
			f := mad.MRAFields{LocalCommID: 0x5eed, RemoteCommID: lcid, MessageMRAed: msg, ServiceTimeout: st}
			ag.send(gidOf(a.ip), sgid, 0, buildMAD(mad.AttrMRA, tid, f), 1)
		}
		time.Sleep(2 * time.Second)
		sendMRA(mad.MsgREP, 24) // not the waiting message: ignored
		time.Sleep(3 * time.Second)
		// After the REQ's first retry (4.29 s): the MRA that counts.
		sendMRA(mad.MsgREQ, 24)
		time.Sleep(5 * time.Second)
		sendMRA(mad.MsgREQ, 31) // a second MRA: ignored

		e := getWithin(t, a, time.Hour)
		if e.Type != EventUnreachable {
			t.Fatalf("got %v, want UNREACHABLE", e)
		}
		// 14 retries left after the MRA, each waiting mraWait, and the last
		// wait; without the MRA it would come at 16 × 4.29 s ≈ 68.7 s.
		if d, want := time.Since(start), 5*time.Second+15*mraWait; d != want {
			t.Errorf("UNREACHABLE after %v, want %v", d, want)
		}
		if e.Err == nil || !strings.Contains(e.Err.Error(), "acknowledged the connection request (MRA)") {
			t.Errorf("UNREACHABLE error %v, want it to say the peer's CM sent an MRA", e.Err)
		}
		if n := sentMADs(a); n != 17 {
			t.Errorf("%d MADs sent, want the REQ, 15 retries and the REJ (Timeout)", n)
		}
		ca.Destroy()
	})
}
