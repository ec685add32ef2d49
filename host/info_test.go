package host

import (
	"testing"

	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire"
)

// The control commands compute what a device would report without opening
// it; this keeps those values equal to what a running device's Query and
// QueryPort return, port up and down.
func TestAttrsMatchARunningDevice(t *testing.T) {
	mac := wire.MAC{0x52, 0x54, 0x00, 0xc0, 0x02, 0x0b}
	if g := NodeGUID(mac); g != 0x505400fffec0020b {
		t.Errorf("NodeGUID = %#x, want 0x505400fffec0020b (the lab's rxe0)", g)
	}
	fab := fabric.New()
	defer fab.Close()
	port, err := fab.AddPort(fabric.PortConfig{Name: "p", MAC: mac})
	if err != nil {
		t.Fatal(err)
	}
	nd := Netdev{Name: "eth0", MAC: mac, MTU: 1500, Up: true, Running: true}
	dev, err := verbs.Open(verbs.DeviceConfig{Name: "rxe0", Link: port, MAC: mac, ActiveMTU: ActiveMTU(nd.MTU)})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if got, want := DeviceAttrOf(mac), dev.Query(); got != want {
		t.Errorf("DeviceAttrOf:\n got %+v\nwant %+v", got, want)
	}
	for _, up := range []bool{true, false} {
		dev.SetPortState(up)
		nd.Running = up
		want, err := dev.QueryPort(1)
		if err != nil {
			t.Fatal(err)
		}
		if got := PortAttrOf(nd); got != want {
			t.Errorf("up=%v: PortAttrOf:\n got %+v\nwant %+v", up, got, want)
		}
	}
}
