package lab

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// Job is a command that Background started in a VM.
type Job struct {
	l     *Lab
	vm    VM
	log   string        // its output and "EXIT <status>", in the VM
	limit time.Duration // timeout(1) kills it after this
	start time.Time
}

// exitGrace is how long Wait reads a job's log, beyond its limit, for the
// EXIT line: the command has ended by then (timeout(1) kills it), but a VM
// on a loaded host takes seconds to run each read.
const exitGrace = 2 * time.Minute

// Background starts cmd (a simple command, with redirections of its own
// if it likes) with /bin/sh in vm, in the background under timeout(1)
// with limit, its output and then "EXIT <status>" going to log, a path in
// the VM; Wait waits for it to end. It fails t if the VM does not take it.
func (l *Lab) Background(t testing.TB, vm VM, log string, limit time.Duration, cmd string) *Job {
	t.Helper()
	l.MustExec(t, vm, fmt.Sprintf("(timeout %d %s; echo EXIT $?) > %s 2>&1 &", int(limit.Seconds()), cmd, log))
	return &Job{l: l, vm: vm, log: log, limit: limit, start: time.Now()}
}

// exitLine is the end of a finished job's log: echo's line, which follows
// the command's last output on the same line if that lacked a newline.
var exitLine = regexp.MustCompile(`EXIT (\d+)\n*$`)

// Log reads the job's log as it stands, and its exit status once it has one.
func (j *Job) Log() (log string, status int, exited bool) {
	log, _, _ = j.l.Exec(j.vm, "cat "+j.log)
	if m := exitLine.FindStringSubmatch(log); m != nil {
		status, _ = strconv.Atoi(m[1])
		return log, status, true
	}
	return log, 0, false
}

// Wait polls the job's log until the command has ended (its EXIT line is
// there) and returns the log. It waits for that condition, not for a time:
// the command ends by its own limit at the latest, and Wait gives up only
// exitGrace after that, or as soon as a VM's NIC has stalled (the test has
// failed then, health.go), with the log as last read (no EXIT line).
func (j *Job) Wait() string {
	var log string
	testenv.Poll(time.Until(j.start.Add(j.limit+exitGrace)), func() (exited bool) {
		log, _, exited = j.Log()
		return exited || j.l.broken.Load()
	})
	return log
}

// UntilListening calls connect until it returns nil or an error that does
// not contain notYet (what connecting says while peer, the job serving in
// the VM, does not listen yet), a fifth of a second between tries. It stops
// retrying when ctx ends or peer has exited, and then returns the last
// error, with peer's log if it exited.
func UntilListening(ctx context.Context, peer *Job, notYet string, connect func() error) error {
	for {
		err := connect()
		if err == nil || !strings.Contains(err.Error(), notYet) {
			return err
		}
		if peer != nil {
			if log, status, exited := peer.Log(); exited {
				return fmt.Errorf("%w (and %s in %s exited %d before listening:\n%s)", err, peer.log, peer.vm.Name, status, log)
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// DialContext dials from inside the lab's namespace, where the lab's
// addresses exist: a Dial for perftest's and pingpong's TCP exchange.
func (l *Lab) DialContext(ctx context.Context, network, addr string) (conn net.Conn, err error) {
	err = l.Do(func() (err error) {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Listen listens on addr (TCP) inside the lab's namespace; the listener is
// closed when t ends, if its user has not closed it.
func (l *Lab) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := l.Do(func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
