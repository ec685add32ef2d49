//go:build goroce_turn

package udp

// A diagnostic build (go build -tags goroce_turn; bench/vm.sh -T) splits
// each side's turnaround of a request/response exchange — `roce perf send
// --lat`, `roce pingpong` — into wake, path and send (internal/turnsplit),
// printed to stderr every 1,000 round trips and when the link closes. The
// first frame the receive ring holds after the link's last send starts a
// round trip, at the kernel's timestamp of it (tpacket2_hdr's tp_sec and
// tp_nsec: where tcpdump's tap is); the next sendmmsg ends it. The split
// means something only while one message is in flight at a time (a
// stream's figures pair unrelated packets), and only a privileged link
// reading its ring in ringDirect sees frames. An AF_XDP socket's frames
// (rx-path xdp) carry no kernel timestamp: the split skips them, and such
// a link prints none.

import (
	"os"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/turnsplit"
)

type turnSplit struct {
	mu      sync.Mutex        // the receive path sets kts and at, the send path takes them
	kts, at int64             // the frame's kernel timestamp and when the link saw it, ns; at 0: none since the last send
	s       turnsplit.Samples // under txMu
}

// seen notes frame i of g, the ring's head, unless a frame was seen since
// the last send. Called with rxMu held.
func (t *turnSplit) seen(g *rxRing, i int32) {
	t.mu.Lock()
	if t.at == 0 {
		if _, h := g.Frame(i); h.Sec != 0 || h.Nsec != 0 {
			t.kts, t.at = int64(h.Sec)*1e9+int64(h.Nsec), time.Now().UnixNano()
		}
	}
	t.mu.Unlock()
}

// start is the time a sendmmsg starts.
func (t *turnSplit) start() int64 { return time.Now().UnixNano() }

// sent records a round trip once the sendmmsg that started at t0 has
// returned. Called with txMu held.
func (t *turnSplit) sent(t0 int64) {
	t1 := time.Now().UnixNano()
	t.mu.Lock()
	kts, at := t.kts, t.at
	t.at = 0
	t.mu.Unlock()
	if at != 0 {
		t.s.Add(os.Stderr, at-kts, t0-at, t1-t0)
	}
}

// closed prints what is left once the link's sockets are closed, when a
// send blocked in the socket holding txMu has returned.
func (t *turnSplit) closed(txMu *sync.Mutex) {
	txMu.Lock()
	t.s.Flush(os.Stderr)
	txMu.Unlock()
}
