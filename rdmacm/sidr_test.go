package rdmacm

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// TestSIDRRepeat: repeats of a SIDR_REQ whose CONNECT_REQUEST is still
// unanswered (the active side's own retries, and one injected by hand)
// bring no second CONNECT_REQUEST and no SIDR_REP, as cm.c drops them
// through remote_sidr_table. Once the SIDR_REP has gone the request is
// forgotten, as in cm.c: a repeat then is a new request, and destroying
// its unanswered ID sends a SIDR_REP with status Reject (cm_destroy_id).
func TestSIDRRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reqHook, reqs := capture(mad.AttrSIDRREQ)
		repHook, reps := capture(mad.AttrSIDRREP)
		// The active side retries every 100 ms, 30 times: time enough for
		// the repeats and the Accept below. In virtual time, so that "at
		// least 2 repeats in 350 ms" counts timer rounds, not how fast a
		// loaded machine runs them.
		retrying := fastOptions
		retrying.MaxRetries = 30
		a, b := newSidesHook(t, "", retrying, fastOptions, repHook, reqHook)
		listen(t, b, PSUDP, 7174)
		ca := dial(t, a, PSUDP, netip.AddrPortFrom(b.ip, 7174))
		if err := ca.Connect(ConnParam{PrivateData: []byte("once")}); err != nil {
			t.Fatal(err)
		}
		first := b.want(t, EventConnectRequest)
		// The active side sends its SIDR_REQ again every 100 ms meanwhile.
		noEvent(t, b, 350*time.Millisecond)
		in := recvMAD(t, reqs)
		if n := len(reqs); n < 2 {
			t.Fatalf("passive side got %d repeats of the SIDR_REQ in 350 ms, want at least 2", n)
		}
		inject := func() {
			b.cm.mu.Lock()
			defer b.cm.mu.Unlock()
			c := *in
			b.cm.handle(b.cm.agents[0], &c)
		}
		inject()
		noEvent(t, b, 50*time.Millisecond)
		if n := len(reps); n != 0 {
			t.Fatalf("active side got %d SIDR_REPs before Accept, want 0", n)
		}

		init := rcInit(b)
		init.Type = verbs.UD
		if _, err := first.ID.CreateQP(b.pd, init); err != nil {
			t.Fatal(err)
		}
		if err := first.ID.Accept(ConnParam{}); err != nil {
			t.Fatal(err)
		}
		a.want(t, EventEstablished)
		recvMAD(t, reps)

		// Answered: the same request again is a new one.
		inject()
		again := b.want(t, EventConnectRequest)
		if again.ID == first.ID {
			t.Fatal("the repeat after the SIDR_REP went to the answered ID")
		}
		again.ID.Destroy()
		m, err := mad.Parse(recvMAD(t, reps).mad)
		if err != nil {
			t.Fatal(err)
		}
		if rep, _ := m.SIDRREP(); rep.Status() != mad.SIDRReject {
			t.Errorf("SIDR_REP for the destroyed ID: status %v, want %v", rep.Status(), mad.SIDRReject)
		}
		noEvent(t, a, 50*time.Millisecond) // the active ID has its answer already
		ca.Destroy()
		first.ID.Destroy()
	})
}
