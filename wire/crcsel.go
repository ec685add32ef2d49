package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"
)

// Which CRC-32 loop computes the ICRC is measured, not assumed. On a real
// CPU hash/crc32's carry-less multiply (amd64) or CRC instructions (arm64)
// beat any table several times over. Under an emulator that runs those
// instructions through a helper, as QEMU's TCG does (the lab's VMs), it is
// the other way round: a 1 KiB CRC there took 3.3–5.6 µs with hash/crc32
// and 1.7–2.5 µs with updateSlicing16 (BENCHMARKS.md, "The ICRC under
// emulation"), and the ICRC covers every byte on both sides. So the
// package's initialisation times the two over 1 KiB and keeps the faster:
// some 50 µs on this project's machine, under a millisecond under TCG.
//
// GOROCE_ICRC=hash or GOROCE_ICRC=table fixes the choice (to measure one
// against the other); auto, or unset, measures.

// ICRCEnv is the environment variable that fixes the ICRC's CRC loop.
const ICRCEnv = "GOROCE_ICRC"

// The ICRC's CRC loops, as ICRCMethod reports them and ICRCEnv takes them.
const (
	ICRCHash  = "hash"  // hash/crc32: the CPU's CRC or carry-less multiply instructions
	ICRCTable = "table" // updateSlicing16: sixteen 1 KiB tables, 16 bytes a step
)

// crcTable says updateIEEE runs updateSlicing16; crcChoice says why.
var (
	crcTable  bool
	crcChoice string
)

func init() { crcTable, crcChoice = chooseCRC(os.Getenv(ICRCEnv), os.Stderr) }

// ICRCMethod says which CRC-32 loop computes ICRCs in this process
// (ICRCHash or ICRCTable) and why: the times that chose it, or the
// environment variable that fixed it.
func ICRCMethod() (method, why string) {
	if crcTable {
		return ICRCTable, crcChoice
	}
	return ICRCHash, crcChoice
}

// chooseCRC says whether updateSlicing16 is to be used, and why: env says
// so, or measuring (env empty or auto; another value is reported on warn
// and measured too).
func chooseCRC(env string, warn io.Writer) (table bool, why string) {
	switch env {
	case ICRCHash:
		return false, ICRCEnv + "=" + env
	case ICRCTable:
		return true, ICRCEnv + "=" + env
	case "", "auto":
	default:
		fmt.Fprintf(warn, "goroce: %s=%q is not one of auto, %s, %s: measuring (auto)\n", ICRCEnv, env, ICRCHash, ICRCTable)
	}
	h, s := timeCRC(hashUpdate, updateSlicing16)
	if s < h {
		return true, fmt.Sprintf("measured: 1 KiB in %v with slicing-by-16, %v with hash/crc32", s, h)
	}
	return false, fmt.Sprintf("measured: 1 KiB in %v with hash/crc32, %v with slicing-by-16", h, s)
}

func hashUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

// timeCRC returns the least time each of a and b took for a CRC of 1 KiB
// over twelve alternating rounds of eight, the first not counted (an
// emulator translates code as it first runs), the least so that an
// interruption in one round does not decide.
func timeCRC(a, b func(uint32, []byte) uint32) (ta, tb time.Duration) {
	buf := make([]byte, 1024)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	ta, tb = time.Hour, time.Hour
	var sink uint32
	for r := range 12 {
		for i, f := range [2]func(uint32, []byte) uint32{a, b} {
			t0 := time.Now()
			for range 8 {
				sink = f(sink, buf)
			}
			d := time.Since(t0) / 8
			switch {
			case r == 0:
			case i == 0:
				ta = min(ta, d)
			default:
				tb = min(tb, d)
			}
		}
	}
	crcSink = sink
	return ta, tb
}

var crcSink uint32

// updateSlicing16 is crc32.Update(crc, crc32.IEEETable, p), sixteen bytes
// a step from two 8-byte loads (slicing-by-8 with its bytes taken from the
// words, not loaded one by one: under an emulator every load costs a
// software TLB lookup), then eight, then one at a time. Its 16 KiB of
// tables keep to four pages; 16-bit tables (eight loads per 16 bytes, 2 MiB)
// ran faster alone in the VMs, and in write_bw's packet path no faster than
// hash/crc32 (an emulated TLB's misses, likely).
func updateSlicing16(crc uint32, p []byte) uint32 {
	t := ieeeSlicing
	crc = ^crc
	for ; len(p) >= 16; p = p[16:] {
		w := binary.LittleEndian.Uint64(p) ^ uint64(crc)
		v := binary.LittleEndian.Uint64(p[8:])
		crc = t[15][byte(w)] ^ t[14][byte(w>>8)] ^ t[13][byte(w>>16)] ^ t[12][byte(w>>24)] ^
			t[11][byte(w>>32)] ^ t[10][byte(w>>40)] ^ t[9][byte(w>>48)] ^ t[8][byte(w>>56)] ^
			t[7][byte(v)] ^ t[6][byte(v>>8)] ^ t[5][byte(v>>16)] ^ t[4][byte(v>>24)] ^
			t[3][byte(v>>32)] ^ t[2][byte(v>>40)] ^ t[1][byte(v>>48)] ^ t[0][byte(v>>56)]
	}
	if len(p) >= 8 {
		w := binary.LittleEndian.Uint64(p) ^ uint64(crc)
		crc = t[7][byte(w)] ^ t[6][byte(w>>8)] ^ t[5][byte(w>>16)] ^ t[4][byte(w>>24)] ^
			t[3][byte(w>>32)] ^ t[2][byte(w>>40)] ^ t[1][byte(w>>48)] ^ t[0][byte(w>>56)]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// UpdateCRC32 returns crc32.Update(crc, crc32.IEEETable, p) computed by the
// loop the ICRC uses in this process (ICRCMethod), for tools that must do
// the same per-byte work as goroce (bench/cmd/udpfloor, the floors).
func UpdateCRC32(crc uint32, p []byte) uint32 { return updateIEEE(crc, p) }
