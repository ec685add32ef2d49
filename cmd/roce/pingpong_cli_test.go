package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestPingpongWithoutGID: roce pingpong without -g, server and client as
// the user ran them. RoCE addresses every packet with a GID, which
// rdma-core's tools find out only once the QP is connected; goroce's
// client said "Couldn't read/write remote address: EOF" and its server
// "ah_attr.is_global is 0: RoCE needs a GRH". Each now refuses the
// command line and says what to pass.
func TestPingpongWithoutGID(t *testing.T) {
	a, b, dir, exe := pingHosts(t, "v2", "v2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const want = "roce: pingpong: RoCE needs a GID: pass -g N (roce gids shows which index)\nRun 'roce pingpong --help' for usage.\n"
	port := freePort(t)
	srv := startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-p", port)
	cli := startIn(t, ctx, a, exe, dir, "pingpong", "-d", "rxeA", "-p", port, b.IPv4.String())
	for who, p := range map[string]*proc{"server": srv, "client": cli} {
		if code := p.exitCode(t, ctx); code != exitUsage || p.stderr.String() != want || p.stdout.String() != "" {
			t.Errorf("%s without -g: exit %d, stdout %q, stderr %q; want exit 2 and %q", who, code, p.stdout.String(), p.stderr.String(), want)
		}
	}
}

// TestDeviceBusyOneLine: a second process on a device another runs gets
// one line that says what failed (open) and names the process, where the
// errno's words spilled onto a second line ("device in use\ndevice or
// resource busy").
func TestDeviceBusyOneLine(t *testing.T) {
	_, b, dir, exe := pingHosts(t, "v2", "v2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-g", "1", "-p", freePort(t))
	srv.stdout.waitFor(t, ctx, "local address")
	second := startIn(t, ctx, b, exe, dir, "pingpong", "-d", "rxeB", "-g", "1", "-p", freePort(t))
	code, stderr := second.exitCode(t, ctx), second.stderr.String()
	if code != exitError || strings.Count(stderr, "\n") != 1 ||
		!strings.HasPrefix(stderr, "roce: open rxeB: device rxeB is in use by process ") || !strings.HasSuffix(stderr, ": device in use: device or resource busy\n") {
		t.Errorf("a second pingpong on rxeB: exit %d, stderr %q; want exit 1 and one line", code, stderr)
	}
}
