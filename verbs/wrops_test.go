package verbs

import (
	"testing"

	"github.com/goroce/goroce/wire"
)

// TestWROps checks the requester's table against wire's opcode table: every
// work request opcode that sends packets has a row, every operation in it
// is a request defined on each transport the opcode is valid for, in its
// place (only: first and last; first; middle; last), and the packets of
// one message share their family (SEND or WRITE). UD has only ONLY
// packets.
func TestWROps(t *testing.T) {
	for op := range WROpcode(len(wrOps)) {
		ops := wrOps[op]
		local := op == WRBindMW || op == WRLocalInv
		if sends := op.validFor(RC) || op.validFor(UD); sends && !local && ops == (wrOp{}) {
			t.Errorf("%v has no row", op)
		}
		if ops == (wrOp{}) {
			continue
		}
		for _, typ := range []QPType{RC, UC, UD} {
			if !op.validFor(typ) {
				continue
			}
			q := &QP{typ: typ}
			check := func(code wire.Opcode, pos wire.OpFlags) *wire.OpInfo {
				i := (q.transport() | code).Info()
				if !i.Valid() || !i.Is(wire.FlagRequest) || i.Flags&(wire.FlagFirst|wire.FlagMiddle|wire.FlagLast) != pos {
					t.Errorf("%v on %v: %v is not a request with position %b", op, typ, q.transport()|code, pos)
				}
				return i
			}
			only := check(ops.only, wire.FlagFirst|wire.FlagLast)
			if !ops.multi || typ == UD { // UD messages are one packet (startWQE)
				continue
			}
			family := only.Flags & (wire.FlagSend | wire.FlagWrite)
			for _, c := range []struct {
				code wire.Opcode
				pos  wire.OpFlags
			}{{ops.first, wire.FlagFirst}, {ops.middle, wire.FlagMiddle}, {ops.last, wire.FlagLast}} {
				if i := check(c.code, c.pos); i.Flags&(wire.FlagSend|wire.FlagWrite) != family {
					t.Errorf("%v on %v: %v is not of the only packet's family", op, typ, q.transport()|c.code)
				}
			}
		}
	}
}
