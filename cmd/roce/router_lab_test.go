package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// labRouted puts a goroce host behind a Linux router on the lab's bridge,
// without touching the VMs: namespace A (rt-a0: 198.18.1.1/24,
// fd00:198:1::1/64, and the lab-side addresses 192.0.2.200/32,
// fd00:c0:2::200/128) — namespace R (rt-r0: 198.18.1.254/24,
// fd00:198:1::fe/64 toward A; rt-l0: 192.0.2.254/24, fd00:c0:2::fe/64,
// whose peer rt-l1 is a port of br-roce in roce-host). R forwards, and
// answers ARP and Neighbor Solicitations on the bridge for A's lab-side
// addresses (proxy ARP, proxy NDP), so the VMs, which have no routes, send
// to A on-link as they would to any lab host, through R. Deleting R's
// namespace at the end of t takes the bridge port with it.
func labRouted(t *testing.T, l *lab.Lab) (a *nettest.Host, r *nettest.Router) {
	t.Helper()
	p := netip.MustParseAddr
	a = &nettest.Host{NSName: fmt.Sprintf("goroce-lab-%d-a", os.Getpid()), Ifname: "rt-a0", IPv4: p("192.0.2.200"), IPv6: p("fd00:c0:2::200")}
	r = &nettest.Router{NSName: fmt.Sprintf("goroce-lab-%d-r", os.Getpid()),
		A: nettest.Iface{Ifname: "rt-r0", IPv4: p("198.18.1.254"), IPv6: p("fd00:198:1::fe")},
		B: nettest.Iface{Ifname: "rt-l0", IPv4: p("192.0.2.254"), IPv6: p("fd00:c0:2::fe")}}
	err := nettest.Do(netns.None(), func() error {
		orig, err := netns.Get()
		if err != nil {
			return err
		}
		defer orig.Close()
		for _, x := range []struct {
			name string
			ns   *netns.NsHandle
		}{{a.NSName, &a.NS}, {r.NSName, &r.NS}} {
			ns, err := netns.NewNamed(x.name)
			if err != nil {
				return err
			}
			*x.ns = ns
			if err := netns.Set(orig); err != nil {
				return err
			}
		}
		return nil
	})
	t.Cleanup(func() {
		for _, x := range []struct {
			name string
			ns   netns.NsHandle
		}{{r.NSName, r.NS}, {a.NSName, a.NS}} {
			if x.ns.IsOpen() {
				x.ns.Close()
			}
			netns.DeleteNamed(x.name)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	labNS, err := netns.GetFromName(lab.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer labNS.Close()
	run := func(ns netns.NsHandle, cmds ...string) {
		t.Helper()
		err := nettest.Do(ns, func() error {
			for _, c := range cmds {
				if out, err := execIn(c); err != nil {
					return fmt.Errorf("%s: %v: %s", c, err, out)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err = r.Do(func() error {
		for _, c := range []struct {
			local, peer string
			ns          netns.NsHandle
		}{{"rt-r0", "rt-a0", a.NS}, {"rt-l0", "rt-l1", labNS}} {
			la := netlink.NewLinkAttrs()
			la.Name = c.local
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: c.peer, PeerNamespace: netlink.NsFd(int(c.ns))}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	run(labNS, "ip link set rt-l1 master "+lab.Bridge, "ip link set rt-l1 up")
	run(r.NS,
		// A fixed MAC: the VMs keep their neighbour entries for A's
		// addresses (R's MAC, by proxy) from one run to the next, and rxe
		// uses a STALE entry as it is; a new MAC each run would send their
		// first packets to the last run's router.
		"ip link set rt-l0 address 02:00:c0:00:02:fe",
		"ip link set lo up",
		"sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1",
		"sysctl -qw net.ipv6.conf.rt-r0.accept_dad=0 net.ipv6.conf.rt-l0.accept_dad=0",
		"sysctl -qw net.ipv4.conf.rt-l0.proxy_arp=1 net.ipv6.conf.rt-l0.proxy_ndp=1",
		"ip addr add 198.18.1.254/24 dev rt-r0", "ip addr add fd00:198:1::fe/64 dev rt-r0 nodad",
		"ip addr add 192.0.2.254/24 dev rt-l0", "ip addr add fd00:c0:2::fe/64 dev rt-l0 nodad",
		"ip link set rt-r0 up", "ip link set rt-l0 up",
		"ip route add 192.0.2.200/32 via 198.18.1.1 dev rt-r0",
		"ip -6 route add fd00:c0:2::200/128 via fd00:198:1::1 dev rt-r0",
		"ip -6 neigh add proxy fd00:c0:2::200 dev rt-l0")
	run(a.NS,
		"ip link set lo up",
		"sysctl -qw net.ipv6.conf.rt-a0.accept_dad=0",
		"ip addr add 198.18.1.1/24 dev rt-a0", "ip addr add fd00:198:1::1/64 dev rt-a0 nodad",
		"ip addr add 192.0.2.200/32 dev rt-a0", "ip addr add fd00:c0:2::200/128 dev rt-a0 nodad",
		"ip link set rt-a0 up",
		"ip route add 192.0.2.0/24 via 198.18.1.254 src 192.0.2.200",
		"ip -6 route add fd00:c0:2::/64 via fd00:198:1::fe src fd00:c0:2::200")
	err = a.Do(func() error {
		ifc, err := net.InterfaceByName("rt-a0")
		if err == nil {
			a.Ifindex = ifc.Index
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, r
}

// TestLabRouted runs goroce against Linux rxe across a router: the
// goroce host sits behind a Linux router (labRouted), and its roce binary
// runs roce pingpong against ibv_rc_pingpong and roce ping against rping in
// vm1, over IPv4 and IPv6. A capture on the router's lab-side interface
// holds goroce's packets with TTL 63 (forwarded) and rxe's with 64, and
// verifies in roce decode --verify and tshark.
func TestLabRouted(t *testing.T) {
	l := lab.Start(t)
	vm := lab.VM1
	l.Exec(vm, "killall ibv_rc_pingpong rping 2>/dev/null; true")
	a, r := labRouted(t, l)
	dir, roceBin := t.TempDir(), roceExecutable(t)
	if code, _, stderr := roceIn(t, a, dir, "link", "add", "rxe0", "type", "rxe", "netdev", "rt-a0"); code != 0 {
		t.Fatalf("link add: %s", stderr)
	}
	pcapFile := filepath.Join(t.TempDir(), "lab-router.pcap")
	capt := nettest.StartCapture(t, r.NS, r.B.Ifname, pcapFile)
	for _, v6 := range []bool{false, true} {
		ours, theirs := a.IPv4, netip.MustParseAddr(vm.IPv4)
		if v6 {
			ours, theirs = a.IPv6, netip.MustParseAddr(vm.IPv6)
		}
		fam := "IPv4"
		if v6 {
			fam = "IPv6"
		}
		gOurs, gTheirs := gidIndexOf(t, dir, "rxe0", ours), l.GIDIndex(t, vm, theirs.String())
		t.Run(fam+"/pingpong", func(t *testing.T) {
			l.MustExec(t, vm, "killall ibv_rc_pingpong 2>/dev/null; true")
			job := l.Background(t, vm, "/tmp/rpp.log", 100*time.Second, fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n 20 -s 4096 -p 18599", gTheirs))
			var cli *proc
			var code int
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
			defer cancel()
			err := lab.UntilListening(ctx, job, "Couldn't connect", func() error {
				// The exchange over IPv4 (through R as well): ibv_rc_pingpong's
				// server listens on the first address getaddrinfo gives, 0.0.0.0.
				cli = startRoce(t, a, dir, roceBin, "pingpong", "-d", "rxe0", "-g", strconv.Itoa(gOurs), "-n", "20", "-s", "4096", "-p", "18599", vm.IPv4)
				if code = cli.exitWithin(t, 2*time.Minute); code != 0 {
					return fmt.Errorf("exit %d: %s", code, cli.stderr.String())
				}
				return nil
			})
			if err != nil {
				vmlog, _, _ := l.Exec(vm, "cat /tmp/rpp.log; cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *")
				var rstat, astat string
				r.Do(func() error { o, _ := execIn("ip -s -s link"); rstat = o; return nil })
				a.Do(func() error { o, _ := execIn("ip -s -s link"); astat = o; return nil })
				t.Fatalf("roce pingpong: %v\n%s\nvm1: %s\nR: %s\nA: %s", err, cli.stdout.String(), vmlog, rstat, astat)
			}
			if log := job.Wait(); !strings.Contains(log, "EXIT 0") {
				t.Fatalf("ibv_rc_pingpong:\n%s", log)
			}
		})
		t.Run(fam+"/ping", func(t *testing.T) {
			l.MustExec(t, vm, "killall rping 2>/dev/null; true")
			job := l.Background(t, vm, "/tmp/rrp.log", 100*time.Second, fmt.Sprintf("rping -s -a %s -C 5 -V", theirs))
			var cli *proc
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Slow)
			defer cancel()
			err := lab.UntilListening(ctx, job, "REJECTED", func() error {
				cli = startRoce(t, a, dir, roceBin, "ping", "-c", "-a", theirs.String(), "-C", "5", "-V")
				if code := cli.exitWithin(t, 2*time.Minute); code != 0 {
					return fmt.Errorf("exit %d: %s%s", code, cli.stdout.String(), cli.stderr.String())
				}
				return nil
			})
			if err != nil {
				t.Fatalf("roce ping: %v", err)
			}
			if log := job.Wait(); !strings.Contains(log, "EXIT 0") {
				t.Fatalf("rping:\n%s", log)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	frames, err := capt.Stop()
	if err != nil {
		t.Fatal(err)
	}
	// Seen on R's lab side: goroce's packets forwarded (63), rxe's not yet (64).
	verifyCapture(t, pcapFile, frames, map[netip.Addr]uint8{a.IPv4: 63, a.IPv6: 63,
		netip.MustParseAddr(vm.IPv4): 64, netip.MustParseAddr(vm.IPv6): 64})
}

// execIn runs a command line (no shell quoting needed) in the calling
// thread's namespace: the child is forked from the locked thread.
func execIn(cmdline string) (string, error) {
	f := strings.Fields(cmdline)
	out, err := exec.Command(f[0], f[1:]...).CombinedOutput()
	return string(out), err
}
