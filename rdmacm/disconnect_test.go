package rdmacm

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/wire/mad"
)

// TestDisconnectWithData: DREQ and DREP private data reach the peer's
// DISCONNECTED (from the passive side too, and across crossing DREQs),
// a repeated DREQ in timewait gets the same DREP, and a plain Disconnect
// sends zeros.
func TestDisconnectWithData(t *testing.T) {
	t.Run("passive-disconnects", func(t *testing.T) {
		a, b := newSides(t, "", fastOptions, fastOptions)
		ca, cb := connect(t, a, b, nil, nil)
		if err := cb.DisconnectWithData([]byte("server says bye")); err != nil {
			t.Fatal(err)
		}
		e := a.want(t, EventDisconnected)
		if !bytes.HasPrefix(e.PrivateData, []byte("server says bye")) || len(e.PrivateData) != mad.DREQPrivateDataLen {
			t.Errorf("DISCONNECTED private data %q", e.PrivateData)
		}
		if err := ca.DisconnectWithData([]byte("client agrees")); err != nil {
			t.Fatal(err)
		}
		e = b.want(t, EventDisconnected)
		if !bytes.HasPrefix(e.PrivateData, []byte("client agrees")) || len(e.PrivateData) != mad.DREPPrivateDataLen {
			t.Errorf("DISCONNECTED (DREP) private data %q", e.PrivateData)
		}
		if e.Status != 0 {
			t.Errorf("DISCONNECTED status %d, want 0", e.Status)
		}
		// Twice is an error: the ID is in timewait.
		if err := ca.DisconnectWithData(nil); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("second disconnect: %v, want EINVAL", err)
		}
	})
	t.Run("plain", func(t *testing.T) {
		a, b := newSides(t, "", fastOptions, fastOptions)
		ca, _ := connect(t, a, b, nil, nil)
		if err := ca.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if e := b.want(t, EventDisconnected); !bytes.Equal(e.PrivateData, make([]byte, mad.DREQPrivateDataLen)) {
			t.Errorf("DISCONNECTED private data after Disconnect %x, want zeros", e.PrivateData)
		}
	})
	t.Run("crossing", func(t *testing.T) {
		a, b := newSides(t, "", fastOptions, fastOptions)
		ca, cb := connect(t, a, b, nil, nil)
		// b's call may come before or after a's DREQ reaches b (then it
		// sends a DREP): either way each side's DISCONNECTED carries what
		// the other side passed.
		if err := ca.DisconnectWithData([]byte("from a")); err != nil {
			t.Fatal(err)
		}
		if err := cb.DisconnectWithData([]byte("from b")); err != nil {
			t.Fatal(err)
		}
		if e := b.want(t, EventDisconnected); !bytes.HasPrefix(e.PrivateData, []byte("from a")) {
			t.Errorf("b's DISCONNECTED private data %q, want a's", e.PrivateData)
		}
		if e := a.want(t, EventDisconnected); !bytes.HasPrefix(e.PrivateData, []byte("from b")) {
			t.Errorf("a's DISCONNECTED private data %q, want b's", e.PrivateData)
		}
	})
	t.Run("repeated-DREQ", func(t *testing.T) {
		drep, dreps := capture(mad.AttrDREP)
		dreq, dreqs := capture(mad.AttrDREQ)
		a, b := newSidesHook(t, "", fastOptions, fastOptions, drep, dreq)
		ca, cb := connect(t, a, b, nil, nil)
		if err := ca.Disconnect(); err != nil {
			t.Fatal(err)
		}
		b.want(t, EventDisconnected)
		if err := cb.DisconnectWithData([]byte("drep data")); err != nil {
			t.Fatal(err)
		}
		first := recvMAD(t, dreps)
		// a's DREQ again, as if the DREP had been lost: b, in timewait,
		// answers with the same DREP.
		req := recvMAD(t, dreqs)
		a.cm.mu.Lock()
		ca.ag.send(ca.rgid, ca.sgid, ca.tos, req.mad, 1)
		a.cm.mu.Unlock()
		again := recvMAD(t, dreps)
		if !bytes.Equal(again.mad, first.mad) {
			t.Errorf("DREP to a repeated DREQ differs:\n%x\nwant\n%x", again.mad, first.mad)
		}
		m, _ := mad.Parse(again.mad)
		if d, _ := m.DREP(); !bytes.HasPrefix(d.PrivateData(), []byte("drep data")) {
			t.Errorf("repeated DREP private data %q", d.PrivateData())
		}
	})
}
