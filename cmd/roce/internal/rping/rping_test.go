package rping

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs/verbstest"
)

// pair returns two CMs, one per device of a verbstest fabric pair, and
// each device's address.
func pair(t *testing.T, net string) (a, b *rdmacm.CM, ipA, ipB netip.Addr) {
	t.Helper()
	p := verbstest.NewPair(t, verbstest.Options{Net: net, NoConnect: true})
	mk := func(s verbstest.Side) (*rdmacm.CM, netip.Addr) {
		cm := rdmacm.New(rdmacm.Options{Timewait: 20 * time.Millisecond})
		if err := cm.AddDevice(s.Dev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		ip := s.GID.GID
		if ip.Is4In6() {
			ip = ip.Unmap()
		}
		return cm, ip
	}
	a, ipA = mk(p.A)
	b, ipB = mk(p.B)
	return
}

// waitListening waits until cm has an ID listening on addr (the server
// Run in srvDone's goroutine is ready for a client), failing t if that
// server ends first.
func waitListening(t *testing.T, cm *rdmacm.CM, addr netip.AddrPort, srvDone chan error) {
	t.Helper()
	for {
		for _, id := range cm.IDs(nil) {
			if id.State == "LISTEN" && id.Src == addr {
				return
			}
		}
		select {
		case err := <-srvDone:
			t.Fatalf("the server ended before it listened on %v: %v", addr, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestPing runs the server on one device and the client on the other,
// with -v and -V, on every network, and checks both print what rping
// prints for every ping.
func TestPing(t *testing.T) {
	for _, net := range verbstest.Networks {
		t.Run(net, func(t *testing.T) {
			for _, size := range []int{MinSize, DefaultSize, 4096, MaxSize} {
				a, b, ipA, _ := pair(t, net)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var sout, serr, cout, cerr bytes.Buffer
				srvDone := make(chan error, 1)
				go func() {
					srvDone <- Run(ctx, a, Config{Server: true, Addr: netip.AddrPortFrom(ipA, 0), Size: size, Verbose: true, Out: &sout, Err: &serr})
				}()
				// The client may try before the server listens: rping
				// users retry; the test waits for the listener instead.
				waitListening(t, a, netip.AddrPortFrom(ipA, DefaultPort), srvDone)
				err := Run(ctx, b, Config{Addr: netip.AddrPortFrom(ipA, 0), Count: 5, Size: size, Verbose: true, Validate: true, Out: &cout, Err: &cerr})
				if err != nil {
					t.Fatalf("size %d: client: %v\n%s", size, err, cerr.String())
				}
				if err := <-srvDone; err != nil {
					t.Fatalf("size %d: server: %v\n%s", size, err, serr.String())
				}
				want, wantSrv := expected(5, size)
				if cout.String() != want {
					t.Errorf("size %d: client printed\n%s\nwant\n%s", size, cout.String(), want)
				}
				if sout.String() != wantSrv {
					t.Errorf("size %d: server printed\n%s\nwant\n%s", size, sout.String(), wantSrv)
				}
				if !strings.Contains(serr.String(), "server DISCONNECT EVENT...") {
					t.Errorf("size %d: server stderr %q", size, serr.String())
				}
			}
		})
	}
}

// expected is what rping -v prints for count pings of size bytes, computed
// from rping's pattern independently of the client's code.
func expected(count, size int) (client, server string) {
	var c, s strings.Builder
	start := 'A'
	for ping := 0; ping < count; ping++ {
		line := []byte(fmt.Sprintf("rdma-ping-%d: ", ping))
		ch := start
		for len(line) < size-1 {
			line = append(line, byte(ch))
			if ch++; ch > 'z' {
				ch = 'A'
			}
		}
		if start++; start > 'z' {
			start = 'A'
		}
		fmt.Fprintf(&c, "ping data: %s\n", line)
		fmt.Fprintf(&s, "server ping data: %s\n", line)
	}
	return c.String(), s.String()
}

// TestBadOptions: rping's checks, with the valid values named.
func TestBadOptions(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Size: 25}, "Invalid size 25 (valid range is 26 to 65535)"},
		{Config{Size: 65536}, "Invalid size 65536 (valid range is 26 to 65535)"},
		{Config{Count: -1}, "Invalid count -1"},
	} {
		err := Run(context.Background(), rdmacm.New(rdmacm.Options{}), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// TestNoServer: a client whose server is not listening gets REJECTED
// (invalid service ID), as rping does from a host that answers.
func TestNoServer(t *testing.T) {
	_, b, ipA, _ := pair(t, verbstest.NetV2IPv4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, b, Config{Addr: netip.AddrPortFrom(ipA, 0), Count: 1})
	if err == nil || !strings.Contains(err.Error(), "cma event RDMA_CM_EVENT_REJECTED, error 8") {
		t.Fatalf("%v", err)
	}
}

// TestSizeMismatch: a client with a larger -S than the server's makes the
// server's RDMA READ fail on its own buffer, as Linux rping's does; the
// server says why and the client says the pings did not happen (rping
// itself exits 0 there).
func TestSizeMismatch(t *testing.T) {
	a, b, ipA, _ := pair(t, verbstest.NetV2IPv4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvDone := make(chan error, 1)
	go func() { srvDone <- Run(ctx, a, Config{Server: true, Addr: netip.AddrPortFrom(ipA, 0)}) }()
	waitListening(t, a, netip.AddrPortFrom(ipA, DefaultPort), srvDone)
	err := Run(ctx, b, Config{Addr: netip.AddrPortFrom(ipA, 0), Count: 2, Size: 4000})
	if err == nil || !strings.Contains(err.Error(), "the server disconnected after 0 of 2 pings") {
		t.Errorf("client: %v", err)
	}
	if err := <-srvDone; err == nil || !strings.Contains(err.Error(), "IBV_WC_LOC_PROT_ERR") ||
		!strings.Contains(err.Error(), "the client's -S 4000 is larger than this server's 64") {
		t.Errorf("server: %v", err)
	}
}
