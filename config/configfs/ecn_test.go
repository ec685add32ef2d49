package configfs_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/goroce/goroce/config/configfs"
)

// fakeECN is an ECNView of two devices and three settings, the values
// kept in a map; a value above 1000 is refused.
type fakeECN struct {
	mu   sync.Mutex
	vals map[string]uint32 // "dev/name"
}

func (f *fakeECN) Devices() ([]string, error) { return []string{"rxe0", "rxe1"}, nil }
func (f *fakeECN) Names() []string {
	return []string{"roce_np/enable/0", "roce_np/enable/1", "roce_rp/rpg_time_reset"}
}

func (f *fakeECN) Get(dev, name string) (uint32, error) {
	if !slices.Contains(f.Names(), name) {
		return 0, syscall.ENOENT
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if v, ok := f.vals[dev+"/"+name]; ok {
		return v, nil
	}
	if name == "roce_rp/rpg_time_reset" {
		return 300, nil
	}
	return 0, nil
}

func (f *fakeECN) Set(dev, name string, v uint32) error {
	if v > 1000 {
		return fmt.Errorf("%s %d: valid values are 0 to 1000: %w", name, v, syscall.EINVAL)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vals[dev+"/"+name] = v
	return nil
}

// TestECNFiles: with Options.ECN the mount holds ecn/ beside rdma_cm/,
// a directory per device laid out as MLNX_OFED's sysfs
// (roce_np/enable/<prio>, roce_rp/<param>); a file reads as sysfs's
// ("300\n"), a write(2) of a number sets it for that device alone, and
// anything else is EINVAL with the reason to Options.Refused; the
// directories are the devices', not for mkdir or rmdir. Without
// Options.ECN there is no ecn/.
func TestECNFiles(t *testing.T) {
	view := &fakeECN{vals: map[string]uint32{}}
	var refused []error
	var mu sync.Mutex
	mnt, _, _ := mountTreeWith(t, configfs.Options{ECN: view, Refused: func(err error) {
		mu.Lock()
		refused = append(refused, err)
		mu.Unlock()
	}})
	ls := func(p string) string {
		t.Helper()
		ents, err := os.ReadDir(filepath.Join(mnt, p))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			n := e.Name()
			if e.IsDir() {
				n += "/"
			}
			names = append(names, n)
		}
		return strings.Join(names, " ")
	}
	for p, want := range map[string]string{
		"":                        "ecn/ rdma_cm/",
		"ecn":                     "rxe0/ rxe1/",
		"ecn/rxe0":                "roce_np/ roce_rp/",
		"ecn/rxe0/roce_np":        "enable/",
		"ecn/rxe0/roce_np/enable": "0 1",
		"ecn/rxe1/roce_rp":        "rpg_time_reset",
	} {
		if got := ls(p); got != want {
			t.Errorf("ls %s: %q, want %q", p, got, want)
		}
	}
	file := filepath.Join(mnt, "ecn/rxe0/roce_rp/rpg_time_reset")
	if b, err := os.ReadFile(file); err != nil || string(b) != "300\n" {
		t.Errorf("cat rpg_time_reset: %q, %v", b, err)
	}
	if err := os.WriteFile(file, []byte("150\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "150\n" {
		t.Errorf("after echo 150: %q", b)
	}
	if v, _ := view.Get("rxe1", "roce_rp/rpg_time_reset"); v != 300 {
		t.Errorf("rxe1's rpg_time_reset %d after rxe0's was set", v)
	}
	if err := os.WriteFile(filepath.Join(mnt, "ecn/rxe1/roce_np/enable/1"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, _ := view.Get("rxe1", "roce_np/enable/1"); v != 1 {
		t.Errorf("rxe1 roce_np/enable/1 = %d after echo 1", v)
	}
	for _, bad := range []string{"2000\n", "x\n", "-1"} {
		if err := os.WriteFile(file, []byte(bad), 0o644); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("echo %q: %v, want EINVAL", bad, err)
		}
	}
	if b, _ := os.ReadFile(file); string(b) != "150\n" {
		t.Errorf("after refused writes: %q", b)
	}
	mu.Lock()
	if len(refused) != 3 || !strings.Contains(refused[0].Error(), "valid values are 0 to 1000") || !strings.Contains(refused[1].Error(), `"x" is not a number`) {
		t.Errorf("refusals heard: %v", refused)
	}
	mu.Unlock()
	if err := os.Mkdir(filepath.Join(mnt, "ecn/rxe9"), 0o755); !errors.Is(err, syscall.EPERM) {
		t.Errorf("mkdir ecn/rxe9: %v, want EPERM", err)
	}
	if err := syscall.Rmdir(filepath.Join(mnt, "ecn/rxe0")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("rmdir ecn/rxe0: %v, want EPERM", err)
	}
	for _, p := range []string{"ecn/rxe9", "ecn/rxe0/roce_xp", "ecn/rxe0/roce_rp/rpg_bogus"} {
		if _, err := os.Stat(filepath.Join(mnt, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s: %v, want ENOENT", p, err)
		}
	}

	plain, _, _ := mountTree(t)
	if _, err := os.Stat(filepath.Join(plain, "ecn")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without Options.ECN: stat ecn: %v, want ENOENT", err)
	}
}
