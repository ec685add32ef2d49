package lab

import (
	"os"
	"path/filepath"
	"testing"
)

// TestHashTree: the hash changes with a file's content, its mode, a new
// file, and a file's path; copying a tree keeps it.
func TestHashTree(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "roce"), []byte("binary"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "x"), []byte("x"), 0o644)
	base, err := hashTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	cp := t.TempDir()
	if err := copyTree(dir, cp); err != nil {
		t.Fatal(err)
	}
	if h, _ := hashTree(cp); h != base {
		t.Error("a copy hashes differently")
	}
	seen := map[string]string{base: "base"}
	for name, change := range map[string]func(){
		"content": func() { os.WriteFile(filepath.Join(dir, "roce"), []byte("binarY"), 0o755) },
		"mode":    func() { os.Chmod(filepath.Join(dir, "roce"), 0o700) },
		"new":     func() { os.WriteFile(filepath.Join(dir, "y"), nil, 0o644) },
		"rename":  func() { os.Rename(filepath.Join(dir, "sub", "x"), filepath.Join(dir, "sub", "z")) },
	} {
		change()
		h, err := hashTree(dir)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("after %s the hash is that of %s", name, prev)
		}
		seen[h] = name
	}
}
