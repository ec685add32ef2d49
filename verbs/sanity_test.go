package verbs_test

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

func TestSanityAllTypesAndNets(t *testing.T) {
	for _, net := range verbstest.Networks {
		for _, typ := range []verbs.QPType{verbs.RC, verbs.UC, verbs.UD} {
			t.Run(net+"/"+typ.String(), func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
				src := bytes.Repeat([]byte("goroce!"), 100)
				dst := make([]byte, 2048)
				mrA, err := p.A.PD.RegMR(src, verbs.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				mrB, err := p.B.PD.RegMR(dst, verbs.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				if err := p.B.QP.PostRecv(verbs.RecvWR{WRID: 9, SGList: []verbs.SGE{mrB.SGE(0, len(dst))}}); err != nil {
					t.Fatal(err)
				}
				wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0xabcd, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{mrA.SGE(0, 700)}}
				if typ == verbs.UD {
					ah, err := p.A.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: p.B.GID.GID, SGIDIndex: p.A.GIDIndex}})
					if err != nil {
						t.Fatal(err)
					}
					wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, p.B.QP.Num(), 0x11111111
				}
				if err := p.A.QP.PostSend(wr); err != nil {
					t.Fatal(err)
				}
				verbstest.MustSucceed(t, p.A.CQ)
				wc := verbstest.Poll(t, p.B.RCQ, testenv.Slow)
				if wc.Status != verbs.WCSuccess || wc.ImmData != 0xabcd {
					t.Fatalf("recv: %v imm %#x", &wc, wc.ImmData)
				}
				off := 0
				if typ == verbs.UD {
					off = 40
					if wc.ByteLen != 740 || wc.SrcQP != p.A.QP.Num() {
						t.Fatalf("UD recv: %v src_qp %#x", &wc, wc.SrcQP)
					}
				}
				if !bytes.Equal(dst[off:off+700], src[:700]) {
					t.Fatal("data differs")
				}
			})
		}
	}
}
