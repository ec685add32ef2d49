package rsocket

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/lab"
	"github.com/goroce/goroce/rdmacm"
)

// TestLabRspreload: an unmodified, dynamically linked program in the lab's
// VM that knows only TCP sockets (rstream -T s, which calls socket,
// connect, send and recv), under LD_PRELOAD=librspreload.so, which turns
// its socket into an rsocket over Linux rxe, talks to a goroce
// rsocket.Listen on the host side, with every byte checked both ways. The
// host side is rstream's server protocol, here in Go: 16 bytes in and out
// (sync_test), then C transfers of S bytes each way, rstream's data
// pattern. Nothing listens on TCP in the host's namespace, so
// librspreload's fallback to TCP (when rconnect fails) would fail; IPv4 and
// IPv6.
//
// (bash's /dev/tcp was the first candidate: bash 5.2 of the lab's Debian
// 12 dies of SIGSEGV under librspreload.so 44 even for `bash -c 'echo
// hi'`, before any socket, so it proves nothing either way.)
func TestLabRspreload(t *testing.T) {
	l := lab.Start(t)
	dev := l.OpenDevice(t, host.VersionsBoth)
	cm := rdmacm.New(rdmacm.Options{})
	if err := cm.AddRoutedDevice(dev.Device, dev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cm.Close() })
	const size, count = 4096, 200
	for _, tc := range []struct{ name, host string }{{"IPv4", lab.HostIPv4}, {"IPv6", lab.HostIPv6}} {
		t.Run(tc.name, func(t *testing.T) {
			lc := ListenConfig{CM: cm, Logf: t.Logf}
			ln, err := lc.Listen(context.Background(), "rsocket", netip.AddrPortFrom(netip.MustParseAddr(tc.host), 7471).String())
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			served := make(chan error, 1)
			go func() { served <- rstreamServer(ln, size, count) }()
			out := l.MustExec(t, lab.VM1, fmt.Sprintf("LD_PRELOAD=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so "+
				"timeout 120 rstream -T s -T v -s %s -S %d -C %d", tc.host, size, count))
			if err := <-served; err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "custom") || strings.Contains(out, "verification failed") {
				t.Fatalf("rstream -T s under librspreload printed %q", out)
			}
			t.Logf("VM: %s", strings.TrimSpace(out))
		})
	}
}

// rstreamServer serves one rstream -T v custom test (iterations 1) on ln,
// as rstream's server does, checking and making rstream's data pattern.
func rstreamServer(ln *Listener, size, count int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := ln.AcceptContext(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	var in, out byte // verify_buf's and format_buf's counters
	var total int
	buf := make([]byte, size)
	recv := func(n int) error {
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return fmt.Errorf("after %d bytes: %w", total, err)
		}
		for i, v := range buf[:n] {
			if v != in {
				return fmt.Errorf("byte %d is %#x, want %#x", total+i, v, in)
			}
			in++
		}
		total += n
		return nil
	}
	send := func(n int) error {
		for i := range buf[:n] {
			buf[i] = out
			out++
		}
		_, err := c.Write(buf[:n])
		return err
	}
	if err := recv(16); err != nil {
		return err
	}
	if err := send(16); err != nil {
		return err
	}
	for range count {
		if err := recv(size); err != nil {
			return err
		}
	}
	for range count {
		if err := send(size); err != nil {
			return err
		}
	}
	// rstream shuts down and closes: end of file.
	if n, err := c.Read(buf); n != 0 || err != io.EOF {
		return fmt.Errorf("after the test: %d bytes, %v; want end of file", n, err)
	}
	return nil
}
