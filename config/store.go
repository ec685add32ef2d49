package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/wire"
)

// lock takes the tree's lock, which every change holds: an exclusive
// flock(2) on <rundir>/config/rdma_cm/.lock, so writers in any process
// take turns. Readers do not lock: a change replaces a file by rename(2).
func (t *Tree) lock() (unlock func(), err error) {
	if err := rundir.MkdirAll(t.rundir, t.root); err != nil {
		return nil, err
	}
	f, err := rundir.OpenLock(filepath.Join(t.root, lockFile))
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: f.Name(), Err: err}
	}
	return func() { f.Close() }, nil
}

// writeFile replaces the file at p with content: written beside it under a
// new random name, then renamed over it (rundir.WriteFile), so a reader
// sees the old content or the new. The caller holds the lock.
func (t *Tree) writeFile(p, content string) error {
	if err := rundir.MkdirAll(t.rundir, filepath.Dir(p)); err != nil {
		return err
	}
	return rundir.WriteFile(p, []byte(content), 0o644)
}

// instanceOf identifies the device a value belongs to: a device deleted and
// added again under the same name is another device, which starts from the
// defaults, as a new cma_device does.
func instanceOf(def Device) string {
	return def.Created.UTC().Format(time.RFC3339Nano) + " " + def.versions() + "\n"
}

func (t *Tree) valuePath(dev string, port int, attr string) string {
	return filepath.Join(t.root, dev, "ports", fmt.Sprint(port), attr)
}

// loadRaw returns the stored value of attr on port 1 of def, or ok false
// when none is stored for this device (never set, or set for an earlier
// device of that name). Reading the instance before the value pairs with
// syncInstance's order: a value read after a current instance is current.
func (t *Tree) loadRaw(def Device, attr string) (raw []byte, ok bool, err error) {
	inst, err := rundir.ReadFile(filepath.Join(t.root, def.Name, instance))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if string(inst) != instanceOf(def) {
		return nil, false, nil
	}
	raw, err = rundir.ReadFile(t.valuePath(def.Name, 1, attr))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return raw, err == nil, err
}

// corrupt is the error for a state file that does not hold a value: EIO,
// naming the file, never a silent default.
func (t *Tree) corrupt(def Device, attr string, err error) error {
	return fmt.Errorf("corrupt state file %s (%v): %w", t.valuePath(def.Name, 1, attr), err, syscall.EIO)
}

// loadMode returns the mode of def's port.
func (t *Tree) loadMode(def Device) (wire.Version, error) {
	raw, ok, err := t.loadRaw(def, AttrMode)
	if err != nil || !ok {
		return initialMode(def), err
	}
	m, err := ParseMode(raw)
	if err != nil {
		return 0, t.corrupt(def, AttrMode, err)
	}
	if !def.speaks(m) {
		return 0, t.corrupt(def, AttrMode, fmt.Errorf("%s port 1 does not speak %s", def.Name, ModeName(m)))
	}
	return m, nil
}

// loadTOS returns the ToS of def's port.
func (t *Tree) loadTOS(def Device) (uint8, error) {
	raw, ok, err := t.loadRaw(def, AttrTOS)
	if err != nil || !ok {
		return 0, err
	}
	tos, err := ParseTOS(raw)
	if err != nil {
		return 0, t.corrupt(def, AttrTOS, err)
	}
	return tos, nil
}

// syncInstance makes the stored values def's: when they belong to an
// earlier device of that name, they are removed before the new instance is
// recorded. The caller holds the lock.
func (t *Tree) syncInstance(def Device) error {
	want := instanceOf(def)
	p := filepath.Join(t.root, def.Name, instance)
	got, err := rundir.ReadFile(p)
	if err == nil && string(got) == want {
		return nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.RemoveAll(filepath.Join(t.root, def.Name, "ports")); err != nil {
		return err
	}
	return t.writeFile(p, want)
}

// store records a value of n's attribute. The caller holds the lock.
func (t *Tree) store(op string, n node, def Device, content string) error {
	if err := t.syncInstance(def); err != nil {
		return t.fail(op, n, err, "")
	}
	if err := t.writeFile(t.valuePath(def.Name, n.port, n.attr), content); err != nil {
		return t.fail(op, n, err, "")
	}
	return nil
}

// storeMode sets the mode of n's port: EINVAL, naming the valid modes,
// when the port does not speak m (cma_set_default_gid_type). The caller
// holds the lock.
func (t *Tree) storeMode(op string, n node, def Device, m wire.Version) error {
	if !def.speaks(m) {
		return t.fail(op, n, syscall.EINVAL, "%q: %s port %d does not speak %s: %s",
			ModeName(m), n.dev, n.port, modeVersion(m), validModes(def))
	}
	return t.store(op, n, def, FormatMode(m))
}

// storeTOS sets the ToS of n's port. The caller holds the lock.
func (t *Tree) storeTOS(op string, n node, def Device, tos uint8) error {
	return t.store(op, n, def, FormatTOS(tos))
}

// modeVersion names the RoCE version of a mode for messages.
func modeVersion(m wire.Version) string {
	switch m {
	case wire.RoCEv1:
		return "RoCE v1"
	case wire.RoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("RoCE version %d", uint8(m))
}
