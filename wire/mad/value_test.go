package mad

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestValueFormat(t *testing.T) {
	u := func(k Kind, w int, v uint64) Value { return Value{kind: k, width: uint16(w), u: v} }
	b := func(k Kind, p []byte) Value { return Value{kind: k, width: uint16(8 * len(p)), b: p} }
	mapped := []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 12}
	tests := []struct {
		name string
		v    Value
		str  string
		json string
	}{
		{"uint", u(KindUint, 16, 65535), "65535", "65535"},
		{"hex qpn", u(KindHex, 24, 0x11), "0x000011", "17"},
		{"hex guid", u(KindHex, 64, 0x505400fffec0020c), "0x505400fffec0020c", `"0x505400fffec0020c"`},
		{"flag", u(KindFlag, 1, 1), "1", "1"},
		{"reserved", u(KindReserved, 6, 2), "0x02", "2"},
		{"bytes", b(KindBytes, []byte{0xde, 0xad}), "dead", `"dead"`},
		{"gid mapped", b(KindGID, mapped), "::ffff:192.0.2.12", `"::ffff:192.0.2.12"`},
		{"ipaddr v4", b(KindIPAddr, []byte{192, 0, 2, 11}), "192.0.2.11", `"192.0.2.11"`},
		{"service id ipcm", u(KindServiceID, 64, 0x0000000001061c06), "0x0000000001061c06 (RDMA_PS_TCP port 7174)", `"0x0000000001061c06"`},
		{"service id other", u(KindServiceID, 64, 0x0200000000000001), "0x0200000000000001", `"0x0200000000000001"`},
		{"timeout 20", u(KindTimeout, 5, 20), "20 (4.294967296s)", "20"},
		{"timeout 0", u(KindTimeout, 5, 0), "0 (4.096µs)", "0"},
		{"mtu 3", u(KindMTU, 4, 3), "3 (1024)", "3"},
		{"mtu 0", u(KindMTU, 4, 0), "0 (invalid)", "0"},
		{"class", u(KindMgmtClass, 8, 7), "0x07 (CM)", "7"},
		{"method", u(KindMethod, 8, 3), "0x03 (Send)", "3"},
		{"status", u(KindStatus, 16, 0x0c), "0x000c (unsupported method/attribute combination)", "12"},
		{"attribute", u(KindAttributeID, 16, 0x10), "0x0010 (ConnectRequest)", "16"},
		{"msgtype", u(KindMsgType, 2, 1), "1 (REP)", "1"},
		{"transport", u(KindTransportType, 2, 1), "1 (UC)", "1"},
		{"reject", u(KindRejectReason, 16, 28), "28 (Consumer Reject)", "28"},
		{"sidr", u(KindSIDRStatus, 8, 1), "1 (Service ID Not Supported)", "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if s := tt.v.String(); s != tt.str {
				t.Errorf("String = %q, want %q", s, tt.str)
			}
			j, err := json.Marshal(tt.v)
			if err != nil || string(j) != tt.json {
				t.Errorf("JSON = %s, %v; want %s", j, err, tt.json)
			}
		})
	}
}

// TestWalkers checks the field walkers over a sample of each message: the
// names and order are the layout's, and the values agree with the getters.
func TestWalkers(t *testing.T) {
	m, err := Parse(sampleMessages()[0].bytes())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := m.REQ()
	i := 0
	for f, v := range m.DataFields() {
		if f != reqLayout[i] {
			t.Fatalf("field %d = %v, want %v", i, f, reqLayout[i])
		}
		switch f.Name {
		case "LocalQPN":
			if v.Uint() != uint64(req.LocalQPN()) {
				t.Errorf("LocalQPN %v", v)
			}
		case "PrimaryFlowLabel":
			if v.String() != "0xb2f4f" {
				t.Errorf("PrimaryFlowLabel %v", v)
			}
		case "PrivateData":
			if !bytes.Equal(v.Bytes(), req.PrivateData()) || &v.Bytes()[0] != &req.PrivateData()[0] {
				t.Error("PrivateData value does not alias the message")
			}
		case "ServiceID":
			if v.String() != "0x0000000001061c06 (RDMA_PS_TCP port 7174)" {
				t.Errorf("ServiceID %v", v)
			}
		}
		i++
	}
	if i != len(reqLayout) {
		t.Errorf("walked %d fields, want %d", i, len(reqLayout))
	}
	// Early break.
	n := 0
	for range req.All() {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("break after 3 visited %d", n)
	}
	hdr := map[string]string{}
	for f, v := range m.Header().All() {
		hdr[f.Name] = v.String()
	}
	if hdr["AttributeID"] != "0x0010 (ConnectRequest)" || hdr["Method"] != "0x03 (Send)" ||
		hdr["TransactionID"] != "0x0000000267bd6bba" {
		t.Errorf("header walk: %v", hdr)
	}

	// A non-CM MAD: attribute IDs are not named after CM's, data is raw.
	sa := HeaderFields{BaseVersion: 1, MgmtClass: ClassSubnAdm, ClassVersion: 2, Method: MethodGet,
		AttributeID: 0x0011}.Append(nil)
	sa = append(sa, 1, 2, 3)
	ms, err := Parse(sa)
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range ms.Header().All() {
		if f.Name == "AttributeID" && v.String() != "0x0011" {
			t.Errorf("SA attribute shown as %s", v)
		}
	}
	var raw []string
	for f, v := range ms.DataFields() {
		raw = append(raw, f.Name+"="+v.String())
	}
	if len(raw) != 1 || raw[0] != "Data=010203" {
		t.Errorf("SA data fields %v", raw)
	}
}

// TestViewAll checks each view's All walker against MAD.DataFields and the
// layout table.
func TestViewAll(t *testing.T) {
	for _, s := range sampleMessages() {
		t.Run(s.name, func(t *testing.T) {
			m, err := Parse(s.bytes())
			if err != nil {
				t.Fatal(err)
			}
			var all func(func(Field, Value) bool)
			switch s.attr {
			case AttrREQ:
				v, _ := m.REQ()
				all = v.All()
			case AttrMRA:
				v, _ := m.MRA()
				all = v.All()
			case AttrREJ:
				v, _ := m.REJ()
				all = v.All()
			case AttrREP:
				v, _ := m.REP()
				all = v.All()
			case AttrRTU:
				v, _ := m.RTU()
				all = v.All()
			case AttrDREQ:
				v, _ := m.DREQ()
				all = v.All()
			case AttrDREP:
				v, _ := m.DREP()
				all = v.All()
			case AttrSIDRREQ:
				v, _ := m.SIDRREQ()
				all = v.All()
			case AttrSIDRREP:
				v, _ := m.SIDRREP()
				all = v.All()
			}
			got, want := collect(all), collect(m.DataFields())
			if len(got) != len(want) || len(got) != len(layoutOf(s.attr)) {
				t.Fatalf("All yields %d fields, DataFields %d", len(got), len(want))
			}
			for i := range got {
				g, w := got[i], want[i]
				if g.f != w.f || g.v.Kind() != g.f.Kind || g.v.Uint() != w.v.Uint() || !bytes.Equal(g.v.Bytes(), w.v.Bytes()) {
					t.Errorf("field %d: %v=%v, want %v=%v", i, g.f, g.v, w.f, w.v)
				}
				if !g.f.Kind.IsBytes() && (g.v.Uint() > g.f.Max() || g.v.Bool() != (g.v.Uint() != 0)) {
					t.Errorf("%v: value %v out of range", g.f, g.v)
				}
			}
		})
	}
	if got := reqLayout[reqPrimary+pathFlowLabel].String(); got != "PrimaryFlowLabel@88[0]:20" {
		t.Errorf("Field.String = %q", got)
	}
}
