package demo

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// mismatch is part 5: a client port in RoCE v2 meets a server port that
// speaks only RoCE v1. Without root there are no raw sockets, so no RoCE
// v1 on the host: this part runs over the in-memory fabric.
func mismatch(ctx context.Context, out *printer) error {
	out.f("\n5. RoCE v1/v2 mismatch, over goroce's in-memory fabric (RoCE v1 is raw Ethernet, which needs root\n" +
		"   on a real netdev; the fabric carries both versions without it)\n")
	dir, err := os.MkdirTemp("", "goroce-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	reg := host.NewRegistry(dir)
	for _, d := range []host.DeviceDef{
		{Name: "demoA", Type: "rxe", Netdev: "fab0", Versions: host.VersionsBoth, Created: time.Now()},
		{Name: "demoB", Type: "rxe", Netdev: "fab1", Versions: host.VersionsV1, Created: time.Now()},
	} {
		if err := reg.Add(d); err != nil {
			return fmt.Errorf("demo: registering %s in %s: %w", d.Name, dir, err)
		}
	}
	tree := config.Open(dir, reg)

	fab := fabric.New()
	defer fab.Close()
	ipA, ipB := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	gA, gB := netip.AddrFrom16(ipA.As16()), netip.AddrFrom16(ipB.As16())
	pa, err := fab.AddPort(fabric.PortConfig{Name: "fab0", GIDs: []netip.Addr{gA}, Seed: 1})
	if err != nil {
		return err
	}
	pb, err := fab.AddPort(fabric.PortConfig{Name: "fab1", GIDs: []netip.Addr{gB}, Seed: 2})
	if err != nil {
		return err
	}
	devA, err := verbs.Open(verbs.DeviceConfig{Name: "demoA", Link: pa, MAC: pa.MAC(), GIDs: []verbs.GIDEntry{
		{GID: gA, Type: verbs.GIDTypeRoCEv1, Netdev: "fab0"}, {GID: gA, Type: verbs.GIDTypeRoCEv2, Netdev: "fab0"}}})
	if err != nil {
		return err
	}
	defer devA.Close()
	v1only := &only{Link: pb, version: wire.RoCEv1}
	devB, err := verbs.Open(verbs.DeviceConfig{Name: "demoB", Link: link.Link(v1only), MAC: pb.MAC(), GIDs: []verbs.GIDEntry{
		{GID: gB, Type: verbs.GIDTypeRoCEv1, Netdev: "fab1"}}})
	if err != nil {
		return err
	}
	defer devB.Close()

	t0 := time.Now()
	var diag []string
	logf := func(format string, args ...any) {
		diag = append(diag, fmt.Sprintf("%.1f s: ", time.Since(t0).Seconds())+fmt.Sprintf(format, args...))
	}
	opts := rdmacm.Options{Defaults: tree, ResponseTimeout: cmTimeout, MaxRetries: cmRetries, Timewait: 20 * time.Millisecond}
	optsA := opts
	optsA.Logf = func(format string, args ...any) { logf(format, args...) }
	cmA, cmB := rdmacm.New(optsA), rdmacm.New(opts)
	defer cmA.Close()
	defer cmB.Close()
	nodes := [2]*node{{name: "demoA", dev: devA, cm: cmA}, {name: "demoB", dev: devB, cm: cmB}}
	for _, n := range nodes {
		if err := cmSetup(n); err != nil {
			return fmt.Errorf("demo: %s: %w", n.name, err)
		}
	}
	a, b := nodes[0], nodes[1]
	mode := func(dev string) string {
		m, err := tree.DefaultMode(dev, 1)
		if err != nil {
			return err.Error()
		}
		return config.ModeName(m)
	}
	out.f("   demoA %v speaks RoCE v1 and v2; its default_roce_mode is %q. demoB %v speaks RoCE v1 only\n", ipA, mode("demoA"), ipB)
	out.f("   (like a ConnectX-3: a filter on its fabric port drops RoCE v2 frames). Their rdma_cm settings live in a\n")
	out.f("   private runtime directory, removed at exit ($GOROCE_RUNDIR and /run/goroce are not touched).\n")

	l, err := cmB.Listen(netip.AddrPortFrom(ipB, cmPort), b.endpoint(netip.Addr{}, nil))
	if err != nil {
		return err
	}
	defer l.Close()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	accepted := make(chan *rdmacm.Conn, 1)
	go func() {
		c, err := l.Accept(lctx)
		if err == nil {
			accepted <- c
		}
	}()

	dial := func() (*rdmacm.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cmA.Dial(dctx, netip.AddrPortFrom(ipB, cmPort), a.endpoint(ipA, nil))
	}
	out.f("   demoA connects to %v:%d (CM response timeout %v and %d retries, short for the demo; Linux's\n"+
		"   4.3 s and 15 retries take about 69 s):\n", ipB, cmPort, cmTimeout, cmRetries)
	t0 = time.Now()
	c, err := dial()
	took := time.Since(t0)
	if err == nil {
		c.Close()
		return fmt.Errorf("demo: the mismatched connect succeeded; it must fail")
	}
	if len(diag) == 0 || !strings.Contains(err.Error(), "RoCE v1 only") {
		return fmt.Errorf("demo: the mismatched connect failed without goroce's diagnosis: %w (logged: %q)", err, diag)
	}
	for _, d := range diag {
		out.f("   %s\n", wrap("goroce's diagnosis (rdmacm Options.Logf) at "+d, "     "))
	}
	out.f("   %s\n", wrap(fmt.Sprintf("connect failed after %.1f s: %s", took.Seconds(), firstLine(err)), "     "))

	out.f("   the fix, through the config API (what `roce mode -d demoA -p 1 -m 1` does):\n")
	out.f("     config.Open(rundir, host.NewRegistry(rundir)).SetDefaultMode(\"demoA\", 1, wire.RoCEv1)\n")
	if err := tree.SetDefaultMode("demoA", 1, wire.RoCEv1); err != nil {
		return fmt.Errorf("demo: the fix: %w", err)
	}
	out.f("     demoA's default_roce_mode is now %q\n", mode("demoA"))
	t0 = time.Now()
	c, err = dial()
	if err != nil {
		return fmt.Errorf("demo: connect after the fix: %w", err)
	}
	defer c.Close()
	var cb *rdmacm.Conn
	select {
	case cb = <-accepted:
	case <-time.After(5 * time.Second):
		return fmt.Errorf("demo: demoB accepted nothing")
	}
	defer cb.Close()
	ver := "?"
	if g, err := devA.GID(int(c.QP.Query().AH.GRH.SGIDIndex)); err == nil {
		ver = "RoCE v2"
		if g.Type == verbs.GIDTypeRoCEv1 {
			ver = "RoCE v1"
		}
	}
	out.f("   connected in %.1f ms over %s: demoA QP %#x <-> demoB QP %#x   ok\n",
		float64(time.Since(t0).Microseconds())/1000, ver, c.QP.Num(), cb.QP.Num())
	if v1only.ignored.Load() == 0 {
		return fmt.Errorf("demo: demoB ignored no RoCE v2 packet")
	}
	return nil
}

// cmSetup makes a fabric node's PD, CQs and its CM's device.
func cmSetup(n *node) error {
	var err error
	if n.pd, err = n.dev.AllocPD(); err != nil {
		return err
	}
	if n.scq, err = n.dev.CreateCQ(64); err != nil {
		return err
	}
	if n.rcq, err = n.dev.CreateCQ(64); err != nil {
		return err
	}
	return n.cm.AddDevice(n.dev)
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.Index(s, "; peer "); i >= 0 {
		return s[:i] + "; then the same diagnosis"
	}
	return s
}

// wrap breaks s into lines of about 100 columns, indenting each but the
// first with indent.
func wrap(s, indent string) string {
	var b strings.Builder
	col := 0
	for i, w := range strings.Fields(s) {
		if i > 0 {
			if col+1+len(w) > 100-len(indent) {
				b.WriteString("\n" + indent)
				col = 0
			} else {
				b.WriteByte(' ')
				col++
			}
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}
