package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// Issue 13, item 12: the Go API as a newcomer met it.

// oneCM is one CM serving both devices of a fabric pair, as a program
// that opens a client and a server device makes it; a is the client's
// side, b the server's, sharing the CM.
func oneCM(t *testing.T, o Options, routers ...Router) (a, b *side) {
	t.Helper()
	p := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	cm := New(o)
	t.Cleanup(func() { cm.Close() })
	mk := func(s verbstest.Side, r Router) *side {
		var err error
		if r != nil {
			err = cm.AddRoutedDevice(s.Dev, r)
		} else {
			err = cm.AddDevice(s.Dev)
		}
		if err != nil {
			t.Fatal(err)
		}
		cq, err := s.Dev.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		ec := cm.CreateEventChannel()
		t.Cleanup(ec.Close)
		return &side{cm: cm, dev: s.Dev, pd: s.PD, cq: cq, ec: ec, ip: ipOf(s.GID.GID), fab: s.Port, net: p.Fabric}
	}
	// The server's device first: the order a newcomer's program had.
	var ra Router
	if len(routers) > 0 {
		ra = routers[0]
	}
	b = mk(p.B, nil)
	a = mk(p.A, ra)
	return a, b
}

// TestDialFromPDsDevice: with one CM holding both devices, Dial without
// Endpoint.Src connects from the device of Endpoint.PD (it used to pick the
// device holding the destination and fail: "create_qp: PD is on device
// rxe0, the ID on rxe1").
func TestDialFromPDsDevice(t *testing.T) {
	a, b := oneCM(t, fastOptions)
	l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, 7174), Endpoint{PD: b.pd, QP: rcInit(b), Param: ConnParam{RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan *Conn, 1)
	var wg sync.WaitGroup
	acceptLoop(ctx, l, got, &wg)
	defer func() { cancel(); l.Close(); wg.Wait() }()
	ca, err := a.cm.Dial(ctx, l.Addr(), Endpoint{PD: a.pd, QP: rcInit(a), Param: ConnParam{RetryCount: 7, RNRRetryCount: 7}})
	if err != nil {
		t.Fatal(err)
	}
	cb := <-got
	if ca.ID.Device() != a.dev || ca.ID.LocalAddr().Addr() != a.ip || cb.ID.RemoteAddr().Addr() != a.ip {
		t.Errorf("dialed from %v on %s (the server saw %v), want %v on %s",
			ca.ID.LocalAddr(), ca.ID.Device().Name(), cb.ID.RemoteAddr(), a.ip, a.dev.Name())
	}
	send(t, a, b, ca.QP, cb.QP, []byte("from the PD's device"))
	ca.Close()
	cb.Close()
}

// staticRouter answers RouteTo with src or err.
type staticRouter struct {
	src netip.Addr
	err error
}

func (r staticRouter) RouteTo(netip.Addr) (netip.Addr, error) { return r.src, r.err }

// TestDialSourceFromRoute: the PD's device's routes give the source, as
// rdma_resolve_addr asks the routing table; a device whose routes do not
// reach the destination fails the Dial saying so, with the route's errno.
func TestDialSourceFromRoute(t *testing.T) {
	a, b := oneCM(t, fastOptions, staticRouter{err: fmt.Errorf("no route to 192.0.2.2: %w", syscall.ENETUNREACH)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 7174), Endpoint{PD: a.pd, QP: rcInit(a)})
	if !errors.Is(err, syscall.ENETUNREACH) || !strings.Contains(err.Error(), a.dev.Name()) || !strings.Contains(err.Error(), "Endpoint.Src") {
		t.Errorf("Dial from a device without a route: %v; want ENETUNREACH naming %s and Endpoint.Src", err, a.dev.Name())
	}
	// A nil PD, and a PD whose device the CM does not serve: EINVAL.
	if _, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 7174), Endpoint{}); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "Endpoint.PD") {
		t.Errorf("Dial with no PD: %v", err)
	}
	other := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	if _, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 7174), Endpoint{PD: other.A.PD}); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "AddDevice") {
		t.Errorf("Dial with a PD of a device the CM lacks: %v", err)
	}
}

// TestCreateQPWrongDeviceSaysWhy: when the PD and the ID are on different
// devices, CreateQP's error says which device ResolveAddr chose and why,
// and which source address to give to connect from the PD's.
func TestCreateQPWrongDeviceSaysWhy(t *testing.T) {
	a, b := oneCM(t, fastOptions)
	id, err := a.cm.CreateID(a.ec, PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer id.Destroy()
	if err := id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7174), time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventAddrResolved)
	if err := id.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	a.want(t, EventRouteResolved)
	_, err = id.CreateQP(a.pd, rcInit(a))
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("CreateQP with the other device's PD: %v, want EINVAL", err)
	}
	for _, want := range []string{"PD is on device " + a.dev.Name(), "the ID on " + b.dev.Name(),
		"holds the destination " + b.ip.String(), "Endpoint.Src", a.ip.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CreateQP's error %q lacks %q", err, want)
		}
	}
}

// TestWCFormatsWithV: %v of a WC (not only of a *WC) prints its String:
// wr_id, status and opcode by their ibverbs names, and the detail.
func TestWCFormatsWithV(t *testing.T) {
	wc := verbs.WC{WRID: 7, Status: verbs.WCRetryExcErr, Opcode: verbs.WCSend, QPNum: 0x11, Detail: "no ACK from 192.0.2.2"}
	want := "wr_id 7 IBV_WC_RETRY_EXC_ERR IBV_WC_SEND byte_len 0 qp 0x11: no ACK from 192.0.2.2"
	for _, got := range []string{fmt.Sprintf("%v", wc), fmt.Sprint(wc), fmt.Sprintf("%v", &wc), wc.String()} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := fmt.Sprint([]verbs.WC{wc}); got != "["+want+"]" {
		t.Errorf("a slice of WCs prints %q", got)
	}
}

// TestDialDeadlineSaysWhereItWas: a Dial whose context ends returns an
// error that names the peer, the source and how far it got, and still
// matches context.DeadlineExceeded (or Canceled). Virtual time.
func TestDialDeadlineSaysWhereItWas(t *testing.T) {
	dial := func(t *testing.T, a *side, dst netip.AddrPort, ctx context.Context) error {
		_, err := a.cm.Dial(ctx, dst, Endpoint{PD: a.pd, QP: rcInit(a), Param: ConnParam{RetryCount: 7, RNRRetryCount: 7}})
		return err
	}
	check := func(t *testing.T, err error, target error, wants ...string) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Errorf("Dial: %v; want it to match %v", err, target)
		}
		for _, w := range wants {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Dial's error %q lacks %q", err, w)
			}
		}
	}
	t.Run("no-answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := newSides(t, "", Options{}, Options{})
			if err := a.fab.SetFaults(fabric.Faults{Loss: 1}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dst := netip.AddrPortFrom(b.ip, 7174)
			// REQs at 0, 4.3 and 8.6 s.
			check(t, dial(t, a, dst, ctx), context.DeadlineExceeded, "dial "+dst.String(),
				"from "+a.ip.String()+" ("+a.dev.Name()+")", "REQ sent 3 times, no REP yet")
		})
	})
	t.Run("not-accepted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := newSides(t, "", Options{}, Options{})
			listen(t, b, PSTCP, 7174) // and never answered
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			check(t, dial(t, a, netip.AddrPortFrom(b.ip, 7174), ctx), context.DeadlineExceeded,
				"acknowledged it (MRA) but its consumer has not accepted it yet")
		})
	})
	t.Run("canceled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := newSides(t, "", Options{}, Options{})
			if err := a.fab.SetFaults(fabric.Faults{Loss: 1}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			check(t, dial(t, a, netip.AddrPortFrom(b.ip, 7174), ctx), context.Canceled, "REQ sent once, no REP yet")
		})
	})
}

// TestDialErrnos: Dial's failures wrap the errno librdmacm's rdma_connect
// returns: ECONNREFUSED for a REJ, ETIMEDOUT when no answer ever comes.
func TestDialErrnos(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSides(t, "", Options{}, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		ep := Endpoint{PD: a.pd, QP: rcInit(a)}
		if _, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 7174), ep); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("Dial to a closed port: %v, want ECONNREFUSED", err)
		}
		if err := a.fab.SetFaults(fabric.Faults{Loss: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.cm.Dial(ctx, netip.AddrPortFrom(b.ip, 7174), ep); !errors.Is(err, syscall.ETIMEDOUT) {
			t.Errorf("Dial with every REQ lost: %v, want ETIMEDOUT", err)
		}
	})
}

// TestErrnosAsDocumented: each errno the package doc's table and the
// functions' docs promise is what the call returns.
func TestErrnosAsDocumented(t *testing.T) {
	a, b := newSides(t, "", fastOptions, fastOptions)
	is := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	_, err := a.cm.CreateID(a.ec, PortSpace(0x99))
	is("CreateID with a bad port space", err, syscall.EINVAL)
	is("AddDevice twice", a.cm.AddDevice(a.dev), syscall.EEXIST)
	is("AddDevice of a device another CM serves", New(Options{}).AddDevice(b.dev), syscall.EEXIST)
	other := verbstest.NewPair(t, verbstest.Options{NoConnect: true})
	is("RemoveDevice of a device not added", a.cm.RemoveDevice(other.A.Dev), syscall.ENODEV)

	id, _ := a.cm.CreateID(a.ec, PSTCP)
	defer id.Destroy()
	is("BindAddr on an address no device has", id.BindAddr(netip.MustParseAddrPort("203.0.113.9:1")), syscall.EADDRNOTAVAIL)
	is("ResolveRoute before ResolveAddr", id.ResolveRoute(time.Second), syscall.EINVAL)
	_, err = id.CreateQP(a.pd, rcInit(a))
	is("CreateQP with no device", err, syscall.EINVAL)
	is("Connect before ROUTE_RESOLVED", id.Connect(ConnParam{}), syscall.EINVAL)
	is("Accept with nothing pending", id.Accept(ConnParam{}), syscall.EINVAL)
	is("Reject with nothing pending", id.Reject(nil), syscall.EINVAL)
	is("Establish with nothing pending", id.Establish(), syscall.EINVAL)
	is("Disconnect unconnected", id.Disconnect(), syscall.EINVAL)
	_, _, err = id.InitQPAttr(verbs.QPSRTR)
	is("InitQPAttr with no device", err, syscall.EINVAL)
	is("ResolveAddr to the unspecified address", id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(netip.IPv4Unspecified(), 1), time.Second), syscall.EINVAL)
	if err := id.BindAddr(netip.AddrPortFrom(a.ip, 9)); err != nil {
		t.Fatal(err)
	}
	is("BindAddr twice", id.BindAddr(netip.AddrPortFrom(a.ip, 9)), syscall.EINVAL)

	l1 := listen(t, b, PSTCP, 7174)
	defer l1.Destroy()
	id2, _ := b.cm.CreateID(b.ec, PSTCP)
	defer id2.Destroy()
	is("BindAddr on a port in use", id2.BindAddr(netip.AddrPortFrom(b.ip, 7174)), syscall.EADDRINUSE)
	_, err = b.cm.Listen(netip.AddrPortFrom(b.ip, 7174), Endpoint{PD: b.pd})
	is("Listen on a port with a listener", err, syscall.EADDRINUSE)
	_, err = b.cm.Listen(netip.MustParseAddrPort("203.0.113.9:1"), Endpoint{PD: b.pd})
	is("Listen on an address no device has", err, syscall.EADDRNOTAVAIL)

	ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
	defer ca.Destroy()
	_, err = ca.CreateQP(a.pd, rcInit(a))
	is("CreateQP twice", err, syscall.EEXIST)
	is("SetTOS on a destroyed ID", func() error { x, _ := a.cm.CreateID(a.ec, PSTCP); x.Destroy(); return x.SetTOS(1) }(), syscall.EINVAL)

	l, err := b.cm.Listen(netip.AddrPortFrom(b.ip, 0), Endpoint{PD: b.pd})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	_, err = l.Accept(context.Background())
	is("Accept after Close", err, net.ErrClosed)
	ec := a.cm.CreateEventChannel()
	ec.Close()
	_, err = ec.Get(context.Background())
	is("Get after Close", err, net.ErrClosed)

	cm := New(Options{})
	cm.Close()
	_, err = cm.CreateID(cm.CreateEventChannel(), PSTCP)
	is("CreateID after Close", err, syscall.ESHUTDOWN)
	is("AddDevice after Close", cm.AddDevice(other.A.Dev), syscall.ESHUTDOWN)
}

// TestErrorsDocumented: every exported function and method of the package
// that returns an error says in its doc what the error wraps (an errno by
// name, net.ErrClosed or ctx.Err(), or that it returns nil, or an Errors:
// paragraph), and the
// package doc has the errno table.
func TestErrorsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["rdmacm"], "github.com/goroce/goroce/rdmacm", 0)
	says := regexp.MustCompile(`\bE[A-Z]{3,}\b|net\.ErrClosed|ctx\.Err\(\)|returns nil|Errors:`)
	returnsError := func(f *ast.FuncDecl) bool {
		if f.Type.Results == nil {
			return false
		}
		for _, r := range f.Type.Results.List {
			if id, ok := r.Type.(*ast.Ident); ok && id.Name == "error" {
				return true
			}
		}
		return false
	}
	check := func(name string, f *doc.Func) {
		if returnsError(f.Decl) && !says.MatchString(f.Doc) {
			t.Errorf("%s returns an error but its doc does not say what it wraps", name)
		}
	}
	for _, f := range p.Funcs {
		check(f.Name, f)
	}
	for _, typ := range p.Types {
		for _, f := range typ.Funcs {
			check(f.Name, f)
		}
		for _, m := range typ.Methods {
			check(typ.Name+"."+m.Name, m)
		}
	}
	for _, w := range []string{"# Errors", "syscall.Errno", "EINVAL", "EADDRINUSE", "ECONNREFUSED", "ETIMEDOUT"} {
		if !strings.Contains(p.Doc, w) {
			t.Errorf("package doc lacks %q", w)
		}
	}
}
