// Package perftestcheck holds what the tests of roce perf (cmd/roce) and
// of package perftest both need to read a -R run's capture and output.
package perftestcheck

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// ConnOf says which connection of a -R run p belongs to, "test" (of the
// QPs numbered qpns) or "exchange": data and ACKs by their destination QP,
// REQs and REPs by the sender's QPN in them, the other CM MADs (RTU, DREQ,
// DREP, MRA, REJ) by a comm ID of theirs that a REQ or REP carried before
// (comms, which ConnOf fills); "" for a MAD of neither.
func ConnOf(p *wire.Packet, qpns map[uint32]bool, comms map[uint32]string) string {
	qpn := p.BTH().DestQP()
	if qpn == 1 {
		m, err := mad.Parse(p.Payload())
		if err != nil {
			return ""
		}
		var local, remote uint32
		if req, ok := m.REQ(); ok {
			qpn, local = req.LocalQPN(), req.LocalCommID()
		} else if rep, ok := m.REP(); ok {
			qpn, local = rep.LocalQPN(), rep.LocalCommID()
		} else {
			if r, ok := m.RTU(); ok {
				local, remote = r.LocalCommID(), r.RemoteCommID()
			} else if r, ok := m.DREQ(); ok {
				local, remote = r.LocalCommID(), r.RemoteCommID()
			} else if r, ok := m.DREP(); ok {
				local, remote = r.LocalCommID(), r.RemoteCommID()
			} else if r, ok := m.MRA(); ok {
				local, remote = r.LocalCommID(), r.RemoteCommID()
			} else if r, ok := m.REJ(); ok {
				local, remote = r.LocalCommID(), r.RemoteCommID()
			}
			if c := comms[local]; c != "" {
				return c
			}
			return comms[remote]
		}
		conn := map[bool]string{true: "test", false: "exchange"}[qpns[qpn]]
		comms[local] = conn
		return conn
	}
	if qpns[qpn] {
		return "test"
	}
	return "exchange"
}

// AddressQPNs returns the QPNs of perftest's address lines in outs
// (" local address: LID 0000 QPN 0x0013 ...").
func AddressQPNs(t testing.TB, outs ...string) map[uint32]bool {
	t.Helper()
	qpns := map[uint32]bool{}
	for _, out := range outs {
		for _, m := range regexp.MustCompile(` address: LID \S+ QPN (\S+) `).FindAllStringSubmatch(out, -1) {
			n, err := strconv.ParseUint(m[1], 0, 24)
			if err != nil {
				t.Fatal(err)
			}
			qpns[uint32(n)] = true
		}
	}
	if len(qpns) == 0 {
		t.Fatal("no address lines")
	}
	return qpns
}
