// Package rundir opens, creates and locks files in goroce's runtime
// directory (GOROCE_RUNDIR, default /run/goroce) without trusting it.
//
// The runtime directory is where root's `roce link add`, `roce mode` and a
// device's data path keep their state and locks. The README's pattern
// GOROCE_RUNDIR=/tmp/... puts it where other users may have been first, so:
//
//   - a directory is used only if it is a real directory (not a symlink),
//     owned by root or by the calling user, and writable by nobody else
//     (CheckDir); otherwise the error names its owner and mode;
//   - files are opened with O_NOFOLLOW, so a symlink planted at a state or
//     lock file's name is refused, never followed;
//   - state files are replaced by writing a temporary file of a random,
//     O_EXCL-created name beside them and renaming it over them (WriteFile);
//   - lock files are 0600 and must belong to the calling user (OpenLock): a
//     lock another user can open is a lock another user can hold.
//
// It is a leaf package (standard library and x/sys only) so that both host
// and config use the same rules.
package rundir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,62}$`)

// ValidName reports whether name is a valid device name, which host's
// registry and config's tree use as a file name in the runtime directory:
// a letter, then letters, digits, _ . -, at most 63 (the kernel's
// IB_DEVICE_NAME_MAX is 64 with the NUL). No such name is "." or "..", or
// holds a slash.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// ErrUnsafe is wrapped by the errors of CheckDir and OpenLock when a
// directory or file could be changed by another user.
var ErrUnsafe = errors.New("unsafe runtime directory")

// UnsafeError says which path was refused and why.
type UnsafeError struct {
	Path   string
	Reason string // e.g. "owned by user alice (uid 1000), not by root or you (root, uid 0)"
}

func (e *UnsafeError) Error() string {
	return fmt.Sprintf("runtime directory: refusing %s: %s", e.Path, e.Reason)
}

// Unwrap makes errors.Is(err, ErrUnsafe) and errors.Is(err, syscall.EPERM) true.
func (e *UnsafeError) Unwrap() []error { return []error{ErrUnsafe, syscall.EPERM} }

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// trusted reports whether files owned by uid may be trusted by this
// process: root's, and the process's own.
func trusted(uid uint32) bool { return uid == 0 || uid == uint32(os.Geteuid()) }

// CheckDir checks that dir is a directory (not a symlink to one), owned by
// root or by the calling user, and not writable by group or others unless
// it is sticky and root's (as /tmp is, for the directories above a runtime
// directory; the runtime directory itself is never shared that way).
func CheckDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: dir, Err: err}
	}
	mode := fs.FileMode(st.Mode & 0o7777)
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return &UnsafeError{Path: dir, Reason: "it is a symbolic link; point GOROCE_RUNDIR at the directory itself"}
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return &UnsafeError{Path: dir, Reason: "it is not a directory"}
	case !trusted(st.Uid):
		return &UnsafeError{Path: dir, Reason: fmt.Sprintf("owned by %s, not by root or by you (%s); use a directory of your own",
			userName(st.Uid), userName(uint32(os.Geteuid())))}
	case mode&0o022 != 0:
		return &UnsafeError{Path: dir, Reason: fmt.Sprintf("mode %04o lets other users write to it; chmod go-w %s, or use another directory",
			uint32(mode), dir)}
	}
	return nil
}

// MkdirAll makes dir and any missing parents (mode 0755: others may read
// the registry, as they may list the kernel's devices) and checks dir and
// every directory from the runtime directory root down to it with
// CheckDir. root must be dir or one of its parents: the directories above
// root (such as /run or /tmp) are the system's.
func MkdirAll(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("runtime directory: %s is not inside %s: %w", dir, root, syscall.EINVAL)
	}
	// The root's parents are the system's (/run, /tmp); the root and what
	// lies below it are checked before anything is made inside them.
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	p := root
	if err := CheckDir(p); err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	for _, c := range strings.Split(filepath.ToSlash(rel), "/") {
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := CheckDir(p); err != nil {
			return err
		}
	}
	return nil
}

// Open opens the existing file at path for reading, refusing a symlink.
func Open(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
}

// ReadFile reads the file at path, refusing a symlink.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, &UnsafeError{Path: path, Reason: "it is not a regular file"}
	}
	return io.ReadAll(f)
}

// WriteFile replaces the file at path with data (mode perm): written to a
// new file of a random name in the same directory, created with O_EXCL,
// then renamed over path, so a reader sees the old content or the new and
// nothing another user planted is ever opened or truncated.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".*.tmp") // O_RDWR|O_CREATE|O_EXCL, mode 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Chmod(perm)
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
	}
	return werr
}

// OpenLock opens (creating if need be) the lock file at path: mode 0600,
// never through a symlink, and only if it is a regular file owned by the
// calling user, so that no other user can open it and hold its lock. A
// lock file left 0644 by an older goroce is made 0600.
func OpenLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &UnsafeError{Path: path, Reason: "it is a symbolic link (planted by whom?); remove it"}
		}
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		f.Close()
		return nil, &UnsafeError{Path: path, Reason: "it is not a regular file"}
	case st.Uid != uint32(os.Geteuid()):
		f.Close()
		return nil, &UnsafeError{Path: path, Reason: fmt.Sprintf("the lock file belongs to %s, not to you (%s); a lock another user can open is a lock another user can hold",
			userName(st.Uid), userName(uint32(os.Geteuid())))}
	case st.Mode&0o077 != 0:
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}
