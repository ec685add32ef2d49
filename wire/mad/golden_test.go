package mad

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the traces")

// TestTraceMADs decodes every CM MAD in the shared rxe traces, re-encodes it
// from the decoded Fields to the identical 256 bytes, refuses every proper
// prefix, and compares the full field-by-field decode with
// testdata/<trace>.golden (regenerate with -update; the tshark decode of the
// same frames is in testdata/<trace>.tshark for review).
func TestTraceMADs(t *testing.T) {
	mads := traceMADs(t)
	decodes := map[string]*strings.Builder{}
	for _, tm := range mads {
		name := fmt.Sprintf("%s#%d", tm.file, tm.frame)
		t.Run(name, func(t *testing.T) {
			m, err := Parse(tm.mad)
			if err != nil {
				t.Fatal(err)
			}
			if !m.IsCM() {
				t.Fatal("not a CM MAD")
			}
			f := decodeCM(m)
			if f == nil {
				t.Fatalf("attribute %v not decoded", m.Header().AttributeID())
			}
			if err := f.Validate(); err != nil {
				t.Errorf("decoded fields do not validate: %v", err)
			}
			re := f.Append(m.Header().Fields().Append(nil))
			if !bytes.Equal(re, tm.mad) {
				t.Errorf("re-encoded MAD differs:\n got %x\nwant %x", re, tm.mad)
			}
			checkPrefixes(t, tm.mad)
			sb := decodes[tm.file]
			if sb == nil {
				sb = new(strings.Builder)
				decodes[tm.file] = sb
			}
			writeDecode(sb, tm, m)
		})
	}
	for file, sb := range decodes {
		golden := filepath.Join("testdata", strings.TrimSuffix(file, ".pcap")+".golden")
		if *update {
			if err := os.WriteFile(golden, []byte(sb.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Errorf("%v (run go test -run TestTraceMADs -update to create it)", err)
			continue
		}
		if got := sb.String(); got != string(want) {
			t.Errorf("%s: decode differs from %s (run with -update after checking the diff):\n%s",
				file, golden, firstDiff(got, string(want)))
		}
	}
}

// writeDecode prints m the way the CLI's -V does: every field, reserved ones
// included, by section.
func writeDecode(w *strings.Builder, tm traceMAD, m MAD) {
	h := m.Header()
	fmt.Fprintf(w, "# %s frame %d: CM %s (%s)\n", tm.file, tm.frame, h.AttributeID(), h.AttributeID().Short())
	fmt.Fprintln(w, "MAD Header")
	for f, v := range h.All() {
		fmt.Fprintf(w, "    %s: %s\n", f.Name, v)
	}
	fmt.Fprintf(w, "CM %s\n", h.AttributeID())
	for f, v := range m.DataFields() {
		fmt.Fprintf(w, "    %s: %s\n", f.Name, v)
	}
	if ipcm, err := m.IPCM(); err == nil {
		fmt.Fprintln(w, "IP CM Header")
		for f, v := range ipcm.All() {
			fmt.Fprintf(w, "    %s: %s\n", f.Name, v)
		}
	}
	fmt.Fprintln(w)
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got %q\nwant %q", i+1, gl, wl)
		}
	}
	return ""
}

// TestTraceKnownValues checks facts about the captures that are known
// independently of this package: the commands run (traces/*.txt), the
// addresses of the lab, Linux's rdma_cm conventions, and the tshark decode.
func TestTraceKnownValues(t *testing.T) {
	mads := traceMADs(t)
	byFrame := map[string]MAD{}
	count := map[string]int{}
	for _, tm := range mads {
		byFrame[fmt.Sprintf("%s#%d", tm.file, tm.frame)] = MAD(tm.mad)
		count[tm.file]++
	}
	// Which CM MADs each capture holds (tshark -Y 'infiniband.bth.destqp == 1').
	wantCount := map[string]int{"rping.pcap": 5, "rping6.pcap": 5, "ucmatose.pcap": 5,
		"udaddy.pcap": 2, "rdma_client.pcap": 7}
	for _, file := range findTraces(t) {
		base := filepath.Base(file)
		if count[base] != wantCount[base] {
			t.Errorf("%s: %d CM MADs, want %d", base, count[base], wantCount[base])
		}
	}
	get := func(t *testing.T, key string, attr AttributeID) MAD {
		t.Helper()
		m, ok := byFrame[key]
		if !ok {
			t.Fatalf("no CM MAD at %s", key)
		}
		if _, err := Parse(m); err != nil {
			t.Fatal(err)
		}
		if got := m.Header().AttributeID(); got != attr {
			t.Fatalf("%s is %v, want %v", key, got, attr)
		}
		return m
	}
	addr := netip.MustParseAddr
	mapped := func(s string) [16]byte { return addr("::ffff:" + s).As16() }
	// rdma_cm's flow label for IPv4 and IPv6 (Linux rdma_flow_label /
	// traces/README.md): (source port × 31 + destination port) & 0xFFFFF.
	flowLabel := func(src, dst uint16) uint32 { return (uint32(src)*31 + uint32(dst)) & 0xfffff }

	t.Run("rping REQ", func(t *testing.T) {
		m := get(t, "rping.pcap#3", AttrREQ)
		req, _ := m.REQ()
		if h := m.Header(); h.Method() != MethodSend || h.TransactionID() != 0x0000000267bd6bba || h.Status() != 0 {
			t.Errorf("header %+v", h.Fields())
		}
		sid := req.ServiceID()
		if sid != NewIPCMServiceID(PortSpaceTCP, 7174) || sid.String() != "RDMA_PS_TCP port 7174" {
			t.Errorf("service ID %#x %v", uint64(sid), sid)
		}
		if req.PrimaryFlowLabel() != 0xB2F4F {
			t.Errorf("primary flow label %#x, want 0xB2F4F", req.PrimaryFlowLabel())
		}
		ipcm, err := req.IPCM()
		if err != nil {
			t.Fatal(err)
		}
		if ipcm.IPVersion() != 4 || ipcm.SrcAddr() != addr("192.0.2.12") || ipcm.DstAddr() != addr("192.0.2.11") {
			t.Errorf("IP CM %+v", ipcm.Fields())
		}
		if ipcm.SrcPort() != 0xdf97 || req.PrimaryFlowLabel() != flowLabel(ipcm.SrcPort(), sid.Port()) {
			t.Errorf("source port %#x, flow label %#x", ipcm.SrcPort(), req.PrimaryFlowLabel())
		}
		if req.PrimaryLocalPortLID() != 0xffff || req.PrimaryRemotePortLID() != 0xffff {
			t.Errorf("LIDs %#x %#x, want the permissive LID", req.PrimaryLocalPortLID(), req.PrimaryRemotePortLID())
		}
		if req.PrimaryLocalPortGID() != mapped("192.0.2.12") || req.PrimaryRemotePortGID() != mapped("192.0.2.11") {
			t.Errorf("GIDs %x %x", req.PrimaryLocalPortGID(), req.PrimaryRemotePortGID())
		}
		if req.LocalQPN() != 0x11 || req.StartingPSN() != 0x314830 || req.LocalCommID() != 0xba6bbd67 {
			t.Errorf("QPN %#x PSN %#x comm ID %#x", req.LocalQPN(), req.StartingPSN(), req.LocalCommID())
		}
		if req.TransportServiceType() != TransportRC || req.PathPacketPayloadMTU() != 3 || req.PartitionKey() != 0xffff {
			t.Errorf("transport %v MTU %d P_Key %#x", req.TransportServiceType(), req.PathPacketPayloadMTU(), req.PartitionKey())
		}
		// tshark: 1010 0... = Remote CM Response Timeout: 0x14, RetryCount 7,
		// RNR Retry Count 7, Max CM Retries 15, Primary Hop Limit 0x40,
		// Primary Local ACK Timeout 0x13.
		if req.RemoteCMResponseTimeout() != 20 || req.LocalCMResponseTimeout() != 20 || req.RetryCount() != 7 ||
			req.RNRRetryCount() != 7 || req.MaxCMRetries() != 15 || req.PrimaryHopLimit() != 64 ||
			req.PrimaryLocalACKTimeout() != 19 || req.PrimaryPacketRate() != 0 {
			t.Errorf("REQ parameters %+v", req.Fields())
		}
		// rxe's node GUID is derived from the MAC 52:54:00:c0:02:0c.
		if req.LocalCAGUID() != 0x505400fffec0020c {
			t.Errorf("CA GUID %#x", req.LocalCAGUID())
		}
	})
	t.Run("rping REP RTU DREQ DREP", func(t *testing.T) {
		req, _ := get(t, "rping.pcap#3", AttrREQ).REQ()
		rep, _ := get(t, "rping.pcap#4", AttrREP).REP()
		rtu, _ := get(t, "rping.pcap#5", AttrRTU).RTU()
		dreq, _ := get(t, "rping.pcap#126", AttrDREQ).DREQ()
		drep, _ := get(t, "rping.pcap#127", AttrDREP).DREP()
		if rep.RemoteCommID() != req.LocalCommID() || rep.LocalCAGUID() != 0x505400fffec0020b {
			t.Errorf("REP %+v", rep.Fields())
		}
		if rtu.LocalCommID() != req.LocalCommID() || rtu.RemoteCommID() != rep.LocalCommID() {
			t.Errorf("RTU comm IDs %#x %#x", rtu.LocalCommID(), rtu.RemoteCommID())
		}
		// The client disconnects: its DREQ names the server's QP.
		if dreq.LocalCommID() != req.LocalCommID() || dreq.RemoteQPN() != rep.LocalQPN() {
			t.Errorf("DREQ %+v", dreq.Fields())
		}
		if drep.LocalCommID() != rep.LocalCommID() || drep.RemoteCommID() != req.LocalCommID() {
			t.Errorf("DREP comm IDs %#x %#x", drep.LocalCommID(), drep.RemoteCommID())
		}
	})
	t.Run("rping6 REQ", func(t *testing.T) {
		req, _ := get(t, "rping6.pcap#3", AttrREQ).REQ()
		ipcm, err := req.IPCM()
		if err != nil {
			t.Fatal(err)
		}
		if ipcm.IPVersion() != 6 || ipcm.SrcAddr() != addr("fd00:c0:2::12") || ipcm.DstAddr() != addr("fd00:c0:2::11") {
			t.Errorf("IP CM %+v", ipcm.Fields())
		}
		if req.PrimaryLocalPortGID() != addr("fd00:c0:2::12").As16() || req.PrimaryRemotePortGID() != addr("fd00:c0:2::11").As16() {
			t.Errorf("GIDs %x %x", req.PrimaryLocalPortGID(), req.PrimaryRemotePortGID())
		}
		if req.PrimaryFlowLabel() != flowLabel(ipcm.SrcPort(), req.ServiceID().Port()) {
			t.Errorf("flow label %#x", req.PrimaryFlowLabel())
		}
	})
	t.Run("udaddy SIDR", func(t *testing.T) {
		sreq, _ := get(t, "udaddy.pcap#3", AttrSIDRREQ).SIDRREQ()
		srep, _ := get(t, "udaddy.pcap#4", AttrSIDRREP).SIDRREP()
		sid := sreq.ServiceID()
		if !sid.IsIPCM() || sid.PortSpace() != PortSpaceUDP || sid.Port() != 7174 || sid.String() != "RDMA_PS_UDP port 7174" {
			t.Errorf("SIDR_REQ service ID %v", sid)
		}
		ipcm, err := sreq.IPCM()
		if err != nil {
			t.Fatal(err)
		}
		if ipcm.SrcAddr() != addr("192.0.2.12") || ipcm.DstAddr() != addr("192.0.2.11") {
			t.Errorf("IP CM %+v", ipcm.Fields())
		}
		// librdmacm's RDMA_UDP_QKEY is 0x01234567.
		if srep.RequestID() != sreq.RequestID() || srep.Status() != SIDRSuccess || srep.ServiceID() != sid ||
			srep.QKey() != 0x01234567 || srep.QPN() != 0x1f {
			t.Errorf("SIDR_REP %+v", srep.Fields())
		}
	})
	t.Run("ucmatose server disconnects", func(t *testing.T) {
		rep, _ := get(t, "ucmatose.pcap#4", AttrREP).REP()
		dreq, _ := get(t, "ucmatose.pcap#18", AttrDREQ).DREQ()
		if dreq.LocalCommID() != rep.LocalCommID() || dreq.RemoteCommID() != rep.RemoteCommID() {
			t.Errorf("server DREQ comm IDs %#x %#x", dreq.LocalCommID(), dreq.RemoteCommID())
		}
	})
	t.Run("rdma_client crossing DREQs", func(t *testing.T) {
		a, _ := get(t, "rdma_client.pcap#10", AttrDREQ).DREQ()
		b, _ := get(t, "rdma_client.pcap#11", AttrDREQ).DREQ()
		if a.LocalCommID() != b.RemoteCommID() || b.LocalCommID() != a.RemoteCommID() {
			t.Errorf("DREQs %+v %+v", a.Fields(), b.Fields())
		}
		get(t, "rdma_client.pcap#12", AttrDREP)
		get(t, "rdma_client.pcap#13", AttrDREP)
	})
}
