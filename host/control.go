package host

// The control channel: the process that owns a device's data path (the one
// whose Open holds the flock) serves a unix socket, <rundir>/run/<dev>.sock,
// through which other processes read its counters and resources and capture
// its packets, as `rdma statistic`, `rdma res` and tcpdump read a kernel
// device's. Only the owner can answer: the engine's state lives in its
// memory.
//
// The protocol is JSON Lines: one request line, one reply line. A capture's
// reply line is followed by a pcapng stream (section header, one interface,
// enhanced packet blocks) that runs until the client half-closes its side or
// disconnects; the server then writes an interface statistics block (the
// packets it delivered and the packets it dropped because the client did
// not keep up, isb_ifdrop) and closes. A client that cannot keep up loses
// packets, never the device: the tap never blocks the data path.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/rundir"
	"github.com/goroce/goroce/link/afpacket"
	"github.com/goroce/goroce/link/pcap"
	"github.com/goroce/goroce/verbs"
)

// Control requests.
const (
	OpCounters  = "counters"
	OpResources = "resources"
	OpCapture   = "capture"
	// OpECN makes the owner apply the config tree's ECN settings (ecn.go).
	OpECN = "ecn"
)

// ErrNotRunning is wrapped by the control client's errors when no process
// has the device open: its counters and resources exist only while one does.
var ErrNotRunning = errors.New("device not open by any process")

// captureQueueLen is how many frames a capture buffers before it drops
// (per capture client); a variable for tests.
var captureQueueLen = 4096

// ControlSocket returns the path of device name's control socket.
func (r *Registry) ControlSocket(name string) string {
	return filepath.Join(r.Dir, "run", name+".sock")
}

// controlRequest is one request line.
type controlRequest struct {
	Op string `json:"op"`
}

// controlReply is the reply line: an error, or one of the reports.
type controlReply struct {
	Error string `json:"error,omitempty"`
	// Errno is the errno of Error (EACCES, EINVAL); an owner that sends
	// none (0) is answered as EPROTO.
	Errno     syscall.Errno   `json:"errno,omitempty"`
	Counters  *CounterReport  `json:"counters,omitempty"`
	Resources *ResourceReport `json:"resources,omitempty"`
	Capture   *CaptureInfo    `json:"capture,omitempty"`
}

// Process identifies the device's owner, as rdma res prints pid and comm.
type Process struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
}

// CounterReport is a device's counters: port 1's and each QP's, with rxe's
// names (verbs.CounterNames), the link's packet counts and drops by cause,
// and the RDMA CM events counted on the device.
type CounterReport struct {
	Device   string            `json:"device"`
	Port     int               `json:"port"`
	Owner    Process           `json:"owner"`
	Counters map[string]uint64 `json:"counters"`
	Link     map[string]uint64 `json:"link"`
	CMEvents map[string]uint64 `json:"cm_events,omitempty"`
	QPs      []QPCounters      `json:"qps,omitempty"`
}

// QPCounters is one QP's counters.
type QPCounters struct {
	LQPN     uint32            `json:"lqpn"`
	Type     string            `json:"type"`
	State    string            `json:"state"`
	Counters map[string]uint64 `json:"counters"`
}

// ResourceReport is what `rdma res show` shows of a device.
type ResourceReport struct {
	Device string       `json:"device"`
	Owner  Process      `json:"owner"`
	QPs    []QPResource `json:"qps"`
	CMIDs  []CMID       `json:"cm_ids"`
}

// QPResource is one QP, as `rdma res show qp` prints it.
type QPResource struct {
	Port    int    `json:"port"`
	LQPN    uint32 `json:"lqpn"`
	RQPN    uint32 `json:"rqpn"`
	Type    string `json:"type"`
	State   string `json:"state"`
	SQPSN   uint32 `json:"sq_psn"`
	RQPSN   uint32 `json:"rq_psn"`
	PDN     uint32 `json:"pdn"`
	PathMTU int    `json:"path_mtu,omitempty"` // bytes; 0 before RTR
	// DCQCNRate is the QP's current DCQCN rate in Mb/s
	// (verbs.QP.CongestionRate) while the port's reaction point is on
	// (roce ecn … rp enable 1), else nil; DCQCNLimited says whether a CNP
	// holds it below the line rate.
	DCQCNRate    *float64 `json:"dcqcn_rate_mbps,omitempty"`
	DCQCNLimited bool     `json:"dcqcn_limited,omitempty"`
	// RC requesters: the congestion window in PSNs (verbs.QPInfo.Cwnd),
	// the PSNs unacknowledged, the base and latest round trips sampled
	// in µs, the window's cuts for delay, and the ACK timeouts found
	// spurious.
	Cwnd     int     `json:"cwnd,omitempty"`
	InFlight int     `json:"unacked_psns,omitempty"`
	MinRTTUs float64 `json:"min_rtt_us,omitempty"`
	RTTUs    float64 `json:"rtt_us,omitempty"`
	CwndCuts uint64  `json:"cwnd_cuts,omitempty"`
	Spurious uint64  `json:"spurious_timeouts,omitempty"`
}

// CMID is one RDMA CM identifier, as `rdma res show cm_id` prints it.
// Package rdmacm supplies them through Device.AddCMIDSource.
type CMID struct {
	Port    int    `json:"port"`
	ID      uint32 `json:"cm_idn"`
	LQPN    uint32 `json:"lqpn,omitempty"` // 0: no QP bound yet
	QPType  string `json:"qp_type,omitempty"`
	State   string `json:"state"` // rdma's names: LISTEN, ADDR_QUERY, CONNECT, ...
	PS      string `json:"ps"`    // port space: TCP, UDP, IB, IPOIB
	SrcAddr string `json:"src_addr,omitempty"`
	DstAddr string `json:"dst_addr,omitempty"`
}

// CaptureInfo answers a capture request; the pcapng stream follows.
type CaptureInfo struct {
	Device   string `json:"device"`
	QueueLen int    `json:"queue_len"`
}

// controlState is a Device's control server and what it reports beyond
// the engine: resource sources and CM event counts.
type controlState struct {
	ln   *net.UnixListener
	path string
	tap  *pcap.Link // every opened device runs on it; captures subscribe
	wg   sync.WaitGroup

	mu       sync.Mutex
	conns    map[net.Conn]struct{}     // guarded by mu: closed on stop
	sources  map[int]func() []CMID     // guarded by mu
	nextSrc  int                       // guarded by mu
	cmEvents map[string]*atomic.Uint64 // guarded by mu (the map; values are atomic)
	stopped  bool                      // guarded by mu

	foreignMu   sync.Mutex
	foreignLast map[netip.Addr]foreignSeen // guarded by foreignMu: when each source was last logged
}

// AddCMIDSource registers a function listing the RDMA CM IDs on this
// device (package rdmacm calls it); `roce res show cm_id` shows what it
// returns. The returned function unregisters it. f is called from the
// control server's goroutines and must be safe for that.
func (d *Device) AddCMIDSource(f func() []CMID) (remove func()) {
	c := &d.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sources == nil {
		c.sources = make(map[int]func() []CMID)
	}
	id := c.nextSrc
	c.nextSrc++
	c.sources[id] = f
	return func() {
		c.mu.Lock()
		delete(c.sources, id)
		c.mu.Unlock()
	}
}

// CountCMEvent counts one RDMA CM event on the device, by its librdmacm
// name (RDMA_CM_EVENT_ESTABLISHED ...): counters reports and the metrics
// exporter show the counts.
func (d *Device) CountCMEvent(event string) {
	c := &d.ctl
	c.mu.Lock()
	if c.cmEvents == nil {
		c.cmEvents = make(map[string]*atomic.Uint64)
	}
	v := c.cmEvents[event]
	if v == nil {
		v = new(atomic.Uint64)
		c.cmEvents[event] = v
	}
	c.mu.Unlock()
	v.Add(1)
}

// CMEvents returns the RDMA CM event counts by event name.
func (d *Device) CMEvents() map[string]uint64 {
	c := &d.ctl
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]uint64, len(c.cmEvents))
	for k, v := range c.cmEvents {
		m[k] = v.Load()
	}
	return m
}

// CounterReport returns the device's counters as the control channel
// reports them.
func (d *Device) CounterReport() *CounterReport {
	r := &CounterReport{Device: d.Def.Name, Port: 1, Owner: self(), Counters: d.Device.Counters().Snapshot(),
		Link: d.Device.Link().Stats().Snapshot(), CMEvents: d.CMEvents()}
	if d.raw != nil {
		maps.Copy(r.Link, d.raw.Counters()) // a v1-only port's RoCE v2 drops
	}
	for _, q := range d.Device.QPs() {
		in := q.Info()
		r.QPs = append(r.QPs, QPCounters{LQPN: in.QPN, Type: in.Type.String(), State: in.State.String(),
			Counters: q.Counters().Snapshot()})
	}
	return r
}

// foreignLogInterval is how often a v1-only port logs the RoCE v2 packets
// it drops from one source (they are all counted). A RoCE v2 client's CM
// resends its REQ every 4.3 s for about a minute: one line per attempt
// would bury the log, so the next line says how many were left unsaid.
const foreignLogInterval = time.Minute

// foreignSeen is a source's last logged drop and the drops since.
type foreignSeen struct {
	at     time.Time
	unsaid int
}

// foreignLogger returns the callback a v1-only port's link calls for each
// RoCE v2 packet it drops: a log line through logf (nil: stderr) at most
// once per foreignLogInterval per source address.
func (d *Device) foreignLogger(logf func(format string, args ...any)) func(afpacket.Foreign) {
	if logf == nil {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "roce: "+format+"\n", args...) }
	}
	name := d.Def.Name
	return func(f afpacket.Foreign) {
		if due, unsaid := d.ctl.foreignDue(f.Src, time.Now()); due {
			line := foreignLine(name, f)
			if unsaid > 0 {
				line += fmt.Sprintf(" (%d more from %s since the last such line)", unsaid, f.Src)
			}
			logf("%s", line)
		}
	}
}

// foreignDue reports whether a drop from src is to be logged at now, and
// how many drops from src went unlogged before it; it records the drop.
func (c *controlState) foreignDue(src netip.Addr, now time.Time) (bool, int) {
	c.foreignMu.Lock()
	defer c.foreignMu.Unlock()
	seen, ok := c.foreignLast[src]
	if ok && now.Sub(seen.at) < foreignLogInterval {
		seen.unsaid++
		c.foreignLast[src] = seen
		return false, 0
	}
	if c.foreignLast == nil {
		c.foreignLast = make(map[netip.Addr]foreignSeen)
	}
	if len(c.foreignLast) >= 1024 { // bound the map: forget sources quiet for an interval
		for a, t := range c.foreignLast {
			if now.Sub(t.at) >= foreignLogInterval {
				delete(c.foreignLast, a)
			}
		}
	}
	c.foreignLast[src] = foreignSeen{at: now}
	return true, seen.unsaid
}

// foreignLine says what a v1-only port dropped, from whom, and the fix.
func foreignLine(dev string, f afpacket.Foreign) string {
	if f.CM {
		svc := ""
		switch {
		case f.ServiceID.IsIPCM():
			svc = fmt.Sprintf(" (service port %d)", f.ServiceID.Port())
		case f.ServiceID != 0:
			svc = fmt.Sprintf(" (service ID 0x%016x)", uint64(f.ServiceID))
		}
		return fmt.Sprintf("%s: dropped a RoCE v2 CM %s from %s%s: port 1 speaks IB/RoCE v1 only; "+
			"the peer must use RoCE v1 (roce mode -d <its device> -p 1 -m 1)", dev, f.Message(), f.Src, svc)
	}
	return fmt.Sprintf("%s: dropped a RoCE v2 %s packet from %s to QP 0x%06x: port 1 speaks IB/RoCE v1 only; "+
		"the peer must use RoCE v1 (a RoCE v1 GID index; with RDMA CM, roce mode -d <its device> -p 1 -m 1)",
		dev, f.Message(), f.Src, f.DestQP)
}

// ResourceReport returns the device's QPs and CM IDs.
func (d *Device) ResourceReport() *ResourceReport {
	r := &ResourceReport{Device: d.Def.Name, Owner: self(), QPs: []QPResource{}, CMIDs: []CMID{}}
	ecn := d.Device.ECN(1)
	for _, q := range d.Device.QPs() {
		in := q.Info()
		qr := QPResource{Port: 1, LQPN: in.QPN, RQPN: in.DestQPN, Type: in.Type.String(),
			State: in.State.String(), SQPSN: uint32(in.SQPSN), RQPSN: uint32(in.RQPSN), PDN: in.PDN,
			PathMTU: in.PathMTU.Bytes(), Cwnd: in.Cwnd, InFlight: in.InFlight, CwndCuts: in.CwndCuts, Spurious: in.SpuriousTimeouts,
			MinRTTUs: float64(in.MinRTT) / 1e3, RTTUs: float64(in.RTT) / 1e3}
		if ecn.RPEnable != 0 && in.Type != verbs.GSI {
			// A QP that has sent nothing since the RP was enabled has no
			// DCQCN state yet: it sends at the line rate.
			rate, limited := q.CongestionRate()
			if rate == 0 && !limited {
				rate = float64(ecn.LineRate)
				if rate == 0 {
					rate = maxRate
				}
			}
			qr.DCQCNRate, qr.DCQCNLimited = &rate, limited
		}
		r.QPs = append(r.QPs, qr)
	}
	d.ctl.mu.Lock()
	srcs := make([]func() []CMID, 0, len(d.ctl.sources))
	for _, f := range d.ctl.sources {
		srcs = append(srcs, f)
	}
	d.ctl.mu.Unlock()
	for _, f := range srcs {
		r.CMIDs = append(r.CMIDs, f()...)
	}
	slices.SortFunc(r.CMIDs, func(a, b CMID) int { return int(a.ID) - int(b.ID) })
	return r
}

func self() Process {
	comm, _ := os.ReadFile("/proc/self/comm")
	return Process{PID: os.Getpid(), Comm: strings.TrimSpace(string(comm))}
}

// maxSunPath is the room for a path in sockaddr_un (108 with the NUL).
const maxSunPath = 107

// sockName returns a name for path that fits sockaddr_un: path itself, or
// when too long, the same file reached through /proc/self/fd and an O_PATH
// descriptor of its directory (the caller closes dirFD after the call).
func sockName(path string) (name string, dirFD int, err error) {
	if len(path) <= maxSunPath {
		return path, -1, nil
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, err
	}
	name = fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path))
	if len(name) > maxSunPath {
		unix.Close(fd)
		return "", -1, &verbs.Error{Op: "control socket", Detail: fmt.Sprintf("control socket name %s is too long for a unix socket", path), Err: syscall.ENAMETOOLONG}
	}
	return name, fd, nil
}

// startControl serves the device's control socket. The caller holds the
// device's lock, so any socket file already there is a dead owner's: it is
// removed. The socket is bound under a temporary name, made 0600 and
// renamed into place, so it is never reachable with looser permissions.
func (d *Device) startControl() error {
	c := &d.ctl
	dir := filepath.Join(d.reg.Dir, "run")
	if err := rundir.MkdirAll(d.reg.Dir, dir); err != nil {
		return &verbs.Error{Op: "control socket", Device: d.Def.Name, Err: err}
	}
	c.path = d.reg.ControlSocket(d.Def.Name)
	os.Remove(c.path) // stale: we hold the lock
	tmp := fmt.Sprintf("%s.%d.tmp", c.path, os.Getpid())
	os.Remove(tmp)
	name, dirFD, err := sockName(tmp)
	if err != nil {
		return &verbs.Error{Op: "control socket", Device: d.Def.Name, Err: err}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if dirFD >= 0 {
		unix.Close(dirFD)
	}
	if err != nil {
		return &verbs.Error{Op: "control socket", Device: d.Def.Name, Err: err}
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return &verbs.Error{Op: "control socket", Device: d.Def.Name, Err: err}
	}
	if err := os.Rename(tmp, c.path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return &verbs.Error{Op: "control socket", Device: d.Def.Name, Err: err}
	}
	c.ln = ln
	c.conns = make(map[net.Conn]struct{})
	c.wg.Add(1)
	go d.acceptControl()
	return nil
}

// stopControl closes the listener and every connection, waits for their
// goroutines and removes the socket.
func (d *Device) stopControl() {
	c := &d.ctl
	if c.ln == nil {
		return
	}
	c.mu.Lock()
	c.stopped = true
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	c.ln.Close()
	c.wg.Wait()
	os.Remove(c.path)
	c.ln = nil
}

func (d *Device) acceptControl() {
	c := &d.ctl
	defer c.wg.Done()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			conn.Close()
			return
		}
		c.conns[conn] = struct{}{}
		c.wg.Add(1)
		c.mu.Unlock()
		go func() {
			defer c.wg.Done()
			d.serveControl(conn)
			c.mu.Lock()
			delete(c.conns, conn)
			c.mu.Unlock()
			conn.Close()
		}()
	}
}

// peerAllowed admits root and the owner's own user.
func peerAllowed(conn *net.UnixConn) bool {
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	// Control does not run the function on a connection already closed
	// (Close stops every connection, and a client may hang up at once):
	// then there is no credential, and no one is admitted.
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return false
	}
	return cerr == nil && cred != nil && (cred.Uid == 0 || int(cred.Uid) == os.Geteuid())
}

func (d *Device) serveControl(conn *net.UnixConn) {
	enc := json.NewEncoder(conn)
	if !peerAllowed(conn) {
		enc.Encode(controlReply{Error: "permission denied: only root and the owner's user may use the control socket", Errno: syscall.EACCES})
		return
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return
	}
	conn.SetReadDeadline(time.Time{})
	var req controlRequest
	if err := json.Unmarshal(line, &req); err != nil {
		enc.Encode(controlReply{Error: "bad request: " + err.Error(), Errno: syscall.EINVAL})
		return
	}
	switch req.Op {
	case OpCounters:
		enc.Encode(controlReply{Counters: d.CounterReport()})
	case OpResources:
		enc.Encode(controlReply{Resources: d.ResourceReport()})
	case OpCapture:
		d.serveCapture(conn, br, enc)
	case OpECN:
		if err := d.loadECN(); err != nil {
			enc.Encode(controlReply{Error: err.Error(), Errno: errnoOf(err)})
			return
		}
		enc.Encode(controlReply{})
	default:
		enc.Encode(controlReply{Error: fmt.Sprintf("unknown request %q (want %s, %s, %s or %s)", req.Op, OpCounters, OpResources, OpCapture, OpECN), Errno: syscall.EINVAL})
	}
}

// serveCapture streams the device's packets as pcapng until the client
// half-closes or goes away.
func (d *Device) serveCapture(conn *net.UnixConn, br *bufio.Reader, enc *json.Encoder) {
	sub := d.ctl.tap.Subscribe(captureQueueLen)
	defer d.ctl.tap.Unsubscribe(sub)
	if err := enc.Encode(controlReply{Capture: &CaptureInfo{Device: d.Def.Name, QueueLen: captureQueueLen}}); err != nil {
		return
	}
	start := time.Now()
	ng, err := pcapgo.NewNgWriterInterface(conn, pcapgo.NgInterface{
		Name: d.Def.Name, Description: "goroce device " + d.Def.Name + " on " + d.Def.Netdev,
		LinkType: layers.LinkTypeEthernet, SnapLength: pcap.SnapLen, TimestampResolution: 9,
	}, pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: "goroce"}})
	if err != nil || ng.Flush() != nil {
		return
	}
	// The client ends the capture by half-closing (or closing) its side.
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, br)
		close(done)
	}()
	defer func() { conn.Close(); <-done }()
	var written uint64
	stats := func() error {
		err := ng.WriteInterfaceStats(0, pcapgo.NgInterfaceStatistics{
			LastUpdate: time.Now(), StartTime: start, EndTime: time.Now(),
			PacketsReceived: written + sub.Dropped(), PacketsDropped: sub.Dropped(),
		})
		if err == nil {
			err = ng.Flush()
		}
		return err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastDrops := uint64(0)
	for {
		select {
		case f := <-sub.C():
			ci := gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(f.Data), Length: len(f.Data)}
			if ng.WritePacket(ci, f.Data) != nil {
				return
			}
			written++
			if len(sub.C()) == 0 && ng.Flush() != nil {
				return
			}
		case <-tick.C:
			// Tell the client about drops as they happen, as dumpcap does.
			if dr := sub.Dropped(); dr != lastDrops {
				lastDrops = dr
				if stats() != nil {
					return
				}
			}
		case <-done:
			// Deliver what is queued, then the final statistics.
			for n := len(sub.C()); n > 0; n-- {
				f := <-sub.C()
				ci := gopacket.CaptureInfo{Timestamp: f.Time, CaptureLength: len(f.Data), Length: len(f.Data)}
				if ng.WritePacket(ci, f.Data) != nil {
					return
				}
				written++
			}
			stats()
			conn.CloseWrite()
			return
		}
	}
}

// dialControl connects to device name's control socket and sends op.
func (r *Registry) dialControl(ctx context.Context, name, op string) (*net.UnixConn, *bufio.Reader, controlReply, error) {
	var rep controlReply
	if _, err := r.Get(name); err != nil {
		return nil, nil, rep, err
	}
	ow, busy := r.OwnerOf(name)
	if !busy {
		return nil, nil, rep, &verbs.Error{Op: op, Device: name, Err: ErrNotRunning}
	}
	path := r.ControlSocket(name)
	sn, dirFD, err := sockName(path)
	if err != nil {
		return nil, nil, rep, &verbs.Error{Op: op, Device: name, Err: err}
	}
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", sn)
	if dirFD >= 0 {
		unix.Close(dirFD)
	}
	if err != nil {
		return nil, nil, rep, &verbs.Error{Op: op, Device: name, Err: err,
			Detail: fmt.Sprintf("device %s is open by process %d (%s), but its control socket %s does not answer", name, ow.PID, ow.Command, path)}
	}
	conn := c.(*net.UnixConn)
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	b, _ := json.Marshal(controlRequest{Op: op})
	br := bufio.NewReader(conn)
	if _, err = conn.Write(append(b, '\n')); err == nil {
		var line []byte
		if line, err = br.ReadBytes('\n'); err == nil {
			err = json.Unmarshal(line, &rep)
		}
	}
	if err == nil && rep.Error != "" {
		errno := rep.Errno
		if errno == 0 {
			errno = syscall.EPROTO
		}
		conn.Close()
		return nil, nil, rep, &verbs.Error{Op: op, Device: name, Detail: fmt.Sprintf("control socket %s: the device's owner answered: %s", path, rep.Error), Err: errno}
	}
	if err != nil {
		conn.Close()
		return nil, nil, rep, &verbs.Error{Op: op, Device: name, Detail: "control socket " + path, Err: err}
	}
	conn.SetDeadline(time.Time{})
	return conn, br, rep, nil
}

// Counters asks device name's owner for its counters. Without an owner the
// error wraps ErrNotRunning; an unknown device's, syscall.ENODEV.
func (r *Registry) Counters(ctx context.Context, name string) (*CounterReport, error) {
	conn, _, rep, err := r.dialControl(ctx, name, OpCounters)
	if err != nil {
		return nil, err
	}
	conn.Close()
	if rep.Counters == nil {
		return nil, &verbs.Error{Op: OpCounters, Device: name, Detail: "the control socket sent no counters", Err: syscall.EPROTO}
	}
	return rep.Counters, nil
}

// Resources asks device name's owner for its QPs and CM IDs.
func (r *Registry) Resources(ctx context.Context, name string) (*ResourceReport, error) {
	conn, _, rep, err := r.dialControl(ctx, name, OpResources)
	if err != nil {
		return nil, err
	}
	conn.Close()
	if rep.Resources == nil {
		return nil, &verbs.Error{Op: OpResources, Device: name, Detail: "the control socket sent no resources", Err: syscall.EPROTO}
	}
	return rep.Resources, nil
}

// CaptureStream is a running capture: Read returns the pcapng stream.
type CaptureStream struct {
	Info CaptureInfo
	conn *net.UnixConn
	r    *bufio.Reader
}

// Capture starts capturing device name's packets. Read the pcapng stream
// from the result; Stop asks the owner to end it (the stream then ends
// with an interface statistics block that counts the packets dropped
// because the reader did not keep up, and EOF); Close ends it at once.
func (r *Registry) Capture(ctx context.Context, name string) (*CaptureStream, error) {
	conn, br, rep, err := r.dialControl(ctx, name, OpCapture)
	if err != nil {
		return nil, err
	}
	if rep.Capture == nil {
		conn.Close()
		return nil, &verbs.Error{Op: OpCapture, Device: name, Detail: "the control socket did not start a capture", Err: syscall.EPROTO}
	}
	return &CaptureStream{Info: *rep.Capture, conn: conn, r: br}, nil
}

func (s *CaptureStream) Read(p []byte) (int, error) { return s.r.Read(p) }

// Stop half-closes the connection: the owner sends what it has queued and
// the final statistics, then EOF.
func (s *CaptureStream) Stop() error { return s.conn.CloseWrite() }

// SetReadDeadline bounds the reads that follow.
func (s *CaptureStream) SetReadDeadline(t time.Time) error { return s.conn.SetReadDeadline(t) }

// Close ends the capture at once.
func (s *CaptureStream) Close() error { return s.conn.Close() }

// errnoOf is err's errno for a control reply: the one it wraps, else EIO.
func errnoOf(err error) syscall.Errno {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return syscall.EIO
}
