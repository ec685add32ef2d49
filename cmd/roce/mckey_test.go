package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
)

// mckeyOut is what rdma-core's mckey prints (mckey.txt in the traces).
func mckeyOut(sender bool, mgid string) string {
	role, phase := "server", "receiving data transfers"
	if sender {
		role, phase = "client", "initiating data transfers"
	}
	return "mckey: starting " + role + "\nmckey: joining\nmckey: joined dgid: " + mgid + " mlid 0x0 sl 0\n" +
		phase + "\ndata transfers complete\ntest complete\nreturn status 0\n"
}

// TestMckeyVeth runs the built roce mckey as receiver and sender on two
// namespaces joined by a veth, IPv4 and IPv6: both print mckey's lines and
// exit 0, the group's joins go out (IGMP/MLD), and the captured datagrams
// are what mckey.pcap shows rxe sending: UD SEND only with immediate to
// QP 0xffffff, Q_Key 0x01234567, to the group and its MAC, decoded by
// tshark, every ICRC right.
func TestMckeyVeth(t *testing.T) {
	// The default devices (RoCE v1 and v2) run on link/afpacket; RoCE v2
	// only devices on link/udp.
	for _, vers := range []string{"", "v2"} {
		name := "afpacket"
		if vers == "v2" {
			name = "udp"
		}
		t.Run(name, func(t *testing.T) { testMckeyVeth(t, vers) })
	}
}

func testMckeyVeth(t *testing.T, vers string) {
	a, b, dir, roceBin := pingHosts(t, vers, vers)
	tshark := testenv.Tshark(t)
	for _, c := range []struct {
		name, group, mgid, mac string
		src, dst               string
	}{
		{"IPv4", "239.1.2.3", "::ffff:239.1.2.3", "01:00:5e:01:02:03", a.IPv4.String(), b.IPv4.String()},
		{"IPv6", "ff0e::1:2:3", "ff0e::1:2:3", "33:33:00:02:00:03", a.IPv6.String(), b.IPv6.String()},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "mckey.pcap")
			capt := nettest.StartCapture(t, b.NS, b.Ifname, file)
			recv := startMckey(t, b, dir, roceBin, "-m", c.group, "-b", c.dst, "-C", "3")
			if !testenv.Poll(testenv.Slow, func() bool { return strings.Contains(recv.stdout.String(), "joined dgid") }) {
				t.Fatalf("receiver did not join: %q %q", recv.stdout.String(), recv.stderr.String())
			}
			send := startMckey(t, a, dir, roceBin, "-m", c.group, "-b", c.src, "-s", "-C", "3", "-S", "200")
			if code := send.exitWithin(t, testenv.Slow); code != 0 || send.stdout.String() != mckeyOut(true, c.mgid) {
				t.Fatalf("sender: exit %d\n%s\nstderr: %s", code, send.stdout.String(), send.stderr.String())
			}
			if code := recv.exitWithin(t, testenv.Slow); code != 0 || recv.stdout.String() != mckeyOut(false, c.mgid) {
				t.Fatalf("receiver: exit %d\n%s\nstderr: %s", code, recv.stdout.String(), recv.stderr.String())
			}
			if _, err := capt.Stop(); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(tshark, "-r", file, "-Y", "infiniband", "-T", "fields", "-e", "eth.dst", "-e", "ip.dst", "-e", "ipv6.dst",
				"-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp", "-e", "infiniband.deth.q_key", "-e", "_ws.malformed").Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 3 {
				t.Fatalf("tshark: %d RoCE packets, want 3:\n%s", len(lines), out)
			}
			for _, l := range lines {
				f := strings.Split(l, "\t")
				ip := f[1] + f[2]
				// opcode 101: UD SEND only with immediate.
				if len(f) < 6 || f[0] != c.mac || ip != c.group || f[3] != "101" || f[4] != "0xffffff" || !strings.HasSuffix(f[5], "01234567") || len(f) > 6 && f[6] != "" {
					t.Errorf("tshark: %q; want to %s %s, opcode 101, QP 0xffffff, Q_Key 0x01234567", l, c.mac, c.group)
				}
			}
			join := "igmp"
			if c.name == "IPv6" {
				join = "icmpv6.type == 143" // MLDv2 report
			}
			out, err = exec.Command(tshark, "-r", file, "-Y", join, "-T", "fields", "-e", "frame.number").Output()
			if err != nil || strings.TrimSpace(string(out)) == "" {
				t.Errorf("no %s on the veth (the group's join): %v", join, err)
			}
			code, _, stderr := roce(t, "decode", "--verify", file)
			m := statsLine.FindStringSubmatch(strings.TrimSpace(stderr))
			if code != 0 || m == nil || m[2] != strconv.Itoa(3) || m[3] != m[2] {
				t.Errorf("roce decode --verify: exit %d, %.2000q; want 3 RoCE packets, every ICRC ok", code, stderr)
			}
		})
	}
}

// TestMckeyFlags: what mckey refuses, refused as EINVAL naming the values.
func TestMckeyFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"mckey"}, regexp.MustCompile(`-m multicast_address is required`)},
		{[]string{"mckey", "-m", "192.0.2.1"}, regexp.MustCompile(`not an IPv4 or IPv6 multicast address`)},
		{[]string{"mckey", "-m", "239.1.2.3", "-b", "fd00::1"}, regexp.MustCompile(`different IP families`)},
		{[]string{"mckey", "-m", "239.1.2.3", "-p", "0x106"}, regexp.MustCompile(`0x111 \(RDMA_PS_UDP, the default\) or 0x13f`)},
		{[]string{"mckey", "-m", "239.1.2.3", "-C", "-1"}, regexp.MustCompile(`the message count should be between 0 and 16383`)},
		{[]string{"mckey", "-m", "239.1.2.3", "-S", "5000"}, regexp.MustCompile(`the message size should be between 0 and 4096 bytes`)},
	} {
		code, _, stderr := roce(t, c.args...)
		if code != 2 || !c.want.MatchString(stderr) || !strings.Contains(strings.ToLower(stderr), "invalid argument") {
			t.Errorf("roce %s: exit %d, stderr %q; want 2 and %v", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// startMckey runs roce mckey in h's namespace.
func startMckey(t *testing.T, h *nettest.Host, dir, roceBin string, args ...string) *proc {
	t.Helper()
	return startRoce(t, h, dir, roceBin, "mckey", args...)
}
