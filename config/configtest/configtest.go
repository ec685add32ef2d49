// Package configtest gives tests of config, and of packages that use it, a
// device registry held in memory: config.Registry without a runtime
// directory's registry (package host), so those tests need neither host
// nor root.
package configtest

import (
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/config"
)

// Registry is a config.Registry in memory. It is safe for concurrent use.
type Registry struct {
	mu   sync.Mutex
	devs map[string]config.Device // guarded by mu
}

// NewRegistry returns a registry holding devs.
func NewRegistry(devs ...config.Device) *Registry {
	r := &Registry{devs: map[string]config.Device{}}
	for _, d := range devs {
		r.Add(d)
	}
	return r
}

// Add adds d, or replaces the device of that name: a device added again
// (with another Created time) is a new device, as `roce link delete` and
// `roce link add` make one. A zero Created becomes the current time.
func (r *Registry) Add(d config.Device) {
	if d.Created.IsZero() {
		d.Created = time.Now()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.devs[d.Name] = d
}

// Delete removes the device called name, if there is one.
func (r *Registry) Delete(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.devs, name)
}

// ConfigDevice implements config.Registry: ENODEV when there is no such
// device.
func (r *Registry) ConfigDevice(name string) (config.Device, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.devs[name]
	if !ok {
		return d, fmt.Errorf("no device %s: %w", name, syscall.ENODEV)
	}
	return d, nil
}
