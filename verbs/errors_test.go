package verbs_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
)

// TestControlPathErrors: each failing verb returns a *verbs.Error that
// says which operation failed, on which device and QP, and why, and that
// unwraps to the errno ibverbs returns, so callers read fields, not text.
func TestControlPathErrors(t *testing.T) {
	p := verbstest.NewPair(t, verbstest.Options{Type: verbs.RC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	dev, qpn := p.A.Dev.Name(), p.A.QP.Num()
	_, badOpen := verbs.Open(verbs.DeviceConfig{Name: "nolink0"})
	_, badCQ := p.A.Dev.CreateCQ(0)
	badModify := p.A.QP.Modify(&verbs.QPAttr{PathMTU: verbs.MTU(9)}, verbs.AttrPathMTU)
	_, badAH := p.A.PD.CreateAH(verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{SGIDIndex: 200, DGID: p.B.GID.GID}})
	badSend := p.A.QP.PostSend(verbs.SendWR{WRID: 7, Opcode: verbs.WROpcode(99)})
	p.A.QP.PostRecv(verbs.RecvWR{WRID: 1})
	fullRecv := p.A.QP.PostRecv(verbs.RecvWR{WRID: 2}) // max_recv_wr is 1
	_, badPort := p.A.Dev.QueryPort(2)
	for _, c := range []struct {
		name   string
		err    error
		errno  syscall.Errno
		op     string
		dev    string
		qpn    uint32
		detail string
	}{
		{"Open without a link", badOpen, syscall.EINVAL, "open device", "nolink0", 0, "no link"},
		{"CreateCQ(0)", badCQ, syscall.EINVAL, "create_cq", dev, 0, "cqe 0 outside 1..32767"},
		{"Modify path_mtu in RTS", badModify, syscall.EINVAL, "modify_qp", dev, qpn, "RTS → RTS of a RC QP does not accept IBV_QP_PATH_MTU"},
		{"CreateAH sgid_index 200", badAH, syscall.EINVAL, "create_ah", dev, 0, "ah_attr.grh.sgid_index: GID index 200: no such entry"},
		{"PostSend opcode 99", badSend, syscall.EINVAL, "post_send", dev, qpn, "wr_id 7"},
		{"PostRecv beyond max_recv_wr", fullRecv, syscall.ENOMEM, "post_recv", dev, qpn, "receive queue full (1 WRs posted)"},
		{"QueryPort(2)", badPort, syscall.EINVAL, "query_port", dev, 0, "port 2: the device has port 1 only"},
	} {
		if !errors.Is(c.err, c.errno) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.errno)
			continue
		}
		var e *verbs.Error
		if !errors.As(c.err, &e) {
			t.Errorf("%s: %T is not a *verbs.Error", c.name, c.err)
			continue
		}
		if e.Op != c.op || e.Device != c.dev || e.QPN != c.qpn || !strings.Contains(e.Detail, c.detail) || verbs.Errno(c.err) != c.errno {
			t.Errorf("%s: Op %q Device %q QPN %#x Detail %q Errno %v; want %q %q %#x, a detail with %q, %v",
				c.name, e.Op, e.Device, e.QPN, e.Detail, verbs.Errno(c.err), c.op, c.dev, c.qpn, c.detail, c.errno)
		}
		// The message says the same, in the order ibverbs users read it.
		if want := c.op; !strings.HasPrefix(e.Error(), want) || !strings.HasSuffix(e.Error(), ": "+c.errno.Error()) {
			t.Errorf("%s: message %q, want it to start with %q and end with the errno", c.name, e.Error(), want)
		}
	}
}
