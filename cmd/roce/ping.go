package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/rping"
	"github.com/goroce/goroce/rdmacm"
)

// cmDevices picks the devices an RDMA CM command opens when --dev is not
// given, the way librdmacm finds a device by address: the device holding
// want (the source or bind address) if given; else every device with a GID
// of family's kind (IPv4-mapped or IPv6), those in this network namespace
// first. Devices another process has open are left out (goroce cannot share
// a data path between processes); if that leaves none, the error says who
// has them.
func cmDevices(reg *host.Registry, want netip.Addr, family netip.Addr) ([]string, error) {
	defs, err := reg.List()
	if err != nil {
		return nil, err
	}
	if len(defs) == 0 {
		return nil, errors.New("No IB devices found (create one: roce link add rxe0 type rxe netdev eth0)")
	}
	here, _ := host.CurrentNetns()
	var local, other, busy []string
	for _, def := range defs {
		gids, _, err := reg.GIDTableOf(def)
		if err != nil {
			continue // its netdev is gone
		}
		match := false
		for _, e := range gids {
			g := e.GID
			if !g.IsValid() {
				continue
			}
			if want.IsValid() && !want.IsUnspecified() {
				if g.Unmap() == want.Unmap() {
					match = true
				}
			} else if !family.IsValid() || g.Is4In6() == family.Unmap().Is4() {
				match = true
			}
		}
		if !match {
			continue
		}
		if o, isBusy := reg.OwnerOf(def.Name); isBusy {
			busy = append(busy, fmt.Sprintf("%s (process %d, %s)", def.Name, o.PID, o.Command))
			continue
		}
		if def.Netns.Same(here) {
			local = append(local, def.Name)
		} else {
			other = append(other, def.Name)
		}
	}
	if len(local) > 0 {
		return local, nil
	}
	if len(other) > 0 {
		return other, nil
	}
	what := "an address of that family"
	if want.IsValid() && !want.IsUnspecified() {
		what = want.String()
	}
	if len(busy) > 0 {
		return nil, fmt.Errorf("the devices with %s are in use by other processes: %v: %w", what, busy, host.ErrBusy)
	}
	return nil, fmt.Errorf("no device has %s (roce gids lists the addresses): %w", what, syscall.EADDRNOTAVAIL)
}

// openCM opens the named devices (or those cmDevices picks) and returns an
// RDMA CM on them that takes default_roce_mode and default_roce_tos from
// the rundir's config tree.
func openCM(cmd *cobra.Command, devs []string, pcapFile string, want, family netip.Addr) (*rdmacm.CM, func(), error) {
	dir := rundirOf(cmd)
	if len(devs) == 0 {
		var err error
		if devs, err = cmDevices(host.NewRegistry(dir), want, family); err != nil {
			return nil, nil, err
		}
	}
	if pcapFile != "" && len(devs) > 1 {
		return nil, nil, usageError{fmt.Errorf("--pcap captures one device; choose one of %v with --dev", devs)}
	}
	stderr := cmd.ErrOrStderr()
	opened := map[string]*host.Device{} // written before the first event can come
	cm := rdmacm.New(rdmacm.Options{Defaults: config.Open(dir),
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "roce: "+format+"\n", args...)
		},
		// CM events count per device (roce stat, the exporter).
		OnEvent: func(dev string, e rdmacm.Event) {
			if d := opened[dev]; d != nil {
				d.CountCMEvent(e.Type.String())
			}
		}})
	var closers []func()
	closeAll := func() {
		cm.Close()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	for _, name := range devs {
		d, closeDev, err := openDevice(cmd, name, pcapFile)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, closeDev)
		opened[name] = d
		// roce res show cm_id asks the owner through the control socket.
		closers = append(closers, d.AddCMIDSource(func() []host.CMID { return cmIDs(cm, d) }))
	}
	for _, name := range devs {
		// Routed: rdma_resolve_addr's device and source come from the
		// kernel's route in the netdev's namespace, as on Linux.
		if err := cm.AddRoutedDevice(opened[name].Device, opened[name]); err != nil {
			closeAll()
			return nil, nil, err
		}
	}
	return cm, closeAll, nil
}

func newPingCmd() *cobra.Command {
	var (
		server, client bool
		addr, src      string
		port           int
		devs           []string
		pcapFile       string
		selfQP         bool
		c              rping.Config
	)
	cmd := &cobra.Command{
		Use:   "ping -s|-c [-vVd] [-S size] [-C count] [-I addr] [-a addr] [-p port] [-P]",
		Short: "rping: an RDMA CM connection with RDMA READ and WRITE, wire-compatible with librdmacm's rping",
		Long: `ping is librdmacm's rping: the server (-s) listens on -a (default every
address) port -p (7174); the client (-c) connects to -a through RDMA CM over
the device's default RoCE mode (roce mode), then per ping advertises a
buffer, which the server RDMA READs and RDMA WRITEs back. Either side can be
goroce or Linux rping. -v prints the data, -V checks it, -C stops after a
count (the client; the server serves one connection, or many with -P).

The devices are found by address, as librdmacm does (--dev picks one); a
failed connection says why, in words, after rping's own message.`,
		Example: `  roce ping -s -a 192.0.2.1 -v           # server
  roce ping -c -a 192.0.2.1 -C 3 -v -V     # client: 3 pings, checked
  roce ping -c -a fd00:c0:2::11 -S 4096 -C 10`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if server == client {
				return usageError{errors.New("choose one of -s (server) and -c (client)")}
			}
			c.Server = server
			if port < 0 || port > 65535 {
				return usageError{fmt.Errorf("-p %d: port must be 0-65535", port)}
			}
			var a netip.Addr
			switch {
			case addr != "":
				var err error
				if a, err = netip.ParseAddr(addr); err != nil {
					return usageError{fmt.Errorf("-a %q: not an IPv4 or IPv6 address: %w", addr, syscall.EINVAL)}
				}
			case client:
				return usageError{errors.New("-c needs the server's address: -a addr")}
			default:
				a = netip.IPv4Unspecified()
			}
			c.Addr = netip.AddrPortFrom(a.Unmap(), uint16(port))
			if src != "" {
				if server {
					return usageError{errors.New("-I is the client's source address; the server binds to -a")}
				}
				s, err := netip.ParseAddr(src)
				if err != nil {
					return usageError{fmt.Errorf("-I %q: not an IPv4 or IPv6 address: %w", src, syscall.EINVAL)}
				}
				c.Source = s.Unmap()
			}
			if c.Persistent && client {
				return usageError{errors.New("-P is for the server (-s)")}
			}
			_ = selfQP // the QP is made and moved by goroce either way; the wire is the same
			want, family := c.Source, c.Addr.Addr()
			if server {
				want, family = c.Addr.Addr(), netip.Addr{}
			}
			cm, closeCM, err := openCM(cmd, devs, pcapFile, want, family)
			if err != nil {
				return err
			}
			defer closeCM()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			c.Out, c.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			if err := rping.Run(ctx, cm, c); err != nil {
				if ctx.Err() != nil && c.Persistent {
					return nil
				}
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.BoolVarP(&server, "server", "s", false, "server side (to bind to any IPv6 address use -a ::0)")
	f.BoolVarP(&client, "client", "c", false, "client side")
	f.StringVarP(&addr, "addr", "a", "", "`address`: the server's (client) or the one to bind (server)")
	f.StringVarP(&src, "source", "I", "", "source `address` to bind to for the client")
	f.IntVarP(&port, "port", "p", rping.DefaultPort, "`port`")
	f.IntVarP(&c.Count, "count", "C", 0, "ping `count` times (0: until interrupted)")
	f.IntVarP(&c.Size, "size", "S", rping.DefaultSize, fmt.Sprintf("ping data `size` (%d-%d)", rping.MinSize, rping.MaxSize))
	f.BoolVarP(&c.Verbose, "verbose", "v", false, "display ping data to stdout")
	f.BoolVarP(&c.Validate, "validate", "V", false, "validate ping data")
	f.BoolVarP(&c.Debug, "debug", "d", false, "debug printfs")
	f.BoolVarP(&c.Persistent, "persistent", "P", false, "persistent server mode allowing multiple connections")
	f.BoolVarP(&selfQP, "self-qp", "q", false, "use self-created, self-modified QPs (the same on the wire; accepted for rping's sake)")
	f.StringSliceVar(&devs, "dev", nil, "use only these devices (default: found by address)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	return cmd
}

// cmIDs lists cm's IDs on d for roce res show cm_id.
func cmIDs(cm *rdmacm.CM, d *host.Device) []host.CMID {
	var out []host.CMID
	for _, in := range cm.IDs(d.Device) {
		c := host.CMID{Port: in.Port, ID: in.ID, LQPN: in.LQPN, QPType: in.QPType, State: in.State, PS: in.PS}
		if in.Src.Addr().IsValid() {
			c.SrcAddr = in.Src.String()
		}
		if in.Dst.Addr().IsValid() {
			c.DstAddr = in.Dst.String()
		}
		out = append(out, c)
	}
	return out
}
