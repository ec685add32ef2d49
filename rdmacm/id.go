package rdmacm

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/wire/mad"
)

// state is a CM ID's state (Linux enum rdma_cm_state, with the IB CM
// states folded in).
type state uint8

const (
	stIdle          state = iota
	stAddrBound           // bound or address resolved
	stRouteResolved       // ROUTE_RESOLVED
	stListen              // listening
	stReqSent             // active: REQ (or SIDR_REQ) sent, waiting for REP
	stReqRcvd             // passive: CONNECT_REQUEST delivered, waiting for Accept/Reject
	stRepSent             // passive: REP sent, waiting for RTU
	stRepRcvd             // active, no QP: CONNECT_RESPONSE delivered, waiting for Establish
	stEstablished         // connected
	stDreqSent            // DREQ sent, waiting for DREP
	stDreqRcvd            // DREQ received, DISCONNECTED delivered; Disconnect sends DREP
	stTimewait            // disconnected, in timewait
	stDone                // rejected, unreachable or out of timewait
	stDestroyed
)

var stateNames = [...]string{"IDLE", "ADDR_BOUND", "ROUTE_RESOLVED", "LISTEN", "REQ_SENT", "REQ_RCVD",
	"REP_SENT", "REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT", "DONE", "DESTROYED"}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// ID is struct rdma_cm_id. Its methods may be called from any goroutine.
type ID struct {
	cm *CM
	ec *EventChannel
	ps PortSpace

	// guarded by cm.mu:
	state     state
	src, dst  netip.AddrPort
	bound     bool
	ag        *agent
	sgid      uint8
	gidType   verbs.GIDType
	probe     probe // the other-version probe of an unanswered REQ
	tos       uint8 // the route's traffic class (passive: the REQ's)
	optTOS    uint8 // SetTOS's type of service, for the next ResolveRoute
	optTOSSet bool  // SetTOS was called (cma.c's tos_set)
	mtu       verbs.MTU
	qp        *verbs.QP
	listen    *ID // passive: the listener the request came to
	lcid      uint32
	rcid      uint32
	rguid     uint64
	rqpn      uint32
	rqkey     uint32
	rpsn      uint32
	psn       uint32
	rgid      netip.Addr
	flow      uint32
	tid       uint64
	remoteKey remoteKey                 // passive: key in cm.byRemote
	local     ConnParam                 // what this side asked for
	peer      ConnParam                 // what the peer's REQ/REP said, from this side's view
	rd        rdParams                  // the QP's RTR/RTS values, once the peer is known
	lastRTU   []byte                    // active: RTU sent, resent on a duplicate REP
	lastDREP  []byte                    // DREP sent, resent on a duplicate DREQ
	sidr      sidrKey                   // passive SIDR: key in cm.sidrs while the request is pending
	addrGone  bool                      // ADDR_CHANGE delivered: the source address left the device
	backlog   int                       // listener: CONNECT_REQUESTs it may have unread (rdma_listen's backlog)
	addrQuery func()                    // set while ResolveAddr's next-hop resolution runs: cancels it (resolve.go)
	gateway   netip.Addr                // the route's gateway to dst; invalid on-link or unknown
	notice    *cmTimer                  // tells Options.Logf what an unanswered MAD waits for (resolve.go)
	resNum    uint32                    // IDInfo.Num, once the ID has a device (resSet)
	mcasts    map[netip.Addr]netip.Addr // groups joined: IP address → MGID (mcast.go)
	resSet    bool

	// queued is how many of a listener's CONNECT_REQUESTs are queued and
	// not yet read: taken under cm.mu (admit), given back by the event
	// channel when one is read or discarded.
	queued atomic.Int32

	// retransmission, guarded by cm.mu
	msg     []byte // MAD waiting for an answer
	msgQPN  uint32
	retries int
	rto     time.Duration // how long msg waits for its answer; an MRA lengthens it
	mraRcvd bool          // the peer sent an MRA for msg (cm.c's MRA_REQ_RCVD/MRA_REP_RCVD)
	timer   *cmTimer      // the response timer (CM.after)
	twTimer *cmTimer      // timewait's
}

// rdParams are what the connection's QP needs beyond the path, as cm.c
// keeps them for ib_cm_init_qp_attr: RDMA READ/atomic depths each way,
// and the retry counts.
type rdParams struct {
	maxDestRd, maxRd uint8 // max_dest_rd_atomic (RTR), max_rd_atomic (RTS)
	retry, rnr       uint8 // retry_cnt, rnr_retry (RTS)
}

// CreateID is rdma_create_id: a new CM ID in port space ps whose events
// go to ec.
//
// Errors: EINVAL for a port space other than TCP, UDP and IB; ESHUTDOWN
// after Close.
func (cm *CM) CreateID(ec *EventChannel, ps PortSpace) (*ID, error) {
	switch ps {
	case PSTCP, PSUDP, PSIB:
	default:
		return nil, &verbs.Error{Op: "rdmacm: create_id", Detail: fmt.Sprintf("port space %v: valid are TCP, UDP and IB", ps), Err: syscall.EINVAL}
	}
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if cm.closed {
		return nil, &verbs.Error{Op: "rdmacm: create_id", Err: syscall.ESHUTDOWN}
	}
	// The Starting PSN is chosen now, as __rdma_create_id picks seq_num, so
	// InitQPAttr can give it before the REQ or REP carries it.
	id := &ID{cm: cm, ec: ec, ps: ps, psn: cm.rng.Uint32() & 0xFFFFFF}
	cm.ids[id] = struct{}{}
	return id, nil
}

// errorf is the *verbs.Error of the ID's operation op (as librdmacm
// names it without "rdma_": "resolve_route", "connect").
func (id *ID) errorf(op string, errno syscall.Errno, format string, args ...any) error {
	return &verbs.Error{Op: "rdmacm: " + op, Detail: fmt.Sprintf(format, args...), Err: errno}
}

// gidOf returns the GID an IP address has in a GID table.
func gidOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}

// ipOf returns the IP address of a GID.
func ipOf(g netip.Addr) netip.Addr {
	if g.Is4In6() {
		return g.Unmap()
	}
	return g
}

// agentFor returns the device with GID addr, if any. Called with cm.mu held.
func (cm *CM) agentFor(addr netip.Addr) *agent {
	g := gidOf(addr)
	for _, a := range cm.agents {
		for _, e := range a.dev.GIDs() {
			if e.GID == g {
				return a
			}
		}
	}
	return nil
}

// BindAddr is rdma_bind_addr: it binds the ID to a local address (the
// unspecified address binds to no device) and port (0 picks one).
//
// Errors: EINVAL if the ID is bound already; EADDRNOTAVAIL if no device
// has the address; EADDRINUSE if an ID is bound to the port on the same
// address, or either of them on the unspecified address.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return id.bind(addr)
}

// bind: called with cm.mu held.
func (id *ID) bind(addr netip.AddrPort) error {
	cm := id.cm
	if id.bound || id.state != stIdle {
		return id.errorf("bind_addr", syscall.EINVAL, "ID already bound (state %v)", id.state)
	}
	var ag *agent
	if a := addr.Addr(); a.IsValid() && !a.IsUnspecified() {
		if ag = cm.agentFor(a); ag == nil {
			return id.errorf("bind_addr", syscall.EADDRNOTAVAIL, "no device has address %v", a)
		}
	}
	port := addr.Port()
	if port == 0 {
		for {
			// Linux's ephemeral range, inet_get_local_port_range: 32768-60999.
			port = uint16(32768 + cm.rng.IntN(60999-32768+1))
			if len(cm.bound[portKey{id.ps, port}]) == 0 {
				break
			}
		}
	} else {
		for _, o := range cm.bound[portKey{id.ps, port}] {
			oa, na := o.src.Addr(), addr.Addr()
			if !oa.IsValid() || oa.IsUnspecified() || !na.IsValid() || na.IsUnspecified() || oa == na {
				return id.errorf("bind_addr", syscall.EADDRINUSE, "%v port %d is in use", id.ps, port)
			}
		}
	}
	id.src = netip.AddrPortFrom(addr.Addr(), port)
	id.ag = ag
	ag.track(id)
	id.bound = true
	k := portKey{id.ps, port}
	cm.bound[k] = append(cm.bound[k], id)
	id.state = stAddrBound
	return nil
}

func (id *ID) unbind() {
	if !id.bound {
		return
	}
	k := portKey{id.ps, id.src.Port()}
	l := id.cm.bound[k]
	for i, o := range l {
		if o == id {
			l = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(id.cm.bound, k)
	} else {
		id.cm.bound[k] = l
	}
	id.bound = false
}

// ResolveAddr is rdma_resolve_addr. The device is chosen as follows: the
// one holding src if src is given; else one holding dst (a loopback
// connection); else the first device added with AddRoutedDevice whose
// route to dst leaves through it (the source address is the route's), as
// Linux asks its routing table; else the first device added with
// AddDevice that has a GID of dst's family (IPv4-mapped or IPv6), whose
// address becomes the source. ADDR_RESOLVED or ADDR_ERROR follows (the
// routes' error, such as ENETUNREACH, when no device reaches dst). On a
// device whose Router is also a NextHopResolver (host.Device), the route's
// next hop is resolved first, as Linux's rdma_resolve_addr does, within
// timeout (0: DefaultResolveTimeout, rping's 2 s): a next hop that never
// answers ARP is ADDR_ERROR -ETIMEDOUT naming it (resolve.go).
//
// Errors: EINVAL for an unspecified destination, or an ID past
// ADDR_BOUND; BindAddr's for an unbound ID. That no device reaches dst
// is no error: ADDR_ERROR says it.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	cm := id.cm
	routes := cm.routesTo(id, src, dst.Addr()) // before cm.mu: a lookup asks the kernel
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if !dst.Addr().IsValid() || dst.Addr().IsUnspecified() {
		return id.errorf("resolve_addr", syscall.EINVAL, "destination %v", dst)
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if src.IsValid() {
		src = src.Unmap()
	}
	if !id.bound {
		if err := id.bind(netip.AddrPortFrom(src, 0)); err != nil {
			return err
		}
	} else if id.state != stAddrBound {
		return id.errorf("resolve_addr", syscall.EINVAL, "ID in state %v", id.state)
	} else if id.addrQuery != nil {
		return id.errorf("resolve_addr", syscall.EINVAL, "address resolution in progress")
	}
	ag := id.ag
	if ag == nil {
		ag = cm.agentFor(dst.Addr())
	}
	var routed netip.Addr
	var routeErr error
	for _, r := range routes {
		if ag != nil {
			break
		}
		if !slices.Contains(cm.agents, r.ag) {
			continue // removed meanwhile
		}
		if r.err != nil {
			routeErr = cmp.Or(routeErr, error(&verbs.Error{Device: r.ag.dev.Name(), Err: r.err}))
			continue
		}
		ag, routed = r.ag, r.src
	}
	if ag == nil {
		for _, a := range cm.agents {
			if a.router == nil && srcOf(a, dst.Addr()).IsValid() {
				ag = a
				break
			}
		}
	}
	if ag == nil {
		err := &verbs.Error{Op: "rdmacm", Detail: fmt.Sprintf("no device reaches %v", dst.Addr()), Err: syscall.EHOSTUNREACH}
		if routeErr != nil {
			err.Err = routeErr
		}
		status := -int(syscall.EHOSTUNREACH)
		var errno syscall.Errno
		if errors.As(err, &errno) {
			status = -int(errno)
		}
		id.emit(Event{Type: EventAddrError, ID: id, Status: status, Err: err})
		return nil
	}
	s := id.src.Addr()
	if !s.IsValid() || s.IsUnspecified() {
		switch {
		case cm.agentFor(dst.Addr()) == ag:
			s = dst.Addr()
		case routed.IsValid():
			s = routed
		default:
			s = srcOf(ag, dst.Addr())
		}
	}
	id.ag, id.src, id.dst = ag, netip.AddrPortFrom(s, id.src.Port()), dst
	id.gateway = netip.Addr{}
	// A multicast destination has no next hop to ask: its MAC is the
	// group's (the kernel's neighbour for it is NUD_NOARP, arp_mc_map).
	if nr, ok := ag.router.(NextHopResolver); ok && cm.agentFor(dst.Addr()) != ag && !cm.closed && !dst.Addr().IsMulticast() {
		// ADDR_RESOLVED once the next hop answers (resolve.go).
		id.queryAddr(nr, dst.Addr(), timeout)
		return nil
	}
	id.emit(Event{Type: EventAddrResolved, ID: id})
	return nil
}

// route is one routed device's answer for a destination.
type route struct {
	ag  *agent
	src netip.Addr
	err error
}

// routesTo asks each device added with a Router how it reaches dst, in
// the order they were added, unless ResolveAddr will not need it (a
// source address or a bound device, or a device holding dst). Called
// without cm.mu: the lookups ask the kernel.
func (cm *CM) routesTo(id *ID, src, dst netip.Addr) []route {
	if src.IsValid() && !src.IsUnspecified() || !dst.IsValid() {
		return nil
	}
	cm.mu.Lock()
	var routers []*agent
	if id.ag == nil && cm.agentFor(dst.Unmap()) == nil {
		for _, a := range cm.agents {
			if a.router != nil {
				routers = append(routers, a)
			}
		}
	}
	cm.mu.Unlock()
	var out []route
	for _, a := range routers {
		s, err := a.router.RouteTo(dst.Unmap())
		out = append(out, route{ag: a, src: s, err: err})
		if err == nil {
			break
		}
	}
	return out
}

func srcOf(a *agent, dst netip.Addr) netip.Addr {
	var best netip.Addr
	for _, e := range a.dev.GIDs() {
		if e.GID.Is4In6() != dst.Is4() || (!dst.Is4() && e.GID.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast()) {
			continue
		}
		if !best.IsValid() || e.Type == verbs.GIDTypeRoCEv2 {
			best = ipOf(e.GID)
		}
		if e.Type == verbs.GIDTypeRoCEv2 {
			break
		}
	}
	return best
}

// defaults returns the RoCE mode and ToS new connections on a use.
func (cm *CM) defaults(a *agent) (verbs.GIDType, uint8, error) {
	if d := cm.opts.Defaults; d != nil {
		v, err := d.DefaultMode(a.dev.Name(), 1)
		if err != nil {
			return 0, 0, err
		}
		tos, err := d.DefaultTOS(a.dev.Name(), 1)
		if err != nil {
			return 0, 0, err
		}
		return verbs.GIDTypeFor(v), tos, nil
	}
	mode := verbs.GIDTypeRoCEv1
	for _, e := range a.dev.GIDs() {
		if e.Type == verbs.GIDTypeRoCEv2 {
			mode = verbs.GIDTypeRoCEv2
		}
	}
	return mode, 0, nil
}

// SetTOS is rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
// 1), the kernel's rdma_set_service_type: the ID's type of service (IP
// TOS, RoCE traffic class), which the next ResolveRoute gives its route
// instead of the port's default_roce_tos. Every packet of the connection
// then carries it both ways (its REQ, RTU and DREQ/DREP, whose REQ names
// it as the primary path's traffic class, and its QP's data and ACKs; the
// peer's REP and QP take it from the REQ), as do a UD ID's SIDR_REQ and
// UDParam.
//
// As with Linux, it is accepted in any state, and the last call before
// ResolveRoute wins; set after ResolveRoute it leaves the resolved route
// (and so the connection) as it is. On a passive ID it changes nothing:
// Linux's RoCE connection IDs take their path, traffic class included,
// from the peer's REQ, not from their listener's or their own TOS (a
// listener's TOS reaches only iWARP's connections). The only error is
// EINVAL on a destroyed ID.
func (id *ID) SetTOS(tos uint8) error {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if id.state == stDestroyed {
		return id.errorf("set_option", syscall.EINVAL, "RDMA_OPTION_ID_TOS: the ID is destroyed")
	}
	id.optTOS, id.optTOSSet = tos, true
	return nil
}

// ResolveRoute is rdma_resolve_route: path MTU = the port's active MTU,
// traffic class = the ID's TOS (SetTOS) or else default_roce_tos, GID type
// = default_roce_mode (the source GID index is that of the source address
// with that type). ROUTE_RESOLVED or ROUTE_ERROR follows.
//
// Errors: EINVAL before ADDR_RESOLVED. A port without a GID of
// default_roce_mode for the source address is ROUTE_ERROR (status
// -EINVAL), not an error.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.state != stAddrBound || id.ag == nil || !id.dst.IsValid() || id.addrQuery != nil {
		return id.errorf("resolve_route", syscall.EINVAL, "address not resolved (state %v)", id.state)
	}
	mode, tos, err := cm.defaults(id.ag)
	if err != nil {
		id.emit(Event{Type: EventRouteError, ID: id, Status: -int(syscall.EINVAL), Err: err})
		return nil
	}
	if mode, err = id.routeType(mode); err != nil {
		id.emit(Event{Type: EventRouteError, ID: id, Status: -int(syscall.ENETUNREACH), Err: err})
		return nil
	}
	sgid, ok := id.ag.gidIndex(gidOf(id.src.Addr()), mode)
	if !ok {
		id.emit(Event{Type: EventRouteError, ID: id, Status: -int(syscall.EINVAL),
			Err: &verbs.Error{Op: "rdmacm: resolve_route", Device: id.ag.dev.Name(), Err: syscall.EINVAL,
				Detail: fmt.Sprintf("device %s has no %v GID for %v (default_roce_mode is %v)", id.ag.dev.Name(), mode, id.src.Addr(), mode)}})
		return nil
	}
	if id.optTOSSet { // cma_resolve_iboe_route: tos_set ? tos : default_roce_tos
		tos = id.optTOS
	}
	id.sgid, id.gidType, id.tos, id.mtu = sgid, mode, tos, id.ag.dev.ActiveMTU()
	id.rgid = gidOf(id.dst.Addr())
	id.flow = 0
	if mode == verbs.GIDTypeRoCEv2 {
		// cma_get_roce_udp_flow_label: (sport × 31 + dport) & 0xFFFFF.
		id.flow = (uint32(id.src.Port())*31 + uint32(id.dst.Port())) & 0xFFFFF
	}
	id.state = stRouteResolved
	id.emit(Event{Type: EventRouteResolved, ID: id})
	return nil
}

// CreateQP is rdma_create_qp: a QP on the ID's device, moved to INIT as
// rdma_cm does (RC: remote write, plus read and atomic; UD: Q_Key
// 0x01234567, RDMA_UDP_QKEY).
//
// Errors: EINVAL before the ID has a device, or for a PD on another
// device than the ID's (the error says which device ResolveAddr chose,
// why, and what source address to give instead); EEXIST if the ID has a
// QP; the verbs error of creating the QP or moving it to INIT (an errno
// too: EINVAL, ENOMEM).
func (id *ID) CreateQP(pd *verbs.PD, init verbs.QPInitAttr) (*verbs.QP, error) {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.ag == nil {
		return nil, id.errorf("create_qp", syscall.EINVAL, "ID has no device yet")
	}
	if pd.Device() != id.ag.dev {
		return nil, id.errorf("create_qp", syscall.EINVAL, "PD is on device %s, the ID on %s%s",
			pd.Device().Name(), id.ag.dev.Name(), id.wrongDeviceHint(pd.Device()))
	}
	if id.qp != nil {
		return nil, id.errorf("create_qp", syscall.EEXIST, "ID has QP %d", id.qp.Num())
	}
	qp, err := pd.CreateQP(init)
	if err != nil {
		return nil, err
	}
	attr, mask := initAttr(init.Type == verbs.UD)
	if err := qp.Modify(&attr, mask); err != nil {
		qp.Destroy()
		return nil, err
	}
	if init.Type == verbs.UD {
		err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
		if err == nil {
			err = qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0}, verbs.AttrState|verbs.AttrSQPSN)
		}
		if err != nil {
			qp.Destroy()
			return nil, err
		}
	}
	id.qp = qp
	return qp, nil
}

// wrongDeviceHint says, for a PD on dev that is not the ID's device, why
// the ID is where it is and what to set to connect from dev instead.
// Called with cm.mu held.
func (id *ID) wrongDeviceHint(dev *verbs.Device) string {
	s := fmt.Sprintf(" (ResolveAddr chose %s for source address %v", id.ag.dev.Name(), id.src.Addr())
	if id.dst.Addr().IsValid() && id.cm.agentFor(id.dst.Addr()) == id.ag {
		s += fmt.Sprintf(", which holds the destination %v", id.dst.Addr())
	}
	s += "): make the PD on " + id.ag.dev.Name() + ", or connect from " + dev.Name() +
		" by giving one of its addresses as the source (Endpoint.Src for Dial, src for ResolveAddr"
	for _, a := range id.cm.agents {
		if a.dev != dev {
			continue
		}
		if src := srcOf(a, id.dst.Addr()); src.IsValid() {
			s += fmt.Sprintf(": %v", src)
		}
		return s + ")"
	}
	return s + "; and add " + dev.Name() + " to the CM: AddDevice or AddRoutedDevice)"
}

// initAttr returns the INIT attributes rdma_cm gives a connection's QP
// (RC: remote write, plus read and atomic; UD: Q_Key RDMA_UDP_QKEY).
func initAttr(ud bool) (verbs.QPAttr, verbs.QPAttrMask) {
	attr := verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}
	mask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort
	if ud {
		attr.QKey, mask = udpQKey, mask|verbs.AttrQKey
	} else {
		attr.AccessFlags, mask = verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic, mask|verbs.AttrAccessFlags
	}
	return attr, mask
}

// QP returns the ID's QP, nil before CreateQP.
func (id *ID) QP() *verbs.QP {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.qp
}

// Device returns the ID's device, nil before it has one.
func (id *ID) Device() *verbs.Device {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if id.ag == nil {
		return nil
	}
	return id.ag.dev
}

// LocalAddr and RemoteAddr are rdma_get_local_addr and rdma_get_peer_addr.
func (id *ID) LocalAddr() netip.AddrPort {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.src
}

// RemoteAddr returns the peer's address.
func (id *ID) RemoteAddr() netip.AddrPort {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.dst
}

// Listen is rdma_listen: CONNECT_REQUEST events for the bound port follow.
// An unbound ID is bound to the unspecified address and a free port.
//
// backlog is how many CONNECT_REQUESTs may wait unread on the event
// channel, as Linux's ucma counts them (ucma_listen): 1 to
// Options.MaxBacklog (default 1024, net.rdma_ucm.max_backlog) as given,
// that maximum for 0, a negative value or more. A REQ beyond it is dropped
// without a REJ, so the requester's retry may find room once the consumer
// has read its events; a SIDR_REQ beyond it is answered with SIDR_REP
// status Reject. Each counts as cm_listen_drops (CM.Counters).
//
// Errors: EINVAL if the ID is connecting or connected; EADDRINUSE if the
// port has a listener; BindAddr's for an unbound ID.
func (id *ID) Listen(backlog int) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if !id.bound {
		if err := id.bind(netip.AddrPort{}); err != nil {
			return err
		}
	}
	if id.state != stAddrBound {
		return id.errorf("listen", syscall.EINVAL, "ID in state %v", id.state)
	}
	k := portKey{id.ps, id.src.Port()}
	if o := cm.listeners[k]; o != nil {
		return id.errorf("listen", syscall.EADDRINUSE, "%v port %d has a listener", id.ps, k.port)
	}
	if backlog <= 0 || backlog > cm.opts.MaxBacklog {
		backlog = cm.opts.MaxBacklog
	}
	cm.listeners[k] = id
	id.backlog = backlog
	id.state = stListen
	return nil
}

// rtrRTS moves the connected QP, if the ID has one, to RTR then RTS.
// Called with cm.mu held.
func (id *ID) rtrRTS() error {
	if id.qp == nil {
		return nil
	}
	for _, st := range []verbs.QPState{verbs.QPSRTR, verbs.QPSRTS} {
		attr, mask, err := id.qpAttr(st)
		if err == nil {
			err = id.qp.Modify(&attr, mask)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// InitQPAttr is rdma_init_qp_attr: the attributes, and the mask saying
// which to apply, that move a QP to state st for this ID's connection,
// for a caller who drives its QP itself (an ID without a QP: Connect or
// Accept with ConnParam.QPNum). INIT: port 1, P_Key index 0, and remote
// access (RC) or Q_Key 0x01234567 (UD), as CreateQP gives them. RTR: the
// path to the peer (GID, flow label, traffic class, hop limit), path MTU,
// the peer's QP number, this side's Starting PSN as rq_psn (the PSN this
// side expects, which its REQ or REP carries) and max_dest_rd_atomic.
// RTS: the peer's Starting PSN as sq_psn, local ACK timeout 19, retry
// and RNR retry counts and max_rd_atomic. RTR and RTS of an RC QP need
// the peer: the passive side has it from CONNECT_REQUEST (before Accept
// the READ depths are the REQ's, after it Accept's), the active side from
// CONNECT_RESPONSE; before that they are EINVAL, as ib_cm_init_qp_attr
// refuses them. A UD QP's RTR and RTS need nothing (sq_psn 0).
//
// Errors: EINVAL before the ID has a device, for a state other than
// INIT, RTR and RTS, or for RTR and RTS before the peer is known.
func (id *ID) InitQPAttr(st verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.qpAttr(st)
}

// qpAttr is InitQPAttr. Called with cm.mu held.
func (id *ID) qpAttr(st verbs.QPState) (verbs.QPAttr, verbs.QPAttrMask, error) {
	if id.ag == nil {
		return verbs.QPAttr{}, 0, id.errorf("init_qp_attr", syscall.EINVAL, "ID has no device yet")
	}
	ud := id.ps == PSUDP || id.rqkey != 0 || id.qp != nil && id.qp.Type() == verbs.UD
	switch {
	case st == verbs.QPSInit:
		attr, mask := initAttr(ud)
		return attr, mask, nil
	case ud && st == verbs.QPSRTR:
		return verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState, nil
	case ud && st == verbs.QPSRTS:
		return verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN, nil
	case st != verbs.QPSRTR && st != verbs.QPSRTS:
		return verbs.QPAttr{}, 0, id.errorf("init_qp_attr", syscall.EINVAL, "state %v: INIT, RTR or RTS", st)
	}
	switch id.state {
	case stReqRcvd, stRepSent, stRepRcvd, stEstablished:
	default:
		return verbs.QPAttr{}, 0, id.errorf("init_qp_attr", syscall.EINVAL, "%v needs the peer's QP, known after CONNECT_REQUEST or CONNECT_RESPONSE (state %v)", st, id.state)
	}
	// Each side's Starting PSN (in its REQ or REP) is the PSN it expects to
	// receive, as Linux's cm.c uses it (rdma_init_qp_attr sets rq_psn to
	// the ID's own seq_num, ib_cm_init_qp_attr sq_psn to the peer's): so
	// the receive queue starts at our own PSN and the send queue at the
	// peer's. The rping capture in ../shared/traces shows it: the client's
	// first SEND carries the REP's PSN, the server's first READ the REQ's.
	if st == verbs.QPSRTR {
		return verbs.QPAttr{State: verbs.QPSRTR, PathMTU: id.mtu, DestQPN: id.rqpn, RQPSN: wirePSN(id.psn),
				MaxDestRdAtomic: id.rd.maxDestRd, MinRNRTimer: 0,
				AH: verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: id.rgid, FlowLabel: id.flow,
					SGIDIndex: id.sgid, HopLimit: hopLimit, TrafficClass: id.tos}}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN |
				verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer, nil
	}
	return verbs.QPAttr{State: verbs.QPSRTS, SQPSN: wirePSN(id.rpsn), Timeout: localACKTimeout, RetryCnt: id.rd.retry,
			RNRRetry: id.rd.rnr, MaxRdAtomic: id.rd.maxRd},
		verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic, nil
}

// qpNum is the number of the ID's QP: its own, or the one the caller
// named in ConnParam.QPNum for a QP it drives itself.
func (id *ID) qpNum() uint32 {
	if id.qp != nil {
		return id.qp.Num()
	}
	return id.local.QPNum
}

// toErr moves the QP to ERR, flushing its work requests.
func (id *ID) toErr() {
	if id.qp != nil && id.qp.State() != verbs.QPSReset {
		id.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState)
	}
}

// Connect is rdma_connect: it sends a REQ (RC, port space TCP or IB) or a
// SIDR_REQ (UD, port space UDP) with Linux's field values. ESTABLISHED,
// REJECTED or UNREACHABLE follows.
//
// An RC ID without a QP connects the QP numbered p.QPNum, which the caller
// drives itself (rdma_connect's conn_param->qp_num): the REP then brings
// CONNECT_RESPONSE instead of ESTABLISHED, the caller moves its QP to RTR
// and RTS (InitQPAttr) and calls Establish, which sends the RTU. p.QPNum 0
// is EINVAL there (no QP at all: call CreateQP first).
//
// Errors: EINVAL before ROUTE_RESOLVED, for private data over 56 bytes
// (SIDR_REQ: 180), a retry or RNR retry count over 7, or no QP and no
// p.QPNum.
func (id *ID) Connect(p ConnParam) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.state != stRouteResolved {
		return id.errorf("connect", syscall.EINVAL, "route not resolved (state %v)", id.state)
	}
	if id.ps == PSUDP || (id.qp != nil && id.qp.Type() == verbs.UD) {
		return id.connectSIDR(p)
	}
	if len(p.PrivateData) > mad.RDMACMMaxREQPrivateData {
		return id.errorf("connect", syscall.EINVAL, "private data of %d bytes: at most %d", len(p.PrivateData), mad.RDMACMMaxREQPrivateData)
	}
	if p.RetryCount > 7 || p.RNRRetryCount > 7 {
		return id.errorf("connect", syscall.EINVAL, "retry_count %d, rnr_retry_count %d: valid 0-7", p.RetryCount, p.RNRRetryCount)
	}
	if id.qp == nil && p.QPNum == 0 {
		return id.errorf("connect", syscall.EINVAL, "no QP: call CreateQP first, or give ConnParam.QPNum for a QP you drive yourself")
	}
	id.local = p
	id.lcid = cm.newCommID()
	cm.byLocal[id.lcid] = id
	id.tid = id.ag.tid(id.lcid)
	id.msg = buildMAD(mad.AttrREQ, id.tid, id.reqFields(p))
	id.msgQPN = 1
	id.state = stReqSent
	id.sendArm()
	return nil
}

// ipcmHeader returns the cma_hdr of the ID's REQ or SIDR_REQ.
func (id *ID) ipcmHeader() []byte {
	v := uint8(4)
	if !id.src.Addr().Is4() {
		v = 6
	}
	return mad.IPCMHeaderFields{IPVersion: v, SrcPort: id.src.Port(), SrcAddr: id.src.Addr(), DstAddr: id.dst.Addr()}.Append(nil)
}

// reqFields builds the REQ as cma.c and cm.c fill it.
func (id *ID) reqFields(p ConnParam) mad.REQFields {
	f := mad.REQFields{
		LocalCommID:             id.lcid,
		ServiceID:               mad.NewIPCMServiceID(id.ps, id.dst.Port()),
		LocalCAGUID:             id.ag.dev.GUID(),
		LocalQPN:                id.qpNum(),
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: cmResponseTimeout,
		TransportServiceType:    mad.TransportRC,
		EndToEndFlowControl:     p.FlowControl,
		StartingPSN:             id.psn,
		LocalCMResponseTimeout:  cmResponseTimeout,
		RetryCount:              p.RetryCount,
		PartitionKey:            defaultPKey,
		PathPacketPayloadMTU:    uint8(id.mtu),
		RNRRetryCount:           p.RNRRetryCount,
		MaxCMRetries:            uint8(min(id.cm.opts.MaxRetries, maxCMRetries)),
		Primary: mad.REQPath{
			LocalPortLID: lidPermissive, RemotePortLID: lidPermissive,
			LocalPortGID: gidOf(id.src.Addr()).As16(), RemotePortGID: id.rgid.As16(),
			FlowLabel: id.flow, TrafficClass: id.tos, HopLimit: hopLimit, LocalACKTimeout: localACKTimeout,
		},
	}
	n := copy(f.PrivateData[:], id.ipcmHeader())
	copy(f.PrivateData[n:], p.PrivateData)
	return f
}

// sendArm sends id.msg and starts its response timer.
func (id *ID) sendArm() {
	id.retries = 0
	id.rto, id.mraRcvd = id.cm.opts.ResponseTimeout, false
	id.ag.send(id.rgid, id.sgid, id.tos, id.msg, id.msgQPN)
	id.arm(id.rto)
	id.armNotice()
}

// arm (re)starts the response timer: timeout runs after d. Called with
// cm.mu held.
func (id *ID) arm(d time.Duration) {
	id.cm.stopTimer(id.timer)
	id.timer = id.cm.after(d, id.timeout)
}

// disarm stops the response timer; the MAD waiting for an answer is
// forgotten.
func (id *ID) disarm() {
	id.stopNotice()
	id.cm.stopTimer(id.timer)
	id.timer = nil
	id.msg = nil
}

func (id *ID) stopTimewait() {
	id.cm.stopTimer(id.twTimer)
	id.twTimer = nil
}

// timeout resends the waiting MAD or, after the last retry, gives up as
// cm.c does (REQ/REP: UNREACHABLE -ETIMEDOUT; DREQ: DISCONNECTED
// -ETIMEDOUT). After an MRA each retry waits the MRA's longer time, as
// ib_modify_mad leaves it.
func (id *ID) timeout() {
	if id.msg == nil {
		return
	}
	if id.retries < id.cm.opts.MaxRetries {
		id.retries++
		id.ag.send(id.rgid, id.sgid, id.tos, id.msg, id.msgQPN)
		id.arm(id.rto)
		if id.state == stReqSent && !id.mraRcvd { // an MRA says the peer's CM has the REQ
			if id.retries == 1 {
				id.probeOtherVersion()
			} else {
				id.reportMismatch()
			}
		}
		return
	}
	id.disarm()
	switch id.state {
	case stReqSent, stRepSent:
		repSent := id.state == stRepSent
		// cm.c sends a REJ with reason Timeout when it gives up.
		if id.state == stReqSent && id.ps != PSUDP {
			id.sendREJ(mad.MsgREQ, mad.RejectTimeout, nil)
		}
		id.forget()
		id.state = stDone
		detail := fmt.Sprintf("%v no answer from the peer's CM after %d tries", id.dst, id.cm.opts.MaxRetries+1)
		switch {
		case repSent:
			// The peer's CM did answer (with its REQ); what never came is
			// the RTU for our REP. The half-open connection is given up
			// (cm.c's REP_ERROR): counted, as a peer that sends REQs and
			// never an RTU is how a listener is flooded.
			id.ag.count(ctrRTUTimeouts)
			detail = fmt.Sprintf("%v sent no RTU for our REP after %d tries", id.dst, id.cm.opts.MaxRetries+1)
			if id.mraRcvd {
				detail += "; the peer's CM acknowledged the REP (MRA) but its consumer did not call rdma_establish in time"
			}
		default:
			if d := id.unreachableDiagnosis(); d != "" {
				detail += "; " + d
			}
		}
		id.emit(Event{Type: EventUnreachable, ID: id, Status: -int(syscall.ETIMEDOUT),
			Err: &verbs.Error{Op: "rdmacm", Detail: detail, Err: syscall.ETIMEDOUT}})
	case stDreqSent:
		// cma.c turns IB_CM_DREQ_ERROR into DISCONNECTED with -ETIMEDOUT.
		id.emit(Event{Type: EventDisconnected, ID: id, Status: -int(syscall.ETIMEDOUT),
			Err: &verbs.Error{Op: "rdmacm", Detail: fmt.Sprintf("%v: no DREP after %d DREQs", id.dst, id.cm.opts.MaxRetries+1), Err: syscall.ETIMEDOUT}})
		id.enterTimewait()
	}
}

// forget removes the ID from the comm ID tables.
func (id *ID) forget() {
	cm := id.cm
	for _, tid := range []uint64{id.probe.tid, id.probe.sameTID} {
		if tid != 0 && cm.probes[tid] == id {
			delete(cm.probes, tid)
		}
	}
	if id.lcid != 0 && cm.byLocal[id.lcid] == id {
		delete(cm.byLocal, id.lcid)
		cm.byLocal = shrunk(cm.byLocal, &cm.peaks.byLocal)
	}
	if id.remoteKey != (remoteKey{}) && cm.byRemote[id.remoteKey] == id {
		delete(cm.byRemote, id.remoteKey)
		cm.byRemote = shrunk(cm.byRemote, &cm.peaks.byRemote)
	}
	if id.sidr != (sidrKey{}) && cm.sidrs[id.sidr] == id {
		delete(cm.sidrs, id.sidr)
		cm.sidrs = shrunk(cm.sidrs, &cm.peaks.sidrs)
	}
}

func (id *ID) enterTimewait() {
	id.state = stTimewait
	id.stopTimewait()
	id.twTimer = id.cm.after(id.cm.opts.Timewait, func() {
		id.twTimer = nil
		if id.state != stTimewait {
			return
		}
		id.forget()
		id.state = stDone
		id.emit(Event{Type: EventTimewaitExit, ID: id})
	})
}

// sendREJ rejects the peer's REQ or REP.
func (id *ID) sendREJ(msg mad.MsgType, reason mad.RejectReason, pd []byte) {
	f := mad.REJFields{LocalCommID: id.lcid, RemoteCommID: id.rcid, MessageRejected: msg, Reason: reason}
	copy(f.PrivateData[:], pd)
	id.ag.send(id.rgid, id.sgid, id.tos, buildMAD(mad.AttrREJ, id.tid, f), 1)
}

// Accept is rdma_accept on an ID from CONNECT_REQUEST: as cma_accept_ib it
// moves the QP to RTR and RTS, then sends the REP; ESTABLISHED follows the
// RTU. For UD it sends a SIDR_REP. An ID without a QP answers for the QP
// numbered p.QPNum, which the caller drives itself (InitQPAttr; RTR and
// RTS before Accept, as cma_accept_ib does them); p.QPNum 0 is EINVAL
// there.
//
// Errors: EINVAL with no CONNECT_REQUEST pending, for private data over
// 196 bytes (SIDR_REP: 136), an RNR retry count over 7, or no QP and no
// p.QPNum; the verbs error of moving the QP to RTR or RTS.
func (id *ID) Accept(p ConnParam) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.state != stReqRcvd {
		return id.errorf("accept", syscall.EINVAL, "no connection request pending (state %v)", id.state)
	}
	if id.ps == PSUDP || id.rqkey != 0 {
		return id.acceptSIDR(p)
	}
	if len(p.PrivateData) > mad.RDMACMMaxREPPrivateData {
		return id.errorf("accept", syscall.EINVAL, "private data of %d bytes: at most %d", len(p.PrivateData), mad.RDMACMMaxREPPrivateData)
	}
	if id.qp == nil && p.QPNum == 0 {
		return id.errorf("accept", syscall.EINVAL, "no QP: call CreateQP first, or give ConnParam.QPNum for a QP you drive yourself")
	}
	if p.RNRRetryCount > 7 {
		return id.errorf("accept", syscall.EINVAL, "rnr_retry_count %d: valid 0-7", p.RNRRetryCount)
	}
	id.local = p
	id.rd.maxDestRd, id.rd.maxRd = p.ResponderResources, p.InitiatorDepth
	if err := id.rtrRTS(); err != nil {
		return err
	}
	f := mad.REPFields{LocalCommID: id.lcid, RemoteCommID: id.rcid, LocalQPN: id.qpNum(), StartingPSN: id.psn,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth, TargetACKDelay: targetACKDelay,
		RNRRetryCount: p.RNRRetryCount, EndToEndFlowControl: p.FlowControl, LocalCAGUID: id.ag.dev.GUID()}
	copy(f.PrivateData[:], p.PrivateData)
	id.msg = buildMAD(mad.AttrREP, id.tid, f)
	id.msgQPN = 1
	id.state = stRepSent
	id.sendArm()
	return nil
}

// Reject is rdma_reject: a REJ with reason Consumer Reject (28) and private
// data (at most 148 bytes), for a CONNECT_REQUEST or, on the active side,
// a CONNECT_RESPONSE (the REJ then rejects the REP, as cm.c's does from
// REP_RCVD).
//
// Errors: EINVAL with no request or response pending, or for private
// data over 148 bytes (SIDR_REP: 136).
func (id *ID) Reject(privateData []byte) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.state != stReqRcvd && id.state != stRepRcvd {
		return id.errorf("reject", syscall.EINVAL, "no connection request or response pending (state %v)", id.state)
	}
	if id.rqkey != 0 {
		return id.rejectSIDR(privateData)
	}
	if len(privateData) > mad.RDMACMMaxREJPrivateData {
		return id.errorf("reject", syscall.EINVAL, "private data of %d bytes: at most %d", len(privateData), mad.RDMACMMaxREJPrivateData)
	}
	msg := mad.MsgREQ
	if id.state == stRepRcvd {
		msg = mad.MsgREP
	}
	id.sendREJ(msg, mad.RejectConsumer, privateData)
	id.forget()
	id.state = stDone
	return nil
}

// Establish is rdma_establish: after CONNECT_RESPONSE on an ID without a
// QP, whose QP the caller has moved to RTR and RTS itself (InitQPAttr),
// it sends the RTU. The peer gets ESTABLISHED; this side gets no event,
// as with librdmacm (rdma_establish sends the RTU through rdma_accept and
// the kernel reports nothing to the active side). A repeated REP is
// answered with the RTU again. EINVAL on an ID with a QP (the CM moved it
// and sent the RTU itself) or with no connection response pending.
func (id *ID) Establish() error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	if id.qp != nil {
		return id.errorf("establish", syscall.EINVAL, "the ID has QP %d: the CM completes its connection itself", id.qp.Num())
	}
	if id.state != stRepRcvd {
		return id.errorf("establish", syscall.EINVAL, "no connection response pending (state %v)", id.state)
	}
	id.lastRTU = buildMAD(mad.AttrRTU, id.tid, mad.RTUFields{LocalCommID: id.lcid, RemoteCommID: id.rcid})
	id.ag.send(id.rgid, id.sgid, id.tos, id.lastRTU, 1)
	id.state = stEstablished
	return nil
}

// Disconnect is rdma_disconnect: the QP goes to ERR and a DREQ is sent, or,
// after the peer's DREQ (DISCONNECTED delivered), the DREP. DISCONNECTED
// follows the DREP (or the DREQ's last timeout, with -ETIMEDOUT),
// TIMEWAIT_EXIT the timewait.
//
// Errors: EINVAL if the ID is not connected (nor has the peer's DREQ).
func (id *ID) Disconnect() error { return id.DisconnectWithData(nil) }

// DisconnectWithData is Disconnect with private data in the DREQ (at most
// 220 bytes) or, after the peer's DREQ, in the DREP (at most 224), as the
// kernel's ib_send_cm_dreq and ib_send_cm_drep carry it; longer is EINVAL.
// The peer's DISCONNECTED event has it in PrivateData. rdma_disconnect has
// no private data, so a librdmacm peer never sees it.
func (id *ID) DisconnectWithData(privateData []byte) error {
	cm := id.cm
	cm.mu.Lock()
	defer cm.mu.Unlock()
	switch id.state {
	case stEstablished, stRepSent:
		if len(privateData) > mad.RDMACMMaxDREQPrivateData {
			return id.errorf("disconnect", syscall.EINVAL, "DREQ private data of %d bytes: at most %d", len(privateData), mad.RDMACMMaxDREQPrivateData)
		}
		id.disarm()
		id.toErr()
		f := mad.DREQFields{LocalCommID: id.lcid, RemoteCommID: id.rcid, RemoteQPN: id.rqpn}
		copy(f.PrivateData[:], privateData)
		id.msg = buildMAD(mad.AttrDREQ, id.ag.tid(id.lcid), f)
		id.msgQPN = 1
		id.state = stDreqSent
		id.sendArm()
		return nil
	case stDreqRcvd:
		if len(privateData) > mad.DREPPrivateDataLen {
			return id.errorf("disconnect", syscall.EINVAL, "DREP private data of %d bytes: at most %d", len(privateData), mad.DREPPrivateDataLen)
		}
		if len(privateData) > 0 {
			// Kept: a repeated DREQ in timewait gets the same DREP.
			id.lastDREP = id.drep(mad.Header(id.lastDREP).TransactionID(), privateData)
		}
		id.toErr()
		id.ag.send(id.rgid, id.sgid, id.tos, id.lastDREP, 1)
		id.enterTimewait()
		return nil
	}
	return id.errorf("disconnect", syscall.EINVAL, "not connected (state %v)", id.state)
}

// drep builds the ID's DREP answering the DREQ of transaction tid.
func (id *ID) drep(tid uint64, privateData []byte) []byte {
	f := mad.DREPFields{LocalCommID: id.lcid, RemoteCommID: id.rcid}
	copy(f.PrivateData[:], privateData)
	return buildMAD(mad.AttrDREP, tid, f)
}

// Destroy is rdma_destroy_id: what the ID still owes the peer is sent (REJ
// for an unanswered request or response, SIDR_REP with status Reject for
// an unanswered SIDR request, DREQ for a connection, DREP for a DREQ), and
// its timers stop. The QP, if any, is destroyed. A listener's
// CONNECT_REQUESTs still unread on its channel go too (their REQs
// rejected), as ucma cleans up a listener's undelivered connections.
//
// Errors: the verbs error of destroying the QP (an errno too); nil
// otherwise, and for an ID destroyed already.
func (id *ID) Destroy() error {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	return id.destroy()
}

// destroy is Destroy. Called with cm.mu held.
func (id *ID) destroy() error {
	cm := id.cm
	if id.state == stDestroyed {
		return nil
	}
	if !cm.closed && id.ag != nil {
		switch id.state {
		case stReqRcvd:
			if id.rqkey == 0 {
				id.sendREJ(mad.MsgREQ, mad.RejectConsumer, nil)
			} else {
				// cm_destroy_id in SIDR_REQ_RCVD: a SIDR_REP with status Reject.
				id.sendSIDRREP(mad.SIDRReject, 0, nil)
			}
		case stRepRcvd:
			id.sendREJ(mad.MsgREP, mad.RejectConsumer, nil)
		case stReqSent:
			if id.ps != PSUDP {
				id.sendREJ(mad.MsgREQ, mad.RejectTimeout, nil)
			}
		case stEstablished, stRepSent:
			id.ag.send(id.rgid, id.sgid, id.tos, buildMAD(mad.AttrDREQ, id.ag.tid(id.lcid),
				mad.DREQFields{LocalCommID: id.lcid, RemoteCommID: id.rcid, RemoteQPN: id.rqpn}), 1)
		case stDreqRcvd:
			id.ag.send(id.rgid, id.sgid, id.tos, id.lastDREP, 1)
		}
	}
	id.leaveAll()
	id.disarm()
	id.cancelQuery()
	id.stopTimewait()
	id.forget()
	id.unbind()
	if id.state == stListen {
		delete(cm.listeners, portKey{id.ps, id.src.Port()})
		// The requests no one has read go with their listener, rejected,
		// as ucma_destroy_private_ctx cleans up a listener's undelivered
		// connections.
		for _, e := range id.ec.takeRequests(id) {
			e.ID.destroy()
		}
	}
	delete(cm.ids, id)
	cm.ids = shrunk(cm.ids, &cm.peaks.ids)
	id.state = stDestroyed
	var err error
	if id.qp != nil {
		err = id.qp.Destroy()
		id.qp = nil
	}
	return err
}
