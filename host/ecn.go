package host

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/verbs"
)

// A port's congestion control (verbs.ECNConfig) under the names operators
// know from MLNX_OFED's sysfs, /sys/class/net/<if>/ecn/roce_np/* and
// roce_rp/*: the config tree stores them (config.Tree.ECN, UpdateECN),
// Open applies them to the device it opens, and the owner of a running
// device applies them again when asked through its control socket
// (OpECN), so `roce ecn` reaches a device whichever process has it.
//
// enable is per priority, enable/0 … enable/7 as in MLNX_OFED (a packet's
// priority is its DSCP / 8: verbs.PriorityOf); goroce's enable, which
// MLNX_OFED does not have, stands for all eight: setting it sets them all,
// and it reads 1 when all eight are on.

// ECNParam is one setting: Point is "roce_np" or "roce_rp", Name
// MLNX_OFED's file name, and Min..Max the values the device takes.
type ECNParam struct {
	Point, Name string
	Min, Max    uint32
	Unit        string
	get         func(*verbs.ECNConfig) uint32
	set         func(*verbs.ECNConfig, uint32)
}

// Key is the parameter's name in the config tree: "roce_rp/enable".
func (p *ECNParam) Key() string { return p.Point + "/" + p.Name }

// Valid names the parameter's values, for messages.
func (p *ECNParam) Valid() string {
	s := fmt.Sprintf("%d to %d", p.Min, p.Max)
	if p.Unit != "" {
		s += " (" + p.Unit + ")"
	}
	return s
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// maxRate is verbs' highest DCQCN rate, Mb/s (RateLimitMaxKbps).
const maxRate = verbs.RateLimitMaxKbps / 1000

// The ranges are verbs' (ECNConfig via SetECN, RPParams.Validate);
// TestECNParamsRanges holds them to it.
var ecnParams = []ECNParam{
	enableParam("roce_np", func(c *verbs.ECNConfig) *verbs.Priorities { return &c.NPEnable }, -1),
	{"roce_np", "cnp_dscp", 0, 63, "", func(c *verbs.ECNConfig) uint32 { return uint32(c.NP.CNPDSCP) },
		func(c *verbs.ECNConfig, v uint32) { c.NP.CNPDSCP = uint8(v) }},
	{"roce_np", "min_time_between_cnps", 0, 1_000_000, "µs", func(c *verbs.ECNConfig) uint32 { return c.NP.MinTimeBetweenCNPs },
		func(c *verbs.ECNConfig, v uint32) { c.NP.MinTimeBetweenCNPs = v }},
	enableParam("roce_rp", func(c *verbs.ECNConfig) *verbs.Priorities { return &c.RPEnable }, -1),
	{"roce_rp", "dce_tcp_g", 0, 1023, "", func(c *verbs.ECNConfig) uint32 { return c.RP.DCETCPG },
		func(c *verbs.ECNConfig, v uint32) { c.RP.DCETCPG = v }},
	{"roce_rp", "dce_tcp_rtt", 1, 1_000_000, "µs", func(c *verbs.ECNConfig) uint32 { return c.RP.DCETCPRTT },
		func(c *verbs.ECNConfig, v uint32) { c.RP.DCETCPRTT = v }},
	{"roce_rp", "initial_alpha_value", 0, 1023, "", func(c *verbs.ECNConfig) uint32 { return c.RP.InitialAlphaValue },
		func(c *verbs.ECNConfig, v uint32) { c.RP.InitialAlphaValue = v }},
	{"roce_rp", "rate_reduce_monitor_period", 0, 1_000_000, "µs", func(c *verbs.ECNConfig) uint32 { return c.RP.RateReduceMonitorPeriod },
		func(c *verbs.ECNConfig, v uint32) { c.RP.RateReduceMonitorPeriod = v }},
	{"roce_rp", "rate_to_set_on_first_cnp", 0, maxRate, "Mb/s", func(c *verbs.ECNConfig) uint32 { return c.RP.RateToSetOnFirstCNP },
		func(c *verbs.ECNConfig, v uint32) { c.RP.RateToSetOnFirstCNP = v }},
	{"roce_rp", "rpg_ai_rate", 1, maxRate, "Mb/s", func(c *verbs.ECNConfig) uint32 { return c.RP.AIRate },
		func(c *verbs.ECNConfig, v uint32) { c.RP.AIRate = v }},
	{"roce_rp", "rpg_byte_reset", 1, 1<<32 - 1, "bytes", func(c *verbs.ECNConfig) uint32 { return c.RP.ByteReset },
		func(c *verbs.ECNConfig, v uint32) { c.RP.ByteReset = v }},
	{"roce_rp", "rpg_hai_rate", 0, maxRate, "Mb/s", func(c *verbs.ECNConfig) uint32 { return c.RP.HAIRate },
		func(c *verbs.ECNConfig, v uint32) { c.RP.HAIRate = v }},
	{"roce_rp", "rpg_max_rate", 0, maxRate, "Mb/s, 0 the line rate", func(c *verbs.ECNConfig) uint32 { return c.RP.MaxRate },
		func(c *verbs.ECNConfig, v uint32) { c.RP.MaxRate = v }},
	{"roce_rp", "rpg_min_dec_fac", 1, 100, "%", func(c *verbs.ECNConfig) uint32 { return c.RP.MinDecFac },
		func(c *verbs.ECNConfig, v uint32) { c.RP.MinDecFac = v }},
	{"roce_rp", "rpg_min_rate", 1, maxRate, "Mb/s", func(c *verbs.ECNConfig) uint32 { return c.RP.MinRate },
		func(c *verbs.ECNConfig, v uint32) { c.RP.MinRate = v }},
	{"roce_rp", "rpg_threshold", 1, 31, "", func(c *verbs.ECNConfig) uint32 { return c.RP.Threshold },
		func(c *verbs.ECNConfig, v uint32) { c.RP.Threshold = v }},
	{"roce_rp", "rpg_time_reset", 1, 1_000_000, "µs", func(c *verbs.ECNConfig) uint32 { return c.RP.TimeReset },
		func(c *verbs.ECNConfig, v uint32) { c.RP.TimeReset = v }},
}

func init() {
	// enable/0 … enable/7 after each point's enable.
	var ps []ECNParam
	for _, p := range ecnParams {
		ps = append(ps, p)
		if p.Name != "enable" {
			continue
		}
		for prio := range 8 {
			f := func(c *verbs.ECNConfig) *verbs.Priorities { return &c.NPEnable }
			if p.Point == "roce_rp" {
				f = func(c *verbs.ECNConfig) *verbs.Priorities { return &c.RPEnable }
			}
			ps = append(ps, enableParam(p.Point, f, prio))
		}
	}
	ecnParams = ps
}

// enableParam is point's enable/<prio> (prio 0-7), or with prio -1 its
// enable for all priorities.
func enableParam(point string, f func(*verbs.ECNConfig) *verbs.Priorities, prio int) ECNParam {
	if prio < 0 {
		return ECNParam{point, "enable", 0, 1, "0 off, 1 on, every priority",
			func(c *verbs.ECNConfig) uint32 { return b2u(*f(c) == verbs.AllPriorities) },
			func(c *verbs.ECNConfig, v uint32) {
				*f(c) = 0
				if v == 1 {
					*f(c) = verbs.AllPriorities
				}
			}}
	}
	bit := verbs.Priorities(1) << prio
	return ECNParam{point, fmt.Sprintf("enable/%d", prio), 0, 1, fmt.Sprintf("0 off, 1 on, priority %d", prio),
		func(c *verbs.ECNConfig) uint32 { return b2u(*f(c)&bit != 0) },
		func(c *verbs.ECNConfig, v uint32) {
			*f(c) &^= bit
			if v == 1 {
				*f(c) |= bit
			}
		}}
}

// SetECNSetting stores param's value v in the config tree's settings m
// (UpdateECN's map) so that m says what the operator asked and nothing
// else: enable replaces the point's enable/<prio> settings, and
// enable/<prio> spells out a stored enable as the eight it stands for
// first.
func SetECNSetting(m map[string]uint32, param ECNParam, v uint32) {
	all := param.Point + "/enable"
	switch {
	case param.Name == "enable":
		for prio := range 8 {
			delete(m, fmt.Sprintf("%s/%d", all, prio))
		}
	case strings.HasPrefix(param.Name, "enable/"):
		if e, ok := m[all]; ok {
			delete(m, all)
			for prio := range 8 {
				m[fmt.Sprintf("%s/%d", all, prio)] = e
			}
		}
	}
	m[param.Key()] = v
}

// ECNParams returns the settings, roce_np's then roce_rp's, each point's
// enable and enable/0 … enable/7 first.
func ECNParams() []ECNParam { return ecnParams }

// LookupECNParam returns point's parameter name; EINVAL naming point's
// parameters when it has none of that name.
func LookupECNParam(point, name string) (ECNParam, error) {
	var names []string
	for _, p := range ecnParams {
		if p.Point != point {
			continue
		}
		if p.Name == name {
			return p, nil
		}
		switch {
		case p.Name == "enable/0":
			names = append(names, "enable/PRIO (PRIO 0 to 7)")
		case !strings.HasPrefix(p.Name, "enable/"):
			names = append(names, p.Name)
		}
	}
	return ECNParam{}, fmt.Errorf("%s has no parameter %q: its parameters are %s: %w",
		point, name, strings.Join(names, ", "), syscall.EINVAL)
}

// Check returns EINVAL naming the valid values when v is out of them.
func (p *ECNParam) Check(v uint32) error {
	if v < p.Min || v > p.Max {
		return fmt.Errorf("%s %s %d: valid values are %s: %w", p.Point, p.Name, v, p.Valid(), syscall.EINVAL)
	}
	return nil
}

// Get returns the parameter's value in c.
func (p *ECNParam) Get(c *verbs.ECNConfig) uint32 { return p.get(c) }

// ECNConfigOf returns the port's congestion control as the config tree's
// settings m make it: the defaults (verbs.DefaultECNConfig), then each
// stored setting. An unknown name or a value out of range is an error
// (EIO: the tree holds only what UpdateECN checked).
func ECNConfigOf(m map[string]uint32) (verbs.ECNConfig, error) {
	c := verbs.DefaultECNConfig()
	for _, p := range ecnParams {
		v, ok := m[p.Key()]
		if !ok {
			continue
		}
		if err := p.Check(v); err != nil {
			return c, fmt.Errorf("stored ECN setting: %v: %w", err, syscall.EIO)
		}
		p.set(&c, v)
	}
	for k := range m {
		pt, name, _ := strings.Cut(k, "/")
		if _, err := LookupECNParam(pt, name); err != nil {
			return c, fmt.Errorf("stored ECN setting %q: unknown: %w", k, syscall.EIO)
		}
	}
	return c, nil
}

// loadECN applies the config tree's ECN settings of the device's port to
// its verbs device.
func (d *Device) loadECN() error {
	m, err := config.Open(d.reg.Dir, d.reg).ECN(d.Def.Name, 1)
	if err != nil {
		return err
	}
	c, err := ECNConfigOf(m)
	if err != nil {
		return err
	}
	return d.Device.SetECN(1, c)
}

// ApplyECN asks the owner of device name to apply the config tree's ECN
// settings now. Without an owner the error wraps ErrNotRunning: the
// settings wait in the tree for the next Open.
func (r *Registry) ApplyECN(ctx context.Context, name string) error {
	conn, _, _, err := r.dialControl(ctx, name, OpECN)
	if err != nil {
		return err
	}
	return conn.Close()
}
