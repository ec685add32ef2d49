package main

import (
	"strings"
	"testing"

	"github.com/goroce/goroce/host"
)

// configDevs registers rxe0 (RoCE v2 only, like Linux rxe), rxe1 (both)
// and rxe2 (RoCE v1 only) in a fresh runtime directory.
func configDevs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	reg := host.NewRegistry(dir)
	for i, v := range []host.Versions{host.VersionsV2, host.VersionsBoth, host.VersionsV1} {
		d := host.DeviceDef{Name: "rxe" + string(rune('0'+i)), Type: "rxe", Netdev: "eth" + string(rune('0'+i)),
			Netns: host.Netns{Inode: 1, Dev: 1}, Versions: v}
		if err := reg.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestModeTOS runs roce mode and roce tos (cma_roce_mode, cma_roce_tos)
// in order: what they print, their errors and exit statuses, and that a
// refused value changes nothing.
func TestModeTOS(t *testing.T) {
	dir := configDevs(t)
	usage := func(cmd string) string { return "Run 'roce " + cmd + " --help' for usage." }
	for i, tc := range []struct {
		args   string
		code   int
		stdout string
		stderr []string
	}{
		{"mode -d rxe0", 0, "RoCE v2\n", nil},
		{"mode -d rxe0 -p 1 -m 2", 0, "RoCE v2\n", nil},
		{"mode -d rxe0 -p 1 -m 1", 1, "", []string{
			"roce: mode: Invalid argument: rxe0 port 1 does not speak IB/RoCE v1 (roce-versions v2): its only mode is 2 (RoCE v2)\n"}},
		{"mode -d rxe0", 0, "RoCE v2\n", nil},
		{"mode -d rxe1", 0, "RoCE v2\n", nil},
		{"mode -d rxe1 -m 1", 0, "IB/RoCE v1\n", nil},
		{"mode -d rxe1", 0, "IB/RoCE v1\n", nil},
		{"mode -d rxe1 -m 3", exitUsage, "", []string{`roce: mode: -m "3": the modes are 1 (IB/RoCE v1) and 2 (RoCE v2)`, usage("mode")}},
		{"mode -d rxe1 -m v2", exitUsage, "", []string{`-m "v2": the modes are 1 (IB/RoCE v1) and 2 (RoCE v2)`}},
		{"mode -d rxe1 --mode=", exitUsage, "", []string{`-m "": the modes are 1 (IB/RoCE v1) and 2 (RoCE v2)`}},
		{"mode -d rxe1", 0, "IB/RoCE v1\n", nil},
		{"mode -d rxe1 --mode 2", 0, "RoCE v2\n", nil},
		{"mode -d rxe2", 0, "IB/RoCE v1\n", nil},
		{"mode -d rxe2 -m 2", 1, "", []string{"roce: mode: Invalid argument: rxe2 port 1 does not speak RoCE v2 (roce-versions v1): its only mode is 1 (IB/RoCE v1)"}},
		{"mode -d rxe2 -m 1", 0, "IB/RoCE v1\n", nil},
		{"mode", exitUsage, "", []string{"roce: mode: which device? -d DEV is required", usage("mode")}},
		{"mode -d rxe0 rxe1", exitUsage, "", []string{usage("mode")}},
		{"mode -d rxe0 -p 0", exitUsage, "", []string{"roce: mode: Invalid argument: -p 0: the port number should be between 1 and 255 (goroce devices have port 1)"}},
		{"mode -d rxe0 -p 2", 1, "", []string{"roce: mode: Invalid argument: port 2: goroce devices have one port, port 1"}},
		{"mode -d rxe0 -p 2 -m 2", 1, "", []string{"roce: mode: Invalid argument: port 2: goroce devices have one port, port 1"}},
		{"mode -d nosuchdev", 1, "", []string{"roce: mode: No such device: no device nosuchdev in " + dir}},
		{"mode -d nosuchdev -m 2", 1, "", []string{"roce: mode: No such device: no device nosuchdev in " + dir}},

		{"tos -d rxe0", 0, "0\n", nil},
		{"tos -d rxe0 -p 1 -t 106", 0, "106\n", nil},
		{"tos -d rxe0", 0, "106\n", nil},
		{"tos -d rxe0 -t 255", 0, "255\n", nil},
		{"tos -d rxe0 -t 256", exitUsage, "", []string{`roce: tos: Numerical result out of range: -t "256": the ToS is 0..255, in decimal, 0x hex or 0 octal`, usage("tos")}},
		{"tos -d rxe0 -t -1", exitUsage, "", []string{`roce: tos: Invalid argument: -t "-1": the ToS is 0..255`}},
		{"tos -d rxe0 -t abc", exitUsage, "", []string{`roce: tos: Invalid argument: -t "abc"`}},
		{"tos -d rxe0 --tos=", exitUsage, "", []string{`roce: tos: Invalid argument: -t ""`}},
		{"tos -d rxe0", 0, "255\n", nil},
		{"tos -d rxe0 -t 0x20", 0, "32\n", nil},
		{"tos -d rxe0 -t 0152", 0, "106\n", nil},
		{"tos -d rxe0 --tos 0", 0, "0\n", nil},
		{"tos", exitUsage, "", []string{"roce: tos: which device? -d DEV is required"}},
		{"tos -d rxe0 -p 2", 1, "", []string{"roce: tos: Invalid argument: port 2: goroce devices have one port, port 1"}},
		{"tos -d nosuchdev -t 5", 1, "", []string{"roce: tos: No such device: no device nosuchdev in " + dir}},
		{"tos -d rxe1 -t 106", 0, "106\n", nil},
	} {
		code, stdout, stderr := roceAt(t, dir, strings.Fields(tc.args)...)
		if code != tc.code || stdout != tc.stdout {
			t.Errorf("%d: roce %s: exit %d, stdout %q; want %d, %q\nstderr: %s", i, tc.args, code, stdout, tc.code, tc.stdout, stderr)
		}
		if len(tc.stderr) == 0 && stderr != "" {
			t.Errorf("%d: roce %s: stderr %q", i, tc.args, stderr)
		}
		for _, w := range tc.stderr {
			if !strings.Contains(stderr, w) {
				t.Errorf("%d: roce %s: stderr %q lacks %q", i, tc.args, stderr, w)
			}
		}
	}

	// What they set is the configfs attributes' value, and they made no
	// directory.
	tree := configTree(dir)
	if devs, err := tree.List(); err != nil || len(devs) != 0 {
		t.Errorf("roce mode/tos left directories: %v, %v", devs, err)
	}
	if err := tree.Mkdir("rxe1"); err != nil {
		t.Fatal(err)
	}
	if m, err := tree.ReadMode("rxe1", 1); err != nil || m != "RoCE v2\n" {
		t.Errorf("default_roce_mode = %q, %v", m, err)
	}
	if s, err := tree.ReadTOS("rxe1", 1); err != nil || s != "106\n" {
		t.Errorf("default_roce_tos = %q, %v", s, err)
	}
	if err := tree.WriteMode("rxe1", 1, []byte("IB/RoCE v1\n")); err != nil {
		t.Fatal(err)
	}
	wantRun(t, dir, 0, nil, "mode", "-d", "rxe1")
	if _, out, _ := roceAt(t, dir, "mode", "-d", "rxe1"); out != "IB/RoCE v1\n" {
		t.Errorf("roce mode after the file was written: %q", out)
	}
}
