// Package host binds goroce's soft RDMA devices to the host's netdevs: the
// device registry in the runtime directory (GOROCE_RUNDIR, default
// /run/goroce), GID tables built from the netdevs' addresses and kept
// current through netlink, the link chosen per RoCE version, and Open,
// which starts a verbs.Device by name. It is the only package that joins
// the engine to real I/O.
package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/verbs"
)

// DefaultRunDir is where runtime state lives unless GOROCE_RUNDIR says otherwise.
const DefaultRunDir = "/run/goroce"

// RunDir returns the runtime directory: GOROCE_RUNDIR, or /run/goroce.
func RunDir() string {
	if d := os.Getenv("GOROCE_RUNDIR"); d != "" {
		return d
	}
	return DefaultRunDir
}

// Versions says which RoCE versions a device's port speaks.
type Versions string

// Port RoCE versions, as `roce link add … roce-versions` takes them.
const (
	VersionsBoth Versions = "both" // RoCE v1 and v2 (default: more than Linux rxe, which is v2 only)
	VersionsV1   Versions = "v1"   // RoCE v1 only, like an mlx4/ConnectX-3 port
	VersionsV2   Versions = "v2"   // RoCE v2 only, like Linux rxe
)

// ParseVersions checks a roce-versions value.
func ParseVersions(s string) (Versions, error) {
	switch v := Versions(s); v {
	case VersionsBoth, VersionsV1, VersionsV2:
		return v, nil
	case "":
		return VersionsBoth, nil
	}
	return "", &verbs.Error{Op: "roce-versions", Detail: fmt.Sprintf("roce-versions %q: valid values are v1, v2 and both", s), Err: syscall.EINVAL}
}

// V1 reports whether the port speaks RoCE v1.
func (v Versions) V1() bool { return v == VersionsBoth || v == VersionsV1 }

// V2 reports whether the port speaks RoCE v2.
func (v Versions) V2() bool { return v == VersionsBoth || v == VersionsV2 }

// RxPath says how a RoCE v2 port reads its packets, as `roce link add …
// rx-path` takes it.
type RxPath string

// The receive paths of a RoCE v2 port.
const (
	// RxDefault: the ring as root, the socket without.
	RxDefault RxPath = ""
	// RxRing reads from the netdev with an AF_PACKET socket and its ring
	// (root only): a busy poll's look is a load, not a system call, the
	// lowest latency, and the ICRC is verified over the real IP header.
	// Before Linux 6.2 the kernel cannot hand a packet socket a UDP GRO
	// superpacket, so there every packet travels the kernel's receive
	// path alone (on an Ethernet MTU, into a frame of its own).
	RxRing RxPath = "ring"
	// RxSocket reads from the port's UDP socket with UDP GRO: a look is a
	// system call, and a 64 KiB WRITE's packets cross the kernel as one or
	// two superpackets on every kernel (on a jumbo MTU before 6.2, the
	// only path that coalesces). The socket never shows an IPv4 packet's
	// Identification, which the ICRC covers: link/udp verifies the ICRC to
	// 16 of its bits (idsolve.go), where the ring verifies all 32.
	RxSocket RxPath = "socket"
	// RxXDP reads from the netdev through an AF_XDP socket that an XDP
	// program feeds (root only; link/xsk): the packet skips the kernel's
	// receive path up to the taps, which in the lab's VMs halved the
	// guest kernel's time per packet against the ring. A look is a load,
	// as the ring's; the ICRC is verified over the real IP header. It
	// owns the netdev's XDP hook (one process per netdev) and reads
	// receive queue 0 (a netdev of one queue), in frames of at most MTU
	// 3826; on a driver without XDP (generic mode) a GSO or GRO
	// superpacket fits no frame and is dropped.
	RxXDP RxPath = "xdp"
)

// ParseRxPath checks an rx-path value, as `roce link add … rx-path`
// takes it (RxDefault is no value).
func ParseRxPath(s string) (RxPath, error) {
	switch p := RxPath(s); p {
	case RxRing, RxSocket, RxXDP:
		return p, nil
	}
	return "", &verbs.Error{Op: "rx-path", Detail: fmt.Sprintf("rx-path %q: valid values are ring, socket and xdp", s), Err: syscall.EINVAL}
}

// CheckRxPath checks that a device whose port speaks v can have rx-path p.
func CheckRxPath(v Versions, p RxPath) error {
	if p == RxDefault {
		return nil
	}
	if _, err := ParseRxPath(string(p)); err != nil {
		return err
	}
	if v != VersionsV2 {
		return &verbs.Error{Op: "rx-path", Err: syscall.EINVAL,
			Detail: fmt.Sprintf("rx-path %s needs roce-versions v2: a port that speaks RoCE v1 (roce-versions %s) reads every frame from the netdev with AF_PACKET", p, v)}
	}
	return nil
}

// DeviceDef is a device definition, as `roce link add` records it.
type DeviceDef struct {
	Name     string   `json:"name"`
	Type     string   `json:"type"` // "rxe"
	Netdev   string   `json:"netdev"`
	Netns    Netns    `json:"netns"`
	Versions Versions `json:"roce_versions"`
	// Rx is how a RoCE v2-only port receives; RxDefault for the others,
	// which read every frame from the netdev (link/afpacket).
	Rx      RxPath    `json:"rx_path,omitempty"`
	Created time.Time `json:"created"`
}

// Registry is the set of device definitions in a runtime directory.
type Registry struct {
	Dir string
}

// NewRegistry returns the registry in dir (created on first change).
func NewRegistry(dir string) *Registry { return &Registry{Dir: dir} }

func (r *Registry) devDir() string { return filepath.Join(r.Dir, "devices") }

func (r *Registry) path(name string) string { return filepath.Join(r.devDir(), name+".json") }

// ValidName checks a device name: a letter, then letters, digits, _ . -,
// at most 63 (the kernel's IB_DEVICE_NAME_MAX is 64 with the NUL).
func ValidName(name string) error {
	if !rundir.ValidName(name) {
		return &verbs.Error{Op: "device name", Err: syscall.EINVAL,
			Detail: fmt.Sprintf("device name %q: use a letter followed by letters, digits, '_', '.' or '-' (at most 63)", name)}
	}
	return nil
}

// lock takes the registry's lock for a change.
func (r *Registry) lock() (func(), error) {
	if err := rundir.MkdirAll(r.Dir, r.devDir()); err != nil {
		return nil, err
	}
	f, err := rundir.OpenLock(filepath.Join(r.devDir(), ".lock"))
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Add records a new device. A second device on the same netdev of the same
// namespace is EEXIST (the kernel: "rdma_rxe: already configured on eth0"),
// and so is a name in use.
func (r *Registry) Add(d DeviceDef) error {
	if err := ValidName(d.Name); err != nil {
		return err
	}
	if d.Type != "rxe" {
		return &verbs.Error{Op: "link add", Device: d.Name, Detail: fmt.Sprintf("device type %q: the only type is rxe", d.Type), Err: syscall.EINVAL}
	}
	var bad *verbs.Error
	if errors.As(CheckRxPath(d.Versions, d.Rx), &bad) {
		return &verbs.Error{Op: "link add", Device: d.Name, Detail: bad.Detail, Err: bad.Err}
	}
	unlock, err := r.lock()
	if err != nil {
		return &verbs.Error{Op: "link add", Device: d.Name, Err: err}
	}
	defer unlock()
	defs, err := r.list()
	if err != nil {
		return &verbs.Error{Op: "link add", Device: d.Name, Err: err}
	}
	for _, o := range defs {
		if o.Name == d.Name {
			return &verbs.Error{Op: "link add", Device: d.Name, Err: syscall.EEXIST,
				Detail: fmt.Sprintf("device %s already exists (on netdev %s%s)", d.Name, o.Netdev, o.Netns.suffix())}
		}
		if o.Netdev == d.Netdev && o.Netns.Same(d.Netns) {
			return &verbs.Error{Op: "link add", Device: d.Name, Err: syscall.EEXIST,
				Detail: fmt.Sprintf("netdev %s%s already has device %s", d.Netdev, d.Netns.suffix(), o.Name)}
		}
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err == nil {
		err = rundir.WriteFile(r.path(d.Name), append(b, '\n'), 0o644)
	}
	if err != nil {
		return &verbs.Error{Op: "link add", Device: d.Name, Err: err}
	}
	return nil
}

// Delete removes a device definition; ENODEV when there is none, EBUSY
// while a process runs the device (checked under the registry lock, so no
// process can open it in between).
func (r *Registry) Delete(name string) error {
	unlock, err := r.lock()
	if err != nil {
		return &verbs.Error{Op: "link delete", Device: name, Err: err}
	}
	defer unlock()
	if ow, busy := r.OwnerOf(name); busy {
		return &verbs.Error{Op: "link delete", Device: name, Err: syscall.EBUSY,
			Detail: fmt.Sprintf("device %s is in use by process %d (%s); stop it first", name, ow.PID, ow.Command)}
	}
	if err := os.Remove(r.path(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &verbs.Error{Op: "link delete", Device: name, Detail: "no such device", Err: syscall.ENODEV}
		}
		return &verbs.Error{Op: "link delete", Device: name, Err: err}
	}
	for _, ext := range []string{".gids", ".owner"} {
		os.Remove(filepath.Join(r.devDir(), name+ext))
	}
	return nil
}

// Get returns a device definition; ENODEV when there is none.
func (r *Registry) Get(name string) (DeviceDef, error) {
	var d DeviceDef
	b, err := rundir.ReadFile(r.path(name))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return d, &verbs.Error{Op: "get", Device: name, Err: syscall.ENODEV,
				Detail: fmt.Sprintf("device %s is not in %s (roce link show lists the devices there)", name, r.Dir)}
		}
		return d, &verbs.Error{Op: "get", Device: name, Err: err}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, &verbs.Error{Op: "get", Device: name, Err: syscall.EIO,
			Detail: fmt.Sprintf("corrupt definition %s: %v", r.path(name), err)}
	}
	return d, nil
}

// ConfigDevice returns what config's rdma_cm tree needs to know of a
// device: its name, creation time and RoCE versions (config.Registry, so
// config.Open(dir, host.NewRegistry(dir)) serves the registry's devices).
// ENODEV when there is none; EINVAL for a definition whose roce_versions
// is not one ParseVersions takes.
func (r *Registry) ConfigDevice(name string) (config.Device, error) {
	def, err := r.Get(name)
	if err != nil {
		return config.Device{}, err
	}
	v, err := ParseVersions(string(def.Versions))
	if err != nil {
		return config.Device{}, &verbs.Error{Op: "get", Device: name, Err: err}
	}
	return config.Device{Name: def.Name, Created: def.Created, RoCEv1: v.V1(), RoCEv2: v.V2()}, nil
}

// List returns every device definition, by name.
func (r *Registry) List() ([]DeviceDef, error) {
	defs, err := r.list()
	if err != nil {
		return nil, &verbs.Error{Op: "list", Err: err}
	}
	return defs, nil
}

func (r *Registry) list() ([]DeviceDef, error) {
	ents, err := os.ReadDir(r.devDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []DeviceDef
	for _, e := range ents {
		n := e.Name()
		if !strings.HasSuffix(n, ".json") {
			continue
		}
		d, err := r.Get(strings.TrimSuffix(n, ".json"))
		if err != nil {
			// One unreadable definition must not hide the others.
			fmt.Fprintf(os.Stderr, "goroce: skipping %s: %v\n", n, err)
			continue
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
