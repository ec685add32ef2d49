package linktest

import (
	"bytes"
	"runtime"
	"strings"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// WriteBatch builds, to a, an RC WRITE of n×4096 bytes as the engine sends
// it at path MTU 4096 (FIRST with a RETH, 4128 bytes; MIDDLEs and LAST,
// 4112; none when n is 0) from PSN psn0 on, then tiny SEND_ONLYs of 4
// bytes: GSO messages of the large and of the smallest kind. Each
// payload byte is its packet's PSN's low byte; the ICRCs are left 0, for
// the link to compute.
func WriteBatch(headroom int, a link.Addr, psn0 wire.PSN, n, tiny int) []link.Packet {
	var pkts []link.Packet
	psn := psn0
	for i := range n {
		op := wire.TransportRC | wire.OpWriteMiddle
		f := wire.PacketFields{BTH: wire.BTHFields{PKey: wire.DefaultPKey, DestQP: 0x11}}
		switch i {
		case 0:
			op = wire.TransportRC | wire.OpWriteFirst
			f.Ext.RETH = wire.RETHFields{VA: 0x1000, RKey: 7, DMALength: uint32(n * 4096)}
		case n - 1:
			op = wire.TransportRC | wire.OpWriteLast
		}
		f.BTH.Opcode, f.BTH.PSN = op, psn
		f.Payload = bytes.Repeat([]byte{byte(psn)}, 4096)
		pkts = append(pkts, Build(headroom, &f, a))
		psn++
	}
	for range tiny {
		f := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeRCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn},
			Payload: []byte{byte(psn), 2, 3, 4}}
		pkts = append(pkts, Build(headroom, &f, a))
		psn++
	}
	return pkts
}

// Build lays out f's transport packet behind headroom bytes, with room
// for its ICRC (0), addressed to a.
func Build(headroom int, f *wire.PacketFields, a link.Addr) link.Packet {
	buf := f.AppendTransport(make([]byte, headroom, link.MaxFrameSize))
	buf = append(buf, 0, 0, 0, 0)
	return link.Packet{Buf: buf, Off: headroom, Len: len(buf) - headroom, Addr: a}
}

// ParkedInRecvLocked reports whether a goroutine sleeps in the netpoller
// inside a link's RecvLocked (its stack is "[IO wait]" with RecvLocked on
// it).
func ParkedInRecvLocked() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		s := string(g)
		if strings.Contains(s, "[IO wait") && strings.Contains(s, ").RecvLocked(") {
			return true
		}
	}
	return false
}
