package wire_test

// Fuzz targets (ARCHITECTURE.md rule 13), seeded from the encoder's output
// for every opcode and encapsulation and from every frame of the lab's real
// rxe captures. Run one with
//
//	go test -run='^$' -fuzz='^FuzzParseFrame$' -fuzztime=5m ./wire/
//
// Without -fuzz, `go test` runs the seeds as ordinary tests.

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// traceFrames returns the frames of ../shared/traces/*.pcap (at most
// perFile from each), or none when the traces are absent: the fuzz seed
// corpus must not fail for want of them (TestGoldenTraces is what insists
// on them in CI).
func traceFrames(tb testing.TB, perFile int) [][]byte {
	tb.Helper()
	pattern := filepath.Join(filepath.Dir(testenv.RepoRoot(tb)), "shared", "traces", "*.pcap")
	paths, _ := filepath.Glob(pattern)
	var out [][]byte
	for _, path := range paths {
		n := 0
		err := pcap.ReadFile(path, func(f pcap.Frame) error {
			if n < perFile {
				out = append(out, bytes.Clone(f.Data))
				n++
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
	}
	if len(paths) == 0 {
		tb.Logf("no traces at %s: seeding from the encoder only", pattern)
	}
	return out
}

// encoderSeeds returns encoded frames of every opcode in every
// encapsulation, plus variants the samples lack: every pad count, a
// trailer, IPv4 options, a big payload, a non-canonical packet.
func encoderSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, s := range samples(tb, encaps) {
		out = append(out, s.frame)
	}
	for _, e := range encapsNoVLAN {
		for n := range 4 {
			out = append(out, encode(tb, sampleFields(wire.OpcodeRCSendOnly, e, samplePayload(n))))
		}
		f := sampleFields(wire.OpcodeRCAcknowledge, e, nil)
		f.Trailer = make([]byte, 6)
		out = append(out, encode(tb, f))
		out = append(out, encode(tb, sampleFields(0x0A, e, samplePayload(4096))))
	}
	f := sampleFields(wire.OpcodeUDSendOnly, encaps[2], samplePayload(256))
	f.IPv4.Options = []byte{0x94, 4, 0, 0}
	out = append(out, encode(tb, f))
	// Non-canonical: a bad ICRC, non-zero pad bytes, a reserved RDETH byte.
	bad := encode(tb, sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(5)))
	bad[len(bad)-1] ^= 1
	out = append(out, bad)
	pad := encode(tb, sampleFields(wire.OpcodeRCSendOnly, encaps[4], samplePayload(5)))
	pad[len(pad)-5] = 0xAA
	out = append(out, pad)
	rd := encode(tb, sampleFields(0x44, encaps[0], samplePayload(8)))
	rd[wire.EthernetLen+wire.GRHLen+wire.BTHLen] = 0x5A
	out = append(out, rd)
	return out
}

// canonical reports whether p's bytes are the ones PacketFields.Append
// writes for p.Fields(), and if not, why. Append computes the lengths,
// IPv4 checksum, pad count, pad bytes and ICRC, and writes the reserved
// byte of RDETH and XRCETH as zero (ExtFields keeps only their 24-bit
// value); ParseFrame already insists on consistent lengths, so these are
// the only ways a parsed packet can differ from its re-encoding.
func canonical(p *wire.Packet) (bool, string) {
	if err := p.VerifyICRC(); err != nil {
		return false, err.Error()
	}
	if ip := p.IPv4(); ip != nil && ip.Checksum() != ip.ComputeChecksum() {
		return false, "IPv4 header checksum"
	}
	if pc := p.BTH().PadCount(); pc != (4-len(p.Payload())%4)%4 {
		return false, fmt.Sprintf("pad count %d for a %d-byte payload", pc, len(p.Payload()))
	}
	if !allZero(p.Pad()) {
		return false, "non-zero pad bytes"
	}
	if h := p.RDETH(); h != nil && h.Reserved() != 0 {
		return false, "RDETH reserved byte"
	}
	if h := p.XRCETH(); h != nil && h.Reserved() != 0 {
		return false, "XRCETH reserved byte"
	}
	return true, ""
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// exercise calls every accessor of every header p has and checks the
// lengths add up; it is what a user of a parsed packet may do.
func exercise(t *testing.T, p *wire.Packet) {
	t.Helper()
	info := p.Info
	if info == nil || !info.Valid() || p.Opcode().Info() != info || p.BTH().Opcode() != p.Opcode() {
		t.Fatalf("parsed packet has no valid opcode row")
	}
	_ = p.BTH().Fields()
	_ = p.BTH().PSN().String()
	_ = p.Opcode().String()
	for h := wire.Header(0); h.Size() > 0; h++ {
		if b := p.Header(h); (b != nil) != info.Has(h) || (b != nil && len(b) != h.Size()) {
			t.Fatalf("Header(%v) = %x with the opcode's mask %b", h, b, info.Headers)
		}
	}
	if h := p.RDETH(); h != nil {
		_ = h.Value() + uint32(h.Reserved())
	}
	if h := p.DETH(); h != nil {
		_ = h.Fields()
	}
	if h := p.XRCETH(); h != nil {
		_ = h.Value()
	}
	if h := p.FETH(); h != nil {
		_, _, _ = h.Word(), h.Selectivity(), h.PlacementType()
	}
	if h := p.RETH(); h != nil {
		_ = h.Fields()
	}
	if h := p.AtomicETH(); h != nil {
		_ = h.Fields()
	}
	if h := p.AETH(); h != nil {
		s := h.Syndrome()
		_, _, _ = s.String(), h.MSN(), wire.RNRTimer(s.Value())
		_ = wire.ACKCredits(s.Value())
	}
	if h := p.AtomicAckETH(); h != nil {
		_ = h.OrigData()
	}
	if h := p.ImmDt(); h != nil {
		_ = h.Value()
	}
	if h := p.IETH(); h != nil {
		_ = h.Value()
	}
	tr := p.Transport()
	if len(tr) != info.HeaderLen+len(p.Payload())+len(p.Pad())+wire.ICRCLen {
		t.Fatalf("transport %d bytes = headers %d + payload %d + pad %d + ICRC?", len(tr), info.HeaderLen, len(p.Payload()), len(p.Pad()))
	}
	if n := info.FixedPayload; n >= 0 && len(p.Payload()) != n {
		t.Fatalf("%v with a %d-byte payload", p.Opcode(), len(p.Payload()))
	}
	_ = p.ICRC()
	_ = p.Trailer()
}

// exerciseNetwork calls the accessors of the layers below the BTH.
func exerciseNetwork(t *testing.T, p *wire.Packet) {
	t.Helper()
	if e := p.Ethernet(); e != nil {
		_ = e.Fields()
		_, _ = e.Dst().String(), e.Src().String()
	}
	n := 0
	if ip := p.IPv4(); ip != nil {
		_, _, _ = ip.Fields(), ip.ComputeChecksum(), ip.DSCP()
		n++
	}
	if ip := p.IPv6(); ip != nil {
		_ = ip.Fields()
		n++
	}
	if g := p.GRH(); g != nil {
		_ = g.Fields()
		n++
	}
	if n != 1 || p.Network() == nil {
		t.Fatalf("%d network headers", n)
	}
	if (p.UDP() != nil) != (p.Version == wire.RoCEv2) {
		t.Fatalf("UDP header %x on %v", []byte(p.UDP()), p.Version)
	}
	if u := p.UDP(); u != nil {
		_ = u.Fields()
	}
}

// FuzzParseFrame checks, for any bytes:
//   - ParseFrame never panics, and fails with ErrNotRoCE or a *ParseError;
//   - when it succeeds, every accessor of every present header works and the
//     lengths add up; ComputeICRC works;
//   - Fields().Append always succeeds, and reproduces the input byte for
//     byte if and only if the input is canonical (see canonical: the ICRC
//     verifies, the IPv4 checksum is right, the pad count fits the payload,
//     the pad bytes and the RDETH/XRCETH reserved bytes are zero);
//   - the re-encoding parses to the same packet, is canonical, and
//     re-encodes to itself;
//   - ParseIP of the IP packet (RoCE v2) and ParseTransport of the transport
//     packet agree with ParseFrame; ParseTransport of the raw input never
//     panics.
func FuzzParseFrame(f *testing.F) {
	for _, b := range encoderSeeds(f) {
		f.Add(b)
	}
	for _, b := range traceFrames(f, 200) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var q wire.Packet
		_ = q.ParseTransport(data, wire.RoCEv2) // must not panic
		var p wire.Packet
		err := p.ParseFrame(data, wire.RoCEv2Port)
		if err != nil {
			var pe *wire.ParseError
			if !errors.Is(err, wire.ErrNotRoCE) && !errors.As(err, &pe) {
				t.Fatalf("error %v (%T): want ErrNotRoCE or a *ParseError", err, err)
			}
			return
		}
		exercise(t, &p)
		exerciseNetwork(t, &p)
		if _, err := p.ComputeICRC(); err != nil {
			t.Fatalf("ComputeICRC: %v", err)
		}
		isCanon, why := canonical(&p)

		fields := p.Fields()
		out, err := fields.Append(nil)
		if err != nil {
			t.Fatalf("Fields().Append: %v", err)
		}
		if same := bytes.Equal(out, data); same != isCanon {
			t.Fatalf("re-encoding equal to the input: %v; input canonical: %v (%s)\n in %x\nout %x", same, isCanon, why, data, out)
		}
		var r wire.Packet
		if err := r.ParseFrame(out, wire.RoCEv2Port); err != nil {
			t.Fatalf("the re-encoding does not parse: %v\n%x", err, out)
		}
		if ok, why := canonical(&r); !ok {
			t.Fatalf("the re-encoding is not canonical: %s", why)
		}
		if r.Opcode() != p.Opcode() || r.Version != p.Version || r.IPVersion() != p.IPVersion() ||
			!bytes.Equal(r.Payload(), p.Payload()) || !bytes.Equal(r.Trailer(), p.Trailer()) ||
			r.BTH().PSN() != p.BTH().PSN() || r.BTH().DestQP() != p.BTH().DestQP() {
			t.Fatalf("the re-encoding parses to another packet")
		}
		for h := wire.Header(0); h.Size() > 0; h++ {
			a, b := p.Header(h), r.Header(h)
			if a != nil && (h == wire.HdrRDETH || h == wire.HdrXRCETH) {
				a, b = a[1:], b[1:] // the reserved byte is not kept
			}
			if !bytes.Equal(a, b) {
				t.Fatalf("%v: %x re-encoded as %x", h, a, b)
			}
		}
		rf := r.Fields()
		if again, err := rf.Append(nil); err != nil || !bytes.Equal(again, out) {
			t.Fatalf("re-encoding is not a fixed point: %v", err)
		}

		if p.Version == wire.RoCEv2 {
			nh := len(p.Ethernet())
			if err := q.ParseIP(data[nh:], wire.RoCEv2Port); err != nil {
				t.Fatalf("ParseIP of the IP packet: %v", err)
			}
			if q.Opcode() != p.Opcode() || !bytes.Equal(q.Transport(), p.Transport()) || (q.VerifyICRC() == nil) != (p.VerifyICRC() == nil) {
				t.Fatal("ParseIP disagrees with ParseFrame")
			}
		}
		if err := q.ParseTransport(p.Transport(), p.Version); err != nil {
			t.Fatalf("ParseTransport of the transport packet: %v", err)
		}
		if q.Opcode() != p.Opcode() || !bytes.Equal(q.Payload(), p.Payload()) || q.ICRC() != p.ICRC() {
			t.Fatal("ParseTransport disagrees with ParseFrame")
		}
		if !p.Holds(p.Transport(), p.Version) || p.Holds(bytes.Clone(p.Transport()), p.Version) {
			t.Fatal("a frame's parse does not hold its transport packet, or holds a copy")
		}
	})
}

// FuzzParseTransport checks ParseTransport (the BTH-to-ICRC datagram a UDP
// socket delivers) for any bytes: no panic; on success every accessor
// works, ComputeICRC fails cleanly (no network header), and AppendTransport
// of the parsed fields reproduces the input less its ICRC if and only if
// the pad count fits the payload and the pad and reserved bytes are zero.
func FuzzParseTransport(f *testing.F) {
	for _, b := range encoderSeeds(f) {
		var p wire.Packet
		if p.ParseFrame(b, wire.RoCEv2Port) == nil {
			f.Add(bytes.Clone(p.Transport()), p.Version == wire.RoCEv1)
		}
	}
	for _, b := range traceFrames(f, 50) {
		var p wire.Packet
		if p.ParseFrame(b, wire.RoCEv2Port) == nil {
			f.Add(bytes.Clone(p.Transport()), false)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, v1 bool) {
		v := wire.RoCEv2
		if v1 {
			v = wire.RoCEv1
		}
		var p wire.Packet
		err := p.ParseTransport(data, v)
		if err != nil {
			var pe *wire.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T): want a *ParseError", err, err)
			}
			return
		}
		exercise(t, &p)
		checkHolds(t, &p, data, v)
		if !bytes.Equal(p.Transport(), data) || len(p.Trailer()) != 0 || p.Version != v {
			t.Fatal("the transport packet is not the input")
		}
		if p.Ethernet() != nil || p.Network() != nil || p.UDP() != nil || p.IPv4() != nil || p.IPv6() != nil || p.GRH() != nil {
			t.Fatal("network headers from a transport packet")
		}
		if _, err := p.ComputeICRC(); err == nil {
			t.Fatal("ComputeICRC without a network header succeeded")
		}
		if err := p.VerifyICRC(); err == nil {
			t.Fatal("VerifyICRC without a network header succeeded")
		}
		canon := p.BTH().PadCount() == (4-len(p.Payload())%4)%4 && allZero(p.Pad()) &&
			(p.RDETH() == nil || p.RDETH().Reserved() == 0) && (p.XRCETH() == nil || p.XRCETH().Reserved() == 0)
		fields := p.Fields()
		out := fields.AppendTransport(nil)
		if same := bytes.Equal(out, data[:len(data)-wire.ICRCLen]); same != canon {
			t.Fatalf("AppendTransport equal to the input: %v; canonical: %v\n in %x\nout %x", same, canon, data, out)
		}
		var r wire.Packet
		if err := r.ParseTransport(append(out, 0, 0, 0, 0), v); err != nil {
			t.Fatalf("AppendTransport's output does not parse: %v", err)
		}
		if r.Opcode() != p.Opcode() || !bytes.Equal(r.Payload(), p.Payload()) {
			t.Fatal("AppendTransport's output parses to another packet")
		}
		// The full encoder refuses the fields: they have no network header.
		if _, err := fields.Append(nil); err == nil {
			t.Fatal("Append without a network header succeeded")
		}
	})
}

// checkHolds checks Holds for p, a parse of data: it holds data, not a
// copy nor another version; and whenever it still holds data after a byte
// of the BTH or of the length changed, parsing data again finds what p
// says (so the engine may use a link's parse instead of parsing again).
func checkHolds(t *testing.T, p *wire.Packet, data []byte, v wire.Version) {
	t.Helper()
	if !p.Holds(data, v) {
		t.Fatal("a parse does not hold what it parsed")
	}
	if p.Holds(bytes.Clone(data), v) || p.Holds(data, v^3) || p.Holds(data[:len(data)-1], v) {
		t.Fatal("a parse holds a copy, another version or a shorter packet")
	}
	for i := range min(len(data), wire.BTHLen) {
		for _, x := range []byte{0x01, 0x02, 0x10, 0x30, 0x80, 0xFF} {
			data[i] ^= x
			if p.Holds(data, v) {
				var r wire.Packet
				if err := r.ParseTransport(data, v); err != nil || r.Info != p.Info || !bytes.Equal(r.Payload(), p.Payload()) ||
					!bytes.Equal(r.Pad(), p.Pad()) || r.Opcode() != p.Opcode() {
					t.Fatalf("byte %d ^ %#x: Holds, but parsing again gives %v, %v", i, x, err, r.Info)
				}
			}
			data[i] ^= x
		}
	}
}

// TestHolds names the cases Holds tells apart.
func TestHolds(t *testing.T) {
	f := sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(5))
	frame := encode(t, f)
	var p wire.Packet
	if err := p.ParseFrame(frame, wire.RoCEv2Port); err != nil {
		t.Fatal(err)
	}
	tr := p.Transport()
	if !p.Holds(tr, wire.RoCEv2) {
		t.Fatal("a frame's parse does not hold its transport packet")
	}
	for _, tc := range []struct {
		name   string
		change func()
	}{
		{"opcode", func() { tr[0] = byte(wire.TransportRC | wire.OpSendFirst) }},
		{"pad count", func() { tr[1] ^= 0x30 }},
		{"transport version", func() { tr[1] ^= 0x01 }},
	} {
		old := tr[1]
		old0 := tr[0]
		tc.change()
		if p.Holds(tr, wire.RoCEv2) {
			t.Errorf("%s changed: still holds", tc.name)
		}
		tr[0], tr[1] = old0, old
	}
	var zero, failed wire.Packet
	if zero.Holds(tr, wire.RoCEv2) {
		t.Error("the zero Packet holds a packet")
	}
	if failed.ParseTransport(tr[:wire.BTHLen], wire.RoCEv2) == nil || failed.Holds(tr[:wire.BTHLen], wire.RoCEv2) {
		t.Error("a failed parse holds its input")
	}
	if p.Holds(nil, wire.RoCEv2) || p.Holds(tr[1:], wire.RoCEv2) || p.Holds(bytes.Clone(tr), wire.RoCEv2) || p.Holds(tr, wire.RoCEv1) {
		t.Error("holds another slice or version")
	}
}
