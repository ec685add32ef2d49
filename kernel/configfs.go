package kernel

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/wire"
)

// Configfs performs the rdma_cm configfs procedure on the kernel's devices
// (Documentation/ABI/testing/configfs-rdma_cm; mlnx-tools' cma_roce_mode
// and cma_roce_tos do the same):
//
//  1. configfs mounted at Root? If not, load configfs and mount it;
//  2. Root/rdma_cm there? If not, load rdma_cm (its module makes it);
//  3. Root/rdma_cm/DEV there? If not, mkdir it: the kernel fills it with
//     ports/N/default_roce_mode and default_roce_tos;
//  4. write the attribute, if setting, and read it back;
//  5. rmdir Root/rdma_cm/DEV if step 3 made it (cma_roce_tos' need_clean;
//     cma_roce_mode removes it even when it did not make it). The kernel
//     keeps the values after rmdir (KERNEL-BEHAVIOUR.md), until reboot.
//
// What it does beyond reading and writing — mounting, loading a module —
// it says through Logf.
type Configfs struct {
	// Root is where configfs is (to be) mounted; default
	// "/sys/kernel/config".
	Root string
	// Mountinfo is the mount table read to tell whether Root is mounted;
	// default "/proc/self/mountinfo".
	Mountinfo string
	// Sysfs is read to explain the kernel's refusals (a port's GID types,
	// a device's ports).
	Sysfs Sysfs
	// Logf, if set, is told what the procedure does besides the reads and
	// writes: "mounted configfs at /sys/kernel/config", "loaded rdma_cm".
	Logf func(format string, args ...any)
	// Modprobe loads a kernel module; nil runs modprobe(8).
	Modprobe func(module string) error
}

// The attributes of a port's directory.
const (
	AttrMode = "default_roce_mode"
	AttrTOS  = "default_roce_tos"
)

func (c *Configfs) root() string {
	if c.Root == "" {
		return "/sys/kernel/config"
	}
	return c.Root
}

func (c *Configfs) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

func (c *Configfs) modprobe(m string) error {
	if c.Modprobe != nil {
		return c.Modprobe(m)
	}
	// udev runs a rule's program with a bare environment, maybe without
	// PATH: look where modprobe lives too.
	prog, err := exec.LookPath("modprobe")
	if err != nil {
		for _, p := range []string{"/usr/sbin/modprobe", "/sbin/modprobe", "/usr/bin/modprobe", "/bin/modprobe"} {
			if _, serr := os.Stat(p); serr == nil {
				prog, err = p, nil
				break
			}
		}
		if err != nil {
			return fmt.Errorf("modprobe %s: no modprobe: %w", m, err)
		}
	}
	out, err := exec.Command(prog, m).CombinedOutput()
	if err != nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("modprobe %s: %v: %s", m, err, s)
		}
		return fmt.Errorf("modprobe %s: %w", m, err)
	}
	return nil
}

// mounted reports whether a filesystem is mounted at dir, and its type.
func (c *Configfs) mounted(dir string) (bool, string, error) {
	mi := c.Mountinfo
	if mi == "" {
		mi = "/proc/self/mountinfo"
	}
	f, err := os.Open(mi)
	if err != nil {
		return false, "", err
	}
	defer f.Close()
	want := filepath.Clean(dir)
	if r, err := filepath.EvalSymlinks(want); err == nil {
		want = r
	}
	found, fstype := false, ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if filepath.Clean(unescapeMount(fields[4])) != want {
			continue
		}
		found, fstype = true, ""
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) {
				fstype = fields[i+1]
			}
		}
		// The last mount at a point is the one seen: keep looking.
	}
	return found, fstype, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ensureTree makes sure configfs is mounted at Root and rdma_cm's tree is
// in it (steps 1 and 2).
func (c *Configfs) ensureTree(op string) (string, error) {
	root := c.root()
	ok, _, err := c.mounted(root)
	if err != nil {
		return "", &Error{Op: op, Err: err, Detail: "reading the mount table"}
	}
	if !ok {
		if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
			// /sys/kernel/config appears when configfs registers.
			if err := c.modprobe("configfs"); err == nil {
				c.logf("loaded the configfs module")
			}
		}
		if err := unix.Mount("none", root, "configfs", 0, ""); err != nil {
			e := &Error{Op: "mount " + root, Err: err}
			switch err {
			case syscall.EPERM, syscall.EACCES:
				e.Detail = "configfs is not mounted and mounting it needs root (mount -t configfs none " + root + ")"
			case syscall.ENODEV:
				e.Detail = "this kernel has no configfs (CONFIG_CONFIGFS_FS), so rdma_cm's settings cannot be changed here"
			case syscall.ENOENT:
				e.Detail = "no directory " + root + " to mount configfs on"
			default:
				e.Detail = "mount -t configfs none " + root
			}
			return "", e
		}
		c.logf("mounted configfs at %s (it was not mounted)", root)
	}
	cm := filepath.Join(root, "rdma_cm")
	if _, err := os.Stat(cm); err == nil {
		return cm, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		e := &Error{Op: op, Err: unwrapPath(err), Detail: "stat " + cm}
		if e.Err == syscall.EACCES || e.Err == syscall.EPERM {
			e.Detail += ": needs root"
		}
		return "", e
	}
	c.logf("loading rdma_cm: %s is missing, and the module makes it", cm)
	if err := c.modprobe("rdma_cm"); err != nil {
		return "", &Error{Op: op, Err: syscall.ENOENT,
			Detail: fmt.Sprintf("no %s, and loading rdma_cm failed: %v", cm, err)}
	}
	if _, err := os.Stat(cm); err != nil {
		return "", &Error{Op: op, Err: syscall.ENOENT,
			Detail: fmt.Sprintf("rdma_cm is loaded but %s is missing: this kernel's rdma_cm has no configfs support (CONFIG_INFINIBAND_ADDR_TRANS_CONFIGFS)", cm)}
	}
	return cm, nil
}

// session runs fn on the directory of dev's port (steps 1 to 5).
func (c *Configfs) session(op, dev string, port int, fn func(portDir string) error) (err error) {
	if dev == "" || strings.ContainsRune(dev, '/') || dev == "." || dev == ".." {
		return &Error{Op: op, Dev: dev, Port: port, Err: syscall.EINVAL, Detail: fmt.Sprintf("device name %q", dev)}
	}
	cm, err := c.ensureTree(op)
	if err != nil {
		return err
	}
	dir := filepath.Join(cm, dev)
	created := false
	if _, serr := os.Stat(dir); serr != nil {
		switch merr := os.Mkdir(dir, 0o755); {
		case merr == nil:
			created = true
		case errors.Is(merr, fs.ErrExist): // made meanwhile by someone else: theirs to remove
		default:
			return c.mkdirError(op, dev, port, dir, merr)
		}
	}
	if created {
		defer func() {
			if rerr := os.Remove(dir); rerr != nil {
				re := &Error{Op: "rmdir " + dir, Dev: dev, Port: port, Err: unwrapPath(rerr),
					Detail: "the directory this command made stays behind (rmdir it by hand)"}
				if err == nil {
					err = re
				} else {
					c.logf("%v", re)
				}
			}
		}()
	}
	pd := filepath.Join(dir, "ports", strconv.Itoa(port))
	if _, serr := os.Stat(pd); serr != nil {
		d, derr := c.Sysfs.Device(dev)
		ports := "its ports are listed in " + filepath.Join(dir, "ports")
		if derr == nil {
			ports = "its ports: " + d.PortNums()
		}
		return &Error{Op: op, Dev: dev, Port: port, Err: syscall.ENOENT,
			Detail: fmt.Sprintf("%s has no port %d (%s)", dev, port, ports)}
	}
	return fn(pd)
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func (c *Configfs) mkdirError(op, dev string, port int, dir string, err error) error {
	e := &Error{Op: op, Dev: dev, Port: port, Err: unwrapPath(err)}
	switch e.Err {
	case syscall.ENODEV:
		e.Detail = fmt.Sprintf("mkdir %s: the kernel has no RDMA device %s (roce dev --kernel lists them)", dir, dev)
	case syscall.EACCES, syscall.EPERM:
		e.Detail = fmt.Sprintf("mkdir %s: making %s's configfs directory needs root", dir, dev)
	default:
		e.Detail = "mkdir " + dir
	}
	return e
}

func (c *Configfs) read(op, dev string, port int, p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		e := &Error{Op: op, Dev: dev, Port: port, Err: unwrapPath(err), Detail: "read " + p}
		if e.Err == syscall.EACCES || e.Err == syscall.EPERM {
			e.Detail += ": needs root"
		}
		return "", e
	}
	return string(b), nil
}

// write writes data to p as echo does: one write(2) of the whole value.
func (c *Configfs) write(p string, data string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return unwrapPath(err)
	}
	_, werr := f.Write([]byte(data))
	cerr := f.Close()
	if werr != nil {
		return unwrapPath(werr)
	}
	return unwrapPath(cerr)
}

// Mode reads dev's port's default_roce_mode: the RoCE version RDMA CM
// uses for new connections on it.
func (c *Configfs) Mode(dev string, port int) (wire.Version, error) {
	var m wire.Version
	err := c.session("mode", dev, port, func(pd string) error {
		s, err := c.read("mode", dev, port, filepath.Join(pd, AttrMode))
		if err != nil {
			return err
		}
		m, err = config.ParseMode([]byte(s))
		if err != nil {
			return &Error{Op: "mode", Dev: dev, Port: port, Err: syscall.EIO,
				Detail: fmt.Sprintf("the kernel's %s reads %q, not a RoCE mode", AttrMode, s)}
		}
		return nil
	})
	return m, err
}

// SetMode writes m to dev's port's default_roce_mode and returns what
// reading it back gives. A refusal says why: a RoCE version the port does
// not speak (rxe speaks RoCE v2 only), no root, no such port.
func (c *Configfs) SetMode(dev string, port int, m wire.Version) (wire.Version, error) {
	var got wire.Version
	err := c.session("mode", dev, port, func(pd string) error {
		p := filepath.Join(pd, AttrMode)
		if err := c.write(p, config.FormatMode(m)); err != nil {
			return c.modeRefused(dev, port, m, p, err)
		}
		s, err := c.read("mode", dev, port, p)
		if err != nil {
			return err
		}
		got, err = config.ParseMode([]byte(s))
		if err != nil || got != m {
			return &Error{Op: "mode", Dev: dev, Port: port, Err: syscall.EIO,
				Detail: fmt.Sprintf("wrote %q to %s, read back %q", config.FormatMode(m), p, s)}
		}
		return nil
	})
	return got, err
}

// modeRefused explains the kernel's refusal of mode m. The kernel takes a
// mode only if the port supports that GID type (cma_set_default_gid_type:
// roce_gid_type_mask_support), which is also what fills the port's GID
// table: a mode none of the port's GIDs has is one it does not speak.
func (c *Configfs) modeRefused(dev string, port int, m wire.Version, p string, err error) error {
	e := &Error{Op: "mode", Dev: dev, Port: port, Err: err}
	switch err {
	case syscall.EACCES, syscall.EPERM:
		e.Detail = fmt.Sprintf("writing %s needs root", p)
		return e
	case syscall.EINVAL:
	default:
		e.Detail = "write " + p
		return e
	}
	gids, _ := c.Sysfs.GIDs(dev, port)
	has := map[wire.Version]bool{}
	for _, g := range gids {
		has[g.Type.Version()] = true
	}
	d, _ := c.Sysfs.Device(dev)
	switch {
	case !has[m] && m == wire.RoCEv1 && d.Driver == "rxe":
		e.Detail = fmt.Sprintf("%s port %d does not speak IB/RoCE v1: rxe speaks RoCE v2 only (its GID table holds RoCE v2 GIDs alone), "+
			"so its only mode is 2 (RoCE v2); a peer that speaks only RoCE v1 cannot be reached from it", dev, port)
	case !has[m] && len(has) > 0:
		only := wire.RoCEv2
		if has[wire.RoCEv1] {
			only = wire.RoCEv1
		}
		e.Detail = fmt.Sprintf("%s port %d does not speak %s: its GID table holds %s GIDs only, so its only mode is %d (%s)",
			dev, port, config.ModeName(m), config.ModeName(only), modeFlag(only), config.ModeName(only))
	default:
		e.Detail = fmt.Sprintf("the kernel refused %q for %s port %d (a port of another link layer than Ethernet has no RoCE mode)",
			config.ModeName(m), dev, port)
	}
	return e
}

func modeFlag(m wire.Version) int {
	if m == wire.RoCEv1 {
		return 1
	}
	return 2
}

// TOS reads dev's port's default_roce_tos.
func (c *Configfs) TOS(dev string, port int) (uint8, error) {
	var v uint8
	err := c.session("tos", dev, port, func(pd string) error {
		s, err := c.read("tos", dev, port, filepath.Join(pd, AttrTOS))
		if err != nil {
			return err
		}
		v, err = config.ParseTOS([]byte(s))
		if err != nil {
			return &Error{Op: "tos", Dev: dev, Port: port, Err: syscall.EIO,
				Detail: fmt.Sprintf("the kernel's %s reads %q, not a ToS", AttrTOS, s)}
		}
		return nil
	})
	return v, err
}

// SetTOS writes tos to dev's port's default_roce_tos and returns what
// reading it back gives.
func (c *Configfs) SetTOS(dev string, port int, tos uint8) (uint8, error) {
	var got uint8
	err := c.session("tos", dev, port, func(pd string) error {
		p := filepath.Join(pd, AttrTOS)
		if err := c.write(p, config.FormatTOS(tos)); err != nil {
			e := &Error{Op: "tos", Dev: dev, Port: port, Err: err, Detail: "write " + p}
			switch err {
			case syscall.EACCES, syscall.EPERM:
				e.Detail = fmt.Sprintf("writing %s needs root", p)
			case syscall.EINVAL, syscall.ERANGE:
				e.Detail = fmt.Sprintf("the kernel refused %d for %s: it takes 0..255", tos, p)
			}
			return e
		}
		s, err := c.read("tos", dev, port, p)
		if err != nil {
			return err
		}
		got, err = config.ParseTOS([]byte(s))
		if err != nil || got != tos {
			return &Error{Op: "tos", Dev: dev, Port: port, Err: syscall.EIO,
				Detail: fmt.Sprintf("wrote %q to %s, read back %q", config.FormatTOS(tos), p, s)}
		}
		return nil
	})
	return got, err
}
