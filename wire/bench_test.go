package wire_test

// Benchmarks:
//
//	go test -run='^$' -bench=. -benchmem -count=5 ./wire/
//
// BenchmarkICRC4096 and BenchmarkCRC32Same hash the same bytes (a RoCE v2
// IPv4 packet with a 4096-byte payload, from the IP header to the ICRC), the
// first through the ICRC's masking, the second as one plain block: their
// throughput ratio is the cost of the masking, and should stay near 1.

import (
	"hash/crc32"
	"testing"

	"github.com/goroce/goroce/wire"
)

var (
	sinkU32 uint32
	sinkErr error
	sinkLen int
)

// icrcBenchFrame is an RC RDMA WRITE ONLY over RoCE v2/IPv4 with a 4096-byte
// payload (a 4096-byte path MTU).
func icrcBenchFrame(tb testing.TB) ([]byte, *wire.Packet) {
	frame := encode(tb, sampleFields(0x0A, encaps[2], samplePayload(4096)))
	return frame, parseFrame(tb, frame)
}

func BenchmarkICRC4096(b *testing.B) {
	frame, p := icrcBenchFrame(b)
	ip := frame[wire.EthernetLen : len(frame)-wire.ICRCLen]
	b.SetBytes(int64(len(ip)))
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.ComputeICRC()
		sinkU32, sinkErr = c, err
	}
}

// BenchmarkICRCInPlace4096 is the links' path (wire.ICRC): the variant
// fields are masked in the caller's buffer, so the whole packet is one
// crc32.Update call.
func BenchmarkICRCInPlace4096(b *testing.B) {
	frame, _ := icrcBenchFrame(b)
	ip := frame[wire.EthernetLen : len(frame)-wire.ICRCLen]
	b.SetBytes(int64(len(ip)))
	b.ReportAllocs()
	for b.Loop() {
		sinkU32 = wire.ICRC(ip, wire.IPv4MinLen, wire.RoCEv2)
	}
}

func BenchmarkCRC32Same(b *testing.B) {
	frame, _ := icrcBenchFrame(b)
	ip := frame[wire.EthernetLen : len(frame)-wire.ICRCLen]
	b.SetBytes(int64(len(ip)))
	b.ReportAllocs()
	for b.Loop() {
		sinkU32 = crc32.ChecksumIEEE(ip)
	}
}

// typicalFrame is what the rxe traces carry most: an RC RDMA WRITE over
// RoCE v2/IPv4 with a 1024-byte payload (path MTU 1024).
func typicalFrame(tb testing.TB) []byte {
	return encode(tb, sampleFields(0x06, encaps[2], samplePayload(1024)))
}

func BenchmarkParseFrame(b *testing.B) {
	frame := typicalFrame(b)
	var p wire.Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		sinkErr = p.ParseFrame(frame, wire.RoCEv2Port)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkParseTransport is the engine's parse of a received packet,
// which it makes only when the link's parse no longer holds.
func BenchmarkParseTransport(b *testing.B) {
	frame := typicalFrame(b)
	var p wire.Packet
	if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
		b.Fatal(err)
	}
	tr := p.Transport()
	var q wire.Packet
	b.ReportAllocs()
	for b.Loop() {
		sinkErr = q.ParseTransport(tr, wire.RoCEv2)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkHolds is what the engine does instead when the link's parse
// (link.Packet.Parsed) still holds.
func BenchmarkHolds(b *testing.B) {
	frame := typicalFrame(b)
	var p wire.Packet
	if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
		b.Fatal(err)
	}
	tr := p.Transport()
	ok := true
	for b.Loop() {
		ok = ok && p.Holds(tr, wire.RoCEv2)
	}
	if !ok {
		b.Fatal("the frame's parse does not hold its transport packet")
	}
}

// BenchmarkParseFrameVerifyICRC is what a receiver does per packet.
func BenchmarkParseFrameVerifyICRC(b *testing.B) {
	frame := typicalFrame(b)
	var p wire.Packet
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
			b.Fatal(err)
		}
		sinkErr = p.VerifyICRC()
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

// BenchmarkAppendPacket encodes the typical packet into a reused buffer.
func BenchmarkAppendPacket(b *testing.B) {
	f := sampleFields(0x06, encaps[2], samplePayload(1024))
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(typicalFrame(b))))
	b.ReportAllocs()
	for b.Loop() {
		out, err := f.Append(buf[:0])
		sinkLen, sinkErr = len(out), err
	}
}

// TestParseAllocs pins ARCHITECTURE.md rule 2: decoding allocates nothing
// (ParseFrame, the accessors, ComputeICRC and a successful VerifyICRC).
func TestParseAllocs(t *testing.T) {
	frame := typicalFrame(t)
	var p wire.Packet
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
			t.Fatal(err)
		}
		sinkLen = len(p.Payload()) + len(p.RETH()) + len(p.AETH()) + int(p.BTH().PSN())
		sinkErr = p.VerifyICRC()
	})
	if allocs != 0 {
		t.Errorf("ParseFrame + accessors + VerifyICRC: %v allocations per packet, want 0", allocs)
	}
	f := sampleFields(0x06, encaps[2], samplePayload(1024))
	buf := make([]byte, 0, 2048)
	allocs = testing.AllocsPerRun(100, func() {
		out, err := f.Append(buf[:0])
		sinkLen, sinkErr = len(out), err
	})
	if allocs != 0 {
		t.Errorf("PacketFields.Append into a big enough buffer: %v allocations, want 0", allocs)
	}
}
