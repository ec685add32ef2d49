package perftest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// pollOnlyLink is a fabric port whose receive goroutine never gets a
// packet: RecvLocked waits until the test ends. Only a goroutine that
// drives the link (CQ.Poll on an empty CQ, through TryRecv) receives.
type pollOnlyLink struct {
	*fabric.Port
	done chan struct{}
}

func (l *pollOnlyLink) RecvLocked(pkts []link.Packet, mu sync.Locker) (int, error) {
	<-l.done
	return 0, net.ErrClosed
}

// ib_write_lat's spin on its buffer's last byte drives the link itself
// (as a CQ poll does), so the peer's WRITE lands without the device's
// receive goroutine, which on a one-vCPU VM waits for Go's 10 ms
// background netpoll. Here both devices' receive goroutines get nothing:
// a watch that only looks at the byte waits for a WRITE nobody receives.
func TestWriteLatDrivesLink(t *testing.T) {
	fab := fabric.New()
	t.Cleanup(func() { fab.Close() })
	gids := verbstest.GIDs(verbstest.NetV2IPv4)
	done := make(chan struct{})
	var devs [2]*verbs.Device
	for i := range devs {
		port, err := fab.AddPort(fabric.PortConfig{Name: fmt.Sprintf("fab%d", i), GIDs: []netip.Addr{gids[i].GID}})
		if err != nil {
			t.Fatal(err)
		}
		devs[i], err = verbs.Open(verbs.DeviceConfig{Name: fmt.Sprintf("rxe%d", i), Link: &pollOnlyLink{Port: port, done: done},
			MAC: port.MAC(), GIDs: []verbs.GIDEntry{gids[i]}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[i].Close() })
	}
	t.Cleanup(func() { close(done) }) // first: the devices' Close waits for their receive goroutines
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Verb: Write, Lat: true, Size: 64, Iters: 200, GIDIndex: -1}
	var sout, cout bytes.Buffer
	sc, cc := cfg, cfg
	sc.Out, sc.Listener = &sout, ln
	cc.Out, cc.Server, cc.Port = &cout, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	serr := make(chan error, 1)
	go func() {
		_, err := Run(ctx, devs[0], sc)
		serr <- err
	}()
	if _, err := Run(ctx, devs[1], cc); err != nil {
		cancel()
		t.Fatalf("client: %v\n%s", err, cout.String())
	}
	if err := <-serr; err != nil {
		t.Fatalf("server: %v\n%s", err, sout.String())
	}
	if !strings.Contains(cout.String(), " 64 ") {
		t.Errorf("client's report has no 64-byte row:\n%s", cout.String())
	}
	t.Logf("client:\n%s", cout.String())
}
