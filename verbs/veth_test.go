package verbs_test

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/nettest"
	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// vethPrefix names the networks of two devices on a veth pair.
const vethPrefix = "veth/"

// vethNetwork returns the NetworkFunc of two devices on the two ends of a
// fresh veth pair in two namespaces, each on the real link package host
// would give it: link/udp (privileged receive, from the netdev) for RoCE
// v2, link/afpacket (raw Ethernet) for RoCE v1. The devices are made here
// rather than by host.Open, so verbs' tests need no registry and do not
// import the layer above them.
func vethNetwork(net string) verbstest.NetworkFunc {
	return func(tb testing.TB) (a, b verbstest.Endpoint) {
		t := tb.(*testing.T)
		const mtu = 9000 // active MTU 4096, as on the fabric
		ha, hb := nettest.VethPair(t, nettest.Options{MTU: mtu})
		typ := verbs.GIDTypeRoCEv2
		if net == verbstest.NetV1 {
			typ = verbs.GIDTypeRoCEv1
		}
		ends := [2]*verbstest.Endpoint{&a, &b}
		for i, h := range []*nettest.Host{ha, hb} {
			ip := netip.AddrFrom16(h.IPv4.As16())
			if net == verbstest.NetV2IPv6 {
				ip = h.IPv6
			}
			var l link.Link
			if err := h.Do(func() error {
				if typ == verbs.GIDTypeRoCEv1 {
					raw, err := afpacket.New(afpacket.Config{Ifindex: h.Ifindex, MAC: h.MAC, GIDs: []netip.Addr{ip}})
					if err != nil {
						return err
					}
					raw.Resolver().SetSources([]netip.Addr{h.IPv4, h.IPv6})
					l = raw
					return nil
				}
				u, err := udp.New(udp.Config{Addrs: []netip.Addr{ip}, MTU: mtu - 48, Zone: h.Ifindex, Ifindex: h.Ifindex})
				l = u
				return err
			}); err != nil {
				t.Fatal(err)
			}
			gid := verbs.GIDEntry{GID: ip, Type: typ, Netdev: h.Ifname}
			d, err := verbs.Open(verbs.DeviceConfig{Name: []string{"rxe0", "rxe1"}[i], Link: l, MAC: h.MAC,
				GIDs: []verbs.GIDEntry{gid}, ActiveMTU: verbs.MTU4096})
			if err != nil {
				l.Close()
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			*ends[i] = verbstest.Endpoint{Dev: d, GID: gid, GIDIndex: 0}
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
		{"MWBadInput", TestMWBadInput},
		{"UD", TestUD},
		{"SGL", TestSGL},
		{"GSI", TestGSI},
	} {
		t.Run(c.name, c.fn)
	}
}
