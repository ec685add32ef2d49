package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
	"time"
)

// clientExchange is pp_client_exch_dest: send our address, read the
// server's, write "done".
func clientExchange(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), server string, port int, my Dest) (Dest, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	conn, err := dial(ctx, "tcp", net.JoinHostPort(server, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			// rdma-core's words, then what a newcomer needs: the server
			// side runs first, on the same -p.
			return Dest{}, fmt.Errorf("Couldn't connect to %s:%d: %w: no server listens there: start it first "+
				"(roce pingpong -g N, without an address, on that host) with the same -p", server, port, err)
		}
		return Dest{}, fmt.Errorf("Couldn't connect to %s:%d: %w", server, port, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(my.Marshal()); err != nil {
		return Dest{}, fmt.Errorf("Couldn't send local address: %w", err)
	}
	msg := make([]byte, msgLen)
	if _, err := io.ReadFull(conn, msg); err != nil {
		if err == io.EOF && ctx.Err() == nil {
			// rdma-core's server closes without a word when it cannot
			// connect its QP to ours: without -g it has no GID.
			return Dest{}, fmt.Errorf("Couldn't read/write remote address: %w: the server closed the connection without "+
				"answering; if it runs without -g, RoCE needs a GID on both sides: pass -g N there "+
				"(roce gids, or show_gids on Linux, shows which index)", err)
		}
		return Dest{}, fmt.Errorf("Couldn't read/write remote address: %w", err)
	}
	if _, err := conn.Write([]byte("done\x00")); err != nil {
		return Dest{}, fmt.Errorf("Couldn't read/write remote address: %w", err)
	}
	return ParseDest(msg)
}

// serverExchange is pp_server_exch_dest: accept one client, read its
// address, connect the QP (so the client's first packet finds it ready),
// answer with ours, then wait for the client's "done".
func serverExchange(ctx context.Context, port int, ln net.Listener, my Dest, connect func(Dest) error) (Dest, error) {
	if ln == nil {
		var lc net.ListenConfig
		var err error
		if ln, err = lc.Listen(ctx, "tcp", ":"+strconv.Itoa(port)); err != nil {
			return Dest{}, fmt.Errorf("Couldn't listen to port %d: %w", port, err)
		}
	}
	stopLn := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stopLn()
	ln.Close()
	if err != nil {
		return Dest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := make([]byte, msgLen)
	if n, err := io.ReadFull(conn, msg); err != nil {
		return Dest{}, fmt.Errorf("%d/%d: Couldn't read remote address: %w", n, msgLen, err)
	}
	rem, err := ParseDest(msg)
	if err != nil {
		return Dest{}, err
	}
	if err := connect(rem); err != nil {
		return Dest{}, fmt.Errorf("Couldn't connect to remote QP: %w", err)
	}
	if _, err := conn.Write(my.Marshal()); err != nil {
		return Dest{}, fmt.Errorf("Couldn't send/recv local address: %w", err)
	}
	// The client answers "done" (5 bytes with the NUL) and closes.
	done := make([]byte, msgLen)
	if _, err := io.ReadAtLeast(conn, done, 4); err != nil && err != io.EOF {
		return Dest{}, fmt.Errorf("Couldn't send/recv local address: %w", err)
	}
	return rem, nil
}
