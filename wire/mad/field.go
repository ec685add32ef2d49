package mad

import (
	"encoding/hex"
	"fmt"
	"iter"
	"net/netip"
	"strconv"
	"time"
)

// Kind says how the bits of a [Field] are interpreted and printed.
//
//enum:string Kind(%d)
type Kind uint8

// Field kinds.
const (
	KindUint          Kind = iota // "uint": unsigned integer, printed in decimal
	KindHex                       // "hex": identifier (QPN, PSN, Q_Key, comm ID, GUID), printed in hex
	KindFlag                      // "flag": one bit
	KindReserved                  // "reserved": sent as zero, ignored on receipt
	KindBytes                     // "bytes": opaque bytes (private data, ARI), printed in hex
	KindGID                       // "gid": 16-byte GID, printed as an IPv6 address
	KindIPAddr                    // "ipaddr": IP CM address slot, printed as IPv4 or IPv6 address
	KindServiceID                 // "serviceid": 64-bit service ID, see [ServiceID]
	KindTimeout                   // "timeout": 5-bit exponent: 4.096 µs × 2^n
	KindMTU                       // "mtu": IBTA MTU code: 1=256 … 5=4096
	KindMgmtClass                 // "mgmtclass": [MgmtClass]
	KindMethod                    // "method": [Method]
	KindStatus                    // "status": [Status]
	KindAttributeID               // "attributeid": [AttributeID]
	KindMsgType                   // "msgtype": [MsgType]
	KindTransportType             // "transporttype": [TransportType]
	KindRejectReason              // "rejectreason": [RejectReason]
	KindSIDRStatus                // "sidrstatus": [SIDRStatus]
)

// IsBytes reports whether fields of this kind are byte strings ([Value.Bytes])
// rather than unsigned integers ([Value.Uint]).
func (k Kind) IsBytes() bool {
	return k == KindBytes || k == KindGID || k == KindIPAddr
}

// Field describes where one field of a structure sits on the wire. Fields of
// byte kinds ([Kind.IsBytes]) start on a byte boundary and are whole bytes;
// all others are unsigned integers of at most 64 bits.
type Field struct {
	Name   string // Go accessor name, e.g. "PrimaryFlowLabel"; a part of a split field adds a letter: "VendorIDH"
	Offset int    // byte offset of the field's first bit from the start of the structure
	Bit    int    // bit offset of the first bit within that byte, 0 = most significant
	Width  int    // width in bits
	Kind   Kind
}

// Reserved reports whether the field is reserved: senders write zero there and
// receivers ignore it (the IBTA convention for reserved fields).
func (f Field) Reserved() bool { return f.Kind == KindReserved }

// Max returns the largest value an integer field holds.
func (f Field) Max() uint64 { return mask(f.Width) }

func (f Field) String() string {
	return fmt.Sprintf("%s@%d[%d]:%d", f.Name, f.Offset, f.Bit, f.Width)
}

func mask(width int) uint64 {
	if width >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(width) - 1
}

// span is the number of bytes an integer field touches.
func (f *Field) span() int { return (f.Bit + f.Width + 7) / 8 }

// getUint reads an integer field from b, which must hold the whole structure.
func (f *Field) getUint(b []byte) uint64 {
	n := f.span()
	p := b[f.Offset : f.Offset+n]
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v >> uint(8*n-f.Bit-f.Width) & mask(f.Width)
}

// setUint writes the low Width bits of v into b, leaving neighbouring bits
// that share its bytes untouched.
func (f *Field) setUint(b []byte, v uint64) {
	n := f.span()
	p := b[f.Offset : f.Offset+n]
	shift := uint(8*n - f.Bit - f.Width)
	m := mask(f.Width) << shift
	var cur uint64
	for _, c := range p {
		cur = cur<<8 | uint64(c)
	}
	cur = cur&^m | v<<shift&m
	for i := n - 1; i >= 0; i-- {
		p[i] = byte(cur)
		cur >>= 8
	}
}

// IBTA splits a few fields into parts around others: the REP's VendorID is
// bytes 15, 19 and 23, the SIDR_REP's bytes 6–7 and 11. Each part is a layout
// entry named after the field with a suffix letter, as Linux names them
// (CM_REP_VENDOR_ID_H, _M, _L); joinUint and splitUint read and write the
// whole value given the parts' indices, most significant part first.

// joinUint reads the split field whose parts are layout[parts...] from b.
func joinUint(layout []Field, b []byte, parts ...int) uint64 {
	var v uint64
	for _, i := range parts {
		f := &layout[i]
		v = v<<uint(f.Width) | f.getUint(b)
	}
	return v
}

// splitUint writes v, truncated to the parts' total width, over the split
// field whose parts are layout[parts...].
func splitUint(layout []Field, b []byte, v uint64, parts ...int) {
	shift := 0
	for _, i := range parts {
		shift += layout[i].Width
	}
	for _, i := range parts {
		f := &layout[i]
		shift -= f.Width
		f.setUint(b, v>>uint(shift))
	}
}

// splitWidth returns the total width of the parts of a split field.
func splitWidth(layout []Field, parts ...int) int {
	w := 0
	for _, i := range parts {
		w += layout[i].Width
	}
	return w
}

// bytes returns the bytes of a byte-kind field, aliasing b.
func (f *Field) bytes(b []byte) []byte {
	end := f.Offset + f.Width/8
	return b[f.Offset:end:end]
}

// value decodes the field from b without allocating.
func (f *Field) value(b []byte) Value {
	if f.Kind.IsBytes() {
		return Value{kind: f.Kind, width: uint16(f.Width), b: f.bytes(b)}
	}
	return Value{kind: f.Kind, width: uint16(f.Width), u: f.getUint(b)}
}

// walk yields every field of layout decoded from b.
func walk(layout []Field, b []byte) iter.Seq2[Field, Value] {
	return func(yield func(Field, Value) bool) {
		for i := range layout {
			if !yield(layout[i], layout[i].value(b)) {
				return
			}
		}
	}
}

// Value is the decoded content of one [Field]. Values of byte kinds alias the
// message they were read from.
type Value struct {
	kind  Kind
	width uint16
	u     uint64
	b     []byte
}

// Kind returns the kind of the field the value was read from.
func (v Value) Kind() Kind { return v.kind }

// Uint returns the value of an integer field (0 for byte fields).
func (v Value) Uint() uint64 { return v.u }

// Bool reports whether an integer field is non-zero.
func (v Value) Bool() bool { return v.u != 0 }

// Bytes returns the bytes of a byte field (nil for integer fields). The slice
// aliases the message.
func (v Value) Bytes() []byte { return v.b }

// String formats the value the way a protocol analyser shows it: decimal for
// counts, hex for identifiers, names for enumerations, addresses for GIDs.
func (v Value) String() string {
	switch v.kind {
	case KindUint:
		return strconv.FormatUint(v.u, 10)
	case KindFlag:
		return strconv.FormatUint(v.u, 10)
	case KindHex, KindReserved:
		return v.hex()
	case KindBytes:
		return hex.EncodeToString(v.b)
	case KindGID, KindIPAddr:
		return v.addr().String()
	case KindServiceID:
		s := ServiceID(v.u)
		if s.IsIPCM() {
			return v.hex() + " (" + s.String() + ")"
		}
		return v.hex()
	case KindTimeout:
		return fmt.Sprintf("%d (%v)", v.u, timeout(v.u))
	case KindMTU:
		if n := mtuBytes(v.u); n != 0 {
			return fmt.Sprintf("%d (%d)", v.u, n)
		}
		return fmt.Sprintf("%d (invalid)", v.u)
	case KindMgmtClass:
		return v.hex() + " (" + MgmtClass(v.u).String() + ")"
	case KindMethod:
		return v.hex() + " (" + Method(v.u).String() + ")"
	case KindStatus:
		return v.hex() + " (" + Status(v.u).String() + ")"
	case KindAttributeID:
		return v.hex() + " (" + AttributeID(v.u).String() + ")"
	case KindMsgType:
		return fmt.Sprintf("%d (%v)", v.u, MsgType(v.u))
	case KindTransportType:
		return fmt.Sprintf("%d (%v)", v.u, TransportType(v.u))
	case KindRejectReason:
		return fmt.Sprintf("%d (%v)", v.u, RejectReason(v.u))
	case KindSIDRStatus:
		return fmt.Sprintf("%d (%v)", v.u, SIDRStatus(v.u))
	}
	return v.hex()
}

// MarshalJSON encodes integer fields up to 53 bits wide as JSON numbers, wider
// ones (GUIDs, service IDs, transaction IDs) as "0x…" strings, GIDs and
// addresses as address strings and other byte fields as hex strings.
func (v Value) MarshalJSON() ([]byte, error) {
	switch {
	case v.kind == KindGID || v.kind == KindIPAddr:
		return strconv.AppendQuote(nil, v.addr().String()), nil
	case v.kind.IsBytes():
		return strconv.AppendQuote(nil, hex.EncodeToString(v.b)), nil
	case v.width > 53:
		return strconv.AppendQuote(nil, v.hex()), nil
	}
	return strconv.AppendUint(nil, v.u, 10), nil
}

func (v Value) hex() string {
	digits := (int(v.width) + 3) / 4
	return fmt.Sprintf("0x%0*x", digits, v.u)
}

// addr converts a 16-byte GID or a 4- or 16-byte IP CM address slot.
func (v Value) addr() netip.Addr {
	switch len(v.b) {
	case 4:
		return netip.AddrFrom4([4]byte(v.b))
	case 16:
		return netip.AddrFrom16([16]byte(v.b))
	}
	return netip.Addr{}
}

// timeout converts an IBTA 5-bit timeout exponent to a duration: 4.096 µs ×
// 2^n, as the CM response, local ACK and target ACK delay fields are defined
// (§12.6.5, §12.6.8).
// n comes from a 5-bit field, so the result is at most 2.4 hours.
func timeout(n uint64) time.Duration {
	return 4096 * time.Nanosecond << (n & 31)
}

// mtuBytes converts an IBTA MTU code (1 = 256 … 5 = 4096, the encoding of
// PortInfo and PathRecord that the REQ's Path Packet Payload MTU reuses) to
// bytes, 0 if the code is invalid.
func mtuBytes(code uint64) int {
	if code >= 1 && code <= 5 {
		return 128 << code
	}
	return 0
}

// RangeError reports a value too wide for the field it is encoded into. It
// unwraps to [ErrFieldRange].
type RangeError struct {
	Struct string // "REQ", "HeaderFields", …
	Field  string
	Value  uint64
	Max    uint64
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("mad: %s.%s = %#x out of range [0, %#x]", e.Struct, e.Field, e.Value, e.Max)
}

func (e *RangeError) Unwrap() error { return ErrFieldRange }

// encoder writes a structure field by field through its layout, remembering
// the first value that does not fit. Values are truncated to the field width
// either way, so Append and Validate share one code path. It holds no
// pointers besides the buffer and the layout so that encoding into a caller's
// buffer (or Validate's stack buffer) does not move it to the heap.
type encoder struct {
	b        []byte
	layout   []Field
	bad      int // index+1 of the first field given a value too wide; 0 if none
	badVal   uint64
	badSplit int // when bad is the first part of a split field: its total width
}

// newEncoder appends n zero bytes to b and returns an encoder over them and
// the extended slice.
func newEncoder(b []byte, n int, layout []Field) (encoder, []byte) {
	start := len(b)
	b = append(b, make([]byte, n)...)
	return encoder{b: b[start:], layout: layout}, b
}

func (e *encoder) uint(i int, v uint64) {
	f := &e.layout[i]
	if v > mask(f.Width) && e.bad == 0 {
		e.bad, e.badVal = i+1, v
	}
	f.setUint(e.b, v)
}

// err returns the [*RangeError] for the first value too wide, nil if none.
// layout is passed again, rather than read from e, so that the error does not
// make escape analysis think e.b leaks.
func (e *encoder) err(structName string, layout []Field) error {
	if e.bad == 0 {
		return nil
	}
	f := &layout[e.bad-1]
	if e.badSplit != 0 { // the parts are named after the field plus one letter
		return &RangeError{Struct: structName, Field: f.Name[:len(f.Name)-1], Value: e.badVal, Max: mask(e.badSplit)}
	}
	return &RangeError{Struct: structName, Field: f.Name, Value: e.badVal, Max: mask(f.Width)}
}

// split writes v over the parts of a split field (see joinUint), most
// significant part first. A value too wide is reported under the field's
// own name.
func (e *encoder) split(v uint64, parts ...int) {
	if w := splitWidth(e.layout, parts...); v > mask(w) && e.bad == 0 {
		e.bad, e.badVal, e.badSplit = parts[0]+1, v, w
	}
	splitUint(e.layout, e.b, v, parts...)
}

func (e *encoder) flag(i int, v bool) {
	if v {
		e.uint(i, 1)
	}
}

func (e *encoder) bytes(i int, p []byte) {
	copy(e.layout[i].bytes(e.b), p)
}

func b2u(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
