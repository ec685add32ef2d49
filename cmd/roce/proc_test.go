package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a process a test runs (roce, directly, in a namespace or under a
// shell), its output collected as it comes; it is stopped when the test
// ends.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	done           chan struct{} // closed when the process has exited
	err            error         // cmd.Wait's, once done is closed
}

// runProc starts cmd, its stdout also copied to echo and its stderr to tee
// as they come (either may be nil). A process still running when the test
// ends gets stop, and the cleanup waits for it.
func runProc(t *testing.T, cmd *exec.Cmd, stop os.Signal, echo, tee io.Writer) *proc {
	t.Helper()
	p := &proc{cmd: cmd, stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if echo != nil {
		cmd.Stdout = io.MultiWriter(p.stdout, echo)
	}
	if tee != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, tee)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			cmd.Process.Signal(stop)
		}
		<-p.done
	})
	return p
}

// startProc runs roce ARGS... (exe) as a process of its own; when ctx ends
// it gets SIGTERM, as a user's Ctrl-C or kill would end it.
func startProc(t *testing.T, ctx context.Context, exe, dir string, args ...string) *proc {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, append([]string{"--rundir", dir}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	return runProc(t, cmd, syscall.SIGTERM, nil, nil)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the process has not exited yet.
func (p *proc) running() bool { return !p.exited() }

// wait returns the process's exit error, or ctx's.
func (p *proc) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// exitCode waits for p (failing t when ctx ends first) and returns its
// exit status.
func (p *proc) exitCode(t *testing.T, ctx context.Context) int {
	t.Helper()
	err := p.wait(ctx)
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		t.Fatalf("%q: %v\nstdout: %s\nstderr: %s", p.cmd.Args, err, p.stdout.String(), p.stderr.String())
	}
	return 0
}

// exitWithin is exitCode with a time limit instead of a context.
func (p *proc) exitWithin(t *testing.T, limit time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return p.exitCode(t, ctx)
}

// lockedBuffer collects a process's output for readers while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// waitFor returns the output so far once it contains s; it fails t when
// ctx ends first.
func (b *lockedBuffer) waitFor(t *testing.T, ctx context.Context, s string) string {
	t.Helper()
	for {
		if out := b.String(); strings.Contains(out, s) {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in:\n%s", s, b.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitWithin is waitFor with a time limit instead of a context.
func (b *lockedBuffer) waitWithin(t *testing.T, s string, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return b.waitFor(t, ctx, s)
}
