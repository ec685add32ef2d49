package host

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// TestECNParamsRanges holds the table's ranges to verbs: each parameter's
// Min and Max are accepted by SetECN and set what Get reads back, and the
// values just outside them are refused with EINVAL.
func TestECNParamsRanges(t *testing.T) {
	fab := fabric.New()
	defer fab.Close()
	mac := wire.MAC{0x52, 0x54, 0x00, 0, 0, 1}
	port, err := fab.AddPort(fabric.PortConfig{Name: "p", MAC: mac})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := verbs.Open(verbs.DeviceConfig{Name: "rxe0", Link: port, MAC: mac})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, p := range ECNParams() {
		for _, v := range []uint32{p.Min, p.Max} {
			c := verbs.DefaultECNConfig()
			p.set(&c, v)
			if err := dev.SetECN(1, c); err != nil {
				t.Errorf("%s %d (in range %s): SetECN: %v", p.Key(), v, p.Valid(), err)
				continue
			}
			if got := dev.ECN(1); p.Get(&got) != v {
				t.Errorf("%s: set %d, read back %d", p.Key(), v, p.Get(&got))
			}
			if err := p.Check(v); err != nil {
				t.Errorf("%s: Check(%d) = %v", p.Key(), v, err)
			}
		}
		var out []uint32
		if p.Min > 0 {
			out = append(out, p.Min-1)
		}
		if p.Max < 1<<32-1 {
			out = append(out, p.Max+1)
		}
		for _, v := range out {
			if err := p.Check(v); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%s: Check(%d) = %v, want EINVAL", p.Key(), v, err)
			}
			if strings.HasPrefix(p.Name, "enable") || p.Name == "cnp_dscp" && v > 255 {
				continue // a bool, or a uint8 field: verbs cannot hold the value to refuse it
			}
			c := verbs.DefaultECNConfig()
			p.set(&c, v)
			if err := dev.SetECN(1, c); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("%s %d (outside %s): SetECN = %v, want EINVAL", p.Key(), v, p.Valid(), err)
			}
		}
	}
	if _, err := LookupECNParam("roce_rp", "rpg_bogus"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("LookupECNParam(rpg_bogus) = %v, want EINVAL", err)
	}
}

// TestECNReachesDevice: settings stored in the config tree before Open
// are the opened device's, and a change stored while it runs reaches it
// through the control socket (OpECN); without an owner ApplyECN says
// ErrNotRunning.
func TestECNReachesDevice(t *testing.T) {
	r := loDevice(t)
	tree := config.Open(r.Dir, r)
	if err := r.ApplyECN(context.Background(), "rxe0"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("ApplyECN without an owner = %v, want ErrNotRunning", err)
	}
	set := func(kv map[string]uint32) {
		t.Helper()
		if err := tree.UpdateECN("rxe0", 1, func(m map[string]uint32) error {
			for k, v := range kv {
				m[k] = v
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	set(map[string]uint32{"roce_np/enable": 1, "roce_rp/rpg_time_reset": 77})
	d, err := Open("rxe0", Options{RunDir: r.Dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c := d.ECN(1); c.NPEnable != verbs.AllPriorities || c.RPEnable != 0 || c.RP.TimeReset != 77 {
		t.Fatalf("opened device's ECN = %+v; want np enable, rp disabled, rpg_time_reset 77", c)
	}
	set(map[string]uint32{"roce_rp/enable": 1, "roce_rp/rpg_min_rate": 9})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.ApplyECN(ctx, "rxe0"); err != nil {
		t.Fatal(err)
	}
	if c := d.ECN(1); c.NPEnable != verbs.AllPriorities || c.RPEnable != verbs.AllPriorities || c.RP.TimeReset != 77 || c.RP.MinRate != 9 {
		t.Errorf("running device's ECN after ApplyECN = %+v; want np and rp enabled, rpg_time_reset 77, rpg_min_rate 9", c)
	}
}

// TestECNConfigOfRefusesBadState: a stored value out of range or an
// unknown name is EIO, never silently a default.
func TestECNConfigOfRefusesBadState(t *testing.T) {
	for _, m := range []map[string]uint32{{"roce_rp/rpg_min_dec_fac": 101}, {"roce_rp/bogus": 1}} {
		if _, err := ECNConfigOf(m); !errors.Is(err, syscall.EIO) {
			t.Errorf("ECNConfigOf(%v) = %v, want EIO", m, err)
		}
	}
}

// SetECNSetting keeps the stored settings what the operator said: enable
// replaces the point's enable/<prio>, enable/<prio> spells a stored
// enable out first; the device's configuration follows.
func TestSetECNSetting(t *testing.T) {
	m := map[string]uint32{}
	set := func(key string, v uint32) {
		pt, name, _ := strings.Cut(key, "/")
		p, err := LookupECNParam(pt, name)
		if err != nil {
			t.Fatal(err)
		}
		SetECNSetting(m, p, v)
	}
	set("roce_rp/enable", 1)
	set("roce_rp/enable/3", 0)
	c, err := ECNConfigOf(m)
	if err != nil {
		t.Fatal(err)
	}
	if c.RPEnable != verbs.AllPriorities&^(1<<3) || c.NPEnable != 0 || len(m) != 8 {
		t.Errorf("enable 1, enable/3 0: rp %08b np %08b, stored %v", c.RPEnable, c.NPEnable, m)
	}
	set("roce_np/enable/5", 1)
	set("roce_rp/enable", 0)
	if c, err = ECNConfigOf(m); err != nil {
		t.Fatal(err)
	}
	if c.RPEnable != 0 || c.NPEnable != 1<<5 || len(m) != 2 || m["roce_rp/enable"] != 0 {
		t.Errorf("then np enable/5 1, rp enable 0: rp %08b np %08b, stored %v", c.RPEnable, c.NPEnable, m)
	}
}
