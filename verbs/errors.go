package verbs

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is a failed operation of the control path: what failed, on which
// device and QP, why in words, and the errno ibverbs would return. Every
// control-path error of verbs is an *Error, and so are those of package
// host and package rdmacm, so callers learn what happened from fields,
// never from the message's text:
//
//	err := qp.Modify(&attr, verbs.AttrState|verbs.AttrPathMTU)
//	if errors.Is(err, syscall.EINVAL) { // the errno, as ibv_modify_qp returns it
//		var e *verbs.Error
//		errors.As(err, &e) // e.Op "modify_qp", e.QPN, e.Detail: the attribute and its valid values
//	}
//
// The data path never returns one: a peer's bad packet or a failed work
// request is reported in a completion (WC.Status, WC.Detail) or an
// asynchronous event. A destroyed object's methods return net.ErrClosed.
type Error struct {
	// Op is what failed: the verb, as ibverbs names it without "ibv_"
	// ("create_qp", "modify_qp", "post_send", "reg_mr"), or the
	// operation of the package that returns it ("open", "link add",
	// "rdmacm: dial").
	Op string
	// Device is the device the operation was on, when known.
	Device string
	// QPN is the QP the operation was on; 0 when none (QP0, the SMI, does
	// not exist on RoCE).
	QPN uint32
	// Detail says why in words: for EINVAL, the attribute and the values
	// it may take. It may be empty.
	Detail string
	// Err is the cause: a syscall.Errno, or an error that wraps one (a
	// lower layer's *Error, a link's error), or a context's error for an
	// operation whose context ended.
	Err error
}

func (e *Error) Error() string {
	s := e.Op
	if e.Device != "" {
		s = join(s, " ", e.Device)
	}
	if e.QPN != 0 {
		s = join(s, " ", fmt.Sprintf("QP %#x", e.QPN))
	}
	if e.Detail != "" {
		s = join(s, ": ", e.Detail)
	}
	if e.Err != nil {
		s = join(s, ": ", e.Err.Error())
	}
	return s
}

// join joins two non-empty strings with sep.
func join(a, sep, b string) string {
	if a == "" {
		return b
	}
	return a + sep + b
}

// Unwrap returns Err, so errors.Is(err, syscall.EINVAL) and errors.As see
// the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errno returns the errno err carries (errors.As), or EIO when it carries
// none.
func Errno(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}

// errorf is an *Error of op on device dev (and QP qpn, if not 0) with
// errno and a detail made from format and args.
func errorf(op, dev string, qpn uint32, errno syscall.Errno, format string, args ...any) *Error {
	return &Error{Op: op, Device: dev, QPN: qpn, Detail: fmt.Sprintf(format, args...), Err: errno}
}

// invalid is the detail of an EINVAL found by a helper that does not know
// the operation it checks for: the caller makes it an *Error (withOp).
func invalid(format string, args ...any) *Error {
	return &Error{Detail: fmt.Sprintf(format, args...), Err: syscall.EINVAL}
}

// withOp gives err the operation, device and QP it failed in: an *Error
// without an Op gets them; any other error becomes the cause of a new one.
func withOp(err error, op, dev string, qpn uint32) error {
	if e, ok := err.(*Error); ok && e.Op == "" {
		c := *e
		c.Op, c.Device, c.QPN = op, dev, qpn
		return &c
	}
	return &Error{Op: op, Device: dev, QPN: qpn, Err: err}
}
