package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/config/configtest"
	"github.com/goroce/goroce/wire"
)

// The test devices: rxe0 speaks RoCE v2 only, like Linux rxe (the lab's
// device); rxe1 both versions; rxe2 RoCE v1 only, like an mlx4 port.
var testDevs = []config.Device{
	{Name: "rxe0", RoCEv2: true},
	{Name: "rxe1", RoCEv1: true, RoCEv2: true},
	{Name: "rxe2", RoCEv1: true},
}

// newTree returns a tree on a fresh runtime directory whose registry holds
// testDevs.
func newTree(t *testing.T) (*config.Tree, *configtest.Registry) {
	t.Helper()
	tr, reg, _ := newTreeIn(t)
	return tr, reg
}

// newTreeIn is newTree that also returns the runtime directory.
func newTreeIn(t *testing.T) (*config.Tree, *configtest.Registry, string) {
	t.Helper()
	dir := t.TempDir()
	reg := configtest.NewRegistry()
	for _, d := range testDevs {
		d.Created = time.Date(2025, 11, 29, 17, 57, 0, 0, time.UTC)
		reg.Add(d)
	}
	return config.Open(dir, reg), reg, dir
}

// wantErrno checks that err is errno (0: no error), and that a failure is
// a *config.Error that unwraps to it.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	if errno == 0 {
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
		return
	}
	if !errors.Is(err, errno) {
		t.Errorf("%s: error %v, want %v (%s)", what, err, errno, errnoName(errno))
		return
	}
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Errorf("%s: error %T %v is not a *config.Error", what, err, err)
	}
	if got := config.Errno(err); got != errno {
		t.Errorf("%s: Errno = %v, want %v", what, got, errno)
	}
}

func errnoName(e syscall.Errno) string {
	for _, n := range []struct {
		e syscall.Errno
		s string
	}{{syscall.ENOENT, "ENOENT"}, {syscall.EEXIST, "EEXIST"}, {syscall.ENODEV, "ENODEV"}, {syscall.EPERM, "EPERM"},
		{syscall.EINVAL, "EINVAL"}, {syscall.ERANGE, "ERANGE"}, {syscall.ENOTDIR, "ENOTDIR"}, {syscall.EISDIR, "EISDIR"}} {
		if n.e == e {
			return n.s
		}
	}
	return strconv.Itoa(int(e))
}

// snapshot is every value the tree shows: through the files of the
// directories that exist and through the typed accessors, for every device.
func snapshot(t *testing.T, tr *config.Tree) string {
	t.Helper()
	var b strings.Builder
	for _, d := range testDevs {
		m, err := tr.DefaultMode(d.Name, 1)
		tos, err2 := tr.DefaultTOS(d.Name, 1)
		fmt.Fprintf(&b, "%s: %v %v %d %v;", d.Name, m, err, tos, err2)
		for _, a := range []string{config.AttrMode, config.AttrTOS} {
			v, err := tr.ReadFile(d.Name + "/ports/1/" + a)
			fmt.Fprintf(&b, " %s=%q %v", a, v, errors.Unwrap(err))
		}
		b.WriteString("\n")
	}
	devs, err := tr.List()
	fmt.Fprintf(&b, "list %v %v\n", devs, err)
	return b.String()
}

// TestContract runs the lab's configfs procedure on rxe0 (Linux 6.1,
// KERNEL-BEHAVIOUR.md) and goroce's other port kinds, step by step, each
// with the kernel's errno, checking after every failure that nothing
// changed.
func TestContract(t *testing.T) {
	tr, _ := newTree(t)
	type step struct {
		op    string // mkdir, rmdir, read, write
		path  string // relative to rdma_cm
		data  string // write: the bytes; read: what must be read
		errno syscall.Errno
	}
	const (
		mode0 = "rxe0/ports/1/default_roce_mode"
		tos0  = "rxe0/ports/1/default_roce_tos"
		mode1 = "rxe1/ports/1/default_roce_mode"
		tos1  = "rxe1/ports/1/default_roce_tos"
		mode2 = "rxe2/ports/1/default_roce_mode"
	)
	steps := []step{
		// The attributes exist only with the directory.
		{"read", mode0, "", syscall.ENOENT},
		{"write", mode0, "RoCE v2\n", syscall.ENOENT},
		{"mkdir", "rxe0/", "", 0},
		{"read", mode0, "RoCE v2\n", 0},
		// rxe is RoCE v2 only: v1 is EINVAL and the mode stays.
		{"write", mode0, "IB/RoCE v1\n", syscall.EINVAL},
		{"read", mode0, "RoCE v2\n", 0},
		{"write", mode0, "RoCE v2\n", 0},
		{"read", mode0, "RoCE v2\n", 0},
		{"write", mode0, "bogus\n", syscall.EINVAL},
		{"read", mode0, "RoCE v2\n", 0},
		{"write", mode0, "RoCE v2", 0}, // echo -n
		{"read", mode0, "RoCE v2\n", 0},
		{"write", mode0, "roce v2\n", syscall.EINVAL},
		{"write", mode0, "RoCE v2\n\n", syscall.EINVAL},
		{"read", tos0, "0\n", 0},
		{"write", tos0, "106\n", 0},
		{"read", tos0, "106\n", 0},
		{"write", tos0, "255\n", 0},
		{"read", tos0, "255\n", 0},
		{"write", tos0, "256\n", syscall.ERANGE},
		{"write", tos0, "-1\n", syscall.EINVAL},
		{"write", tos0, "abc\n", syscall.EINVAL},
		{"write", tos0, "\n", syscall.EINVAL},
		{"write", tos0, "", syscall.EINVAL},
		{"read", tos0, "255\n", 0},
		{"write", tos0, "0x20\n", 0},
		{"read", tos0, "32\n", 0},
		{"write", tos0, "0\n", 0},
		{"read", tos0, "0\n", 0},
		{"mkdir", "rxe0/", "", syscall.EEXIST},
		{"mkdir", "nosuchdev", "", syscall.ENODEV},
		{"mkdir", "rxe0/ports/2", "", syscall.EPERM},
		{"rmdir", "rxe0/ports/1", "", syscall.EPERM},
		{"rmdir", "rxe0/", "", 0},
		{"read", tos0, "", syscall.ENOENT},
		// The values survive rmdir.
		{"mkdir", "rxe0", "", 0},
		{"write", tos0, "106\n", 0},
		{"rmdir", "rxe0", "", 0},
		{"mkdir", "rxe0", "", 0},
		{"read", tos0, "106\n", 0},
		{"write", tos0, "0\n", 0},
		{"rmdir", "rxe0", "", 0},
		// A port that speaks both versions takes either.
		{"mkdir", "rxe1", "", 0},
		{"read", mode1, "RoCE v2\n", 0},
		{"write", mode1, "IB/RoCE v1\n", 0},
		{"read", mode1, "IB/RoCE v1\n", 0},
		{"write", mode1, "IB/RoCE v1\n\n", syscall.EINVAL},
		{"write", mode1, "ib/roce v1\n", syscall.EINVAL},
		{"read", mode1, "IB/RoCE v1\n", 0},
		{"write", mode1, "RoCE v2", 0},
		{"read", mode1, "RoCE v2\n", 0},
		{"write", tos1, "0x6a", 0},
		{"read", tos1, "106\n", 0},
		{"write", tos1, "0x100", syscall.ERANGE},
		{"read", tos1, "106\n", 0},
		// A RoCE v1 port starts in v1 and refuses v2.
		{"mkdir", "rxe2", "", 0},
		{"read", mode2, "IB/RoCE v1\n", 0},
		{"write", mode2, "RoCE v2\n", syscall.EINVAL},
		{"read", mode2, "IB/RoCE v1\n", 0},
		{"write", mode2, "IB/RoCE v1", 0},
		{"read", mode2, "IB/RoCE v1\n", 0},
	}
	for i, s := range steps {
		what := fmt.Sprintf("step %d: %s %s %q", i, s.op, s.path, s.data)
		before := snapshot(t, tr)
		var err error
		switch s.op {
		case "mkdir":
			err = tr.Mkdir(s.path)
		case "rmdir":
			err = tr.Rmdir(s.path)
		case "write":
			err = tr.WriteFile(s.path, []byte(s.data))
		case "read":
			var b []byte
			b, err = tr.ReadFile(s.path)
			if err == nil && string(b) != s.data {
				t.Errorf("%s: read %q", what, b)
			}
		}
		wantErrno(t, what, err, s.errno)
		if s.errno != 0 || s.op == "read" {
			if after := snapshot(t, tr); after != before {
				t.Errorf("%s changed the tree:\nbefore:\n%safter:\n%s", what, before, after)
			}
		}
	}
}

// TestWriteMode checks every kind of default_roce_mode input on each kind
// of port; a failure is EINVAL naming the port's valid values and leaves
// the mode as it was.
func TestWriteMode(t *testing.T) {
	valid := map[string]string{
		"rxe0": `takes "RoCE v2"`,
		"rxe1": `takes "IB/RoCE v1" or "RoCE v2"`,
		"rxe2": `takes "IB/RoCE v1"`,
	}
	for _, tc := range []struct {
		data string
		mode map[string]string // the mode read back per device; absent: EINVAL
	}{
		{"RoCE v2", map[string]string{"rxe0": "RoCE v2", "rxe1": "RoCE v2"}},
		{"RoCE v2\n", map[string]string{"rxe0": "RoCE v2", "rxe1": "RoCE v2"}},
		{"IB/RoCE v1", map[string]string{"rxe1": "IB/RoCE v1", "rxe2": "IB/RoCE v1"}},
		{"IB/RoCE v1\n", map[string]string{"rxe1": "IB/RoCE v1", "rxe2": "IB/RoCE v1"}},
		{"roce v2\n", nil},
		{"RoCE V2\n", nil},
		{"bogus\n", nil},
		{"RoCE v2\n\n", nil},
		{"IB/RoCE v1\n\n", nil},
		{"RoCE v2\r\n", nil},
		{" RoCE v2", nil},
		{"RoCE v2 ", nil},
		{"RoCE v2\x00", nil},
		{"RoCE v1", nil},
		{"IB/RoCE v2", nil},
		{"2", nil},
		{"", nil},
		{"\n", nil},
	} {
		for _, dev := range []string{"rxe0", "rxe1", "rxe2"} {
			tr, _ := newTree(t)
			if err := tr.Mkdir(dev); err != nil {
				t.Fatal(err)
			}
			before, err := tr.ReadMode(dev, 1)
			if err != nil {
				t.Fatal(err)
			}
			err = tr.WriteMode(dev, 1, []byte(tc.data))
			got, rerr := tr.ReadMode(dev, 1)
			if rerr != nil {
				t.Fatal(rerr)
			}
			what := fmt.Sprintf("%s: write %q", dev, tc.data)
			if want, ok := tc.mode[dev]; ok {
				wantErrno(t, what, err, 0)
				if got != want+"\n" {
					t.Errorf("%s: reads %q, want %q", what, got, want+"\n")
				}
				continue
			}
			wantErrno(t, what, err, syscall.EINVAL)
			if err != nil && !strings.Contains(err.Error(), valid[dev]) {
				t.Errorf("%s: message %q does not say %q", what, err, valid[dev])
			}
			if got != before {
				t.Errorf("%s: the mode changed from %q to %q", what, before, got)
			}
		}
	}
}

// TestWriteTOS checks kstrtou8's syntax, one input at a time, from a ToS
// of 7: a failure leaves 7.
func TestWriteTOS(t *testing.T) {
	tr, _ := newTree(t)
	if err := tr.Mkdir("rxe0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data  string
		tos   int // the value read back
		errno syscall.Errno
	}{
		{"106\n", 106, 0},
		{"106", 106, 0},
		{"255\n", 255, 0},
		{"0\n", 0, 0},
		{"0x20\n", 32, 0},
		{"0X20", 32, 0},
		{"0x0ff", 255, 0},
		{"040", 32, 0},
		{"000000000377", 255, 0},
		{"+7", 7, 0},
		{"+0x10\n", 16, 0},
		{"256\n", 0, syscall.ERANGE},
		{"0x100", 0, syscall.ERANGE},
		{"0400", 0, syscall.ERANGE},
		{"18446744073709551615", 0, syscall.ERANGE},
		{"18446744073709551616", 0, syscall.ERANGE},
		{"99999999999999999999x", 0, syscall.ERANGE}, // overflow is checked before the trailing garbage
		{"-1\n", 0, syscall.EINVAL},
		{"-0", 0, syscall.EINVAL},
		{"abc\n", 0, syscall.EINVAL},
		{"", 0, syscall.EINVAL},
		{"\n", 0, syscall.EINVAL},
		{"+", 0, syscall.EINVAL},
		{"++1", 0, syscall.EINVAL},
		{" 1", 0, syscall.EINVAL},
		{"1 ", 0, syscall.EINVAL},
		{"1\n\n", 0, syscall.EINVAL},
		{"1\r\n", 0, syscall.EINVAL},
		{"08", 0, syscall.EINVAL},
		{"0x", 0, syscall.EINVAL},
		{"0xg", 0, syscall.EINVAL},
		{"256x", 0, syscall.EINVAL},
		{"1\x00", 0, syscall.EINVAL},
		{"0b1", 0, syscall.EINVAL},
		{"1_0", 0, syscall.EINVAL},
	} {
		if err := tr.WriteTOS("rxe0", 1, []byte("7")); err != nil {
			t.Fatal(err)
		}
		err := tr.WriteTOS("rxe0", 1, []byte(tc.data))
		what := fmt.Sprintf("write %q", tc.data)
		wantErrno(t, what, err, tc.errno)
		want := tc.tos
		if tc.errno != 0 {
			want = 7
			if !strings.Contains(err.Error(), "0..255") {
				t.Errorf("%s: message %q does not name the range", what, err)
			}
		}
		got, err := tr.ReadTOS("rxe0", 1)
		if err != nil || got != strconv.Itoa(want)+"\n" {
			t.Errorf("%s: reads %q, %v; want %d", what, got, err, want)
		}
		if v, err := tr.DefaultTOS("rxe0", 1); err != nil || int(v) != want {
			t.Errorf("%s: DefaultTOS %d, %v; want %d", what, v, err, want)
		}
	}
}

// TestMkdirRmdir checks the errno of every kind of mkdir and rmdir.
func TestMkdirRmdir(t *testing.T) {
	tr, _ := newTree(t)
	for i, s := range []struct {
		op    string
		path  string
		errno syscall.Errno
	}{
		{"rmdir", "rxe0", syscall.ENOENT},
		{"mkdir", "rxe0", 0},
		{"mkdir", "rxe0", syscall.EEXIST},
		{"mkdir", "/rxe0/", syscall.EEXIST},
		{"mkdir", "", syscall.EEXIST}, // rdma_cm itself
		{"mkdir", "nosuchdev", syscall.ENODEV},
		{"mkdir", "a b", syscall.ENODEV},
		{"mkdir", ".lock", syscall.ENODEV},
		{"mkdir", "../../devices", syscall.ENODEV},
		{"mkdir", "nosuchdev/ports", syscall.ENOENT},
		{"mkdir", "rxe0/ports", syscall.EEXIST},
		{"mkdir", "rxe0/ports/1", syscall.EEXIST},
		{"mkdir", "rxe0/ports/2", syscall.EPERM},
		{"mkdir", "rxe0/ports/0", syscall.EPERM},
		{"mkdir", "rxe0/foo", syscall.EPERM},
		{"mkdir", "rxe0/ports/1/foo", syscall.EPERM},
		{"mkdir", "rxe0/ports/1/default_roce_mode", syscall.EEXIST},
		{"mkdir", "rxe0/ports/1/default_roce_mode/x", syscall.ENOTDIR},
		{"rmdir", "", syscall.EPERM},
		{"rmdir", "rxe0/ports/1", syscall.EPERM},
		{"rmdir", "rxe0/ports", syscall.EPERM},
		{"rmdir", "rxe0/ports/2", syscall.ENOENT},
		{"rmdir", "rxe0/ports/01", syscall.ENOENT},
		{"rmdir", "rxe0/ports/1/default_roce_tos", syscall.ENOTDIR},
		{"rmdir", "nosuchdev", syscall.ENOENT},
		{"mkdir", "rxe1", 0},
		{"rmdir", "rxe0", 0},
		{"rmdir", "rxe0", syscall.ENOENT},
		{"mkdir", "rxe0", 0},
	} {
		var err error
		if s.op == "mkdir" {
			err = tr.Mkdir(s.path)
		} else {
			err = tr.Rmdir(s.path)
		}
		wantErrno(t, fmt.Sprintf("step %d: %s %q", i, s.op, s.path), err, s.errno)
	}
	devs, err := tr.List()
	if err != nil || strings.Join(devs, " ") != "rxe0 rxe1" {
		t.Errorf("List = %v, %v", devs, err)
	}
}

// TestStat checks what ls -la shows: modes, sizes and link counts as
// configfs has them.
func TestStat(t *testing.T) {
	tr, _ := newTree(t)
	if e, err := tr.Stat(""); err != nil || e.Name != "rdma_cm" || e.Mode != fs.ModeDir|0o755 || e.Nlink != 2 {
		t.Errorf("rdma_cm: %+v, %v", e, err)
	}
	if err := tr.Mkdir("rxe0"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		mode  fs.FileMode
		size  int64
		nlink uint32
		list  string
	}{
		{"", fs.ModeDir | 0o755, 0, 3, "rxe0"},
		{"rxe0", fs.ModeDir | 0o755, 0, 3, "ports"},
		{"rxe0/ports", fs.ModeDir | 0o755, 0, 3, "1"},
		{"rxe0/ports/1", fs.ModeDir | 0o755, 0, 2, "default_roce_mode default_roce_tos"},
		{"rxe0/ports/1/default_roce_mode", 0o644, 4096, 1, ""},
		{"rxe0/ports/1/default_roce_tos", 0o644, 4096, 1, ""},
	} {
		e, err := tr.Stat(tc.path)
		if err != nil || e.Mode != tc.mode || e.Size != tc.size || e.Nlink != tc.nlink || e.ModTime.IsZero() {
			t.Errorf("%q: %+v, %v", tc.path, e, err)
		}
		if !e.IsDir() {
			_, err := tr.ReadDir(tc.path)
			wantErrno(t, "readdir "+tc.path, err, syscall.ENOTDIR)
			continue
		}
		ents, err := tr.ReadDir(tc.path)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name)
		}
		if err != nil || strings.Join(names, " ") != tc.list {
			t.Errorf("readdir %q: %v, %v", tc.path, names, err)
		}
	}
	_, err := tr.ReadFile("rxe0/ports")
	wantErrno(t, "read rxe0/ports", err, syscall.EISDIR)
	wantErrno(t, "write rxe0/ports/1", tr.WriteFile("rxe0/ports/1", []byte("1")), syscall.EISDIR)
	_, err = tr.Stat("rxe0/ports/1/default_roce_tos/x")
	wantErrno(t, "stat below an attribute", err, syscall.ENOTDIR)
	_, err = tr.Stat("rxe1")
	wantErrno(t, "stat rxe1", err, syscall.ENOENT)
}

// TestDefaults checks the typed accessors RDMA CM uses: the initial mode
// per port kind (cma_add_one), no need for a directory, the port checks,
// and that they see what the files do and the files what they set.
func TestDefaults(t *testing.T) {
	tr, _ := newTree(t)
	for dev, want := range map[string]wire.Version{"rxe0": wire.RoCEv2, "rxe1": wire.RoCEv2, "rxe2": wire.RoCEv1} {
		if m, err := tr.DefaultMode(dev, 1); err != nil || m != want {
			t.Errorf("%s: DefaultMode = %v, %v; want %v", dev, m, err, want)
		}
		if tos, err := tr.DefaultTOS(dev, 1); err != nil || tos != 0 {
			t.Errorf("%s: DefaultTOS = %d, %v", dev, tos, err)
		}
		for _, port := range []int{0, 2} {
			_, err := tr.DefaultMode(dev, port)
			wantErrno(t, fmt.Sprintf("%s: DefaultMode port %d", dev, port), err, syscall.EINVAL)
			_, err = tr.DefaultTOS(dev, port)
			wantErrno(t, fmt.Sprintf("%s: DefaultTOS port %d", dev, port), err, syscall.EINVAL)
			wantErrno(t, "SetDefaultTOS", tr.SetDefaultTOS(dev, port, 1), syscall.EINVAL)
			wantErrno(t, "SetDefaultMode", tr.SetDefaultMode(dev, port, want), syscall.EINVAL)
		}
	}
	_, err := tr.DefaultMode("nosuchdev", 1)
	wantErrno(t, "DefaultMode nosuchdev", err, syscall.ENODEV)
	_, err = tr.DefaultTOS("nosuchdev", 1)
	wantErrno(t, "DefaultTOS nosuchdev", err, syscall.ENODEV)
	wantErrno(t, "SetDefaultTOS nosuchdev", tr.SetDefaultTOS("nosuchdev", 1, 1), syscall.ENODEV)

	// Set without a directory; the files show it once it is made.
	if err := tr.SetDefaultMode("rxe1", 1, wire.RoCEv1); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetDefaultTOS("rxe1", 1, 106); err != nil {
		t.Fatal(err)
	}
	err = tr.SetDefaultMode("rxe0", 1, wire.RoCEv1)
	wantErrno(t, "SetDefaultMode rxe0 v1", err, syscall.EINVAL)
	if err != nil && !strings.Contains(err.Error(), `takes "RoCE v2"`) {
		t.Errorf("message %q does not name the valid mode", err)
	}
	wantErrno(t, "SetDefaultMode rxe2 v2", tr.SetDefaultMode("rxe2", 1, wire.RoCEv2), syscall.EINVAL)
	wantErrno(t, "SetDefaultMode unknown", tr.SetDefaultMode("rxe1", 1, 0), syscall.EINVAL)
	if err := tr.Mkdir("rxe1"); err != nil {
		t.Fatal(err)
	}
	if m, err := tr.ReadMode("rxe1", 1); err != nil || m != "IB/RoCE v1\n" {
		t.Errorf("ReadMode = %q, %v", m, err)
	}
	if s, err := tr.ReadTOS("rxe1", 1); err != nil || s != "106\n" {
		t.Errorf("ReadTOS = %q, %v", s, err)
	}
	// And the other way round.
	if err := tr.WriteTOS("rxe1", 1, []byte("0x20\n")); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteMode("rxe1", 1, []byte("RoCE v2\n")); err != nil {
		t.Fatal(err)
	}
	if m, err := tr.DefaultMode("rxe1", 1); err != nil || m != wire.RoCEv2 || m.String() != "RoCEv2" || config.ModeName(m) != "RoCE v2" {
		t.Errorf("DefaultMode = %v, %v", m, err)
	}
	if tos, err := tr.DefaultTOS("rxe1", 1); err != nil || tos != 32 {
		t.Errorf("DefaultTOS = %d, %v", tos, err)
	}
	// The path methods need the directory and a port that exists.
	_, err = tr.ReadMode("rxe1", 2)
	wantErrno(t, "ReadMode port 2", err, syscall.ENOENT)
	wantErrno(t, "WriteTOS port 0", tr.WriteTOS("rxe1", 0, []byte("1")), syscall.ENOENT)
	_, err = tr.ReadTOS("rxe0", 1)
	wantErrno(t, "ReadTOS without mkdir", err, syscall.ENOENT)
	_, err = tr.ReadTOS("../rxe1", 1)
	wantErrno(t, "ReadTOS ../rxe1", err, syscall.ENOENT)
}

// TestDeviceLifetime: the directory of a deleted device stays (ENODEV on
// its attributes, as cma_configfs_params_get), and a device added again
// under the same name starts from the defaults.
func TestDeviceLifetime(t *testing.T) {
	tr, reg := newTree(t)
	if err := tr.Mkdir("rxe1"); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteMode("rxe1", 1, []byte("IB/RoCE v1")); err != nil {
		t.Fatal(err)
	}
	if err := tr.WriteTOS("rxe1", 1, []byte("106")); err != nil {
		t.Fatal(err)
	}
	reg.Delete("rxe1")
	if devs, err := tr.List(); err != nil || len(devs) != 1 || devs[0] != "rxe1" {
		t.Errorf("List = %v, %v", devs, err)
	}
	_, err := tr.ReadMode("rxe1", 1)
	wantErrno(t, "ReadMode of a deleted device", err, syscall.ENODEV)
	_, err = tr.ReadTOS("rxe1", 1)
	wantErrno(t, "ReadTOS of a deleted device", err, syscall.ENODEV)
	wantErrno(t, "WriteMode of a deleted device", tr.WriteMode("rxe1", 1, []byte("bogus")), syscall.ENODEV)
	// default_roce_tos_store parses first.
	wantErrno(t, "WriteTOS abc", tr.WriteTOS("rxe1", 1, []byte("abc")), syscall.EINVAL)
	wantErrno(t, "WriteTOS 5", tr.WriteTOS("rxe1", 1, []byte("5")), syscall.ENODEV)
	_, err = tr.DefaultMode("rxe1", 1)
	wantErrno(t, "DefaultMode of a deleted device", err, syscall.ENODEV)
	wantErrno(t, "mkdir again", tr.Mkdir("rxe1"), syscall.EEXIST)

	def := testDevs[1]
	def.Created = time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC)
	def.RoCEv1 = false
	reg.Add(def)
	if m, err := tr.ReadMode("rxe1", 1); err != nil || m != "RoCE v2\n" {
		t.Errorf("new device: ReadMode = %q, %v", m, err)
	}
	if s, err := tr.ReadTOS("rxe1", 1); err != nil || s != "0\n" {
		t.Errorf("new device: ReadTOS = %q, %v", s, err)
	}
	if err := tr.WriteTOS("rxe1", 1, []byte("8")); err != nil {
		t.Fatal(err)
	}
	if tos, err := tr.DefaultTOS("rxe1", 1); err != nil || tos != 8 {
		t.Errorf("new device: DefaultTOS = %d, %v", tos, err)
	}
	if m, err := tr.DefaultMode("rxe1", 1); err != nil || m != wire.RoCEv2 {
		t.Errorf("new device: DefaultMode = %v, %v", m, err)
	}
}

// TestState pins the state files: what an operator finds in the runtime
// directory, and that a corrupt one is EIO naming it, not a silent default.
func TestState(t *testing.T) {
	tr, _ := newTree(t)
	if err := tr.SetDefaultTOS("rxe1", 1, 106); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tr.StateDir(), "rxe1", "ports", "1", "default_roce_tos")
	if b, err := os.ReadFile(p); err != nil || string(b) != "106\n" {
		t.Errorf("%s: %q, %v", p, b, err)
	}
	if err := os.WriteFile(p, []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := tr.DefaultTOS("rxe1", 1)
	wantErrno(t, "corrupt state", err, syscall.EIO)
	if err != nil && !strings.Contains(err.Error(), p) {
		t.Errorf("message %q does not name %s", err, p)
	}
}

// TestError pins the error's fields and wording.
func TestError(t *testing.T) {
	tr, _ := newTree(t)
	if err := tr.Mkdir("rxe0"); err != nil {
		t.Fatal(err)
	}
	err := tr.WriteMode("rxe0", 1, []byte("IB/RoCE v1\n"))
	var ce *config.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%T %v", err, err)
	}
	if ce.Op != "write" || ce.Path != "rdma_cm/rxe0/ports/1/default_roce_mode" || ce.Dev != "rxe0" || ce.Port != 1 || ce.Err != syscall.EINVAL {
		t.Errorf("%+v", ce)
	}
	want := `write rdma_cm/rxe0/ports/1/default_roce_mode: "IB/RoCE v1": rxe0 port 1 does not speak RoCE v1: ` +
		`it speaks RoCE v2 only (roce-versions v2, like Linux rxe) and takes "RoCE v2": invalid argument`
	if err.Error() != want {
		t.Errorf("message\n%s\nwant\n%s", err, want)
	}
	err = tr.Mkdir("nosuchdev")
	if !errors.As(err, &ce) || ce.Op != "mkdir" || ce.Path != "rdma_cm/nosuchdev" || !strings.Contains(err.Error(), "no goroce device nosuchdev in ") {
		t.Errorf("%v", err)
	}
	if config.Errno(nil) != 0 || config.Errno(errors.New("x")) != syscall.EIO {
		t.Error("Errno")
	}
}

// TestConcurrent has writers, each with its own Tree as separate processes
// would have, race readers: a reader sees a whole valid value every time,
// and the value at the end is one a writer wrote. (cmd/roce's tests do the
// same with processes.)
func TestConcurrent(t *testing.T) {
	tr, reg, rundir := newTreeIn(t)
	if err := tr.Mkdir("rxe1"); err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range writers {
		wg.Go(func() {
			wt := config.Open(rundir, reg)
			for i := range rounds {
				mode := []string{"RoCE v2\n", "IB/RoCE v1\n"}[(w+i)%2]
				// ENOENT while writer 0 has the directory removed.
				if err := wt.WriteMode("rxe1", 1, []byte(mode)); err != nil && !errors.Is(err, syscall.ENOENT) {
					errs <- err
					return
				}
				if err := wt.SetDefaultTOS("rxe1", 1, uint8(w*rounds+i)); err != nil {
					errs <- err
					return
				}
				if w == 0 && i%10 == 0 { // rmdir and mkdir meanwhile: the values stay
					if err := wt.Rmdir("rxe1"); err != nil {
						errs <- err
						return
					}
					if err := wt.Mkdir("rxe1"); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	done := make(chan struct{})
	var rwg sync.WaitGroup
	rwg.Go(func() {
		rt := config.Open(rundir, reg)
		for {
			select {
			case <-done:
				return
			default:
			}
			if m, err := rt.DefaultMode("rxe1", 1); err != nil || (m != wire.RoCEv1 && m != wire.RoCEv2) {
				errs <- fmt.Errorf("DefaultMode = %v, %v", m, err)
				return
			}
			if tos, err := rt.DefaultTOS("rxe1", 1); err != nil || int(tos) >= writers*rounds {
				errs <- fmt.Errorf("DefaultTOS = %v, %v", tos, err)
				return
			}
			b, err := rt.ReadFile("rxe1/ports/1/default_roce_mode")
			if err != nil && !errors.Is(err, syscall.ENOENT) { // ENOENT between rmdir and mkdir
				errs <- err
				return
			}
			if err == nil && !bytes.Equal(b, []byte("RoCE v2\n")) && !bytes.Equal(b, []byte("IB/RoCE v1\n")) {
				errs <- fmt.Errorf("read %q", b)
				return
			}
		}
	})
	wg.Wait()
	close(done)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	tos, err := tr.DefaultTOS("rxe1", 1)
	if err != nil || int(tos)%rounds != rounds-1 {
		t.Errorf("final ToS %d, %v: not a writer's last", tos, err)
	}
}

// FuzzParseTOS: no input panics; what parses formats back to itself; a
// plain decimal agrees with strconv.
func FuzzParseTOS(f *testing.F) {
	for _, s := range []string{"0", "106\n", "255", "256", "0x20\n", "0X1f", "040", "+7", "-1", "abc", "", "0x", "08",
		"99999999999999999999x", "1\n\n", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := config.ParseTOS(data)
		if err != nil {
			if !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ERANGE) {
				t.Fatalf("%q: %v", data, err)
			}
		} else if w, err := config.ParseTOS([]byte(config.FormatTOS(v))); err != nil || w != v {
			t.Fatalf("%q: %d does not round-trip: %d, %v", data, v, w, err)
		}
		s := strings.TrimSuffix(string(data), "\n")
		if s != "" && s[0] >= '1' && s[0] <= '9' && strings.Trim(s, "0123456789") == "" {
			n, perr := strconv.ParseUint(s, 10, 64)
			switch {
			case perr != nil || n > 255:
				if !errors.Is(err, syscall.ERANGE) {
					t.Fatalf("%q: %d, %v; want ERANGE", data, v, err)
				}
			case err != nil || uint64(v) != n:
				t.Fatalf("%q: %d, %v; want %d", data, v, err, n)
			}
		}
	})
}

// FuzzParseMode: exactly four inputs are modes.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"RoCE v2", "RoCE v2\n", "IB/RoCE v1\n", "roce v2", "RoCE v2\n\n", ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := config.ParseMode(data)
		want := map[string]wire.Version{"RoCE v2": wire.RoCEv2, "RoCE v2\n": wire.RoCEv2,
			"IB/RoCE v1": wire.RoCEv1, "IB/RoCE v1\n": wire.RoCEv1}
		if w, ok := want[string(data)]; ok != (err == nil) || m != w {
			t.Fatalf("%q: %v, %v", data, m, err)
		}
		if err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%q: %v", data, err)
		}
	})
}
