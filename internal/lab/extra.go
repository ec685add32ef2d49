package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// ExtraDir is where lab/up puts ROCE_LAB_EXTRA's files in every VM.
const ExtraDir = "/opt/extra"

// extraHashFile, in ExtraDir, names the set of files the VMs were booted
// with: the SHA-256 of their paths, modes and contents.
const extraHashFile = ".goroce-extra-sha256"

// StartWithExtra is Start for a test that runs files of its own inside the
// VMs — a static goroce build, say: it makes sure both VMs run with
// exactly dir's files under ExtraDir (lab/up's ROCE_LAB_EXTRA, which only
// takes effect at boot). When they hold other files, or none, it takes the
// lab down and brings it up again with them, holding the lab's lock
// throughout (Start's, until the test ends); a lab already booted with
// them is reused as it is. The VMs are otherwise the same, so other tests
// run on the lab as they find it.
func StartWithExtra(t testing.TB, dir string) *Lab {
	t.Helper()
	sum, err := hashTree(dir)
	if err != nil {
		t.Fatalf("lab extra files %s: %v", dir, err)
	}
	l := Start(t)
	if l.hasExtra(sum) {
		return l
	}
	// A copy of dir with the hash beside the files, for lab/up to pack.
	stage := t.TempDir()
	if err := copyTree(dir, stage); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stage, extraHashFile), []byte(sum+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "ROCE_LAB_TRACES="+t.TempDir(), "ROCE_LAB_EXTRA="+stage)
	for _, step := range [][]string{{"down"}, {"up", "2"}} {
		cmd := exec.Command(filepath.Join(l.Dir, step[0]), step[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lab/%s with ROCE_LAB_EXTRA: %v\n%s", strings.Join(step, " "), err, tail(out, 4000))
		}
		t.Logf("lab/%s (ROCE_LAB_EXTRA): %s", strings.Join(step, " "), tail(out, 300))
	}
	if !l.up() || !l.hasExtra(sum) {
		t.Fatalf("the lab came up without the extra files of %s", dir)
	}
	return l
}

// hasExtra reports whether both VMs were booted with the files whose hash
// is sum.
func (l *Lab) hasExtra(sum string) bool {
	for _, vm := range []VM{VM1, VM2} {
		out, rc, err := l.Exec(vm, "cat "+ExtraDir+"/"+extraHashFile)
		if err != nil || rc != 0 || strings.TrimSpace(out) != sum {
			return false
		}
	}
	return true
}

// hashTree hashes the regular files under dir: their paths, modes and
// contents, in path order.
func hashTree(dir string) (string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		io.WriteString(h, rel+"\x00"+st.Mode().String()+"\x00")
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// copyTree copies dir's directories and regular files into dst.
func copyTree(dir, dst string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
