package verbs_test

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

// TestDCQCNTshark: the receiver's traffic, recorded while DCQCN works, as
// tshark 4.0 sees it: every frame decodes without a malformed-packet
// error or a warning; the CNPs are BTH opcode 129 at DSCP 48 (cnp_dscp)
// and Not-ECT, 16 reserved bytes and the ICRC after the BTH (UDP length
// 8 + 12 + 16 + 4), and, read by package wire, BECN set, reserved bytes
// zero, ICRC valid; the sender's WRITEs arrive ECT(0) or CE.
func TestDCQCNTshark(t *testing.T) {
	tshark := testenv.Tshark(t)
	for _, net := range []string{verbstest.NetV2IPv4, verbstest.NetV2IPv6} {
		t.Run(net, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dcqcn.pcap")
			synctest.Test(t, func(t *testing.T) { recordDCQCN(t, net, path) })
			out, err := exec.Command(tshark, "-r", path, "-n", "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
				"-e", "infiniband.bth.opcode", "-e", "frame.number", "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn",
				"-e", "ipv6.tclass.dscp", "-e", "ipv6.tclass.ecn", "-e", "udp.length",
				"-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "_ws.expert.message").Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			cnps, data, ce := 0, 0, 0
			for i, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
				c := strings.Split(line, "\t")
				if len(c) != 10 {
					t.Fatalf("frame %d: %q", i+1, line)
				}
				dscp, ecn := c[2]+c[4], c[3]+c[5]
				if c[7] != "" {
					t.Errorf("frame %d: malformed: %s", i+1, c[7])
				}
				// PI_WARN (0x00600000) and up are complaints, but for the
				// zero UDP checksum over IPv6 that Linux rxe sends too
				// (see wire/tshark_test.go).
				if sev, _ := strconv.ParseUint(c[8], 0, 32); sev >= 0x00600000 && c[9] != "Illegal checksum value (0)" {
					t.Errorf("frame %d: expert %s: %s", i+1, c[8], c[9])
				}
				switch c[0] {
				case "129":
					cnps++
					// UDP length: 8 + BTH 12 + reserved 16 + ICRC 4.
					if dscp != "48" || ecn != "0" || c[6] != "40" {
						t.Errorf("CNP frame %d: dscp %s ecn %s udp.length %s; want 48, 0, 40", i+1, dscp, ecn, c[6])
					}
				case "6", "7", "8": // RC RDMA WRITE FIRST, MIDDLE, LAST
					data++
					if ecn == "3" {
						ce++
					} else if ecn != "2" {
						t.Errorf("WRITE frame %d: ecn %s, want 2 (ECT(0)) or 3 (CE)", i+1, ecn)
					}
				}
			}
			if cnps == 0 || data == 0 || ce == 0 {
				t.Fatalf("%d CNPs, %d WRITE packets (%d CE) recorded", cnps, data, ce)
			}
			t.Logf("tshark: %d CNPs, %d WRITE packets, %d of them CE", cnps, data, ce)
			// tshark 4.0 names no BTH FECN/BECN field and checks no ICRC:
			// the wire package reads the same frames for those.
			n := 0
			err = pcap.ReadFile(path, func(fr pcap.Frame) error {
				var p wire.Packet
				if err := p.ParseFrame(fr.Data, wire.RoCEv2Port); err != nil {
					return err
				}
				if p.Opcode() != wire.OpcodeCNP {
					return nil
				}
				n++
				b := p.BTH()
				if !b.BECN() || b.FECN() || b.PSN() != 0 || b.PadCount() != 0 || len(p.Header(wire.HdrCNPReserved)) != 16 {
					t.Errorf("CNP %d: BTH %+v", n, b.Fields())
				}
				if !bytes.Equal(p.Header(wire.HdrCNPReserved), make([]byte, 16)) {
					t.Errorf("CNP %d: reserved bytes %x", n, p.Header(wire.HdrCNPReserved))
				}
				return p.VerifyICRC()
			})
			if err != nil || n != cnps {
				t.Errorf("wire read %d of %d CNPs: %v", n, cnps, err)
			}
		})
	}
}

// recordDCQCN runs an 2 MiB WRITE from A to B through a marking
// bottleneck with DCQCN on, recording B's traffic to path.
func recordDCQCN(t *testing.T, net, path string) {
	f := fabric.New()
	defer f.Close()
	gids := verbstest.GIDs(net)
	var devs [2]*verbs.Device
	file, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w, err := pcap.NewWriter(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := range devs {
		cfg := fabric.PortConfig{GIDs: []netip.Addr{gids[i].GID}}
		if i == 1 {
			cfg.Bottleneck = bottleneck
		}
		port, err := f.AddPort(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var l = verbs.DeviceConfig{Name: "rxe" + string(rune('0'+i)), Link: port, MAC: port.MAC(), GIDs: []verbs.GIDEntry{gids[i]}}
		if i == 1 {
			l.Link = pcap.New(port, w)
		}
		if devs[i], err = verbs.Open(l); err != nil {
			t.Fatal(err)
		}
		defer devs[i].Close()
	}
	setECN(t, devs[0], false, true, func(c *verbs.ECNConfig) { c.LineRate = 1000 })
	setECN(t, devs[1], true, false, func(c *verbs.ECNConfig) { c.NP.MinTimeBetweenCNPs = 50 })
	p := &verbstest.Pair{}
	for i, s := range []*verbstest.Side{&p.A, &p.B} {
		s.Dev, s.GID = devs[i], gids[i]
		if s.PD, err = s.Dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if s.CQ, err = s.Dev.CreateCQ(64); err != nil {
			t.Fatal(err)
		}
		if s.QP, err = s.PD.CreateQP(verbs.QPInitAttr{Type: verbs.RC, SendCQ: s.CQ, RecvCQ: s.CQ,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Connect(); err != nil {
		t.Fatal(err)
	}
	writeThrough(t, p, 2<<20, 7)
	if counterOf(devs[0].Counters(), "rp_cnp_handled") == 0 {
		t.Fatal("no CNP handled")
	}
}
