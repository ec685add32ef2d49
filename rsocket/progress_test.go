package rsocket

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// countingLink is a UDP link that counts the TryRecv calls made on it:
// the receives that a goroutine polling a CQ ran itself.
type countingLink struct {
	*udp.Link
	tries atomic.Int64
}

func (l *countingLink) TryRecv(pkts []link.Packet) (int, error) {
	l.tries.Add(1)
	return l.Link.TryRecv(pkts)
}

// TestStreamLeavesLinkToDevice: a stream's Reads and Writes, when they
// wait, poll their CQs without driving the link (CQ.Poll of an empty CQ
// runs a recvmmsg on the caller's goroutine): the device's receive
// goroutine receives every packet, in the batches it reads, and the
// stream makes no receive system call of its own. Before, each wait
// polled both CQs and so read the link up to twice, splitting the
// receive goroutine's batches.
func TestStreamLeavesLinkToDevice(t *testing.T) {
	n := udpNet.Add(1)
	var links []*countingLink
	open := func(name string, host byte) *side {
		ip := netip.AddrFrom4([4]byte{127, 1 + byte(n/250), byte(n % 250), host})
		l, err := udp.New(udp.Config{Bind: ip, Addrs: []netip.Addr{ip}, Port: 47917})
		if err != nil {
			t.Fatal(err)
		}
		cl := &countingLink{Link: l}
		links = append(links, cl)
		dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: cl,
			GIDs: []verbs.GIDEntry{{GID: netip.AddrFrom16(ip.As16()), Type: verbs.GIDTypeRoCEv2}}})
		if err != nil {
			l.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		cm := rdmacm.New(fastCM)
		if err := cm.AddDevice(dev); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cm.Close() })
		return &side{dev: dev, cm: cm, ip: ip}
	}
	a, b := open("rsa", 1), open("rsb", 2)
	o := Options{ReadBuffer: 1 << 20, WriteBuffer: 1 << 20}
	ca, cb := dialAccept(t, a, b.listen(t, 7471, o), o)

	const total = 16 << 20
	before := links[0].tries.Load() + links[1].tries.Load()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		var got int64
		for got < total {
			k, err := cb.Read(buf)
			got += int64(k)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 64<<10)
	for sent := 0; sent < total; sent += len(buf) {
		if _, err := ca.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil && err != io.EOF {
		t.Fatal(err)
	}
	tries := links[0].tries.Load() + links[1].tries.Load() - before
	t.Logf("%d MiB streamed: %d receives run by CQ polls", total>>20, tries)
	if tries != 0 {
		t.Errorf("the stream's polls read the link %d times while %d MiB went through: want 0 (the device's receive goroutine reads it)", tries, total>>20)
	}
}
