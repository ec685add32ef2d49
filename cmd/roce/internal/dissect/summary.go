package dissect

import (
	"strconv"

	"github.com/goroce/goroce/wire"
)

// AppendLine appends p's one-line summary, tshark style, without a newline:
//
//	7    0.102767 192.0.2.11 → 192.0.2.12 RoCEv2 RC_ACKNOWLEDGE QP=0x000011 PSN=3422671 ACK (credits: invalid) MSN=1
//
// frame number, seconds since the first frame, source → destination (IP
// addresses for RoCE v2, GIDs for RoCE v1), RoCE version, then Summary.
func (p *Packet) AppendLine(b []byte) []byte {
	b = appendPadded(b, strconv.Itoa(p.Number), 5)
	b = append(b, ' ')
	b = appendPadded(b, string(appendSeconds(nil, p.Time)), 11)
	b = append(b, ' ')
	b = append(b, p.Src().String()...)
	b = append(b, " → "...)
	b = append(b, p.Dst().String()...)
	b = append(b, ' ')
	b = append(b, p.Version.String()...)
	b = append(b, ' ')
	return append(b, p.Summary()...)
}

func appendPadded(b []byte, s string, width int) []byte {
	for i := len(s); i < width; i++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}

// Summary returns what the packet does, in the words rdma users know: the
// opcode (RC_SEND_ONLY), destination QP, PSN and AckReq, then what its
// extended headers say (RETH: VA, R_Key, length; AETH: syndrome and MSN;
// ...), the payload length, the CM message of a MAD on QP1, and a warning
// if the ICRC is wrong.
func (p *Packet) Summary() string {
	bth := p.BTH()
	b := make([]byte, 0, 128)
	b = append(b, p.Opcode().String()...)
	b = append(b, " QP="...)
	b = appendHex(b, uint64(bth.DestQP()), 24)
	b = append(b, " PSN="...)
	b = strconv.AppendUint(b, uint64(bth.PSN()), 10)
	for _, f := range []struct {
		set  bool
		name string
	}{{bth.AckReq(), "AckReq"}, {bth.SolicitedEvent(), "SE"}, {bth.FECN(), "FECN"}, {bth.BECN(), "BECN"}} {
		if f.set {
			b = append(b, ' ')
			b = append(b, f.name...)
		}
	}
	gsi := len(p.mad.summary) > 0
	for _, h := range headerOrder {
		hb := p.Header(h)
		if hb == nil || (gsi && h == wire.HdrDETH) {
			continue
		}
		b = appendExtSummary(b, &p.Packet, h, hb)
	}
	if gsi {
		b = append(b, ' ')
		b = append(b, p.mad.summary...)
	} else if n := len(p.Payload()); n > 0 {
		b = append(b, " Payload="...)
		b = strconv.AppendInt(b, int64(n), 10)
	}
	if p.mad.err != nil {
		b = append(b, " [MAD malformed: "...)
		b = append(b, p.mad.err.Error()...)
		b = append(b, ']')
	}
	if !p.ICRCOK() {
		b = append(b, " [ICRC WRONG]"...)
	}
	return string(b)
}

// appendExtSummary appends the summary words of one extended header.
func appendExtSummary(b []byte, p *wire.Packet, h wire.Header, hb []byte) []byte {
	kv := func(b []byte, k string, v uint64, bits int) []byte {
		b = append(b, ' ')
		b = append(b, k...)
		b = append(b, '=')
		return appendHex(b, v, bits)
	}
	switch h {
	case wire.HdrRDETH:
		b = kv(b, "EEC", uint64(wire.Word24(hb).Value()), 24)
	case wire.HdrDETH:
		d := wire.DETH(hb)
		b = kv(b, "QKey", uint64(d.QKey()), 32)
		b = kv(b, "SrcQP", uint64(d.SrcQP()), 24)
	case wire.HdrXRCETH:
		b = kv(b, "XRCSRQ", uint64(wire.Word24(hb).Value()), 24)
	case wire.HdrFETH:
		f := wire.FETH(hb)
		b = append(b, " Sel="...)
		b = strconv.AppendUint(b, uint64(f.Selectivity()), 10)
		b = kv(b, "Placement", uint64(f.PlacementType()), 4)
	case wire.HdrRETH:
		r := wire.RETH(hb)
		b = kv(b, "VA", r.VA(), 64)
		b = kv(b, "RKey", uint64(r.RKey()), 32)
		b = append(b, " Len="...)
		b = strconv.AppendUint(b, uint64(r.DMALength()), 10)
	case wire.HdrAtomicETH:
		a := wire.AtomicETH(hb)
		b = kv(b, "VA", a.VA(), 64)
		b = kv(b, "RKey", uint64(a.RKey()), 32)
		if p.Opcode().Operation() == wire.OpFetchAdd {
			b = kv(b, "Add", a.SwapAdd(), 64)
		} else {
			b = kv(b, "Swap", a.SwapAdd(), 64)
			b = kv(b, "Compare", a.Compare(), 64)
		}
	case wire.HdrAETH:
		a := wire.AETH(hb)
		b = append(b, ' ')
		b = append(b, a.Syndrome().String()...)
		b = append(b, " MSN="...)
		b = strconv.AppendUint(b, uint64(a.MSN()), 10)
	case wire.HdrAtomicAckETH:
		b = kv(b, "Orig", wire.AtomicAckETH(hb).OrigData(), 64)
	case wire.HdrImmDt:
		b = kv(b, "Imm", uint64(wire.Word32(hb).Value()), 32)
	case wire.HdrIETH:
		b = kv(b, "InvRKey", uint64(wire.Word32(hb).Value()), 32)
	}
	return b
}
