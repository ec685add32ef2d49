package rdmacm

import (
	"container/list"
	"maps"

	"github.com/goroce/goroce/verbs"
)

// What a peer can make the CM hold is bounded (every CM MAD may come from
// a hostile peer: RoCE has no authentication), and what the CM drops or
// gives up for it is counted.
//
//   - CONNECT_REQUESTs waiting to be read: a listener's backlog, as
//     Linux's ucma enforces rdma_listen's (ucma_connect_event_handler
//     takes one from the listener's backlog for each CONNECT_REQUEST it
//     queues, ucma_get_event gives it back when the event is read). A REQ
//     beyond it is dropped without a REJ, and the requester's retry may
//     find room (the handler's -ENOMEM makes cm_destroy_id leave a
//     REQ_RCVD ID "to allow future retries"); a SIDR_REQ beyond it gets a
//     SIDR_REP with status Reject, as cm_destroy_id answers from
//     SIDR_REQ_RCVD. Counted as cm_listen_drops.
//   - Half-open connections: a REP that gets no RTU is sent again at most
//     Options.MaxRetries times, then the ID leaves the CM's tables and
//     gets UNREACHABLE (cm.c's IB_CM_REP_ERROR, cma.c's UNREACHABLE
//     -ETIMEDOUT), counted as cm_rtu_timeouts. Listener.Accept destroys
//     it, and keeps at most its backlog of connections waiting for an
//     RTU (see Listener.Accept; cm_listener_evictions).
//   - Address handles: QP1 keeps those of its latest peers, at most
//     maxAHs; the least recently used goes first (cm_ah_evictions).
//     Linux's cm.c keeps none: it creates one for each response and
//     destroys it when the send completes (cm_alloc_response_msg,
//     cm_free_msg).
//   - MADs waiting for a send slot: at most maxWaitingMADs, then dropped
//     as lost datagrams (cm_mad_drops).

// maxBacklog is net.rdma_ucm.max_backlog's default: ucma_listen gives
// rdma_listen a backlog of 1 to 1023 as asked, and this for anything else
// (0 and negative included).
const maxBacklog = 1024

// maxAHs bounds QP1's address-handle cache.
const maxAHs = 256

// counter is one of the CM's counters.
type counter int

const (
	ctrListenDrops counter = iota
	ctrRTUTimeouts
	ctrListenerEvictions
	ctrAHEvictions
	ctrMADDrops
	numCounters
)

var counterNames = [numCounters]string{
	ctrListenDrops:       "cm_listen_drops",
	ctrRTUTimeouts:       "cm_rtu_timeouts",
	ctrListenerEvictions: "cm_listener_evictions",
	ctrAHEvictions:       "cm_ah_evictions",
	ctrMADDrops:          "cm_mad_drops",
}

// count adds one to the agent's counter c. Called with cm.mu held.
func (a *agent) count(c counter) {
	a.counts[c]++
	if f := a.cm.opts.OnCounter; f != nil {
		f(a.dev.Name(), counterNames[c])
	}
}

// Counters returns the CM's counters on dev (summed over every device if
// dev is nil), by name; goroce's own, for what the CM drops or gives up
// so that a peer cannot make it hold unbounded state (Linux's CM counts
// none of them):
//
//	cm_listen_drops        REQs and SIDR_REQs beyond a listener's backlog
//	                       (dropped without a REJ; a SIDR_REQ gets SIDR_REP Reject)
//	cm_rtu_timeouts        REPs that got no RTU after every retry: the half-open
//	                       connection is given up (UNREACHABLE)
//	cm_listener_evictions  half-open connections Listener.Accept gave up to
//	                       stay within its backlog
//	cm_ah_evictions        address handles QP1's cache let go (least recently used)
//	cm_mad_drops           MADs QP1 could not send (send backlog full, no
//	                       address handle)
//
// The counters of a device removed with RemoveDevice go with it.
// Options.OnCounter sees each increment as it happens.
func (cm *CM) Counters(dev *verbs.Device) map[string]uint64 {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	m := make(map[string]uint64, numCounters)
	for _, n := range counterNames {
		m[n] = 0
	}
	for _, a := range cm.agents {
		if dev != nil && a.dev != dev {
			continue
		}
		for c, v := range a.counts {
			m[counterNames[c]] += v
		}
	}
	return m
}

// ahCache holds QP1's address handles by destination, source GID and
// traffic class, at most maxAHs, evicting the least recently used. An AH
// is only a resolved path: a send already posted with it keeps its own
// copy (the requester copies the path into the WQE), so letting one go
// never disturbs a MAD in flight.
type ahCache struct {
	m   map[ahKey]*list.Element // values are *ahEntry
	lru list.List               // front: most recently used
}

type ahEntry struct {
	k  ahKey
	ah *verbs.AH
}

// get returns the AH for k, or nil, and marks it used.
func (c *ahCache) get(k ahKey) *verbs.AH {
	e := c.m[k]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*ahEntry).ah
}

// put adds the AH for k (not in the cache) and reports whether another
// was evicted to make room.
func (c *ahCache) put(k ahKey, ah *verbs.AH) (evicted bool) {
	if c.m == nil {
		c.m = make(map[ahKey]*list.Element, maxAHs)
	}
	if len(c.m) >= maxAHs {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.m, old.Value.(*ahEntry).k)
		evicted = true
	}
	c.m[k] = c.lru.PushFront(&ahEntry{k, ah})
	return evicted
}

func (c *ahCache) len() int { return len(c.m) }

// admit takes a place in listener l's backlog for one CONNECT_REQUEST, or
// reports that there is none. The place comes back when the event is read
// (EventChannel.Get) or discarded (EventChannel.Close). Called with cm.mu
// held, so no two admissions race; reads only ever free places.
func (l *ID) admit() bool {
	if l.queued.Load() >= int32(l.backlog) {
		return false
	}
	l.queued.Add(1)
	return true
}

// backlogOf returns a listening ID's backlog.
func (l *ID) backlogOf() int {
	l.cm.mu.Lock()
	defer l.cm.mu.Unlock()
	return l.backlog
}

// countEviction counts a half-open connection Listener.Accept gives up.
func (id *ID) countEviction() {
	id.cm.mu.Lock()
	defer id.cm.mu.Unlock()
	if id.ag != nil {
		id.ag.count(ctrListenerEvictions)
	}
}

// shrunk returns m after a deletion, or a copy of it once it holds less
// than a quarter of the most it has held (*peak, which it keeps): a Go map
// never gives back the memory it grew to, so the CM's tables would keep
// a flood's size for good. Copies cost O(len) and come only after the
// map has shrunk by three quarters, so they add O(1) to each deletion.
func shrunk[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if n := len(m) + 1; n > *peak { // the size before this deletion
		*peak = n
	}
	if *peak < minShrink || len(m) >= *peak/4 {
		return m
	}
	c := make(map[K]V, len(m))
	maps.Copy(c, m)
	*peak = len(m)
	return c
}

// minShrink is the size below which a map is not worth copying.
const minShrink = 256
