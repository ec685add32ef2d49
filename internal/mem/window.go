package mem

import (
	"errors"
	"fmt"
)

// Errors of memory window operations, beyond the key errors above.
var (
	// ErrWindowQP: a type 2 window's rkey came to a QP other than the
	// one it was bound through (rxe_lookup_mw: mw->qp != qp; IBTA C10-71).
	ErrWindowQP = errors.New("type 2 memory window is bound to another QP")
	// ErrWindowState: the bind found the window in the wrong state.
	ErrWindowState = errors.New("memory window is not in a state it may be bound in")
)

type windowState uint8

const (
	// windowFree: a type 2 window not bound (after allocation or an
	// invalidation). rxe: RXE_MW_STATE_FREE.
	windowFree windowState = iota
	// windowBound: a bound window; a type 1 window is always in it while
	// allocated (with length 0 before its first bind, so no access
	// passes). rxe: RXE_MW_STATE_VALID.
	windowBound
	// windowGone: deallocated. rxe: RXE_MW_STATE_INVALID.
	windowGone
)

// Window is a memory window (IBTA §10.6.7): a view of part of a region,
// with its own rkey and remote access, that a bind opens and an
// invalidation or a new bind changes without touching the region.
type Window struct {
	pd  *PD
	typ uint8 // 1 or 2
	// The fields below are guarded by Table.mu.
	rkey   uint32
	state  windowState
	mr     *Region // the region bound to; nil when unbound
	addr   uint64  // the region IOVA the window starts at
	length uint64
	access Access
	qp     any // type 2: the QP it was bound through
}

// Type returns 1 or 2.
func (w *Window) Type() uint8 { return w.typ }

// PD returns the window's protection domain.
func (w *Window) PD() *PD { return w.pd }

// base is the first address a peer uses for the window: 0 for a
// zero-based window, else the region IOVA it starts at. Called with mu held.
func (w *Window) base() uint64 {
	if w.access&ZeroBased != 0 {
		return 0
	}
	return w.addr
}

// AllocWindow allocates a memory window of type typ (1 or 2) in pd
// (rxe_alloc_mw): its rkey's index is free in the shared index space and
// its key byte random, as rxe's rxe_get_next_key. A type 1 window starts
// bound to nothing (length 0), a type 2 window free.
func (t *Table) AllocWindow(pd *PD, typ uint8) (*Window, uint32, error) {
	if typ != 1 && typ != 2 {
		return nil, 0, fmt.Errorf("memory window type %d: valid types are 1 and 2", typ)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.windows) >= t.maxMW {
		return nil, 0, fmt.Errorf("too many memory windows (max_mw %d)", t.maxMW)
	}
	w := &Window{pd: pd, typ: typ, rkey: t.newKey(t.nextIndex()), state: windowFree}
	if typ == 1 {
		w.state = windowBound
	}
	t.windows[w.rkey>>8] = w
	return w, w.rkey, nil
}

// DeallocWindow deallocates w (rxe_dealloc_mw): its rkey stops working at
// once, and the region it was bound to is released.
func (t *Table) DeallocWindow(w *Window) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.windows[w.rkey>>8] == w {
		delete(t.windows, w.rkey>>8)
	}
	w.unbind()
	w.state = windowGone
}

// unbind releases the window's region. Called with mu held.
func (w *Window) unbind() {
	if w.mr != nil {
		w.mr.windows--
		w.mr = nil
	}
	w.qp, w.addr, w.length, w.access = nil, 0, 0, 0
}

// Bind describes a bind of a memory window: struct ibv_mw_bind_info plus
// the keys of the bind work request.
type Bind struct {
	// WindowRKey is the window's rkey as the consumer knows it; it must
	// be the window's current rkey (rxe_bind_mw: mw->rkey != mw_rkey).
	WindowRKey uint32
	// NewKey is the consumer's key: the low 8 bits of the window's new
	// rkey (rxe_do_bind_mw).
	NewKey uint8
	// Region is the region to bind to, nil to unbind (type 1 only); it
	// must be named by RegionLKey, its current lkey.
	Region     *Region
	RegionLKey uint32
	Addr       uint64
	Length     uint64
	Access     Access
}

// windowAccess is what a window may grant: rxe's RXE_ACCESS_SUPPORTED_MW.
const windowAccess = validAccess

// BindWindow binds a window, checking what rxe_check_bind_mw checks, for
// QP qp of pd: a type 1 window must not be deallocated and must not be
// zero-based (o10-36.2.2); a type 2 window must be free (o10-37.2.30),
// in the QP's PD (C10-72) and bound to a region of nonzero length
// (o10-37.2.40); the region must not be zero-based, must allow MW_BIND
// (C10-73) and LOCAL_WRITE if the window grants REMOTE_WRITE or
// REMOTE_ATOMIC (C10-74), and must hold the window (C10-75). It returns
// the window's new rkey. A bind that fails leaves the window as it was.
func (t *Table) BindWindow(pd *PD, qp any, b Bind) (uint32, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.windows[b.WindowRKey>>8]
	if w == nil || w.rkey != b.WindowRKey {
		return 0, &KeyError{Err: ErrBadKey, Key: b.WindowRKey}
	}
	if b.Length != 0 {
		r := b.Region
		if r == nil || t.regions[b.RegionLKey>>8] != r || r.lkey != b.RegionLKey || !r.valid {
			return 0, fmt.Errorf("region lkey %#x: %w", b.RegionLKey, ErrBadKey)
		}
	}
	if bad := b.Access &^ windowAccess; bad != 0 {
		return 0, fmt.Errorf("window access %v: unsupported bits %v", b.Access, bad)
	}
	switch w.typ {
	case 1:
		if w.state != windowBound {
			return 0, fmt.Errorf("type 1 window %#x was deallocated: %w", w.rkey, ErrWindowState)
		}
		if b.Access&ZeroBased != 0 {
			return 0, fmt.Errorf("a type 1 window may not be zero-based (o10-36.2.2)")
		}
	case 2:
		if w.state != windowFree {
			return 0, fmt.Errorf("type 2 window %#x is bound; it is bound again only after an invalidation (o10-37.2.30): %w", w.rkey, ErrWindowState)
		}
		if w.pd != pd {
			return 0, fmt.Errorf("type 2 window %#x is of another protection domain than the QP (C10-72): %w", w.rkey, ErrBadPD)
		}
		if b.Length == 0 {
			return 0, fmt.Errorf("a type 2 window is bound to a region of nonzero length; invalidate it to unbind (o10-37.2.40)")
		}
	}
	if r := b.Region; b.Length != 0 {
		if r.pd != w.pd {
			return 0, fmt.Errorf("region lkey %#x is of another protection domain than the window: %w", r.lkey, ErrBadPD)
		}
		if r.access&ZeroBased != 0 {
			return 0, fmt.Errorf("region lkey %#x is zero-based: windows are not bound to zero-based regions", r.lkey)
		}
		if r.access&MWBind == 0 {
			return 0, fmt.Errorf("region lkey %#x access %v lacks MW_BIND (C10-73): %w", r.lkey, r.access, ErrAccess)
		}
		if b.Access&(RemoteWrite|RemoteAtomic) != 0 && r.access&LocalWrite == 0 {
			return 0, fmt.Errorf("window access %v needs LOCAL_WRITE on the region, whose access is %v (C10-74): %w", b.Access, r.access, ErrAccess)
		}
		// The window lies in the region, in region IOVAs; a zero-based
		// window differs only in the addresses peers use (from 0).
		start, size := r.iova, uint64(len(r.buf))
		if b.Addr < start || b.Length > size || b.Addr-start > size-b.Length {
			return 0, fmt.Errorf("window [%#x, +%d) is outside region lkey %#x [%#x, +%d) (C10-75): %w",
				b.Addr, b.Length, r.lkey, r.iova, len(r.buf), ErrRange)
		}
	}
	w.unbind()
	w.rkey = w.rkey&^0xff | uint32(b.NewKey)
	w.state = windowBound
	w.access = b.Access
	w.addr, w.length = b.Addr, b.Length
	if b.Length != 0 {
		w.mr = b.Region
		w.mr.windows++
	}
	if w.typ == 2 {
		w.qp = qp
	}
	return w.rkey, nil
}

// invalidate is Invalidate for a window. Called with mu held.
func (w *Window) invalidate(pd *PD, rkey uint32) error {
	switch {
	case w.rkey != rkey || w.state == windowGone:
		return &KeyError{Err: ErrBadKey, Key: rkey}
	case w.pd != pd:
		return &KeyError{Err: ErrBadPD, Key: rkey}
	case w.typ == 1:
		return &KeyError{Err: errType1, Key: rkey}
	case w.state != windowBound:
		return &KeyError{Err: errNotBound, Key: rkey}
	}
	w.unbind()
	w.state = windowFree
	return nil
}

var (
	errType1    = fmt.Errorf("%w: a type 1 memory window is unbound by binding it with length 0, never invalidated (o10-37.2.26)", ErrNotInvalidatable)
	errNotBound = fmt.Errorf("%w: the type 2 memory window is not bound", ErrBadKey)
)
