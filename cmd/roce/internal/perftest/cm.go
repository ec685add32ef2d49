package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

// perftest's -R (work_rdma_cm, which implies use_rdma_cm), as perftest
// 6.06 does it:
//
//   - The exchange runs over an RDMA CM connection of its own: the server
//     binds port -p (port space TCP) on every IPv4 address and listens; the
//     client resolves the server's address and connects (rdma_server_connect,
//     rdma_client_connect). Its RC QP carries each message as one SEND into
//     a single posted receive of sizeof(struct pingpong_dest) = 56 bytes,
//     reposted after each message. The messages are those of the TCP
//     exchange, except that a QP's data is struct pingpong_dest in
//     big-endian (rdma_write_keys) instead of text, and no "done" ends it.
//   - The test's QPs are then connected through RDMA CM too
//     (create_rdma_cm_connection): a handshake; the server destroys the
//     exchange's listener and listens on the same port again, the client
//     connects each QP, retrying 10 times 100 ms apart while the server is
//     not listening yet; another handshake. The QPs are never moved by hand
//     and the peer's QPN and PSN in the QP data are not used.

// pingpongDestLen is sizeof(struct pingpong_dest) on Linux x86-64 and
// arm64: the receive each side keeps posted, so no message may be longer.
const pingpongDestLen = 56

// cmRetries and cmRetryDelay are rdma_cm_client_connection's.
const (
	cmRetries    = 10
	cmRetryDelay = 100 * time.Millisecond
)

// marshalBinary is rdma_write_keys: struct pingpong_dest with every field
// big-endian (HAVE_ENDIAN); the padding before vaddr is zero here.
func (d Dest) marshalBinary(gidIndex int) []byte {
	b := make([]byte, pingpongDestLen)
	binary.BigEndian.PutUint32(b[0:], uint32(d.LID))
	binary.BigEndian.PutUint32(b[4:], d.OutReads)
	binary.BigEndian.PutUint32(b[8:], d.QPN)
	binary.BigEndian.PutUint32(b[12:], d.PSN)
	binary.BigEndian.PutUint32(b[16:], d.RKey)
	binary.BigEndian.PutUint64(b[24:], d.VAddr)
	g := d.GID.As16()
	copy(b[32:48], g[:])
	binary.BigEndian.PutUint32(b[48:], d.SRQN)
	binary.BigEndian.PutUint32(b[52:], uint32(int32(gidIndex)))
	return b
}

// parseBinaryDest is rdma_read_keys (which reads neither srqn nor
// gid_index; SRQN is read here all the same).
func parseBinaryDest(b []byte) Dest {
	if len(b) < pingpongDestLen {
		b = append(b, make([]byte, pingpongDestLen-len(b))...)
	}
	var g [16]byte
	copy(g[:], b[32:48])
	return Dest{LID: uint16(binary.BigEndian.Uint32(b[0:])), OutReads: binary.BigEndian.Uint32(b[4:]),
		QPN: binary.BigEndian.Uint32(b[8:]), PSN: binary.BigEndian.Uint32(b[12:]), RKey: binary.BigEndian.Uint32(b[16:]),
		VAddr: binary.BigEndian.Uint64(b[24:]), GID: netip.AddrFrom16(g), SRQN: binary.BigEndian.Uint32(b[48:])}
}

// cmLink is the exchange over an RDMA CM connection: one RC QP with a
// send buffer and one posted receive (SYNC_SPEC_ID's).
type cmLink struct {
	id       *rdmacm.ID
	ec       *rdmacm.EventChannel
	dev      *verbs.Device
	pd       *verbs.PD
	mr       *verbs.MR
	buf      []byte // [0:64) receive, [64:128) send
	scq, rcq *verbs.CQ
	qp       *verbs.QP
	ctx      context.Context
	cancel   context.CancelCauseFunc
	once     sync.Once
}

const syncSpecID = 1 // SYNC_SPEC_ID

// errPeerDisconnected ends a wait on the exchange when the peer's CM
// disconnects.
var errPeerDisconnected = errors.New("the peer disconnected the RDMA CM exchange connection")

// newCMLink makes the exchange's resources on id's device, creates its QP
// through id and posts the receive (the side that reads first must have
// it before the peer's first SEND). On error it releases what it made,
// but not id (which owns the QP) or ec.
func newCMLink(ctx context.Context, id *rdmacm.ID, ec *rdmacm.EventChannel) (*cmLink, error) {
	l := &cmLink{dev: id.Device()}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	fail := func(err error) (*cmLink, error) {
		l.close()
		return nil, err
	}
	if l.dev == nil {
		return fail(errors.New("rdma_cm: the CM ID has no device"))
	}
	var err error
	if l.pd, err = l.dev.AllocPD(); err != nil {
		return fail(fmt.Errorf("Couldn't allocate PD: %w", err))
	}
	l.buf = alignedBuf(128, cacheLine)
	if l.mr, err = l.pd.RegMR(l.buf, verbs.AccessLocalWrite); err != nil {
		return fail(fmt.Errorf("Couldn't allocate MR: %w", err))
	}
	if l.scq, err = l.dev.CreateCQ(4); err != nil {
		return fail(fmt.Errorf("Couldn't create CQ: %w", err))
	}
	if l.rcq, err = l.dev.CreateCQ(4); err != nil {
		return fail(fmt.Errorf("Couldn't create CQ: %w", err))
	}
	l.qp, err = id.CreateQP(l.pd, verbs.QPInitAttr{Type: verbs.RC, SendCQ: l.scq, RecvCQ: l.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return fail(fmt.Errorf("Couldn't create rdma QP: %w", err))
	}
	if err := l.postRecv(); err != nil {
		return fail(err)
	}
	l.id, l.ec = id, ec
	return l, nil
}

func (l *cmLink) postRecv() error {
	if err := l.qp.PostRecv(verbs.RecvWR{WRID: syncSpecID, SGList: []verbs.SGE{l.mr.SGE(0, pingpongDestLen)}}); err != nil {
		return fmt.Errorf("Function ibv_post_recv failed for RDMA_CM QP: %w", err)
	}
	return nil
}

// disconnectGrace is how long a wait on the exchange may still complete
// after the peer's DISCONNECTED: a peer that has our last message closes at
// once, and its DREQ (on QP1) can overtake the ACK of that message.
const disconnectGrace = 2 * time.Second

// established starts watching the connection's events: the peer's
// DISCONNECTED ends any wait on the exchange, after disconnectGrace.
func (l *cmLink) established() {
	go func() {
		for {
			e, err := l.ec.Get(l.ctx)
			if err != nil {
				return
			}
			if e.Type == rdmacm.EventDisconnected && e.ID == l.id {
				time.AfterFunc(disconnectGrace, func() { l.cancel(errPeerDisconnected) })
				return
			}
		}
	}()
}

func (l *cmLink) wait(cq *verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	n, err := cq.PollWait(l.ctx, wc[:])
	if err != nil {
		if c := context.Cause(l.ctx); c != nil {
			err = c
		}
		return verbs.WC{}, err
	}
	if n != 1 {
		return verbs.WC{}, errors.New("no completion")
	}
	return wc[0], nil
}

// send is rdma_write_data: one signaled SEND, waited for.
func (l *cmLink) send(b []byte) error {
	if len(b) > pingpongDestLen {
		return fmt.Errorf("rdma_cm exchange: a %d-byte message does not fit the peer's %d-byte receive", len(b), pingpongDestLen)
	}
	n := copy(l.buf[64:], b)
	err := l.qp.PostSend(verbs.SendWR{WRID: syncSpecID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGList: []verbs.SGE{l.mr.SGE(64, n)}})
	if err != nil {
		return fmt.Errorf("Function ibv_post_send failed: %w", err)
	}
	wc, err := l.wait(l.scq)
	if err != nil {
		return fmt.Errorf("Unable to write to rdma_cm: %w", err)
	}
	if wc.Status != verbs.WCSuccess || wc.WRID != syncSpecID {
		return wcError(wc, "the rdma_cm exchange's SEND")
	}
	return nil
}

// recv is rdma_read_data: the next message, then the receive reposted.
func (l *cmLink) recv(n int) ([]byte, error) {
	wc, err := l.wait(l.rcq)
	if err != nil {
		return nil, fmt.Errorf("Unable to read from rdma_cm: %w", err)
	}
	if wc.Status != verbs.WCSuccess || wc.WRID != syncSpecID {
		return nil, wcError(wc, "the rdma_cm exchange's receive")
	}
	b := make([]byte, n)
	copy(b, l.buf[:min(n, 64)])
	if err := l.postRecv(); err != nil {
		return nil, err
	}
	return b, nil
}

// close disconnects and destroys the ID (and its QP), then the rest.
func (l *cmLink) close() {
	l.once.Do(func() {
		l.cancel(nil)
		if l.id != nil {
			l.id.Disconnect()
			l.id.Destroy()
		}
		if l.ec != nil {
			l.ec.Close()
		}
		for _, c := range []*verbs.CQ{l.scq, l.rcq} {
			if c != nil {
				c.Destroy()
			}
		}
		if l.mr != nil {
			l.mr.Dereg()
		}
	})
}

// resolveHost is getaddrinfo for AF_INET (perftest's -R is IPv4 only;
// goroce takes an IPv6 address too).
func resolveHost(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	as, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
	if err != nil || len(as) == 0 {
		return netip.Addr{}, fmt.Errorf("Problem in resolving basic address and port: %s: %w", host, err)
	}
	return as[0].Unmap(), nil
}

// cmEventError is an event other than the one awaited.
type cmEventError struct {
	e    rdmacm.Event
	want rdmacm.EventType
}

func (e *cmEventError) Error() string {
	if e.e.Err != nil {
		return fmt.Sprintf("unexpected CM event %v (status %d) waiting for %v: %v", e.e.Type, e.e.Status, e.want, e.e.Err)
	}
	return fmt.Sprintf("unexpected CM event %v (status %d) waiting for %v", e.e.Type, e.e.Status, e.want)
}

func (e *cmEventError) Unwrap() error { return e.e.Err }

// rejected reports whether err is a REJ: nobody listens on the port yet.
func rejected(err error) bool {
	var ce *cmEventError
	return errors.As(err, &ce) && ce.e.Type == rdmacm.EventRejected
}

// cmWait returns the next event on ec, which must be want.
func cmWait(ctx context.Context, ec *rdmacm.EventChannel, want rdmacm.EventType) (rdmacm.Event, error) {
	e, err := ec.Get(ctx)
	if err != nil {
		return e, err
	}
	if e.Type != want {
		return e, &cmEventError{e, want}
	}
	return e, nil
}

// connectID resolves dst on a new ID of ec, has mk create its QP and
// connects it with param; it returns the ID once ESTABLISHED. With tos
// >= 0 the ID gets that type of service once its address is resolved, as
// perftest's rdma_cm_address_handler sets RDMA_OPTION_ID_TOS before
// rdma_resolve_route; with -1 its route has the CM's default_roce_tos. On
// error the ID is destroyed.
func connectID(ctx context.Context, cm *rdmacm.CM, ec *rdmacm.EventChannel, dst netip.AddrPort, tos int,
	mk func(*rdmacm.ID) error, param rdmacm.ConnParam) (*rdmacm.ID, error) {
	id, err := cm.CreateID(ec, rdmacm.PSTCP)
	if err != nil {
		return nil, err
	}
	err = func() error {
		if err := id.ResolveAddr(netip.Addr{}, dst, 2*time.Second); err != nil {
			return fmt.Errorf("rdma_resolve_addr failed: %w", err)
		}
		if _, err := cmWait(ctx, ec, rdmacm.EventAddrResolved); err != nil {
			return err
		}
		if tos >= 0 {
			if err := id.SetTOS(uint8(tos)); err != nil {
				return fmt.Errorf("Failed to set ToS(Type of Service) option for RDMA CM connection: %w", err)
			}
		}
		if err := id.ResolveRoute(2 * time.Second); err != nil {
			return fmt.Errorf("rdma_resolve_route failed: %w", err)
		}
		if _, err := cmWait(ctx, ec, rdmacm.EventRouteResolved); err != nil {
			return err
		}
		if err := mk(id); err != nil {
			return err
		}
		if err := id.Connect(param); err != nil {
			return fmt.Errorf("Function rdma_connect failed: %w", err)
		}
		_, err := cmWait(ctx, ec, rdmacm.EventEstablished)
		return err
	}()
	if err != nil {
		id.Destroy()
		return nil, err
	}
	return id, nil
}

// dialCMComm is rdma_client_connect for the exchange. perftest tries once;
// goroce retries while the server is not listening yet (a REJ), as
// perftest does for the test's QPs, so a client may start first.
func dialCMComm(ctx context.Context, cm *rdmacm.CM, server string, port int) (*comm, error) {
	a, err := resolveHost(ctx, server)
	if err != nil {
		return nil, err
	}
	dst := netip.AddrPortFrom(a, uint16(port))
	for try := 0; ; try++ {
		ec := cm.CreateEventChannel()
		var l *cmLink
		_, err := connectID(ctx, cm, ec, dst, -1, func(id *rdmacm.ID) (err error) {
			l, err = newCMLink(ctx, id, ec)
			return err
		}, rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
		if err == nil {
			l.established()
			return &comm{link: l, rdmaCM: true, client: true}, nil
		}
		if l != nil {
			l.id = nil // connectID destroyed it
			l.close()
		} else {
			ec.Close()
		}
		if ctx.Err() != nil || try+1 >= 5*cmRetries || !rejected(err) {
			return nil, fmt.Errorf("Unable to perform rdma_client function: %s:%d: %w", a, port, err)
		}
		time.Sleep(cmRetryDelay)
	}
}

// listenCMComm is rdma_server_connect for the exchange: listen on port,
// accept one connection, stop listening. ready, if set, is called once
// the listener is up.
func listenCMComm(ctx context.Context, cm *rdmacm.CM, port int, ready func()) (*comm, error) {
	lec := cm.CreateEventChannel()
	defer lec.Close()
	lid, err := cm.CreateID(lec, rdmacm.PSTCP)
	if err != nil {
		return nil, err
	}
	defer lid.Destroy()
	if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))); err != nil {
		return nil, fmt.Errorf("rdma_bind_addr failed: %w", err)
	}
	if err := lid.Listen(1); err != nil {
		return nil, fmt.Errorf("rdma_listen failed: %w", err)
	}
	if ready != nil {
		ready()
	}
	for {
		e, err := cmWait(ctx, lec, rdmacm.EventConnectRequest)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		ec := cm.CreateEventChannel()
		e.ID.Migrate(ec)
		l, err := newCMLink(ctx, e.ID, ec)
		if err == nil {
			if err = e.ID.Accept(rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}); err == nil {
				_, err = cmWait(ctx, ec, rdmacm.EventEstablished)
			}
			if err != nil {
				l.close()
			}
		} else {
			e.ID.Reject(nil)
			e.ID.Destroy()
			ec.Close()
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		l.established()
		return &comm{link: l, rdmaCM: true}, nil
	}
}

// cmDevice is the device the exchange's connection runs on.
func (c *comm) cmDevice() *verbs.Device {
	if l, ok := c.link.(*cmLink); ok {
		return l.dev
	}
	return nil
}

// cmData is the test QPs' RDMA CM state.
type cmData struct {
	ec  *rdmacm.EventChannel
	ids []*rdmacm.ID
}

func (d *cmData) close() {
	for _, id := range d.ids {
		if id != nil {
			id.Disconnect()
			id.Destroy()
		}
	}
	d.ids = nil
	if d.ec != nil {
		d.ec.Close()
	}
}

// connectCM is create_rdma_cm_connection: a handshake, the QPs connected
// through RDMA CM on the exchange's port, another handshake.
func (r *run) connectCM(ctx context.Context) error {
	if !r.client {
		// Listen before the sync: the client connects as soon as the
		// handshake ends, and perftest's client does not retry a REJECT
		// (invalid service ID, no listener yet): it exits, 6.06 with a
		// segmentation fault (TestLabInteropRDMACM, ib_write_bw -b).
		lid, err := r.listenCM()
		if err != nil {
			return fmt.Errorf("Failed to create RDMA CM connection: %w", err)
		}
		defer lid.Destroy()
	}
	if err := r.hs(); err != nil {
		return fmt.Errorf("Failed to sync between client and server before creating RDMA CM connection: %w", err)
	}
	param := rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}
	if r.Verb == Read || r.Verb == Atomic {
		param.ResponderResources, param.InitiatorDepth = uint8(min(r.outReads, 255)), uint8(min(r.outReads, 255))
	}
	var err error
	if r.client {
		err = r.connectCMClient(ctx, param)
	} else {
		err = r.connectCMServer(ctx, param)
	}
	if err != nil {
		return fmt.Errorf("Failed to create RDMA CM connection: %w", err)
	}
	for _, q := range r.qps {
		if err := r.setMy(q); err != nil {
			return err
		}
	}
	if err := r.hs(); err != nil {
		return fmt.Errorf("Failed to sync between client and server after creating RDMA CM connection: %w", err)
	}
	return nil
}

// cmQP creates QP i's QP through id, as create_qp_main does with a CM ID.
func (r *run) cmQP(id *rdmacm.ID, i int) error {
	q := r.qps[i]
	qp, err := id.CreateQP(r.pd, r.qpInit(q))
	if err != nil {
		return fmt.Errorf("Failed to create QP: %w", err)
	}
	q.qp = qp
	return nil
}

func (r *run) connectCMClient(ctx context.Context, param rdmacm.ConnParam) error {
	a, err := resolveHost(ctx, r.Server)
	if err != nil {
		return err
	}
	// -T: the test QPs' IDs get the TOS (not the exchange's, which
	// dialCMComm connects with the CM's default_roce_tos).
	tos := -1
	if r.SetTOS {
		tos = r.TOS
	}
	dst := netip.AddrPortFrom(a, uint16(r.Port))
	for try := 0; ; try++ {
		if r.cmd.ec != nil {
			r.cmd.ec.Close()
		}
		r.cmd.ec = r.CM.CreateEventChannel()
		d := &cmData{ec: r.cmd.ec}
		for i := range r.qps {
			id, err2 := connectID(ctx, r.CM, d.ec, dst, tos, func(id *rdmacm.ID) error { return r.cmQP(id, i) }, param)
			if err2 != nil {
				r.qps[i].qp = nil // destroyed with its ID
				err = err2
				break
			}
			d.ids = append(d.ids, id)
		}
		if len(d.ids) == len(r.qps) {
			r.cmd.ids = d.ids
			return nil
		}
		for _, id := range d.ids {
			id.Destroy()
		}
		for _, q := range r.qps {
			q.qp = nil
		}
		if ctx.Err() != nil || try+1 >= cmRetries || !rejected(err) {
			return fmt.Errorf("Failed to connect RDMA CM client, tried %d times: %w", try+1, err)
		}
		time.Sleep(cmRetryDelay)
	}
}

// listenCM is the server's listen ID for the test's QPs, on r.cmd.ec.
func (r *run) listenCM() (*rdmacm.ID, error) {
	r.cmd.ec = r.CM.CreateEventChannel()
	lid, err := r.CM.CreateID(r.cmd.ec, rdmacm.PSTCP)
	if err != nil {
		return nil, err
	}
	if err := lid.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(r.Port))); err != nil {
		lid.Destroy()
		return nil, fmt.Errorf("Failed to bind RDMA CM address on the server: %w", err)
	}
	if err := lid.Listen(r.NumQPs); err != nil {
		lid.Destroy()
		return nil, fmt.Errorf("Failed to listen on RDMA CM server listen ID: %w", err)
	}
	return lid, nil
}

// connectCMServer accepts the client's connections on the ID listenCM
// made.
func (r *run) connectCMServer(ctx context.Context, param rdmacm.ConnParam) error {
	established := 0
	for established < len(r.qps) {
		e, err := r.cmd.ec.Get(ctx)
		if err != nil {
			return err
		}
		switch e.Type {
		case rdmacm.EventConnectRequest:
			i := len(r.cmd.ids)
			if i == len(r.qps) {
				e.ID.Reject(nil)
				e.ID.Destroy()
				continue
			}
			if err := r.cmQP(e.ID, i); err != nil {
				e.ID.Reject(nil)
				e.ID.Destroy()
				return err
			}
			r.cmd.ids = append(r.cmd.ids, e.ID)
			if err := e.ID.Accept(param); err != nil {
				return fmt.Errorf("Failed to accept RDMA CM connection: %w", err)
			}
			// The server's RC QPs get perftest's RNR timer after the accept.
			r.qps[i].qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, MinRNRTimer: minRNRTimer}, verbs.AttrState|verbs.AttrMinRNRTimer)
		case rdmacm.EventEstablished:
			established++
		case rdmacm.EventConnectError, rdmacm.EventUnreachable, rdmacm.EventRejected, rdmacm.EventDisconnected:
			return fmt.Errorf("RDMA CM event error: Event: %v; error: %d: %v", e.Type, e.Status, e.Err)
		}
	}
	return nil
}
