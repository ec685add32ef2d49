package rsocket

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// TestMsg checks the immediate's encoding against values the capture
// shows (testdata/rstream_small.txt) and rsocket.c's rs_msg_set.
func TestMsg(t *testing.T) {
	for _, tc := range []struct {
		m    msg
		op   op
		data uint32
		name string
	}{
		{0x80000180, opSGL, 384, "RS_OP_SGL credits to 384"},
		{0x00000010, opData, 16, "RS_OP_DATA 16 bytes"},
		{0x000003e8, opData, 1000, "RS_OP_DATA 1000 bytes"},
		{0xe0000000, opCtrl, ctrlDisconnect, "RS_OP_CTRL RS_CTRL_DISCONNECT"},
		{0xe0000002, opCtrl, ctrlShutdown, "RS_OP_CTRL RS_CTRL_SHUTDOWN"},
		{0xc0000003, opIOMapSGL, 3, "RS_OP_IOMAP_SGL entry 3"},
		{0xa0000001, opRsvd, 1, "RS_OP_RSVD 0x1"},
		// rseq_no + rq_size above 16 bits travels whole; the receiver
		// keeps the low 16.
		{0x8001005c, opSGL, 0x1005c, "RS_OP_SGL credits to 92"},
	} {
		if got := mkMsg(tc.op, tc.data); got != tc.m {
			t.Errorf("mkMsg(%v, %d) = %#08x, want %#08x", tc.op, tc.data, uint32(got), uint32(tc.m))
		}
		if tc.m.op() != tc.op || tc.m.data() != tc.data || tc.m.String() != tc.name {
			t.Errorf("%#08x: op %v data %d %q, want %v %d %q", uint32(tc.m), tc.m.op(), tc.m.data(), tc.m, tc.op, tc.data, tc.name)
		}
	}
	if got := mkMsg(opData, 1<<29|5); got != 5 {
		t.Errorf("data wider than 29 bits: %#x, want it masked", uint32(got))
	}
}

// TestConnDataGolden encodes the REP of the capture from its fields.
func TestConnDataGolden(t *testing.T) {
	// The REP of testdata/rstream_small.pcap: RS_CONN_FLAG_IOMAP, 384
	// credits, target SGL and first buffer, big-endian.
	want := []byte{1, 2, 0x01, 0x80, 0, 0, 0, 0,
		0, 0, 0x7f, 0xc6, 0xfc, 0, 0x60, 0, 0, 0x02, 0xa9, 0xfe, 0, 0, 0, 2,
		0, 0, 0x7f, 0xc6, 0xfc, 0, 0x80, 0, 0, 0x02, 0xaa, 0x42, 0, 0, 0x10, 0}
	d := connData{version: 1, flags: flagIOMap, credits: 384,
		targetSGL: sge{addr: 0x7fc6fc006000, key: 0x2a9fe, len: 2}, dataBuf: sge{addr: 0x7fc6fc008000, key: 0x2aa42, len: 4096}}
	if got := d.append(nil); !bytes.Equal(got, want) {
		t.Fatalf("encoded %x\nwant    %x", got, want)
	}
	got, err := parseConnData(want)
	d.reservedOK = true
	if err != nil || got != d {
		t.Fatalf("parsed %+v, %v; want %+v", got, err, d)
	}
}

// TestConnDataTruncated: every prefix shorter than 40 bytes is an error,
// never a panic.
func TestConnDataTruncated(t *testing.T) {
	b := connData{version: 1, credits: 1}.append(nil)
	for n := range b {
		if _, err := parseConnData(b[:n]); err == nil {
			t.Errorf("%d bytes parsed", n)
		}
	}
}

// TestSGEOrder: an SGL update is written in the receiver's byte order.
func TestSGEOrder(t *testing.T) {
	s := sge{addr: 0x56284ebcf000, key: 0x17af, len: 4096}
	// Frame 4 of the capture, from an x86 host to an x86 host.
	le := []byte{0x00, 0xf0, 0xbc, 0x4e, 0x28, 0x56, 0, 0, 0xaf, 0x17, 0, 0, 0, 0x10, 0, 0}
	if got := appendSGE(nil, s, binary.LittleEndian); !bytes.Equal(got, le) {
		t.Errorf("little-endian %x, want %x", got, le)
	}
	if got := parseSGE(appendSGE(nil, s, binary.BigEndian), binary.BigEndian); got != s {
		t.Errorf("big-endian round trip %+v", got)
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		v    uint8
		want int
	}{{0, 0}, {1, 1}, {128, 128}, {129, 256}, {130, 512}, {255, 127 << 8}} {
		if got := scaleToValue(tc.v); got != tc.want {
			t.Errorf("scaleToValue(%d) = %d, want %d", tc.v, got, tc.want)
		}
	}
}

// FuzzConnData: parsing never panics, and what parses encodes back.
func FuzzConnData(f *testing.F) {
	f.Add(connData{version: 1, flags: flagIOMap, credits: 384, targetSGL: sge{1, 2, 2}, dataBuf: sge{3, 4, 5}}.append(nil))
	f.Add(make([]byte, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseConnData(b)
		if err != nil {
			return
		}
		got := d.append(nil)
		if d.reservedOK && !bytes.Equal(got, b[:connDataLen]) {
			t.Fatalf("%x re-encoded as %x", b[:connDataLen], got)
		}
	})
}
