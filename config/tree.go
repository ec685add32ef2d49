// Package config is goroce's rdma_cm configfs tree: per device port, the
// RoCE mode and the IP ToS that RDMA CM uses for new connections
// (default_roce_mode, default_roce_tos), with the contract of Linux's
// drivers/infiniband/core/cma_configfs.c — the same paths, values, error
// numbers and quirks, as recorded on Linux 6.1 in the lab
// (KERNEL-BEHAVIOUR.md):
//
//	rdma_cm/                     lists the device directories made with mkdir
//	rdma_cm/<dev>/               mkdir: ENODEV unless <dev> is a goroce device, EEXIST twice
//	rdma_cm/<dev>/ports/<N>/     made with it, one per port (goroce: 1); mkdir/rmdir → EPERM
//	    default_roce_mode        "RoCE v2\n" or "IB/RoCE v1\n"; a mode the port lacks → EINVAL
//	    default_roce_tos         0..255 in kstrtou8 syntax; "256" → ERANGE; "-1", "abc" → EINVAL
//
// The values belong to the device, not to the directory: rmdir keeps them
// (mkdir again shows them), and RDMA CM reads them whether or not the
// directory exists (DefaultMode, DefaultTOS). They last as long as the
// device: a device deleted and added again starts from the defaults — RoCE
// v2 if the port speaks it, else RoCE v1 (cma_add_one), and ToS 0.
//
// The state lives in the runtime directory (GOROCE_RUNDIR), shared by every
// process and gone when the host restarts (/run is a tmpfs):
//
//	<rundir>/config/rdma_cm/.lock                   flock(2): writers take it
//	<rundir>/config/rdma_cm/<dev>/configfs_dir      present while rdma_cm/<dev> exists: its mkdir time (ns)
//	<rundir>/config/rdma_cm/<dev>/instance          which device the values belong to: its creation time, versions
//	<rundir>/config/rdma_cm/<dev>/ports/1/default_roce_mode, default_roce_tos
//	                                                a value as the attribute shows it; absent: the default
//
// Writers change a file by rename(2) under the lock, so readers never lock
// and never see half a value; every read goes to the files, so it shows
// what the last write left, whichever process wrote it.
//
// config/configfs serves the tree as a file system at any mount point.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/wire"
)

const (
	// Ports is the number of ports of a goroce device (phys_port_cnt 1),
	// so ports/1 is the only port directory.
	Ports = 1

	// The attributes of a port directory.
	AttrMode = "default_roce_mode"
	AttrTOS  = "default_roce_tos"

	// AttrSize is the size stat reports for an attribute: configfs says
	// PAGE_SIZE whatever the value.
	AttrSize = 4096

	// MaxWrite is how many bytes of one write(2) configfs hands to an
	// attribute (SIMPLE_ATTR_SIZE - 1, fs/configfs/file.c); WriteFile
	// ignores the rest, as the kernel does.
	MaxWrite = 4095

	// Permissions as configfs gives them.
	DirPerm  fs.FileMode = 0o755
	AttrPerm fs.FileMode = 0o644
)

// State files of a device in the runtime directory.
const (
	dirMarker = "configfs_dir"
	instance  = "instance"
	lockFile  = ".lock"
)

// Tree is the rdma_cm tree of one runtime directory. It holds no state of
// its own: any number of Trees, in any number of processes, share the
// runtime directory's, and all its methods may be called concurrently.
type Tree struct {
	reg    Registry
	rundir string // the runtime directory
	root   string // <rundir>/config/rdma_cm
}

// Open returns the tree of the runtime directory rundir, whose device
// registry, reg, says which devices exist (host.NewRegistry(rundir)).
// Nothing is created until a change.
func Open(rundir string, reg Registry) *Tree {
	return &Tree{reg: reg, rundir: rundir, root: filepath.Join(rundir, "config", "rdma_cm")}
}

// StateDir is where the tree keeps its state: <rundir>/config/rdma_cm.
func (t *Tree) StateDir() string { return t.root }

// Entry describes a file or directory of the tree, as stat(2) on configfs
// shows it.
type Entry struct {
	Name    string      // base name; "rdma_cm" for the tree's root
	Mode    fs.FileMode // fs.ModeDir|DirPerm or AttrPerm
	Size    int64       // AttrSize for an attribute, 0 for a directory
	Nlink   uint32      // a directory's: 2 + its subdirectories; an attribute's: 1
	ModTime time.Time   // when the device directory was made (rdma_cm: its state directory's mtime; zero before any state)
	Gen     uint64      // identifies the mkdir that made the device directory; 0 for rdma_cm
}

// IsDir reports whether the entry is a directory.
func (e Entry) IsDir() bool { return e.Mode.IsDir() }

// kind is the role of a path in the tree.
type kind uint8

const (
	kindRoot  kind = iota // rdma_cm
	kindDev               // rdma_cm/<dev>
	kindPorts             // rdma_cm/<dev>/ports
	kindPort              // rdma_cm/<dev>/ports/<N>
	kindAttr              // rdma_cm/<dev>/ports/<N>/<attribute>
)

// node is a resolved path.
type node struct {
	kind kind
	path string // cleaned, relative to rdma_cm; "" for rdma_cm
	dev  string
	port int
	attr string
}

// configfsPath is n's path below the configfs mount, for messages.
func configfsPath(rel string) string {
	if rel == "" {
		return "rdma_cm"
	}
	return "rdma_cm/" + rel
}

// cleanPath makes p (relative to rdma_cm; leading or trailing slashes and
// dot components allowed) canonical and splits it.
func cleanPath(p string) (string, []string) {
	c := path.Clean("/" + p)
	if c == "/" {
		return "", nil
	}
	return c[1:], strings.Split(c[1:], "/")
}

func (t *Tree) fail(op string, n node, err error, detail string, args ...any) error {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	return &Error{Op: op, Path: configfsPath(n.path), Dev: n.dev, Port: n.port, Detail: detail, Err: err}
}

// marker reports whether rdma_cm/dev exists, and if so its generation
// (the mkdir time in nanoseconds).
func (t *Tree) marker(dev string) (gen uint64, ok bool, err error) {
	if !rundir.ValidName(dev) {
		return 0, false, nil
	}
	b, err := rundir.ReadFile(filepath.Join(t.root, dev, dirMarker))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	gen, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("corrupt %s: %w", filepath.Join(t.root, dev, dirMarker), syscall.EIO)
	}
	return gen, true, nil
}

// resolve looks p up as the VFS would: ENOENT for the first missing
// component, ENOTDIR for a component below an attribute.
func (t *Tree) resolve(op, p string) (node, Entry, error) {
	clean, parts := cleanPath(p)
	n := node{path: clean}
	if len(parts) == 0 {
		devs, err := t.List()
		if err != nil {
			return n, Entry{}, err
		}
		e := Entry{Name: "rdma_cm", Mode: fs.ModeDir | DirPerm, Nlink: 2 + uint32(len(devs))}
		if fi, err := os.Stat(t.root); err == nil {
			e.ModTime = fi.ModTime()
		}
		return n, e, nil
	}
	n.kind, n.dev = kindDev, parts[0]
	gen, ok, err := t.marker(n.dev)
	if err != nil {
		return n, Entry{}, t.fail(op, n, err, "")
	}
	if !ok {
		return n, Entry{}, t.fail(op, n, syscall.ENOENT, "")
	}
	dir := func(name string, subdirs int) Entry {
		return Entry{Name: name, Mode: fs.ModeDir | DirPerm, Nlink: 2 + uint32(subdirs),
			ModTime: time.Unix(0, int64(gen)), Gen: gen}
	}
	e := dir(n.dev, 1)
	for _, name := range parts[1:] {
		if n.kind == kindAttr {
			return n, Entry{}, t.fail(op, n, syscall.ENOTDIR, "")
		}
		switch n.kind {
		case kindDev:
			ok = name == "ports"
			n.kind, e = kindPorts, dir(name, Ports)
		case kindPorts:
			port, err := strconv.Atoi(name)
			ok = err == nil && port >= 1 && port <= Ports && name == strconv.Itoa(port)
			n.kind, n.port, e = kindPort, port, dir(name, 0)
		case kindPort:
			ok = name == AttrMode || name == AttrTOS
			n.kind, n.attr = kindAttr, name
			e = Entry{Name: name, Mode: AttrPerm, Size: AttrSize, Nlink: 1, ModTime: e.ModTime, Gen: gen}
		}
		if !ok {
			return n, Entry{}, t.fail(op, node{path: clean, dev: n.dev}, syscall.ENOENT, "")
		}
	}
	return n, e, nil
}

// Stat describes the file or directory at p, a path relative to rdma_cm
// ("" is rdma_cm itself, "rxe0/ports/1/default_roce_tos" an attribute).
func (t *Tree) Stat(p string) (Entry, error) {
	_, e, err := t.resolve("stat", p)
	return e, err
}

// List returns the device directories, rdma_cm/<dev>, by name. A device
// deleted since its directory was made stays listed, as in the kernel
// (its attributes then fail with ENODEV), until rmdir.
func (t *Tree) List() ([]string, error) {
	ents, err := os.ReadDir(t.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &Error{Op: "readdir", Path: "rdma_cm", Err: err}
	}
	var devs []string
	for _, de := range ents {
		if !de.IsDir() {
			continue
		}
		if _, ok, err := t.marker(de.Name()); err != nil {
			return nil, &Error{Op: "readdir", Path: "rdma_cm", Dev: de.Name(), Err: err}
		} else if ok {
			devs = append(devs, de.Name())
		}
	}
	return devs, nil
}

// ReadDir lists the directory at p, by name.
func (t *Tree) ReadDir(p string) ([]Entry, error) {
	n, e, err := t.resolve("readdir", p)
	if err != nil {
		return nil, err
	}
	if !e.IsDir() {
		return nil, t.fail("readdir", n, syscall.ENOTDIR, "")
	}
	var names []string
	switch n.kind {
	case kindRoot:
		if names, err = t.List(); err != nil {
			return nil, err
		}
	case kindDev:
		names = []string{"ports"}
	case kindPorts:
		for p := 1; p <= Ports; p++ {
			names = append(names, strconv.Itoa(p))
		}
	case kindPort:
		names = []string{AttrMode, AttrTOS}
	}
	var out []Entry
	for _, name := range names {
		// A directory removed meanwhile is left out, as getdents would.
		if ce, err := t.Stat(n.path + "/" + name); err == nil {
			out = append(out, ce)
		} else if !errors.Is(err, syscall.ENOENT) {
			return nil, err
		}
	}
	return out, nil
}

// Mkdir makes the directory p. Only device directories, rdma_cm/<dev>,
// can be made, and only for a device of the registry: ENODEV ("No such
// device") for any other name, EEXIST when it exists. The port directories
// come with it; making anything below it is EPERM, as configfs refuses a
// group without make_group.
func (t *Tree) Mkdir(p string) error {
	clean, parts := cleanPath(p)
	n := node{path: clean}
	if len(parts) == 1 {
		return t.mkdirDev(parts[0])
	}
	if len(parts) == 0 {
		return t.fail("mkdir", n, syscall.EEXIST, "")
	}
	pn, pe, err := t.resolve("mkdir", path.Dir(clean))
	if err != nil {
		return t.fail("mkdir", node{path: clean, dev: pn.dev}, Errno(err), "")
	}
	n.dev = pn.dev
	if !pe.IsDir() {
		return t.fail("mkdir", n, syscall.ENOTDIR, "")
	}
	if _, _, err := t.resolve("mkdir", clean); err == nil {
		return t.fail("mkdir", n, syscall.EEXIST, "")
	}
	return t.fail("mkdir", n, syscall.EPERM,
		"only rdma_cm/<device> can be made; the port directories come with it, one per port (goroce devices have port 1 only)")
}

func (t *Tree) mkdirDev(dev string) error {
	n := node{kind: kindDev, path: dev, dev: dev}
	unlock, err := t.lock()
	if err != nil {
		return t.fail("mkdir", n, err, "")
	}
	defer unlock()
	// The VFS finds an existing name before the file system is asked.
	if _, ok, err := t.marker(dev); err != nil {
		return t.fail("mkdir", n, err, "")
	} else if ok {
		return t.fail("mkdir", n, syscall.EEXIST, "")
	}
	if _, err := t.device("mkdir", n); err != nil {
		return err
	}
	gen := time.Now().UnixNano()
	if err := t.writeFile(filepath.Join(t.root, dev, dirMarker), strconv.FormatInt(gen, 10)+"\n"); err != nil {
		return t.fail("mkdir", n, err, "")
	}
	return nil
}

// Rmdir removes the directory p. Only device directories can be removed
// (the port directories are the kernel's: EPERM); the values stay, and
// mkdir shows them again.
func (t *Tree) Rmdir(p string) error {
	n, e, err := t.resolve("rmdir", p)
	if err != nil {
		return err
	}
	switch {
	case n.kind == kindRoot:
		return t.fail("rmdir", n, syscall.EPERM, "rdma_cm is the kernel module's")
	case !e.IsDir():
		return t.fail("rmdir", n, syscall.ENOTDIR, "")
	case n.kind != kindDev:
		return t.fail("rmdir", n, syscall.EPERM,
			"the port directories belong to rdma_cm/%s: rmdir that instead", n.dev)
	}
	unlock, err := t.lock()
	if err != nil {
		return t.fail("rmdir", n, err, "")
	}
	defer unlock()
	if err := os.Remove(filepath.Join(t.root, n.dev, dirMarker)); errors.Is(err, fs.ErrNotExist) {
		return t.fail("rmdir", n, syscall.ENOENT, "")
	} else if err != nil {
		return t.fail("rmdir", n, err, "")
	}
	return nil
}

// ReadFile returns what reading the attribute at p shows: "RoCE v2\n",
// "IB/RoCE v1\n", or the ToS in decimal and a newline. ENOENT without the
// device directory; ENODEV when the device is gone (cma_configfs_params_get).
func (t *Tree) ReadFile(p string) ([]byte, error) {
	n, e, err := t.resolve("read", p)
	if err != nil {
		return nil, err
	}
	if e.IsDir() {
		return nil, t.fail("read", n, syscall.EISDIR, "")
	}
	def, err := t.device("read", n)
	if err != nil {
		return nil, err
	}
	switch n.attr {
	case AttrMode:
		m, err := t.loadMode(def)
		if err != nil {
			return nil, t.fail("read", n, err, "")
		}
		return []byte(FormatMode(m)), nil
	default:
		tos, err := t.loadTOS(def)
		if err != nil {
			return nil, t.fail("read", n, err, "")
		}
		return []byte(FormatTOS(tos)), nil
	}
}

// WriteFile stores data, the bytes of one write(2), in the attribute at p,
// with the kernel's checks in the kernel's order, and changes nothing when
// one fails:
//
//   - ENOENT when the device directory is gone (configfs: a dead fragment);
//   - default_roce_mode: ENODEV when the device is gone, then EINVAL unless
//     data is "IB/RoCE v1" or "RoCE v2" (ParseMode) and the port speaks it;
//   - default_roce_tos: EINVAL or ERANGE unless data is 0..255 (ParseTOS),
//     then ENODEV when the device is gone.
//
// Only the first MaxWrite bytes of data count, as in configfs.
func (t *Tree) WriteFile(p string, data []byte) error {
	n, e, err := t.resolve("write", p)
	if err != nil {
		return err
	}
	if e.IsDir() {
		return t.fail("write", n, syscall.EISDIR, "")
	}
	if len(data) > MaxWrite {
		data = data[:MaxWrite]
	}
	var tos uint8
	if n.attr == AttrTOS {
		// default_roce_tos_store parses before it looks the device up.
		if tos, err = ParseTOS(data); err != nil {
			return t.fail("write", n, err, "")
		}
	}
	unlock, err := t.lock()
	if err != nil {
		return t.fail("write", n, err, "")
	}
	defer unlock()
	if gen, ok, err := t.marker(n.dev); err != nil {
		return t.fail("write", n, err, "")
	} else if !ok || gen != e.Gen {
		return t.fail("write", n, syscall.ENOENT, "rdma_cm/%s was removed", n.dev)
	}
	def, err := t.device("write", n)
	if err != nil {
		return err
	}
	if n.attr == AttrTOS {
		return t.storeTOS("write", n, def, tos)
	}
	m, err := ParseMode(data)
	if err != nil {
		return t.fail("write", n, syscall.EINVAL, "%s is not a RoCE mode: %s port %d: %s",
			quote(data), n.dev, n.port, validModes(def))
	}
	return t.storeMode("write", n, def, m)
}

// attrPath is the path of a port attribute, relative to rdma_cm.
func attrPath(dev string, port int, attr string) string {
	return fmt.Sprintf("%s/ports/%d/%s", dev, port, attr)
}

// checkDevName keeps a device name from being read as a path.
func checkDevName(op, dev string, port int, attr string) error {
	if !rundir.ValidName(dev) {
		return &Error{Op: op, Path: configfsPath(attrPath(dev, port, attr)), Dev: dev, Port: port, Err: syscall.ENOENT}
	}
	return nil
}

// ReadMode reads rdma_cm/<dev>/ports/<port>/default_roce_mode:
// "RoCE v2\n" or "IB/RoCE v1\n". Like the file, it needs the device
// directory (ENOENT without it); DefaultMode does not.
func (t *Tree) ReadMode(dev string, port int) (string, error) { return t.readAttr(dev, port, AttrMode) }

// WriteMode writes data to rdma_cm/<dev>/ports/<port>/default_roce_mode:
// "RoCE v2" or "IB/RoCE v1", with or without one newline, and only a mode
// the port speaks; anything else is EINVAL, naming the port's modes, and
// changes nothing. See WriteFile.
func (t *Tree) WriteMode(dev string, port int, data []byte) error {
	return t.writeAttr(dev, port, AttrMode, data)
}

// ReadTOS reads rdma_cm/<dev>/ports/<port>/default_roce_tos: the ToS in
// decimal and a newline. It needs the device directory; DefaultTOS does not.
func (t *Tree) ReadTOS(dev string, port int) (string, error) { return t.readAttr(dev, port, AttrTOS) }

// WriteTOS writes data to rdma_cm/<dev>/ports/<port>/default_roce_tos: 0..255
// as kstrtou8 reads it (ParseTOS); ERANGE above 255, EINVAL for anything
// else, and then nothing changes. See WriteFile.
func (t *Tree) WriteTOS(dev string, port int, data []byte) error {
	return t.writeAttr(dev, port, AttrTOS, data)
}

// readAttr reads one attribute file of a port, the device name checked first.
func (t *Tree) readAttr(dev string, port int, attr string) (string, error) {
	if err := checkDevName("read", dev, port, attr); err != nil {
		return "", err
	}
	b, err := t.ReadFile(attrPath(dev, port, attr))
	return string(b), err
}

// writeAttr writes one attribute file of a port, the device name checked first.
func (t *Tree) writeAttr(dev string, port int, attr string, data []byte) error {
	if err := checkDevName("write", dev, port, attr); err != nil {
		return err
	}
	return t.WriteFile(attrPath(dev, port, attr), data)
}

// portNode is the node of dev's port attribute attr.
func portNode(dev string, port int, attr string) node {
	return node{kind: kindAttr, path: attrPath(dev, port, attr), dev: dev, port: port, attr: attr}
}

// portDevice is the node of dev's port attribute attr and the registry's
// definition of dev: ENODEV for a device not in the registry (device),
// EINVAL for a port it lacks (portOf).
func (t *Tree) portDevice(op, dev string, port int, attr string) (node, Device, error) {
	n := portNode(dev, port, attr)
	def, err := t.device(op, n)
	if err != nil {
		return n, def, err
	}
	return n, def, t.portOf(op, n)
}

// setPort runs set for dev's port attribute attr under the tree's lock,
// once the device and port are known (portDevice).
func (t *Tree) setPort(dev string, port int, attr string, set func(n node, def Device) error) error {
	unlock, err := t.lock()
	if err != nil {
		return t.fail("set", portNode(dev, port, attr), err, "")
	}
	defer unlock()
	n, def, err := t.portDevice("set", dev, port, attr)
	if err != nil {
		return err
	}
	return set(n, def)
}

// portOf checks a port number as the kernel's cma_get/set_default_*
// do: EINVAL unless the device has it.
func (t *Tree) portOf(op string, n node) error {
	if n.port < 1 || n.port > Ports {
		return t.fail(op, n, syscall.EINVAL, "port %d: goroce devices have one port, port 1", n.port)
	}
	return nil
}

// DefaultMode is the RoCE mode RDMA CM uses for new connections on the
// port: the GID type it looks for in the port's GID table
// (cma_get_default_gid_type). It needs no device directory. ENODEV for a
// device not in the registry; EINVAL for a port it lacks.
func (t *Tree) DefaultMode(dev string, port int) (wire.Version, error) {
	n, def, err := t.portDevice("get", dev, port, AttrMode)
	if err != nil {
		return 0, err
	}
	m, err := t.loadMode(def)
	if err != nil {
		return 0, t.fail("get", n, err, "")
	}
	return m, nil
}

// SetDefaultMode sets the port's RoCE mode (cma_set_default_gid_type),
// with or without the device directory: EINVAL for a mode the port does
// not speak, naming those it does.
func (t *Tree) SetDefaultMode(dev string, port int, m wire.Version) error {
	return t.setPort(dev, port, AttrMode, func(n node, def Device) error {
		return t.storeMode("set", n, def, m)
	})
}

// DefaultTOS is the IP ToS (IPv6 traffic class) RDMA CM gives new
// connections on the port (cma_get_default_roce_tos). It needs no device
// directory.
func (t *Tree) DefaultTOS(dev string, port int) (uint8, error) {
	n, def, err := t.portDevice("get", dev, port, AttrTOS)
	if err != nil {
		return 0, err
	}
	tos, err := t.loadTOS(def)
	if err != nil {
		return 0, t.fail("get", n, err, "")
	}
	return tos, nil
}

// SetDefaultTOS sets the port's ToS (cma_set_default_roce_tos), with or
// without the device directory.
func (t *Tree) SetDefaultTOS(dev string, port int, tos uint8) error {
	return t.setPort(dev, port, AttrTOS, func(n node, def Device) error {
		return t.storeTOS("set", n, def, tos)
	})
}

// device returns the registry's definition of n.dev: ENODEV when there is
// none (cma_configfs_params_get finds no cma_device of that name).
func (t *Tree) device(op string, n node) (Device, error) {
	if !rundir.ValidName(n.dev) {
		return Device{}, t.fail(op, n, syscall.ENODEV, "%s is not a goroce device name", strconv.Quote(n.dev))
	}
	def, err := t.reg.ConfigDevice(n.dev)
	if errors.Is(err, syscall.ENODEV) {
		return def, t.fail(op, n, syscall.ENODEV,
			"no goroce device %s in %s (roce link show lists the devices there)", n.dev, t.rundir)
	}
	if err != nil {
		return def, t.fail(op, n, err, "")
	}
	return def, nil
}
