package mem

import (
	"errors"
	"math"
	"runtime"
	"testing"
	"time"
)

// TestKeysRandom: the low 8 bits of keys are random, as rxe draws them
// (rxe_get_next_key): they used to count up (0x101, 0x202, …), the same in
// every run, so a peer could name the rkey of a region never shared with
// it. Two tables give different sequences, and one table's do not count.
func TestKeysRandom(t *testing.T) {
	const n = 64
	seq := func() []uint32 {
		tb := NewTable(1024)
		pd := tb.AllocPD()
		var keys []uint32
		for i := 0; i < n; i++ {
			r, err := tb.Register(pd, make([]byte, 8), uint64(i)<<12, LocalWrite|RemoteRead)
			if err != nil {
				t.Fatal(err)
			}
			if r.LKey() != r.RKey() || r.LKey()>>8 != uint32(i+1) {
				t.Fatalf("region %d: lkey %#x rkey %#x; want equal keys with index %d", i, r.LKey(), r.RKey(), i+1)
			}
			keys = append(keys, r.RKey())
		}
		return keys
	}
	a, b := seq(), seq()
	same, counting := 0, 0
	for i := range a {
		if a[i] == b[i] {
			same++
		}
		if a[i]&0xff == uint32(i+1)&0xff {
			counting++
		}
	}
	// Chance agreements: n/256 expected each; 16 is far beyond chance.
	if same > 16 || counting > 16 {
		t.Errorf("of %d keys, %d equal across two tables and %d follow the registration count: the low 8 bits are not random", n, same, counting)
	}
	lows := map[uint32]bool{}
	for _, k := range a {
		lows[k&0xff] = true
	}
	if len(lows) < n/4 {
		t.Errorf("%d distinct low bytes among %d keys", len(lows), n)
	}
}

// TestInvalidateRefusesUserMR: a region registered with Register (a user
// MR, ibv_reg_mr) is never invalidated by Invalidate, whatever its access,
// as rxe_invalidate_mr refuses any MR that is not a fast-registration one;
// the key, PD and validity checks come first.
func TestInvalidateRefusesUserMR(t *testing.T) {
	// The region's own key number is what a peer names: its rkey when it
	// grants a remote right; a LOCAL_WRITE-only region has rkey 0, so
	// remotely that number names no region at all.
	ifRemote := func(r *Region, err error) error {
		if r.RKey() == 0 {
			return ErrBadKey
		}
		return err
	}
	tb := NewTable(16)
	pd, other := tb.AllocPD(), tb.AllocPD()
	for _, acc := range []Access{LocalWrite, LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind} {
		r, err := tb.Register(pd, make([]byte, 64), 0x1000, acc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			pd   *PD
			key  uint32
			want error
		}{
			{pd, r.LKey(), ifRemote(r, ErrNotInvalidatable)},
			{other, r.LKey(), ifRemote(r, ErrBadPD)},
			{pd, r.LKey() ^ 1, ErrBadKey},
		} {
			if err := tb.Invalidate(c.pd, c.key); !errors.Is(err, c.want) {
				t.Errorf("access %v: Invalidate(key %#x): %v, want %v", acc, c.key, err, c.want)
			}
		}
		if _, err := tb.Slice(pd, r.LKey(), true, 0x1000, 64, LocalWrite); err != nil {
			t.Errorf("access %v: the region no longer works after refused invalidations: %v", acc, err)
		}
	}
}

// TestSliceBounds: every range check of Slice, at the edges: the region's
// end, below its start, and ranges whose end wraps 2^64.
func TestSliceBounds(t *testing.T) {
	tb := NewTable(16)
	pd := tb.AllocPD()
	const iova = 0xFFFF_FFFF_FFFF_F000
	r, err := tb.Register(pd, make([]byte, 0x800), iova, LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr, n uint64
		ok      bool
	}{
		{iova, 0x800, true},
		{iova + 0x7ff, 1, true},
		{iova + 0x800, 1, false},
		{iova + 0x7ff, 2, false},
		{iova - 1, 1, false},
		{iova + 8, math.MaxUint64, false},
		{iova + 8, math.MaxUint64 - iova, false}, // addr+n wraps to a small number
		{0, 8, false},
	} {
		b, err := tb.Slice(pd, r.RKey(), false, c.addr, c.n, RemoteWrite)
		if (err == nil) != c.ok {
			t.Errorf("Slice(%#x, %d): %v, want ok=%v", c.addr, c.n, err, c.ok)
		}
		if err == nil && uint64(len(b)) != c.n {
			t.Errorf("Slice(%#x, %d) returned %d bytes", c.addr, c.n, len(b))
		}
		if err != nil && !errors.Is(err, ErrRange) {
			t.Errorf("Slice(%#x, %d): %v, want %v", c.addr, c.n, err, ErrRange)
		}
	}
	if _, err := tb.Register(pd, make([]byte, 0x1001), iova, LocalWrite); err == nil {
		t.Error("a region whose end wraps 2^64 was registered")
	}
}

// TestRKeyZeroWithoutRemoteAccess: a region granting no remote right has
// rkey 0, as rxe_mr_init gives it (the lab's rxe reports "rkey 0"), and
// neither 0 nor its lkey opens it to a peer; with a remote right the rkey
// is the lkey.
func TestRKeyZeroWithoutRemoteAccess(t *testing.T) {
	tb := NewTable(16)
	pd := tb.AllocPD()
	for _, c := range []struct {
		acc    Access
		remote bool
	}{
		{LocalWrite, false}, {LocalWrite | MWBind, false}, {0, false},
		{RemoteRead, true}, {LocalWrite | RemoteWrite, true}, {LocalWrite | RemoteAtomic, true},
	} {
		r, err := tb.Register(pd, make([]byte, 64), 0x1000, c.acc)
		if err != nil {
			t.Fatal(err)
		}
		if c.remote && r.RKey() != r.LKey() || !c.remote && r.RKey() != 0 {
			t.Errorf("access %v: lkey %#x rkey %#x; want rkey = lkey with a remote right, else 0", c.acc, r.LKey(), r.RKey())
		}
		if !c.remote {
			for _, k := range []uint32{0, r.LKey()} {
				if _, _, ok := tb.Bounds(k, false); ok {
					t.Errorf("access %v: key %#x names a region remotely", c.acc, k)
				}
			}
		}
		if _, _, ok := tb.Bounds(r.LKey(), true); !ok {
			t.Errorf("access %v: lkey %#x does not name the region locally", c.acc, r.LKey())
		}
	}
}

// TestCache: a Cache serves the region its key named until the table
// changes, and every check but the lookup still runs on a hit: a
// deregistered region's key fails at once through a filled cache, an lkey
// remembered for local use does not open the region to a peer, and the PD,
// access and range are checked each time.
func TestCache(t *testing.T) {
	tb := NewTable(16)
	pd, other := tb.AllocPD(), tb.AllocPD()
	buf := make([]byte, 4096)
	r, err := tb.Register(pd, buf, 0x1000, LocalWrite) // no remote right: rkey 0
	if err != nil {
		t.Fatal(err)
	}
	var c Cache
	if b, err := tb.SliceCached(&c, pd, r.LKey(), true, 0x1010, 16, LocalWrite); err != nil || len(b) != 16 || &b[0] != &buf[0x10] {
		t.Fatalf("first lookup: %d bytes, %v", len(b), err)
	}
	if c.h == nil || c.h.r.Load() != r {
		t.Fatal("the lookup left the cache empty")
	}
	for _, k := range []struct {
		name string
		pd   *PD
		addr uint64
		n    uint64
		need Access
		want error
	}{
		{"another PD", other, 0x1000, 8, LocalWrite, ErrBadPD},
		{"a right not granted", pd, 0x1000, 8, RemoteRead, ErrAccess},
		{"past the end", pd, 0x1ff8, 16, LocalWrite, ErrRange},
		{"before the start", pd, 0xff8, 8, LocalWrite, ErrRange},
	} {
		if _, err := tb.SliceCached(&c, k.pd, r.LKey(), true, k.addr, k.n, k.need); !errors.Is(err, k.want) {
			t.Errorf("%s through the cache: %v, want %v", k.name, err, k.want)
		}
	}
	if _, err := tb.SliceRemoteCached(&c, pd, nil, r.LKey(), 0x1000, 8, 0); !errors.Is(err, ErrBadKey) {
		t.Errorf("the lkey, remembered for local use, as a peer's rkey: %v, want %v", err, ErrBadKey)
	}
	if _, err := tb.SliceCached(&c, pd, r.LKey(), true, 0x1000, 8, LocalWrite); err != nil {
		t.Fatalf("lookup again: %v", err)
	}
	if err := tb.Deregister(r); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.SliceCached(&c, pd, r.LKey(), true, 0x1000, 8, LocalWrite); !errors.Is(err, ErrBadKey) {
		t.Errorf("a deregistered region through a filled cache: %v, want %v", err, ErrBadKey)
	}

	// A peer's rkey: remembered, then deregistered while another
	// goroutine keeps looking it up (the race detector watches the
	// cache's unlocked reads).
	r2, err := tb.Register(pd, buf, 0, LocalWrite|RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	var rc Cache
	stop, done := make(chan struct{}), make(chan error)
	go func() {
		for {
			select {
			case <-stop:
				// stop is closed after Deregister returned: this
				// lookup comes after it.
				_, err := tb.SliceRemoteCached(&rc, pd, nil, r2.RKey(), 0, 64, RemoteWrite)
				done <- err
				return
			default:
			}
			tb.SliceRemoteCached(&rc, pd, nil, r2.RKey(), 0, 64, RemoteWrite)
		}
	}()
	for range 100 {
		x, err := tb.Register(other, make([]byte, 8), 0, LocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Deregister(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := tb.Deregister(r2); err != nil {
		t.Fatal(err)
	}
	close(stop)
	if err := <-done; !errors.Is(err, ErrBadKey) {
		t.Errorf("an rkey looked up after its region was deregistered: %v, want %v", err, ErrBadKey)
	}
}

// TestCacheReleases: a region deregistered and dropped by its owner is
// collected, with the memory it registered, while a Cache that named it
// is still filled (a QP that has not looked a key up since).
func TestCacheReleases(t *testing.T) {
	tb := NewTable(16)
	pd := tb.AllocPD()
	var c, rc Cache
	freed := make(chan string, 2)
	func() {
		buf := make([]byte, 1<<20)
		runtime.AddCleanup(&buf[0], func(s string) { freed <- s }, "the registered memory")
		r, err := tb.Register(pd, buf, 0, LocalWrite|RemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(r, func(s string) { freed <- s }, "the region")
		if _, err := tb.SliceCached(&c, pd, r.LKey(), true, 0, 8, LocalWrite); err != nil {
			t.Fatal(err)
		}
		if _, err := tb.SliceRemoteCached(&rc, pd, nil, r.RKey(), 0, 8, RemoteWrite); err != nil {
			t.Fatal(err)
		}
		if c.h == nil || rc.h == nil {
			t.Fatal("the lookups left the caches empty")
		}
		if err := tb.Deregister(r); err != nil {
			t.Fatal(err)
		}
	}()
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		runtime.GC()
		select {
		case s := <-freed:
			got[s] = true
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("after Deregister, with two caches still filled, collected: %v; want the region and its memory", got)
		}
	}
	runtime.KeepAlive(&c)
	runtime.KeepAlive(&rc)
}
