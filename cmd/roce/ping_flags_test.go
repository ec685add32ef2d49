package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

// TestPingFlags runs roce ping between two namespaces with the rping flags
// the other tests leave out: -I (the client's source address) and -p (a
// port other than 7174), both of which the REQ carries on the wire; -S; -d,
// rping's debug printfs on stdout; and -q, which in rping is not "quiet"
// but "use self-created, self-modified QP" — the same wire and output, so
// -v still prints every ping. Then the edges of -S: rping takes 26 to
// 65535.
func TestPingFlags(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "")
	capFile := filepath.Join(t.TempDir(), "client.pcap")
	srv := startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String(), "-p", "9999", "-d", "-q", "-S", "100", "-v")
	cli, code := clientPing(t, a, dir, roceBin, time.Minute, "-c", "-a", b.IPv4.String(), "-I", a.IPv4.String(),
		"-p", "9999", "-d", "-q", "-S", "100", "-C", "3", "-v", "-V", "--pcap", capFile)
	if code != 0 {
		t.Fatalf("client: exit %d\nstdout: %s\nstderr: %s", code, cli.stdout.String(), cli.stderr.String())
	}
	if code := srv.exitWithin(t, time.Minute); code != 0 {
		t.Fatalf("server: exit %d\nstdout: %s\nstderr: %s", code, srv.stdout.String(), srv.stderr.String())
	}
	cout, sout := cli.stdout.String(), srv.stdout.String()
	t.Logf("client stdout:\n%sserver stdout:\n%s", cout, sout)

	// -v with -S 100: each ping's data is 99 characters and a NUL.
	pingData := regexp.MustCompile(`(?m)^(server )?ping data: (rdma-ping-\d+: [A-Za-z\[\\\]^_` + "`" + `]+)$`)
	for who, out := range map[string]string{"client": cout, "server": sout} {
		m := pingData.FindAllStringSubmatch(out, -1)
		if len(m) != 3 {
			t.Errorf("%s: %d ping data lines, want 3 (-q is not quiet)", who, len(m))
		}
		for _, l := range m {
			if len(l[2]) != 99 {
				t.Errorf("%s: ping data of %d characters, want 99 (-S 100): %q", who, len(l[2]), l[2])
			}
		}
	}

	// -d: rping's debug lines, on stdout as rping's printf puts them. The
	// client advertises two buffers a ping (rping_format_send), each of
	// -S bytes; the server tells each ping's RDMA READ and WRITE.
	count := func(out, pattern string) int {
		return len(regexp.MustCompile(`(?m)^`+pattern+`$`).FindAllString(out, -1))
	}
	for _, c := range []struct {
		who, out, line string
		min, max       int
	}{
		{"client", cout, `RDMA addr [0-9a-f]+ rkey [0-9a-f]+ len 100`, 6, 6},
		{"client", cout, `RDMA addr .*`, 6, 6}, // none with another length
		{"client", cout, `ESTABLISHED`, 1, 1},
		{"server", sout, `accepting client connection request`, 1, 1},
		{"server", sout, `ESTABLISHED`, 1, 1},
		// rping prints this for both advertisements of a ping; goroce (so
		// far) for the first only.
		{"server", sout, `Received rkey [0-9a-f]+ addr [0-9a-f]+ len 100 from peer`, 3, 6},
		{"server", sout, `Received rkey .*`, 3, 6},
		{"server", sout, `server received read complete`, 3, 3},
		{"server", sout, `server rdma write complete ?`, 3, 3},
	} {
		if n := count(c.out, c.line); n < c.min || n > c.max {
			t.Errorf("%s: %d lines %q, want %d to %d", c.who, n, c.line, c.min, c.max)
		}
	}

	// -I and -p on the wire: the REQ's IP CM private data names the
	// client's source address and the server's, and its service ID is
	// RDMA_PS_TCP port 9999.
	reqs := 0
	err := pcap.ReadFile(capFile, func(f pcap.Frame) error {
		var p wire.Packet
		if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			if errors.Is(err, wire.ErrNotRoCE) {
				return nil
			}
			return err
		}
		m, err := mad.Parse(p.Payload())
		if err != nil {
			return nil // not a MAD: the pings themselves
		}
		req, ok := m.REQ()
		if !ok {
			return nil
		}
		reqs++
		sid := req.ServiceID()
		ip, err := req.IPCM()
		if err != nil {
			t.Errorf("frame %d: REQ: %v", f.Number, err)
			return nil
		}
		if sid.PortSpace() != mad.PortSpaceTCP || sid.Port() != 9999 || ip.SrcAddr() != a.IPv4 || ip.DstAddr() != b.IPv4 {
			t.Errorf("frame %d: REQ for %v from %v to %v; want RDMA_PS_TCP port 9999 from %v to %v",
				f.Number, sid, ip.SrcAddr(), ip.DstAddr(), a.IPv4, b.IPv4)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if reqs == 0 {
		t.Error("no REQ in the client's capture")
	}

	// -I with an address the client does not have.
	p := startPing(t, a, dir, roceBin, "-c", "-a", b.IPv4.String(), "-I", "198.18.0.99", "-C", "1")
	if code := p.exitWithin(t, time.Minute); code == 0 || !strings.Contains(p.stderr.String(), "198.18.0.99") {
		t.Errorf("-I 198.18.0.99: exit %d, stderr %q; want a failure naming the address", code, p.stderr.String())
	}

	// -S outside rping's range: a bad command line, with the range it accepts.
	for _, size := range []string{"25", "65536", "0"} {
		p := startPing(t, a, dir, roceBin, "-c", "-a", b.IPv4.String(), "-S", size, "-C", "1")
		want := "roce: ping: Invalid argument: -S " + size + ": the ping data size should be between 26 and 65535 bytes\n"
		if code := p.exitWithin(t, time.Minute); code != exitUsage || !strings.Contains(p.stderr.String(), want) {
			t.Errorf("-S %s: exit %d, stderr %q; want %q", size, code, p.stderr.String(), want)
		}
	}
	// The largest size rping takes goes through, checked.
	srv = startPing(t, b, dir, roceBin, "-s", "-a", b.IPv4.String(), "-S", "65535")
	cli, code = clientPing(t, a, dir, roceBin, time.Minute, "-c", "-a", b.IPv4.String(), "-S", "65535", "-C", "1", "-V")
	if code != 0 {
		t.Fatalf("-S 65535: client exit %d\nstderr: %s", code, cli.stderr.String())
	}
	if code := srv.exitWithin(t, time.Minute); code != 0 {
		t.Errorf("-S 65535: server exit %d\nstderr: %s", code, srv.stderr.String())
	}
}

// TestPingHostName gives -a and -I host names, as rping takes them
// (getaddrinfo): the names are in the namespace's own hosts file, which
// `ip netns exec` puts over /etc/hosts. A name that does not resolve is a
// bad command line that says so.
func TestPingHostName(t *testing.T) {
	a, b, dir, roceBin := pingHosts(t, "", "")
	for _, h := range []*nettest.Host{a, b} {
		etc := filepath.Join("/etc/netns", h.NSName)
		if err := os.MkdirAll(etc, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(etc) })
		hosts := fmt.Sprintf("127.0.0.1 localhost\n%v host-a.goroce.test\n%v host-b.goroce.test\n", a.IPv4, b.IPv4)
		if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := startPing(t, b, dir, roceBin, "-s", "-a", "host-b.goroce.test", "-p", "9998")
	cli, code := clientPing(t, a, dir, roceBin, time.Minute, "-c", "-a", "host-b.goroce.test", "-I", "host-a.goroce.test",
		"-p", "9998", "-C", "2", "-V")
	if code != 0 {
		t.Fatalf("client: exit %d\nstdout: %s\nstderr: %s", code, cli.stdout.String(), cli.stderr.String())
	}
	if code := srv.exitWithin(t, time.Minute); code != 0 {
		t.Fatalf("server: exit %d\nstdout: %s\nstderr: %s", code, srv.stdout.String(), srv.stderr.String())
	}

	p := startPing(t, a, dir, roceBin, "-c", "-a", "nosuch.goroce.invalid", "-C", "1")
	if code := p.exitWithin(t, time.Minute); code != exitUsage || !strings.Contains(p.stderr.String(), `-a "nosuch.goroce.invalid": not an IPv4 or IPv6 address, and the name does not resolve`) {
		t.Errorf("-a nosuch.goroce.invalid: exit %d, stderr %q; want exit %d and the name named", code, p.stderr.String(), exitUsage)
	}
}
