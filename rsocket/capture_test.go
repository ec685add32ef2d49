package rsocket

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
	"github.com/goroce/goroce/wire/mad"
)

var update = flag.Bool("update", false, "rewrite testdata's decoded summaries")

// A capture of Linux's rstream (rdma-core 44, Linux rxe in the lab's VMs)
// is the reference for the bytes: testdata/rstream_small.pcap is
//
//	vm1$ rstream -B 4096 -S 1000 -C 20 -T v
//	vm2$ rstream -s 192.0.2.11 -B 4096 -S 1000 -C 20 -T v
//
// captured on the lab's bridge (lab/interop-traces' method); 8 KiB rings,
// so the halves and the SGL updates turn over many times.
const rstreamCapture = "testdata/rstream_small.pcap"

// capMsg is one rsocket message of a capture.
type capMsg struct {
	frame    int // the frame of its last packet
	src, dst netip.Addr
	dstQPN   uint32
	imm      bool
	m        msg
	va       uint64
	rkey     uint32
	length   uint32
	payload  []byte // the whole message's data
}

// capConn is what a capture holds of one rsocket connection.
type capConn struct {
	client, server     netip.Addr
	clientQP, serverQP uint32
	clientCD, serverCD []byte // connection data of the REQ and the REP
	msgs               []capMsg
}

// readCapture gathers the connection data and the messages of the one
// connection in file, in order, without retransmissions.
func readCapture(t *testing.T, file string) *capConn {
	t.Helper()
	c := &capConn{}
	lastPSN := map[uint32]wire.PSN{}
	partial := map[uint32]*capMsg{}
	n := 0
	err := pcap.ReadFile(file, func(f pcap.Frame) error {
		n++
		var p wire.Packet
		if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			if errors.Is(err, wire.ErrNotRoCE) {
				return nil
			}
			return fmt.Errorf("frame %d: %w", n, err)
		}
		if err := p.VerifyICRC(); err != nil {
			return fmt.Errorf("frame %d: %w", n, err)
		}
		src, dst := ipsOf(&p)
		bth := p.BTH()
		if bth.DestQP() == 1 {
			m, err := mad.Parse(p.Payload())
			if err != nil {
				return fmt.Errorf("frame %d: %w", n, err)
			}
			if req, ok := m.REQ(); ok {
				c.client, c.server, c.clientQP = src, dst, req.LocalQPN()
				c.clientCD = append([]byte(nil), req.PrivateData()[mad.IPCMHeaderLen:]...)
			}
			if rep, ok := m.REP(); ok {
				c.serverQP = rep.LocalQPN()
				c.serverCD = append([]byte(nil), rep.PrivateData()...)
			}
			return nil
		}
		info := p.Info
		if !info.Is(wire.FlagWrite) {
			return nil
		}
		qp := bth.DestQP()
		if last, ok := lastPSN[qp]; ok && bth.PSN().Diff(last) <= 0 {
			return nil // a retransmission
		}
		lastPSN[qp] = bth.PSN()
		if info.Is(wire.FlagFirst) {
			r := p.RETH()
			partial[qp] = &capMsg{src: src, dst: dst, dstQPN: qp, va: r.VA(), rkey: r.RKey(), length: r.DMALength()}
		}
		m := partial[qp]
		if m == nil {
			return fmt.Errorf("frame %d: %v without its first packet", n, p.Opcode())
		}
		m.payload = append(m.payload, p.Payload()...)
		if info.Is(wire.FlagLast) {
			m.frame = n
			if info.Is(wire.FlagImmediate) {
				m.imm, m.m = true, msg(p.ImmDt().Value())
			}
			c.msgs = append(c.msgs, *m)
			delete(partial, qp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.clientCD == nil || c.serverCD == nil {
		t.Fatalf("%s: no REQ and REP", file)
	}
	return c
}

func ipsOf(p *wire.Packet) (src, dst netip.Addr) {
	if p.IPVersion() == 4 {
		h := p.IPv4()
		return h.Src(), h.Dst()
	}
	h := p.IPv6()
	return h.Src(), h.Dst()
}

// modelConn is a Conn without verbs objects, holding only the protocol's
// bookkeeping, made from the connection data a capture shows: its own
// (mine) and its peer's.
func modelConn(t *testing.T, mine, peer []byte) *Conn {
	t.Helper()
	d, err := parseConnData(mine)
	if err != nil {
		t.Fatal(err)
	}
	c := &Conn{closed: true, p: params{rbufSize: 2 * int(d.dataBuf.len), sbufSize: defWMem, sqSize: defSQSize, rqSize: int(d.credits)},
		bcast: make(chan struct{}), tbuf: make([]byte, sgeLen*sglSize)}
	c.initState()
	c.remoteSGL = sge{} // set by saveConnData
	if err := c.saveConnData(peer); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCaptureConnData decodes the connection data of rstream's REQ and REP
// and encodes it again byte for byte.
func TestCaptureConnData(t *testing.T) {
	c := readCapture(t, rstreamCapture)
	for _, cd := range [][]byte{c.clientCD, c.serverCD} {
		d, err := parseConnData(cd)
		if err != nil {
			t.Fatal(err)
		}
		if d.version != 1 || d.flags != flagIOMap || d.credits != defRQSize || d.iomapSize != 0 || !d.reservedOK ||
			d.targetSGL.len != sglSize || d.dataBuf.len != 4096 {
			t.Errorf("connection data %+v: want version 1, flags RS_CONN_FLAG_IOMAP, credits 384, no iomap, 2 target entries, a 4 KiB first buffer", d)
		}
		if got := d.append(nil); !bytes.Equal(got, cd[:connDataLen]) {
			t.Errorf("re-encoded connection data\n%x\nwant\n%x", got, cd[:connDataLen])
		}
		if !bytes.Equal(cd[connDataLen:], make([]byte, len(cd)-connDataLen)) {
			t.Errorf("private data after the connection data is not zero: %x", cd[connDataLen:])
		}
	}
}

// TestCaptureReplay runs every message of rstream's capture through the
// bookkeeping of both ends, as goroce keeps it: each data message is
// written exactly where goroce's sender would write it (the target entry's
// address and key), each SGL update goes to the entry goroce would write
// and carries the half of the ring goroce would give, and goroce's
// receive-side checks accept every message. It also decodes the capture
// into testdata/rstream_small.txt (go test -update rewrites it).
func TestCaptureReplay(t *testing.T) {
	c := readCapture(t, rstreamCapture)
	side := map[uint32]*Conn{ // by the QPN that receives
		c.serverQP: modelConn(t, c.serverCD, c.clientCD),
		c.clientQP: modelConn(t, c.clientCD, c.serverCD),
	}
	peer := map[*Conn]*Conn{side[c.serverQP]: side[c.clientQP], side[c.clientQP]: side[c.serverQP]}
	var sum strings.Builder
	fmt.Fprintf(&sum, "# %s: rstream -B 4096 -S 1000 -C 20 -T v, client %v (QP %#x), server %v (QP %#x)\n",
		rstreamCapture, c.client, c.clientQP, c.server, c.serverQP)
	for _, x := range []struct {
		who string
		cd  []byte
	}{{"REQ (client)", c.clientCD}, {"REP (server)", c.serverCD}} {
		d, _ := parseConnData(x.cd)
		fmt.Fprintf(&sum, "%s connection data: version %d flags %#x credits %d target_iomap_size %d target_sgl {addr %#x key %#x entries %d} data_buf {addr %#x key %#x length %d}\n",
			x.who, d.version, d.flags, d.credits, d.iomapSize, d.targetSGL.addr, d.targetSGL.key, d.targetSGL.len, d.dataBuf.addr, d.dataBuf.key, d.dataBuf.len)
	}
	ring := func(cd []byte) (base uint64, size uint64, tsgl uint64) {
		d, _ := parseConnData(cd)
		return d.dataBuf.addr, 2 * uint64(d.dataBuf.len), d.targetSGL.addr
	}
	counts := map[string]int{}
	for _, m := range c.msgs {
		rx := side[m.dstQPN]
		tx := peer[rx]
		rxCD, txCD := c.serverCD, c.clientCD
		if m.dstQPN == c.clientQP {
			rxCD, txCD = c.clientCD, c.serverCD
		}
		base, size, tsgl := ring(rxCD)
		where := fmt.Sprintf("frame %4d %v → %v", m.frame, m.src, m.dst)
		if !m.imm {
			// A keepalive: a 0-byte RDMA WRITE, address and key 0.
			if m.length != 0 || m.va != 0 || m.rkey != 0 {
				t.Errorf("%s: RDMA WRITE without immediate, %d bytes at %#x key %#x: only keepalives (0 bytes, 0, 0) are", where, m.length, m.va, m.rkey)
			}
			fmt.Fprintf(&sum, "%s keepalive (0-byte RDMA WRITE)\n", where)
			counts["keepalive"]++
			continue
		}
		if int(m.length) != len(m.payload) {
			t.Fatalf("%s: DMA length %d, %d bytes carried", where, m.length, len(m.payload))
		}
		switch m.m.op() {
		case opData:
			tgt := tx.tgt[tx.tgtIdx]
			if m.va != tgt.addr || m.rkey != tgt.key {
				t.Errorf("%s: %v written at %#x key %#x; goroce's sender would write it at %#x key %#x (target entry %d)",
					where, m.m, m.va, m.rkey, tgt.addr, tgt.key, tx.tgtIdx)
			}
			if m.m.data() > tgt.len {
				t.Errorf("%s: %v exceeds the %d bytes left in the target entry", where, m.m, tgt.len)
			}
			tx.sent(int(m.length))
			rx.recvData(m.m.data(), m.length)
			fmt.Fprintf(&sum, "%s %v at ring offset %d\n", where, m.m, m.va-base)
			if m.va < base || m.va+uint64(m.length) > base+size {
				t.Errorf("%s: written outside the receiver's ring", where)
			}
			counts["data"]++
		case opSGL:
			// tx grants credits (and maybe a buffer) to rx, the sender.
			// Whether a half of tx's ring was free depends on its reader,
			// which the capture does not show: it shows the outcome.
			txBase, txSize, _ := ring(txCD)
			tx.rAvail = 0
			if m.length == sgeLen {
				tx.rAvail = int(txSize / 2)
			}
			_, buf, withBuf := tx.grantCredits()
			tx.grant = uint16(m.m.data()) // as tx's reader had read
			desc := fmt.Sprintf("%s %v", where, m.m)
			switch m.length {
			case sgeLen:
				s := parseSGE(m.payload, binary.LittleEndian)
				if want := (sge{addr: txBase + uint64(buf), key: s.key, len: uint32(txSize / 2)}); !withBuf || s != want {
					t.Errorf("%s: rs_sge %+v; goroce would give %+v", where, s, want)
				}
				entry := int(m.va-tsgl) / sgeLen
				if entry != tx.prevSge() || entry != rx.sglNext || m.rkey != tx.remoteSGL.key {
					t.Errorf("%s: written to target SGL entry %d key %#x; goroce writes entry %d key %#x and expects entry %d",
						where, entry, m.rkey, tx.prevSge(), tx.remoteSGL.key, rx.sglNext)
				}
				copy(rx.tbuf[rx.sglNext*sgeLen:], m.payload)
				desc += fmt.Sprintf(", rs_sge {addr %#x key %#x length %d} into target SGL entry %d", s.addr, s.key, s.len, entry)
				counts["sgl+buffer"]++
			case 0:
				counts["sgl"]++
			default:
				t.Errorf("%s: an SGL update of %d bytes", where, m.length)
			}
			rx.recvSGL(m.m.data(), m.length)
			fmt.Fprintln(&sum, desc)
		case opCtrl:
			fmt.Fprintf(&sum, "%s %v\n", where, m.m)
			counts["ctrl"]++
		default:
			t.Errorf("%s: message %v", where, m.m)
		}
		if rx.err != nil {
			t.Fatalf("%s: goroce's checks refuse rstream's message: %v", where, rx.err)
		}
	}
	fmt.Fprintf(&sum, "# %d data messages, %d SGL updates with a buffer, %d with credits only, %d control messages, %d keepalives\n",
		counts["data"], counts["sgl+buffer"], counts["sgl"], counts["ctrl"], counts["keepalive"])
	if counts["data"] == 0 || counts["sgl+buffer"] < 4 {
		t.Errorf("the capture holds %v: too little to test the ring's turnover", counts)
	}
	golden := strings.TrimSuffix(rstreamCapture, ".pcap") + ".txt"
	if *update {
		if err := os.WriteFile(golden, []byte(sum.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if sum.String() != string(want) {
		t.Errorf("the decoded capture differs from %s (go test -update rewrites it):\n%s", golden, sum.String())
	}
}
