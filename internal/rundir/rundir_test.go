package rundir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

const nobody = 65534

// victim is a file another user wants root to truncate or chmod.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(p, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkVictim(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if err != nil || string(b) != "precious\n" || fi.Mode().Perm() != 0o644 {
		t.Errorf("the symlink's target was touched: %q, mode %v, %v", b, fi.Mode(), err)
	}
}

func TestCheckDir(t *testing.T) {
	good := t.TempDir()
	if err := CheckDir(good); err != nil {
		t.Fatalf("a 0700 directory of our own: %v", err)
	}
	if err := os.Chmod(good, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(good); err != nil {
		t.Fatalf("a 0755 directory of our own: %v", err)
	}

	for _, mode := range []os.FileMode{0o777, 0o775, 0o757, 0o1777} {
		d := t.TempDir()
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		err := CheckDir(d)
		if !errors.Is(err, ErrUnsafe) || !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "lets other users write") {
			t.Errorf("mode %v: %v, want ErrUnsafe naming the mode", mode, err)
		}
	}

	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckDir(link); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink to a directory: %v", err)
	}
	f := filepath.Join(good, "file")
	os.WriteFile(f, nil, 0o644)
	if err := CheckDir(f); !errors.Is(err, ErrUnsafe) {
		t.Errorf("a file: %v", err)
	}
	if err := CheckDir(filepath.Join(good, "nosuch")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// A runtime directory another (non-root) user owns is refused, naming the
// owner: that user could plant symlinks in it for root to follow.
func TestCheckDirOtherOwner(t *testing.T) {
	testenv.Root(t)
	d := t.TempDir()
	if err := os.Chown(d, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	err := CheckDir(d)
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") || !strings.Contains(err.Error(), "not by root or by you") {
		t.Errorf("owned by uid 65534: %v", err)
	}
	if err := MkdirAll(d, filepath.Join(d, "devices")); !errors.Is(err, ErrUnsafe) {
		t.Errorf("MkdirAll under it: %v", err)
	}
	if _, err := os.Stat(filepath.Join(d, "devices")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("MkdirAll created devices/ inside the refused directory: %v", err)
	}
}

func TestMkdirAll(t *testing.T) {
	root := filepath.Join(t.TempDir(), "run", "goroce")
	if err := MkdirAll(root, filepath.Join(root, "config", "rdma_cm")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(root, "config", "rdma_cm"))
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		t.Fatalf("made %v, %v", fi, err)
	}
	// A component below the root that another user could write is refused.
	if err := os.Chmod(filepath.Join(root, "config"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(root, filepath.Join(root, "config", "rdma_cm")); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "config") {
		t.Errorf("world-writable config/: %v", err)
	}
	// A symlink planted as a component is refused, not followed.
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(root, "devices"))
	if err := MkdirAll(root, filepath.Join(root, "devices", "x")); !errors.Is(err, ErrUnsafe) {
		t.Errorf("symlinked devices/: %v", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("MkdirAll made %v in the symlink's target", ents)
	}
	if err := MkdirAll(root, "/etc"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("a directory outside the root: %v", err)
	}
}

// The attack of the hostile-peers issue: root follows a planted symlink
// at devices/NAME.owner and truncates the file it points to.
func TestOpenLockRefusesSymlink(t *testing.T) {
	v := victim(t)
	lock := filepath.Join(t.TempDir(), "rxe0.owner")
	if err := os.Symlink(v, lock); err != nil {
		t.Fatal(err)
	}
	f, err := OpenLock(lock)
	if err == nil {
		f.Close()
	}
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("OpenLock of a symlink: %v", err)
	}
	checkVictim(t, v)
	if _, err := ReadFile(lock); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("ReadFile of a symlink: %v, want ELOOP", err)
	}
}

func TestOpenLockMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, ".lock")
	f, err := OpenLock(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("new lock file mode %v, want 0600", fi.Mode().Perm())
	}
	// An older goroce's 0644 lock file is tightened.
	old := filepath.Join(dir, "old.owner")
	os.WriteFile(old, []byte("123\n"), 0o644)
	f, err = OpenLock(old)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if fi, _ := os.Stat(old); fi.Mode().Perm() != 0o600 {
		t.Errorf("old lock file mode %v after OpenLock, want 0600", fi.Mode().Perm())
	}
}

// Any user could flock a 0644 lock file and hang root's `roce link add`;
// a lock file from OpenLock can be opened by its owner only. The first
// half shows the attack works on a 0644 file, so the second half's
// refusal is OpenLock's doing.
func TestOtherUserCannotHoldLock(t *testing.T) {
	testenv.Root(t)
	flock, err := exec.LookPath("flock")
	testenv.Require(t, err == nil, "flock(1) (util-linux)")
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755) // let nobody reach the files
	}
	tryAsNobody := func(p string) error {
		cmd := exec.Command(flock, "-n", "-s", p, "true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(strings.TrimSpace(string(out)))
		}
		return nil
	}
	loose := filepath.Join(dir, "loose.lock")
	os.WriteFile(loose, nil, 0o644)
	if err := tryAsNobody(loose); err != nil {
		t.Fatalf("control: nobody cannot flock a 0644 file either (%v); the test proves nothing here", err)
	}
	tight := filepath.Join(dir, ".lock")
	f, err := OpenLock(tight)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := tryAsNobody(tight); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("nobody took the lock of OpenLock's file: %v", err)
	}
	// And a lock file another user made is not used.
	theirs := filepath.Join(dir, "theirs.lock")
	os.WriteFile(theirs, nil, 0o600)
	os.Chown(theirs, nobody, nobody)
	if f, err := OpenLock(theirs); err == nil {
		f.Close()
		t.Error("OpenLock used a lock file owned by uid 65534")
	} else if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "belongs to") {
		t.Errorf("lock file of another user: %v", err)
	}
}

// State files are written under new random names: a symlink planted at
// the old predictable NAME.tmp, or at NAME itself, is never written
// through.
func TestWriteFileNeverFollows(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "rxe0.json")
	v := victim(t)
	os.Symlink(v, p+".tmp")
	if err := WriteFile(p, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkVictim(t, v)
	if b, _ := os.ReadFile(p); string(b) != "{}\n" {
		t.Errorf("content %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	// A symlink at the name itself is replaced, not written through.
	q := filepath.Join(dir, "rxe1.json")
	os.Symlink(v, q)
	if err := WriteFile(q, []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	checkVictim(t, v)
	if fi, _ := os.Lstat(q); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("the symlink is still there")
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".tmp") && e.Type()&os.ModeSymlink == 0 {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
