package main

import (
	"context"
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

// TestConfigfsUnmountInUse: Ctrl-C on roce configfs mount while the mount
// is in use ends it in bounded time, exit 130, mount gone. One such mount
// stayed in Server.Unmount for good after SIGINT, its mount point gone and
// two go-fuse readers blocked in read(/dev/fuse), and a second SIGINT did
// nothing: a copy of the mount in another mount namespace (unshare -m, ip
// netns exec) kept the FUSE connection alive after the unmount here, so
// the readers never ended. Here files are held open in the mount, in this
// namespace or through a copy in another one, before the signal; the
// mount serves reads for a while first. A second SIGINT ends it at once.
func TestConfigfsUnmountInUse(t *testing.T) {
	requireFUSE(t)
	_, err := exec.LookPath("unshare")
	testenv.Require(t, err == nil, "unshare (util-linux)")
	_, err = exec.LookPath("nsenter")
	testenv.Require(t, err == nil, "nsenter (util-linux)")
	for _, c := range []struct {
		name      string
		otherNS   bool // the holder uses a copy of the mount in a mount namespace of its own
		twice     bool // a second SIGINT right after the first
		wantFinal string
	}{
		// (A process elsewhere on the machine that makes a mount namespace
		// meanwhile, ip netns exec, unshare -m, copies the mount too.)
		{"open files here", false, false, `: (unmounted|unmount \S+: the FUSE connection was still in use 3s after the unmount .*: aborted it)`},
		{"a copy in another mount namespace", true, false,
			`: unmount \S+: the FUSE connection was still in use 3s after the unmount \(a mount of it in another mount namespace, made by unshare -m or ip netns exec\?\): aborted it`},
		{"a second SIGINT", true, true, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dir, mnt, exe := configDevs(t), t.TempDir(), roceExecutable(t)
			srv := startProc(t, ctx, exe, dir, "configfs", "mount", mnt)
			t.Cleanup(func() { detach(t, mnt) })
			srv.stderr.waitFor(t, ctx, "until interrupted or unmounted\n")
			attr := filepath.Join(mnt, "rdma_cm", "rxe1", "ports", "1", "default_roce_mode")
			if err := os.Mkdir(filepath.Join(mnt, "rdma_cm", "rxe1"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 200; i++ { // a mount that has served a while
				if b, err := os.ReadFile(attr); err != nil || string(b) != "RoCE v2\n" {
					t.Fatalf("read %d: %q, %v", i, b, err)
				}
			}
			// The holder keeps the attribute open and its working directory
			// in the mount.
			holdArgs := []string{"sh", "-c", `cd "$1" && exec 3< default_roce_mode && echo holding && exec sleep 600`, "sh", filepath.Dir(attr)}
			if c.otherNS {
				holdArgs = append([]string{"unshare", "-m", "--propagation", "private"}, holdArgs...)
			}
			hold := exec.Command(holdArgs[0], holdArgs[1:]...)
			holdOut := &lockedBuffer{}
			hold.Stdout, hold.Stderr = holdOut, holdOut
			if err := hold.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { hold.Process.Kill(); hold.Wait() })
			holdOut.waitFor(t, ctx, "holding\n")

			srv.cmd.Process.Signal(syscall.SIGINT)
			if c.twice {
				// Once the first is being handled (the mount point left this
				// namespace; the copy keeps the connection, so the unmount
				// waits), a second: two sent at once may arrive as one.
				for isMounted(t, mnt) && !srv.exited() {
					time.Sleep(10 * time.Millisecond)
				}
				srv.cmd.Process.Signal(syscall.SIGINT)
			}
			code := srv.exitCode(t, ctx)
			stderr := srv.stderr.String()
			want := `roce: configfs mount: interrupted by SIGINT after serving ` + regexp.QuoteMeta(mnt) + ` for \d+s` + c.wantFinal
			if c.twice {
				want = `roce: SIGINT again: exiting without waiting for the command to finish`
			}
			wantLastLine(t, "configfs mount", code, 130, stderr, want)
			if isMounted(t, mnt) {
				t.Errorf("%s is still mounted", mnt)
			}
			if c.otherNS {
				// The copy the holder's namespace has is dead, not hung: a read
				// there fails at once.
				out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(hold.Process.Pid), "-m", "cat", attr).CombinedOutput()
				if err == nil || !strings.Contains(string(out), "Transport endpoint is not connected") {
					t.Errorf("a read through the other namespace's copy: %v, %s; want ENOTCONN", err, out)
				}
			}
		})
	}
}
