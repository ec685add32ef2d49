package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/link/neigh"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/verbs"
)

// Options for Open.
type Options struct {
	RunDir string // default RunDir()
	// Wrap, if set, decorates the device's link (e.g. with link/pcap).
	Wrap func(link.Link) link.Link
	// Unprivileged forces the UDP link's unprivileged receive mode even as root.
	Unprivileged bool
	// PortInUseOK lets a device that speaks both RoCE versions run where
	// another stack owns RoCE v2's UDP port 4791 — the kernel's rdma_rxe,
	// which binds it in every namespace it runs in. Such a device reads
	// RoCE v2, like v1, from the netdev with AF_PACKET, which sees every
	// frame whoever owns the port; it only holds the port to keep the
	// kernel from answering with ICMP port unreachable, which the owner
	// already does. Without it, a taken port fails Open (EADDRINUSE).
	PortInUseOK bool
	// Logf, if set, receives the device's log lines (no trailing newline),
	// such as a v1-only port's note that it dropped a peer's RoCE v2 CM
	// request; the default writes "roce: " and the line to stderr.
	Logf func(format string, args ...any)
}

// Device is a device opened by name: the verbs.Device and what runs it.
type Device struct {
	*verbs.Device
	Def    DeviceDef
	Netdev Netdev

	reg     *Registry
	lock    *os.File
	closers []io.Closer
	gids    GIDTable
	mu      sync.Mutex // guards gids and Netdev
	stop    chan struct{}
	wg      sync.WaitGroup
	udp     *udp.Link
	raw     *afpacket.Link
	res     *neigh.Resolver // next hops out of the netdev: the raw link's, rdma_cm's, diagnostics'
	ctl     controlState    // the control socket (control.go)

	onGID    map[int]func() // guarded by mu: OnGIDChange's functions, by registration
	onGIDSeq int            // guarded by mu
}

// ErrBusy is wrapped by Open's error when another process has the device open.
var ErrBusy = errors.New("device in use")

// Owner says which process has a device's data path open.
type Owner struct {
	PID     int
	Command string
}

// OwnerOf returns the process holding name's data path, if one does.
func (r *Registry) OwnerOf(name string) (Owner, bool) {
	f, err := rundir.Open(filepath.Join(r.devDir(), name+".owner"))
	if errors.Is(err, fs.ErrPermission) {
		// The lock file is its owner's alone (0600, rundir.OpenLock), so
		// another user learns the owner from the published GID table.
		return r.publishedOwner(name)
	}
	if err != nil {
		return Owner{}, false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return Owner{}, false // nobody holds it
	}
	b, _ := io.ReadAll(f)
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return Owner{PID: pid, Command: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))}, true
}

// Open starts the data path of the device name: it takes the device's
// lock (one process at a time, like one kernel driver instance), opens the
// links its RoCE versions need in its netdev's namespace, builds the GID
// table and keeps it current from netlink.
func Open(name string, o Options) (*Device, error) {
	if o.RunDir == "" {
		o.RunDir = RunDir()
	}
	reg := NewRegistry(o.RunDir)
	def, err := reg.Get(name)
	if err != nil {
		return nil, err
	}
	d := &Device{Def: def, reg: reg, stop: make(chan struct{})}
	d.gids.Versions = def.Versions
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	fail := func(err error) (*Device, error) {
		d.closeAll()
		return nil, err
	}
	var l link.Link
	err = InNetns(def.Netns, func() error {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		d.closers = append(d.closers, closerFunc(func() error { nl.Close(); return nil }))
		nd, err := LookupNetdev(nl, def.Netdev)
		if err != nil {
			return err
		}
		d.Netdev = nd
		d.gids.Netdev = nd.Name
		d.gids.Update(nd)
		res, err := neigh.New(neigh.Config{Ifindex: nd.Index, MAC: nd.MAC})
		if err != nil {
			return err
		}
		res.SetSources(nd.Addrs)
		d.res = res
		d.closers = append(d.closers, closerFunc(func() error { res.Close(); return nil }))
		root := os.Geteuid() == 0
		switch {
		case def.Versions.V1():
			if !root {
				return &verbs.Error{Op: "open", Device: name, Err: syscall.EPERM,
					Detail: fmt.Sprintf("device %s speaks RoCE v1, which needs raw Ethernet (AF_PACKET): run as root, "+
						"or without root use a RoCE v2 device (roce link add NAME type rxe netdev %s roce-versions v2)", name, nd.Name)}
			}
			raw, err := afpacket.New(afpacket.Config{Ifindex: nd.Index, MAC: nd.MAC, GIDs: d.gids.Addrs(), V2: def.Versions.V2(),
				Resolver: res, OnForeign: d.foreignLogger(o.Logf)})
			if err != nil {
				return err
			}
			d.raw, l = raw, raw
			d.closers = append(d.closers, raw)
			if def.Versions.V2() {
				hold, err := udp.HoldPort(4791)
				switch {
				case err == nil:
					d.closers = append(d.closers, hold)
				case !(o.PortInUseOK && errors.Is(err, syscall.EADDRINUSE)):
					return err
				}
			} else if hold, err := udp.HoldPort(4791); err == nil {
				// v1 only: the link drops (counts, logs) RoCE v2, as a
				// ConnectX-3 drops it; holding the port keeps the kernel
				// from answering it with ICMP port unreachable. Best
				// effort: a socket that has the port already does that.
				d.closers = append(d.closers, hold)
			}
		default:
			cfg := udp.Config{Addrs: d.gids.Addrs(), MTU: nd.MTU - 48, Zone: nd.Index}
			if (def.Rx == RxRing || def.Rx == RxXDP) && !root {
				what := "an AF_PACKET socket"
				if def.Rx == RxXDP {
					what = "an AF_XDP socket and an XDP program"
				}
				return &verbs.Error{Op: "open", Device: name, Err: syscall.EPERM,
					Detail: fmt.Sprintf("device %s receives with rx-path %s, %s on %s: run as root, "+
						"or without root use rx-path socket (roce link delete %s; roce link add %s type rxe netdev %s roce-versions v2 rx-path socket)",
						name, def.Rx, what, nd.Name, name, name, nd.Name)}
			}
			if root && !o.Unprivileged && def.Rx != RxSocket {
				cfg.Ifindex = nd.Index
				cfg.XDP = def.Rx == RxXDP
			}
			u, err := udp.New(cfg)
			if err != nil {
				return err
			}
			d.udp, l = u, u
			d.closers = append(d.closers, u)
		}
		return d.watch(nl, nd.Index)
	})
	if err != nil {
		// An error that already says which device could not open, and
		// why (the privilege a link needs), goes as it is.
		if ve, ok := err.(*verbs.Error); ok && ve.Op == "open" && ve.Device == name {
			return fail(err)
		}
		return fail(&verbs.Error{Op: "open", Device: name, Detail: "netdev " + def.Netdev + def.Netns.suffix(), Err: err})
	}
	if o.Wrap != nil {
		l = o.Wrap(l)
	}
	// The tap captures through the control socket, and says why packets
	// to a destination could not be sent: the device's resolver's answer,
	// whichever link sends (link/udp leaves routes and ARP to the kernel,
	// whose neighbour table the resolver reads), else the link's own.
	var paths link.PathReporter
	if d.res != nil {
		paths = d.res
	}
	d.ctl.tap = pcap.NewTap(l, paths)
	if p, ok := l.(link.Poller); ok {
		l = d.ctl.tap.WithPoller(p) // so that CQ pollers drive the link (run to completion)
	} else {
		l = d.ctl.tap
	}
	// The netlink watch already runs (refresh): read what it writes, and
	// publish the device to it, under d.mu.
	d.mu.Lock()
	nd, entries := d.Netdev, d.gids.Entries()
	d.mu.Unlock()
	dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: l, MAC: nd.MAC, GIDs: entries,
		ActiveMTU: ActiveMTU(nd.MTU)})
	if err != nil {
		return fail(err)
	}
	d.mu.Lock()
	d.Device = dev
	d.mu.Unlock()
	// The port's congestion control as `roce ecn` left it in the config
	// tree (ecn.go); a state file that does not hold settings fails the
	// open rather than run the port with settings nobody chose.
	if err := d.loadECN(); err != nil {
		dev.Close()
		return fail(&verbs.Error{Op: "open", Device: name, Detail: "ECN settings", Err: err})
	}
	if err := d.startControl(); err != nil {
		dev.Close()
		return fail(&verbs.Error{Op: "open", Device: name, Err: err})
	}
	d.publish()
	return d, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// lockRetryFor bounds how long Open retries a device lock that someone
// holds while no owner can be found (takeLock).
const lockRetryFor = time.Second

// takeLock takes the device's data-path lock, or says who holds it.
func (d *Device) takeLock() error {
	if err := rundir.MkdirAll(d.reg.Dir, d.reg.devDir()); err != nil {
		return err
	}
	p := filepath.Join(d.reg.devDir(), d.Def.Name+".owner")
	f, err := rundir.OpenLock(p)
	if err != nil {
		return err
	}
	// A control command that asks who runs the device (OwnerOf: roce
	// stat, roce link show -d, …) holds a shared lock on the file for a
	// moment, and an owner that is exiting holds its lock until it is
	// gone: a refusal while no owner can be found is one of those, and
	// passes. Only a refusal with an owner, or one that lasts, is EBUSY.
	for deadline := time.Now().Add(lockRetryFor); ; {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		ow, ok := d.reg.OwnerOf(d.Def.Name)
		if ok || !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if ok && ow.PID != 0 {
				return &verbs.Error{Op: "open", Device: d.Def.Name, Err: errors.Join(ErrBusy, syscall.EBUSY),
					Detail: fmt.Sprintf("device %s is in use by process %d (%s); one process at a time runs a device's data path, "+
						"while control commands (roce link show, roce dev, roce gids) work meanwhile", d.Def.Name, ow.PID, ow.Command)}
			}
			return &verbs.Error{Op: "open", Device: d.Def.Name, Detail: fmt.Sprintf("device %s is in use", d.Def.Name), Err: errors.Join(ErrBusy, syscall.EBUSY)}
		}
		time.Sleep(time.Millisecond)
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	d.lock = f
	return nil
}

// watch follows the netdev's addresses and link state through netlink and
// keeps the GID table, the link's local addresses and the port state current.
func (d *Device) watch(nl *netlink.Handle, ifindex int) error {
	addrs := make(chan netlink.AddrUpdate, 64)
	links := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{}); err != nil {
		return &verbs.Error{Op: "open", Device: d.Def.Name, Detail: "netlink address subscription", Err: err}
	}
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{}); err != nil {
		close(done)
		return &verbs.Error{Op: "open", Device: d.Def.Name, Detail: "netlink link subscription", Err: err}
	}
	d.closers = append(d.closers, closerFunc(func() error { close(done); return nil }))
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			select {
			case u, ok := <-addrs:
				if !ok {
					return
				}
				if u.LinkIndex == ifindex {
					d.refresh(nl)
				}
			case u, ok := <-links:
				if !ok {
					return
				}
				if int(u.Index) == ifindex {
					d.refresh(nl)
				}
			case <-d.stop:
				return
			}
		}
	}()
	return nil
}

// refresh re-reads the netdev and updates what depends on it.
func (d *Device) refresh(nl *netlink.Handle) {
	nd, err := LookupNetdev(nl, d.Def.Netdev)
	d.mu.Lock()
	dev := d.Device // nil until Open has made it
	if err != nil {
		d.mu.Unlock()
		if dev != nil {
			dev.SetPortState(false)
		}
		return
	}
	d.Netdev = nd
	changed := d.gids.Update(nd)
	entries, addrs := d.gids.Entries(), d.gids.Addrs()
	d.mu.Unlock()
	if d.udp != nil {
		d.udp.SetAddrs(addrs)
	}
	if d.raw != nil {
		d.raw.SetGIDs(addrs)
	}
	d.res.SetSources(nd.Addrs)
	if dev == nil {
		return
	}
	dev.SetPortState(nd.Up && nd.Running)
	if changed {
		dev.SetGIDs(entries)
		d.publish()
		d.mu.Lock()
		fs := slices.Collect(maps.Values(d.onGID))
		d.mu.Unlock()
		for _, f := range fs {
			f()
		}
	}
}

// OnGIDChange registers f to be called each time the netlink watch changes
// the device's GID table (its netdev gained or lost an address), after the
// verbs device has the new table and has posted IBV_EVENT_GID_CHANGE. f
// runs on the watch's goroutine and should not block; it may run once more
// after remove returns. rdmacm uses it to tell CM IDs whose address left
// the device (ADDR_CHANGE).
func (d *Device) OnGIDChange(f func()) (remove func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.onGID == nil {
		d.onGID = map[int]func(){}
	}
	d.onGIDSeq++
	k := d.onGIDSeq
	d.onGID[k] = f
	return func() {
		d.mu.Lock()
		delete(d.onGID, k)
		d.mu.Unlock()
	}
}

// publishedGIDs is the GID table a device's owner writes for control commands.
type publishedGIDs struct {
	PID     int            `json:"pid"`
	Updated time.Time      `json:"updated"`
	GIDs    []publishedGID `json:"gids"`
}

type publishedGID struct {
	Index  int    `json:"index"`
	GID    string `json:"gid"`
	Type   string `json:"type"`
	Netdev string `json:"netdev"`
}

// publish writes the current GID table for control commands to read.
func (d *Device) publish() {
	d.mu.Lock()
	entries := d.gids.Entries()
	d.mu.Unlock()
	pg := publishedGIDs{PID: os.Getpid(), Updated: time.Now()}
	for i, e := range entries {
		if e.GID.IsValid() {
			pg.GIDs = append(pg.GIDs, publishedGID{Index: i, GID: e.GID.String(), Type: e.Type.String(), Netdev: e.Netdev})
		}
	}
	b, _ := json.MarshalIndent(pg, "", "  ")
	// A temporary file of its own (rundir.WriteFile): Open and the netlink
	// watch may publish at once, and a reader must only ever see a whole table.
	rundir.WriteFile(filepath.Join(d.reg.devDir(), d.Def.Name+".gids"), b, 0o644)
}

// publishedOwner is OwnerOf for a user who may not open the owner's lock
// file: the PID in the device's published GID table, if that process is
// still alive (Close removes the table; a crashed owner's stays behind).
func (r *Registry) publishedOwner(name string) (Owner, bool) {
	b, err := rundir.ReadFile(filepath.Join(r.devDir(), name+".gids"))
	if err != nil {
		return Owner{}, false
	}
	var pg publishedGIDs
	if json.Unmarshal(b, &pg) != nil || pg.PID <= 0 {
		return Owner{}, false
	}
	cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pg.PID))
	if err != nil {
		return Owner{}, false
	}
	return Owner{PID: pg.PID, Command: strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))}, true
}

// Close stops the device, closes its links and releases its lock.
func (d *Device) Close() error {
	d.stopControl()
	var err error
	if d.Device != nil {
		err = d.Device.Close()
	}
	d.closeAll()
	return err
}

func (d *Device) closeAll() {
	d.stopControl()
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i].Close()
	}
	d.closers = nil
	d.wg.Wait()
	if d.lock != nil {
		os.Remove(filepath.Join(d.reg.devDir(), d.Def.Name+".gids"))
		d.lock.Close()
		d.lock = nil
	}
}

// GIDTableOf returns the GID table control commands show for a device: the
// owner's published table while a process has it open, else the table
// computed from the netdev's current addresses.
func (r *Registry) GIDTableOf(def DeviceDef) ([]verbs.GIDEntry, Netdev, error) {
	var nd Netdev
	err := InNetns(def.Netns, func() error {
		nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		defer nl.Close()
		nd, err = LookupNetdev(nl, def.Netdev)
		return err
	})
	if err != nil {
		return nil, nd, err
	}
	if _, busy := r.OwnerOf(def.Name); busy {
		if b, err := rundir.ReadFile(filepath.Join(r.devDir(), def.Name+".gids")); err == nil {
			var pg publishedGIDs
			if json.Unmarshal(b, &pg) == nil {
				var out []verbs.GIDEntry
				for _, g := range pg.GIDs {
					for len(out) <= g.Index {
						out = append(out, verbs.GIDEntry{})
					}
					a, _ := netip.ParseAddr(g.GID)
					t := verbs.GIDTypeRoCEv2
					if g.Type == verbs.GIDTypeRoCEv1.String() {
						t = verbs.GIDTypeRoCEv1
					}
					out[g.Index] = verbs.GIDEntry{GID: netip.AddrFrom16(a.As16()), Type: t, Netdev: g.Netdev}
				}
				return out, nd, nil
			}
		}
	}
	t := GIDTable{Versions: def.Versions, Netdev: nd.Name}
	t.Update(nd)
	return t.Entries(), nd, nil
}
