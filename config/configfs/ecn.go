package configfs

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/goroce/goroce/config"
)

// The ecn directory (with Options.ECN): each device's congestion control
// settings as files, laid out as MLNX_OFED's sysfs lays out a netdev's,
// /sys/class/net/<if>/ecn/roce_np/enable/<prio>,
// /sys/class/net/<if>/ecn/roce_rp/rpg_time_reset …, here
// DIR/ecn/<dev>/roce_np/enable/3 and DIR/ecn/<dev>/roce_rp/rpg_time_reset.
// They are not rdma_cm configfs attributes, so they have a tree of their
// own beside rdma_cm: every device of the registry has one (no mkdir), a
// file reads as sysfs's do ("300\n") and takes a decimal value with
// write(2); a value out of range is EINVAL, and Options.Refused hears why.

// ECNView is the device side of the ecn directory: which devices there
// are, which settings a port has and what they hold. config keeps the
// values, but the names and ranges are the device's (host's ECN
// parameters), which config does not import.
type ECNView interface {
	// Devices returns the names of the devices, sorted.
	Devices() ([]string, error)
	// Names returns the settings' names, paths below the device's
	// directory ("roce_np/enable/3", "roce_rp/rpg_time_reset").
	Names() []string
	// Get returns a setting of dev's port.
	Get(dev, name string) (uint32, error)
	// Set stores a setting of dev's port (and has a running device apply
	// it); an error says why, naming the valid values.
	Set(dev, name string, v uint32) error
}

const ecnDir = "ecn"

// ecnNode is a directory below DIR/ecn: ecn itself (p ""), a device
// (p "DEV"), or a directory of its settings (p "DEV/roce_np",
// "DEV/roce_np/enable").
type ecnNode struct {
	fs.Inode
	refusals
	f *fsys
	p string
}

// ecnAttr is one setting, p "DEV/NAME".
type ecnAttr struct {
	fs.Inode
	f *fsys
	p string
}

var (
	_ interface {
		fs.NodeLookuper
		fs.NodeReaddirer
		fs.NodeGetattrer
		fs.NodeSetattrer
	} = (*ecnNode)(nil)
	_ interface {
		fs.NodeGetattrer
		fs.NodeSetattrer
		fs.NodeOpener
		fs.NodeReader
		fs.NodeWriter
	} = (*ecnAttr)(nil)
)

// children lists what directory p holds: names, and whether each is a
// directory; ENOENT when p is none.
func (f *fsys) ecnChildren(p string) (map[string]bool, syscall.Errno) {
	devs, err := f.ecn.Devices()
	if err != nil {
		return nil, config.Errno(err)
	}
	out := map[string]bool{}
	if p == "" {
		for _, d := range devs {
			out[d] = true
		}
		return out, 0
	}
	dev, rest, _ := strings.Cut(p, "/")
	if !slices.Contains(devs, dev) {
		return nil, syscall.ENOENT
	}
	prefix := ""
	if rest != "" {
		prefix = rest + "/"
	}
	for _, n := range f.ecn.Names() {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		first, _, dir := strings.Cut(n[len(prefix):], "/")
		out[first] = out[first] || dir
	}
	if len(out) == 0 {
		return nil, syscall.ENOENT
	}
	return out, 0
}

func ecnPath(p string) string {
	if p == "" {
		return ecnDir
	}
	return ecnDir + "/" + p
}

func (f *fsys) ecnFill(out *fuse.Attr, p string, dir bool) {
	e := config.Entry{Name: path.Base(p), Mode: os.ModeDir | config.DirPerm, Nlink: 2}
	if !dir {
		e = config.Entry{Name: path.Base(p), Mode: 0o644, Size: 4096, Nlink: 1}
	}
	f.fill(out, e, f.ino(ecnPath(p)))
}

func (n *ecnNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if _, errno := n.f.ecnChildren(n.p); errno != 0 {
		return errno
	}
	n.f.ecnFill(&out.Attr, n.p, true)
	return 0
}

func (n *ecnNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return n.f.setattr(ctx, n, in, out)
}

// Mkdir and Rmdir: sysfs's directories come and go with the device.
func (n *ecnNode) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *ecnNode) Rmdir(context.Context, string) syscall.Errno { return syscall.EPERM }

func (n *ecnNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	kids, errno := n.f.ecnChildren(n.p)
	if errno != 0 {
		return nil, errno
	}
	dir, ok := kids[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	p := path.Join(n.p, name)
	n.f.ecnFill(&out.Attr, p, dir)
	id := fs.StableAttr{Mode: syscall.S_IFREG, Ino: n.f.ino(ecnPath(p))}
	var child fs.InodeEmbedder = &ecnAttr{f: n.f, p: p}
	if dir {
		id.Mode = syscall.S_IFDIR
		child = &ecnNode{f: n.f, p: p}
	}
	return n.NewInode(ctx, child, id), 0
}

func (n *ecnNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	kids, errno := n.f.ecnChildren(n.p)
	if errno != 0 {
		return nil, errno
	}
	parent := ""
	if n.p != "" {
		parent = ecnPath(strings.TrimSuffix(path.Dir(n.p), "."))
	}
	list := []fuse.DirEntry{
		{Name: ".", Mode: syscall.S_IFDIR, Ino: n.f.ino(ecnPath(n.p))},
		{Name: "..", Mode: syscall.S_IFDIR, Ino: n.f.ino(parent)},
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range kids {
			if !yield(k) {
				return
			}
		}
	}) {
		mode := uint32(syscall.S_IFREG)
		if kids[name] {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: name, Mode: mode, Ino: n.f.ino(ecnPath(path.Join(n.p, name)))})
	}
	return fs.NewListDirStream(list), 0
}

func (a *ecnAttr) split() (dev, name string) {
	dev, name, _ = strings.Cut(a.p, "/")
	return dev, name
}

func (a *ecnAttr) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	dev, name := a.split()
	if _, err := a.f.ecn.Get(dev, name); err != nil {
		return config.Errno(err)
	}
	a.f.ecnFill(&out.Attr, a.p, false)
	return 0
}

func (a *ecnAttr) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return a.f.setattr(ctx, a, in, out)
}

// Open opens a setting with direct I/O, so that each read shows the value
// stored now.
func (a *ecnAttr) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	dev, name := a.split()
	if _, err := a.f.ecn.Get(dev, name); err != nil {
		return nil, 0, config.Errno(err)
	}
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (a *ecnAttr) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	dev, name := a.split()
	v, err := a.f.ecn.Get(dev, name)
	if err != nil {
		return nil, config.Errno(err)
	}
	b := []byte(strconv.FormatUint(uint64(v), 10) + "\n")
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	b = b[off:]
	if len(b) > len(dest) {
		b = b[:len(dest)]
	}
	return fuse.ReadResultData(b), 0
}

// Write takes one decimal value per write(2), whitespace around it
// ignored, as sysfs's kstrtouint does; anything else, or a value the
// setting does not take, is EINVAL.
func (a *ecnAttr) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	dev, name := a.split()
	s := strings.TrimSpace(string(data))
	v, err := strconv.ParseUint(s, 10, 32)
	if err == nil {
		err = a.f.ecn.Set(dev, name, uint32(v))
	} else {
		err = fmt.Errorf("write %s/%s: %q is not a number: %w", ecnDir, a.p, s, syscall.EINVAL)
	}
	if err != nil {
		if a.f.refused != nil {
			a.f.refused(err)
		}
		return 0, config.Errno(err)
	}
	return uint32(len(data)), 0
}
