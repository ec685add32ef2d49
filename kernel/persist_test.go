package kernel_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/kernel"
)

// udevLine matches the rule's one line and captures its keys.
var udevLine = regexp.MustCompile(`(?m)^ACTION=="add", SUBSYSTEM=="infiniband", KERNEL=="([^"]+)", RUN\+="([^"]+)"$`)

// TestPersistUdev: on a host with udev, the plan is one rule on the RDMA
// device's add event that runs roce with the setting; applying it twice
// writes once, a new value replaces it, and Remove takes it away.
func TestPersistUdev(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/udev"), 0o755)
	p := kernel.Persist{Root: root, Exe: "/usr/local/bin/roce"}
	s := kernel.Setting{Dev: "rxe0", Port: 1, Attr: kernel.AttrMode, Value: "2"}
	pl, err := p.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(root, "etc/udev/rules.d/90-roce-rxe0-port1-mode.rules")
	if pl.Kind != kernel.KindUdev || len(pl.Files) != 1 || pl.Files[0].Path != want {
		t.Fatalf("plan %+v, want one udev rule at %s", pl, want)
	}
	m := udevLine.FindStringSubmatch(pl.Files[0].Content)
	if m == nil || m[1] != "rxe0" || m[2] != "/usr/local/bin/roce mode --kernel -d rxe0 -p 1 -m 2" {
		t.Errorf("rule:\n%s", pl.Files[0].Content)
	}
	for _, w := range []string{"default_roce_mode of rxe0 port 1 to RoCE v2", "Remove with: roce mode --kernel -d rxe0 -p 1 --persist=false"} {
		if !strings.Contains(pl.Files[0].Content, w) {
			t.Errorf("rule's comment lacks %q:\n%s", w, pl.Files[0].Content)
		}
	}
	if ch, err := p.Apply(pl); err != nil || len(ch) != 1 || ch[0] != want {
		t.Fatalf("Apply: %v %v", ch, err)
	}
	if b, _ := os.ReadFile(want); string(b) != pl.Files[0].Content {
		t.Errorf("file holds %q", b)
	}
	if ch, err := p.Apply(pl); err != nil || len(ch) != 0 {
		t.Errorf("second Apply wrote %v, %v; want nothing", ch, err)
	}
	s.Value = "1"
	pl1, _ := p.Plan(s)
	if ch, err := p.Apply(pl1); err != nil || len(ch) != 1 {
		t.Errorf("Apply of a new value: %v %v", ch, err)
	}
	if b, _ := os.ReadFile(want); !strings.Contains(string(b), "-m 1\"") || !strings.Contains(string(b), "to IB/RoCE v1") {
		t.Errorf("after a new value the rule reads:\n%s", b)
	}
	// The ToS has a rule of its own beside it.
	ts := kernel.Setting{Dev: "rxe0", Port: 1, Attr: kernel.AttrTOS, Value: "106"}
	plt, _ := p.Plan(ts)
	if m := udevLine.FindStringSubmatch(plt.Files[0].Content); m == nil || m[2] != "/usr/local/bin/roce tos --kernel -d rxe0 -p 1 -t 106" {
		t.Errorf("ToS rule:\n%s", plt.Files[0].Content)
	}
	if rm, err := p.Remove(s); err != nil || len(rm) != 1 || rm[0] != want {
		t.Errorf("Remove: %v %v", rm, err)
	}
	if _, err := os.Stat(want); !errors.Is(err, os.ErrNotExist) {
		t.Error("the rule is still there")
	}
	if rm, err := p.Remove(s); err != nil || len(rm) != 0 {
		t.Errorf("second Remove: %v %v; want nothing", rm, err)
	}
}

// TestPersistSystemd: on a host with systemd and no udev, the plan is a
// oneshot unit and the symbolic link systemctl enable makes.
func TestPersistSystemd(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755)
	p := kernel.Persist{Root: root, Exe: "/opt/roce%1/roce"}
	s := kernel.Setting{Dev: "mlx5_0", Port: 2, Attr: kernel.AttrTOS, Value: "106"}
	pl, err := p.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(root, "etc/systemd/system/roce-mlx5_0-port2-tos.service")
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/roce-mlx5_0-port2-tos.service")
	if pl.Kind != kernel.KindSystemd || len(pl.Files) != 2 || pl.Files[0].Path != unit || pl.Files[1].Path != wants ||
		pl.Files[1].Link != "/etc/systemd/system/roce-mlx5_0-port2-tos.service" {
		t.Fatalf("plan %+v", pl)
	}
	for _, w := range []string{"Type=oneshot\n", "ExecStart=/opt/roce%%1/roce tos --kernel -d mlx5_0 -p 2 -t 106\n", "WantedBy=multi-user.target\n"} {
		if !strings.Contains(pl.Files[0].Content, w) {
			t.Errorf("unit lacks %q:\n%s", w, pl.Files[0].Content)
		}
	}
	if ch, err := p.Apply(pl); err != nil || len(ch) != 2 {
		t.Fatalf("Apply: %v %v", ch, err)
	}
	if l, err := os.Readlink(wants); err != nil || l != pl.Files[1].Link {
		t.Errorf("link %q %v", l, err)
	}
	if ch, err := p.Apply(pl); err != nil || len(ch) != 0 {
		t.Errorf("second Apply wrote %v %v", ch, err)
	}
	if rm, err := p.Remove(s); err != nil || len(rm) != 2 {
		t.Errorf("Remove: %v %v", rm, err)
	}
}

// TestPersistNone: without udev or systemd the plan writes nothing and
// says what to run at boot.
func TestPersistNone(t *testing.T) {
	p := kernel.Persist{Root: t.TempDir(), Exe: "/opt/extra/roce"}
	pl, err := p.Plan(kernel.Setting{Dev: "rxe0", Port: 1, Attr: kernel.AttrMode, Value: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Kind != kernel.KindNone || len(pl.Files) != 0 ||
		!strings.Contains(pl.Manual, "neither udev nor systemd") || !strings.Contains(pl.Manual, "/opt/extra/roce mode --kernel -d rxe0 -p 1 -m 2") {
		t.Errorf("plan %+v", pl)
	}
}

// TestPersistRefuses names a rule cannot carry.
func TestPersistRefuses(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/udev"), 0o755)
	for _, c := range []struct {
		exe, dev string
	}{
		{"roce", "rxe0"},
		{"/opt/my roce/roce", "rxe0"},
		{"/usr/bin/roce", "rxe*"},
		{"/usr/bin/roce", "a/b"},
		{"/usr/bin/roce", ""},
	} {
		p := kernel.Persist{Root: root, Exe: c.exe}
		s := kernel.Setting{Dev: c.dev, Port: 1, Attr: kernel.AttrMode, Value: "2"}
		if _, err := p.Plan(s); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Plan with exe %q dev %q: %v, want EINVAL", c.exe, c.dev, err)
		}
	}
}
