// Package kernel is goroce's view of the Linux kernel's own RDMA devices —
// Mellanox, Broadcom and QLogic NICs, Linux Soft-RoCE (rdma_rxe) and
// Soft-iWARP (siw) — beside goroce's soft devices (package host):
//
//   - Sysfs reads devices, ports and GID tables where show_gids and
//     rdma-core read them, /sys/class/infiniband;
//   - LinkAdd and LinkDelete create and remove software RDMA links over
//     RDMA netlink, as iproute2's rdma link add/delete does, and Links
//     reads the kernel's device indexes and ports' netdevs the same way;
//   - Configfs performs the rdma_cm configfs procedure of the kernel's
//     documentation (Documentation/ABI/testing/configfs-rdma_cm) and
//     mlnx-tools' cma_roce_mode and cma_roce_tos: mount configfs if it is
//     not, load rdma_cm if its tree is missing, mkdir rdma_cm/DEV, write,
//     read back, and rmdir only what it made;
//   - Persist writes what re-applies such a setting at boot, which the
//     kernel forgets: a udev rule or a systemd unit.
//
// The roots (sysfs, configfs, the mount table, the persistence root) are
// fields, so tests run against trees of their own. Every error unwraps to
// the kernel's syscall.Errno and says why in words, as the kernel cannot.
package kernel

import (
	"errors"
	"syscall"
)

// Error is a kernel operation that failed: the errno the kernel returned
// (or that goroce found it would), with the device and port when known and
// an explanation for the operator.
type Error struct {
	Op     string // "mkdir", "write", "link add", …
	Dev    string // the RDMA device, when known
	Port   int    // the port, when known; else 0
	Detail string // why, in words, and what to do; may be empty
	Err    error  // a syscall.Errno, or an error that wraps one
}

func (e *Error) Error() string {
	s := e.Op
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Errno returns the errno err wraps, or EIO.
func Errno(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}
