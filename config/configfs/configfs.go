// Package configfs serves a config.Tree as a file system, with FUSE
// (github.com/hanwen/go-fuse), so that the Linux procedure for the rdma_cm
// configfs tree works on goroce devices word for word, at any mount point:
//
//	mkdir DIR/rdma_cm/rxe0
//	cat DIR/rdma_cm/rxe0/ports/1/default_roce_mode
//	echo "IB/RoCE v1" > DIR/rdma_cm/rxe0/ports/1/default_roce_mode   # write error: Invalid argument, on rxe
//
// Every operation goes to the tree, so the errors are the kernel's errnos,
// returned by the system call that configfs fails: mkdir(2), rmdir(2),
// and write(2) for a bad value. Nothing is cached (entry and attribute
// timeouts are 0, attributes are read with direct I/O), so every read shows
// what the last write left, from whatever process. The files look as in
// configfs: directories 0755, attributes 0644 of size 4096, owned by the
// user who mounted.
//
// Truncation (O_TRUNC, which the shell's > uses, or truncate(2)) and
// touch change nothing, as in configfs; each write(2) is one store of its
// first 4095 bytes, whatever the offset, as in configfs. Where this view
// differs:
//   - chmod and chown are EPERM, where configfs would keep the new mode in
//     memory.
//   - A zero-byte write(2) never reaches a FUSE server (the kernel answers
//     0), where configfs says EINVAL.
//   - One read(2) at offset 0 reads the value afresh, where configfs reads
//     once per open file; a read at a later offset continues the value read
//     at offset 0, so a value is never seen torn.
//
// The errno is all a writer learns ("write error: Invalid argument"), as
// with the kernel; the server learns more: Options.Refused hears the
// tree's error for each refused write, whose message names the valid
// values, for the serving process to print.
package configfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/goroce/goroce/config"
)

// Server is a mounted view of a tree.
type Server struct {
	dir    string
	srv    *fuse.Server
	direct bool   // mounted with mount(2), not fusermount
	conn   string // the FUSE connection's number in /sys/fs/fuse/connections ("" if unknown)
}

// UnmountWait bounds each of Unmount's two waits for the FUSE server to
// stop: after the unmount, and after aborting the connection.
const UnmountWait = 3 * time.Second

// Options tune a mount; the zero value is a plain mount.
type Options struct {
	// Refused, if set, is called with the tree's error for each write(2)
	// the tree refuses — a *config.Error, whose message says why and names
	// the valid values — just before write(2) fails with its errno, which
	// it does not change. It runs on the goroutine serving the write, so
	// it must not block: the writer waits meanwhile.
	Refused func(err error)
	// ECN, if set, adds DIR/ecn: each device's congestion control
	// settings as files, as MLNX_OFED's sysfs shows them (ecn.go).
	ECN ECNView
}

// Mount serves tree at dir, an existing directory: dir/rdma_cm is the
// tree's rdma_cm. As root it mounts with mount(2) itself, so no fusermount
// is needed, and lets every user read (allow_other, with the kernel
// checking the modes: default_permissions); otherwise, or when that fails,
// it uses fusermount3 or fusermount if installed. Unmount, or umount(8)
// on dir, ends it.
func Mount(dir string, tree *config.Tree) (*Server, error) {
	return MountWith(dir, tree, Options{})
}

// MountWith is Mount with options.
func MountWith(dir string, tree *config.Tree, o Options) (*Server, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, &os.PathError{Op: "mount", Path: abs, Err: syscall.ENOTDIR}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("mount %s: FUSE is missing (modprobe fuse): %w", abs, err)
	}
	srv, err := mount(abs, tree, o, true)
	if err == nil {
		return &Server{dir: abs, srv: srv, direct: true, conn: fuseConn(abs)}, nil
	}
	directErr := err
	if _, lerr := fusermount(); lerr != nil {
		hint := ""
		if os.Geteuid() != 0 {
			hint = " (only root can mount without fusermount: apt-get install fuse3)"
		}
		return nil, fmt.Errorf("mount %s%s: %w", abs, hint, directErr)
	}
	srv, err = mount(abs, tree, o, false)
	if err != nil {
		return nil, fmt.Errorf("mount %s: mount(2): %v; fusermount: %w", abs, directErr, err)
	}
	return &Server{dir: abs, srv: srv, conn: fuseConn(abs)}, nil
}

// fuseConn returns the number of the FUSE connection mounted at dir: the
// minor device number the mount table gives it (/proc/self/mountinfo's
// third field, "0:52"), which names its directory in fusectl.
func fuseConn(dir string) string {
	conn := ""
	for _, c := range mountsAt(dir) {
		conn = c // the last mount at dir is the one on top
	}
	return conn
}

// fuseConnMounted reports whether connection conn is still mounted at dir
// in this process's mount namespace.
func fuseConnMounted(dir, conn string) bool {
	for _, c := range mountsAt(dir) {
		if c == conn {
			return true
		}
	}
	return false
}

// mountsAt lists the minor device numbers of the mounts at dir.
func mountsAt(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			if _, minor, ok := strings.Cut(f[2], ":"); ok {
				out = append(out, minor)
			}
		}
	}
	return out
}

func fusermount() (string, error) {
	if p, err := exec.LookPath("fusermount3"); err == nil {
		return p, nil
	}
	return exec.LookPath("fusermount")
}

func mount(dir string, tree *config.Tree, o Options, direct bool) (*fuse.Server, error) {
	f := &fsys{tree: tree, refused: o.Refused, ecn: o.ECN, uid: uint32(os.Geteuid()), gid: uint32(os.Getegid()), start: time.Now(),
		inos: map[string]uint64{"": 1, "rdma_cm": 2}, next: 3}
	zero := time.Duration(0)
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:             "goroce",
			Name:               "configfs", // the type shows as fuse.configfs
			DirectMountStrict:  direct,
			AllowOther:         direct && os.Geteuid() == 0,
			Options:            []string{"default_permissions"},
			DisableXAttrs:      true,
			DisableReadDirPlus: true,
		},
		EntryTimeout:   &zero,
		AttrTimeout:    &zero,
		RootStableAttr: &fs.StableAttr{Ino: 1},
	}
	return fs.Mount(dir, &rootNode{f: f}, opts)
}

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// Wait returns once the view is unmounted, by Unmount or umount(8).
func (s *Server) Wait() { s.srv.Wait() }

// Unmount unmounts the view, in bounded time. A mount point still in use
// (a shell's working directory, an open file) is detached lazily, as
// umount -l does: it leaves the mount table at once, and those users lose
// it when this process exits — never a stale mount.
//
// go-fuse's unmount waits for its readers of /dev/fuse to return, which
// they do when the kernel ends the connection: when the last mount of it
// goes. One this process cannot see keeps it alive — a copy in another
// mount namespace, which unshare -m or ip netns exec made while the view
// was mounted — and the wait would never end (a roce configfs mount was
// found stuck there, its mount gone, after 24 minutes). So after
// UnmountWait, Unmount aborts the connection (Abort), which fails what
// the other mounts' users do next with ENOTCONN and ends the readers, and
// it reports that it did.
func (s *Server) Unmount() error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Unmount() }()
	wait := func() (error, bool) {
		select {
		case err := <-done:
			return err, true
		case <-time.After(UnmountWait):
			return nil, false
		}
	}
	err, ok := wait()
	elsewhere := false // the connection outlived the unmount here
	if !ok {
		// Slow, on a loaded machine, or waiting for what will not end:
		// the unmount (umount(2) waits for the server's answers) or the
		// readers once the connection is gone take longer, while a
		// connection fusectl still shows after this mount left the mount
		// table lives on in a copy elsewhere.
		elsewhere = !fuseConnMounted(s.dir, s.conn) && s.connAlive()
		if !elsewhere {
			err, ok = wait()
		}
	}
	if !ok {
		aerr := s.Abort()
		if err, ok = wait(); !ok {
			return fmt.Errorf("unmount %s: the FUSE server did not stop within %v, nor %v after aborting the connection (%v)",
				s.dir, 2*UnmountWait, UnmountWait, aerr)
		}
		switch {
		case err != nil:
		case elsewhere:
			err = fmt.Errorf("unmount %s: the FUSE connection was still in use %v after the unmount "+
				"(a mount of it in another mount namespace, made by unshare -m or ip netns exec?): aborted it", s.dir, UnmountWait)
		default:
			err = fmt.Errorf("unmount %s: not done after %v: aborted the FUSE connection", s.dir, 2*UnmountWait)
		}
		return err
	}
	if err == nil || !s.direct {
		return err
	}
	if derr := syscall.Unmount(s.dir, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %w; detaching it: %v", s.dir, err, derr)
	}
	return nil
}

// fusectl is where the FUSE control file system shows each connection.
const fusectl = "/sys/fs/fuse/connections"

// mountFusectl mounts fusectl if it is not mounted (it needs root), and
// reports whether it is.
func mountFusectl() bool {
	const fusectlMagic = 0x65735543 // FUSECTL_SUPER_MAGIC
	var st syscall.Statfs_t
	if syscall.Statfs(fusectl, &st) == nil && st.Type == fusectlMagic {
		return true
	}
	syscall.Mount("fusectl", fusectl, "fusectl", 0, "")
	return syscall.Statfs(fusectl, &st) == nil && st.Type == fusectlMagic
}

// connAlive reports whether the kernel still has the view's FUSE
// connection: whether fusectl shows it. When that cannot be told, it is
// taken to be alive.
func (s *Server) connAlive() bool {
	if s.conn == "" || !mountFusectl() {
		return true
	}
	_, err := os.Stat(filepath.Join(fusectl, s.conn))
	return !errors.Is(err, os.ErrNotExist)
}

// Abort ends the view at once, without waiting for anything: it aborts
// the FUSE connection, as echo 1 > /sys/fs/fuse/connections/N/abort does
// (mounting fusectl there if needed), so every request waiting on it and
// every later one fails with ENOTCONN, and detaches the mount point. It is
// for a process that must exit now; Unmount is the orderly way.
func (s *Server) Abort() error {
	var errs []error
	if s.conn == "" {
		errs = append(errs, errors.New("the FUSE connection's number is unknown"))
	} else {
		mountFusectl()
		if err := os.WriteFile(filepath.Join(fusectl, s.conn, "abort"), []byte("1"), 0); err != nil {
			errs = append(errs, fmt.Errorf("abort the FUSE connection: %w", err))
		}
	}
	if s.direct {
		if err := syscall.Unmount(s.dir, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			errs = append(errs, fmt.Errorf("detach %s: %w", s.dir, err))
		}
	} else if fm, err := fusermount(); err == nil {
		exec.Command(fm, "-u", "-z", s.dir).Run()
	}
	return errors.Join(errs...)
}

// fsys is what the nodes share.
type fsys struct {
	tree     *config.Tree
	refused  func(error) // Options.Refused; may be nil
	ecn      ECNView     // Options.ECN; may be nil
	uid, gid uint32
	start    time.Time // the mount time: rdma_cm's time while the tree has no state

	mu   sync.Mutex
	inos map[string]uint64 // guarded by mu: inode numbers by path below the mount point
	next uint64            // guarded by mu
}

// ino gives each path one inode number for the life of the mount.
func (f *fsys) ino(p string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.inos[p]
	if !ok {
		n = f.next
		f.next++
		f.inos[p] = n
	}
	return n
}

// mountPath is the path below the mount point of a tree path.
func mountPath(treePath string) string {
	if treePath == "" {
		return "rdma_cm"
	}
	return "rdma_cm/" + treePath
}

func (f *fsys) fill(out *fuse.Attr, e config.Entry, ino uint64) {
	out.Ino = ino
	out.Mode = uint32(e.Mode.Perm())
	if e.IsDir() {
		out.Mode |= syscall.S_IFDIR
	} else {
		out.Mode |= syscall.S_IFREG
	}
	out.Size = uint64(e.Size)
	out.Nlink = e.Nlink
	out.Uid, out.Gid = f.uid, f.gid
	t := e.ModTime
	if t.IsZero() {
		t = f.start
	}
	out.SetTimes(&t, &t, &t)
	// Blocks 0, as configfs: ls -l says "total 0". (A zero Blksize
	// would make go-fuse count blocks from the size.)
	out.Blksize, out.Blocks = 4096, 0
}

// node makes the inode for tree path p, described by e.
func (f *fsys) node(ctx context.Context, parent *fs.Inode, p string, e config.Entry) *fs.Inode {
	id := fs.StableAttr{Mode: syscall.S_IFREG, Ino: f.ino(mountPath(p))}
	var n fs.InodeEmbedder = &attrNode{f: f, path: p}
	if e.IsDir() {
		id.Mode = syscall.S_IFDIR
		n = &dirNode{f: f, path: p}
	}
	return parent.NewInode(ctx, n, id)
}

// setattr accepts what leaves a value alone — a size (O_TRUNC,
// truncate(2)) and times — and refuses a mode or owner.
func (f *fsys) setattr(ctx context.Context, n fs.NodeGetattrer, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		return syscall.EPERM
	}
	return n.Getattr(ctx, nil, out)
}

// refusals answers the operations configfs has no use for, with the
// errnos the kernel gives for them there.
type refusals struct{}

// Create: a configfs directory has no create (the VFS: EACCES).
func (refusals) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EACCES
}

// Mknod, Link, Rename: none in configfs (the VFS: EPERM).
func (refusals) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (refusals) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (refusals) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EPERM
}

// Symlink, Unlink: configfs allows links only where the item does
// (allow_link), which rdma_cm does not: EPERM.
func (refusals) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (refusals) Unlink(context.Context, string) syscall.Errno { return syscall.EPERM }

// rootNode is the mount point: configfs's root, which holds rdma_cm and
// nothing else (but ecn with Options.ECN); mkdir and rmdir there are EPERM
// (no such operations on configfs's root inode).
type rootNode struct {
	fs.Inode
	refusals
	f *fsys
}

// dirNode is a directory of the tree: rdma_cm, rdma_cm/<dev>,
// rdma_cm/<dev>/ports or rdma_cm/<dev>/ports/<N>.
type dirNode struct {
	fs.Inode
	refusals
	f    *fsys
	path string // tree path, relative to rdma_cm ("" is rdma_cm)
}

// attrNode is an attribute, default_roce_mode or default_roce_tos.
type attrNode struct {
	fs.Inode
	f    *fsys
	path string // tree path, relative to rdma_cm
}

var (
	_ interface {
		fs.NodeLookuper
		fs.NodeReaddirer
		fs.NodeGetattrer
		fs.NodeSetattrer
		fs.NodeMkdirer
		fs.NodeRmdirer
		fs.NodeCreater
		fs.NodeMknoder
		fs.NodeLinker
		fs.NodeSymlinker
		fs.NodeUnlinker
		fs.NodeRenamer
	} = (*rootNode)(nil)
	_ interface {
		fs.NodeLookuper
		fs.NodeReaddirer
		fs.NodeGetattrer
		fs.NodeSetattrer
		fs.NodeMkdirer
		fs.NodeRmdirer
		fs.NodeCreater
		fs.NodeMknoder
		fs.NodeLinker
		fs.NodeSymlinker
		fs.NodeUnlinker
		fs.NodeRenamer
	} = (*dirNode)(nil)
	_ interface {
		fs.NodeGetattrer
		fs.NodeSetattrer
		fs.NodeOpener
		fs.NodeReader
		fs.NodeWriter
		fs.NodeFsyncer
	} = (*attrNode)(nil)
)

func (r *rootNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.f.fill(&out.Attr, config.Entry{Name: "", Mode: os.ModeDir | config.DirPerm, Nlink: 3}, 1)
	return 0
}

func (r *rootNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return r.f.setattr(ctx, r, in, out)
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == ecnDir && r.f.ecn != nil {
		r.f.ecnFill(&out.Attr, "", true)
		return r.NewInode(ctx, &ecnNode{f: r.f}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: r.f.ino(ecnDir)}), 0
	}
	if name != "rdma_cm" {
		return nil, syscall.ENOENT
	}
	e, err := r.f.tree.Stat("")
	if err != nil {
		return nil, config.Errno(err)
	}
	r.f.fill(&out.Attr, e, 2)
	return r.f.node(ctx, &r.Inode, "", e), 0
}

func (r *rootNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	list := []fuse.DirEntry{
		{Name: ".", Mode: syscall.S_IFDIR, Ino: 1},
		{Name: "..", Mode: syscall.S_IFDIR, Ino: 1},
		{Name: "rdma_cm", Mode: syscall.S_IFDIR, Ino: 2},
	}
	if r.f.ecn != nil {
		list = append(list, fuse.DirEntry{Name: ecnDir, Mode: syscall.S_IFDIR, Ino: r.f.ino(ecnDir)})
	}
	return fs.NewListDirStream(list), 0
}

func (r *rootNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if name == "rdma_cm" || name == ecnDir && r.f.ecn != nil {
		return nil, syscall.EEXIST
	}
	return nil, syscall.EPERM
}

func (r *rootNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if name != "rdma_cm" && !(name == ecnDir && r.f.ecn != nil) {
		return syscall.ENOENT
	}
	return syscall.EPERM
}

func (d *dirNode) child(name string) string { return path.Join(d.path, name) }

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e, err := d.f.tree.Stat(d.path)
	if err != nil {
		return config.Errno(err)
	}
	d.f.fill(&out.Attr, e, d.f.ino(mountPath(d.path)))
	return 0
}

func (d *dirNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return d.f.setattr(ctx, d, in, out)
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := d.child(name)
	e, err := d.f.tree.Stat(p)
	if err != nil {
		return nil, config.Errno(err)
	}
	d.f.fill(&out.Attr, e, d.f.ino(mountPath(p)))
	return d.f.node(ctx, &d.Inode, p, e), 0
}

func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ents, err := d.f.tree.ReadDir(d.path)
	if err != nil {
		return nil, config.Errno(err)
	}
	parent := "" // the mount point, for rdma_cm
	if d.path != "" {
		pp := path.Dir(d.path)
		if pp == "." {
			pp = ""
		}
		parent = mountPath(pp)
	}
	list := []fuse.DirEntry{
		{Name: ".", Mode: syscall.S_IFDIR, Ino: d.f.ino(mountPath(d.path))},
		{Name: "..", Mode: syscall.S_IFDIR, Ino: d.f.ino(parent)},
	}
	for _, e := range ents {
		mode := uint32(syscall.S_IFREG)
		if e.IsDir() {
			mode = syscall.S_IFDIR
		}
		list = append(list, fuse.DirEntry{Name: e.Name, Mode: mode, Ino: d.f.ino(mountPath(d.child(e.Name)))})
	}
	return fs.NewListDirStream(list), 0
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	p := d.child(name)
	if err := d.f.tree.Mkdir(p); err != nil {
		return nil, config.Errno(err)
	}
	e, err := d.f.tree.Stat(p)
	if err != nil { // removed again meanwhile
		return nil, config.Errno(err)
	}
	d.f.fill(&out.Attr, e, d.f.ino(mountPath(p)))
	return d.f.node(ctx, &d.Inode, p, e), 0
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return config.Errno(d.f.tree.Rmdir(d.child(name)))
}

func (a *attrNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e, err := a.f.tree.Stat(a.path)
	if err != nil {
		return config.Errno(err)
	}
	a.f.fill(&out.Attr, e, a.f.ino(mountPath(a.path)))
	return 0
}

func (a *attrNode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return a.f.setattr(ctx, a, in, out)
}

// handle is an open attribute: configfs's per-open buffer.
type handle struct {
	gen uint64 // the device directory's generation at open

	mu  sync.Mutex
	buf []byte // guarded by mu: the value read at offset 0
	ok  bool   // guarded by mu: buf holds a value
}

// Open opens an attribute with direct I/O: no page cache, so each read
// reaches the tree. O_TRUNC is accepted and changes nothing.
func (a *attrNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	e, err := a.f.tree.Stat(a.path)
	if err != nil {
		return nil, 0, config.Errno(err)
	}
	return &handle{gen: e.Gen}, fuse.FOPEN_DIRECT_IO, 0
}

// live fails as configfs fails an open attribute whose directory was
// removed (a dead fragment): ENOENT, also when it was made again since.
func (a *attrNode) live(h *handle) syscall.Errno {
	e, err := a.f.tree.Stat(a.path)
	if err != nil {
		return config.Errno(err)
	}
	if e.Gen != h.gen {
		return syscall.ENOENT
	}
	return 0
}

func (a *attrNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if off == 0 || !h.ok {
		if errno := a.live(h); errno != 0 {
			return nil, errno
		}
		b, err := a.f.tree.ReadFile(a.path)
		if err != nil {
			return nil, config.Errno(err)
		}
		h.buf, h.ok = b, true
	}
	if off >= int64(len(h.buf)) {
		return fuse.ReadResultData(nil), 0
	}
	b := h.buf[off:]
	if len(b) > len(dest) {
		b = b[:len(dest)]
	}
	return fuse.ReadResultData(b), 0
}

// Write stores what one write(2) carries, whatever the offset (configfs
// ignores it): the first config.MaxWrite bytes, all or nothing, failing
// with the kernel's errno; Options.Refused hears why.
func (a *attrNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	h, ok := fh.(*handle)
	if !ok {
		return 0, syscall.EBADF
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if errno := a.live(h); errno != 0 {
		return 0, errno
	}
	if len(data) > config.MaxWrite {
		data = data[:config.MaxWrite]
	}
	h.ok = false // the next read shows the new value
	if err := a.f.tree.WriteFile(a.path, data); err != nil {
		if a.f.refused != nil {
			a.f.refused(err)
		}
		return 0, config.Errno(err)
	}
	return uint32(len(data)), 0
}

// Fsync is EINVAL: configfs attributes have no fsync.
func (a *attrNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return syscall.EINVAL
}
