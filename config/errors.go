package config

import (
	"errors"
	"syscall"
)

// Error is a failed operation on the tree, told as the kernel's configfs
// would fail it: the operation, the configfs path (below the configfs
// mount, e.g. rdma_cm/rxe0/ports/1/default_roce_mode), the device and port
// when known, and the cause, which unwraps to the syscall.Errno the kernel
// returns (ENOENT, EEXIST, ENODEV, EPERM, EINVAL, ERANGE …), or to the I/O
// error of the runtime directory.
type Error struct {
	Op     string // "mkdir", "rmdir", "read", "write"; "get", "set" for the typed accessors
	Path   string // configfs path: rdma_cm/<dev>[/ports/<port>[/<attribute>]]
	Dev    string // the device, when the path names one
	Port   int    // the port, when the path names one; else 0
	Detail string // why, and what would be valid; may be empty
	Err    error  // a syscall.Errno, or an error that wraps one
}

func (e *Error) Error() string {
	s := e.Op + " " + e.Path
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Errno returns the errno of err for a system call to return: the
// syscall.Errno it wraps, else EIO.
func Errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}
