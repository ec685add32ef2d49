package udp

import (
	"bytes"
	"net/netip"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/wire"
)

// txOnly is a Link with only what prepareMsg uses.
func txOnly(n int, v4 bool) *Link {
	l := &Link{cfg: Config{Port: wire.RoCEv2Port, Zone: 3}, v4: v4}
	l.txHdrs, l.txIovs = make([]unix.Mmsghdr, n), make([]unix.Iovec, n)
	l.txNames, l.txCtl = make([]byte, n*unix.SizeofSockaddrInet6), make([]byte, n*txCtlLen)
	l.txKeys = make([]txKey, n)
	return l
}

// msgBytes returns message m's name and control messages as prepareMsg
// left them.
func msgBytes(l *Link, m int) (name, ctl []byte) {
	h := &l.txHdrs[m].Hdr
	name = unsafe.Slice(h.Name, h.Namelen)
	ctl = unsafe.Slice(h.Control, h.Controllen)
	return name, ctl
}

// TestPrepareMsgReuse checks that a message slot whose name and control
// messages prepareMsg kept from its last message (txKey) holds what a
// fresh build gives, through changes of every field they depend on:
// destination, source, traffic class, GSO or not and its size, a
// link-local peer.
func TestPrepareMsgReuse(t *testing.T) {
	a4, b4, c4 := netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2"), netip.MustParseAddr("::ffff:10.0.0.3")
	a6, b6, ll := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), netip.MustParseAddr("fe80::2")
	type step struct {
		src, dst netip.Addr
		tc       uint8
		segs     int
		len      int
	}
	for _, v4 := range []bool{false, true} {
		steps := []step{
			{a4, b4, 0, 1, 80}, {a4, b4, 0, 1, 80}, {a4, c4, 0, 1, 80}, {a4, b4, 0, 1, 80},
			{a4, b4, 0x02, 1, 80}, {a4, b4, 0x02, 1, 80}, {a4, b4, 0, 2, 80}, {a4, b4, 0, 2, 96},
			{a4, b4, 0, 2, 96}, {a4, b4, 0, 1, 96}, {c4, b4, 0, 1, 96},
		}
		if !v4 {
			steps = append(steps, step{a6, b6, 0, 1, 80}, step{a6, ll, 0, 1, 80}, step{a6, ll, 0, 1, 80},
				step{a6, b6, 0x60, 3, 80}, step{a6, b6, 0, 3, 80}, step{a4, b4, 0, 1, 80})
		}
		l := txOnly(2, v4)
		for i, s := range steps {
			pk := &link.Packet{Len: s.len, Addr: link.Addr{Version: wire.RoCEv2, SrcGID: s.src, DstGID: s.dst, TrafficClass: s.tc}}
			for m := range 2 { // both slots see every step
				l.prepareMsg(m, m, s.segs, pk, l.sockFor(&pk.Addr))
				fresh := txOnly(2, v4)
				fresh.prepareMsg(m, m, s.segs, pk, fresh.sockFor(&pk.Addr))
				name, ctl := msgBytes(l, m)
				wantName, wantCtl := msgBytes(fresh, m)
				if !bytes.Equal(name, wantName) || !bytes.Equal(ctl, wantCtl) {
					t.Fatalf("v4 socket %v, step %d %+v, slot %d: name %x ctl %x, a fresh build gives %x and %x",
						v4, i, s, m, name, ctl, wantName, wantCtl)
				}
				h := &l.txHdrs[m].Hdr
				if h.Iov != &l.txIovs[m] || h.Iovlen != uint64(s.segs) {
					t.Fatalf("step %d slot %d: iovecs %p/%d, want %p/%d", i, m, h.Iov, h.Iovlen, &l.txIovs[m], s.segs)
				}
			}
		}
	}
}
