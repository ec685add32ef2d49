package wire_test

// Every truncated prefix of a valid header or packet must be refused with
// an error, never a panic and never success (ARCHITECTURE.md rule 13).

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goroce/goroce/wire"
)

// noPanic runs fn and reports a panic as a test error.
func noPanic(t *testing.T, what string, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: panic: %v", what, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// checkPrefixes parses every strict prefix of full, and full itself, with
// parse. Every prefix must fail with a *wire.ParseError; full must parse.
func checkPrefixes(t *testing.T, full []byte, parse func([]byte) error) {
	t.Helper()
	if err := noPanic(t, "whole", func() error { return parse(full) }); err != nil {
		t.Fatalf("the whole %d bytes do not parse: %v", len(full), err)
	}
	for n := range len(full) {
		// A fresh copy of exactly n bytes, so a read past the end faults
		// instead of reading the rest of full's backing array.
		prefix := append([]byte(nil), full[:n]...)
		err := noPanic(t, fmt.Sprintf("prefix %d", n), func() error { return parse(prefix) })
		var pe *wire.ParseError
		switch {
		case err == nil:
			t.Errorf("a %d-byte prefix of %d parsed", n, len(full))
		case !errors.As(err, &pe):
			t.Errorf("a %d-byte prefix: error %v (%T), want a *wire.ParseError", n, err, err)
		}
	}
}

func TestTruncatedHeaders(t *testing.T) {
	ipv4 := encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(5)))[wire.EthernetLen:]
	ipv4opts := func() []byte {
		f := sampleFields(wire.OpcodeRCSendOnly, encaps[2], samplePayload(5))
		f.Eth = nil
		f.IPv4.Options = []byte{0x94, 4, 0, 0} // Router Alert
		return encode(t, f)
	}()
	ipv6 := encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[4], samplePayload(5)))[wire.EthernetLen:]
	grh := encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[0], samplePayload(5)))[wire.EthernetLen:]
	for _, tc := range []struct {
		name  string
		full  []byte
		parse func([]byte) error
	}{
		{"BTH", make([]byte, wire.BTHLen), func(b []byte) error { _, err := wire.ParseBTH(b); return err }},
		{"RETH", make([]byte, wire.RETHLen), func(b []byte) error { _, err := wire.ParseRETH(b); return err }},
		{"AETH", make([]byte, wire.AETHLen), func(b []byte) error { _, err := wire.ParseAETH(b); return err }},
		{"AtomicETH", make([]byte, wire.AtomicETHLen), func(b []byte) error { _, err := wire.ParseAtomicETH(b); return err }},
		{"AtomicAckETH", make([]byte, wire.AtomicAckETHLen), func(b []byte) error { _, err := wire.ParseAtomicAckETH(b); return err }},
		{"DETH", make([]byte, wire.DETHLen), func(b []byte) error { _, err := wire.ParseDETH(b); return err }},
		{"FETH", make([]byte, wire.FETHLen), func(b []byte) error { _, err := wire.ParseFETH(b); return err }},
		{"RDETH", make([]byte, wire.RDETHLen), func(b []byte) error { _, err := wire.ParseWord24("RDETH", b); return err }},
		{"XRCETH", make([]byte, wire.XRCETHLen), func(b []byte) error { _, err := wire.ParseWord24("XRCETH", b); return err }},
		{"ImmDt", make([]byte, wire.ImmDtLen), func(b []byte) error { _, err := wire.ParseWord32("ImmDt", b); return err }},
		{"IETH", make([]byte, wire.IETHLen), func(b []byte) error { _, err := wire.ParseWord32("IETH", b); return err }},
		{"Ethernet", encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[2], nil))[:wire.EthernetLen],
			func(b []byte) error { _, err := wire.ParseEthernet(b); return err }},
		{"Ethernet+802.1Q", encode(t, sampleFields(wire.OpcodeRCSendOnly, encaps[3], nil))[:wire.EthernetLen+wire.VLANTagLen],
			func(b []byte) error {
				h, err := wire.ParseEthernet(b)
				if err == nil && !h.HasVLAN() {
					return errors.New("the tag was lost")
				}
				return err
			}},
		// The IP and UDP parsers check their length fields against the
		// bytes, so every prefix of the whole datagram must fail.
		{"IPv4", ipv4, func(b []byte) error { _, err := wire.ParseIPv4(b); return err }},
		{"IPv4 with options", ipv4opts, func(b []byte) error { _, err := wire.ParseIPv4(b); return err }},
		{"IPv6", ipv6, func(b []byte) error { _, err := wire.ParseIPv6(b); return err }},
		{"GRH", grh, func(b []byte) error { _, err := wire.ParseGRH(b); return err }},
		{"UDP", ipv4[wire.IPv4MinLen:], func(b []byte) error { _, err := wire.ParseUDP(b); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) { checkPrefixes(t, tc.full, tc.parse) })
	}
}

// TestTruncatedFrames cuts every frame of every opcode in every
// encapsulation (RoCE v1, v2/IPv4, v2/IPv6, each with and without an
// 802.1Q tag) at every length. The IP total length, IPv6 payload length
// or GRH payload length says where the packet ends, so no prefix may parse.
func TestTruncatedFrames(t *testing.T) {
	n := 0
	for _, s := range samples(t, encaps) {
		t.Run(s.name, func(t *testing.T) {
			checkPrefixes(t, s.frame, func(b []byte) error {
				var p wire.Packet
				return p.ParseFrame(b, wire.RoCEv2Port)
			})
			if s.encap.version == wire.RoCEv2 {
				checkPrefixes(t, s.frame[networkOffset(s.encap):], func(b []byte) error {
					var p wire.Packet
					return p.ParseIP(b, wire.RoCEv2Port)
				})
			}
		})
		n++
	}
	if n != 6*len(validOpcodes()) {
		t.Errorf("%d frames", n)
	}
}

// TestTruncatedTransport cuts the transport packet (as a UDP socket would
// deliver it: BTH to ICRC). A datagram has no length field of its own, so
// a prefix that still holds the opcode's headers, the pad and an ICRC
// parses as a shorter packet; every shorter prefix must fail, and so must
// every strict prefix of an opcode whose payload length is fixed.
func TestTruncatedTransport(t *testing.T) {
	for _, op := range validOpcodes() {
		t.Run(op.String(), func(t *testing.T) {
			info := op.Info()
			payload := defaultPayload(op)
			frame := encode(t, sampleFields(op, encaps[2], payload))
			tr := parseFrame(t, frame).Transport()
			pad := (4 - len(payload)%4) % 4
			min := info.HeaderLen + pad + wire.ICRCLen
			if info.FixedPayload >= 0 {
				min = len(tr)
			}
			for n := 0; n <= len(tr); n++ {
				b := append([]byte(nil), tr[:n]...)
				var p wire.Packet
				err := noPanic(t, fmt.Sprintf("prefix %d", n), func() error { return p.ParseTransport(b, wire.RoCEv2) })
				switch {
				case n < min && err == nil:
					t.Errorf("a %d-byte prefix of %d parsed", n, len(tr))
				case n < min:
					var pe *wire.ParseError
					if !errors.As(err, &pe) {
						t.Errorf("a %d-byte prefix: %v, want a *wire.ParseError", n, err)
					}
				case err != nil:
					t.Errorf("%d bytes: %v", n, err)
				case len(p.Transport()) != n || len(p.Payload()) != n-info.HeaderLen-pad-wire.ICRCLen:
					t.Errorf("%d bytes: transport %d, payload %d", n, len(p.Transport()), len(p.Payload()))
				}
			}
		})
	}
}
