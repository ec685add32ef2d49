package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestECN: the ECN settings are stored beside the rdma_cm values (not in
// the rdma_cm view), kept across Trees, left unchanged by an update that
// fails, refused for an unknown device or port, dropped with the device,
// and a corrupt state file is EIO.
func TestECN(t *testing.T) {
	tr, reg := newTree(t)
	if m, err := tr.ECN("rxe0", 1); err != nil || len(m) != 0 {
		t.Fatalf("ECN before any set = %v, %v; want empty", m, err)
	}
	if err := tr.UpdateECN("rxe0", 1, func(m map[string]uint32) error {
		m["roce_rp/enable"], m["roce_np/cnp_dscp"] = 1, 26
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("refused")
	if err := tr.UpdateECN("rxe0", 1, func(m map[string]uint32) error {
		m["roce_rp/enable"] = 0
		return bad
	}); err != bad {
		t.Errorf("UpdateECN whose f fails = %v, want f's error", err)
	}
	p := filepath.Join(tr.StateDir(), "rxe0", "ports", "1", "ecn")
	if b, err := os.ReadFile(p); err != nil || string(b) != "roce_np/cnp_dscp 26\nroce_rp/enable 1\n" {
		t.Errorf("%s: %q, %v", p, b, err)
	}
	if ents, err := tr.ReadDir("rxe0/ports/1"); err == nil {
		for _, e := range ents {
			if e.Name == "ecn" {
				t.Errorf("the rdma_cm view lists ecn")
			}
		}
	}
	_, err := tr.ECN("rxe9", 1)
	wantErrno(t, "ECN of rxe9", err, syscall.ENODEV)
	wantErrno(t, "UpdateECN port 2", tr.UpdateECN("rxe0", 2, func(map[string]uint32) error { return nil }), syscall.EINVAL)

	reg.Delete("rxe0")
	d := testDevs[0] // added again: another Created, another device
	d.Created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reg.Add(d)
	if m, err := tr.ECN("rxe0", 1); err != nil || len(m) != 0 {
		t.Errorf("ECN of a new device of that name = %v, %v; want empty", m, err)
	}

	tr2, _ := newTree(t)
	if err := tr2.UpdateECN("rxe1", 1, func(m map[string]uint32) error { m["roce_np/enable"] = 1; return nil }); err != nil {
		t.Fatal(err)
	}
	p = filepath.Join(tr2.StateDir(), "rxe1", "ports", "1", "ecn")
	if err := os.WriteFile(p, []byte("roce_np/enable lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = tr2.ECN("rxe1", 1)
	wantErrno(t, "corrupt ecn state", err, syscall.EIO)
}
