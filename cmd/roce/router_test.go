package main

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// routedHosts makes nettest.Routed's A — R — B with a goroce device on
// each end (rxeA on rt-a0, rxeB on rt-b0; versions as given, "" for
// both), registered in one rundir, and returns them with the rundir and
// the roce executable.
func routedHosts(t *testing.T, versA, versB string) (a *nettest.Host, r *nettest.Router, b *nettest.Host, dir, roceBin string) {
	t.Helper()
	testenv.Root(t)
	a, r, b = nettest.Routed(t, nettest.Options{})
	dir, roceBin = t.TempDir(), roceExecutable(t)
	for _, d := range []struct {
		h    *nettest.Host
		name string
		vers string
	}{{a, "rxeA", versA}, {b, "rxeB", versB}} {
		args := []string{"link", "add", d.name, "type", "rxe", "netdev", d.h.Ifname}
		if d.vers != "" {
			args = append(args, "roce-versions", d.vers)
		}
		if code, _, stderr := roceIn(t, d.h, dir, args...); code != 0 {
			t.Fatalf("roce %v: exit %d: %s", args, code, stderr)
		}
	}
	return a, r, b, dir, roceBin
}

// gidIndexOf returns the index of dev's RoCE v2 GID for addr.
func gidIndexOf(t *testing.T, dir, dev string, addr netip.Addr) int {
	t.Helper()
	reg := host.NewRegistry(dir)
	def, err := reg.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	gids, _, err := reg.GIDTableOf(def)
	if err != nil {
		t.Fatal(err)
	}
	want := netip.AddrFrom16(addr.As16())
	for i, e := range gids {
		if e.GID == want && e.Type == verbs.GIDTypeRoCEv2 {
			return i
		}
	}
	t.Fatalf("%s has no RoCE v2 GID for %v: %v", dev, addr, gids)
	return -1
}

// runPair runs a server in B and, once it takes connections, a client in
// A; the client is retried while the server is not ready (retryOn names
// the client's words for that). Both must exit 0.
func runPair(t *testing.T, a, b *nettest.Host, dir, roceBin string, sub string, sargs, cargs []string, retryOn ...string) (server, client *proc) {
	t.Helper()
	srv := startRoce(t, b, dir, roceBin, sub, sargs...)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		client = startRoce(t, a, dir, roceBin, sub, cargs...)
		code := client.exitWithin(t, time.Until(deadline))
		retry := false
		for _, w := range retryOn {
			retry = retry || strings.Contains(client.stderr.String(), w)
		}
		if code == 0 || !retry || time.Now().After(deadline) {
			if code != 0 {
				t.Fatalf("client roce %s %v: exit %d\nstdout: %s\nstderr: %s", sub, cargs, code, client.stdout.String(), client.stderr.String())
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := srv.exitWithin(t, time.Minute); code != 0 {
		t.Fatalf("server roce %s %v: exit %d\nstdout: %s\nstderr: %s", sub, sargs, code, srv.stdout.String(), srv.stderr.String())
	}
	return srv, client
}

// TestRouted is the router issue's acceptance: two goroce devices on two
// subnets joined by a Linux router (nettest.Routed), running the built
// roce binary as users do, IPv4 and IPv6: RC pingpong from 64 B to 64 KiB,
// UC and UD pingpong, roce ping (RDMA CM), roce perf write, read and send over
// the TCP exchange and over RDMA CM (-R). Everything crosses the router: a
// capture on the router's interface toward A holds A's packets with TTL
// (hop limit) 64 and B's, forwarded, with 63, and `roce decode --verify`
// and tshark take every one of them.
func TestRouted(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		fam := "IPv4"
		if v6 {
			fam = "IPv6"
		}
		t.Run(fam, func(t *testing.T) { testRouted(t, v6) })
	}
}

func testRouted(t *testing.T, v6 bool) {
	a, r, b, dir, roceBin := routedHosts(t, "", "")
	addrOf := func(h *nettest.Host) netip.Addr {
		if v6 {
			return h.IPv6
		}
		return h.IPv4
	}
	ga, gb := gidIndexOf(t, dir, "rxeA", addrOf(a)), gidIndexOf(t, dir, "rxeB", addrOf(b))
	bAddr := addrOf(b).String()
	pcapFile := filepath.Join(t.TempDir(), "router.pcap")
	capt := nettest.StartCapture(t, r.NS, r.A.Ifname, pcapFile)
	port := 19000
	next := func() string { port++; return strconv.Itoa(port) }
	ppRetry := []string{"Couldn't connect"}
	for _, c := range []struct{ name, size, iters string }{{"rc-64", "64", "200"}, {"rc-4096", "4096", "100"}, {"rc-65536", "65536", "20"}} {
		t.Run("pingpong/"+c.name, func(t *testing.T) {
			p := next()
			_, cli := runPair(t, a, b, dir, roceBin, "pingpong",
				[]string{"-d", "rxeB", "-g", strconv.Itoa(gb), "-s", c.size, "-n", c.iters, "-p", p, "-c"},
				[]string{"-d", "rxeA", "-g", strconv.Itoa(ga), "-s", c.size, "-n", c.iters, "-p", p, "-c", bAddr}, ppRetry...)
			if !strings.Contains(cli.stdout.String(), c.iters+" iters in") {
				t.Errorf("client output:\n%s", cli.stdout.String())
			}
		})
	}
	t.Run("pingpong/uc", func(t *testing.T) {
		p := next()
		_, cli := runPair(t, a, b, dir, roceBin, "pingpong",
			[]string{"--uc", "-d", "rxeB", "-g", strconv.Itoa(gb), "-s", "4096", "-n", "100", "-p", p},
			[]string{"--uc", "-d", "rxeA", "-g", strconv.Itoa(ga), "-s", "4096", "-n", "100", "-p", p, bAddr}, ppRetry...)
		if !strings.Contains(cli.stdout.String(), "100 iters in") {
			t.Errorf("client output:\n%s", cli.stdout.String())
		}
	})
	t.Run("pingpong/ud", func(t *testing.T) {
		p := next()
		_, cli := runPair(t, a, b, dir, roceBin, "pingpong",
			[]string{"--ud", "-d", "rxeB", "-g", strconv.Itoa(gb), "-s", "1024", "-n", "100", "-p", p},
			[]string{"--ud", "-d", "rxeA", "-g", strconv.Itoa(ga), "-s", "1024", "-n", "100", "-p", p, bAddr}, ppRetry...)
		if !strings.Contains(cli.stdout.String(), "100 iters in") {
			t.Errorf("client output:\n%s", cli.stdout.String())
		}
	})
	t.Run("ping", func(t *testing.T) {
		p := next()
		runPair(t, a, b, dir, roceBin, "ping",
			[]string{"-s", "-a", bAddr, "-p", p, "-C", "5", "-V"},
			[]string{"-c", "-a", bAddr, "-p", p, "-C", "5", "-V"}, "REJECTED, error 8")
	})
	perfRetry := []string{"Couldn't connect", "Unable to perform rdma_client function"}
	for _, op := range []string{"write", "read", "send"} {
		for _, cm := range []bool{false, true} {
			name := op
			extra := []string{"-s", "4096", "-n", "50"}
			if cm {
				name += "/-R"
				extra = append(extra, "-R")
			}
			if v6 {
				extra = append(extra, "--ipv6")
			}
			t.Run("perf/"+name, func(t *testing.T) {
				p := next()
				sargs := append([]string{op, "-d", "rxeB", "-p", p}, extra...)
				cargs := append([]string{op, "-d", "rxeA", "-p", p}, extra...)
				if !cm {
					sargs = append(sargs, "-x", strconv.Itoa(gb))
					cargs = append(cargs, "-x", strconv.Itoa(ga))
				}
				_, cli := runPair(t, a, b, dir, roceBin, "perf", sargs, append(cargs, bAddr), perfRetry...)
				checkPerfTable(t, "client", cli.stdout.String(), false, false)
			})
		}
	}
	frames, err := capt.Stop()
	if err != nil {
		t.Fatalf("capture at R: %v", err)
	}
	verifyRouterCapture(t, pcapFile, frames, addrOf(a), addrOf(b))
}

// verifyRouterCapture checks a capture taken on R's interface toward A:
// A's packets with TTL 64 (not yet forwarded) and B's with 63 (forwarded
// once).
func verifyRouterCapture(t *testing.T, file string, frames int, aAddr, bAddr netip.Addr) {
	t.Helper()
	verifyCapture(t, file, frames, map[netip.Addr]uint8{aAddr: 64, bAddr: 63})
}

// verifyCapture checks a capture taken at a router: RoCE v2 from each
// source of ttl, each with that TTL (hop limit), every ICRC right in
// goroce's decoder, in `roce decode --verify` and, packet for packet, in
// tshark.
func verifyCapture(t *testing.T, file string, frames int, ttl map[netip.Addr]uint8) {
	t.Helper()
	from := map[netip.Addr]int{}
	n := 0
	err := pcap.ReadFile(file, func(f pcap.Frame) error {
		var p wire.Packet
		if p.ParseFrame(f.Data, wire.RoCEv2Port) != nil {
			return nil
		}
		n++
		if err := p.VerifyICRC(); err != nil {
			t.Errorf("frame %d: %v", f.Number, err)
		}
		var src netip.Addr
		var hops uint8
		if ip := p.IPv4(); ip != nil {
			src, hops = ip.Src(), ip.TTL()
		} else if ip := p.IPv6(); ip != nil {
			src, hops = ip.Src(), ip.HopLimit()
		}
		src = src.Unmap()
		want, ok := ttl[src]
		switch {
		case !ok:
			t.Errorf("frame %d from %v", f.Number, src)
		case hops != want:
			t.Errorf("frame %d from %v: TTL %d, want %d", f.Number, src, hops, want)
		}
		from[src]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("capture: %d frames, %d RoCE v2, by source %v", frames, n, from)
	seen := map[uint8]bool{}
	for src, c := range from {
		if c > 0 {
			seen[ttl[src]] = true
		}
	}
	for _, h := range ttl {
		if !seen[h] {
			t.Fatalf("the capture holds no RoCE packet with TTL %d: %v", h, from)
		}
	}
	code, _, stderr := roce(t, "decode", "--verify", file)
	m := statsLine.FindStringSubmatch(strings.TrimSpace(stderr))
	if code != 0 || m == nil || m[2] != strconv.Itoa(n) || m[3] != m[2] {
		t.Errorf("roce decode --verify: exit %d, %.2000q; want %d RoCE packets, every ICRC ok", code, stderr, n)
	}
	tshark := testenv.Tshark(t)
	// Not ICMP errors quoting a RoCE packet (a port unreachable for a
	// late ACK after a process ended): tshark dissects the quote, goroce
	// does not count it.
	out, err := exec.Command(tshark, "-r", file, "--disable-protocol", "rpcordma", "-Y", "infiniband && !icmp && !icmpv6", "-T", "fields", "-e", "frame.protocols", "-e", "_ws.malformed").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != n {
		t.Errorf("tshark sees %d InfiniBand packets, goroce %d", len(lines), n)
	}
	for i, l := range lines {
		f := strings.Split(l, "\t")
		if !strings.Contains(f[0], "udp:infiniband") || len(f) > 1 && f[1] != "" {
			t.Errorf("tshark, RoCE packet %d: %q", i+1, l)
			break
		}
	}
}
