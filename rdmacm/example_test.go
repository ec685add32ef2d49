package rdmacm_test

import (
	"context"
	"log"
	"net/netip"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// A client: open the device `roce link add rxe0 type rxe netdev eth0` made,
// connect an RC QP through RDMA CM to a server listening on 198.18.0.2
// port 7174 (`roce ping -s -a 198.18.0.2`, or Linux's rping), SEND it
// "hello" and wait for the completion. The README's "Go API" shows it.
// (Compiled by go test, not run: it needs the device and the server.)
func Example() {
	dev, err := host.Open("rxe0", host.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	cm := rdmacm.New(rdmacm.Options{})
	defer cm.Close()
	if err := cm.AddRoutedDevice(dev.Device, dev); err != nil { // addresses resolve by the host's routes
		log.Fatal(err)
	}
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(16)
	buf := []byte("hello")
	mr, _ := pd.RegMR(buf, verbs.AccessLocalWrite)
	ctx := context.Background()
	conn, err := cm.Dial(ctx, netip.MustParseAddrPort("198.18.0.2:7174"), rdmacm.Endpoint{PD: pd,
		QP: verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}})
	if err != nil {
		log.Fatal(err) // e.g. RDMA_CM_EVENT_UNREACHABLE, with why
	}
	defer conn.Close()
	err = conn.QP.PostSend(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, len(buf))}})
	if err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	if _, err := cq.PollWait(ctx, wc); err != nil || wc[0].Status != verbs.WCSuccess {
		log.Fatal(err, &wc[0]) // a failed WC says what went wrong in wc[0].Detail
	}
}
