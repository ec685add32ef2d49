package rsocket

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Networks the end-to-end tests run over: the in-memory fabric (RoCE v2
// over IPv4 and IPv6) and RoCE v2 over UDP sockets on loopback.
const (
	netFabric4 = "fabric-v2-IPv4"
	netFabric6 = "fabric-v2-IPv6"
	netUDP     = "udp-loopback"
)

var testNets = []string{netFabric4, netFabric6, netUDP}

// side is one host of a test: a device and a CM on it.
type side struct {
	dev  *verbs.Device
	cm   *rdmacm.CM
	ip   netip.Addr
	port *fabric.Port // its port on the fabric networks; nil on the UDP one
}

// fastCM keeps CM retries short on a loaded test machine while still
// tolerating it.
var fastCM = rdmacm.Options{ResponseTimeout: 200 * time.Millisecond, MaxRetries: 10, Timewait: 20 * time.Millisecond}

var udpNet atomic.Uint32

// newSides returns two hosts on network net, each with its own CM,
// closed when t ends.
func newSides(t testing.TB, net string) (a, b *side) {
	t.Helper()
	var da, db *verbs.Device
	var pa, pb *fabric.Port
	switch net {
	case netFabric4, netFabric6:
		vn := verbstest.NetV2IPv4
		if net == netFabric6 {
			vn = verbstest.NetV2IPv6
		}
		p := verbstest.NewPair(t, verbstest.Options{Net: vn, NoConnect: true})
		da, db, pa, pb = p.A.Dev, p.B.Dev, p.A.Port, p.B.Port
	case netUDP:
		// Each test its own pair of loopback addresses, so tests never
		// share a UDP port.
		n := udpNet.Add(1)
		open := func(name string, host byte) *verbs.Device {
			ip := netip.AddrFrom4([4]byte{127, 1 + byte(n/250), byte(n % 250), host})
			// Not port 4791: a device of the host's may hold it.
			l, err := udp.New(udp.Config{Bind: ip, Addrs: []netip.Addr{ip}, Port: 47917})
			if err != nil {
				t.Fatal(err)
			}
			dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: l,
				GIDs: []verbs.GIDEntry{{GID: netip.AddrFrom16(ip.As16()), Type: verbs.GIDTypeRoCEv2}}})
			if err != nil {
				l.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })
			return dev
		}
		da, db = open("rsa", 1), open("rsb", 2)
	default:
		t.Fatalf("unknown network %q", net)
	}
	mk := func(d *verbs.Device, port *fabric.Port) *side {
		cm := rdmacm.New(fastCM)
		if err := cm.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() }) // before the devices': LIFO
		s := &side{dev: d, cm: cm, port: port}
		for _, g := range d.GIDs() {
			if g.GID.IsValid() && g.Type == verbs.GIDTypeRoCEv2 && (net != netFabric6 || !g.GID.Is4In6()) {
				s.ip = g.GID.Unmap()
			}
		}
		if !s.ip.IsValid() {
			t.Fatalf("device %s has no RoCE v2 GID: %v", d.Name(), d.GIDs())
		}
		return s
	}
	return mk(da, pa), mk(db, pb)
}

// listen makes b listen on port with options o, closed when t ends.
func (b *side) listen(t testing.TB, port uint16, o Options) *Listener {
	t.Helper()
	lc := ListenConfig{CM: b.cm, Options: o, Logf: t.Logf}
	l, err := lc.Listen(context.Background(), "rsocket", netip.AddrPortFrom(b.ip, port).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dialAccept dials l from a and returns both ends, closed when t ends.
func dialAccept(t testing.TB, a *side, l *Listener, o Options) (ca, cb *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accepted := make(chan *Conn, 1)
	errs := make(chan error, 1)
	go func() {
		c, err := l.AcceptContext(ctx)
		if err != nil {
			errs <- err
			return
		}
		accepted <- c
	}()
	d := Dialer{CM: a.cm, Options: o}
	ca, err := d.Dial(ctx, "rsocket", l.AddrPort().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	select {
	case cb = <-accepted:
	case err := <-errs:
		t.Fatal(err)
	}
	t.Cleanup(func() { cb.Close() })
	return ca, cb
}

// pair returns a connected pair of Conns on network net.
func pair(t testing.TB, net string, o Options) (ca, cb *Conn) {
	t.Helper()
	a, b := newSides(t, net)
	return dialAccept(t, a, b.listen(t, 7471, o), o)
}

func (s *side) String() string { return fmt.Sprintf("%s %v", s.dev.Name(), s.ip) }
