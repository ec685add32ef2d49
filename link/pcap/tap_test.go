package pcap_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/fabric"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/wire"
)

// tapPair returns a tap over port a of a fabric, port b, and a function
// that sends one packet (PSN psn) from a to b and receives it at b.
func tapPair(t *testing.T) (*pcap.Link, func(psn uint32)) {
	t.Helper()
	gids := [2]netip.Addr{netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.2")}
	f := fabric.New()
	t.Cleanup(func() { f.Close() })
	a, err := f.AddPort(fabric.PortConfig{GIDs: gids[:1]})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.AddPort(fabric.PortConfig{GIDs: gids[1:]})
	if err != nil {
		t.Fatal(err)
	}
	tap := pcap.NewTap(a, nil)
	rx := make([]link.Packet, 1)
	rx[0].Buf = make([]byte, link.FrameHeadroom+link.MaxFrameSize)
	return tap, func(psn uint32) {
		t.Helper()
		fl := wire.PacketFields{BTH: wire.BTHFields{Opcode: 0x04, DestQP: 0x11, PSN: wire.PSN(psn)}, Payload: []byte("tap")}
		tr := append(fl.AppendTransport(nil), 0, 0, 0, 0)
		buf := make([]byte, link.FrameHeadroom+len(tr))
		copy(buf[link.FrameHeadroom:], tr)
		pk := []link.Packet{{Buf: buf, Off: link.FrameHeadroom, Len: len(tr),
			Addr: link.Addr{Version: wire.RoCEv2, SrcGID: gids[0], DstGID: gids[1], UDPSrcPort: 0xC000}}}
		if n, err := tap.Send(pk); n != 1 || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		if n, err := b.Recv(rx); n != 1 || err != nil {
			t.Fatalf("Recv: %d, %v", n, err)
		}
	}
}

// TestTapSubscriptions checks the tap: nothing recorded without a
// subscriber; every subscriber gets each frame, rebuilt and verifiable;
// a full queue drops and counts, never blocks; after Unsubscribe nothing
// more is queued.
func TestTapSubscriptions(t *testing.T) {
	tap, send := tapPair(t)
	send(1) // not recorded: the first frame subscribers see is number 1, PSN 2
	s1, s2 := tap.Subscribe(4), tap.Subscribe(1)
	for psn := uint32(2); psn < 5; psn++ {
		send(psn)
	}
	if got := len(s1.C()); got != 3 {
		t.Fatalf("subscriber 1 has %d frames queued, want 3", got)
	}
	for want := uint32(2); want < 5; want++ {
		f := <-s1.C()
		var p wire.Packet
		if err := p.ParseFrame(f.Data, wire.RoCEv2Port); err != nil {
			t.Fatal(err)
		}
		if err := p.VerifyICRC(); err != nil {
			t.Error(err)
		}
		if psn := uint32(p.BTH().PSN()); psn != want || f.Number != int(want-1) || f.OrigLen != len(f.Data) || f.Time.IsZero() {
			t.Errorf("frame %d: PSN %d, want %d; %d of %d bytes, at %v", f.Number, psn, want, len(f.Data), f.OrigLen, f.Time)
		}
	}
	if len(s2.C()) != 1 || s2.Dropped() != 2 || s1.Dropped() != 0 {
		t.Errorf("queue of 1: %d queued, %d dropped (subscriber 1: %d dropped); want 1, 2, 0", len(s2.C()), s2.Dropped(), s1.Dropped())
	}
	tap.Unsubscribe(s1)
	tap.Unsubscribe(s2)
	tap.Unsubscribe(s2) // twice is harmless
	send(5)
	if len(s1.C()) != 0 || s2.Dropped() != 2 {
		t.Errorf("after Unsubscribe: %d queued, %d dropped", len(s1.C()), s2.Dropped())
	}
}

// pathsFunc is a link.PathReporter.
type pathsFunc func(netip.Addr, wire.Version) error

func (f pathsFunc) PathError(dst netip.Addr, v wire.Version) error { return f(dst, v) }

// reportingLink is a link that reports err for every destination; its
// other methods are never called here.
type reportingLink struct {
	link.Link
	err error
}

func (r reportingLink) PathError(netip.Addr, wire.Version) error { return r.err }

// TestTapPathError: a tap's PathError is its reporter's answer when it has
// one (the host's neighbour resolver), else the wrapped link's; the
// reporter is asked about the destination and version asked of the tap.
func TestTapPathError(t *testing.T) {
	own, res := errors.New("the link's"), errors.New("the resolver's")
	dst := netip.MustParseAddr("::ffff:198.18.2.1")
	var asked []string
	says := func(err error) link.PathReporter {
		return pathsFunc(func(d netip.Addr, v wire.Version) error {
			asked = append(asked, d.String()+" "+v.String())
			return err
		})
	}
	for _, c := range []struct {
		name  string
		link  error
		paths link.PathReporter
		want  error
	}{
		{"no reporter", own, nil, own},
		{"no reporter, nothing wrong", nil, nil, nil},
		{"the reporter's first", own, says(res), res},
		{"the reporter has nothing", own, says(nil), own},
		{"neither has anything", nil, says(nil), nil},
	} {
		asked = nil
		tap := pcap.NewTap(reportingLink{err: c.link}, c.paths)
		if got := tap.PathError(dst, wire.RoCEv2); got != c.want {
			t.Errorf("%s: PathError = %v, want %v", c.name, got, c.want)
		}
		if c.paths != nil && (len(asked) != 1 || asked[0] != dst.String()+" "+wire.RoCEv2.String()) {
			t.Errorf("%s: the reporter was asked %q", c.name, asked)
		}
		// Through the poller view as well, which the host's devices use.
		if got := tap.WithPoller(nil).(link.PathReporter).PathError(dst, wire.RoCEv2); got != c.want {
			t.Errorf("%s: through WithPoller, PathError = %v, want %v", c.name, got, c.want)
		}
	}
}
