package mad

import (
	"errors"
	"testing"
)

func TestServiceID(t *testing.T) {
	tests := []struct {
		name    string
		id      uint64
		ipcm    bool
		ps      PortSpace
		port    uint16
		str     string
		wantErr bool
	}{
		{"rping TCP 7174", 0x0000000001061c06, true, PortSpaceTCP, 7174, "RDMA_PS_TCP port 7174", false},
		{"ucmatose TCP 7471", 0x0000000001061d2f, true, PortSpaceTCP, 7471, "RDMA_PS_TCP port 7471", false},
		{"udaddy UDP 7174", 0x0000000001111c06, true, PortSpaceUDP, 7174, "RDMA_PS_UDP port 7174", false},
		{"IPoIB", 0x0000000001020001, true, PortSpaceIPoIB, 1, "RDMA_PS_IPOIB port 1", false},
		{"IB port 0", 0x00000000013f0000, true, PortSpaceIB, 0, "RDMA_PS_IB port 0", false},
		{"unknown port space", 0x0000000001420050, true, 0x42, 80, "PortSpace(0x42) port 80", false},
		{"SDP prefix", 0x0000000000010000 | 80, false, 0, 0, "0x0000000000010050", true},
		{"IB CM assigned", 0x0200000000001234, false, 0, 0, "0x0200000000001234", true},
		{"prefix 2", 0x0000000002061c06, false, 0, 0, "0x0000000002061c06", true},
		{"zero", 0, false, 0, 0, "0x0000000000000000", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ServiceID(tt.id)
			if s.IsIPCM() != tt.ipcm {
				t.Fatalf("IsIPCM = %v", s.IsIPCM())
			}
			if s.String() != tt.str {
				t.Errorf("String = %q, want %q", s.String(), tt.str)
			}
			got, err := ParseIPCMServiceID(tt.id)
			if tt.wantErr {
				if !errors.Is(err, ErrNotIPCM) {
					t.Errorf("ParseIPCMServiceID error = %v, want ErrNotIPCM", err)
				}
				return
			}
			if err != nil || got != s {
				t.Fatalf("ParseIPCMServiceID = %v, %v", got, err)
			}
			if s.PortSpace() != tt.ps || s.Port() != tt.port {
				t.Errorf("PortSpace, Port = %v, %d", s.PortSpace(), s.Port())
			}
			if n := NewIPCMServiceID(tt.ps, tt.port); n != s {
				t.Errorf("NewIPCMServiceID = %#x", uint64(n))
			}
		})
	}
}
