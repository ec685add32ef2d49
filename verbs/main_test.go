package verbs_test

// Shared helpers of the engine's conformance tests (opcodes_test.go,
// protection_test.go, rnr_retry_test.go, qpstate_test.go, misc_test.go).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/verbs"
	"github.com/goroce/goroce/verbs/verbstest"
	"github.com/goroce/goroce/wire"
)

const (
	pollTimeout = 30 * time.Second
	// allRemote is every access right a responder can need.
	allRemote = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead |
		verbs.AccessRemoteAtomic | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
	udQKey = 0x11111111 // the Q_Key verbstest gives UD QPs
)

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// canaryByte is the guard pattern at index i of a canary buffer.
func canaryByte(i int) byte { return byte(0xC3 ^ i*13 ^ i>>8) }

// canary is a buffer filled with a guard pattern, with a memory region
// registered over its middle: check proves that nothing outside the
// expected pieces changed, on either side of the region or inside it.
type canary struct {
	buf   []byte
	guard int // the region is buf[guard : guard+n]
	mr    *verbs.MR
	dev   *verbs.Device
}

const canaryGuard = 4096

func newCanary(t testing.TB, pd *verbs.PD, n int, access verbs.Access) *canary {
	t.Helper()
	buf := make([]byte, n+2*canaryGuard)
	for i := range buf {
		buf[i] = canaryByte(i)
	}
	mr, err := pd.RegMR(buf[canaryGuard:canaryGuard+n], access)
	if err != nil {
		t.Fatal(err)
	}
	if mr.Addr()%8 != 0 {
		t.Fatalf("region at %#x is not 8-byte aligned", mr.Addr())
	}
	return &canary{buf: buf, guard: canaryGuard, mr: mr, dev: pd.Device()}
}

// region returns the registered bytes.
func (c *canary) region() []byte { return c.buf[c.guard : c.guard+c.mr.Len()] }

// addr returns the address of region offset off.
func (c *canary) addr(off int) uint64 { return c.mr.Addr() + uint64(off) }

// piece is data expected at a region offset.
type piece struct {
	off  int
	data []byte
}

// check fails t unless the buffer holds the pieces at their region
// offsets and the guard pattern everywhere else.
func (c *canary) check(t testing.TB, pieces ...piece) {
	t.Helper()
	// Over a real network the responder's writes reach this goroutine
	// through sockets the race detector does not see; Barrier orders them.
	c.dev.Barrier()
	want := make([]byte, len(c.buf))
	for i := range want {
		want[i] = canaryByte(i)
	}
	for _, p := range pieces {
		copy(want[c.guard+p.off:], p.data)
	}
	if i := firstDiff(c.buf, want); i >= 0 {
		where := "inside the region"
		if i < c.guard || i >= c.guard+c.mr.Len() {
			where = "OUTSIDE the region"
		}
		t.Fatalf("buffer byte %d (region offset %d, %s) is %#02x, want %#02x", i, i-c.guard, where, c.buf[i], want[i])
	}
}

// set writes data into the region at off and returns the piece to expect.
func (c *canary) set(off int, data []byte) piece {
	copy(c.region()[off:], data)
	c.dev.Barrier() // the device's receive goroutine reads it for a READ or an atomic
	return piece{off, data}
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// source registers data for local reads (LOCAL_WRITE, as most apps do).
func source(t testing.TB, pd *verbs.PD, data []byte) *verbs.MR {
	t.Helper()
	if len(data) == 0 {
		data = make([]byte, 1)
	}
	mr, err := pd.RegMR(data, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// sgl returns mr[0:n] as an SG list, nil for n == 0.
func sgl(mr *verbs.MR, n int) []verbs.SGE {
	if n == 0 {
		return nil
	}
	return []verbs.SGE{mr.SGE(0, n)}
}

func poll(t testing.TB, cq *verbs.CQ) verbs.WC {
	t.Helper()
	return verbstest.Poll(t, cq, pollTimeout)
}

// want fails t unless wc has the status and wr_id.
func want(t testing.TB, wc verbs.WC, status verbs.WCStatus, wrid uint64) {
	t.Helper()
	if wc.Status != status || wc.WRID != wrid {
		t.Fatalf("completion %v; want wr_id %d %v", &wc, wrid, status)
	}
}

// wantOK waits for one completion on cq: success with wr_id and opcode.
func wantOK(t testing.TB, cq *verbs.CQ, wrid uint64, op verbs.WCOpcode) verbs.WC {
	t.Helper()
	wc := poll(t, cq)
	want(t, wc, verbs.WCSuccess, wrid)
	if wc.Opcode != op {
		t.Fatalf("completion %v: opcode %v, want %v", &wc, wc.Opcode, op)
	}
	if wc.Detail != "" {
		t.Errorf("successful completion carries a Detail: %q", wc.Detail)
	}
	return wc
}

// wantEmpty fails t if cq holds a completion now.
func wantEmpty(t testing.TB, cq *verbs.CQ) {
	t.Helper()
	var wc [4]verbs.WC
	n, err := cq.Poll(wc[:])
	if err != nil {
		t.Fatalf("poll: %v", err)
	}
	if n != 0 {
		t.Fatalf("unexpected completion %v", &wc[0])
	}
}

func mustPostRecv(t testing.TB, qp *verbs.QP, wrs ...verbs.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wrs...); err != nil {
		t.Fatal(err)
	}
}

func mustPostSend(t testing.TB, qp *verbs.QP, wrs ...verbs.SendWR) {
	t.Helper()
	if err := qp.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
}

// udTo returns a UD WR addressed at p's B side.
func udTo(t testing.TB, p *verbstest.Pair, wr verbs.SendWR) verbs.SendWR {
	t.Helper()
	ah, err := p.A.PD.CreateAH(verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: p.B.GID.GID, SGIDIndex: p.A.GIDIndex}})
	if err != nil {
		t.Fatal(err)
	}
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, p.B.QP.Num(), udQKey
	return wr
}

// waitEvent reads dev's async events until one of type typ for QP qpn
// arrives (qpn 0: any), logging the others.
func waitEvent(t testing.TB, dev *verbs.Device, typ verbs.EventType, qpn uint32) verbs.AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	for {
		ev, err := dev.GetAsyncEvent(ctx)
		if err != nil {
			t.Fatalf("waiting for %v on %s: %v", typ, dev.Name(), err)
		}
		if ev.Type == typ && (qpn == 0 || ev.QPNum == qpn) {
			return ev
		}
		t.Logf("%s: other event %v", dev.Name(), ev)
	}
}

// queuedEvents returns the events dev has queued now, without waiting.
func queuedEvents(dev *verbs.Device) []verbs.AsyncEvent {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var evs []verbs.AsyncEvent
	for {
		ev, err := dev.GetAsyncEvent(ctx)
		if err != nil {
			return evs
		}
		evs = append(evs, ev)
	}
}

// noEvent fails t if dev has queued an event of type typ.
func noEvent(t testing.TB, dev *verbs.Device, typ verbs.EventType) {
	t.Helper()
	for _, ev := range queuedEvents(dev) {
		if ev.Type == typ {
			t.Fatalf("%s: unexpected event %v", dev.Name(), ev)
		}
	}
}

// wantEINVAL fails t unless err wraps EINVAL and its text holds every sub.
func wantEINVAL(t testing.TB, err error, subs ...string) {
	t.Helper()
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("error %v; want one wrapping EINVAL", err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// ctr returns the counter called name (rxe's name).
func ctr(t testing.TB, c *verbs.Counters, name string) uint64 {
	t.Helper()
	v, ok := c.Snapshot()[name]
	if !ok {
		t.Fatalf("no counter %q", name)
	}
	return v
}

// peerWords are what a Detail must contain to name p's B side: its QPN and GID.
func peerWords(p *verbstest.Pair) []string {
	return []string{fmt.Sprintf("%#x", p.B.QP.Num()), p.B.GID.GID.Unmap().String()}
}

func wantDetail(t testing.TB, wc verbs.WC, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(wc.Detail, s) {
			t.Errorf("completion Detail %q does not mention %q", wc.Detail, s)
		}
	}
}

// pairConfig is verbstest.Options with the fabric ports' MTU and the links
// the devices use (wrap may return a decorator of the port) set apart.
type pairConfig struct {
	verbstest.Options
	PortMTU int
	Wrap    func(side int, l link.Link) link.Link
}

// buildPair is verbstest.NewPair with 1024 CQEs by default.
func buildPair(t testing.TB, c pairConfig) *verbstest.Pair {
	t.Helper()
	o := c.Options
	if o.CQE == 0 {
		o.CQE = 1024
	}
	o.PortMTU, o.Wrap = c.PortMTU, c.Wrap
	return verbstest.NewPair(t, o)
}

// sniffLink records the BTH of every transport packet a device receives.
type sniffLink struct {
	link.Link
	mu   sync.Mutex
	bths []wire.BTH // guarded by mu
}

func (s *sniffLink) Recv(pkts []link.Packet) (int, error) {
	n, err := s.Link.Recv(pkts)
	s.mu.Lock()
	for i := range pkts[:n] {
		b := pkts[i].Transport()
		if len(b) >= wire.BTHLen {
			s.bths = append(s.bths, wire.BTH(bytes.Clone(b[:wire.BTHLen])))
		}
	}
	s.mu.Unlock()
	return n, err
}

// take returns and forgets the BTHs recorded so far.
func (s *sniffLink) take() []wire.BTH {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bths
	s.bths = nil
	return b
}
