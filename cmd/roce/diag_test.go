package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/internal/nettest"
)

// addRoute adds dst via gw on h's netdev (a gateway nobody answers ARP for
// when gw is not on the segment's hosts).
func addRoute(t *testing.T, h *nettest.Host, dst, gw string) {
	t.Helper()
	err := h.Do(func() error {
		_, d, err := net.ParseCIDR(dst)
		if err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: h.Ifindex, Dst: d, Gw: net.ParseIP(gw)})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoutedDiagnostics: when nothing can reach the peer, the error says
// why in terms of the route: rdma_cm's address resolution gives up after
// rping's 2 s with ADDR_ERROR -110 naming the route and the gateway that
// never answered ARP (Linux: RDMA_CM_EVENT_ADDR_ERROR, -ETIMEDOUT); roce
// perf -R likewise for an on-link address nobody has; a pingpong QP whose
// packets could not be sent says so in its retry-exceeded completion
// instead of "check the remote QPN"; a RoCE v1 peer behind the router is
// refused in words; and RDMA CM on a port whose default mode is RoCE v1
// still reaches a routed peer over RoCE v2, as cma_route_gid_type does.
// On a default device (the raw link, which resolves next hops itself) and
// on a v2-only one (link/udp: the kernel resolves, the resolver reads the
// kernel's neighbour table).
func TestRoutedDiagnostics(t *testing.T) {
	for _, vers := range []string{"", "v2"} {
		name := "both"
		if vers != "" {
			name = vers
		}
		t.Run(name, func(t *testing.T) { testRoutedDiagnostics(t, vers) })
	}
}

func testRoutedDiagnostics(t *testing.T, vers string) {
	a, _, b, dir, roceBin := routedHosts(t, vers, "")
	// A reaches 198.18.9.0/24 and B's IPv4 address through a gateway that
	// does not exist; B's IPv6 address the ordinary way (for the pingpong's
	// TCP exchange).
	addRoute(t, a, "198.18.9.0/24", "198.18.1.200")
	addRoute(t, a, "198.18.2.1/32", "198.18.1.200")

	t.Run("ping/silent-gateway", func(t *testing.T) {
		start := time.Now()
		p := startRoce(t, a, dir, roceBin, "ping", "-c", "-a", "198.18.9.1", "-C", "1")
		code := p.exitWithin(t, time.Minute)
		took := time.Since(start)
		stderr := p.stderr.String()
		for _, w := range []string{"RDMA_CM_EVENT_ADDR_ERROR, error -110",
			"198.18.9.1 is reached via 198.18.1.200 on rt-a0: no ARP reply from 198.18.1.200"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr lacks %q:\n%s", w, stderr)
			}
		}
		if code == 0 {
			t.Errorf("exit 0")
		}
		t.Logf("ended after %v: %s", took, stderr)
	})
	t.Run("perf-R/no-neighbour", func(t *testing.T) {
		p := startRoce(t, a, dir, roceBin, "perf", "write", "-R", "-d", "rxeA", "-n", "5", "198.18.1.77")
		code := p.exitWithin(t, time.Minute)
		if w := "198.18.1.77 is on-link on rt-a0: no ARP reply from 198.18.1.77"; code == 0 || !strings.Contains(p.stderr.String(), w) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, w, p.stderr.String())
		}
	})
	t.Run("pingpong/silent-gateway", func(t *testing.T) {
		ga, gb := gidIndexOf(t, dir, "rxeA", a.IPv4), gidIndexOf(t, dir, "rxeB", b.IPv4)
		srv := startRoce(t, b, dir, roceBin, "pingpong", "-d", "rxeB", "-g", strconv.Itoa(gb), "-p", "19101", "-n", "5")
		var cli *proc
		for try := 0; ; try++ {
			// The exchange goes to B's IPv6 address, which A reaches; the
			// QP's packets to B's IPv4 GID go to the dead gateway.
			cli = startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxeA", "-g", strconv.Itoa(ga), "-p", "19101", "-n", "5", b.IPv6.String())
			code := cli.exitWithin(t, time.Minute)
			if code == 0 {
				t.Fatalf("the client succeeded through a dead gateway:\n%s", cli.stdout.String())
			}
			if !strings.Contains(cli.stderr.String(), "Couldn't connect") || try > 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		stderr := cli.stderr.String()
		for _, w := range []string{"transport retry counter exceeded", "no response ever arrived from QP",
			"198.18.2.1 is reached via 198.18.1.200 on rt-a0: no ARP reply from 198.18.1.200"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("client's stderr lacks %q:\n%s", w, stderr)
			}
		}
		if strings.Contains(stderr, "Check the remote QPN") {
			t.Errorf("the client blames the QPN:\n%s", stderr)
		}
		t.Logf("client: %s", stderr)
		srv.cmd.Process.Kill()
	})
}

// TestRoutedV1 covers RoCE v1 and the router: a pingpong over RoCE v1 GIDs
// (the TCP exchange crosses the router, the v1 frames cannot) fails saying
// RoCE v1 is one Ethernet segment; with default_roce_mode RoCE v1 on both
// ports, roce ping still connects across the router, over RoCE v2, as
// Linux's RDMA CM picks RoCE v2 for a route through a gateway; a port that
// has only RoCE v1 is refused at route resolution, in words.
func TestRoutedV1(t *testing.T) {
	a, _, b, dir, roceBin := routedHosts(t, "", "")
	idx := func(dev string, h *nettest.Host, v2 bool) string {
		i := gidIndexOf(t, dir, dev, h.IPv4)
		if !v2 {
			i-- // the default layout puts each address's v1 GID just before its v2 GID
		}
		return strconv.Itoa(i)
	}
	t.Run("pingpong", func(t *testing.T) {
		srv := startRoce(t, b, dir, roceBin, "pingpong", "-d", "rxeB", "-g", idx("rxeB", b, false), "-p", "19201", "-n", "5")
		defer srv.cmd.Process.Kill()
		var cli *proc
		for try := 0; ; try++ {
			cli = startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxeA", "-g", idx("rxeA", a, false), "-p", "19201", "-n", "5", b.IPv4.String())
			if code := cli.exitWithin(t, time.Minute); code == 0 {
				t.Fatal("RoCE v1 crossed a router")
			}
			if !strings.Contains(cli.stderr.String(), "Couldn't connect") || try > 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if w := "198.18.2.1 is reached via 198.18.1.254 on rt-a0, but RoCE v1 (Ethertype 0x8915) stays on one Ethernet segment"; !strings.Contains(cli.stderr.String(), w) {
			t.Errorf("client's stderr lacks %q:\n%s", w, cli.stderr.String())
		}
		t.Logf("client: %s", cli.stderr.String())
	})
	t.Run("ping/default-mode-v1", func(t *testing.T) {
		for _, c := range []struct {
			h   *nettest.Host
			dev string
		}{{a, "rxeA"}, {b, "rxeB"}} {
			if code, _, stderr := roceIn(t, c.h, dir, "mode", "-d", c.dev, "-p", "1", "-m", "1"); code != 0 {
				t.Fatalf("roce mode -d %s -m 1: exit %d: %s", c.dev, code, stderr)
			}
		}
		runPair(t, a, b, dir, roceBin, "ping",
			[]string{"-s", "-a", b.IPv4.String(), "-p", "19202", "-C", "3", "-V"},
			[]string{"-c", "-a", b.IPv4.String(), "-p", "19202", "-C", "3", "-V"}, "REJECTED, error 8")
	})
}

// TestRoutedV1OnlyPort: RDMA CM on a port that speaks only RoCE v1 fails
// route resolution for a peer behind a router, saying why.
func TestRoutedV1OnlyPort(t *testing.T) {
	a, _, b, dir, roceBin := routedHosts(t, "v1", "")
	p := startRoce(t, a, dir, roceBin, "ping", "-c", "-a", b.IPv4.String(), "-C", "1")
	code := p.exitWithin(t, time.Minute)
	stderr := p.stderr.String()
	for _, w := range []string{"RDMA_CM_EVENT_ROUTE_ERROR", "RoCE v1 (Ethertype 0x8915) stays on one Ethernet segment"} {
		if code == 0 || !strings.Contains(stderr, w) {
			t.Errorf("exit %d, stderr lacks %q:\n%s", code, w, stderr)
		}
	}
	t.Logf("client: %s", stderr)
}

// TestLongWaitsSay is issue 13's seventh item: a wait of over two seconds
// says on stderr what it waits for — roce ping -c for a peer whose device
// nobody runs (its REQ is resent for a minute), a pingpong client whose
// server never answers the exchange, a pingpong server with no client — as
// the version-mismatch diagnosis already did.
func TestLongWaitsSay(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "")
	t.Run("ping", func(t *testing.T) {
		p := startRoce(t, a, dir, roceBin, "ping", "-c", "-a", b.IPv4.String(), "-C", "1")
		out := p.stderr.waitWithin(t, "waiting for 198.18.0.2:7174 to answer the connection request (REQ)", 30*time.Second)
		if !strings.Contains(out, "is a server listening at 198.18.0.2:7174") {
			t.Errorf("the notice does not say what may be wrong:\n%s", out)
		}
		t.Logf("client: %s", out)
		p.cmd.Process.Kill()
	})
	t.Run("pingpong-client", func(t *testing.T) {
		// A TCP server that takes the connection and never answers.
		var ln net.Listener
		if err := b.Do(func() (err error) {
			ln, err = net.Listen("tcp", b.IPv4.String()+":19301")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				defer c.Close()
				time.Sleep(time.Minute)
			}
		}()
		p := startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxeA", "-g", "3", "-p", "19301", b.IPv4.String())
		p.stderr.waitWithin(t, "roce: waiting for the server at 198.18.0.2, TCP port 19301, to exchange QP numbers", 30*time.Second)
		p.cmd.Process.Kill()
	})
	t.Run("pingpong-server", func(t *testing.T) {
		p := startRoce(t, b, dir, roceBin, "pingpong", "-d", "rxeB", "-g", "3", "-p", "19302")
		p.stderr.waitWithin(t, "roce: waiting for a client to connect to TCP port 19302", 30*time.Second)
		p.cmd.Process.Kill()
	})
}
