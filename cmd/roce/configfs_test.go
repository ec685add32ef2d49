package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// TestMain lets tests run roce as a process of its own: the test binary,
// run again with GOROCE_TEST_ROCE=1, is roce.
func TestMain(m *testing.M) {
	if os.Getenv("GOROCE_TEST_ROCE") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// Devices on lo bind UDP 4791 in this namespace, as host's and
	// link/udp's tests do: one package's tests at a time.
	os.Exit(testenv.RunHoldingRootPort(m))
}

// roceExecutable writes a script that runs roce as a process and returns
// its path. (Under -race, a process waits a second at exit for other
// reports unless GORACE says atexit_sleep_ms=0.)
func roceExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "roce")
	script := fmt.Sprintf("#!/bin/sh\nGOROCE_TEST_ROCE=1 GORACE=\"${GORACE:+$GORACE }atexit_sleep_ms=0\" exec %s \"$@\"\n",
		strconv.Quote(exe))
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// requireFUSE fails (CI) or skips (elsewhere) without root and /dev/fuse.
func requireFUSE(t *testing.T) {
	t.Helper()
	testenv.Root(t)
	_, err := os.Stat("/dev/fuse")
	testenv.Require(t, err == nil, "/dev/fuse (modprobe fuse)")
}

// isMounted reports whether dir is a mount point.
func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// detach unmounts dir lazily if a test left it mounted.
func detach(t *testing.T, dir string) {
	if isMounted(t, dir) {
		t.Errorf("%s was left mounted", dir)
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
}

// firstLine returns the first line r yields, then drains r in the
// background; it fails t if none comes within a minute.
func firstLine(t *testing.T, r io.Reader) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(r)
		l, _ := br.ReadString('\n')
		lines <- l
		io.Copy(io.Discard, br)
	}()
	select {
	case l := <-lines:
		return l
	case <-time.After(time.Minute):
		t.Fatal("no line within a minute")
		return ""
	}
}

// firstLineOf waits (a minute at most) for b's first line, and returns it
// with its newline.
func firstLineOf(t *testing.T, b *lockedBuffer) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := b.waitFor(t, ctx, "\n")
	return out[:strings.IndexByte(out, '\n')+1]
}

// TestConfigfsProcesses mounts the tree with roce configfs mount as a
// process of its own, and has other processes use it at once: roce mode
// switching the mode and a shell reading it through the mount, a shell
// writing the ToS through the mount and roce tos reading it. Every read is
// a whole valid value; the last writes win; SIGTERM unmounts, exit 0.
func TestConfigfsProcesses(t *testing.T) {
	requireFUSE(t)
	dir, mnt, roceBin := configDevs(t), testenv.SharedMountPoint(t), roceExecutable(t)
	// Not a StderrPipe read by a goroutine: Wait closes such a pipe once
	// the process has exited, and the reader could lose the last line
	// (CI run 81 did). exec copies into a Writer until EOF and Wait waits
	// for the copy.
	stderr := new(lockedBuffer)
	mount := exec.Command(roceBin, "--rundir", dir, "configfs", "mount", mnt)
	mount.Stderr = stderr
	if err := mount.Start(); err != nil {
		t.Fatal(err)
	}
	w := &fuseWatch{t: t, mnt: mnt, server: mount, stderr: stderr}
	t.Cleanup(func() {
		w.stopServer()
		detach(t, mnt)
	})
	line := firstLineOf(t, stderr)
	if want := "roce: configfs: serving the devices of " + dir + " at " + mnt + "/rdma_cm until interrupted or unmounted\n"; line != want {
		t.Fatalf("stderr %q, want %q", line, want)
	}
	if !isMounted(t, mnt) {
		t.Fatal("not mounted")
	}
	if err := w.within("mkdir", func() error { return os.Mkdir(mnt+"/rdma_cm/rxe1", 0o755) }); err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	script := `f=$MNT/rdma_cm/rxe1/ports/1
( for i in $(seq 25); do "$ROCE" --rundir "$DIR" mode -d rxe1 -m 1 >/dev/null && "$ROCE" --rundir "$DIR" mode -d rxe1 -m 2 >/dev/null || exit 1; done ) & w1=$!
( for i in $(seq 100); do echo $i > $f/default_roce_tos || exit 1; done ) & w2=$!
( for i in $(seq 300); do cat $f/default_roce_mode || exit 1; done ) > $OUT/modes & r1=$!
( for i in $(seq 50); do "$ROCE" --rundir "$DIR" tos -d rxe1 || exit 1; done ) > $OUT/tos & r2=$!
wait $w1 && wait $w2 && wait $r1 && wait $r2`
	sh := exec.Command("bash", "-c", script)
	sh.Env = append(os.Environ(), "MNT="+mnt, "ROCE="+roceBin, "DIR="+dir, "OUT="+out)
	var shOut bytes.Buffer
	sh.Stdout, sh.Stderr = &shOut, &shOut
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) // the loops, if the test fails while they run
	if err := w.within("the shell loops", sh.Wait); err != nil {
		t.Fatalf("%v\n%s", err, shOut.String())
	}
	check := func(file string, n int, valid func(string) bool) {
		b, err := os.ReadFile(filepath.Join(out, file))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != n {
			t.Errorf("%s: %d lines, want %d", file, len(lines), n)
		}
		for _, l := range lines {
			if !valid(l) {
				t.Errorf("%s: read %q", file, l)
			}
		}
	}
	check("modes", 300, func(l string) bool { return l == "RoCE v2" || l == "IB/RoCE v1" })
	check("tos", 50, func(l string) bool { n, err := strconv.Atoi(l); return err == nil && n >= 0 && n <= 100 })
	for file, want := range map[string]string{"default_roce_mode": "RoCE v2\n", "default_roce_tos": "100\n"} {
		var b []byte
		err := w.within("read "+file, func() (err error) {
			b, err = os.ReadFile(mnt + "/rdma_cm/rxe1/ports/1/" + file)
			return err
		})
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", file, b, err, want)
		}
	}

	wantTerminated(t, w.stopServer(), stderr.String(), mnt)
	if isMounted(t, mnt) {
		t.Error("still mounted after SIGTERM")
	}
}

// wantTerminated checks how roce configfs mount ended on SIGTERM: exit
// 143, its stderr's last line saying it was interrupted, what it had
// served and that it unmounted. (The mount point is in a shared mount,
// testenv.SharedMountPoint, so copies that other processes' `ip netns
// exec` make meanwhile go with the unmount and never hold the FUSE
// connection; TestConfigfsUnmountInUse holds one on purpose.)
func wantTerminated(t *testing.T, err error, stderr, mnt string) {
	t.Helper()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("roce configfs mount after SIGTERM: %v, want exit status 143\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	last := regexp.MustCompile(`^roce: configfs mount: interrupted by SIGTERM after serving ` + regexp.QuoteMeta(mnt) + ` for \d+m?\d*s: ` +
		`unmounted$`)
	if !last.MatchString(lines[len(lines)-1]) {
		t.Errorf("roce configfs mount's last line on SIGTERM: %q, want %s", lines[len(lines)-1], last)
	}
}

// TestConfigfsRefusedWrite: a write the kernel would refuse fails on the
// mount with the kernel's errno only (bash: "write error: Invalid
// argument"), and roce configfs mount says why on its stderr, one line per
// refused write, with the valid values: the operator who runs it sees what
// echo cannot show. Accepted writes print nothing.
func TestConfigfsRefusedWrite(t *testing.T) {
	requireFUSE(t)
	dir, mnt, roceBin := configDevs(t), testenv.SharedMountPoint(t), roceExecutable(t)
	stderr := new(lockedBuffer)
	mount := exec.Command(roceBin, "--rundir", dir, "configfs", "mount", mnt)
	mount.Stderr = stderr // Wait waits for the copy, so nothing is lost at exit
	if err := mount.Start(); err != nil {
		t.Fatal(err)
	}
	w := &fuseWatch{t: t, mnt: mnt, server: mount, stderr: new(bytes.Buffer)}
	t.Cleanup(func() {
		w.stopServer()
		detach(t, mnt)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serving := "roce: configfs: serving the devices of " + dir + " at " + mnt + "/rdma_cm until interrupted or unmounted\n"
	stderr.waitFor(t, ctx, serving)

	// rxe0 speaks RoCE v2 only, like Linux rxe: "RoCE v3" is no mode at
	// all, "IB/RoCE v1" one it does not speak.
	script := `f=$MNT/rdma_cm/rxe0/ports/1/default_roce_mode
mkdir $MNT/rdma_cm/rxe0 || exit 1
echo "RoCE v3" > $f && exit 2
echo "IB/RoCE v1" > $f && exit 3
echo 256 > $MNT/rdma_cm/rxe0/ports/1/default_roce_tos && exit 4
echo "RoCE v2" > $f || exit 5
echo 106 > $MNT/rdma_cm/rxe0/ports/1/default_roce_tos || exit 6
cat $f`
	sh := exec.Command("bash", "-c", script)
	sh.Env = append(os.Environ(), "MNT="+mnt, "LC_ALL=C")
	var out []byte
	err := w.within("the shell", func() (err error) {
		out, err = sh.CombinedOutput()
		return err
	})
	wantOut := "bash: line 3: echo: write error: Invalid argument\n" +
		"bash: line 4: echo: write error: Invalid argument\n" +
		"bash: line 5: echo: write error: Numerical result out of range\n" +
		"RoCE v2\n"
	if err != nil || string(out) != wantOut {
		t.Fatalf("the shell: %v\n%s\nwant:\n%s", err, out, wantOut)
	}
	refusals := []string{
		`roce: configfs: write rdma_cm/rxe0/ports/1/default_roce_mode: "RoCE v3\n" is not a RoCE mode: rxe0 port 1: ` +
			`it speaks RoCE v2 only (roce-versions v2, like Linux rxe) and takes "RoCE v2": invalid argument` + "\n",
		`roce: configfs: write rdma_cm/rxe0/ports/1/default_roce_mode: "IB/RoCE v1": rxe0 port 1 does not speak RoCE v1: ` +
			`it speaks RoCE v2 only (roce-versions v2, like Linux rxe) and takes "RoCE v2": invalid argument` + "\n",
		`roce: configfs: write rdma_cm/rxe0/ports/1/default_roce_tos: "256\n" is out of range: default_roce_tos takes 0..255: ` +
			"numerical result out of range\n",
	}
	// The server says it while it serves, not only when it exits.
	stderr.waitFor(t, ctx, refusals[len(refusals)-1])

	wantTerminated(t, w.stopServer(), stderr.String(), mnt)
	got := stderr.String()
	got = got[:strings.LastIndex(strings.TrimSuffix(got, "\n"), "\n")+1] // the interrupted line, checked above
	if want := serving + strings.Join(refusals, ""); got != want {
		t.Errorf("roce configfs mount's stderr:\n%s\nwant:\n%s", got, want)
	}
}

// TestConfigfsUnmounted: roce configfs mount returns 0 when its mount point
// is unmounted under it (umount DIR).
func TestConfigfsUnmounted(t *testing.T) {
	requireFUSE(t)
	dir, mnt := configDevs(t), testenv.SharedMountPoint(t)
	t.Cleanup(func() { detach(t, mnt) })
	pr, pw := io.Pipe()
	var stdout bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := run([]string{"--rundir", dir, "configfs", "mount", mnt}, &stdout, pw)
		pw.Close()
		done <- code
	}()
	if l := firstLine(t, pr); !strings.Contains(l, "serving") {
		t.Fatalf("stderr %q", l)
	}
	w := &fuseWatch{t: t, mnt: mnt}
	read := func(file string) (b []byte, err error) {
		err = w.within("read "+file, func() (err error) {
			b, err = os.ReadFile(file)
			return err
		})
		return b, err
	}
	if b, err := read(mnt + "/rdma_cm/rxe0/ports/1/default_roce_mode"); err == nil {
		t.Errorf("read without mkdir: %q", b)
	}
	if err := w.within("mkdir", func() error { return os.Mkdir(mnt+"/rdma_cm/rxe0", 0o755) }); err != nil {
		t.Fatal(err)
	}
	if b, err := read(mnt + "/rdma_cm/rxe0/ports/1/default_roce_mode"); err != nil || string(b) != "RoCE v2\n" {
		t.Errorf("default_roce_mode: %q, %v", b, err)
	}
	if err := w.within("umount", func() error { return syscall.Unmount(mnt, 0) }); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 || stdout.Len() != 0 {
			t.Errorf("exit %d, stdout %q", code, stdout.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("roce configfs mount did not return within a minute of umount")
	}
}

func TestConfigfsUsage(t *testing.T) {
	dir := configDevs(t)
	wantRun(t, dir, exitUsage, []string{"accepts 1 arg(s), received 0", "Run 'roce configfs mount --help' for usage."}, "configfs", "mount")
	wantRun(t, dir, exitUsage, []string{"accepts 1 arg(s), received 2"}, "configfs", "mount", "a", "b")
	wantRun(t, dir, exitUsage, []string{`unknown command "mnt" for "roce configfs"`}, "configfs", "mnt")
	wantRun(t, dir, exitError, []string{"roce: configfs mount: No such file or directory: stat /nonexistent/goroce"},
		"configfs", "mount", "/nonexistent/goroce")
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wantRun(t, dir, exitError, []string{"roce: configfs mount: Not a directory: mount " + file}, "configfs", "mount", file)
	if out := wantRun(t, dir, exitOK, nil, "configfs"); !strings.Contains(out, "roce configfs [command]") {
		t.Errorf("roce configfs: %q", out)
	}
}

// blockedWriter is a stderr nobody reads: Write waits until release is
// closed.
type blockedWriter struct {
	release chan struct{}
	lockedBuffer
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	<-w.release
	return w.lockedBuffer.Write(p)
}

// TestRefusalLogNeverBlocks: with stderr stuck, refused writes still
// return at once (a FUSE writer never waits on the server's stderr); what
// did not fit in the queue is counted and the count printed once stderr
// moves again.
func TestRefusalLogNeverBlocks(t *testing.T) {
	w := &blockedWriter{release: make(chan struct{})}
	l := newRefusalLog(w)
	const n = 200
	for i := range n {
		l.refused(fmt.Errorf("write %d", i)) // would hang here if it blocked
	}
	close(w.release)
	l.stop()
	l.refused(errors.New("after stop")) // neither blocks nor panics
	out := w.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	shown, dropped := 0, 0
	for _, line := range lines {
		if strings.HasPrefix(line, "roce: configfs: write ") {
			shown++
			continue
		}
		var k int
		if _, err := fmt.Sscanf(line, "roce: configfs: %d more refused writes not shown", &k); err != nil {
			t.Errorf("unexpected line %q", line)
		}
		dropped += k
	}
	if shown == 0 || dropped == 0 || shown+dropped != n {
		t.Errorf("%d lines shown and %d counted, want %d in all:\n%s", shown, dropped, n, out)
	}
}
