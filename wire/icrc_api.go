package wire

// ICRC computes the ICRC of a packet given from its network header (the IP
// header of RoCE v2, the GRH of RoCE v1, of length netLen) up to, not
// including, the ICRC. Links that build or rebuild headers themselves use
// it: the ICRC must be computed over the headers as they go on the wire.
//
// For speed ICRC masks the variant fields in place and restores them
// before it returns (one pass of hash/crc32 over the whole packet): b must
// not be used concurrently. Packet.ComputeICRC leaves its bytes untouched.
func ICRC(b []byte, netLen int, v Version) uint32 {
	ipVer := uint8(6)
	if v == RoCEv2 && len(b) > 0 && b[0]>>4 == 4 {
		ipVer = 4
	}
	return icrcInPlace(b, netLen, ipVer, v)
}
