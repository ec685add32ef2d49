package config

import (
	"time"

	"github.com/goroce/goroce/wire"
)

// Registry tells the tree which devices exist: the device registry of its
// runtime directory, which `roce link add` writes. *host.Registry
// implements it; config does not import host, so plain settings never link
// the data path (netlink, sockets, the engine).
type Registry interface {
	// ConfigDevice returns what the tree needs to know of the device
	// called name, or an error wrapping syscall.ENODEV when the registry
	// has no such device.
	ConfigDevice(name string) (Device, error)
}

// Device is what the tree needs to know of a device of the registry.
type Device struct {
	Name string
	// Created tells a device from an earlier one of the same name: values
	// set for the earlier one do not carry over (cma_add_one starts a new
	// cma_device from the defaults).
	Created time.Time
	// RoCEv1 and RoCEv2 say which RoCE versions the device's port speaks
	// (`roce link add … roce-versions`); at least one is true.
	RoCEv1, RoCEv2 bool
}

// speaks reports whether the device's port speaks RoCE version v: the
// kernel's roce_gid_type_mask_support, which cma_set_default_gid_type
// consults.
func (d Device) speaks(v wire.Version) bool {
	switch v {
	case wire.RoCEv1:
		return d.RoCEv1
	case wire.RoCEv2:
		return d.RoCEv2
	}
	return false
}

// versions is the device's roce-versions word, as `roce link add` takes it.
func (d Device) versions() string {
	switch {
	case d.RoCEv1 && d.RoCEv2:
		return "both"
	case d.RoCEv1:
		return "v1"
	}
	return "v2"
}
