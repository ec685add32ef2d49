package config

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"syscall"

	"github.com/goroce/goroce/wire"
)

// The RoCE modes, as default_roce_mode shows and takes them: the kernel's
// GID type names (ib_cache_gid_type_str), which verbs.GIDType prints. A
// mode is a RoCE version, a wire.Version: wire.RoCEv1 or wire.RoCEv2.
const (
	ModeRoCEv1 = "IB/RoCE v1"
	ModeRoCEv2 = "RoCE v2"
)

// ParseMode parses what is written to default_roce_mode, as the kernel's
// ib_cache_gid_parse_type_str does: exactly "IB/RoCE v1" or "RoCE v2",
// with at most one trailing newline (what echo adds). Anything else —
// another case, a second newline, a space, nothing — is EINVAL. Whether
// the port supports the mode is not checked here.
//
// The kernel compares the C string, so it would stop at a NUL byte and
// take "RoCE v2\x00junk" for "RoCE v2"; ParseMode refuses a NUL.
func ParseMode(data []byte) (wire.Version, error) {
	s := data
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	switch string(s) {
	case ModeRoCEv1:
		return wire.RoCEv1, nil
	case ModeRoCEv2:
		return wire.RoCEv2, nil
	}
	return 0, fmt.Errorf("%s is not a RoCE mode: the modes are %q and %q: %w",
		quote(data), ModeRoCEv1, ModeRoCEv2, syscall.EINVAL)
}

// ParseTOS parses what is written to default_roce_tos as the kernel's
// kstrtou8(buf, 0, &tos) does (lib/kstrtox.c): an optional '+', then a
// number in base 0 syntax — "0x" or "0X" and hex digits, a leading 0 and
// octal digits, else decimal — then at most one newline. A number above
// 255 is ERANGE ("256", "0x100"), and so is one that overflows 64 bits even
// with trailing garbage after it, since the kernel checks overflow first.
// Anything else ("-1", "abc", "", " 1", "0x", "08", "1\n\n") is EINVAL,
// and so is a NUL byte, where the kernel would stop reading.
func ParseTOS(data []byte) (uint8, error) {
	bad := func() (uint8, error) {
		return 0, fmt.Errorf("%s is not a ToS: default_roce_tos takes 0..255 (decimal, 0x hex or 0 octal): %w",
			quote(data), syscall.EINVAL)
	}
	if bytes.IndexByte(data, 0) >= 0 {
		return bad()
	}
	s := data
	if len(s) > 0 && s[0] == '+' { // kstrtoull
		s = s[1:]
	}
	// _parse_integer_fixup_radix: base 16 needs a hex digit after "0x",
	// else "0x…" is the octal 0 followed by garbage.
	base := uint64(10)
	if len(s) > 0 && s[0] == '0' {
		base = 8
		if len(s) > 2 && s[1]|0x20 == 'x' && isHex(s[2]) {
			base, s = 16, s[2:]
		}
	}
	// _parse_integer_limit: digits up to the first non-digit of the base,
	// noting overflow of 64 bits but reading on.
	var v uint64
	n, overflow := 0, false
	for ; n < len(s); n++ {
		d, ok := digit(s[n])
		if !ok || d >= base {
			break
		}
		if v>>60 != 0 && v > (math.MaxUint64-d)/base {
			overflow = true
		}
		v = v*base + d
	}
	if overflow {
		return 0, fmt.Errorf("%s is out of range: default_roce_tos takes 0..255: %w", quote(data), syscall.ERANGE)
	}
	if n == 0 {
		return bad()
	}
	rest := s[n:]
	if len(rest) > 0 && rest[0] == '\n' {
		rest = rest[1:]
	}
	if len(rest) > 0 {
		return bad()
	}
	if v > 255 { // kstrtou8: the value must fit in a u8
		return 0, fmt.Errorf("%s is out of range: default_roce_tos takes 0..255: %w", quote(data), syscall.ERANGE)
	}
	return uint8(v), nil
}

func isHex(c byte) bool { _, ok := digit(c); return ok }

func digit(c byte) (uint64, bool) {
	switch lc := c | 0x20; {
	case '0' <= c && c <= '9':
		return uint64(c - '0'), true
	case 'a' <= lc && lc <= 'f':
		return uint64(lc-'a') + 10, true
	}
	return 0, false
}

// quote shows written bytes in messages, shortened: a write may be 4 KiB.
func quote(data []byte) string {
	const max = 32
	if len(data) > max {
		return strconv.Quote(string(data[:max])) + "…"
	}
	return strconv.Quote(string(data))
}

// ModeName is the name of mode m as default_roce_mode shows it:
// ModeRoCEv1 or ModeRoCEv2.
func ModeName(m wire.Version) string {
	switch m {
	case wire.RoCEv1:
		return ModeRoCEv1
	case wire.RoCEv2:
		return ModeRoCEv2
	}
	return "unknown"
}

// FormatMode is what default_roce_mode shows for m: its name and a newline.
func FormatMode(m wire.Version) string { return ModeName(m) + "\n" }

// FormatTOS is what default_roce_tos shows for tos: decimal and a newline.
func FormatTOS(tos uint8) string { return strconv.Itoa(int(tos)) + "\n" }

// initialMode is a port's mode until one is set: RoCE v2 when the port
// speaks it, else RoCE v1 (cma_add_one: CMA_PREFERRED_ROCE_GID_TYPE, else
// the first supported type).
func initialMode(d Device) wire.Version {
	if d.RoCEv2 {
		return wire.RoCEv2
	}
	return wire.RoCEv1
}

// validModes names the modes a port of d takes, for messages.
func validModes(d Device) string {
	switch {
	case d.RoCEv1 && d.RoCEv2:
		return fmt.Sprintf("it takes %q or %q", ModeRoCEv1, ModeRoCEv2)
	case d.RoCEv1:
		return fmt.Sprintf("it speaks RoCE v1 only (roce-versions v1) and takes %q", ModeRoCEv1)
	}
	return fmt.Sprintf("it speaks RoCE v2 only (roce-versions v2, like Linux rxe) and takes %q", ModeRoCEv2)
}
