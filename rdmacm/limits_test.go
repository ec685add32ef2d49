package rdmacm

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// pattern returns n bytes with no zero among them, so that a field cut
// short or padded shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i%251 + 1)
	}
	return b
}

// requestTo makes a dial b's listener on port and returns the active ID and
// the CONNECT_REQUEST b got. ps PSUDP sends a SIDR_REQ.
func requestTo(t *testing.T, a, b *side, ps PortSpace, port uint16, p ConnParam) (*ID, Event) {
	t.Helper()
	listen(t, b, ps, port)
	ca := dial(t, a, ps, netip.AddrPortFrom(b.ip, port))
	if err := ca.Connect(p); err != nil {
		t.Fatal(err)
	}
	return ca, b.want(t, EventConnectRequest)
}

// TestPrivateDataLimits: for each message with consumer private data,
// exactly librdmacm's limit is sent and reaches the peer whole, and one
// byte more fails with EINVAL and an error that names the limit. Each case
// runs on fresh IDs (and fresh hosts).
func TestPrivateDataLimits(t *testing.T) {
	rc := ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	for _, c := range []struct {
		msg   string
		limit int
		// send sends pd in msg on fresh IDs; on success it checks that the
		// peer's event carries exactly pd.
		send func(t *testing.T, a, b *side, pd []byte) error
	}{
		{"REQ", mad.RDMACMMaxREQPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			listen(t, b, PSTCP, 7174)
			ca := dial(t, a, PSTCP, netip.AddrPortFrom(b.ip, 7174))
			p := rc
			p.PrivateData = pd
			if err := ca.Connect(p); err != nil {
				return err
			}
			checkPD(t, "CONNECT_REQUEST", b.want(t, EventConnectRequest).PrivateData, pd)
			return nil
		}},
		{"REP", mad.RDMACMMaxREPPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			_, e := requestTo(t, a, b, PSTCP, 7174, rc)
			if _, err := e.ID.CreateQP(b.pd, rcInit(b)); err != nil {
				t.Fatal(err)
			}
			if err := e.ID.Accept(ConnParam{PrivateData: pd, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
				return err
			}
			checkPD(t, "ESTABLISHED", a.want(t, EventEstablished).PrivateData, pd)
			return nil
		}},
		{"REJ", mad.RDMACMMaxREJPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			_, e := requestTo(t, a, b, PSTCP, 7174, rc)
			if err := e.ID.Reject(pd); err != nil {
				return err
			}
			r := a.want(t, EventRejected)
			if r.Status != int(mad.RejectConsumer) {
				t.Errorf("REJECTED status %d, want %d (consumer reject)", r.Status, mad.RejectConsumer)
			}
			checkPD(t, "REJECTED", r.PrivateData, pd)
			return nil
		}},
		{"DREQ", mad.RDMACMMaxDREQPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			ca, _ := connect(t, a, b, nil, nil)
			if err := ca.DisconnectWithData(pd); err != nil {
				return err
			}
			checkPD(t, "DISCONNECTED", b.want(t, EventDisconnected).PrivateData, pd)
			return nil
		}},
		{"DREP", mad.DREPPrivateDataLen, func(t *testing.T, a, b *side, pd []byte) error {
			ca, cb := connect(t, a, b, nil, nil)
			if err := ca.Disconnect(); err != nil {
				t.Fatal(err)
			}
			b.want(t, EventDisconnected)
			if err := cb.DisconnectWithData(pd); err != nil {
				return err
			}
			checkPD(t, "DISCONNECTED", a.want(t, EventDisconnected).PrivateData, pd)
			return nil
		}},
		{"SIDR_REQ", mad.RDMACMMaxSIDRREQPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			listen(t, b, PSUDP, 7174)
			ca := dial(t, a, PSUDP, netip.AddrPortFrom(b.ip, 7174))
			if err := ca.Connect(ConnParam{PrivateData: pd}); err != nil {
				return err
			}
			checkPD(t, "CONNECT_REQUEST", b.want(t, EventConnectRequest).PrivateData, pd)
			return nil
		}},
		{"SIDR_REP", mad.RDMACMMaxSIDRREPPrivateData, func(t *testing.T, a, b *side, pd []byte) error {
			_, e := requestTo(t, a, b, PSUDP, 7174, ConnParam{})
			init := rcInit(b)
			init.Type = verbs.UD
			if _, err := e.ID.CreateQP(b.pd, init); err != nil {
				t.Fatal(err)
			}
			if err := e.ID.Accept(ConnParam{PrivateData: pd}); err != nil {
				return err
			}
			checkPD(t, "ESTABLISHED", a.want(t, EventEstablished).PrivateData, pd)
			return nil
		}},
	} {
		t.Run(c.msg, func(t *testing.T) {
			t.Run("limit", func(t *testing.T) {
				a, b := newSides(t, "", fastOptions, fastOptions)
				if err := c.send(t, a, b, pattern(c.limit)); err != nil {
					t.Fatalf("%d bytes, the limit: %v", c.limit, err)
				}
			})
			t.Run("limit+1", func(t *testing.T) {
				a, b := newSides(t, "", fastOptions, fastOptions)
				err := c.send(t, a, b, pattern(c.limit+1))
				if !errors.Is(err, syscall.EINVAL) {
					t.Fatalf("%d bytes: %v, want EINVAL", c.limit+1, err)
				}
				if !strings.Contains(err.Error(), "at most "+strconv.Itoa(c.limit)) {
					t.Errorf("error %q does not name the limit %d", err, c.limit)
				}
			})
		})
	}
}

// checkPD checks that an event's private data is exactly what was sent:
// the peer's whole field, which at the limit is all of it.
func checkPD(t *testing.T, what string, got, sent []byte) {
	t.Helper()
	if !bytes.Equal(got, sent) {
		t.Errorf("%s private data: %d bytes %x, want the %d sent %x", what, len(got), got, len(sent), sent)
	}
}
