package verbs_test

// Every opcode on every QP type it applies to, over every network, with
// the data checked byte for byte and the memory around it checked untouched.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// msgSizes are the message sizes every RC/UC opcode is run with.
func msgSizes(mtu int) []int { return []int{0, 1, mtu, mtu + 1, 10 * 1024, 1 << 20} }

// eachNet runs f in a subtest per network and QP type.
func eachNet(t *testing.T, types []verbs.QPType, f func(t *testing.T, net string, typ verbs.QPType)) {
	for _, net := range verbstest.Networks {
		for _, typ := range types {
			t.Run(net+"/"+typ.String(), func(t *testing.T) { f(t, net, typ) })
		}
	}
}

var rcuc = []verbs.QPType{verbs.RC, verbs.UC}

// TestSend: SEND and SEND_WITH_IMM of every size on RC and UC.
func TestSend(t *testing.T) {
	eachNet(t, rcuc, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		wrid := uint64(100)
		for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm} {
			for _, n := range msgSizes(1024) {
				t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
					wrid++
					data := randBytes(n, wrid)
					src := source(t, p.A.PD, data)
					dst := newCanary(t, p.B.PD, n+16, verbs.AccessLocalWrite)
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{dst.mr.SGE(0, n+16)}})
					imm := uint32(0xA0000000) | uint32(n)
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: op, Flags: verbs.SendSignaled,
						SGList: sgl(src, n), ImmData: imm})
					wc := wantOK(t, p.A.CQ, wrid, verbs.WCSend)
					if wc.QPNum != p.A.QP.Num() {
						t.Errorf("send completion qp_num %#x, want %#x", wc.QPNum, p.A.QP.Num())
					}
					rwc := wantOK(t, p.B.RCQ, wrid, verbs.WCRecv)
					if rwc.ByteLen != uint32(n) || rwc.QPNum != p.B.QP.Num() {
						t.Errorf("receive completion %v: want byte_len %d qp %#x", &rwc, n, p.B.QP.Num())
					}
					if op == verbs.WRSendWithImm {
						if rwc.Flags != verbs.WCWithImm || rwc.ImmData != imm {
							t.Errorf("receive flags %#x imm %#x; want WITH_IMM %#x", rwc.Flags, rwc.ImmData, imm)
						}
					} else if rwc.Flags != 0 {
						t.Errorf("receive flags %#x; want none", rwc.Flags)
					}
					dst.check(t, piece{0, data})
				})
			}
		}
	})
}

// TestRDMAWrite: RDMA_WRITE and RDMA_WRITE_WITH_IMM of every size on RC and UC.
func TestRDMAWrite(t *testing.T) {
	eachNet(t, rcuc, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		wrid := uint64(200)
		// UC completes a WRITE when it is on the wire; a SEND behind it
		// (same QP, same in-order path) shows when it has landed.
		syncUC := func(t *testing.T) {
			if typ != verbs.UC {
				return
			}
			wrid++
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid})
			mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled})
			wantOK(t, p.A.CQ, wrid, verbs.WCSend)
			wantOK(t, p.B.RCQ, wrid, verbs.WCRecv)
		}
		for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm} {
			for _, n := range msgSizes(1024) {
				t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
					wrid++
					id := wrid
					data := randBytes(n, id)
					src := source(t, p.A.PD, data)
					dst := newCanary(t, p.B.PD, n+16, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
					// WRITE_WITH_IMM consumes a receive but places no data in it.
					rbuf := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite)
					if op == verbs.WRRDMAWriteWithImm {
						mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: id, SGList: []verbs.SGE{rbuf.mr.SGE(0, 64)}})
					}
					imm := 0x5EED0000 | uint32(n)
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: id, Opcode: op, Flags: verbs.SendSignaled, SGList: sgl(src, n),
						RemoteAddr: dst.addr(8), RKey: dst.mr.RKey(), ImmData: imm})
					wantOK(t, p.A.CQ, id, verbs.WCRDMAWrite)
					if op == verbs.WRRDMAWriteWithImm {
						rwc := wantOK(t, p.B.RCQ, id, verbs.WCRecvRDMAWithImm)
						if rwc.ByteLen != uint32(n) || rwc.Flags != verbs.WCWithImm || rwc.ImmData != imm || rwc.QPNum != p.B.QP.Num() {
							t.Errorf("receive completion %v flags %#x imm %#x; want byte_len %d WITH_IMM %#x", &rwc, rwc.Flags, rwc.ImmData, n, imm)
						}
					} else {
						syncUC(t)
					}
					wantEmpty(t, p.B.RCQ)
					dst.check(t, piece{8, data})
					rbuf.check(t)
				})
			}
		}
	})
}

// TestRDMARead: RDMA_READ of every size on RC.
func TestRDMARead(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		for i, n := range msgSizes(1024) {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				wrid := uint64(300 + i)
				data := randBytes(n, wrid)
				remote := newCanary(t, p.B.PD, n+16, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
				rp := remote.set(4, data)
				local := newCanary(t, p.A.PD, n+16, verbs.AccessLocalWrite)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{local.mr.SGE(8, n)}, RemoteAddr: remote.addr(4), RKey: remote.mr.RKey()})
				wc := wantOK(t, p.A.CQ, wrid, verbs.WCRDMARead)
				if wc.ByteLen != uint32(n) {
					t.Errorf("READ completion byte_len %d, want %d", wc.ByteLen, n)
				}
				local.check(t, piece{8, data})
				remote.check(t, rp)
				wantEmpty(t, p.B.RCQ)
			})
		}
	})
}

// TestPathMTUs: multi-packet SEND, WRITE and READ at every path MTU, at
// the packet boundaries.
func TestPathMTUs(t *testing.T) {
	for _, typ := range rcuc {
		for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU512, verbs.MTU2048, verbs.MTU4096} {
			t.Run(fmt.Sprintf("%v/%v", typ, mtu), func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Type: typ, MTU: mtu})
				wrid := uint64(0)
				for _, n := range []int{mtu.Bytes() - 1, mtu.Bytes(), mtu.Bytes() + 1, 3*mtu.Bytes() + 5} {
					wrid++
					data := randBytes(n, wrid)
					src := source(t, p.A.PD, data)
					dst := newCanary(t, p.B.PD, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{dst.mr.SGE(0, n)}})
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, n)})
					wantOK(t, p.A.CQ, wrid, verbs.WCSend)
					if wc := wantOK(t, p.B.RCQ, wrid, verbs.WCRecv); wc.ByteLen != uint32(n) {
						t.Fatalf("SEND %d bytes: byte_len %d", n, wc.ByteLen)
					}
					dst.check(t, piece{0, data})

					wrid++
					data2 := randBytes(n, wrid)
					src2 := source(t, p.A.PD, data2)
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid})
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
						SGList: sgl(src2, n), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
					wantOK(t, p.A.CQ, wrid, verbs.WCRDMAWrite)
					wantOK(t, p.B.RCQ, wrid, verbs.WCRecvRDMAWithImm)
					dst.check(t, piece{0, data2})

					if typ == verbs.RC {
						wrid++
						back := newCanary(t, p.A.PD, n, verbs.AccessLocalWrite)
						mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
							SGList: sgl(back.mr, n), RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()})
						wantOK(t, p.A.CQ, wrid, verbs.WCRDMARead)
						back.check(t, piece{0, data2})
					}
				}
			})
		}
	}
}

// TestAtomics: CMP_AND_SWP (matching and not) and FETCH_AND_ADD; the
// original value lands in the local buffer in native byte order.
func TestAtomics(t *testing.T) {
	ne := binary.NativeEndian
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		remote := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite|verbs.AccessRemoteAtomic)
		local := newCanary(t, p.A.PD, 64, verbs.AccessLocalWrite)
		const orig = 0x1122334455667788
		cases := []struct {
			name        string
			op          verbs.WROpcode
			compareAdd  uint64
			swap        uint64
			start, want uint64
			wcop        verbs.WCOpcode
		}{
			{"cmp_swp-match", verbs.WRAtomicCmpAndSwp, orig, 0xCAFEBABEDEADBEEF, orig, 0xCAFEBABEDEADBEEF, verbs.WCCompSwap},
			{"cmp_swp-mismatch", verbs.WRAtomicCmpAndSwp, orig + 1, 0xCAFEBABEDEADBEEF, orig, orig, verbs.WCCompSwap},
			{"fetch_add", verbs.WRAtomicFetchAndAdd, 5, 0, orig, orig + 5, verbs.WCFetchAdd},
			{"fetch_add-wrap", verbs.WRAtomicFetchAndAdd, 3, 0, ^uint64(0), 2, verbs.WCFetchAdd},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				var b [8]byte
				ne.PutUint64(b[:], c.start)
				remote.set(16, b[:])
				var l [8]byte
				local.set(24, l[:]) // zero the result buffer
				wrid := uint64(400 + i)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: wrid, Opcode: c.op, Flags: verbs.SendSignaled,
					SGList: []verbs.SGE{local.mr.SGE(24, 8)}, RemoteAddr: remote.addr(16), RKey: remote.mr.RKey(),
					CompareAdd: c.compareAdd, Swap: c.swap})
				wc := wantOK(t, p.A.CQ, wrid, c.wcop)
				if wc.ByteLen != 8 {
					t.Errorf("atomic completion byte_len %d, want 8", wc.ByteLen)
				}
				var w, o [8]byte
				ne.PutUint64(w[:], c.want)
				ne.PutUint64(o[:], c.start)
				remote.check(t, piece{16, w[:]})
				local.check(t, piece{24, o[:]})
				if got := ne.Uint64(local.region()[24:]); got != c.start {
					t.Errorf("original value %#x, want %#x", got, c.start)
				}
			})
		}
	})
}

// TestFlush: FLUSH at both selectivity levels and every placement type.
func TestFlush(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		remote := newCanary(t, p.B.PD, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessFlushGlobal|verbs.AccessFlushPersistent)
		data := remote.set(0, randBytes(4096, 7))
		cases := []struct {
			name      string
			sel       uint8
			placement uint8
			addr      uint64
			n         uint32
		}{
			{"range/global", wire.FlushSelMRRange, wire.FlushGlobalVisibility, remote.addr(100), 1000},
			{"range/persistent", wire.FlushSelMRRange, wire.FlushPersistence, remote.addr(0), 4096},
			{"range/both", wire.FlushSelMRRange, wire.FlushGlobalVisibility | wire.FlushPersistence, remote.addr(4000), 96},
			{"mr/global", wire.FlushSelWholeMR, wire.FlushGlobalVisibility, remote.addr(0), 4096},
			{"mr/persistent", wire.FlushSelWholeMR, wire.FlushPersistence, remote.addr(0), 0},
			// The whole-MR level ignores the RETH's VA and length (IBTA
			// 1.5 Memory Placement Extensions; rxe's check_rkey skips the
			// range check for IB_FLUSH_MR).
			{"mr/va-ignored", wire.FlushSelWholeMR, wire.FlushGlobalVisibility, 0, 0},
		}
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				wrid := uint64(500 + i)
				wr := verbs.SendWR{WRID: wrid, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled,
					RemoteAddr: c.addr, RKey: remote.mr.RKey(), FlushSel: c.sel, FlushPlacement: c.placement}
				if c.n > 0 {
					// The DMA length of a FLUSH is the SG list's total (no local data moves).
					wr.SGList = []verbs.SGE{{Length: c.n}}
				}
				mustPostSend(t, p.A.QP, wr)
				wantOK(t, p.A.CQ, wrid, verbs.WCFlush)
				remote.check(t, data)
				wantEmpty(t, p.B.RCQ)
			})
		}
	})
}

// TestAtomicWrite: ATOMIC_WRITE places exactly its 8 bytes.
func TestAtomicWrite(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		remote := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		val := randBytes(8, 8)
		src := source(t, p.A.PD, val)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 600, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, 8), RemoteAddr: remote.addr(24), RKey: remote.mr.RKey()})
		wantOK(t, p.A.CQ, 600, verbs.WCAtomicWrite)
		remote.check(t, piece{24, val})
		wantEmpty(t, p.B.RCQ)
		// Anything but 8 bytes is refused at post time.
		err := p.A.QP.PostSend(verbs.SendWR{WRID: 601, Opcode: verbs.WRAtomicWrite, SGList: sgl(src, 4),
			RemoteAddr: remote.addr(24), RKey: remote.mr.RKey()})
		wantEINVAL(t, err, "8")
	})
}

// TestSendWithInv: SEND_WITH_INV naming a region registered with
// ibv_reg_mr is refused, as rxe refuses it (rxe_invalidate_mr invalidates
// only fast-registration MRs; IBTA §10.6.5 adds type 2 memory windows;
// goroce has neither yet): the message's data reaches the receive buffer,
// but the receive completes with IBV_WC_REM_INV_REQ_ERR, the responder
// reports IBV_EVENT_QP_REQ_ERR and goes to ERR, the requester gets
// IBV_WC_REM_INV_REQ_ERR, and the rkey keeps working. (goroce used to
// invalidate any region of the QP's PD: one packet from a peer revoked a
// region the application never offered, whose next use failed with
// IBV_WC_LOC_PROT_ERR.)
func TestSendWithInv(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		target := newCanary(t, p.B.PD, 256, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		dst := newCanary(t, p.B.PD, 2000, verbs.AccessLocalWrite)
		data := randBytes(1500, 9)
		src := source(t, p.A.PD, data)
		// The rkey works before.
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, 10), RemoteAddr: target.addr(0), RKey: target.mr.RKey()})
		wantOK(t, p.A.CQ, 1, verbs.WCRDMAWrite)
		target.check(t, piece{0, data[:10]})

		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{dst.mr.SGE(0, 2000)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled,
			SGList: sgl(src, 1500), InvalidateRKey: target.mr.RKey()})
		wantInvRefused(t, p, 2, target.mr.RKey())
		dst.check(t, piece{0, data})

		// The rkey still works (on a new connection: these QPs are in ERR).
		a, _ := freshRC(t, p)
		mustPostSend(t, a.qp, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: sgl(src, 100), RemoteAddr: target.addr(0), RKey: target.mr.RKey()})
		wantOK(t, a.cq, 3, verbs.WCRDMAWrite)
		target.check(t, piece{0, data[:100]})
	})
}

// wantInvRefused checks what a refused SEND_WITH_INV of rkey, wr_id wrid,
// leaves: IBV_WC_REM_INV_REQ_ERR at both ends, the receive's Detail naming
// the rkey, IBV_EVENT_QP_REQ_ERR on the responder, which is in ERR.
func wantInvRefused(t *testing.T, p *verbstest.Pair, wrid uint64, rkey uint32) {
	t.Helper()
	wc := poll(t, p.A.CQ)
	want(t, wc, verbs.WCRemInvReqErr, wrid)
	wantDetail(t, wc, "SEND_WITH_INV")
	rwc := poll(t, p.B.RCQ)
	want(t, rwc, verbs.WCRemInvReqErr, wrid)
	wantWord(t, "receive Detail", rwc.Detail, fmt.Sprintf("%#x", rkey))
	ev := waitEvent(t, p.B.Dev, verbs.EventQPReqErr, p.B.QP.Num())
	wantWord(t, "event Detail", ev.Detail, fmt.Sprintf("%#x", rkey))
	if s := p.B.QP.State(); s != verbs.QPSErr {
		t.Errorf("responder QP in %v, want ERR", s)
	}
	noEvent(t, p.B.Dev, verbs.EventQPFatal)
}

// rcEnd is one end of a connection freshRC made.
type rcEnd struct {
	qp *verbs.QP
	cq *verbs.CQ // send and receive completions
}

// freshRC connects a new RC QP on each of p's devices, for a test whose
// pair's QPs have gone to ERR.
func freshRC(t *testing.T, p *verbstest.Pair) (a, b rcEnd) {
	t.Helper()
	ends := [2]*rcEnd{&a, &b}
	for i, s := range []*verbstest.Side{&p.A, &p.B} {
		cq, err := s.Dev.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		*ends[i] = rcEnd{qp, cq}
	}
	o := p.Opts
	o.Type = verbs.RC
	if err := verbstest.ConnectQP(a.qp, b.qp.Num(), p.B.GID.GID, p.A.GIDIndex, o); err != nil {
		t.Fatal(err)
	}
	if err := verbstest.ConnectQP(b.qp, a.qp.Num(), p.A.GID.GID, p.B.GIDIndex, o); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// TestOpcodeValidity: opcodes a QP type does not have are refused at post
// time with EINVAL naming the opcode.
func TestOpcodeValidity(t *testing.T) {
	bad := map[verbs.QPType][]verbs.WROpcode{
		verbs.UC: {verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRSendWithInv,
			verbs.WRFlush, verbs.WRAtomicWrite},
		verbs.UD: {verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp,
			verbs.WRAtomicFetchAndAdd, verbs.WRSendWithInv, verbs.WRFlush, verbs.WRAtomicWrite},
	}
	for _, typ := range []verbs.QPType{verbs.UC, verbs.UD} {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ})
			buf := source(t, p.A.PD, make([]byte, 8))
			for _, op := range bad[typ] {
				wr := verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.SendSignaled, SGList: sgl(buf, 8), RKey: 1,
					FlushPlacement: wire.FlushGlobalVisibility}
				if typ == verbs.UD {
					wr = udTo(t, p, wr)
				}
				wantEINVAL(t, p.A.QP.PostSend(wr), op.String())
			}
			wantEmpty(t, p.A.CQ)
			if s := p.A.QP.State(); s != verbs.QPSRTS {
				t.Errorf("QP in %v after refused posts, want RTS", s)
			}
		})
	}
}

// TestUD: SEND and SEND_WITH_IMM of 0, 1 and MTU bytes; the receive
// buffer gets the 40-byte GRH (for v2/IPv4 the IPv4 header in bytes
// 20..39) then the payload, the completion WITH_GRH and src_qp.
func TestUD(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.UD}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		mtu := p.A.Dev.ActiveMTU().Bytes()
		wrid := uint64(700)
		for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm} {
			for _, n := range []int{0, 1, 333, mtu} {
				t.Run(fmt.Sprintf("%v/%d", op, n), func(t *testing.T) {
					wrid++
					data := randBytes(n, wrid)
					src := source(t, p.A.PD, data)
					dst := newCanary(t, p.B.PD, 40+n+8, verbs.AccessLocalWrite)
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{dst.mr.SGE(0, 40+n+8)}})
					imm := uint32(0x7700) + uint32(n)
					mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: wrid, Opcode: op, Flags: verbs.SendSignaled,
						SGList: sgl(src, n), ImmData: imm}))
					wantOK(t, p.A.CQ, wrid, verbs.WCSend)
					rwc := wantOK(t, p.B.RCQ, wrid, verbs.WCRecv)
					wantFlags := verbs.WCWithGRH
					if op == verbs.WRSendWithImm {
						wantFlags |= verbs.WCWithImm
						if rwc.ImmData != imm {
							t.Errorf("imm %#x, want %#x", rwc.ImmData, imm)
						}
					}
					if rwc.Flags != wantFlags || rwc.ByteLen != uint32(40+n) || rwc.SrcQP != p.A.QP.Num() || rwc.QPNum != p.B.QP.Num() {
						t.Errorf("receive %v flags %#x src_qp %#x; want flags %#x byte_len %d src_qp %#x", &rwc, rwc.Flags, rwc.SrcQP,
							wantFlags, 40+n, p.A.QP.Num())
					}
					grh := dst.region()[:40]
					immLen := 0
					if op == verbs.WRSendWithImm {
						immLen = 4
					}
					checkGRH(t, net, grh, p.A.GID.GID, p.B.GID.GID, n, immLen, true)
					dst.check(t, piece{0, grh}, piece{40, data})
				})
			}
		}
	})
}

// checkGRH checks the 40 bytes before a UD payload against what the wire
// carried, as Linux copies them: RoCE v2/IPv4: the IPv4 header in bytes
// 20..39; v2/IPv6: the IPv6 header; v1: the GRH. lengths also checks the
// length fields.
func checkGRH(t *testing.T, net string, g []byte, src, dst netip.Addr, n, immLen int, lengths bool) {
	t.Helper()
	pad := (4 - n%4) % 4
	transport := wire.BTHLen + 8 /* DETH */ + immLen + n + pad + 4 /* ICRC */
	be := binary.BigEndian
	switch strings.TrimPrefix(net, vethPrefix) {
	case verbstest.NetV2IPv4:
		h := g[20:40]
		if h[0] != 0x45 || h[9] != 17 || h[8] != 64 {
			t.Errorf("IPv4 header % x: want version/IHL 0x45, TTL 64, protocol 17", h)
		}
		if s, d := netip.AddrFrom4([4]byte(h[12:16])), netip.AddrFrom4([4]byte(h[16:20])); s != src.Unmap() || d != dst.Unmap() {
			t.Errorf("IPv4 src %v dst %v, want %v %v", s, d, src.Unmap(), dst.Unmap())
		}
		var sum uint32
		for i := 0; i < 20; i += 2 {
			sum += uint32(be.Uint16(h[i:]))
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		if sum != 0xFFFF {
			t.Errorf("IPv4 header checksum does not verify: % x", h)
		}
		if tl := int(be.Uint16(h[2:])); lengths && tl != 20+8+transport {
			t.Errorf("IPv4 total length %d, want %d (the header as it was on the wire)", tl, 20+8+transport)
		}
	default:
		next := byte(17)
		paylen := 8 + transport
		if strings.TrimPrefix(net, vethPrefix) == verbstest.NetV1 {
			next, paylen = 0x1B, transport
		}
		if g[0]>>4 != 6 || g[6] != next || g[7] != 64 {
			t.Errorf("GRH % x: want IP version 6, next header %#x, hop limit 64", g, next)
		}
		if s, d := netip.AddrFrom16([16]byte(g[8:24])), netip.AddrFrom16([16]byte(g[24:40])); s != src || d != dst {
			t.Errorf("GRH sgid %v dgid %v, want %v %v", s, d, src, dst)
		}
		if pl := int(be.Uint16(g[4:])); lengths && pl != paylen {
			t.Errorf("GRH payload length %d, want %d (the header as it was on the wire)", pl, paylen)
		}
	}
}

// TestUDLimits: a UD datagram above the MTU is refused, one to a wrong
// Q_Key is dropped and counted, one too big for the receive fails it.
func TestUDLimits(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{Type: verbs.UD})
	mtu := p.A.Dev.ActiveMTU().Bytes()
	big := source(t, p.A.PD, make([]byte, mtu+1))
	dst := newCanary(t, p.B.PD, 40+mtu+64, verbs.AccessLocalWrite)

	t.Run("above-MTU", func(t *testing.T) {
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 40+mtu+64)}})
		err := p.A.QP.PostSend(udTo(t, p, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(big, mtu+1)}))
		if err == nil {
			// Refused in its completion instead of at post time.
			want(t, poll(t, p.A.CQ), verbs.WCLocLenErr, 1)
		} else {
			wantEINVAL(t, err)
		}
		dst.check(t)
	})
	if s := p.A.QP.State(); s != verbs.QPSRTS {
		// The completion form of the refusal moved A to SQE, not ERR
		// (IBTA §10.3.1: a UD send error stops the send queue only; see
		// sqe_test.go): SQE → RTS resumes sending, and B's receive 1,
		// which the refused datagram never reached, is still posted.
		if s != verbs.QPSSQE {
			t.Fatalf("A in %v after a UD send error, want SQE", s)
		}
		if err := p.A.QP.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	src := source(t, p.A.PD, randBytes(100, 1))
	t.Run("wrong-qkey", func(t *testing.T) {
		bad := udTo(t, p, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)})
		bad.RemoteQKey = 0x22222222
		mustPostSend(t, p.A.QP, bad)
		wantOK(t, p.A.CQ, 2, verbs.WCSend)
		// A good datagram behind it takes the one receive: the bad one was dropped.
		mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, ImmData: 3, Flags: verbs.SendSignaled, SGList: sgl(src, 50)}))
		wantOK(t, p.A.CQ, 3, verbs.WCSend)
		rwc := wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		if rwc.ImmData != 3 || rwc.ByteLen != 90 {
			t.Fatalf("the receive got %v imm %d; want the second datagram (50 bytes, imm 3)", &rwc, rwc.ImmData)
		}
		if c := ctr(t, p.B.QP.Counters(), "rcvd_bad_qkey"); c != 1 {
			t.Errorf("rcvd_bad_qkey %d, want 1", c)
		}
	})
	t.Run("receive-too-small", func(t *testing.T) {
		small := newCanary(t, p.B.PD, 100, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 4, SGList: []verbs.SGE{small.mr.SGE(0, 100)}})
		mustPostSend(t, p.A.QP, udTo(t, p, verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 100)}))
		wantOK(t, p.A.CQ, 4, verbs.WCSend)
		want(t, poll(t, p.B.RCQ), verbs.WCLocLenErr, 4)
		// Bytes may land in the receive buffer, never around it.
		small.check(t, piece{0, bytes.Clone(small.region())})
	})
}

// TestSGL: several SGEs on both sides, with gaps that must stay untouched.
func TestSGL(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC, verbs.UC, verbs.UD}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		data := randBytes(3000, 11)
		// Source: 3 SGEs from 2 regions.
		srcA := newCanary(t, p.A.PD, 4096, verbs.AccessLocalWrite)
		srcB := newCanary(t, p.A.PD, 4096, verbs.AccessLocalWrite)
		srcA.set(10, data[:700])
		srcB.set(0, data[700:2200])
		srcA.set(2000, data[2200:])
		gather := []verbs.SGE{srcA.mr.SGE(10, 700), srcB.mr.SGE(0, 1500), srcA.mr.SGE(2000, 800)}

		// Destination: 3 SGEs of 2 regions with gaps between them.
		d1 := newCanary(t, p.B.PD, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		d2 := newCanary(t, p.B.PD, 4096, verbs.AccessLocalWrite)
		scatter := []verbs.SGE{d1.mr.SGE(50, 100), d2.mr.SGE(7, 2000), d1.mr.SGE(1000, 1000)}
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: scatter})
		wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: gather}
		stream := data
		if typ == verbs.UD {
			wr = udTo(t, p, wr)
		}
		mustPostSend(t, p.A.QP, wr)
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		rwc := wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		if typ == verbs.UD {
			stream = append(append([]byte(nil), d1.region()[50:90]...), data...) // GRH first
		}
		if int(rwc.ByteLen) != len(stream) {
			t.Fatalf("byte_len %d, want %d", rwc.ByteLen, len(stream))
		}
		d1.check(t, piece{50, stream[:100]}, piece{1000, stream[2100:]})
		d2.check(t, piece{7, stream[100:2100]})
		srcA.check(t, piece{10, data[:700]}, piece{2000, data[2200:]})
		srcB.check(t, piece{0, data[700:2200]})
		if typ == verbs.UD {
			return
		}

		// WRITE gathers the 3 SGEs into one remote range.
		w := newCanary(t, p.B.PD, 3000, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled,
			SGList: gather, RemoteAddr: w.addr(0), RKey: w.mr.RKey()})
		wantOK(t, p.A.CQ, 2, verbs.WCRDMAWrite)
		wantOK(t, p.B.RCQ, 2, verbs.WCRecvRDMAWithImm)
		w.check(t, piece{0, data})
		if typ != verbs.RC {
			return
		}

		// READ scatters one remote range into 3 local SGEs.
		r1 := newCanary(t, p.A.PD, 4096, verbs.AccessLocalWrite)
		r2 := newCanary(t, p.A.PD, 4096, verbs.AccessLocalWrite)
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{r1.mr.SGE(3, 1025), r2.mr.SGE(100, 975), r1.mr.SGE(2048, 1000)}, RemoteAddr: w.addr(0), RKey: w.mr.RKey()})
		wantOK(t, p.A.CQ, 3, verbs.WCRDMARead)
		r1.check(t, piece{3, data[:1025]}, piece{2048, data[2000:]})
		r2.check(t, piece{100, data[1025:2000]})
	})
}

// TestInline: inline data is copied at post time; it needs no memory region.
func TestInline(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC, verbs.UC, verbs.UD}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		data := randBytes(64, 12)
		inline := append([]byte(nil), data...)
		dst := newCanary(t, p.B.PD, 200, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 200)}})
		wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 1, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: inline}
		off := 0
		if typ == verbs.UD {
			wr, off = udTo(t, p, wr), 40
		}
		mustPostSend(t, p.A.QP, wr)
		for i := range inline {
			inline[i] = ^inline[i] // the caller may reuse its buffer at once
		}
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		if rwc := wantOK(t, p.B.RCQ, 1, verbs.WCRecv); rwc.ByteLen != uint32(off+64) {
			t.Fatalf("byte_len %d", rwc.ByteLen)
		}
		dst.check(t, piece{0, dst.region()[:off]}, piece{off, data})

		tooBig := verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: make([]byte, 65)}
		if typ == verbs.UD {
			tooBig = udTo(t, p, tooBig)
		}
		wantEINVAL(t, p.A.QP.PostSend(tooBig), "max_inline_data")
		if typ == verbs.UD {
			return
		}
		w := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 3})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled | verbs.SendInline,
			InlineData: data[:33], RemoteAddr: w.addr(5), RKey: w.mr.RKey()})
		wantOK(t, p.A.CQ, 3, verbs.WCRDMAWrite)
		wantOK(t, p.B.RCQ, 3, verbs.WCRecvRDMAWithImm)
		w.check(t, piece{5, data[:33]})
	})
}

// TestInlineCopiedForRetransmission: inline data is the WR's own copy
// even when the message has to be sent again after the caller reused its
// buffer.
func TestInlineCopiedForRetransmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := verbstest.NewPair(t, verbstest.Options{FaultsA: fabric.Faults{Loss: 1}})
		data := randBytes(64, 15)
		inline := bytes.Clone(data)
		dst := newCanary(t, p.B.PD, 64, verbs.AccessLocalWrite)
		mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 64)}})
		mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline, InlineData: inline})
		for i := range inline {
			inline[i] = ^inline[i]
		}
		synctest.Wait()
		p.A.Port.SetFaults(fabric.Faults{})
		wantOK(t, p.A.CQ, 1, verbs.WCSend)
		wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
		dst.check(t, piece{0, data})
	})
}

// TestUnsignaled: unsignaled sends complete without a CQE; a signaled
// one behind them completes alone.
func TestUnsignaled(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC, verbs.UC, verbs.UD}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		const n = 6
		datas := make([][]byte, n)
		dsts := make([]*canary, n)
		var wrs []verbs.SendWR
		for i := range n {
			datas[i] = randBytes(500+i, uint64(i))
			dsts[i] = newCanary(t, p.B.PD, 600, verbs.AccessLocalWrite)
			mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{dsts[i].mr.SGE(0, 600)}})
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: sgl(source(t, p.A.PD, datas[i]), 500+i)}
			if i == n-1 {
				wr.Flags = verbs.SendSignaled
			}
			if typ == verbs.UD {
				wr = udTo(t, p, wr)
			}
			wrs = append(wrs, wr)
		}
		mustPostSend(t, p.A.QP, wrs...)
		wantOK(t, p.A.CQ, n-1, verbs.WCSend)
		for i := range n {
			rwc := wantOK(t, p.B.RCQ, uint64(i), verbs.WCRecv)
			off := 0
			if typ == verbs.UD {
				off = 40
			}
			if rwc.ByteLen != uint32(off+500+i) {
				t.Errorf("receive %d byte_len %d", i, rwc.ByteLen)
			}
			dsts[i].check(t, piece{0, dsts[i].region()[:off]}, piece{off, datas[i]})
		}
		wantEmpty(t, p.A.CQ)
	})
}

// TestSendTooLong: a SEND larger than the posted receive fails it with
// IBV_WC_LOC_LEN_ERR; an RC sender gets IBV_WC_REM_INV_REQ_ERR; nothing
// outside the receive buffer is written.
func TestSendTooLong(t *testing.T) {
	eachNet(t, rcuc, func(t *testing.T, net string, typ verbs.QPType) {
		for _, n := range []int{200, 3000} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
				dst := newCanary(t, p.B.PD, 100, verbs.AccessLocalWrite)
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 100)}})
				data := randBytes(n, 13)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), n)})
				want(t, poll(t, p.B.RCQ), verbs.WCLocLenErr, 1)
				if typ == verbs.RC {
					wc := poll(t, p.A.CQ)
					want(t, wc, verbs.WCRemInvReqErr, 1)
					if wc.Detail == "" {
						t.Error("REM_INV_REQ_ERR without a Detail")
					}
					if s := p.A.QP.State(); s != verbs.QPSErr {
						t.Errorf("requester in %v, want ERR", s)
					}
				} else {
					wantOK(t, p.A.CQ, 1, verbs.WCSend)
					// UC drops the rest of the message and goes on with the next.
					big := newCanary(t, p.B.PD, 4096, verbs.AccessLocalWrite)
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{big.mr.SGE(0, 4096)}})
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(source(t, p.A.PD, data), n)})
					wantOK(t, p.A.CQ, 2, verbs.WCSend)
					if rwc := wantOK(t, p.B.RCQ, 2, verbs.WCRecv); rwc.ByteLen != uint32(n) {
						t.Errorf("next UC message: byte_len %d, want %d", rwc.ByteLen, n)
					}
					big.check(t, piece{0, data})
				}
				// The receive buffer may hold a prefix of the message; around it nothing changed.
				dst.check(t, piece{0, bytes.Clone(dst.region())})
				for i, b := range dst.region() {
					if b != data[i] && b != canaryByte(dst.guard+i) {
						t.Fatalf("receive buffer byte %d is %#x: neither the message nor the old content", i, b)
					}
				}
			})
		}
	})
}

// TestSolicited: IBV_SEND_SOLICITED sets the BTH SE bit on the last packet
// of a SEND or RDMA WRITE with immediate, and nowhere else.
func TestSolicited(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.RC, verbs.UC, verbs.UD} {
		t.Run(typ.String(), func(t *testing.T) {
			var sniff *sniffLink
			p := buildPair(t, pairConfig{Options: verbstest.Options{Type: typ}, Wrap: func(side int, l link.Link) link.Link {
				if side == 1 {
					sniff = &sniffLink{Link: l}
					return sniff
				}
				return l
			}})
			src := source(t, p.A.PD, randBytes(3000, 1))
			dst := newCanary(t, p.B.PD, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			cases := []struct {
				op     verbs.WROpcode
				n      int
				flags  verbs.SendFlags
				wantSE bool
			}{
				{verbs.WRSend, 100, verbs.SendSolicited, true},
				{verbs.WRSend, 100, 0, false},
				{verbs.WRSend, 3000, verbs.SendSolicited, true},
				{verbs.WRSendWithImm, 3000, verbs.SendSolicited, true},
				{verbs.WRRDMAWriteWithImm, 3000, verbs.SendSolicited, true},
				{verbs.WRRDMAWrite, 3000, verbs.SendSolicited, false},
			}
			for i, c := range cases {
				if typ == verbs.UD && (c.n > 1000 || c.op == verbs.WRRDMAWrite || c.op == verbs.WRRDMAWriteWithImm) {
					continue
				}
				wrid := uint64(i + 1)
				recv := c.op != verbs.WRRDMAWrite
				if recv {
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: wrid, SGList: []verbs.SGE{dst.mr.SGE(0, 4096)}})
				}
				wr := verbs.SendWR{WRID: wrid, Opcode: c.op, Flags: verbs.SendSignaled | c.flags, SGList: sgl(src, c.n),
					RemoteAddr: dst.addr(0), RKey: dst.mr.RKey()}
				if typ == verbs.UD {
					wr = udTo(t, p, wr)
				}
				sniff.take()
				mustPostSend(t, p.A.QP, wr)
				poll(t, p.A.CQ)
				switch {
				case c.op == verbs.WRRDMAWriteWithImm:
					wantOK(t, p.B.RCQ, wrid, verbs.WCRecvRDMAWithImm)
				case recv:
					wantOK(t, p.B.RCQ, wrid, verbs.WCRecv)
				case typ == verbs.UC:
					// A SEND behind the WRITE shows when it has landed.
					mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 99})
					mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 99, Opcode: verbs.WRSend})
					wantOK(t, p.B.RCQ, 99, verbs.WCRecv)
				}
				var reqs []wire.BTH
				for _, b := range sniff.take() {
					if b.Opcode().Info().Is(wire.FlagRequest) && b.DestQP() == p.B.QP.Num() {
						reqs = append(reqs, b)
					}
				}
				msgPkts := max(1, (c.n+1023)/1024)
				wantPkts := msgPkts
				if !recv && typ == verbs.UC {
					wantPkts++ // the trailing SEND
				}
				if len(reqs) != wantPkts {
					t.Fatalf("%v %d bytes: B received %d request packets, want %d", c.op, c.n, len(reqs), wantPkts)
				}
				for j, b := range reqs {
					wantSE := c.wantSE && j == msgPkts-1
					if b.SolicitedEvent() != wantSE {
						t.Errorf("%v %d bytes flags %#x: packet %d (%v) SE=%v, want %v", c.op, c.n, c.flags, j, b.Opcode(), b.SolicitedEvent(), wantSE)
					}
				}
			}
		})
	}
}

// TestFence: an RDMA WRITE with IBV_SEND_FENCE posted behind an RDMA READ
// into the buffer it sends from carries the data the READ brought.
func TestFence(t *testing.T) {
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Type: typ, Net: net})
		remote := newCanary(t, p.B.PD, 8192, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		data := randBytes(3000, 14)
		rp := remote.set(0, data)
		bounce := newCanary(t, p.A.PD, 3000, verbs.AccessLocalWrite)
		mustPostSend(t, p.A.QP,
			verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: sgl(bounce.mr, 3000),
				RemoteAddr: remote.addr(0), RKey: remote.mr.RKey()},
			verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendFence, SGList: sgl(bounce.mr, 3000),
				RemoteAddr: remote.addr(4096), RKey: remote.mr.RKey()})
		wantOK(t, p.A.CQ, 1, verbs.WCRDMARead)
		wantOK(t, p.A.CQ, 2, verbs.WCRDMAWrite)
		bounce.check(t, piece{0, data})
		remote.check(t, rp, piece{4096, data})
	})
}

// TestPSNWraparound: messages whose PSNs cross 0xFFFFFF → 0 (SEND, WRITE,
// READ, atomic) arrive whole.
func TestPSNWraparound(t *testing.T) {
	for _, typ := range rcuc {
		t.Run(typ.String(), func(t *testing.T) {
			p := verbstest.NewPair(t, verbstest.Options{Type: typ, Tune: func(rtr, rts *verbs.QPAttr) {
				rtr.RQPSN, rts.SQPSN = 0xFFFFFA, 0xFFFFFA
			}})
			data := randBytes(10240, 21)
			src := source(t, p.A.PD, data)
			for round := range 3 { // the second and third rounds start past the wrap
				dst := newCanary(t, p.B.PD, 10240, allRemote)
				mustPostRecv(t, p.B.QP, verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{dst.mr.SGE(0, 10240)}}, verbs.RecvWR{WRID: 2})
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: sgl(src, 10240)})
				wantOK(t, p.A.CQ, 1, verbs.WCSend)
				wantOK(t, p.B.RCQ, 1, verbs.WCRecv)
				dst.check(t, piece{0, data})
				w := newCanary(t, p.B.PD, 10240, allRemote)
				mustPostSend(t, p.A.QP, verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, SGList: sgl(src, 10240),
					RemoteAddr: w.addr(0), RKey: w.mr.RKey()})
				wantOK(t, p.A.CQ, 2, verbs.WCRDMAWrite)
				wantOK(t, p.B.RCQ, 2, verbs.WCRecvRDMAWithImm)
				w.check(t, piece{0, data})
				if typ == verbs.RC {
					back := newCanary(t, p.A.PD, 10240, verbs.AccessLocalWrite)
					mustPostSend(t, p.A.QP,
						verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGList: sgl(back.mr, 10240),
							RemoteAddr: w.addr(0), RKey: w.mr.RKey()},
						verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGList: []verbs.SGE{back.mr.SGE(0, 8)},
							RemoteAddr: w.addr(0), RKey: w.mr.RKey(), CompareAdd: 1})
					wantOK(t, p.A.CQ, 3, verbs.WCRDMARead)
					wantOK(t, p.A.CQ, 4, verbs.WCFetchAdd)
					back.check(t, piece{0, data})
				}
				t.Logf("round %d: sq_psn now past the wrap", round)
			}
		})
	}
}

// TestManyReadAtomic: more READs and atomics than max_rd_atomic (2) and
// max_dest_rd_atomic (2), mixed with SENDs: all complete, in posting
// order, with the right data.
func TestManyReadAtomic(t *testing.T) {
	ne := binary.NativeEndian
	eachNet(t, []verbs.QPType{verbs.RC}, func(t *testing.T, net string, typ verbs.QPType) {
		p := verbstest.NewPair(t, verbstest.Options{Net: net, Tune: func(rtr, rts *verbs.QPAttr) {
			rtr.MaxDestRdAtomic, rts.MaxRdAtomic = 2, 2
		}})
		const n, chunk = 24, 3000
		atomOff := n * chunk // the atomics' 8-byte words follow the READ data
		remote := newCanary(t, p.B.PD, atomOff+8*n, allRemote)
		rdata := randBytes(n*chunk, 22)
		rpieces := []piece{remote.set(0, rdata)}
		local := newCanary(t, p.A.PD, atomOff+8*n, verbs.AccessLocalWrite)
		var lpieces []piece
		sdata := randBytes(100, 23)
		src := source(t, p.A.PD, sdata)
		inbox := newCanary(t, p.B.PD, 100*n, verbs.AccessLocalWrite)
		var ipieces []piece
		var recvs []verbs.RecvWR
		var wrs []verbs.SendWR
		var ops []verbs.WCOpcode
		for i := range n {
			wr := verbs.SendWR{WRID: uint64(i), Flags: verbs.SendSignaled}
			switch i % 4 {
			case 0, 2:
				wr.Opcode, wr.SGList = verbs.WRRDMARead, []verbs.SGE{local.mr.SGE(i*chunk, chunk)}
				wr.RemoteAddr, wr.RKey = remote.addr(i*chunk), remote.mr.RKey()
				ops = append(ops, verbs.WCRDMARead)
				lpieces = append(lpieces, piece{i * chunk, rdata[i*chunk : (i+1)*chunk]})
			case 1:
				off := atomOff + 8*i
				wr.Opcode, wr.SGList = verbs.WRAtomicFetchAndAdd, []verbs.SGE{local.mr.SGE(off, 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = remote.addr(off), remote.mr.RKey(), uint64(i)
				ops = append(ops, verbs.WCFetchAdd)
				orig := ne.Uint64(remote.region()[off:]) // the guard pattern it starts with
				var o, sum [8]byte
				ne.PutUint64(o[:], orig)
				ne.PutUint64(sum[:], orig+uint64(i))
				lpieces = append(lpieces, piece{off, o[:]})
				rpieces = append(rpieces, piece{off, sum[:]})
			case 3:
				wr.Opcode, wr.SGList = verbs.WRSend, sgl(src, 100)
				recvs = append(recvs, verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{inbox.mr.SGE(100*i, 100)}})
				ipieces = append(ipieces, piece{100 * i, sdata})
				ops = append(ops, verbs.WCSend)
			}
			wrs = append(wrs, wr)
		}
		mustPostRecv(t, p.B.QP, recvs...)
		mustPostSend(t, p.A.QP, wrs...)
		for i := range n {
			wantOK(t, p.A.CQ, uint64(i), ops[i])
		}
		for _, r := range recvs {
			wantOK(t, p.B.RCQ, r.WRID, verbs.WCRecv)
		}
		local.check(t, lpieces...)
		remote.check(t, rpieces...)
		inbox.check(t, ipieces...)
	})
}
