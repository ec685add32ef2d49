package verbs_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// FuzzReceive drives arbitrary transport packets, correctly framed and
// with a good ICRC so that they reach the engine, into a live device whose
// RC, UC and UD QPs are connected and have receives posted: the engine may
// drop them, NAK them or move a QP to ERR, but it never panics, never
// writes outside a registered region and still closes cleanly (goleak
// checks the goroutines in TestMain).
func FuzzReceive(f *testing.F) {
	// Seeds: one valid packet of every opcode, addressed by the fuzzer.
	for code := 0; code < 256; code++ {
		info := wire.Opcode(code).Info()
		if !info.Valid() {
			continue
		}
		pf := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.Opcode(code), PKey: 0xffff, PSN: 0x1000},
			Payload: make([]byte, max(info.FixedPayload, 0))}
		pf.Ext.DETH.QKey = 0x11111111
		pf.Ext.RETH.DMALength = 8
		f.Add(pf.AppendTransport(nil), uint8(code%3), true)
	}
	f.Add([]byte{0x04, 0, 0xff, 0xff}, uint8(0), false)
	f.Fuzz(func(t *testing.T, transport []byte, target uint8, fixQP bool) {
		if len(transport) > 4200 {
			return
		}
		p := verbstest.NewPair(t, verbstest.Options{})
		// Extra QPs of the other types on A, and receives everywhere.
		canary := make([]byte, 3*4096)
		for i := range canary {
			canary[i] = 0xa5
		}
		buf := canary[4096 : 2*4096]
		mr, err := p.A.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		if err != nil {
			t.Fatal(err)
		}
		qps := []*verbs.QP{p.A.QP}
		for _, typ := range []verbs.QPType{verbs.UC, verbs.UD} {
			qp, err := p.A.PD.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: p.A.CQ, RecvCQ: p.A.RCQ,
				Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if err := verbstest.ConnectQP(qp, p.B.QP.Num(), p.B.GID.GID, 0, verbstest.Options{}); err != nil {
				t.Fatal(err)
			}
			qps = append(qps, qp)
		}
		for _, qp := range qps {
			for i := 0; i < 2; i++ {
				if err := qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(i*2048, 2048)}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		inj, err := p.Fabric.AddPort(fabric.PortConfig{Name: "fuzz", GIDs: []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.99")}})
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, link.FrameHeadroom, link.MaxFrameSize)
		b = append(b, transport...)
		b = append(b, 0, 0, 0, 0)
		if fixQP && len(transport) >= wire.BTHLen {
			qp := qps[int(target)%len(qps)]
			x := b[link.FrameHeadroom:]
			x[5], x[6], x[7] = byte(qp.Num()>>16), byte(qp.Num()>>8), byte(qp.Num())
		}
		// From B's GID, so a connected QP takes it as its peer's.
		pk := link.Packet{Buf: b, Off: link.FrameHeadroom, Len: len(b) - link.FrameHeadroom,
			Addr: link.Addr{Version: wire.RoCEv2, SrcGID: p.B.GID.GID, DstGID: p.A.GID.GID, UDPSrcPort: 4791}}
		if _, err := inj.Send([]link.Packet{pk}); err != nil {
			t.Fatal(err)
		}
		// Then a probe to a UD QP of its own: A's one receive goroutine
		// handles packets in order, so once the probe completes the fuzzed
		// packet has been dealt with.
		probeCQ, _ := p.A.Dev.CreateCQ(4)
		probe, err := p.A.PD.CreateQP(verbs.QPInitAttr{Type: verbs.UD, SendCQ: probeCQ, RecvCQ: probeCQ,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := verbstest.ConnectQP(probe, 0, p.B.GID.GID, 0, verbstest.Options{}); err != nil {
			t.Fatal(err)
		}
		pbuf := make([]byte, 64)
		pmr, _ := p.A.PD.RegMR(pbuf, verbs.AccessLocalWrite)
		probe.PostRecv(verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{pmr.SGE(0, 64)}})
		pf := wire.PacketFields{BTH: wire.BTHFields{Opcode: wire.OpcodeUDSendOnly, PKey: 0xffff, DestQP: probe.Num()}}
		pf.Ext.DETH = wire.DETHFields{QKey: 0x11111111, SrcQP: 5}
		pb := pf.AppendTransport(make([]byte, link.FrameHeadroom, 256))
		pb = append(pb, 0, 0, 0, 0)
		pk.Buf, pk.Len = pb, len(pb)-link.FrameHeadroom
		if _, err := inj.Send([]link.Packet{pk}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
		defer cancel()
		if err := probeCQ.Wait(ctx); err != nil {
			t.Fatalf("the device stopped receiving: %v", err)
		}
		for i := range canary {
			if (i < 4096 || i >= 2*4096) && canary[i] != 0xa5 {
				t.Fatalf("byte %d outside the registered region changed", i)
			}
		}
	})
}
