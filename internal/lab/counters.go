package lab

import (
	"testing"
)

// CheckRxeCounters is the one judgement every interop test makes of vm's
// rxe counters after goroce talked to it: before is l.Counters from the
// start of the test, ours goroce's device counters over the same time
// (verbs.Counters.Snapshot of a device the test opened).
//
// A connection given up (retry_exceeded_err, rnr_nak_retry_err) or a
// sequence error (rcvd_seq_err, out_of_seq_request: a request or response
// PSN ahead of the expected one) is a fault. A duplicate at rxe is what
// goroce's retransmission after its local ACK timeout looks like: on a
// loaded machine the emulated VM sometimes answers later than the QP's
// timeout, and IBTA has the requester send again; so duplicates up to the
// packets goroce retransmitted are logged, beyond them a fault. rxe's own
// retransmission timer (completer_retry_err) fires for the same reason
// the other way round: logged, and caught as a fault only if it ends in
// retry_exceeded_err.
func (l *Lab) CheckRxeCounters(t testing.TB, vm VM, before, ours map[string]uint64) {
	t.Helper()
	after := l.Counters(t, vm)
	moved := func(k string) uint64 { return after[k] - before[k] }
	for _, k := range []string{"retry_exceeded_err", "rnr_nak_retry_err", "rcvd_seq_err", "out_of_seq_request"} {
		if moved(k) != 0 {
			t.Errorf("rxe counter %s moved from %d to %d (goroce retransmitted %d packets)", k, before[k], after[k], ours["retrans_pkts"])
		}
	}
	switch dup := moved("duplicate_request"); {
	case dup > ours["retrans_pkts"]:
		t.Errorf("rxe counter duplicate_request moved from %d to %d, more than the %d packets goroce retransmitted",
			before["duplicate_request"], after["duplicate_request"], ours["retrans_pkts"])
	case dup > 0:
		t.Logf("rxe saw %d duplicate requests, explained by goroce's %d retransmissions (timeouts on a loaded machine)", dup, ours["retrans_pkts"])
	}
	if n := moved("completer_retry_err"); n > 0 {
		t.Logf("rxe's retransmission timer fired %d times (goroce counted %d duplicate requests)", n, ours["duplicate_request"])
	}
}
