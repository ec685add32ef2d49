package verbs_test

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// rewriteLink rewrites in place, after the link below has parsed it (and
// handed its parse along in link.Packet.Parsed), the opcode of the first
// packet it receives with opcode from.
type rewriteLink struct {
	link.Link
	from, to wire.Opcode
	done     atomic.Bool
}

func (l *rewriteLink) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	for i := range pkts[:n] {
		if tr := pkts[i].Transport(); len(tr) > 0 && wire.Opcode(tr[0]) == l.from && !l.done.Swap(true) {
			tr[0] = byte(l.to)
		}
	}
	return n, err
}

// TestStaleLinkParse: the engine uses the link's parse of a packet only
// while it describes the bytes. A decorator turns a SEND ONLY, which the
// fabric parsed, into an undefined opcode: the engine parses it again,
// drops it as a bad header (rcvd_bad_header), and the retransmitted SEND
// completes; trusting the stale parse would have taken it for the SEND.
func TestStaleLinkParse(t *testing.T) {
	bad := wire.TransportRC | 0x1F
	if bad.Valid() {
		t.Fatalf("opcode %#x is defined", uint8(bad))
	}
	synctest.Test(t, func(t *testing.T) {
		rw := &rewriteLink{from: wire.OpcodeRCSendOnly, to: bad}
		p := verbstest.NewPair(t, verbstest.Options{Wrap: func(side int, l link.Link) link.Link {
			if side == 1 {
				rw.Link = l
				return rw
			}
			return l
		}})
		src := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
		dst := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite)
		msg := []byte("parsed once, unless it changed")
		src.set(0, msg)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{dst.mr.SGE(0, 64)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{src.mr.SGE(0, len(msg))}})
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		if wc := wantOK(t, p.B.RCQ, 7, verbs.WCRecv); wc.ByteLen != uint32(len(msg)) {
			t.Errorf("received %d bytes, want %d", wc.ByteLen, len(msg))
		}
		dst.check(t, piece{0, msg})
		if !rw.done.Load() {
			t.Fatal("the decorator rewrote nothing")
		}
		if n := ctr(t, p.B.Dev.Counters(), "rcvd_bad_header"); n != 1 {
			t.Errorf("rcvd_bad_header %d, want 1 (the rewritten SEND)", n)
		}
	})
}
