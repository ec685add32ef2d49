package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
)

// TestV2OnlyAgainstBoth is issue 13's first case as the user hit it: a
// device made with roce-versions v2 (link/udp, which sends multi-packet
// messages as UDP GSO superpackets) and one with the default versions
// (link/afpacket) on two namespaces joined by a veth pair, roce pingpong
// with its defaults (4096-byte messages at path MTU 1024, so four packets
// each), the v2-only device as client and as server: every run ends, as
// before it ended in "transport retry counter exceeded" with the
// superpackets dropped as bad ICRCs.
func TestV2OnlyAgainstBoth(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "v2", "")
	ga, gb := gidIndexOf(t, dir, "rxeA", a.IPv4), gidIndexOf(t, dir, "rxeB", b.IPv4)
	for i, c := range []struct {
		name       string
		srv, cli   *nettest.Host
		sdev, cdev string
		sgid, cgid int
		serverAddr string
	}{
		{"v2-only client", b, a, "rxeB", "rxeA", gb, ga, b.IPv4.String()},
		{"v2-only server", a, b, "rxeA", "rxeB", ga, gb, a.IPv4.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := strconv.Itoa(19400 + i)
			_, cli := runPair(t, c.cli, c.srv, dir, roceBin, "pingpong",
				[]string{"-d", c.sdev, "-g", strconv.Itoa(c.sgid), "-p", p, "-n", "200"},
				[]string{"-d", c.cdev, "-g", strconv.Itoa(c.cgid), "-p", p, "-n", "200", c.serverAddr}, "Couldn't connect")
			if !strings.Contains(cli.stdout.String(), "1638400 bytes in") {
				t.Errorf("client output:\n%s", cli.stdout.String())
			}
		})
	}
}

// TestRoutedGSO: the same pair of devices across the router: the v2-only
// side's GSO superpackets cross the router whole (a Linux router forwards
// a GSO skb between veths as one), the default device splits them, and a
// capture at R, with the superpackets written as the packets a wire
// carries, verifies.
func TestRoutedGSO(t *testing.T) {
	a, r, b, dir, roceBin := routedHosts(t, "v2", "")
	ga, gb := gidIndexOf(t, dir, "rxeA", a.IPv4), gidIndexOf(t, dir, "rxeB", b.IPv4)
	pcapFile := t.TempDir() + "/router.pcap"
	capt := nettest.StartCapture(t, r.NS, r.A.Ifname, pcapFile)
	for i, size := range []string{"4096", "65536"} {
		p := strconv.Itoa(19500 + i)
		runPair(t, a, b, dir, roceBin, "pingpong",
			[]string{"-d", "rxeB", "-g", strconv.Itoa(gb), "-p", p, "-n", "50", "-s", size, "-c"},
			[]string{"-d", "rxeA", "-g", strconv.Itoa(ga), "-p", p, "-n", "50", "-s", size, "-c", b.IPv4.String()}, "Couldn't connect")
	}
	// RDMA CM from the v2-only device: its address resolution asks the
	// kernel to resolve the gateway (link/udp sends through the kernel).
	runPair(t, a, b, dir, roceBin, "ping",
		[]string{"-s", "-a", b.IPv4.String(), "-p", "19510", "-C", "3", "-V"},
		[]string{"-c", "-a", b.IPv4.String(), "-p", "19510", "-C", "3", "-V"}, "REJECTED, error 8")
	time.Sleep(100 * time.Millisecond) // the last ACK's way through R
	frames, err := capt.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if capt.Superpackets() == 0 {
		t.Fatal("no GSO superpacket crossed the router: the test proves nothing")
	}
	t.Logf("%d superpackets crossed the router", capt.Superpackets())
	verifyRouterCapture(t, pcapFile, frames, a.IPv4, b.IPv4)
}
