package rdmacm

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs/verbstest"
)

// fakeRouter answers every lookup with src or err, and counts them.
type fakeRouter struct {
	src netip.Addr
	err error

	mu    sync.Mutex
	asked []netip.Addr
}

func (r *fakeRouter) RouteTo(dst netip.Addr) (netip.Addr, error) {
	r.mu.Lock()
	r.asked = append(r.asked, dst)
	r.mu.Unlock()
	return r.src, r.err
}

func (r *fakeRouter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.asked)
}

// TestResolveAddrByRoute: with devices added by AddRoutedDevice,
// ResolveAddr takes the first device whose route leaves through it, with
// the route's source; a destination no route reaches is ADDR_ERROR with
// the routes' errno and reasons; a destination a device holds, or a given
// source, needs no lookup.
func TestResolveAddrByRoute(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	ra := &fakeRouter{err: errors.Join(errors.New("the route to it leaves through eth9, not fab0"), syscall.EHOSTUNREACH)}
	rb := &fakeRouter{src: netip.MustParseAddr("192.0.2.2")}
	cm := New(fastOptions)
	defer cm.Close()
	if err := cm.AddRoutedDevice(p.A.Dev, ra); err != nil {
		t.Fatal(err)
	}
	if err := cm.AddRoutedDevice(p.B.Dev, rb); err != nil {
		t.Fatal(err)
	}
	ec := cm.CreateEventChannel()
	defer ec.Close()
	resolve := func(src, dst string) (*ID, Event) {
		t.Helper()
		id, err := cm.CreateID(ec, PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { id.Destroy() })
		var sa netip.Addr
		if src != "" {
			sa = netip.MustParseAddr(src)
		}
		if err := id.ResolveAddr(sa, netip.MustParseAddrPort(dst), 0); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
		defer cancel()
		e, err := ec.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return id, e
	}

	id, e := resolve("", "198.51.100.7:7174")
	if e.Type != EventAddrResolved || id.Device() != p.B.Dev || id.LocalAddr().Addr() != rb.src {
		t.Errorf("routed to B: %v, device %v, source %v; want ADDR_RESOLVED on %s from %v", e.Type, id.Device().Name(), id.LocalAddr(), p.B.Dev.Name(), rb.src)
	}
	if ra.count() != 1 || rb.count() != 1 {
		t.Errorf("routers asked %d and %d times, want once each", ra.count(), rb.count())
	}

	rb.err = errors.Join(errors.New("no route to 198.51.100.8"), syscall.ENETUNREACH)
	_, e = resolve("", "198.51.100.8:7174")
	if e.Type != EventAddrError || e.Status != -int(syscall.EHOSTUNREACH) && e.Status != -int(syscall.ENETUNREACH) ||
		e.Err == nil || !strings.Contains(e.Err.Error(), "eth9") || !strings.Contains(e.Err.Error(), p.A.Dev.Name()) {
		t.Errorf("no route: %v status %d err %v; want ADDR_ERROR with the routes' errno and reasons", e.Type, e.Status, e.Err)
	}

	before := ra.count() + rb.count()
	id, e = resolve("", "192.0.2.1:7174") // A's own address: loopback
	if e.Type != EventAddrResolved || id.Device() != p.A.Dev {
		t.Errorf("a device's own address: %v on %v, want ADDR_RESOLVED on %s", e.Type, id.Device(), p.A.Dev.Name())
	}
	id, e = resolve("192.0.2.2", "198.51.100.9:7174") // a source picks the device
	if e.Type != EventAddrResolved || id.Device() != p.B.Dev {
		t.Errorf("with a source: %v on %v, want ADDR_RESOLVED on %s", e.Type, id.Device(), p.B.Dev.Name())
	}
	if n := ra.count() + rb.count() - before; n != 0 {
		t.Errorf("%d route lookups for a held destination or a given source, want none", n)
	}
}
