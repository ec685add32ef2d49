package nettest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps named namespaces (iproute2's
// NETNS_RUN_DIR), and VethPair too, so that `ip netns exec` finds them.
const netnsDir = "/run/netns"

// netnsLock serialises PrepareNetnsDir among the processes on the machine
// (test binaries of several packages run at once).
const netnsLock = "/run/goroce-netns.lock"

// PrepareNetnsDir makes netnsDir a mount point of its own, shared, as
// iproute2's netns_add does before its first `ip netns add` (ip/ipnetns.c:
// mount --make-shared, and on EINVAL bind the directory onto itself with
// MS_REC first). VethPair calls it before it mounts any namespace there,
// and lab.Start before the lab's `ip netns add`.
//
// Why: a namespace mounted on a file of the plain directory is hidden the
// moment a later `ip netns add` binds the directory onto itself. The bind
// (MS_REC) shows a copy of the mount, so unmounting the name removes the
// copy, but the original stays underneath and keeps the file busy: rm says
// EBUSY, umount says not mounted, and the namespace lives until reboot.
// Once the directory is a mount point, `ip netns add` only makes it shared
// again. Mounts hidden that way before this ran (by a process that mounted
// a namespace on the plain directory) are unmounted here when a copy stands
// for them, so their owners can delete them.
func PrepareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(netnsLock, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	// Held for a few system calls by whoever has it: block.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("flock %s: %w", netnsLock, err)
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			break
		}
		if err != unix.EINVAL || bound {
			return fmt.Errorf("mount --make-shared %s: %w", netnsDir, err)
		}
		// EINVAL: not a mount point yet.
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount --bind %s %s: %w", netnsDir, netnsDir, err)
		}
	}
	return unmountShadowed("")
}

// deleteNamed deletes the named namespace netnsDir/name: every mount on
// the name, the visible ones and any hidden under a later bind of the
// directory (see PrepareNetnsDir), then the file. A name that does not
// exist is no error.
func deleteNamed(name string) error {
	path := filepath.Join(netnsDir, name)
	for i := 0; ; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH)
		if err == unix.EINVAL || err == unix.ENOENT { // no (more) mount here
			break
		}
		if err != nil {
			return fmt.Errorf("netns %s: umount: %w", name, err)
		}
		if i == 16 {
			return fmt.Errorf("netns %s: still mounted after 16 unmounts", name)
		}
	}
	if err := unmountShadowed(name); err != nil {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns %s: %w", name, err)
	}
	return nil
}

// mountEntry is a line of /proc/self/mountinfo (proc(5)).
type mountEntry struct {
	id, parent int
	dev        string // major:minor
	mountPoint string
}

func readMountinfo() ([]mountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 5 {
			continue
		}
		id, err1 := strconv.Atoi(fl[0])
		parent, err2 := strconv.Atoi(fl[1])
		if err1 != nil || err2 != nil {
			continue
		}
		ms = append(ms, mountEntry{id: id, parent: parent, dev: fl[2], mountPoint: unescapeMountinfo(fl[4])})
	}
	return ms, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountID returns the mount ID (as in mountinfo) of the file fd refers to.
func mountID(fd int) (int, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &st); err != nil {
		return 0, err
	}
	return int(st.Mnt_id), nil
}

// unmountShadowed unmounts the mounts on names in netnsDir that a later
// bind of the directory onto itself hides: those of name, or with name ""
// those for which a visible mount of the same name stands (the copy the
// bind's MS_REC made), so no namespace loses its name.
//
// A hidden mount cannot be reached by its path, which ends in the bind,
// so it is reached through a file handle: open_by_handle_at(2) on the
// directory, relative to an fd in the mount beneath the bind, gives the
// directory as seen in that mount without crossing the bind; the name
// opened from there is the hidden mount, which umount2 reaches through
// /proc/self/fd.
func unmountShadowed(name string) error {
	ms, err := readMountinfo()
	if err != nil {
		return err
	}
	var top unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, netnsDir, 0, unix.STATX_MNT_ID, &top); err != nil {
		return err
	}
	byID := map[int]mountEntry{}
	visible := map[string]bool{}
	for _, m := range ms {
		byID[m.id] = m
		if m.parent == int(top.Mnt_id) && filepath.Dir(m.mountPoint) == netnsDir {
			visible[filepath.Base(m.mountPoint)] = true
		}
	}
	var errs []error
	for _, m := range ms {
		n := filepath.Base(m.mountPoint)
		p, ok := byID[m.parent]
		if filepath.Dir(m.mountPoint) != netnsDir || m.parent == int(top.Mnt_id) || !ok ||
			filepath.Dir(p.mountPoint) == netnsDir { // stacked on a namespace mount, not on the directory
			continue
		}
		if name != "" && n != name || name == "" && !visible[n] {
			continue
		}
		if err := unmountBeneath(m, p); err != nil {
			errs = append(errs, fmt.Errorf("mount %d of %s hidden under a bind of %s: %w", m.id, m.mountPoint, netnsDir, err))
		}
	}
	return errors.Join(errs...)
}

// unmountBeneath unmounts m, mounted on a file of netnsDir in mount p
// beneath the bind that hides it.
func unmountBeneath(m, p mountEntry) error {
	pfd, err := unix.Open(p.mountPoint, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if id, err := mountID(pfd); err != nil || id != p.id {
		return fmt.Errorf("its parent mount %d is not the one at %s (%d, %v)", p.id, p.mountPoint, id, err)
	}
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, netnsDir, 0)
	if err != nil {
		return fmt.Errorf("name_to_handle_at %s: %w", netnsDir, err)
	}
	dfd, err := unix.OpenByHandleAt(pfd, h, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_by_handle_at %s in mount %d: %w", netnsDir, p.id, err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, filepath.Base(m.mountPoint), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if id, err := mountID(fd); err != nil || id != m.id {
		return fmt.Errorf("reached mount %d instead (%v)", id, err)
	}
	return unix.Unmount(fmt.Sprintf("/proc/self/fd/%d", fd), unix.MNT_DETACH)
}

// setup prepares netnsDir and reaps stale namespaces, once per process,
// before VethPair makes its first namespace.
var setup struct {
	once sync.Once
	err  error
	reap []error // stale namespaces that could not be deleted
}

func ready() (reapErrs []error, err error) {
	setup.once.Do(func() {
		if setup.err = PrepareNetnsDir(); setup.err == nil {
			setup.reap = reapStale()
		}
	})
	return setup.reap, setup.err
}

// reapStale deletes namespaces that VethPair made in processes that no
// longer exist (goroce-PID-N-a/b): a test binary killed by go test's
// timeout cannot run its cleanups, and its namespaces would otherwise
// stay until the host restarts. It runs before this process makes any, so
// names with this process's PID are stale too (an earlier process's that
// had the same PID).
func reapStale() []error {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, e := range ents {
		pid, ok := vethPairPID(e.Name())
		if !ok {
			continue
		}
		if pid != os.Getpid() && unix.Kill(pid, 0) != unix.ESRCH {
			continue
		}
		if err := deleteNamed(e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("stale namespace of process %d: %w", pid, err))
		}
	}
	return errs
}

// vethPairName is the name VethPair gives the n-th pair's side in process pid.
func vethPairName(pid int, n int32, side string) string {
	return fmt.Sprintf("goroce-%d-%d-%s", pid, n, side)
}

// vethPairPID returns the PID in a name VethPair gives.
func vethPairPID(name string) (int, bool) {
	var pid, n int
	var side string
	if c, _ := fmt.Sscanf(name, "goroce-%d-%d-%s", &pid, &n, &side); c != 3 || pid <= 0 {
		return 0, false
	}
	return pid, true
}
