package kernel_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/config/configfs"
	"github.com/goroce/goroce/config/configtest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/kernel"
	"github.com/goroce/goroce/kernel/kerneltest"
	"github.com/goroce/goroce/wire"
)

// logs collects what the procedure says through Logf.
type logs struct {
	mu    sync.Mutex
	lines []string
}

func (l *logs) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// fakeMountinfo writes a mount table that has configfs mounted at root.
func fakeMountinfo(t *testing.T, root string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mountinfo")
	line := fmt.Sprintf("22 1 0:20 / / rw - ext4 /dev/vda1 rw\n33 22 0:31 / %s rw,relatime - configfs none rw\n",
		strings.ReplaceAll(root, " ", `\040`))
	if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// kernelTree is a configfs served by goroce's own configfs (FUSE), which
// behaves as Linux 6.1's does (mkdir fills ports/N, a v2-only port
// refuses "IB/RoCE v1" with EINVAL, values survive rmdir), for a device
// rxe0 that speaks RoCE v2 only, beside a sysfs tree of the same rxe0.
func kernelTree(t *testing.T) (*kernel.Configfs, *logs) {
	t.Helper()
	testenv.Root(t)
	_, err := os.Stat("/dev/fuse")
	testenv.Require(t, err == nil, "/dev/fuse (modprobe fuse)")
	rundir := t.TempDir()
	reg := configtest.NewRegistry(config.Device{Name: "rxe0", RoCEv2: true})
	mnt := t.TempDir()
	// Let other users reach the mount (TestConfigfsNotRoot).
	os.Chmod(filepath.Dir(mnt), 0o755)
	os.Chmod(mnt, 0o755)
	srv, err := configfs.Mount(mnt, config.Open(rundir, reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Unmount() })
	tr := kerneltest.NewTree(t)
	tr.AddDevice(kerneltest.LabRXE())
	l := &logs{}
	return &kernel.Configfs{Root: mnt, Sysfs: kernel.Sysfs{Root: tr.Root}, Logf: l.logf,
		Modprobe: func(m string) error { return fmt.Errorf("no modprobe %s in this test", m) }}, l
}

// TestConfigfsProcedure runs the procedure on a tree that behaves as the
// kernel's: it reads RoCE v2, makes the device's directory only for the
// time it needs it, says why the kernel refuses IB/RoCE v1 on rxe, sets a
// ToS that outlives the directory, and leaves a directory it did not make.
func TestConfigfsProcedure(t *testing.T) {
	c, l := kernelTree(t)
	dir := filepath.Join(c.Root, "rdma_cm", "rxe0")

	m, err := c.Mode("rxe0", 1)
	if err != nil || m != wire.RoCEv2 {
		t.Fatalf("Mode: %v %v, want RoCE v2", m, err)
	}
	if exists(dir) {
		t.Error("Mode left rdma_cm/rxe0 behind")
	}

	_, err = c.SetMode("rxe0", 1, wire.RoCEv1)
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("SetMode IB/RoCE v1 on rxe: %v, want EINVAL", err)
	}
	for _, want := range []string{"rxe0 port 1 does not speak IB/RoCE v1", "rxe speaks RoCE v2 only", "its only mode is 2 (RoCE v2)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if exists(dir) {
		t.Error("a refused SetMode left rdma_cm/rxe0 behind")
	}
	if got, err := c.SetMode("rxe0", 1, wire.RoCEv2); err != nil || got != wire.RoCEv2 {
		t.Errorf("SetMode RoCE v2: %v %v", got, err)
	}

	if got, err := c.SetTOS("rxe0", 1, 106); err != nil || got != 106 {
		t.Fatalf("SetTOS 106: %v %v", got, err)
	}
	if exists(dir) {
		t.Error("SetTOS left rdma_cm/rxe0 behind")
	}
	if got, err := c.TOS("rxe0", 1); err != nil || got != 106 {
		t.Errorf("TOS after the directory went: %v %v, want 106 (the kernel keeps it)", got, err)
	}

	// A directory the procedure did not make stays.
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := c.SetTOS("rxe0", 1, 0); err != nil || got != 0 {
		t.Errorf("SetTOS 0: %v %v", got, err)
	}
	if !exists(dir) {
		t.Error("the procedure removed a directory it did not make")
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}

	_, err = c.Mode("rxe0", 2)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "rxe0 has no port 2 (its ports: 1)") {
		t.Errorf("Mode of port 2: %v, want ENOENT naming the ports", err)
	}
	if exists(dir) {
		t.Error("a missing port left rdma_cm/rxe0 behind")
	}
	_, err = c.Mode("mlx5_0", 1)
	if !errors.Is(err, syscall.ENODEV) || !strings.Contains(err.Error(), "the kernel has no RDMA device mlx5_0") {
		t.Errorf("Mode of a device the tree lacks: %v, want ENODEV in words", err)
	}
	if l.String() != "" {
		t.Errorf("the procedure logged %q on a mounted tree with rdma_cm", l)
	}
}

// TestConfigfsNotRoot: without root, making the device's directory or
// writing is refused, and the error says root is needed.
func TestConfigfsNotRoot(t *testing.T) {
	c, _ := kernelTree(t)
	runAs := func(fn func()) {
		// setfsuid changes only this thread's file-access identity; lock
		// the goroutine to it for the calls.
		done := make(chan struct{})
		go func() {
			defer close(done)
			// Never unlocked: the thread ends with the goroutine.
			runtime.LockOSThread()
			unix.Setfsuid(65534)
			fn()
		}()
		<-done
	}
	var err error
	runAs(func() { _, err = c.SetTOS("rxe0", 1, 32) })
	if !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), "needs root") {
		t.Errorf("SetTOS as nobody: %v, want EACCES saying root is needed", err)
	}
}

// TestConfigfsModprobe: a mounted configfs without rdma_cm's tree makes
// the procedure load rdma_cm, saying so; when that does not bring the tree
// the error says why. On a tree of plain directories (no kernel to fill
// rdma_cm/DEV) it also shows that the procedure removes the directory it
// made when the port is missing, and reads and writes attributes in one
// it did not make.
func TestConfigfsModprobe(t *testing.T) {
	root := t.TempDir()
	l := &logs{}
	var loaded []string
	c := &kernel.Configfs{Root: root, Mountinfo: fakeMountinfo(t, root), Logf: l.logf,
		Modprobe: func(m string) error {
			loaded = append(loaded, m)
			return os.Mkdir(filepath.Join(root, "rdma_cm"), 0o755)
		}}
	_, err := c.Mode("rxe0", 1)
	if len(loaded) != 1 || loaded[0] != "rdma_cm" {
		t.Errorf("modprobe calls %v, want rdma_cm", loaded)
	}
	if !strings.Contains(l.String(), "loading rdma_cm: "+filepath.Join(root, "rdma_cm")+" is missing") {
		t.Errorf("log %q does not say it loads rdma_cm", l)
	}
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "rxe0 has no port 1") {
		t.Errorf("Mode on an empty directory: %v, want ENOENT for the port", err)
	}
	if exists(filepath.Join(root, "rdma_cm", "rxe0")) {
		t.Error("the procedure left the directory it made")
	}

	// A device directory someone else made, with plain files.
	pd := filepath.Join(root, "rdma_cm", "rxe0", "ports", "1")
	if err := os.MkdirAll(pd, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pd, kernel.AttrMode), []byte("RoCE v2\n"), 0o644)
	os.WriteFile(filepath.Join(pd, kernel.AttrTOS), []byte("0\n"), 0o644)
	if m, err := c.Mode("rxe0", 1); err != nil || m != wire.RoCEv2 {
		t.Errorf("Mode: %v %v", m, err)
	}
	if v, err := c.SetTOS("rxe0", 1, 106); err != nil || v != 106 {
		t.Errorf("SetTOS: %v %v", v, err)
	}
	if b, _ := os.ReadFile(filepath.Join(pd, kernel.AttrTOS)); string(b) != "106\n" {
		t.Errorf("default_roce_tos holds %q, want what echo 106 writes", b)
	}
	if !exists(pd) {
		t.Error("the procedure removed a directory it did not make")
	}
	os.WriteFile(filepath.Join(pd, kernel.AttrMode), []byte("RoCE v3\n"), 0o644)
	if _, err := c.Mode("rxe0", 1); !errors.Is(err, syscall.EIO) {
		t.Errorf("Mode of a garbled attribute: %v, want EIO", err)
	}

	// rdma_cm missing, and loading it does not help.
	root2 := t.TempDir()
	c2 := &kernel.Configfs{Root: root2, Mountinfo: fakeMountinfo(t, root2), Modprobe: func(string) error { return nil }}
	_, err = c2.Mode("rxe0", 1)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no configfs support (CONFIG_INFINIBAND_ADDR_TRANS_CONFIGFS)") {
		t.Errorf("rdma_cm without its tree: %v", err)
	}
	c2.Modprobe = func(string) error { return errors.New("modprobe: FATAL: Module rdma_cm not found") }
	_, err = c2.Mode("rxe0", 1)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "loading rdma_cm failed: modprobe: FATAL") {
		t.Errorf("rdma_cm that does not load: %v", err)
	}
}

// TestConfigfsMount: configfs not mounted at the root makes the procedure
// mount it (as root), saying so; where the kernel has no configfs (this
// test machine's kernel has none, lab/README.md) the error says that.
func TestConfigfsMount(t *testing.T) {
	testenv.Root(t)
	root := t.TempDir()
	l := &logs{}
	c := &kernel.Configfs{Root: root, Logf: l.logf, Modprobe: func(string) error { return errors.New("no modules here") }}
	_, err := c.Mode("rxe0", 1)
	if errors.Is(err, syscall.ENODEV) {
		if !strings.Contains(err.Error(), "this kernel has no configfs") {
			t.Errorf("mount without configfs in the kernel: %v", err)
		}
		return
	}
	// This kernel has configfs: it is mounted at root now.
	t.Cleanup(func() { unix.Unmount(root, 0) })
	if !strings.Contains(l.String(), "mounted configfs at "+root) {
		t.Errorf("log %q does not say it mounted configfs", l)
	}
	if err == nil {
		t.Errorf("Mode on a fresh configfs without rdma_cm succeeded")
	}
}
