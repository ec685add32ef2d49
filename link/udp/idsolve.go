package udp

import (
	"hash/crc32"
	"sync"
)

// An unprivileged UDP socket delivers the UDP payload and, through control
// messages, the addresses and TOS — but never the IPv4 Identification,
// which the RoCE v2 ICRC covers (IBTA A17.8) and which rxe varies packet by
// packet. The CRC is affine in its input, so for a packet of fixed length
// ICRC(id) = ICRC(0) ⊕ L(id) with L linear from 16 bits to 32 bits and
// injective (CRC-32 detects every burst of at most 32 bits). idSolver finds
// the one id, if any, for which the received ICRC is right: the ICRC is
// then verified up to those 16 bits — a random corruption elsewhere passes
// with probability 2^-16 instead of 2^-32. Privileged links read the real
// IP header and verify all 32 bits.

// idBasis is L for one distance between the ID field and the ICRC, in row
// echelon form: vec[i] has its highest set bit at pivot[i], and comb[i] is
// the id whose image vec[i] is.
type idBasis struct {
	vec   [16]uint32
	comb  [16]uint16
	pivot [16]int8
	n     int
}

type idSolver struct {
	mu    sync.Mutex
	cache map[int]*idBasis // by tail length; guarded by mu
}

var zeros [1 << 14]byte

// basis returns L for an ID field followed by tail bytes before the ICRC.
func (s *idSolver) basis(tail int) *idBasis {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.cache[tail]; b != nil {
		return b
	}
	if s.cache == nil {
		s.cache = make(map[int]*idBasis)
	}
	crc := func(id uint16) uint32 {
		c := crc32.Update(0, crc32.IEEETable, []byte{byte(id >> 8), byte(id)})
		for t := tail; t > 0; {
			k := min(t, len(zeros))
			c = crc32.Update(c, crc32.IEEETable, zeros[:k])
			t -= k
		}
		return c
	}
	base := crc(0)
	b := &idBasis{}
	for bit := 0; bit < 16; bit++ {
		v, comb := crc(1<<bit)^base, uint16(1)<<bit
		// Reduce by the rows so far, then insert.
		for i := 0; i < b.n; i++ {
			if v&(1<<b.pivot[i]) != 0 {
				v ^= b.vec[i]
				comb ^= b.comb[i]
			}
		}
		if v == 0 {
			continue // cannot happen for CRC-32; kept for safety
		}
		p := int8(31)
		for v&(1<<p) == 0 {
			p--
		}
		for i := 0; i < b.n; i++ { // keep rows reduced at the new pivot
			if b.vec[i]&(1<<p) != 0 {
				b.vec[i] ^= v
				b.comb[i] ^= comb
			}
		}
		b.vec[b.n], b.comb[b.n], b.pivot[b.n] = v, comb, p
		b.n++
	}
	s.cache[tail] = b
	return b
}

// solve returns the id with L(id) == target.
func (b *idBasis) solve(target uint32) (uint16, bool) {
	var id uint16
	for i := 0; i < b.n; i++ {
		if target&(1<<b.pivot[i]) != 0 {
			target ^= b.vec[i]
			id ^= b.comb[i]
		}
	}
	return id, target == 0
}
