package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestProfileEnv: GOROCE_CPUPROFILE and GOROCE_TRACE make any command
// write a CPU profile (gzip, as runtime/pprof writes it) and an execution
// trace (its "go 1.N trace" header) of its run; an unwritable file is
// reported on stderr and the command still runs.
func TestProfileEnv(t *testing.T) {
	dir := t.TempDir()
	prof, tr := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "exec.trace")
	t.Setenv(envCPUProfile, prof)
	t.Setenv(envTrace, tr)
	if code, stdout, stderr := roce(t, "--version"); code != 0 || stderr != "" || stdout == "" {
		t.Fatalf("roce --version: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if b, err := os.ReadFile(prof); err != nil || !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("%s: %v, %d bytes, want a gzipped profile", envCPUProfile, err, len(b))
	}
	if b, err := os.ReadFile(tr); err != nil || !bytes.HasPrefix(b, []byte("go 1.")) {
		t.Errorf("%s: %v, %.12q, want an execution trace", envTrace, err, b)
	}
	t.Setenv(envCPUProfile, filepath.Join(dir, "no", "such", "dir", "cpu.prof"))
	t.Setenv(envTrace, "")
	if code, _, stderr := roce(t, "--version"); code != 0 || !bytes.Contains([]byte(stderr), []byte("roce: "+envCPUProfile+": ")) {
		t.Errorf("unwritable profile: exit %d, stderr %q; want 0 and the variable named", code, stderr)
	}
}
