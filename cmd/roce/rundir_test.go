package main

import (
	"os"
	"path/filepath"
	"testing"
)

// `roce link add` and `roce link delete` in a runtime directory others may write
// fail with the reason and the way out, and leave nothing behind.
func TestUnsafeRunDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	want := []string{"refusing " + dir, "mode 0777 lets other users write to it", "chmod go-w"}
	wantRun(t, dir, 1, want, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("link add wrote %v", ents)
	}
	// A device made while the directory was safe: deleting it once devices/ is open to all is refused too.
	os.Chmod(dir, 0o755)
	wantRun(t, dir, 0, nil, "link", "add", "rxe0", "type", "rxe", "netdev", "lo")
	os.Chmod(filepath.Join(dir, "devices"), 0o777)
	wantRun(t, dir, 1, []string{"refusing " + filepath.Join(dir, "devices")}, "link", "delete", "rxe0")
}
