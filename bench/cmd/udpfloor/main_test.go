package main

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testenv"
)

// TestFloorOverLoopback: a server and a client over 127.0.0.1 move every
// byte, the client's table reads as perftest's (bench/vm.sh's metric takes
// the fourth column), and the server's count is what the report says.
func TestFloorOverLoopback(t *testing.T) {
	testenv.Root(t) // SO_RCVBUFFORCE
	for _, c := range []struct {
		name string
		p    params
	}{
		{"64KiB at 1024", params{n: 200, size: 65536, mtu: 1024, window: 16}},
		{"odd size at 4096", params{n: 50, size: 10000, mtu: 4096, window: 4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctl := testenv.FreeTCPPort(t)
			data := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(testenv.FreeTCPPort(t)))
			done := make(chan error, 1)
			go func() { done <- serve(data, ctl) }()
			var out bytes.Buffer
			var err error
			for range 50 { // until the server listens
				if err = client(c.p, data, "127.0.0.1", ctl, &out); err == nil || !isRefused(err) {
					break
				}
				out.Reset()
				sleep()
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v", err)
			}
			t.Logf("%s", out.String())
			m := regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s`).FindStringSubmatch(out.String())
			if m == nil || m[1] != strconv.Itoa(c.p.size) || m[2] != strconv.Itoa(c.p.n) {
				t.Fatalf("no perftest table row for %d × %d bytes:\n%s", c.p.n, c.p.size, out.String())
			}
			if v, _ := strconv.ParseFloat(m[4], 64); v <= 0 {
				t.Errorf("BW average %s", m[4])
			}
			want := strconv.Itoa(c.p.n*c.p.size) + " of " + strconv.Itoa(c.p.n*c.p.size) + " bytes received"
			if !bytes.Contains(out.Bytes(), []byte(want)) || !bytes.Contains(out.Bytes(), []byte(strconv.Itoa(c.p.n)+" messages ACKed, 0 counted lost; 0 datagrams")) {
				t.Errorf("want %q, all messages ACKed, none lost:\n%s", want, out.String())
			}
		})
	}
}

func isRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func sleep() { time.Sleep(20 * time.Millisecond) }
