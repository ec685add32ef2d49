package rdmacm_test

// Memory windows against Linux rxe (issue 19 item 4): a C peer built here
// against rdma-core's libibverbs and librdmacm (testdata/mwpeer) runs in a
// lab VM; type 2 windows are bound on either side, used through their
// rkey by the other, then invalidated by IBV_WR_LOCAL_INV or by the
// peer's SEND_WITH_INV, after which the next access must fail with
// IBV_WC_REM_ACCESS_ERR and write nothing.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// mwpeer's layout and control messages (testdata/mwpeer/mwpeer.c).
const (
	mwpRegion = 8192 // the binder's region
	mwpOff    = 1024 // the window: region offsets [mwpOff, mwpOff+mwpLen)
	mwpLen    = 2048
	mwpMsgLen = 32 // struct msg: type, rkey (u32), addr, len, pad (u64), little-endian

	msgWindow      = 1
	msgDone        = 2
	msgInvalidated = 3

	// mwpLimit bounds mwpeer's run in the VM (timeout(1)); the emulated VM
	// on a loaded host is slow to run anything.
	mwpLimit = 150 * time.Second
)

func mwpCanary(i int) byte  { return byte(i*7 + 3) }
func mwpPattern(i int) byte { return byte(i*13 + 5) }

type mwpMsg struct {
	typ, rkey uint32
	addr, len uint64
}

func (m mwpMsg) bytes() []byte {
	b := make([]byte, mwpMsgLen)
	binary.LittleEndian.PutUint32(b[0:], m.typ)
	binary.LittleEndian.PutUint32(b[4:], m.rkey)
	binary.LittleEndian.PutUint64(b[8:], m.addr)
	binary.LittleEndian.PutUint64(b[16:], m.len)
	return b
}

// buildMWPeer compiles testdata/mwpeer with gcc against libibverbs and
// librdmacm into a directory of its own, the lab's extra files. A missing
// compiler or rdma-core headers is a missing prerequisite (a failure in
// CI, whose .ci/run installs them).
func buildMWPeer(t *testing.T) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	testenv.Require(t, err == nil, "gcc (apt-get install gcc libc6-dev)")
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		_, err := os.Stat(h)
		testenv.Require(t, err == nil, h+" (apt-get install libibverbs-dev librdmacm-dev)")
	}
	dir := t.TempDir()
	src, err := filepath.Abs(filepath.Join("testdata", "mwpeer", "mwpeer.c"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-O2", "-Wall", "-Werror", "-o", filepath.Join(dir, "mwpeer"), src, "-lrdmacm", "-libverbs")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc mwpeer.c: %v\n%s", err, out)
	}
	return dir
}

// mwLabConn is goroce's end of one connection to mwpeer.
type mwLabConn struct {
	t      *testing.T
	ctx    context.Context
	dev    *host.Device
	pd     *verbs.PD
	scq    *verbs.CQ
	rcq    *verbs.CQ
	c      *rdmacm.Conn
	rbuf   []byte
	rmr    *verbs.MR
	nextID uint64
	job    *lab.Job // mwpeer
}

// poll waits for a completion on cq, giving up when mwpeer has ended
// (with its log) or the test's context has.
func (m *mwLabConn) poll(cq *verbs.CQ, what string) verbs.WC {
	m.t.Helper()
	var wc [1]verbs.WC
	for {
		ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
		n, err := cq.PollWait(ctx, wc[:])
		cancel()
		if n == 1 {
			return wc[0]
		}
		if m.ctx.Err() != nil || (err != nil && ctx.Err() == nil) {
			m.t.Fatalf("waiting for %s: %v (context %v)\n%s", what, err, m.ctx.Err(), m.state())
		}
		if log, status, exited := m.job.Log(); exited {
			m.t.Fatalf("waiting for %s: mwpeer exited %d:\n%s\n%s", what, status, log, m.state())
		}
	}
}

// state says where goroce's side stands, for a failure's message.
func (m *mwLabConn) state() string {
	return fmt.Sprintf("goroce's QP %#x: %v; device counters: %v", m.c.QP.Num(), m.c.QP.Query().State, m.dev.Counters().Snapshot())
}

func (m *mwLabConn) wantSend(what string, op verbs.WCOpcode) {
	m.t.Helper()
	if wc := m.poll(m.scq, what); wc.Status != verbs.WCSuccess || wc.Opcode != op {
		m.t.Fatalf("%s: %v; want IBV_WC_SUCCESS %v", what, wc, op)
	}
}

func (m *mwLabConn) postSend(wr verbs.SendWR) {
	m.t.Helper()
	m.nextID++
	wr.WRID = m.nextID
	wr.Flags |= verbs.SendSignaled
	if err := m.c.QP.PostSend(wr); err != nil {
		m.t.Fatalf("post %v: %v", wr.Opcode, err)
	}
}

// send sends a control message: a SEND, or with inv a SEND_WITH_INV
// naming inv.
func (m *mwLabConn) send(msg mwpMsg, inv uint32) {
	m.t.Helper()
	wr := verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, InlineData: msg.bytes()}
	if inv != 0 {
		wr.Opcode, wr.InvalidateRKey = verbs.WRSendWithInv, inv
	}
	m.postSend(wr)
	m.wantSend(fmt.Sprintf("%v of message %d", wr.Opcode, msg.typ), verbs.WCSend)
}

// recv waits for the next control message, checks its type and posts its
// buffer again.
func (m *mwLabConn) recv(typ uint32) (mwpMsg, verbs.WC) {
	m.t.Helper()
	wc := m.poll(m.rcq, fmt.Sprintf("message %d", typ))
	if wc.Status != verbs.WCSuccess || wc.ByteLen != mwpMsgLen {
		m.t.Fatalf("receive (want message %d): %v", typ, wc)
	}
	b := m.rbuf[wc.WRID*mwpMsgLen : (wc.WRID+1)*mwpMsgLen]
	msg := mwpMsg{binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]),
		binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}
	if msg.typ != typ {
		m.t.Fatalf("message %d, want %d", msg.typ, typ)
	}
	if err := m.c.QP.PostRecv(verbs.RecvWR{WRID: wc.WRID, SGList: []verbs.SGE{m.rmr.SGE(int(wc.WRID)*mwpMsgLen, mwpMsgLen)}}); err != nil {
		m.t.Fatal(err)
	}
	return msg, wc
}

// TestLabMW: type 2 memory windows between goroce and Linux rxe (kernel
// 6.1, rdma-core 44), each side binding one (IBV_WR_BIND_MW) over a region
// that grants no remote access itself, the other side WRITEing and
// READing the window through its rkey, and the binder's invalidation
// (IBV_WR_LOCAL_INV, or the user's SEND_WITH_INV naming the rkey) ending
// it: the next WRITE through the rkey completes with
// IBV_WC_REM_ACCESS_ERR and changes no byte of the region.
func TestLabMW(t *testing.T) {
	testenv.Root(t)
	extra := buildMWPeer(t)
	l := lab.StartWithExtra(t, extra)
	vm := lab.VM1
	s := openLab(t, l)
	d, cm, pd := s.dev, s.cm, s.pd

	port := 7480
	for _, binder := range []string{"rxe", "goroce"} {
		for _, inv := range []string{"local", "send"} {
			port++
			t.Run(binder+"-binds/"+inv+"-inv", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), mwpLimit+10*time.Second)
				defer cancel()
				before := l.Counters(t, vm)
				m := dialMWPeer(t, ctx, l, vm, d, cm, pd, port, binder, inv)
				job := m.job
				if binder == "rxe" {
					m.rxeBinds(inv == "send")
				} else {
					m.goroceBinds(inv == "send")
				}
				m.c.Close()
				log := job.Wait()
				t.Logf("mwpeer in %s:\n%s", vm.Name, log)
				if !strings.Contains(log, "mwpeer: ok\n") || !strings.Contains(log, "EXIT 0") {
					t.Errorf("mwpeer did not end well")
				}
				if binder == "rxe" && !strings.Contains(log, "(IBV_QPS_ERR)") {
					t.Errorf("rxe's QP did not go to the error state after goroce's access through the invalidated rkey")
				}
				l.CheckRxeCounters(t, vm, before, d.Counters().Snapshot())
			})
		}
	}
}

// dialMWPeer starts mwpeer in vm and connects to it, with four receives
// posted for its control messages.
func dialMWPeer(t *testing.T, ctx context.Context, l *lab.Lab, vm lab.VM, d *host.Device, cm *rdmacm.CM, pd *verbs.PD, port int, binder, inv string) *mwLabConn {
	t.Helper()
	m := &mwLabConn{t: t, ctx: ctx, dev: d, pd: pd}
	var err error
	if m.scq, err = d.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	if m.rcq, err = d.CreateCQ(16); err != nil {
		t.Fatal(err)
	}
	m.rbuf = make([]byte, 4*mwpMsgLen)
	if m.rmr, err = pd.RegMR(m.rbuf, verbs.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	ep := rdmacm.Endpoint{PD: pd,
		QP: verbs.QPInitAttr{Type: verbs.RC, SendCQ: m.scq, RecvCQ: m.rcq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: mwpMsgLen}},
		Param: rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7},
		Prepare: func(qp *verbs.QP) error {
			for i := 0; i < 4; i++ {
				if err := qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{m.rmr.SGE(i*mwpMsgLen, mwpMsgLen)}}); err != nil {
					return err
				}
			}
			return nil
		}}
	// The peer's shell notes its PID, and execs mwpeer: the cleanup ends
	// that process and no other, and then shows its log if t failed.
	log, pidFile := fmt.Sprintf("/tmp/mwpeer-%d.log", port), fmt.Sprintf("/tmp/mwpeer-%d.pid", port)
	m.job = l.Background(t, vm, log, mwpLimit, fmt.Sprintf("sh -c 'echo $$ > %s; exec %s/mwpeer -a %s -p %d -b %s -i %s'",
		pidFile, lab.ExtraDir, vm.IPv4, port, binder, inv))
	t.Cleanup(func() {
		l.Exec(vm, fmt.Sprintf("kill $(cat %s) 2>/dev/null; rm -f %s", pidFile, pidFile))
		if t.Failed() {
			log, _, _ := m.job.Log()
			t.Logf("mwpeer's log in %s:\n%s", vm.Name, log)
		}
	})
	err = lab.UntilListening(ctx, m.job, "REJECTED", func() (err error) {
		m.c, err = cm.Dial(ctx, netip.AddrPortFrom(netip.MustParseAddr(vm.IPv4), uint16(port)), ep)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// rxeBinds is goroce's side of mwpeer -b rxe.
func (m *mwLabConn) rxeBinds(sendInv bool) {
	t := m.t
	w, _ := m.recv(msgWindow)
	t.Logf("rxe's window: rkey %#x addr %#x len %d", w.rkey, w.addr, w.len)
	if w.len != mwpLen {
		t.Fatalf("window length %d, want %d", w.len, mwpLen)
	}
	data := make([]byte, mwpLen)
	for i := range data {
		data[i] = mwpPattern(i)
	}
	src, err := m.pd.RegMR(data, 0)
	if err != nil {
		t.Fatal(err)
	}
	back := make([]byte, mwpLen)
	dst, err := m.pd.RegMR(back, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	m.postSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{src.SGE(0, mwpLen)}, RemoteAddr: w.addr, RKey: w.rkey})
	m.wantSend("RDMA WRITE through rxe's window", verbs.WCRDMAWrite)
	m.postSend(verbs.SendWR{Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{dst.SGE(0, mwpLen)}, RemoteAddr: w.addr, RKey: w.rkey})
	m.wantSend("RDMA READ through rxe's window", verbs.WCRDMARead)
	if !bytes.Equal(back, data) {
		t.Fatalf("the READ through rxe's window returned other bytes than the WRITE wrote")
	}
	var inv uint32
	if sendInv {
		inv = w.rkey
	}
	m.send(mwpMsg{typ: msgDone}, inv)
	m.recv(msgInvalidated)
	m.postSend(verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{src.SGE(0, 16)}, RemoteAddr: w.addr, RKey: w.rkey})
	wc := m.poll(m.scq, "the WRITE through the invalidated rkey")
	t.Logf("WRITE through rxe's invalidated rkey %#x: %v", w.rkey, wc)
	if wc.Status != verbs.WCRemAccessErr {
		t.Errorf("WRITE through rxe's invalidated window: %v; want IBV_WC_REM_ACCESS_ERR", wc)
	}
}

// goroceBinds is goroce's side of mwpeer -b goroce.
func (m *mwLabConn) goroceBinds(sendInv bool) {
	t := m.t
	region := make([]byte, mwpRegion)
	for i := range region {
		region[i] = mwpCanary(i)
	}
	mr, err := m.pd.RegMR(region, verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := m.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Dealloc()
	rkey := verbs.IncRKey(mw.RKey())
	m.postSend(verbs.SendWR{Opcode: verbs.WRBindMW, MW: mw, RKey: rkey, BindInfo: verbs.MWBindInfo{
		MR: mr, Addr: mr.Addr() + mwpOff, Length: mwpLen, Access: verbs.AccessRemoteRead | verbs.AccessRemoteWrite}})
	m.wantSend("IBV_WR_BIND_MW", verbs.WCBindMW)
	m.send(mwpMsg{typ: msgWindow, rkey: rkey, addr: mr.Addr() + mwpOff, len: mwpLen}, 0)

	_, wc := m.recv(msgDone)
	if sendInv {
		if wc.Flags&verbs.WCWithInv == 0 || wc.ImmData != rkey {
			t.Errorf("DONE: %v flags %v invalidated rkey %#x; want IBV_WC_WITH_INV of %#x", wc, wc.Flags, wc.ImmData, rkey)
		}
	} else {
		if wc.Flags&verbs.WCWithInv != 0 {
			t.Errorf("DONE, a plain SEND: flags %v", wc.Flags)
		}
		m.postSend(verbs.SendWR{Opcode: verbs.WRLocalInv, InvalidateRKey: rkey})
		m.wantSend("IBV_WR_LOCAL_INV", verbs.WCLocalInv)
	}
	want := func(when string) {
		t.Helper()
		for i, b := range region {
			w := mwpCanary(i)
			if i >= mwpOff && i < mwpOff+mwpLen {
				w = mwpPattern(i - mwpOff)
			}
			if b != w {
				t.Fatalf("%s: region byte %d is %#x, want %#x", when, i, b, w)
			}
		}
	}
	want("after rxe's WRITE and READ")
	m.send(mwpMsg{typ: msgInvalidated, rkey: rkey}, 0)
	// rxe's WRITE through the invalidated rkey: goroce's responder NAKs
	// it and its QP goes to the error state (IBTA §9.9.3.1, class C), which
	// reports IBV_EVENT_QP_ACCESS_ERR.
	for {
		ctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
		ev, err := m.dev.GetAsyncEvent(ctx)
		cancel()
		if err == nil && ev.Type == verbs.EventQPAccessErr && ev.QPNum == m.c.QP.Num() {
			t.Logf("goroce's event: %v", ev)
			break
		}
		if err == nil {
			t.Logf("other event %v", ev)
			continue
		}
		if m.ctx.Err() != nil {
			t.Fatalf("no IBV_EVENT_QP_ACCESS_ERR after rxe's access: %v\n%s", err, m.state())
		}
		if log, status, exited := m.job.Log(); exited && !strings.Contains(log, "mwpeer: ok\n") {
			t.Fatalf("no IBV_EVENT_QP_ACCESS_ERR, and mwpeer exited %d:\n%s\n%s", status, log, m.state())
		}
	}
	want("after rxe's WRITE through the invalidated rkey")
}
