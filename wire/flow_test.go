package wire

import "testing"

// The expected ports are the ones in ../shared/traces (see its README).
func TestUDPSourcePorts(t *testing.T) {
	if got := UDSport(1); got != 55410 {
		t.Errorf("UDSport(1) = %d, want 55410 (QP1 in every trace)", got)
	}
	if got := FlowLabelToUDPSport(CalcFlowLabel(0x14, 0x14)); got != 49552 {
		t.Errorf("RC QPN 0x14 to 0x14: sport %d, want 49552", got)
	}
	if got := FlowLabelToUDPSport(0xB2F4F); got != 61283 {
		t.Errorf("flow label 0xB2F4F: sport %d, want 61283 (rping.pcap)", got)
	}
	for _, fl := range []uint32{0, 1, 0x3FFF, 0x4000, FlowLabelMask} {
		if p := FlowLabelToUDPSport(fl); p < UDPSportMin {
			t.Errorf("FlowLabelToUDPSport(%#x) = %d < 0xC000", fl, p)
		}
	}
}
