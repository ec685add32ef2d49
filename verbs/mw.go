package verbs

import (
	"net"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/internal/mem"
)

// newMemTable is a device's table of memory regions and windows, with
// rxe's limits (max_mr, max_mw).
func newMemTable() *mem.Table {
	t := mem.NewTable(MaxMR)
	t.SetMaxWindows(MaxMW)
	return t
}

// MWType is enum ibv_mw_type.
//
//enum:string IBV_MW_TYPE(%d)
type MWType uint8

// Memory window types, with ibverbs' values.
const (
	MWType1 MWType = 1 // "IBV_MW_TYPE_1": bound with QP.BindMW; unbound by binding it with length 0
	MWType2 MWType = 2 // "IBV_MW_TYPE_2": bound by a WRBindMW work request; freed by WRLocalInv or a peer's SEND_WITH_INV
)

// MW is a memory window, struct ibv_mw: a view of part of a memory region
// with its own rkey and remote access, which the owner opens to a peer and
// revokes without touching the region (IBTA §10.6.7).
type MW struct {
	pd  *PD
	typ MWType
	w   *mem.Window
	// rkey is the rkey as the consumer knows it (ibv_mw.rkey): set when
	// a bind is posted, before the bind executes, as rdma-core's
	// ibv_bind_mw sets it.
	rkey atomic.Uint32
}

// AllocMW allocates a memory window of type 1 or 2 in the PD, like
// ibv_alloc_mw. Its rkey's low 8 bits (the key) are random, as rxe's
// rxe_alloc_mw draws them; each bind then sets them to the consumer's key.
// A type 1 window is bound with QP.BindMW (ibv_bind_mw) by a QP of any PD
// and is unbound by binding it with length 0; a type 2 window is bound by a
// send work request of opcode WRBindMW on a QP of the window's PD, may then
// be used only through that QP's peer, and returns to the free state by a
// WRLocalInv work request or a peer's SEND_WITH_INVALIDATE naming its rkey.
// A bind needs AccessMWBind on the region, and AccessLocalWrite there if
// the window grants remote write or atomic access (IBTA C10-73, C10-74).
// A device holds at most MaxMW windows (max_mw): beyond it, ENOMEM.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if pd.dev.isClosed() {
		return nil, net.ErrClosed
	}
	if typ != MWType1 && typ != MWType2 {
		return nil, errorf("alloc_mw", pd.dev.name, 0, syscall.EINVAL, "memory window type %d: valid types are 1 (IBV_MW_TYPE_1) and 2 (IBV_MW_TYPE_2)", typ)
	}
	w, rkey, err := pd.dev.mem.AllocWindow(pd.pd, uint8(typ))
	if err != nil {
		return nil, errorf("alloc_mw", pd.dev.name, 0, syscall.ENOMEM, "%v", err)
	}
	m := &MW{pd: pd, typ: typ, w: w}
	m.rkey.Store(rkey)
	return m, nil
}

// Type returns the window's type.
func (m *MW) Type() MWType { return m.typ }

// PD returns the window's protection domain.
func (m *MW) PD() *PD { return m.pd }

// RKey returns the window's rkey as ibv_mw.rkey holds it: the key of the
// latest bind posted (QP.BindMW or a WRBindMW work request), the
// allocation's before any. If that bind fails, the window keeps its former
// rkey, as in rdma-core ("user has to undo this if he gets an error wc").
func (m *MW) RKey() uint32 { return m.rkey.Load() }

// Dealloc deallocates the window, like ibv_dealloc_mw: its rkey stops
// working at once, and the region it was bound to may be deregistered.
func (m *MW) Dealloc() error {
	m.pd.dev.mem.DeallocWindow(m.w)
	return nil
}

// IncRKey returns rkey with its key byte incremented, like ibv_inc_rkey:
// the usual choice of a bind's new rkey, so that the rkey a peer held
// before stops working.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// MWBindInfo is struct ibv_mw_bind_info: what a window is bound to.
type MWBindInfo struct {
	MR     *MR    // the region; nil with Length 0 unbinds a type 1 window
	Addr   uint64 // the region IOVA the window starts at
	Length uint64
	// Access is what peers may do through the window (mw_access_flags):
	// AccessRemoteRead, AccessRemoteWrite, AccessRemoteAtomic, and
	// AccessZeroBased for a type 2 window that peers address from 0.
	Access Access
}

// MWBind is struct ibv_mw_bind, the argument of QP.BindMW.
type MWBind struct {
	WRID     uint64
	Flags    SendFlags
	BindInfo MWBindInfo
}

// BindMW binds a type 1 memory window, like ibv_bind_mw: it posts a bind
// work request on the QP's send queue, which completes with IBV_WC_BIND_MW
// (or, if the bind is refused when it executes, IBV_WC_MW_BIND_ERR, and
// the QP goes to the error state, as rxe's requester does). The window's
// new rkey, the former one with the key byte incremented (rdma-core's rxe
// provider), is in mw.RKey() when BindMW returns. A type 2 window, a
// region without Length or the reverse, a zero-based window (o10-36.2.2)
// are EINVAL; a region of another PD than the window's, EPERM.
func (q *QP) BindMW(mw *MW, b MWBind) error {
	bad := func(errno syscall.Errno, format string, args ...any) error {
		return errorf("bind_mw", q.dev.name, q.num, errno, format, args...)
	}
	switch {
	case mw == nil:
		return bad(syscall.EINVAL, "no memory window")
	case mw.typ != MWType1:
		return bad(syscall.EINVAL, "%v: ibv_bind_mw binds type 1 windows; a type 2 window is bound by a send WR of opcode IBV_WR_BIND_MW", mw.typ)
	case b.BindInfo.MR == nil && (b.BindInfo.Addr != 0 || b.BindInfo.Length != 0):
		return bad(syscall.EINVAL, "bind_info has addr %#x length %d but no MR", b.BindInfo.Addr, b.BindInfo.Length)
	case b.BindInfo.Access&AccessZeroBased != 0:
		return bad(syscall.EINVAL, "mw_access_flags %v: a type 1 window may not be zero-based (o10-36.2.2)", b.BindInfo.Access)
	case b.BindInfo.MR != nil && b.BindInfo.MR.pd != mw.pd:
		return bad(syscall.EPERM, "the MR (lkey %#x) is of another protection domain than the window", b.BindInfo.MR.LKey())
	}
	return q.PostSend(SendWR{WRID: b.WRID, Opcode: WRBindMW, Flags: b.Flags, MW: mw, RKey: IncRKey(mw.RKey()), BindInfo: b.BindInfo})
}

// localOp executes a BIND_MW or LOCAL_INV work request at the head of the
// send queue (rxe's rxe_do_local_ops): it touches only this device's
// memory table and sends nothing. A refused bind completes with
// IBV_WC_MW_BIND_ERR, a refused invalidation with IBV_WC_LOC_QP_OP_ERR, as
// rxe reports them, and the QP leaves RTS. It reports whether
// the requester may go on.
func (q *QP) localOp(w *sendWQE) bool {
	var err error
	status := WCMWBindErr
	switch w.wr.Opcode {
	case WRBindMW:
		bi := w.wr.BindInfo
		b := mem.Bind{WindowRKey: w.mwRKey, NewKey: uint8(w.wr.RKey), Addr: bi.Addr, Length: bi.Length, Access: bi.Access}
		if bi.MR != nil {
			b.Region, b.RegionLKey = bi.MR.r, bi.MR.LKey()
		}
		_, err = q.dev.mem.BindWindow(q.pd.pd, q, b)
	case WRLocalInv:
		status = WCLocQPOpErr
		err = q.dev.mem.Invalidate(q.pd.pd, w.wr.InvalidateRKey)
	}
	if err != nil {
		detail := w.wr.Opcode.String() + ": " + err.Error()
		if q.typ == RC {
			// rxe's requester moves the QP to ERR (rxe_qp_error) and
			// reports no asynchronous event: the completion is the
			// report, as for rxe's other local operation errors.
			q.enterError(int64(q.sq.cur), status, detail)
		} else {
			q.failSend(w, status, detail) // UC: SQE, as goroce's other send errors (enterSQE)
		}
		return false
	}
	q.sq.cur++
	q.req.off = 0
	q.completeSend(w, WCSuccess, "")
	q.sq.head = q.sq.cur
	return true
}
