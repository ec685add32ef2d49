package perftest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A peer that goes away mid-test (killed, or its host gone) leaves the
// other side waiting on completions that never come: an RC QP with
// retry_cnt 7, as perftest sets it, retransmits forever once the peer
// has answered (rxe's rule, which goroce keeps), and a SEND server waits
// for receives. The exchange's connection says it first: its TCP socket
// reads EOF or a reset, or (-R) its RDMA CM connection disconnects. While
// the test's traffic runs, nothing is read from it, so a watcher can look:
// the run then ends with errPeerGone instead of waiting forever.

// errPeerGone is the cause of a test run's end when the peer closed the
// exchange's connection mid-test.
var errPeerGone = errors.New("the peer closed the test's exchange connection (it exited, or was killed)")

// watchPeer returns ctx, cancelled with an error wrapping errPeerGone when
// the exchange connection closes, and the function that stops watching
// (it must be called before the exchange is read again).
func (r *run) watchPeer(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	var closed <-chan error
	var stop func()
	switch l := r.cm.link.(type) {
	case *tcpLink:
		closed, stop = watchTCPClose(l.conn)
	case *cmLink:
		closed, stop = watchCMClose(l)
	}
	if closed == nil {
		return ctx, func() { cancel(nil) }
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case err := <-closed:
			if err == nil {
				return
			}
			// A peer that is done closes at once (ib_write_lat has no
			// closing handshake), and what it sent last (the ACK of this
			// side's last message) may still be on its way.
			select {
			case <-time.After(disconnectGrace):
				cancel(fmt.Errorf("%w: %v", errPeerGone, err))
			case <-done:
			}
		case <-done:
		}
	}()
	return ctx, func() {
		stop()
		close(done)
		wg.Wait()
		cancel(nil)
	}
}

// watchTCPClose watches conn for the peer's EOF or reset without reading
// from it: on a duplicate of its descriptor, poll(2) and a peek. Data from
// the peer ends the watch (nothing is consumed; the peer has moved on to
// the next exchange), and so does stop. The channel yields the reason
// the connection closed, or nil.
func watchTCPClose(conn net.Conn) (<-chan error, func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	fd := -1
	rc.Control(func(s uintptr) { fd, _ = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) })
	if fd < 0 {
		return nil, nil
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, nil
	}
	out := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer unix.Close(fd)
		for {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}, {Fd: int32(pipe[0]), Events: unix.POLLIN}}
			if _, err := unix.Poll(p, -1); err != nil {
				if err == unix.EINTR {
					continue
				}
				out <- nil
				return
			}
			if p[1].Revents != 0 {
				out <- nil // stopped
				return
			}
			var b [1]byte
			n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case err == unix.EAGAIN || err == unix.EINTR:
				continue
			case err != nil:
				out <- err
			case n == 0:
				out <- errors.New("EOF")
			default:
				out <- nil // data: the peer is there
			}
			return
		}
	}()
	var once sync.Once
	return out, func() {
		once.Do(func() {
			unix.Write(pipe[1], []byte{0}) // the read end is open until the watcher is done: no SIGPIPE
			<-finished
			unix.Close(pipe[0])
			unix.Close(pipe[1])
		})
	}
}

// watchCMClose watches -R's exchange connection: its link's context ends
// with errPeerDisconnected when the peer's CM disconnects.
func watchCMClose(l *cmLink) (<-chan error, func()) {
	out := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		select {
		case <-l.ctx.Done():
			if err := context.Cause(l.ctx); errors.Is(err, errPeerDisconnected) {
				out <- err
				return
			}
		case <-done:
		}
		out <- nil
	}()
	var once sync.Once
	return out, func() { once.Do(func() { close(done) }) }
}

// peerWatched returns ctx watched by watchPeer for one size's traffic and
// the function to call with the traffic's error when it ends: it stops
// watching and, if the peer went away meanwhile, returns that instead,
// with how far the run got.
func (r *run) peerWatched(ctx context.Context) (context.Context, func(error) error) {
	wctx, stop := r.watchPeer(ctx)
	return wctx, func(err error) error {
		stop()
		if err == nil || ctx.Err() != nil {
			return err
		}
		if cause := context.Cause(wctx); errors.Is(cause, errPeerGone) {
			if r.track != nil {
				return fmt.Errorf("%w %s", cause, r.track)
			}
			return cause
		}
		return err
	}
}
