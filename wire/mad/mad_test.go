package mad

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	cm := sampleMessages()[0].bytes()
	with := func(b []byte, edit func(h Header)) []byte {
		b = bytes.Clone(b)
		edit(Header(b))
		return b
	}
	sa := func(n int) []byte {
		b := HeaderFields{BaseVersion: 1, MgmtClass: ClassSubnAdm, ClassVersion: 2, Method: MethodGet}.Append(nil)
		return append(b, make([]byte, n-HeaderLen)...)
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"CM REQ", cm, nil},
		{"nil", nil, ErrTruncated},
		{"23 bytes", cm[:23], ErrTruncated},
		{"CM header only", cm[:HeaderLen], ErrTruncated},
		{"CM 255 bytes", cm[:Size-1], ErrTruncated},
		{"CM 257 bytes", append(bytes.Clone(cm), 0), ErrLength},
		{"CM with ICRC left on", append(bytes.Clone(cm), 0x31, 0xad, 0xb0, 0x36), ErrLength},
		{"base version 0", with(cm, func(h Header) { h.SetBaseVersion(0) }), ErrBaseVersion},
		{"base version 0x80 (OPA)", with(cm, func(h Header) { h.SetBaseVersion(0x80) }), ErrBaseVersion},
		{"CM class version 1", with(cm, func(h Header) { h.SetClassVersion(1) }), ErrClassVersion},
		{"CM class version 3", with(cm, func(h Header) { h.SetClassVersion(3) }), ErrClassVersion},
		{"CM unknown attribute", with(cm, func(h Header) { h.SetAttributeID(0x7777) }), nil},
		{"CM ClassPortInfo GetResp", with(cm, func(h Header) {
			h.SetAttributeID(AttrClassPortInfo)
			h.SetMethod(MethodGetResp)
		}), nil},
		{"SA header only", sa(HeaderLen), nil},
		{"SA 256 bytes", sa(Size), nil},
		{"SA class version 1 is not CM's business", with(sa(Size), func(h Header) { h.SetClassVersion(1) }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.in)
			if !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Fatalf("Parse error = %v, want %v", err, tt.want)
			}
			if err != nil {
				if m != nil {
					t.Errorf("Parse returned a MAD with error %v", err)
				}
				return
			}
			if !bytes.Equal(m, tt.in) || &m[0] != &tt.in[0] {
				t.Error("Parse must return a view of its input")
			}
		})
	}
}

// TestTypedAccessors checks that each MAD.X accessor answers only for its own
// attribute and only on a CM MAD.
func TestTypedAccessors(t *testing.T) {
	accessors := map[AttributeID]func(MAD) bool{
		AttrREQ:     func(m MAD) bool { _, ok := m.REQ(); return ok },
		AttrMRA:     func(m MAD) bool { _, ok := m.MRA(); return ok },
		AttrREJ:     func(m MAD) bool { _, ok := m.REJ(); return ok },
		AttrREP:     func(m MAD) bool { _, ok := m.REP(); return ok },
		AttrRTU:     func(m MAD) bool { _, ok := m.RTU(); return ok },
		AttrDREQ:    func(m MAD) bool { _, ok := m.DREQ(); return ok },
		AttrDREP:    func(m MAD) bool { _, ok := m.DREP(); return ok },
		AttrSIDRREQ: func(m MAD) bool { _, ok := m.SIDRREQ(); return ok },
		AttrSIDRREP: func(m MAD) bool { _, ok := m.SIDRREP(); return ok },
	}
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			m, err := Parse(s.bytes())
			if err != nil {
				t.Fatal(err)
			}
			if !m.IsCM() {
				t.Fatal("IsCM = false")
			}
			for attr, ok := range accessors {
				if got := ok(m); got != (attr == s.attr) {
					t.Errorf("MAD.%s() ok = %v", attr.Short(), got)
				}
			}
			// The same bytes under another class are not a CM message.
			other := bytes.Clone(m)
			Header(other).SetMgmtClass(ClassSubnAdm)
			if accessors[s.attr](MAD(other)) {
				t.Error("accessor accepted a non-CM MAD")
			}
			// A short MAD that skipped Parse is refused, not indexed out of range.
			if accessors[s.attr](m[:Size-1]) {
				t.Error("accessor accepted a 255-byte MAD")
			}
		})
	}
}

// TestSamplesRoundTrip encodes each sample message, decodes it back, and
// checks Validate accepts it.
func TestSamplesRoundTrip(t *testing.T) {
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			if err := s.msg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			b := s.bytes()
			if len(b) != Size {
				t.Fatalf("encoded %d bytes", len(b))
			}
			m, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := decodeCM(m); !reflect.DeepEqual(got, s.msg) {
				t.Errorf("decoded %+v\nwant %+v", got, s.msg)
			}
			if got, want := m.Header().Fields(), NewCMHeader(s.attr, 0x0000000267bd6bba); got != want {
				t.Errorf("header %+v, want %+v", got, want)
			}
			// Append appends: existing bytes are kept.
			prefix := []byte{1, 2, 3}
			if out := s.msg.Append(prefix); !bytes.Equal(out[:3], prefix) || len(out) != 3+DataLen {
				t.Errorf("Append did not append")
			}
		})
	}
}

// decodeCM returns the Fields of the CM message m carries, nil if none.
func decodeCM(m MAD) appender {
	if v, ok := m.REQ(); ok {
		return v.Fields()
	}
	if v, ok := m.MRA(); ok {
		return v.Fields()
	}
	if v, ok := m.REJ(); ok {
		return v.Fields()
	}
	if v, ok := m.REP(); ok {
		return v.Fields()
	}
	if v, ok := m.RTU(); ok {
		return v.Fields()
	}
	if v, ok := m.DREQ(); ok {
		return v.Fields()
	}
	if v, ok := m.DREP(); ok {
		return v.Fields()
	}
	if v, ok := m.SIDRREQ(); ok {
		return v.Fields()
	}
	if v, ok := m.SIDRREP(); ok {
		return v.Fields()
	}
	return nil
}

func TestValidateRange(t *testing.T) {
	tests := []struct {
		name  string
		msg   appender
		field string
	}{
		{"REQ VendorID 25 bits", func() appender { f := sampleREQ(); f.VendorID = 1 << 24; return f }(), "VendorID"},
		{"REQ LocalQPN 25 bits", func() appender { f := sampleREQ(); f.LocalQPN = 1 << 24; return f }(), "LocalQPN"},
		{"REQ StartingPSN", func() appender { f := sampleREQ(); f.StartingPSN = 0xffffffff; return f }(), "StartingPSN"},
		{"REQ transport type 4", func() appender { f := sampleREQ(); f.TransportServiceType = 4; return f }(), "TransportServiceType"},
		{"REQ primary flow label 21 bits", func() appender { f := sampleREQ(); f.Primary.FlowLabel = 1 << 20; return f }(), "PrimaryFlowLabel"},
		{"REQ alternate SL 16", func() appender { f := sampleREQ(); f.Alternate.SL = 16; return f }(), "AlternateSL"},
		{"MRA service timeout 32", func() appender { f := sampleMRA(); f.ServiceTimeout = 32; return f }(), "ServiceTimeout"},
		{"MRA message type 4", func() appender { f := sampleMRA(); f.MessageMRAed = 4; return f }(), "MessageMRAed"},
		{"REJ info length 128", func() appender { f := sampleREJ(); f.RejectInfoLength = 128; return f }(), "RejectInfoLength"},
		{"REP failover 4", func() appender { f := sampleREP(); f.FailoverAccepted = 4; return f }(), "FailoverAccepted"},
		{"REP VendorID 25 bits", func() appender { f := sampleREP(); f.VendorID = 1 << 24; return f }(), "VendorID"},
		{"REP RNR retry 8", func() appender { f := sampleREP(); f.RNRRetryCount = 8; return f }(), "RNRRetryCount"},
		{"DREQ remote QPN", func() appender { f := sampleDREQ(); f.RemoteQPN = 1 << 24; return f }(), "RemoteQPN"},
		{"SIDR_REP QPN", func() appender { f := sampleSIDRREP(); f.QPN = 1 << 24; return f }(), "QPN"},
		{"SIDR_REP VendorID 25 bits", func() appender { f := sampleSIDRREP(); f.VendorID = 0xffffffff; return f }(), "VendorID"},
		{"IPCM IP version 16", func() appender { f := sampleIPCM(); f.IPVersion = 16; return f }(), "IPVersion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.msg.Validate()
			var re *RangeError
			if !errors.As(err, &re) || !errors.Is(err, ErrFieldRange) {
				t.Fatalf("Validate = %v, want a RangeError", err)
			}
			if re.Field != tt.field {
				t.Errorf("RangeError names %s, want %s (%v)", re.Field, tt.field, err)
			}
			// Append still encodes, truncating to the field width.
			if n := len(tt.msg.Append(nil)); n == 0 {
				t.Error("Append wrote nothing")
			}
		})
	}
	// A field split into parts (REP VendorID: bytes 15, 19, 23) is reported
	// whole, with its whole width.
	rep := sampleREP()
	rep.VendorID = 0x1abcdef
	var re *RangeError
	if err := rep.Validate(); !errors.As(err, &re) || re.Field != "VendorID" || re.Value != 0x1abcdef || re.Max != 0xffffff {
		t.Errorf("REP VendorID 0x1abcdef: Validate = %v", err)
	}
	if got := REP(rep.Append(nil)).VendorID(); got != 0xabcdef {
		t.Errorf("REP VendorID 0x1abcdef encodes as %#x, want it truncated to 0xabcdef", got)
	}
	if got := (&RangeError{"REQ", "LocalQPN", 1 << 24, 0xffffff}).Error(); got != "mad: REQ.LocalQPN = 0x1000000 out of range [0, 0xffffff]" {
		t.Errorf("RangeError text %q", got)
	}
}

func TestHeader(t *testing.T) {
	// The header of the REQ in rping.pcap, frame 3.
	b := []byte{
		0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00,
		0x00, 0x00, 0x00, 0x02, 0x67, 0xbd, 0x6b, 0xba,
		0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	}
	h := Header(b)
	want := HeaderFields{BaseVersion: 1, MgmtClass: ClassCM, ClassVersion: 2, Method: MethodSend,
		TransactionID: 0x0000000267bd6bba, AttributeID: AttrREQ}
	if got := h.Fields(); got != want {
		t.Errorf("Fields = %+v, want %+v", got, want)
	}
	if got := NewCMHeader(AttrREQ, 0x0000000267bd6bba).Append(nil); !bytes.Equal(got, b) {
		t.Errorf("NewCMHeader encodes %x, want %x", got, b)
	}
	if h.R() {
		t.Error("Send has R set")
	}
	h.SetR(true)
	if h.Method() != 0x83 || !h.R() {
		t.Errorf("SetR(true): method %#x", uint8(h.Method()))
	}
	h.SetMethod(MethodGet)
	h.SetR(true)
	if h.Method() != MethodGetResp {
		t.Errorf("Get with R = %v, want GetResp", h.Method())
	}
	h.SetR(false)
	if h.Method() != MethodGet {
		t.Errorf("GetResp without R = %v, want Get", h.Method())
	}
	if h.Reserved() != 0 {
		t.Error("reserved not zero")
	}
	h.SetReserved(0xbeef)
	if h.Reserved() != 0xbeef || !bytes.Equal(b[18:20], []byte{0xbe, 0xef}) {
		t.Errorf("SetReserved wrote %x", b[18:20])
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"status 0", Status(0).String(), "success"},
		{"status busy", Status(0x0001).String(), "busy"},
		{"status redirect", StatusRedirectRequired.String(), "redirect required"},
		{"status busy+redirect", Status(0x0003).String(), "busy, redirect required"},
		{"status bad version", Status(0x0004).String(), "unsupported class or version"},
		{"status method", Status(0x0008).String(), "unsupported method"},
		{"status method/attr", Status(0x000C).String(), "unsupported method/attribute combination"},
		{"status reserved code", Status(0x0010).String(), "reserved invalid-field code 4"},
		{"status invalid value", Status(0x001C).String(), "invalid attribute or attribute modifier value"},
		{"status reserved bits", Status(0x0020).String(), "reserved bits 0x0020"},
		{"status class specific", Status(0x0100).String(), "class specific 0x01"},
		{"status mix", Status(0x020d).String(), "busy, unsupported method/attribute combination, class specific 0x02"},
		{"method get", MethodGet.String(), "Get"},
		{"method set", MethodSet.String(), "Set"},
		{"method getresp", MethodGetResp.String(), "GetResp"},
		{"method send", MethodSend.String(), "Send"},
		{"method trap", MethodTrap.String(), "Trap"},
		{"method report", MethodReport.String(), "Report"},
		{"method reportresp", MethodReportResp.String(), "ReportResp"},
		{"method traprepress", MethodTrapRepress.String(), "TrapRepress"},
		{"method unknown", Method(0x13).String(), "Method(0x13)"},
		{"class CM", ClassCM.String(), "CM"},
		{"class SA", ClassSubnAdm.String(), "SubnAdm"},
		{"class DR", ClassSubnDirectedRoute.String(), "SubnMgt (directed route)"},
		{"class unknown", MgmtClass(0x30).String(), "MgmtClass(0x30)"},
		{"attr ClassPortInfo", AttrClassPortInfo.String(), "ClassPortInfo"},
		{"attr REQ", AttrREQ.String(), "ConnectRequest"},
		{"attr MRA", AttrMRA.String(), "MsgRcptAck"},
		{"attr REJ", AttrREJ.String(), "ConnectReject"},
		{"attr REP", AttrREP.String(), "ConnectReply"},
		{"attr RTU", AttrRTU.String(), "ReadyToUse"},
		{"attr DREQ", AttrDREQ.String(), "DisconnectRequest"},
		{"attr DREP", AttrDREP.String(), "DisconnectReply"},
		{"attr SIDR_REQ", AttrSIDRREQ.String(), "ServiceIDResReq"},
		{"attr SIDR_REP", AttrSIDRREP.String(), "ServiceIDResReqResp"},
		{"attr LAP", AttrLAP.String(), "LoadAlternatePath"},
		{"attr APR", AttrAPR.String(), "AlternatePathResponse"},
		{"attr unknown", AttributeID(0x1234).String(), "AttributeID(0x1234)"},
		{"attr short REQ", AttrREQ.Short(), "REQ"},
		{"attr short SIDR_REP", AttrSIDRREP.Short(), "SIDR_REP"},
		{"attr short unknown", AttributeID(0x0002).Short(), "0x0002"},
		{"reject 1", RejectReason(1).String(), "No QP Available"},
		{"reject 4", RejectTimeout.String(), "Timeout"},
		{"reject 8", RejectInvalidServiceID.String(), "Invalid Service ID"},
		{"reject 24", RejectPortCMRedirect.String(), "Port and CM Redirection"},
		{"reject 26", RejectInvalidMTU.String(), "Invalid Path MTU"},
		{"reject 28", RejectConsumer.String(), "Consumer Reject"},
		{"reject 33", RejectInvalidAltFlowLabel.String(), "Invalid Alternate Flow Label"},
		{"reject 34", RejectReason(34).String(), "RejectReason(34)"},
		{"reject 35", RejectVendorOptionNotSupported.String(), "Vendor Option Not Supported"},
		{"reject 0", RejectReason(0).String(), "RejectReason(0)"},
		{"sidr 0", SIDRSuccess.String(), "Success"},
		{"sidr 1", SIDRUnsupported.String(), "Service ID Not Supported"},
		{"sidr 5", SIDRUnsupportedVersion.String(), "Unsupported Class Version"},
		{"sidr 6", SIDRStatus(6).String(), "SIDRStatus(6)"},
		{"msg REQ", MsgREQ.String(), "REQ"},
		{"msg other", MsgOther.String(), "other"},
		{"msg 3", MsgType(3).String(), "reserved(3)"},
		{"transport RC", TransportRC.String(), "RC"},
		{"transport ext", TransportExtended.String(), "extended"},
		{"kind", KindGID.String(), "gid"},
		{"kind unknown", Kind(200).String(), "Kind(200)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	// Every reason IBTA defines (1..33) has a name.
	for r := RejectNoQP; r <= RejectInvalidAltFlowLabel; r++ {
		if r.String() == fmt.Sprintf("RejectReason(%d)", uint16(r)) {
			t.Errorf("reject reason %d has no name", r)
		}
	}
}
