package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/internal/testenv"
)

// Root must not use a runtime directory another user owns (the README's
// GOROCE_RUNDIR=/tmp/... pattern, where that user may have been first) or
// one others may write: it would follow what they plant there.
func TestRegistryRefusesUnsafeRunDir(t *testing.T) {
	testenv.Root(t)
	def := DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Netns: Netns{Inode: 1, Dev: 2}}

	theirs := t.TempDir()
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := NewRegistry(theirs).Add(def)
	if !errors.Is(err, rundir.ErrUnsafe) || !strings.Contains(err.Error(), theirs) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("Add in a directory of uid 65534: %v", err)
	}

	open := t.TempDir()
	os.Chmod(open, 0o777)
	err = NewRegistry(open).Add(def)
	if !errors.Is(err, rundir.ErrUnsafe) || !strings.Contains(err.Error(), "mode 0777") {
		t.Errorf("Add in a 0777 directory: %v", err)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("Add wrote %v into the refused directory", ents)
	}
}

// The attack itself: a symlink planted at devices/NAME.owner pointing at
// a file of root's; Open takes the device's lock there and, before,
// truncated the target.
func TestOpenRefusesPlantedOwnerSymlink(t *testing.T) {
	dir := t.TempDir()
	reg := NewRegistry(dir)
	if err := reg.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Versions: VersionsV2}); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "precious")
	os.WriteFile(target, []byte("do not truncate\n"), 0o644)
	if err := os.Symlink(target, filepath.Join(dir, "devices", "rxe0.owner")); err != nil {
		t.Fatal(err)
	}
	d, err := Open("rxe0", Options{RunDir: dir})
	if err == nil {
		d.Close()
		t.Fatal("Open took its lock through a planted symlink")
	}
	if !errors.Is(err, rundir.ErrUnsafe) {
		t.Errorf("Open: %v, want the unsafe-file error", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "do not truncate\n" {
		t.Errorf("the symlink's target now holds %q", b)
	}
}

// Lock files are 0600, and the owner of a running device is still shown
// to users who cannot open its lock file (from the published GID table).
func TestLockFilesPrivate(t *testing.T) {
	dir := t.TempDir()
	reg := NewRegistry(dir)
	ns, err := CurrentNetns()
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Add(DeviceDef{Name: "rxe0", Type: "rxe", Netdev: "lo", Netns: ns, Versions: VersionsV2}); err != nil {
		t.Fatal(err)
	}
	d, err := Open("rxe0", Options{RunDir: dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, f := range []string{".lock", "rxe0.owner"} {
		fi, err := os.Stat(filepath.Join(dir, "devices", f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", f, fi.Mode(), err)
		}
	}
	ow, ok := reg.publishedOwner("rxe0")
	if !ok || ow.PID != os.Getpid() {
		t.Errorf("owner from the published table: %+v %v, want pid %d", ow, ok, os.Getpid())
	}
}
