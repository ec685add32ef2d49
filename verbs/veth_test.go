package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// vethPrefix names the networks of two host devices on a veth pair.
const vethPrefix = "veth/"

// vethNetwork returns the NetworkFunc of two goroce devices bound to the
// two ends of a fresh veth pair in two namespaces (package host, with the
// real links: link/udp for RoCE v2, link/afpacket for v1).
func vethNetwork(net string) verbstest.NetworkFunc {
	return func(tb testing.TB) (a, b verbstest.Endpoint) {
		t := tb.(*testing.T)
		ha, hb := nettest.VethPair(t, nettest.Options{MTU: 9000}) // active MTU 4096, as on the fabric
		dir := t.TempDir()
		reg := host.NewRegistry(dir)
		versions, typ := host.VersionsV2, verbs.GIDTypeRoCEv2
		if net == verbstest.NetV1 {
			versions, typ = host.VersionsBoth, verbs.GIDTypeRoCEv1
		}
		ends := [2]*verbstest.Endpoint{&a, &b}
		for i, h := range []*nettest.Host{ha, hb} {
			name := []string{"rxe0", "rxe1"}[i]
			if err := h.Do(func() error {
				ns, err := host.CurrentNetns()
				if err != nil {
					return err
				}
				return reg.Add(host.DeviceDef{Name: name, Type: "rxe", Netdev: h.Ifname, Netns: ns, Versions: versions})
			}); err != nil {
				t.Fatal(err)
			}
			d, err := host.Open(name, host.Options{RunDir: dir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			ip := netip.AddrFrom16(h.IPv4.As16())
			if net == verbstest.NetV2IPv6 {
				ip = h.IPv6
			}
			found := false
			for j, e := range d.GIDs() {
				if e.GID == ip && e.Type == typ {
					*ends[i] = verbstest.Endpoint{Dev: d.Device, GID: e, GIDIndex: uint8(j)}
					found = true
					break
				}
			}
			if !found {
				t.Fatalf("%s has no %v GID %v", name, typ, ip)
			}
		}
		return a, b
	}
}

// TestOverVeth runs the fabric's test bodies — every opcode on every QP
// type it applies to — over real links between two namespaces: RoCE v2 over
// IPv4 and IPv6 (the kernel's UDP stack, privileged receive) and RoCE v1
// (raw Ethernet).
func TestOverVeth(t *testing.T) {
	var nets []string
	for _, n := range []string{verbstest.NetV2IPv4, verbstest.NetV2IPv6, verbstest.NetV1} {
		verbstest.RegisterNetwork(vethPrefix+n, vethNetwork(n))
		nets = append(nets, vethPrefix+n)
	}
	testenv.Root(t)
	saved := verbstest.Networks
	verbstest.Networks = nets
	defer func() { verbstest.Networks = saved }()
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Sanity", TestSanityAllTypesAndNets},
		{"Send", TestSend},
		{"RDMAWrite", TestRDMAWrite},
		{"RDMARead", TestRDMARead},
		{"Atomics", TestAtomics},
		{"Flush", TestFlush},
		{"AtomicWrite", TestAtomicWrite},
		{"SendWithInv", TestSendWithInv},
		{"UD", TestUD},
		{"SGL", TestSGL},
		{"GSI", TestGSI},
	} {
		t.Run(c.name, c.fn)
	}
}
