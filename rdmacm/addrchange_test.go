package rdmacm

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
)

// wantAddrChange takes n events from s and checks they are ADDR_CHANGE for
// exactly the IDs want, in any order.
func wantAddrChange(t *testing.T, s *side, want ...*ID) {
	t.Helper()
	left := map[*ID]bool{}
	for _, id := range want {
		left[id] = true
	}
	for range want {
		e := s.want(t, EventAddrChange)
		if !left[e.ID] {
			t.Fatalf("ADDR_CHANGE for %p (%v), not one of %v", e.ID, e.ID.LocalAddr(), want)
		}
		delete(left, e.ID)
		if e.Status != 0 || e.Err == nil || !strings.Contains(e.Err.Error(), s.ip.String()) {
			t.Errorf("ADDR_CHANGE status %d, error %v; want 0 and words naming %v", e.Status, e.Err, s.ip)
		}
	}
}

// TestAddrChange: when a device's GID table loses an ID's source address,
// each ID using it gets ADDR_CHANGE, once: a connected ID and a listener
// bound to the address; not a listener bound to the unspecified address,
// nor the peer. The event comes again only after the address has come
// back and gone again.
func TestAddrChange(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	ca, cb := connect(t, a, b, nil, nil)
	bound, err := a.cm.CreateID(a.ec, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := bound.BindAddr(netip.AddrPortFrom(a.ip, 9000)); err != nil {
		t.Fatal(err)
	}
	if err := bound.Listen(1); err != nil {
		t.Fatal(err)
	}
	listen(t, a, PSTCP, 9001) // any address

	full := a.dev.GIDs()
	var without []verbs.GIDEntry
	for _, e := range full {
		if e.GID != gidOf(a.ip) {
			without = append(without, e)
		}
	}
	setGIDs := func(g []verbs.GIDEntry) {
		t.Helper()
		if err := a.dev.SetGIDs(g); err != nil {
			t.Fatal(err)
		}
		a.cm.GIDTableChanged(a.dev)
	}

	a.cm.GIDTableChanged(a.dev) // nothing changed
	noEvent(t, a, 50*time.Millisecond)
	setGIDs(without)
	wantAddrChange(t, a, ca, bound)
	noEvent(t, a, 50*time.Millisecond)
	noEvent(t, b, 50*time.Millisecond)
	setGIDs(without) // still gone: no news
	noEvent(t, a, 50*time.Millisecond)
	setGIDs(full) // back: no event
	noEvent(t, a, 50*time.Millisecond)
	setGIDs(without) // gone again
	wantAddrChange(t, a, ca, bound)

	setGIDs(full)
	ca.Destroy()
	cb.Destroy()
	bound.Destroy()
}

// TestAddrChangeNetlink: the whole path on a real netdev: a CM with a
// host.Device added by AddRoutedDevice, and an address deleted from the
// netdev through netlink. The ID whose source is the deleted IPv4 address
// gets ADDR_CHANGE; the one on the IPv6 address does not. Needs root.
func TestAddrChangeNetlink(t *testing.T) {
	ha, hb := nettest.VethPair(t, nettest.Options{})
	dir := t.TempDir()
	err := ha.Do(func() error {
		ns, err := host.CurrentNetns()
		if err != nil {
			return err
		}
		return host.NewRegistry(dir).Add(host.DeviceDef{Name: "rxe0", Type: "rxe", Netdev: ha.Ifname, Netns: ns,
			Versions: host.VersionsV2})
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := host.Open("rxe0", host.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	cm := New(fastOptions)
	if err := cm.AddRoutedDevice(d.Device, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() }) // before d.Close: LIFO
	ec := cm.CreateEventChannel()
	t.Cleanup(ec.Close)
	s := &side{cm: cm, ec: ec, ip: ha.IPv4}

	id4 := resolve(t, s, PSTCP, netip.AddrPortFrom(hb.IPv4, 7174))
	id6 := resolve(t, s, PSTCP, netip.AddrPortFrom(hb.IPv6, 7174))
	if got := id4.LocalAddr().Addr(); got != ha.IPv4 {
		t.Fatalf("IPv4 ID's source %v, want %v", got, ha.IPv4)
	}
	err = ha.Do(func() error {
		l, err := netlink.LinkByName(ha.Ifname)
		if err != nil {
			return err
		}
		addr, err := netlink.ParseAddr(ha.IPv4.String() + "/24")
		if err != nil {
			return err
		}
		return netlink.AddrDel(l, addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
	defer cancel()
	e, err := ec.Get(ctx)
	if err != nil {
		t.Fatalf("no ADDR_CHANGE for the IPv4 ID: %v", err)
	}
	if e.Type != EventAddrChange || e.ID != id4 {
		t.Fatalf("got %v for ID %p, want ADDR_CHANGE for the IPv4 ID %p", e, e.ID, id4)
	}
	noEvent(t, s, 300*time.Millisecond) // the IPv6 ID keeps its address
	id4.Destroy()
	id6.Destroy()
}
