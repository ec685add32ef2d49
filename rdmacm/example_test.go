package rdmacm_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/host"
	"github.com/goroce/goroce/link/udp"
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

// Devices without the registry and without root: each runs on a link you
// make, here RoCE v2 over UDP sockets bound to a loopback address
// (link/udp's unprivileged mode; the in-memory link/fabric serves the
// same in tests), with a CM of its own. A client SENDs "hello" to a
// server over RDMA CM. The README's "Go API" shows it. (Run by go test:
// its traffic stays on lo.)
func Example_withoutRegistry() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(name string, ip netip.Addr) (*verbs.Device, *rdmacm.CM) {
		// Port 4791 is RoCE v2's and the default; another keeps this
		// example clear of any device running on the host.
		l, err := udp.New(udp.Config{Bind: ip, Addrs: []netip.Addr{ip}, Port: 47911})
		if err != nil {
			log.Fatal(err)
		}
		dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: l, // the device closes the link
			GIDs: []verbs.GIDEntry{{GID: netip.AddrFrom16(ip.As16()), Type: verbs.GIDTypeRoCEv2}}})
		if err != nil {
			log.Fatal(err)
		}
		cm := rdmacm.New(rdmacm.Options{})
		if err := cm.AddDevice(dev); err != nil {
			log.Fatal(err)
		}
		return dev, cm
	}
	srv, srvCM := open("srv0", netip.MustParseAddr("127.0.2.2"))
	defer srv.Close()
	defer srvCM.Close()
	cli, cliCM := open("cli0", netip.MustParseAddr("127.0.2.1"))
	defer cli.Close()
	defer cliCM.Close()

	// The server posts a receive before it accepts (Endpoint.Prepare).
	spd, _ := srv.AllocPD()
	scq, _ := srv.CreateCQ(16)
	rbuf := make([]byte, 64)
	rmr, _ := spd.RegMR(rbuf, verbs.AccessLocalWrite)
	caps := verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	ln, err := srvCM.Listen(netip.MustParseAddrPort("127.0.2.2:7174"), rdmacm.Endpoint{PD: spd,
		QP: verbs.QPInitAttr{SendCQ: scq, RecvCQ: scq, Cap: caps},
		Prepare: func(qp *verbs.QP) error {
			return qp.PostRecv(verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{rmr.SGE(0, len(rbuf))}})
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *rdmacm.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			log.Fatal(err)
		}
		accepted <- c
	}()

	cpd, _ := cli.AllocPD()
	ccq, _ := cli.CreateCQ(16)
	msg := []byte("hello")
	smr, _ := cpd.RegMR(msg, verbs.AccessLocalWrite)
	conn, err := cliCM.Dial(ctx, ln.Addr(), rdmacm.Endpoint{PD: cpd, QP: verbs.QPInitAttr{SendCQ: ccq, RecvCQ: ccq, Cap: caps}})
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	sc := <-accepted
	defer sc.Close()
	if err := conn.QP.PostSend(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{smr.SGE(0, len(msg))}}); err != nil {
		log.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	for _, cq := range []*verbs.CQ{ccq, scq} { // the SEND's completion, then the receive's
		if _, err := cq.PollWait(ctx, wc); err != nil || wc[0].Status != verbs.WCSuccess {
			log.Fatal(err, wc[0])
		}
	}
	fmt.Println(string(rbuf[:wc[0].ByteLen]))
	// Output: hello
}
