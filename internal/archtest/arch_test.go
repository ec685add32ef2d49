package archtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// root is the module's root directory.
func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

// TestLayers: every import of every package of the module, its tests'
// included, is an arrow of the table; every package is in the table; the
// table's arrows point down; wire depends on the standard library alone and
// the engine and below on nothing that does I/O.
func TestLayers(t *testing.T) {
	for _, e := range CheckTable() {
		t.Error(e)
	}
	pkgs, err := List(root(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pkgs {
		if rel(p.ImportPath) != "" {
			n++
		}
	}
	if n < 30 {
		t.Fatalf("go list found only %d packages of the module", n)
	}
	for _, e := range Check(pkgs, os.ReadFile) {
		t.Error(e)
	}
}

// TestPlanted plants wrong imports in the real module, through a go list
// overlay (the files exist for go list alone): a non-test file of wire/mad
// that imports link, a test of verbs that imports host, and a new package
// the table does not know. The check must fail on each, naming the file
// and line of the import, and on nothing else.
func TestPlanted(t *testing.T) {
	dir := root(t)
	plant := map[string]string{
		filepath.Join(dir, "wire", "mad", "zz_planted.go"):  "package mad\n\nimport (\n\t\"fmt\"\n\n\t_ \"" + Module + "/link\"\n)\n\nvar _ = fmt.Sprint\n",
		filepath.Join(dir, "verbs", "zz_planted_test.go"):   "package verbs_test\n\nimport _ \"" + Module + "/host\"\n",
		filepath.Join(dir, "internal", "zzplanted", "p.go"): "package zzplanted\n",
	}
	tmp := t.TempDir()
	overlay := struct{ Replace map[string]string }{map[string]string{}}
	for path, src := range plant {
		f := filepath.Join(tmp, strings.ReplaceAll(strings.TrimPrefix(path, dir), string(filepath.Separator), "_"))
		if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay.Replace[path] = f
	}
	b, _ := json.Marshal(overlay)
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, b, 0o644); err != nil {
		t.Fatal(err)
	}
	pkgs, err := List(dir, "-overlay", ov)
	if err != nil {
		t.Fatal(err)
	}
	readFile := func(path string) ([]byte, error) {
		if src, ok := plant[path]; ok {
			return []byte(src), nil
		}
		return os.ReadFile(path)
	}
	errs := Check(pkgs, readFile)
	want := []string{
		"wire/mad/zz_planted.go:6: wire/mad imports link: not an arrow of the table",
		"verbs/zz_planted_test.go:3: the tests of verbs import host: not an arrow of the table",
		"internal/zzplanted: a package the table does not know",
	}
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || strings.HasPrefix(e, w)
		}
		if !found {
			t.Errorf("no error %q; the check said:\n%s", w, strings.Join(errs, "\n"))
		}
	}
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d:\n%s", len(errs), len(want), strings.Join(errs, "\n"))
	}
}

// TestTableRanks: an arrow that points up the layers is refused even when
// the table lists it.
func TestTableRanks(t *testing.T) {
	saved := Table["wire/mad"]
	defer func() { Table["wire/mad"] = saved }()
	r := saved
	r.imports = "verbs"
	Table["wire/mad"] = r
	errs := CheckTable()
	if len(errs) != 1 || !strings.Contains(errs[0], "wire/mad (layer 0) may import verbs (layer 3): an arrow that points up") {
		t.Errorf("CheckTable = %q", errs)
	}
}

// TestNoIO: a package of the engine that depends, even through another,
// on one that does I/O is refused, and wire on anything outside the
// standard library (synthetic go list output).
func TestNoIO(t *testing.T) {
	pkgs := []Package{
		{ImportPath: Module + "/link/fabric", Imports: []string{Module + "/link", Module + "/wire"},
			Deps: []string{Module + "/link", Module + "/wire", Module + "/link/neigh", "github.com/vishvananda/netlink"}},
		{ImportPath: Module + "/wire", Deps: []string{"bytes", "github.com/google/gopacket"}},
		{ImportPath: "bytes", Standard: true},
		{ImportPath: "github.com/google/gopacket"},
	}
	var got []string
	for _, e := range Check(pkgs, os.ReadFile) {
		if !strings.HasPrefix(e, "table: ") { // the rest of the table is absent here
			got = append(got, e)
		}
	}
	want := []string{
		"link/fabric depends on " + Module + "/link/neigh: the engine and what is below it never do I/O",
		"link/fabric depends on github.com/vishvananda/netlink: the engine and what is below it never do I/O",
		"wire depends on github.com/google/gopacket: it may use the standard library only",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Check =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
