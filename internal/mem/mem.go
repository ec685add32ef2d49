// Package mem is goroce's memory protection: the table of registered memory
// regions, their lkeys and rkeys, protection domains, access flags and bounds
// checks. Every byte the transport reads from or writes to user memory goes
// through Region.Slice, so a bad key, PD, access flag or range yields the
// IBTA error and never touches memory outside a registered region.
package mem

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Access is a set of ibv_access_flags.
type Access uint32

// Access flags, with the values of enum ibv_access_flags.
const (
	LocalWrite      Access = 1 << 0
	RemoteWrite     Access = 1 << 1
	RemoteRead      Access = 1 << 2
	RemoteAtomic    Access = 1 << 3
	MWBind          Access = 1 << 4
	ZeroBased       Access = 1 << 5
	OnDemand        Access = 1 << 6
	HugeTLB         Access = 1 << 7
	FlushGlobal     Access = 1 << 8
	FlushPersistent Access = 1 << 9
	RelaxedOrdering Access = 1 << 20

	validAccess = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased |
		FlushGlobal | FlushPersistent | RelaxedOrdering
)

var accessNames = []struct {
	a    Access
	name string
}{
	{LocalWrite, "LOCAL_WRITE"}, {RemoteWrite, "REMOTE_WRITE"}, {RemoteRead, "REMOTE_READ"},
	{RemoteAtomic, "REMOTE_ATOMIC"}, {MWBind, "MW_BIND"}, {ZeroBased, "ZERO_BASED"},
	{OnDemand, "ON_DEMAND"}, {HugeTLB, "HUGETLB"}, {FlushGlobal, "FLUSH_GLOBAL"},
	{FlushPersistent, "FLUSH_PERSISTENT"}, {RelaxedOrdering, "RELAXED_ORDERING"},
}

// String lists the flags as ibverbs names them, e.g. "LOCAL_WRITE|REMOTE_READ".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var parts []string
	for _, n := range accessNames {
		if a&n.a != 0 {
			parts = append(parts, n.name)
			a &^= n.a
		}
	}
	if a != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(a)))
	}
	return strings.Join(parts, "|")
}

// Validate checks a set of flags for RegMR: unknown bits, and the IBTA rule
// that remote write and remote atomic access need local write (§10.6.3.1,
// ibv_reg_mr: EINVAL).
func (a Access) Validate() error {
	if bad := a &^ validAccess; bad != 0 {
		return fmt.Errorf("access flags %#x: unsupported bits %v (valid: %v)", uint32(a), bad, validAccess)
	}
	if a&(RemoteWrite|RemoteAtomic) != 0 && a&LocalWrite == 0 {
		return fmt.Errorf("access %v: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE", a)
	}
	return nil
}

// Errors of key and range checks. The transport maps them to IBTA statuses:
// on the local side IBV_WC_LOC_PROT_ERR, on the remote side a NAK "Remote
// Access Error".
var (
	ErrBadKey    = errors.New("no valid memory region has this key")
	ErrBadPD     = errors.New("memory region belongs to another protection domain")
	ErrAccess    = errors.New("memory region lacks the required access")
	ErrRange     = errors.New("range is outside the memory region")
	ErrAlignment = errors.New("address is not 8-byte aligned")
	ErrTooMany   = errors.New("too many memory regions")
	// ErrNotInvalidatable: SEND_WITH_INVALIDATE named a region that may
	// not be invalidated remotely (rxe_invalidate_mr refuses any MR but a
	// fast-registration one, IB_MR_TYPE_MEM_REG; a type 2 memory window
	// is the other kind IBTA §10.6.5 lets a remote invalidate).
	ErrNotInvalidatable = errors.New("memory region is a user MR (ibv_reg_mr): only fast-registration MRs and type 2 memory windows may be invalidated remotely")
)

// KeyError says which check failed for which key and range.
type KeyError struct {
	Err    error
	Key    uint32
	Addr   uint64
	Length uint64
	Need   Access
}

func (e *KeyError) Error() string {
	s := fmt.Sprintf("key %#x addr %#x len %d: %v", e.Key, e.Addr, e.Length, e.Err)
	if errors.Is(e.Err, ErrAccess) {
		s += " (needs " + e.Need.String() + ")"
	}
	return s
}

func (e *KeyError) Unwrap() error { return e.Err }

// PD is a protection domain handle: regions and QPs match by PD identity.
type PD struct{ id uint32 }

// ID returns the PD's number.
func (p *PD) ID() uint32 { return p.id }

// Region is a registered memory region. Its buffer is the caller's memory;
// the region neither copies nor frees it.
type Region struct {
	pd     *PD
	buf    []byte
	iova   uint64 // the address of buf[0] in the keys' address space
	access Access
	lkey   uint32
	rkey   uint32
	valid  bool // guarded by Table.mu; false after Invalidate or Deregister
	// remoteInv: a SEND_WITH_INVALIDATE may invalidate the region. Only a
	// fast-registration MR (IB_MR_TYPE_MEM_REG) or a type 2 memory window
	// may be (IBTA §10.6.5; rxe_invalidate_mr); goroce has no
	// fast-registration MRs, so no region sets it (windows are Window).
	remoteInv bool
	windows   int // memory windows bound to it; guarded by Table.mu
	// held names r until Deregister clears it: what a Cache keeps, so that
	// a region deregistered and dropped by its owner (and the memory it
	// registered) is not kept alive by a QP that has not looked a key up
	// since.
	held *regionHold
}

// regionHold is the one pointer to a registered Region that Caches share.
type regionHold struct{ r atomic.Pointer[Region] }

func (r *Region) PD() *PD        { return r.pd }
func (r *Region) LKey() uint32   { return r.lkey }
func (r *Region) RKey() uint32   { return r.rkey }
func (r *Region) IOVA() uint64   { return r.iova }
func (r *Region) Len() int       { return len(r.buf) }
func (r *Region) Access() Access { return r.access }

// Table holds a device's protection domains, memory regions and memory
// windows. Regions and windows share one index space (the upper 24 bits of
// a key), so an rkey names one or the other, as rxe's rkey_is_mw tells
// them apart by index range.
type Table struct {
	mu      sync.RWMutex
	regions map[uint32]*Region // by index (key >> 8); guarded by mu
	windows map[uint32]*Window // by index (rkey >> 8); guarded by mu
	next    uint32             // next index; guarded by mu
	keygen  *rand.ChaCha8      // the low 8 bits of new keys; guarded by mu
	pds     uint32             // guarded by mu
	max     int
	maxMW   int
	// gen counts the changes that can make a key stop naming the region
	// it named (Deregister, Invalidate); written under mu. A Cache entry
	// filled at one generation holds while gen has not moved.
	gen atomic.Uint64
}

// Cache remembers the region one key named at the table's last change
// (its generation), so that a QP looking up the same key packet after
// packet — one send buffer's lkey, one receive buffer's, the rkey of a
// stream of WRITEs — finds the region without the table's lock and map.
// Every other check (PD, access, range) still runs on each use. The zero
// value is empty; a Cache is not safe for concurrent use (a QP keeps its
// own under its lock).
type Cache struct {
	h     *regionHold
	key   uint32
	local bool
	gen   uint64
}

// NewTable returns an empty table holding at most max regions and max
// memory windows (SetMaxWindows changes the latter).
func NewTable(max int) *Table {
	// The key bits are random, as rxe's (rxe_mr_init takes them from
	// get_random_bytes through rxe_get_next_key): keys that count up
	// (0x101, 0x202, … in every run) let a peer guess the rkey of a
	// region never shared with it. A stream cipher seeded once from the
	// system's random source makes each draw cheap.
	var seed [32]byte
	crand.Read(seed[:])
	return &Table{regions: make(map[uint32]*Region), windows: make(map[uint32]*Window), next: 1, max: max,
		maxMW: max, keygen: rand.NewChaCha8(seed)}
}

// SetMaxWindows sets how many memory windows the table holds at most.
func (t *Table) SetMaxWindows(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.maxMW = n
}

// nextIndex returns a free index for a new region or window. Called with
// mu held.
func (t *Table) nextIndex() uint32 {
	for t.regions[t.next] != nil || t.windows[t.next] != nil || t.next == 0 || t.next >= 1<<24 {
		t.next++
		if t.next >= 1<<24 {
			t.next = 1
		}
	}
	idx := t.next
	t.next++
	return idx
}

// newKey returns a key of index idx with random low 8 bits. Called with
// mu held.
func (t *Table) newKey(idx uint32) uint32 { return idx<<8 | uint32(t.keygen.Uint64()&0xff) }

// AllocPD returns a new protection domain.
func (t *Table) AllocPD() *PD {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pds++
	return &PD{id: t.pds}
}

// AddressOf returns the address of buf[0] as ibverbs users see it: the
// virtual address of the memory, used as the default IOVA of a region.
func AddressOf(buf []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))) }

// Register registers buf in pd with the given access and IOVA (the address
// remote peers use for buf[0]). The lkey is an index in the upper 24 bits
// and random low 8 bits; the rkey is the same number when access grants a
// remote right, and 0 (a key that names nothing) when it does not, as
// rxe_mr_init sets them (rkey = access & IB_ACCESS_REMOTE ? lkey : 0; the
// lab's rxe reports rkey 0 for such a region).
func (t *Table) Register(pd *PD, buf []byte, iova uint64, access Access) (*Region, error) {
	if err := access.Validate(); err != nil {
		return nil, err
	}
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("iova %#x + length %d wraps around", iova, len(buf))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.regions) >= t.max {
		return nil, ErrTooMany
	}
	key := t.newKey(t.nextIndex())
	rkey := key
	if access&(RemoteRead|RemoteWrite|RemoteAtomic) == 0 {
		rkey = 0
	}
	r := &Region{pd: pd, buf: buf, iova: iova, access: access, lkey: key, rkey: rkey, valid: true,
		held: new(regionHold)}
	r.held.r.Store(r)
	t.regions[key>>8] = r
	return r, nil
}

// ErrWindowsBound: a region with memory windows bound to it cannot be
// deregistered (rxe_dereg_mr: EINVAL while num_mw > 0); the windows must
// be invalidated, unbound or deallocated first.
var ErrWindowsBound = errors.New("memory windows are bound to the region")

// Deregister removes r; its keys stop working at once. A region with
// windows bound to it stays registered (ErrWindowsBound).
func (t *Table) Deregister(r *Region) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.windows > 0 {
		return fmt.Errorf("%w (%d of them)", ErrWindowsBound, r.windows)
	}
	if t.regions[r.lkey>>8] == r {
		delete(t.regions, r.lkey>>8)
	}
	r.valid = false
	r.held.r.Store(nil)
	t.gen.Add(1)
	return nil
}

// Invalidate makes the region with rkey unusable (SEND_WITH_INVALIDATE,
// §10.6.5); pd must own it, and it must be of a kind a remote may
// invalidate: a region registered with Register never is
// (ErrNotInvalidatable), as rxe_invalidate_mr refuses any MR whose type is
// not IB_MR_TYPE_MEM_REG. Otherwise a peer could revoke, with one packet,
// a region the application never offered for invalidation.
//
// A key naming a memory window invalidates the window (rxe_invalidate_mw):
// only a bound type 2 window may be, which returns to the free state; a
// type 1 window is refused (o10-37.2.26; ErrNotInvalidatable), as are a
// free or deallocated one and a stale key (ErrBadKey).
func (t *Table) Invalidate(pd *PD, rkey uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.windows[rkey>>8]; w != nil {
		return w.invalidate(pd, rkey)
	}
	r := t.regions[rkey>>8]
	if r == nil || r.rkey != rkey || !r.valid {
		return &KeyError{Err: ErrBadKey, Key: rkey}
	}
	if r.pd != pd {
		return &KeyError{Err: ErrBadPD, Key: rkey}
	}
	if !r.remoteInv {
		return &KeyError{Err: ErrNotInvalidatable, Key: rkey}
	}
	r.valid = false
	t.gen.Add(1)
	return nil
}

// Bounds returns the IOVA range of the valid region key names, for
// requests that address a whole region (FLUSH at the memory-region
// selectivity level carries no meaningful range).
func (t *Table) Bounds(key uint32, local bool) (iova, length uint64, ok bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if w := t.windows[key>>8]; w != nil && !local {
		if w.rkey != key || w.state != windowBound {
			return 0, 0, false
		}
		return w.base(), w.length, true
	}
	r := t.regions[key>>8]
	if r == nil || !r.valid || local && r.lkey != key || !local && r.rkey != key {
		return 0, 0, false
	}
	return r.iova, uint64(len(r.buf)), true
}

// Slice checks that key (an lkey when local, else an rkey) names a valid
// region of pd that grants need and covers [addr, addr+length), and returns
// that range of the region's memory. A zero-length range needs only a valid
// key (IBTA §9.4.1.1: a zero-length RDMA WRITE or READ checks no key at all;
// the caller skips the call then).
//
// An rkey may name a memory window instead (SliceRemote).
func (t *Table) Slice(pd *PD, key uint32, local bool, addr, length uint64, need Access) ([]byte, error) {
	return t.SliceCached(nil, pd, key, local, addr, length, need)
}

// SliceCached is Slice remembering the key's region in c (nil for none):
// while the table has not changed since c was filled for the same key,
// the region is taken from c.
func (t *Table) SliceCached(c *Cache, pd *PD, key uint32, local bool, addr, length uint64, need Access) ([]byte, error) {
	if !local {
		return t.SliceRemoteCached(c, pd, nil, key, addr, length, need)
	}
	if c != nil && c.h != nil && c.key == key && c.local && c.gen == t.gen.Load() {
		if r := c.h.r.Load(); r != nil {
			return r.within(pd, key, addr, length, need)
		}
	}
	return t.slice(c, pd, key, true, addr, length, need)
}

// SliceRemote is Slice for an rkey a peer sent to qp, a QP of pd (any
// value that identifies it; nil for none). The rkey may name a region or a
// memory window: a window must be bound, of pd, grant need and cover the
// range; a type 2 window must have been bound through qp (rxe_lookup_mw's
// mw->qp check, IBTA C10-71); then the window's region must still be
// valid and cover the range. A region's own remote access flags do not
// matter then: granting remote access through windows is what MW_BIND
// lets the region's owner do.
func (t *Table) SliceRemote(pd *PD, qp any, key uint32, addr, length uint64, need Access) ([]byte, error) {
	return t.SliceRemoteCached(nil, pd, qp, key, addr, length, need)
}

// SliceRemoteCached is SliceRemote remembering, in c (nil for none), the
// region an rkey named; a window's rkey is looked up every time (its
// binding changes without Deregister).
func (t *Table) SliceRemoteCached(c *Cache, pd *PD, qp any, key uint32, addr, length uint64, need Access) ([]byte, error) {
	if c != nil && c.h != nil && c.key == key && !c.local && c.gen == t.gen.Load() {
		// The index space is shared: a key that named a region names
		// no window while the region is registered.
		if r := c.h.r.Load(); r != nil {
			return r.within(pd, key, addr, length, need)
		}
	}
	t.mu.RLock()
	w := t.windows[key>>8]
	if w == nil {
		t.mu.RUnlock()
		return t.slice(c, pd, key, false, addr, length, need)
	}
	defer t.mu.RUnlock()
	fail := func(err error) ([]byte, error) {
		return nil, &KeyError{Err: err, Key: key, Addr: addr, Length: length, Need: need}
	}
	switch {
	case w.rkey != key || w.state != windowBound:
		return fail(ErrBadKey)
	case w.pd != pd:
		return fail(ErrBadPD)
	case w.typ == 2 && w.qp != qp:
		return fail(ErrWindowQP)
	case w.access&need != need:
		return fail(ErrAccess)
	}
	// The window's range, in the addresses the peer uses: [addr, addr+len)
	// of the region, or [0, len) for a zero-based window.
	base := w.base()
	if addr < base || length > w.length || addr-base > w.length-length {
		return fail(ErrRange)
	}
	r := w.mr
	iova := w.addr + (addr - base)
	if !r.valid || iova < r.iova || length > uint64(len(r.buf)) || iova-r.iova > uint64(len(r.buf))-length {
		return fail(ErrRange)
	}
	off := iova - r.iova
	return r.buf[off : off+length : off+length], nil
}

// slice looks key up among the regions and, when it names a valid one,
// fills c (if not nil) with it and the generation the lookup saw.
func (t *Table) slice(c *Cache, pd *PD, key uint32, local bool, addr, length uint64, need Access) ([]byte, error) {
	t.mu.RLock()
	r := t.regions[key>>8]
	ok := r != nil && r.valid && (local && r.lkey == key || !local && r.rkey == key)
	gen := t.gen.Load()
	t.mu.RUnlock()
	if !ok {
		return nil, &KeyError{Err: ErrBadKey, Key: key, Addr: addr, Length: length, Need: need}
	}
	if c != nil {
		*c = Cache{h: r.held, key: key, local: local, gen: gen}
	}
	return r.within(pd, key, addr, length, need)
}

// within checks that r, which key names, is pd's, grants need and covers
// [addr, addr+length), and returns that range of its memory.
func (r *Region) within(pd *PD, key uint32, addr, length uint64, need Access) ([]byte, error) {
	var err error
	switch {
	case r.pd != pd:
		err = ErrBadPD
	case r.access&need != need:
		err = ErrAccess
	case addr < r.iova || length > uint64(len(r.buf)) || addr-r.iova > uint64(len(r.buf))-length:
		err = ErrRange
	default:
		off := addr - r.iova
		return r.buf[off : off+length : off+length], nil
	}
	return nil, &KeyError{Err: err, Key: key, Addr: addr, Length: length, Need: need}
}
