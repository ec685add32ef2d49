// Package mckey is librdmacm's mckey example (rdma-core
// librdmacm/examples/mckey.c) over goroce: RDMA CM UD multicast. Each node
// (-c of them) resolves the group address (-m) from the bind address
// (-b), makes a UD QP, joins the group (rdma_join_multicast), waits 3 s as
// mckey does, then either sends -C datagrams of -S bytes to the group (the
// sender, -s: SEND with immediate, the immediate its QPN, to QPN 0xFFFFFF
// with the join's Q_Key) or waits for -C of them, and leaves the group.
// Output and exit status are mckey's, line for line, so either side can
// be goroce or rdma-core's mckey.
package mckey

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// Defaults, as mckey.c.
const (
	DefaultSize  = 100
	DefaultCount = 10
	// MaxCount keeps the CQ (2 × count entries, as mckey sizes it) within
	// max_cqe, 32767.
	MaxCount       = verbs.MaxCQE / 2
	MaxConnections = 64
	grhLen         = 40
)

// Config is mckey's command line.
type Config struct {
	Group       netip.Addr       // -m: the multicast group
	Bind        netip.Addr       // -b: the local address (optional)
	Sender      bool             // -s
	Connections int              // -c (default 1)
	Count       int              // -C: messages (0: join and leave only)
	Size        int              // -S: message size
	PortSpace   rdmacm.PortSpace // -p: RDMA_PS_UDP (default) or RDMA_PS_IB
	// Pause is the wait between joining and the data transfers (mckey's 3
	// s, "to give SM chance to configure switches": here the receivers'
	// time to join). Zero means 3 s.
	Pause    time.Duration
	Out, Err io.Writer
}

type node struct {
	id   *rdmacm.ID
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mr   *verbs.MR
	buf  []byte
	ah   *verbs.AH
	ud   rdmacm.UDParam
	done bool // joined (mckey's node->connected)
}

// Run runs mckey on cm. It prints mckey's lines to c.Out; the error is
// the one mckey would report in "return status", nil for 0.
func Run(ctx context.Context, cm *rdmacm.CM, c Config) error {
	if c.Connections == 0 {
		c.Connections = 1
	}
	if c.Pause == 0 {
		c.Pause = 3 * time.Second
	}
	if c.PortSpace == 0 {
		c.PortSpace = rdmacm.PSUDP
	}
	if c.Size == 0 {
		c.Count = 0 // mckey's create_message: no size, no messages
	}
	ec := cm.CreateEventChannel()
	defer ec.Close()
	nodes := make([]*node, c.Connections)
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.destroy()
			}
		}
	}()
	role := "server"
	if c.Sender {
		role = "client"
	}
	fmt.Fprintf(c.Out, "mckey: starting %s\n", role)
	err := run(ctx, cm, ec, nodes, c)
	fmt.Fprintln(c.Out, "test complete")
	for i, n := range nodes {
		if n != nil {
			n.destroy()
			nodes[i] = nil
		}
	}
	fmt.Fprintf(c.Out, "return status %d\n", status(err))
	return err
}

// status is the number mckey prints: 0, or a negative errno.
func status(err error) int {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return -int(errno)
	}
	return -1
}

func run(ctx context.Context, cm *rdmacm.CM, ec *rdmacm.EventChannel, nodes []*node, c Config) error {
	for i := range nodes {
		id, err := cm.CreateID(ec, c.PortSpace)
		if err != nil {
			return err
		}
		nodes[i] = &node{id: id}
	}
	fmt.Fprintln(c.Out, "mckey: joining")
	byID := map[*rdmacm.ID]*node{}
	for _, n := range nodes {
		byID[n.id] = n
		if c.Bind.IsValid() {
			if err := n.id.BindAddr(netip.AddrPortFrom(c.Bind, 0)); err != nil {
				fmt.Fprintf(c.Err, "mckey: addr bind failure: %v\n", err)
				return err
			}
		}
		if err := n.id.ResolveAddr(c.Bind, netip.AddrPortFrom(c.Group, 0), 2*time.Second); err != nil {
			fmt.Fprintf(c.Err, "mckey: resolve addr failure: %v\n", err)
			return err
		}
	}
	// connect_events: ADDR_RESOLVED makes the node and joins,
	// MULTICAST_JOIN makes the AH.
	left := len(nodes)
	var ret error
	for left > 0 && ret == nil {
		e, err := ec.Get(ctx)
		if err != nil {
			return err
		}
		n := byID[e.ID]
		switch e.Type {
		case rdmacm.EventAddrResolved:
			if ret = n.addrHandler(c); ret != nil {
				left--
			}
		case rdmacm.EventMulticastJoin:
			ret = n.joinHandler(c, e.UD)
			left--
		case rdmacm.EventAddrError, rdmacm.EventRouteError, rdmacm.EventMulticastError:
			fmt.Fprintf(c.Out, "mckey: event: %v, error: %d\n", e.Type, e.Status)
			if e.Err != nil {
				fmt.Fprintf(c.Err, "roce: %v\n", e.Err)
			}
			left--
			ret = fmt.Errorf("%v: %w", e.Type, errnoOf(e.Status))
		}
	}
	if ret == nil {
		select {
		case <-time.After(c.Pause):
		case <-ctx.Done():
			ret = ctx.Err()
		}
	}
	if ret == nil && c.Count > 0 {
		if c.Sender {
			fmt.Fprintln(c.Out, "initiating data transfers")
			for _, n := range nodes {
				if ret = n.postSends(ctx, c); ret != nil {
					break
				}
			}
		} else {
			fmt.Fprintln(c.Out, "receiving data transfers")
			ret = pollCQs(ctx, nodes, c)
		}
		if ret == nil {
			fmt.Fprintln(c.Out, "data transfers complete")
		}
	}
	for _, n := range nodes {
		if err := n.id.LeaveMulticast(c.Group); err != nil {
			fmt.Fprintf(c.Err, "mckey: failure leaving: %v\n", err)
			if ret == nil {
				ret = err
			}
		}
	}
	return ret
}

func errnoOf(status int) error {
	if status < 0 {
		return syscall.Errno(-status)
	}
	return syscall.EINVAL
}

// addrHandler is mckey's: check the size against the MTU, make the PD,
// CQ, QP and buffer, post the receives (receiver), and join.
func (n *node) addrHandler(c Config) error {
	dev := n.id.Device()
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	if mtu := pa.ActiveMTU.Bytes(); c.Count > 0 && c.Size > mtu {
		fmt.Fprintf(c.Out, "mckey: message_size %d is larger than active mtu %d\n", c.Size, mtu)
		return syscall.EINVAL
	}
	if n.pd, err = dev.AllocPD(); err != nil {
		fmt.Fprintln(c.Out, "mckey: unable to allocate PD")
		return err
	}
	cqe := 2
	if c.Count > 0 {
		cqe = 2 * c.Count
	}
	if n.cq, err = dev.CreateCQ(cqe); err != nil {
		fmt.Fprintln(c.Out, "mckey: unable to create CQ")
		return err
	}
	wr := max(c.Count, 1)
	n.qp, err = n.id.CreateQP(n.pd, verbs.QPInitAttr{Type: verbs.UD, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		fmt.Fprintf(c.Err, "mckey: unable to create QP: %v\n", err)
		return err
	}
	if c.Count > 0 {
		n.buf = make([]byte, c.Size+grhLen)
		if n.mr, err = n.pd.RegMR(n.buf, verbs.AccessLocalWrite); err != nil {
			fmt.Fprintln(c.Out, "failed to reg MR")
			return err
		}
		if !c.Sender {
			for i := 0; i < c.Count; i++ {
				if err := n.qp.PostRecv(verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{n.mr.SGE(0, c.Size+grhLen)}}); err != nil {
					fmt.Fprintf(c.Out, "failed to post receives: %d\n", status(err))
					return err
				}
			}
		}
	}
	if err := n.id.JoinMulticast(c.Group); err != nil {
		fmt.Fprintf(c.Err, "mckey: failure joining: %v\n", err)
		return err
	}
	return nil
}

// joinHandler prints the join and makes the AH to the group.
func (n *node) joinHandler(c Config, ud rdmacm.UDParam) error {
	fmt.Fprintf(c.Out, "mckey: joined dgid: %v mlid 0x%x sl %d\n", ud.AH.GRH.DGID, 0, ud.AH.SL)
	ah, err := n.pd.CreateAH(ud.AH)
	if err != nil {
		fmt.Fprintln(c.Out, "mckey: failure creating address handle")
		return err
	}
	n.ah, n.ud, n.done = ah, ud, true
	return nil
}

// postSends sends the messages: SEND with immediate (the QPN), to the
// group's QPN and Q_Key. mckey posts them unsignaled and leaves; the last
// is signaled here and waited for, so the datagrams are on the wire before
// the QP goes (the packets are the same).
func (n *node) postSends(ctx context.Context, c Config) error {
	if !n.done {
		return nil
	}
	for i := 0; i < c.Count; i++ {
		wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSendWithImm, ImmData: n.qp.Num(),
			SGList: []verbs.SGE{n.mr.SGE(0, c.Size)}, AH: n.ah, RemoteQPN: n.ud.QPNum, RemoteQKey: n.ud.QKey}
		if i == c.Count-1 {
			wr.Flags = verbs.SendSignaled
		}
		if err := n.qp.PostSend(wr); err != nil {
			fmt.Fprintf(c.Out, "failed to post sends: %d\n", status(err))
			return err
		}
	}
	var wc [1]verbs.WC
	if _, err := n.cq.PollWait(ctx, wc[:]); err != nil {
		return err
	}
	if wc[0].Status != verbs.WCSuccess {
		return fmt.Errorf("send completion %v", &wc[0])
	}
	return nil
}

// pollCQs waits for count completions on each joined node, as mckey's
// poll_cqs (which counts them whatever their status).
func pollCQs(ctx context.Context, nodes []*node, c Config) error {
	var wc [8]verbs.WC
	for _, n := range nodes {
		if !n.done {
			continue
		}
		for got := 0; got < c.Count; {
			k, err := n.cq.PollWait(ctx, wc[:])
			if err != nil {
				return err
			}
			got += k
		}
	}
	return nil
}

func (n *node) destroy() {
	if n.qp != nil {
		n.qp.Destroy()
	}
	if n.cq != nil {
		n.cq.Destroy()
	}
	if n.mr != nil {
		n.mr.Dereg()
	}
	n.id.Destroy()
}
