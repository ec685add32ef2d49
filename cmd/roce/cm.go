package main

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/rdmacm"
)

// What the RDMA CM commands (roce ping, roce perf -R) share: finding
// their devices by address as librdmacm does, and an RDMA CM on them.

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
	cm := rdmacm.New(rdmacm.Options{Defaults: configTree(dir),
		Logf: func(format string, args ...any) {
			fmt.Fprintf(stderr, "roce: "+format+"\n", args...)
		},
		// CM events count per device (roce stat, the exporter).
		OnEvent: func(dev string, e rdmacm.Event) {
			if d := opened[dev]; d != nil {
				d.CountCMEvent(e.Type.String())
			}
		},
		// And what the CM drops or gives up to stay bounded
		// (cm_listen_drops, cm_rtu_timeouts, ...), beside the events.
		OnCounter: func(dev, counter string) {
			if d := opened[dev]; d != nil {
				d.CountCMEvent(counter)
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

// cmIDs lists cm's IDs on d for roce res show cm_id.
func cmIDs(cm *rdmacm.CM, d *host.Device) []host.CMID {
	var out []host.CMID
	for _, in := range cm.IDs(d.Device) {
		c := host.CMID{Port: in.Port, ID: in.Num, LQPN: in.LQPN, QPType: in.QPType, State: in.State, PS: in.PS}
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
