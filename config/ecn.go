package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// A port's congestion control settings (ECN and DCQCN: MLNX_OFED's
// /sys/class/net/<if>/ecn/roce_np and roce_rp) live beside the rdma_cm
// values, in the port's state directory, but not in the rdma_cm tree:
// they are not rdma_cm configfs attributes, and ReadDir never lists them.
// config keeps them as plain name → value pairs ("roce_rp/enable",
// "roce_np/cnp_dscp"): which names exist and what they take is the
// device's business (host maps them onto verbs.ECNConfig), and config
// imports no verbs. They share the rdma_cm values' lifetime: a device
// deleted and added again starts from the defaults, and the runtime
// directory goes at reboot.

// attrECN is the state file of a port's ECN settings.
const attrECN = "ecn"

// ECN returns the ECN settings stored for dev's port: only those ever set,
// by name; empty when none is. ENODEV for a device not in the registry,
// EINVAL for a port it lacks, EIO for a state file that holds no settings.
func (t *Tree) ECN(dev string, port int) (map[string]uint32, error) {
	n, def, err := t.portDevice("get", dev, port, attrECN)
	if err != nil {
		return nil, err
	}
	m, err := t.loadECN(def)
	if err != nil {
		return nil, t.fail("get", n, err, "")
	}
	return m, nil
}

// UpdateECN changes dev's port's ECN settings under the tree's lock: f
// gets the stored settings and changes them in place; when f returns an
// error nothing is stored and UpdateECN returns it as f made it.
func (t *Tree) UpdateECN(dev string, port int, f func(map[string]uint32) error) error {
	return t.setPort(dev, port, attrECN, func(n node, def Device) error {
		m, err := t.loadECN(def)
		if err != nil {
			return t.fail("set", n, err, "")
		}
		if err := f(m); err != nil {
			return err
		}
		return t.store("set", n, def, FormatECN(m))
	})
}

func (t *Tree) loadECN(def Device) (map[string]uint32, error) {
	raw, ok, err := t.loadRaw(def, attrECN)
	if err != nil {
		return nil, err
	}
	if !ok {
		return map[string]uint32{}, nil
	}
	m, err := ParseECN(raw)
	if err != nil {
		return nil, t.corrupt(def, attrECN, err)
	}
	return m, nil
}

// FormatECN is the state file's content: one "name value" line per
// setting, sorted by name.
func FormatECN(m map[string]uint32) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s %d\n", k, m[k])
	}
	return b.String()
}

// ParseECN reads FormatECN's content; EINVAL for any other.
func ParseECN(raw []byte) (map[string]uint32, error) {
	m := map[string]uint32{}
	for i, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		if line == "" && len(raw) == 0 {
			break
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d %q: want \"name value\": %w", i+1, line, syscall.EINVAL)
		}
		v, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %v: %w", i+1, line, err, syscall.EINVAL)
		}
		m[f[0]] = uint32(v)
	}
	return m, nil
}
