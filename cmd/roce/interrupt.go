package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// How roce ends on SIGINT (Ctrl-C) and SIGTERM, every command alike: the
// first signal cancels the command's context (cmd.Context()) with an
// *interruptedError as its cause; the command winds down and returns an
// error that wraps that cause and says what had completed ("interrupted
// by SIGINT after 412 of 1000 iterations"); run prints it as the one line
// on stderr and exits 128+signal, as a shell reports a process a signal
// ended: 130 for SIGINT, 143 for SIGTERM. A second signal, or a command
// still running interruptGrace after the first, forces the exit: the
// command's force hooks run (a FUSE mount is detached) and the process
// exits at once with the same status.

// interruptGrace is how long a command may take to wind down after the
// first signal before roce exits without it.
const interruptGrace = 10 * time.Second

// interruptedError is the cause of an interrupted command's context.
type interruptedError struct{ sig syscall.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + signalName(e.sig) }

// exitCode is the shell's status for a process the signal ended.
func (e *interruptedError) exitCode() int { return 128 + int(e.sig) }

func signalName(s syscall.Signal) string {
	if n := unix.SignalName(s); n != "" {
		return n
	}
	return s.String()
}

// interrupts watches for SIGINT and SIGTERM while a command runs.
type interrupts struct {
	stderr io.Writer
	exit   func(code int) // os.Exit; the forced exit
	ctx    context.Context
	cancel context.CancelCauseFunc
	sigs   chan os.Signal
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	first   *interruptedError // guarded by mu: the first signal, once it came
	hooks   []func()          // guarded by mu: run before a forced exit
	forced  bool              // guarded by mu
	exiting bool              // guarded by mu: the exit is under way (claimExit)
}

type interruptsKey struct{}

// watchInterrupts starts watching; stop ends it. exit is called, after the
// force hooks, when a second signal or the grace period forces the exit.
func watchInterrupts(stderr io.Writer, exit func(code int)) *interrupts {
	in := &interrupts{stderr: stderr, exit: exit, sigs: make(chan os.Signal, 2), done: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(context.Background())
	in.ctx, in.cancel = context.WithValue(ctx, interruptsKey{}, in), cancel
	signal.Notify(in.sigs, syscall.SIGINT, syscall.SIGTERM)
	in.wg.Add(1)
	go in.run()
	return in
}

func (in *interrupts) run() {
	defer in.wg.Done()
	var grace <-chan time.Time
	for {
		select {
		case <-in.done:
			return
		case s := <-in.sigs:
			sig := s.(syscall.Signal)
			in.mu.Lock()
			first := in.first
			if first == nil {
				in.first = &interruptedError{sig: sig}
			}
			in.mu.Unlock()
			if first == nil {
				in.cancel(in.first)
				grace = time.After(interruptGrace)
				continue
			}
			in.force(first, fmt.Sprintf("%s again", signalName(sig)))
		case <-grace:
			in.mu.Lock()
			first := in.first
			in.mu.Unlock()
			in.force(first, fmt.Sprintf("still running %v after %s", interruptGrace, signalName(first.sig)))
		}
	}
}

// force runs the hooks and exits with first's status, unless the command
// has finished and run is exiting already.
func (in *interrupts) force(first *interruptedError, why string) {
	if !in.claimExit() {
		return
	}
	in.mu.Lock()
	hooks := in.hooks
	in.forced = true
	in.mu.Unlock()
	fmt.Fprintf(in.stderr, "roce: %s: exiting without waiting for the command to finish\n", why)
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
	in.exit(first.exitCode())
}

// stop stops watching.
func (in *interrupts) stop() {
	signal.Stop(in.sigs)
	close(in.done)
	in.wg.Wait()
	in.cancel(nil)
}

// claimExit reports whether the caller is the one to end the process:
// the command's own return or a forced exit, whichever comes first (the
// hooks of a forced exit can let the command return meanwhile). It is
// true once.
func (in *interrupts) claimExit() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.exiting {
		return false
	}
	in.exiting = true
	return true
}

// signalled returns the first signal's error, if one came.
func (in *interrupts) signalled() *interruptedError {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.first
}

// onForce registers f to run if the exit is forced (a second signal, or
// the grace period over): what must not be left behind, such as a FUSE
// mount. The returned function unregisters it. f must not block for long.
func onForce(ctx context.Context, f func()) (remove func()) {
	in, _ := ctx.Value(interruptsKey{}).(*interrupts)
	if in == nil {
		return func() {}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.hooks = append(in.hooks, f)
	i := len(in.hooks) - 1
	return func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		if !in.forced && i < len(in.hooks) {
			in.hooks[i] = func() {}
		}
	}
}

// commandContext is cmd's context: cancelled, with an *interruptedError
// cause, on SIGINT or SIGTERM when run from run.
func commandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// interruptLine is the one line run prints for a command a signal
// interrupted: err when it says so itself (it wraps sig), else sig with
// err, else sig alone, after the command's name.
func interruptLine(cmd *cobra.Command, err error, sig *interruptedError) string {
	name := strings.TrimPrefix(cmd.CommandPath(), "roce")
	name = strings.TrimSpace(name)
	prefix := ""
	if name != "" {
		prefix = name + ": "
	}
	switch {
	case err == nil, errors.Is(err, context.Canceled) && !errors.Is(err, sig):
		return prefix + sig.Error()
	case errors.Is(err, sig):
		msg := oneLine(err.Error())
		if strings.HasPrefix(msg, name+":") || strings.HasPrefix(msg, name+" ") {
			return msg
		}
		return prefix + msg
	}
	return prefix + sig.Error() + ": " + oneLine(err.Error())
}

// oneLine keeps an error on one line of stderr: errors.Join and some
// library messages hold newlines.
func oneLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return strings.ReplaceAll(s, "\n", ": ")
}

// interruptedAfter wraps the cause of ctx's end (the signal, when there
// was one) with what had completed: "interrupted by SIGINT after ...".
func interruptedAfter(ctx context.Context, format string, args ...any) error {
	return fmt.Errorf("%w "+format, append([]any{context.Cause(ctx)}, args...)...)
}
