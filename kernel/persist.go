package kernel

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The kernel forgets rdma_cm's configfs settings at reboot (the values
// live in the cma_device, made again when the device registers). Persist
// writes what sets one again at boot: a udev rule on the RDMA device's add
// event where udev runs (it also covers a device made later, such as an
// rxe link added by a script, or a NIC whose driver is reloaded), else a
// systemd oneshot unit, else it says what to do by hand.
//
// The add event comes once the device is fully registered, its rdma_cm
// client included (ib_register_device suppresses the uevent until then:
// Linux commit e7a5b4aafd82, "RDMA/device: Don't fire uevent before device
// is fully initialized"), so the rule's command finds rdma_cm/DEV ready to
// be made; it loads rdma_cm itself if it is not loaded yet.
type Persist struct {
	// Root is the root of the filesystem to write into; default "/". A
	// test, or an image being built, gives its own.
	Root string
	// Exe is the absolute path of the roce executable the rule or unit
	// runs.
	Exe string
}

// Setting is one rdma_cm setting of a kernel device's port.
type Setting struct {
	Dev   string
	Port  int
	Attr  string // AttrMode or AttrTOS
	Value string // roce mode's -m (1 or 2), or roce tos' -t (0..255)
}

// Args are the roce arguments that apply s.
func (s Setting) Args() []string {
	flag := "-m"
	cmd := "mode"
	if s.Attr == AttrTOS {
		flag, cmd = "-t", "tos"
	}
	return []string{cmd, "--kernel", "-d", s.Dev, "-p", strconv.Itoa(s.Port), flag, s.Value}
}

// what says what s sets, in words.
func (s Setting) what() string {
	if s.Attr == AttrMode {
		v := "RoCE v2"
		if s.Value == "1" {
			v = "IB/RoCE v1"
		}
		return fmt.Sprintf("%s of %s port %d to %s", s.Attr, s.Dev, s.Port, v)
	}
	return fmt.Sprintf("%s of %s port %d to %s", s.Attr, s.Dev, s.Port, s.Value)
}

// base is the name the rule and the unit share.
func (s Setting) base() string {
	short := "mode"
	if s.Attr == AttrTOS {
		short = "tos"
	}
	return fmt.Sprintf("roce-%s-port%d-%s", s.Dev, s.Port, short)
}

// Kind is the boot mechanism a host uses.
type Kind int

const (
	KindNone    Kind = iota // neither udev nor systemd: by hand
	KindUdev                // a rule in /etc/udev/rules.d
	KindSystemd             // a unit in /etc/systemd/system, enabled
)

func (k Kind) String() string {
	switch k {
	case KindUdev:
		return "udev rule"
	case KindSystemd:
		return "systemd unit"
	}
	return "none"
}

func (p Persist) root() string {
	if p.Root == "" {
		return "/"
	}
	return p.Root
}

func (p Persist) path(rel string) string { return filepath.Join(p.root(), rel) }

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// Detect tells which mechanism the host under Root uses: udev when it has
// udev's directories (systemd hosts run systemd-udevd too), else systemd
// when it has systemd's, else none.
func (p Persist) Detect() Kind {
	for _, d := range []string{"etc/udev", "lib/udev", "usr/lib/udev"} {
		if isDir(p.path(d)) {
			return KindUdev
		}
	}
	for _, d := range []string{"etc/systemd/system", "run/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"} {
		if isDir(p.path(d)) {
			return KindSystemd
		}
	}
	return KindNone
}

// File is one file a Plan writes: its content, or a symbolic link.
type File struct {
	Path    string // absolute, under Root
	Content string // the file's content, or
	Link    string // the target of a symbolic link
}

// Plan is what making a setting persistent writes.
type Plan struct {
	Kind  Kind
	Files []File
	// Manual, for KindNone, says what to do by hand.
	Manual string
}

// checkName refuses names the rule's glob match or a unit name would
// misread.
func checkName(s Setting) error {
	if s.Dev == "" || strings.ContainsAny(s.Dev, "/*?[]\"'\\ \t\n%$") {
		return &Error{Op: "persist", Dev: s.Dev, Err: syscall.EINVAL,
			Detail: fmt.Sprintf("device name %q: a udev rule or unit name cannot carry it as it is", s.Dev)}
	}
	if s.Attr != AttrMode && s.Attr != AttrTOS {
		return &Error{Op: "persist", Dev: s.Dev, Err: syscall.EINVAL, Detail: "attribute " + s.Attr}
	}
	return nil
}

// command is the command line that applies s, for a rule or a unit: the
// executable's % and $ doubled (udev and systemd both expand them).
func (p Persist) command(s Setting) (string, error) {
	if !filepath.IsAbs(p.Exe) || strings.ContainsAny(p.Exe, " \t\n\"'\\") {
		return "", &Error{Op: "persist", Dev: s.Dev, Err: syscall.EINVAL,
			Detail: fmt.Sprintf("the roce executable %q: a rule needs an absolute path without spaces or quotes (install roce in /usr/local/bin)", p.Exe)}
	}
	exe := strings.NewReplacer("%", "%%", "$", "$$").Replace(p.Exe)
	return exe + " " + strings.Join(s.Args(), " "), nil
}

// UdevRulePath and UnitPath are where the rule and the unit of s go.
func (p Persist) UdevRulePath(s Setting) string {
	return p.path(filepath.Join("etc/udev/rules.d", "90-"+s.base()+".rules"))
}

func (p Persist) UnitPath(s Setting) string {
	return p.path(filepath.Join("etc/systemd/system", s.base()+".service"))
}

func (p Persist) wantsPath(s Setting) string {
	return p.path(filepath.Join("etc/systemd/system/multi-user.target.wants", s.base()+".service"))
}

// Plan says what making s persistent writes on this host.
func (p Persist) Plan(s Setting) (Plan, error) {
	if err := checkName(s); err != nil {
		return Plan{}, err
	}
	cmd, err := p.command(s)
	if err != nil {
		return Plan{}, err
	}
	undo := fmt.Sprintf("roce %s --kernel -d %s -p %d --persist=false", s.Args()[0], s.Dev, s.Port)
	switch k := p.Detect(); k {
	case KindUdev:
		rule := fmt.Sprintf("# Written by roce %s --persist (goroce): at boot, and whenever the RDMA device %s\n"+
			"# appears, set rdma_cm's %s again: the kernel forgets it at reboot.\n"+
			"# Remove with: %s\n"+
			"ACTION==\"add\", SUBSYSTEM==\"infiniband\", KERNEL==\"%s\", RUN+=\"%s\"\n",
			s.Args()[0], s.Dev, s.what(), undo, s.Dev, cmd)
		return Plan{Kind: k, Files: []File{{Path: p.UdevRulePath(s), Content: rule}}}, nil
	case KindSystemd:
		unit := fmt.Sprintf("# Written by roce %s --persist (goroce): the kernel forgets rdma_cm's settings at reboot.\n"+
			"# Remove with: %s\n"+
			"[Unit]\n"+
			"Description=goroce: set rdma_cm's %s\n"+
			"After=sys-kernel-config.mount systemd-modules-load.service network.target\n\n"+
			"[Service]\n"+
			"Type=oneshot\n"+
			"ExecStart=%s\n\n"+
			"[Install]\n"+
			"WantedBy=multi-user.target\n",
			s.Args()[0], undo, s.what(), cmd)
		return Plan{Kind: k, Files: []File{
			{Path: p.UnitPath(s), Content: unit},
			// What systemctl enable makes.
			{Path: p.wantsPath(s), Link: "/etc/systemd/system/" + s.base() + ".service"},
		}}, nil
	default:
		return Plan{Kind: KindNone, Manual: fmt.Sprintf("neither udev nor systemd on this host (%s): the kernel forgets the %s at reboot; "+
			"run %s at boot once %s exists (after the rdma link add that makes it, or from /etc/rc.local)",
			p.root(), s.what(), cmd, s.Dev)}, nil
	}
}

// Apply writes the plan's files that are not already as planned, and
// returns those it wrote: applying a plan twice writes nothing the second
// time.
func (p Persist) Apply(pl Plan) ([]string, error) {
	var changed []string
	for _, f := range pl.Files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return changed, persistErr(f.Path, err)
		}
		if f.Link != "" {
			if t, err := os.Readlink(f.Path); err == nil && t == f.Link {
				continue
			}
			if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return changed, persistErr(f.Path, err)
			}
			if err := os.Symlink(f.Link, f.Path); err != nil {
				return changed, persistErr(f.Path, err)
			}
			changed = append(changed, f.Path)
			continue
		}
		if b, err := os.ReadFile(f.Path); err == nil && bytes.Equal(b, []byte(f.Content)) {
			continue
		}
		tmp := f.Path + ".roce-tmp"
		if err := os.WriteFile(tmp, []byte(f.Content), 0o644); err != nil {
			return changed, persistErr(f.Path, err)
		}
		if err := os.Rename(tmp, f.Path); err != nil {
			os.Remove(tmp)
			return changed, persistErr(f.Path, err)
		}
		changed = append(changed, f.Path)
	}
	return changed, nil
}

func persistErr(path string, err error) error {
	e := &Error{Op: "persist", Err: unwrapPath(err), Detail: "write " + path}
	if e.Err == syscall.EACCES || e.Err == syscall.EPERM || e.Err == syscall.EROFS {
		e.Detail += ": needs root (and a writable /etc)"
	}
	return e
}

// Remove removes what Plan would write for s, with either mechanism, and
// returns what it removed (nothing, if nothing was there).
func (p Persist) Remove(s Setting) ([]string, error) {
	if err := checkName(s); err != nil {
		return nil, err
	}
	var removed []string
	for _, f := range []string{p.UdevRulePath(s), p.wantsPath(s), p.UnitPath(s)} {
		if _, err := os.Lstat(f); err != nil {
			continue
		}
		if err := os.Remove(f); err != nil {
			return removed, persistErr(f, err)
		}
		removed = append(removed, f)
	}
	return removed, nil
}
