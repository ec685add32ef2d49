package lab

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/verbs"
)

// OpenDevice registers a goroce device rxe0 on the lab's bridge (HostIPv4
// and HostIPv6 in roce-host), speaking the given RoCE versions, in a
// runtime directory of the test's own; it opens it and closes it when t
// ends.
func (l *Lab) OpenDevice(t testing.TB, v host.Versions) *host.Device {
	t.Helper()
	return l.OpenDeviceRx(t, v, host.RxDefault)
}

// OpenDeviceRx is OpenDevice with the RoCE v2 port's receive path rx
// (host.RxXDP: an XDP program on the bridge, in its generic mode).
func (l *Lab) OpenDeviceRx(t testing.TB, v host.Versions, rx host.RxPath) *host.Device {
	t.Helper()
	dir := t.TempDir()
	reg := host.NewRegistry(dir)
	err := l.Do(func() error {
		ns, err := host.CurrentNetns()
		if err != nil {
			return err
		}
		return reg.Add(host.DeviceDef{Name: "rxe0", Type: "rxe", Netdev: Bridge, Netns: ns, Versions: v, Rx: rx})
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := host.Open("rxe0", host.Options{RunDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// HostGIDIndex returns the index of d's RoCE v2 GID for ip (HostIPv4 or
// HostIPv6).
func HostGIDIndex(t testing.TB, d *host.Device, ip string) int {
	t.Helper()
	want := netip.AddrFrom16(netip.MustParseAddr(ip).As16())
	for i, e := range d.GIDs() {
		if e.GID == want && e.Type == verbs.GIDTypeRoCEv2 {
			return i
		}
	}
	t.Fatalf("no RoCE v2 GID %s in %v", ip, d.GIDs())
	return -1
}
