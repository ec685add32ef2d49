package bench_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// runScript runs bench/NAME with args from the repository's root, as a
// user would, fails the test with its output if it fails, and checks that
// it left no network namespace named nsPrefix followed by its PID (each
// script names its namespaces so). It returns the script's stdout.
func runScript(t *testing.T, name, nsPrefix string, args ...string) string {
	t.Helper()
	root := testenv.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*testenv.Slow)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "bench", name)}, args...)...)
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	what := "bench/" + name + " " + strings.Join(args, " ")
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", what, err, stdout.String(), stderr.String())
	}
	t.Logf("%s:\n%s", what, stdout.String())
	ns, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	prefix := nsPrefix + strconv.Itoa(cmd.Process.Pid)
	for _, l := range strings.Split(string(ns), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == prefix || strings.HasPrefix(f[0], prefix+"-")) {
			t.Errorf("%s left namespace %s behind", what, f[0])
		}
	}
	return stdout.String()
}
