package rdmacm

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// TestPortSpaceIB: port space IB (RDMA_PS_IB) serves an RC QP over
// REQ/REP/RTU and a UD QP over SIDR, with service IDs 0x13F<port>; a
// PS_TCP request to the same port finds no listener.
func TestPortSpaceIB(t *testing.T) {
	serviceID := func(port uint16) mad.ServiceID { return mad.ServiceID(0x00000000013F0000 | uint64(port)) }
	t.Run("RC", func(t *testing.T) {
		reqHook, reqs := capture(mad.AttrREQ)
		a, b := newSidesHook(t, "", fastOptions, fastOptions, nil, reqHook)
		listen(t, b, PSIB, 7174)
		ca := dial(t, a, PSIB, netip.AddrPortFrom(b.ip, 7174))
		if err := ca.Connect(ConnParam{PrivateData: []byte("ps ib"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		e := b.want(t, EventConnectRequest)
		if string(e.PrivateData[:5]) != "ps ib" {
			t.Errorf("CONNECT_REQUEST private data %q", e.PrivateData[:5])
		}
		m, _ := mad.Parse(recvMAD(t, reqs).mad)
		if req, _ := m.REQ(); req.ServiceID() != serviceID(7174) || req.TransportServiceType() != mad.TransportRC {
			t.Errorf("REQ service ID %#x, transport %v; want %#x, RC", uint64(req.ServiceID()), req.TransportServiceType(), uint64(serviceID(7174)))
		}
		cb := e.ID
		if _, err := cb.CreateQP(b.pd, rcInit(b)); err != nil {
			t.Fatal(err)
		}
		if err := cb.Accept(ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		a.want(t, EventEstablished)
		b.want(t, EventEstablished)
		send(t, a, b, ca.QP(), cb.QP(), []byte("over PS_IB"))
		send(t, b, a, cb.QP(), ca.QP(), []byte("and back"))
		disconnectBoth(t, a, b, ca, cb)

		// The port is PS_IB's only: a PS_TCP REQ to it is rejected.
		tcp := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
		if err := tcp.Connect(ConnParam{RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		for {
			e := getWithin(t, a, testenv.Slow)
			if e.Type == EventTimewaitExit {
				continue
			}
			if e.Type != EventRejected || e.Status != int(mad.RejectInvalidServiceID) {
				t.Errorf("PS_TCP REQ to a PS_IB port: %v, want REJECTED status 8 (invalid service ID)", e)
			}
			break
		}
	})
	t.Run("UD", func(t *testing.T) {
		sidrHook, sidrs := capture(mad.AttrSIDRREQ)
		a, b := newSidesHook(t, "", fastOptions, fastOptions, nil, sidrHook)
		listen(t, b, PSIB, 7175)
		ca := dialQP(t, a, PSIB, netip.AddrPortFrom(b.ip, 7175), verbs.UD)
		if err := ca.Connect(ConnParam{PrivateData: []byte("ud over ps ib")}); err != nil {
			t.Fatal(err)
		}
		e := b.want(t, EventConnectRequest)
		if string(e.PrivateData[:13]) != "ud over ps ib" {
			t.Errorf("CONNECT_REQUEST private data %q", e.PrivateData[:13])
		}
		m, _ := mad.Parse(recvMAD(t, sidrs).mad)
		if req, _ := m.SIDRREQ(); req.ServiceID() != serviceID(7175) {
			t.Errorf("SIDR_REQ service ID %#x, want %#x", uint64(req.ServiceID()), uint64(serviceID(7175)))
		}
		qb := acceptUD(t, b, e.ID, []byte("served"))
		est := a.want(t, EventEstablished)
		if string(est.PrivateData[:6]) != "served" {
			t.Errorf("ESTABLISHED private data %q", est.PrivateData[:6])
		}
		sendUD(t, a, b, ca, est, qb, []byte("datagram over PS_IB"))
	})
}
