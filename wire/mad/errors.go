package mad

import "errors"

// Errors returned by the parsers. Parse errors wrap one of these with the
// details (lengths, values); test with errors.Is.
var (
	// ErrTruncated: fewer bytes than the structure needs.
	ErrTruncated = errors.New("mad: truncated")
	// ErrLength: more bytes than the structure has (a CM MAD is exactly 256).
	ErrLength = errors.New("mad: wrong length")
	// ErrBaseVersion: a base version other than 1.
	ErrBaseVersion = errors.New("mad: unsupported base version")
	// ErrClassVersion: a CM MAD whose class version is not 2.
	ErrClassVersion = errors.New("mad: unsupported class version")
	// ErrNotIPCM: a service ID without the IP CM prefix.
	ErrNotIPCM = errors.New("mad: not an IP CM service ID")
	// ErrIPCMHeader: an IP CM header with an unknown version or IP version.
	ErrIPCMHeader = errors.New("mad: bad IP CM header")
	// ErrFieldRange: a value too wide for its field; see [RangeError].
	ErrFieldRange = errors.New("mad: value out of field range")
)
