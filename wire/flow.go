package wire

// RoCE v2 UDP source ports, as Linux computes them, so that ECMP hashing and
// captures match a Linux host's (include/rdma/ib_verbs.h).

// UDPSportMin is the lowest RoCE v2 UDP source port Linux uses
// (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN).
const UDPSportMin = 0xC000

// FlowLabelMask masks the 20 bits of a flow label.
const FlowLabelMask = 0xFFFFF

// CalcFlowLabel derives a flow label from a connected QP pair, as Linux's
// rdma_calc_flow_label does when the address vector's flow label is 0.
func CalcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v) & FlowLabelMask
}

// FlowLabelToUDPSport folds a flow label into a UDP source port in
// [0xC000, 0xFFFF], as Linux's rdma_flow_label_to_udp_sport does.
func FlowLabelToUDPSport(fl uint32) uint16 {
	low, high := fl&0x3FFF, fl&0xFC000
	low ^= high >> 14
	return uint16(low | UDPSportMin)
}

// UDSport returns the UDP source port rxe uses for UD QPs and QP1:
// 0xC000 + hash_32(qpn, 14) (rxe_net.c). QP1 always sends from 55410.
func UDSport(qpn uint32) uint16 {
	const goldenRatio32 = 0x61C88647
	return UDPSportMin + uint16((qpn*goldenRatio32)>>(32-14))
}
