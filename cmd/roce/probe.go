package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

type probeOptions struct {
	device  string
	port    int
	timeout time.Duration
	count   int
	json    bool
}

func newProbeCmd() *cobra.Command {
	var o probeOptions
	cmd := &cobra.Command{
		Use:   "probe ADDR [-d DEV] [-p PORT]",
		Short: "Ask the RDMA CM at ADDR which RoCE versions it answers, and whether this side's RoCE mode matches",
		Long: `probe finds a RoCE version mismatch before connections time out: it asks the
RDMA CM at ADDR for its ClassPortInfo — the question goroce's RDMA CM asks
when a connection request goes unanswered — over RoCE v2 (UDP port 4791)
and over RoCE v1 (Ethertype 0x8915, same Ethernet segment), sent to QP1 from
the local device whose netdev the route to ADDR leaves by (or -d DEV). Any
CM answers it, a Linux host's (its MAD layer) or goroce's, over each version
its port speaks. probe prints, per version, whether an answer came, its
round trip and the GID it came from; then the local port's default_roce_mode
and a verdict, with the command that fixes a mismatch.

The local device may be goroce's or the kernel's (Linux rxe): probe sends
and receives from the netdev itself, with a device of its own for the time
of the probe — RoCE v2 with AF_PACKET where the kernel's rxe owns UDP port
4791. It needs root (AF_PACKET; RoCE v1 is raw Ethernet). A NIC's kernel
device (mlx5, bnxt_re, qedr) keeps its RoCE traffic in the NIC, where the
netdev never sees it: probe says so and does not run there.

Exit status: 0 when the peer answers over the local port's RoCE mode, 1
when it does not (a mismatch, or no answer at all), 2 for a bad command line.`,
		Example: `  roce probe 192.0.2.12
  roce probe -d rxe0 fd00:c0:2::12
  roce probe -j 192.0.2.12 | jq .`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.timeout <= 0 {
				return usageError{&errnoError{op: "probe", errno: syscall.EINVAL,
					detail: fmt.Sprintf("-t %v: the wait for an answer must be positive (e.g. 500ms, 2s)", o.timeout)}}
			}
			dst, err := netip.ParseAddr(args[0])
			if err != nil {
				return usageError{&errnoError{op: "probe", errno: syscall.EINVAL,
					detail: fmt.Sprintf("%q is not an IP address (probe takes the peer's IPv4 or IPv6 address)", args[0])}}
			}
			return probe(cmd, dst.Unmap(), o)
		},
	}
	addKernelFlag(cmd)
	f := cmd.Flags()
	f.StringVarP(&o.device, "device", "d", "", "probe from device `DEV` (default: the one on the netdev the route to ADDR leaves by)")
	f.IntVarP(&o.port, "port", "p", 1, "probe from port `PORT` of the device")
	f.DurationVarP(&o.timeout, "timeout", "t", time.Second, "wait `DURATION` for each answer")
	f.IntVarP(&o.count, "count", "c", 3, "ask `N` times per RoCE version before calling it unanswered")
	f.BoolVarP(&o.json, "json", "j", false, "print a JSON array of one object")
	flagRange(cmd, "port", 1, 255, "the port number", "(goroce devices have port 1)")
	flagRange(cmd, "count", 1, 100, "the number of tries", "")
	return cmd
}

// probeLocal is the local end of a probe.
type probeLocal struct {
	dev      string
	port     int
	isKernel bool
	kdev     kernel.Device  // when isKernel
	def      host.DeviceDef // when goroce's
	netdev   string
	src      netip.Addr
	speaks   []verbs.GIDType // the versions the port speaks
}

// probeLocalEnd finds the device and source address to probe dst from.
func probeLocalEnd(cmd *cobra.Command, dst netip.Addr, o probeOptions) (probeLocal, error) {
	l := probeLocal{port: o.port}
	routes, err := netlink.RouteGet(net.IP(dst.AsSlice()))
	if err != nil || len(routes) == 0 {
		if err == nil {
			err = syscall.ENETUNREACH
		}
		return l, opError("probe", fmt.Errorf("no route to %v: %w", dst, err))
	}
	rt := routes[0]
	link, err := netlink.LinkByIndex(rt.LinkIndex)
	if err != nil {
		return l, opError("probe", fmt.Errorf("the netdev of the route to %v: %w", dst, err))
	}
	l.netdev = link.Attrs().Name
	if s, ok := netip.AddrFromSlice(rt.Src); ok {
		l.src = s.Unmap()
	}
	reg, dir := registryOf(cmd)
	here, _ := host.CurrentNetns()
	var goroceDefs []host.DeviceDef
	if defs, err := reg.List(); err == nil {
		for _, d := range defs {
			if d.Netdev == l.netdev && d.Netns.Same(here) {
				goroceDefs = append(goroceDefs, d)
			}
		}
	}
	sys := sysfsOf(cmd)
	kdevs, _ := sys.OnNetdev(l.netdev)
	st := stackOf(cmd)
	if o.device != "" {
		isKernel, err := resolveDevice(cmd, "probe", o.device)
		if err != nil {
			return l, err
		}
		l.dev, l.isKernel = o.device, isKernel
		nd := ""
		if isKernel {
			l.kdev, _ = sys.Device(o.device)
			p, ok := l.kdev.Port(o.port)
			if !ok {
				return l, &errnoError{op: "probe", errno: syscall.EINVAL,
					detail: fmt.Sprintf("%s has no port %d (its ports: %s)", o.device, o.port, l.kdev.PortNums())}
			}
			nd = p.Netdev
		} else {
			l.def, _ = reg.Get(o.device)
			nd = l.def.Netdev
		}
		if nd != l.netdev {
			return l, &errnoError{op: "probe", errno: syscall.EHOSTUNREACH,
				detail: fmt.Sprintf("the route to %v leaves by %s, not by %s's netdev %s", dst, l.netdev, o.device, nd)}
		}
	} else {
		switch {
		case len(goroceDefs) > 0 && st != stackKernel:
			l.dev, l.def = goroceDefs[0].Name, goroceDefs[0]
		case len(kdevs) > 0 && st != stackGoroce:
			l.dev, l.isKernel, l.kdev = kdevs[0].Name, true, kdevs[0]
		default:
			return l, &errnoError{op: "probe", errno: syscall.ENODEV,
				detail: fmt.Sprintf("the route to %v leaves by %s, which carries no RDMA device (none in %s, none of the kernel's): "+
					"add one (roce link add rxe0 type rxe netdev %s), or name one with -d", dst, l.netdev, dir, l.netdev)}
		}
	}
	if !l.isKernel && o.port != 1 {
		return l, &errnoError{op: "probe", errno: syscall.EINVAL,
			detail: fmt.Sprintf("port %d: goroce devices have one port, port 1", o.port)}
	}
	if l.isKernel {
		if !l.kdev.RoCEOnNetdev() {
			return l, &errnoError{op: "probe", errno: syscall.EOPNOTSUPP,
				detail: fmt.Sprintf("%s (driver %s) terminates RoCE in the NIC: its RoCE packets never reach %s, where probe "+
					"sends and listens; probing from it would take the device's MAD interface (ib_umad), which goroce does not use. "+
					"Probe from another host, or from a goroce or rxe device on a netdev of the same network", l.dev, l.kdev.Driver, l.netdev)}
		}
		table, _ := sys.GIDs(l.dev, o.port)
		has := map[verbs.GIDType]bool{}
		for _, g := range table {
			has[g.Type] = true
		}
		for _, t := range []verbs.GIDType{verbs.GIDTypeRoCEv2, verbs.GIDTypeRoCEv1} {
			if has[t] {
				l.speaks = append(l.speaks, t)
			}
		}
	} else {
		v, _ := host.ParseVersions(string(l.def.Versions))
		if v.V2() {
			l.speaks = append(l.speaks, verbs.GIDTypeRoCEv2)
		}
		if v.V1() {
			l.speaks = append(l.speaks, verbs.GIDTypeRoCEv1)
		}
	}
	if !l.src.IsValid() {
		return l, &errnoError{op: "probe", errno: syscall.EADDRNOTAVAIL,
			detail: fmt.Sprintf("the route to %v names no source address on %s", dst, l.netdev)}
	}
	return l, nil
}

// probeResult is one version's outcome.
type probeResult struct {
	typ   verbs.GIDType
	reply rdmacm.ProbeReply
	ok    bool
	err   error // why it could not be asked at all
	tries int
}

func probe(cmd *cobra.Command, dst netip.Addr, o probeOptions) error {
	l, err := probeLocalEnd(cmd, dst, o)
	if err != nil {
		return err
	}
	versions := host.VersionsBoth
	stderr := cmd.ErrOrStderr()
	if os.Geteuid() != 0 {
		versions = host.VersionsV2
		fmt.Fprintf(stderr, "roce: probe: RoCE v1 is raw Ethernet (AF_PACKET), which needs root: probing RoCE v2 only\n")
	}
	// A device of the probe's own on the netdev, in a runtime directory
	// of its own, beside whatever runs there (goroce's device in another
	// process, or the kernel's rxe that owns UDP port 4791).
	tmp, err := os.MkdirTemp("", "roce-probe-")
	if err != nil {
		return opError("probe", err)
	}
	defer os.RemoveAll(tmp)
	ns, err := host.CurrentNetns()
	if err != nil {
		return opError("probe", err)
	}
	if err := host.NewRegistry(tmp).Add(host.DeviceDef{Name: "probe", Type: "rxe", Netdev: l.netdev, Netns: ns,
		Versions: versions, Created: time.Now()}); err != nil {
		return opError("probe", err)
	}
	d, err := host.Open("probe", host.Options{RunDir: tmp, PortInUseOK: true,
		Logf: func(format string, args ...any) {}})
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return &errnoError{op: "probe", errno: syscall.EADDRINUSE,
				detail: fmt.Sprintf("UDP port 4791 on %s is taken (by the kernel's rxe, or a goroce device), and reading RoCE v2 "+
					"beside its owner needs root (AF_PACKET)", l.netdev)}
		}
		return opError("probe", err)
	}
	defer d.Close()
	cm := rdmacm.New(rdmacm.Options{})
	defer cm.Close()
	if err := cm.AddDevice(d.Device); err != nil {
		return opError("probe", err)
	}
	ctx := commandContext(cmd)
	types := []verbs.GIDType{verbs.GIDTypeRoCEv2, verbs.GIDTypeRoCEv1}
	results := make([]probeResult, len(types))
	var wg sync.WaitGroup
	for i, t := range types {
		results[i].typ = t
		if t == verbs.GIDTypeRoCEv1 && versions == host.VersionsV2 {
			results[i].err = errors.New("not asked: needs root")
			continue
		}
		wg.Add(1)
		go func(r *probeResult) {
			defer wg.Done()
			for r.tries < o.count && ctx.Err() == nil {
				r.tries++
				c, cancel := context.WithTimeout(ctx, o.timeout)
				rep, err := cm.Probe(c, d.Device, l.src, dst, r.typ)
				cancel()
				if err == nil {
					r.reply, r.ok = rep, true
					return
				}
				if !errors.Is(err, syscall.ETIMEDOUT) {
					r.err = err
					return
				}
			}
		}(&results[i])
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return interruptedAfter(ctx, "probing %v", dst)
	}

	mode, modeErr := probeLocalMode(cmd, l)
	verdict, fix, match := probeVerdict(l, dst, results, mode, modeErr == nil)
	if o.json {
		return probeJSON(cmd, l, dst, results, mode, modeErr, verdict, fix, match)
	}
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	stack := "goroce"
	if l.isKernel {
		stack = "kernel"
	}
	fmt.Fprintf(out, "probe %v from %s port %d (%s; %s, %v)\n", dst, l.dev, l.port, stack, l.netdev, l.src)
	for _, r := range results {
		switch {
		case r.ok:
			fmt.Fprintf(out, "%s: answered in %.3f ms by %s (%v)\n", roceVersionName(r.typ),
				float64(r.reply.RTT.Microseconds())/1000, sysfsGID(r.reply.From), r.reply.From.Unmap())
		case r.err != nil:
			fmt.Fprintf(out, "%s: %v\n", roceVersionName(r.typ), r.err)
		default:
			fmt.Fprintf(out, "%s: no answer (%d tries, %v each)\n", roceVersionName(r.typ), r.tries, o.timeout)
		}
	}
	if modeErr == nil {
		fmt.Fprintf(out, "%s port %d default_roce_mode: %s\n", l.dev, l.port, mode)
	} else {
		fmt.Fprintf(out, "%s port %d default_roce_mode: unknown (%v)\n", l.dev, l.port, modeErr)
	}
	fmt.Fprintf(out, "verdict: %s\n", verdict)
	out.Flush()
	if !match {
		return fmt.Errorf("probe %v: %s", dst, verdict)
	}
	return nil
}

func roceVersionName(t verbs.GIDType) string {
	if t == verbs.GIDTypeRoCEv1 {
		return "RoCE v1"
	}
	return "RoCE v2"
}

// probeLocalMode reads the local port's default_roce_mode: goroce's from
// the runtime directory's tree, the kernel's by the configfs procedure.
func probeLocalMode(cmd *cobra.Command, l probeLocal) (verbs.GIDType, error) {
	if l.isKernel {
		m, err := configfsOf(cmd, "probe").Mode(l.dev, l.port)
		if err != nil {
			return 0, kernelErr("mode", err)
		}
		return verbs.GIDTypeFor(m), nil
	}
	_, dir := registryOf(cmd)
	m, err := configTree(dir).DefaultMode(l.dev, l.port)
	return verbs.GIDTypeFor(m), err
}

// probeVerdict says what the answers mean for rdma_cm connections from the
// local port, the command that fixes a mismatch, and whether the peer
// answers over the port's mode.
func probeVerdict(l probeLocal, dst netip.Addr, rs []probeResult, mode verbs.GIDType, modeKnown bool) (verdict, fix string, match bool) {
	answered := map[verbs.GIDType]bool{}
	for _, r := range rs {
		answered[r.typ] = r.ok
	}
	v1, v2 := answered[verbs.GIDTypeRoCEv1], answered[verbs.GIDTypeRoCEv2]
	speaks := func(t verbs.GIDType) bool {
		for _, s := range l.speaks {
			if s == t {
				return true
			}
		}
		return false
	}
	switch {
	case !v1 && !v2:
		return fmt.Sprintf("no answer over RoCE v2 or RoCE v1: is %v an RDMA host (any RDMA CM answers), reachable from %v on %s?",
			dst, l.src, l.netdev), "", false
	case !modeKnown:
		return fmt.Sprintf("peer answers %s; %s port %d's default_roce_mode could not be read", answeredList(v2, v1), l.dev, l.port), "", false
	case v1 && v2:
		return fmt.Sprintf("peer answers RoCE v2 and RoCE v1: %s port %d's %s works", l.dev, l.port, mode), "", true
	}
	got := verbs.GIDTypeRoCEv2
	if v1 {
		got = verbs.GIDTypeRoCEv1
	}
	if mode == got {
		return fmt.Sprintf("both speak %s", roceVersionName(got)), "", true
	}
	if !speaks(got) {
		why := ""
		if l.isKernel && l.kdev.Driver == "rxe" {
			why = " (rxe)"
		}
		return fmt.Sprintf("peer answers %s only, and %s port %d speaks %s only%s: they cannot connect; the peer must speak %s",
			roceVersionName(got), l.dev, l.port, roceVersionName(mode), why, roceVersionName(mode)), "", false
	}
	flag := 2
	if got == verbs.GIDTypeRoCEv1 {
		flag = 1
	}
	fix = fmt.Sprintf("roce mode -d %s -p %d -m %d", l.dev, l.port, flag)
	return fmt.Sprintf("peer answers %s only: set %s port %d to %s: %s", roceVersionName(got), l.dev, l.port, got, fix), fix, false
}

func answeredList(v2, v1 bool) string {
	switch {
	case v2 && v1:
		return "RoCE v2 and RoCE v1"
	case v2:
		return "RoCE v2 only"
	}
	return "RoCE v1 only"
}

func probeJSON(cmd *cobra.Command, l probeLocal, dst netip.Addr, rs []probeResult, mode verbs.GIDType, modeErr error,
	verdict, fix string, match bool) error {
	r := jsonRow{{"addr", dst.String()}, {"ifname", l.dev}, {"port", l.port}, {"kernel", l.isKernel},
		{"netdev", l.netdev}, {"src", l.src.String()}}
	for _, x := range rs {
		key := "roce_v2"
		if x.typ == verbs.GIDTypeRoCEv1 {
			key = "roce_v1"
		}
		v := jsonRow{{"answered", x.ok}, {"tries", x.tries}}
		if x.ok {
			v = append(v, kv{"rtt_us", x.reply.RTT.Microseconds()}, kv{"gid", sysfsGID(x.reply.From)},
				kv{"status", fmt.Sprintf("0x%04x", uint16(x.reply.Status))})
		}
		if x.err != nil {
			v = append(v, kv{"error", x.err.Error()})
		}
		r = append(r, kv{key, v})
	}
	if modeErr == nil {
		r = append(r, kv{"default_roce_mode", mode.String()})
	}
	r = append(r, kv{"verdict", verdict})
	if fix != "" {
		r = append(r, kv{"fix", fix})
	}
	r = append(r, kv{"match", match})
	out := bufio.NewWriter(cmd.OutOrStdout())
	defer out.Flush()
	if err := writeJSONRows(out, []jsonRow{r}); err != nil {
		return err
	}
	out.Flush()
	if !match {
		return fmt.Errorf("probe %v: %s", dst, verdict)
	}
	return nil
}
