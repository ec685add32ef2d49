package dissect

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Node is one entry of a dissection tree: a protocol layer (Children, no
// Value), a field (Value), or a field with sub-fields (both).
type Node struct {
	Name     string // shown by `roce decode -V`, e.g. "Destination QP"
	Key      string // JSON key, e.g. "dest_qp"; unique among its siblings
	Value    Value
	Children []Node
}

// valueKind says how a Value prints.
type valueKind uint8

const (
	kindNone  valueKind = iota // a layer: children only
	kindUint                   // decimal
	kindHex                    // 0x + zero-padded hex digits for the field's width
	kindBool                   // True / False
	kindText                   // a string (addresses, names)
	kindBytes                  // hex bytes
	kindMAD                    // a field of wire/mad, printed by its own String and MarshalJSON
)

// Value is the value of one field. Integers keep the field's width in bits:
// it decides the number of hex digits shown and, in JSON, whether the value
// is a number (at most 53 bits, exact in every JSON reader) or a "0x…"
// string (wider: virtual addresses, GUIDs, service IDs). Meaning, when set,
// is the symbolic name of the value ("RC_SEND_ONLY", "correct").
type Value struct {
	kind    valueKind
	bits    int
	u       uint64
	s       string
	b       []byte
	mad     madValue
	Meaning string
}

// Uint is an integer shown in decimal.
func Uint(v uint64, bits int) Value { return Value{kind: kindUint, bits: bits, u: v} }

// Hex is an integer shown in hex (identifiers: QPNs, keys, addresses).
func Hex(v uint64, bits int) Value { return Value{kind: kindHex, bits: bits, u: v} }

// Bool is a one-bit flag.
func Bool(v bool) Value {
	var u uint64
	if v {
		u = 1
	}
	return Value{kind: kindBool, bits: 1, u: u}
}

// Text is a string value, such as an address.
func Text(s string) Value { return Value{kind: kindText, s: s} }

// Bytes is an opaque byte string, shown in hex. It aliases b.
func Bytes(b []byte) Value { return Value{kind: kindBytes, b: b} }

// Named returns v with its symbolic meaning set.
func (v Value) Named(meaning string) Value { v.Meaning = meaning; return v }

// maxTextBytes bounds the bytes -V prints of a byte string; JSON carries all.
const maxTextBytes = 32

// AppendText appends v as `roce decode -V` shows it.
func (v Value) AppendText(b []byte) []byte {
	switch v.kind {
	case kindNone:
		return b
	case kindUint:
		b = strconv.AppendUint(b, v.u, 10)
	case kindHex:
		b = appendHex(b, v.u, v.bits)
	case kindBool:
		if v.u != 0 {
			b = append(b, "True"...)
		} else {
			b = append(b, "False"...)
		}
	case kindText:
		b = append(b, v.s...)
	case kindBytes:
		switch {
		case len(v.b) == 0:
			b = append(b, "(none)"...)
		case len(v.b) > maxTextBytes:
			b = hex.AppendEncode(b, v.b[:maxTextBytes])
			b = append(b, "… ("...)
			b = strconv.AppendInt(b, int64(len(v.b)), 10)
			b = append(b, " bytes)"...)
		default:
			b = hex.AppendEncode(b, v.b)
		}
	case kindMAD:
		return v.mad.appendText(b)
	}
	if v.Meaning != "" {
		b = append(b, " ("...)
		b = append(b, v.Meaning...)
		b = append(b, ')')
	}
	return b
}

// String returns v as -V shows it.
func (v Value) String() string { return string(v.AppendText(nil)) }

// appendJSON appends v as a JSON value.
func (v Value) appendJSON(b []byte) []byte {
	switch v.kind {
	case kindUint, kindHex:
		if v.bits > 53 {
			return appendJSONString(b, string(appendHex(nil, v.u, v.bits)))
		}
		return strconv.AppendUint(b, v.u, 10)
	case kindBool:
		return strconv.AppendBool(b, v.u != 0)
	case kindText:
		return appendJSONString(b, v.s)
	case kindBytes:
		b = append(b, '"')
		b = hex.AppendEncode(b, v.b)
		return append(b, '"')
	case kindMAD:
		return v.mad.appendJSON(b)
	}
	return append(b, "null"...)
}

func appendHex(b []byte, v uint64, bits int) []byte {
	digits := max((bits+3)/4, 1)
	b = append(b, "0x"...)
	s := strconv.FormatUint(v, 16)
	for i := len(s); i < digits; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// AppendTree appends the tree of nodes as `roce decode -V` prints it: one
// "Name: value" line per node, children indented by four spaces.
func AppendTree(b []byte, nodes []Node, depth int) []byte {
	for i := range nodes {
		n := &nodes[i]
		for range depth {
			b = append(b, "    "...)
		}
		b = append(b, n.Name...)
		if n.Value.kind != kindNone {
			b = append(b, ": "...)
			b = n.Value.AppendText(b)
		}
		b = append(b, '\n')
		b = AppendTree(b, n.Children, depth+1)
	}
	return b
}

// appendJSONMembers appends nodes as the members of a JSON object (without
// braces). A leaf is "key": value, plus "key_name": meaning when the value
// has one; a node with children is an object whose own value, if any, is
// its member "value" (and "name").
func appendJSONMembers(b []byte, nodes []Node, first bool) []byte {
	for i := range nodes {
		n := &nodes[i]
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, n.Key)
		b = append(b, ':')
		if len(n.Children) == 0 {
			b = n.Value.appendJSON(b)
			if n.Value.Meaning != "" {
				b = append(b, ',')
				b = appendJSONString(b, n.Key+"_name")
				b = append(b, ':')
				b = appendJSONString(b, n.Value.Meaning)
			}
			continue
		}
		b = append(b, '{')
		inner := true
		if n.Value.kind != kindNone {
			b = append(b, `"value":`...)
			b = n.Value.appendJSON(b)
			if n.Value.Meaning != "" {
				b = append(b, `,"name":`...)
				b = appendJSONString(b, n.Value.Meaning)
			}
			inner = false
		}
		b = appendJSONMembers(b, n.Children, inner)
		b = append(b, '}')
	}
	return b
}

// appendJSONString appends s as a JSON string (RFC 8259), replacing invalid
// UTF-8 with U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&15])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// keyOf turns a display or Go name into a JSON key: "Destination QP" and
// "DestQP" both become snake case ("destination_qp", "dest_qp").
func keyOf(name string) string {
	var sb strings.Builder
	prevLower := false
	for i, r := range name {
		switch {
		case r >= 'A' && r <= 'Z':
			// A new word starts at an upper-case letter after a lower-case
			// one or a digit, or before a lower-case letter in a run of
			// capitals ("QPNumber" → "qp_number").
			next := byte(0)
			if i+1 < len(name) {
				next = name[i+1]
			}
			if sb.Len() > 0 && (prevLower || (next >= 'a' && next <= 'z')) && !strings.HasSuffix(sb.String(), "_") {
				sb.WriteByte('_')
			}
			sb.WriteRune(r + ('a' - 'A'))
			prevLower = false
		case r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			sb.WriteRune(r)
			prevLower = true
		default:
			if sb.Len() > 0 && !strings.HasSuffix(sb.String(), "_") {
				sb.WriteByte('_')
			}
			prevLower = false
		}
	}
	return strings.TrimSuffix(sb.String(), "_")
}

// uniqueKeys makes the JSON keys of sibling nodes unique by suffixing
// repeats ("reserved", "reserved_2", …), recursively. Under a node that has
// a value of its own, "value" and "name" are taken (see appendJSONMembers).
func uniqueKeys(nodes []Node, parentHasValue bool) {
	seen := make(map[string]bool, len(nodes)+2)
	if parentHasValue {
		seen["value"], seen["name"] = true, true
	}
	for i := range nodes {
		n := &nodes[i]
		base := n.Key
		for c := 2; seen[n.Key]; c++ {
			n.Key = base + "_" + strconv.Itoa(c)
		}
		seen[n.Key] = true
		if len(n.Children) == 0 && n.Value.Meaning != "" {
			seen[n.Key+"_name"] = true
		}
		uniqueKeys(n.Children, n.Value.kind != kindNone)
	}
}
