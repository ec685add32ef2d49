// Package perftest is linux-rdma perftest's ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat and
// ib_atomic_lat in Go, wire-compatible with perftest 6.06 (Debian's 4.5
// package) in both roles: the same TCP exchange of versions, MTU and QP
// data on port 18515, the same QP attributes and traffic, the same banner
// and result tables.
package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goroce/goroce/rdmacm"
)

// Verb is the operation under test; the values are perftest's VerbType.
type Verb int

const (
	Send   Verb = 0
	Write  Verb = 1
	Read   Verb = 2
	Atomic Verb = 3
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

func (v Verb) String() string {
	if v >= 0 && int(v) < len(verbNames) {
		return verbNames[v]
	}
	return fmt.Sprintf("Verb(%d)", int(v))
}

// Atomic operations (-A); the names are perftest's.
const (
	FetchAndAdd = "FETCH_AND_ADD"
	CmpAndSwap  = "CMP_AND_SWAP"
)

// Limits and defaults of perftest_parameters.h.
const (
	DefaultPort   = 18515
	maxSize       = 8388608 // MAX_SIZE: -a runs 2 B .. 8 MiB
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defItersWB    = 5000 // ib_write_bw
	defIters      = 1000
	defTxBW       = 128
	defTxLat      = 1
	defRxSend     = 512
	ucMaxRx       = 16000      // UC_MAX_RX: UC and UD receive depth, at most
	defQKey       = 0x11111111 // DEF_QKEY: every UD QP's Q_Key, and what a UD SEND names
	udAddition    = 40         // UD_ADDITION: the GRH before a UD receive's payload
	defCQMod      = 100
	cqModLimit    = 8192 // MSG_SIZE_CQ_MOD_LIMIT: above it, a CQE per message
	minIters      = 5
	minRNRTimer   = 12
	latTail       = 2 // LAT_MEASURE_TAIL: the slowest samples left out
	maxPeakIters  = 20000
	atomicAdd     = 1 // ATOMIC_ADD_VALUE
	atomicSwap    = 0 // ATOMIC_SWAP_VALUE
	minTOS        = 0 // MIN_TOS
	maxTOS        = 255
	defQPTimeout  = 14        // DEF_QP_TIME
	maxTxDepth    = 15000     // MAX_TX
	maxRxDepth    = 16384     // MAX_RX
	maxCQMod      = 1024      // MAX_CQ_MOD
	maxIters      = 100000000 // MAX_ITER
)

// Config mirrors perftest's options.
type Config struct {
	Verb   Verb
	Lat    bool   // ib_*_lat instead of ib_*_bw
	Atomic string // -A: FETCH_AND_ADD (default) or CMP_AND_SWAP
	Server string // the server's address (client role); "" = server role
	Port   int    // -p: TCP port of the exchange, default 18515
	IBPort int    // -i, default 1
	Size   int    // -s; 0 = perftest's default (BW 65536, latency 2, atomic 8)
	Iters  int    // -n; 0 = default (ib_write_bw 5000, others 1000)
	// Duration (-D) runs for this long instead of Iters, measuring the
	// middle half (perftest's margin, -f, is a quarter each side).
	Duration time.Duration
	All      bool // -a: sizes 2 B to 8 MiB
	GIDIndex int  // -x; -1 picks as perftest does (IPv4 unless IPv6, RoCE v2 over v1)
	IPv6     bool // --ipv6: prefer an IPv6 GID when picking
	MTU      int  // -m in bytes; 0 = the port's active MTU
	NumQPs   int  // -q, default 1
	TxDepth  int  // -t; 0 = default (BW 128, latency 1)
	RxDepth  int  // -r; 0 = default (SEND 512)
	CQMod    int  // -Q; 0 = default (100)
	OutReads int  // -o; 0 = the device maximum (READ and atomics)
	// QPTimeout is -u: the local ACK timeout, 4.096 µs × 2^QPTimeout; 0
	// is the default, 14, unless SetQPTimeout says it was given, when 0
	// means no timeout (IBTA §9.7.6.1.3: the requester waits forever), as
	// perftest passes -u 0 to ibv_modify_qp.
	QPTimeout    int
	SetQPTimeout bool
	// Connection is -c: "RC" (the default), "UC" (SEND and RDMA WRITE
	// only) or "UD" (SEND only, messages of at most the path MTU, Q_Key
	// 0x11111111 as perftest's DEF_QKEY); UC and UD without -R.
	Connection  string
	ReportGbits bool // --report_gbits: Gb/sec instead of MB/sec (MiB)
	// Histogram is -H (--report-histogram) and Unsorted -U
	// (--report-unsorted, which implies -H), latency tests only: before
	// the summary, every sample as perftest's print_report_lat prints
	// them, "#, usec" then "N, latency" lines, sorted or in the order
	// measured. perftest keeps them for -n runs; goroce prints them with
	// -D too, the samples of the measured window, so that a run of a
	// given length gives a latency series over time.
	Histogram, Unsorted bool
	// RelaxedOrderingOff is --disable_pcie_relaxed: the banner's "PCIe
	// relax order" says OFF instead of ON, as perftest built with PCIe
	// relaxed ordering support (Debian's, the lab's) says. A soft device
	// has no PCIe to order; rxe ignores IBV_ACCESS_RELAXED_ORDERING too.
	RelaxedOrderingOff bool
	OutJSON            bool // --out_json
	JSONFile           string
	Device             string    // the device name for the banner
	Out                io.Writer // the tool's output (stdout)
	Progress           io.Writer // a progress line per second in -D runs (stderr)
	// Bidirectional is -b (perftest's duplex), for the BW tests only: both
	// sides post the verb at each other at once, exchange their reports
	// and each prints one line with the two sides' bandwidths and message
	// rates added up. With SEND both sides post receives too, and with -D
	// each prints its own line counting what it sent and received.
	Bidirectional bool
	// Dial, if set, opens the client's TCP connection; otherwise net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Listener, if set, is the server's listening socket; otherwise the
	// server listens on Port.
	Listener net.Listener
	// RDMACM is -R: the QPs are connected through RDMA CM, and the
	// exchange runs over an RDMA CM connection of its own on Port (port
	// space TCP) instead of TCP. Server is then the address of the peer's
	// RoCE device, and CM must be set.
	RDMACM bool
	CM     *rdmacm.CM
	// TOS is -T (perftest's --tos), set when SetTOS is: the type of
	// service, 0-255, of the test QPs' RDMA CM connections, which every
	// packet of them carries as its IP TOS or traffic class. perftest
	// takes it with -R only, and so does goroce. The client sets it on
	// the test QPs' CM IDs (rdmacm.ID.SetTOS, as perftest calls
	// rdma_set_option(RDMA_OPTION_ID_TOS) before rdma_resolve_route), not
	// on the exchange's, which keeps the CM's default_roce_tos; the
	// server's connections take the client's from its REQ, as Linux's do,
	// so the server's -T only shows in its banner.
	TOS    int
	SetTOS bool
	// Verify makes a goroce-to-goroce run check the data: the server checks
	// what WRITE and SEND placed and what FETCH_AND_ADD summed, the client
	// what READ brought back. perftest peers do not fill buffers this way.
	Verify bool
	// UseEvent is -e (perftest's --events, its use_event): wait for
	// completions by sleeping on the CQ's event (CQ.Wait, ibv_get_cq_event)
	// instead of busy-polling it, perftest's default, which goroce's perf
	// does too. perftest refuses it for RDMA WRITE and with -D, and so does
	// goroce.
	UseEvent bool
}

// ErrUsage marks a configuration perftest would refuse.
var ErrUsage = errors.New("invalid configuration")

func usage(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, a...))
}

// Validate reports what perftest would refuse in c (an error wrapping
// ErrUsage), so that a command line can be checked before a device opens.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// params are Config with perftest's defaults and dependencies applied
// (init_perftest_params, force_dependecies).
type params struct {
	Config
	client   bool
	atomicFA bool
	noPeak   bool
	margin   time.Duration
	track    *tracker // how far the run got; nil outside Run
}

func (c Config) resolve() (*params, error) {
	p := &params{Config: c, client: c.Server != ""}
	if p.Progress != nil {
		// The progress ticker and each QP's goroutine (the -D drain
		// notice) write it at once: one line at a time, whatever the
		// writer (a test's bytes.Buffer is not safe for that).
		p.Progress = &lockedWriter{w: p.Progress}
	}
	// In perftest's order of checks: the first error is the one reported.
	for _, step := range []func() error{p.resolveTest, p.resolveSize, p.resolveConnection, p.resolveDepths, p.resolveReads} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// resolveTest checks the verb, ports, QPs, the test's kind and atomic type.
func (p *params) resolveTest() error {
	atomicGiven := p.Atomic != ""
	if p.Verb < Send || p.Verb > Atomic {
		return usage("unknown verb %d", int(p.Verb))
	}
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.Port < 0 || p.Port > 65535 {
		return usage("-p %d: port must be 1-65535", p.Port)
	}
	if p.IBPort == 0 {
		p.IBPort = 1
	}
	if p.NumQPs == 0 {
		p.NumQPs = 1
	}
	if p.NumQPs < 1 || p.NumQPs > 1024 {
		return usage("-q %d: number of QPs must be 1-1024", p.NumQPs)
	}
	if !p.Lat && (p.Histogram || p.Unsorted) {
		return usage("-H/-U: the latency samples are printed by the latency tests only (--lat); drop -H/-U or add --lat")
	}
	if p.Lat && p.Bidirectional {
		return usage("-b: Bidirectional is only available in BW tests (write, read, send and atomic without --lat); drop -b or --lat")
	}
	if p.Lat && p.NumQPs > 1 {
		return usage("-q %d: latency tests run on one QP", p.NumQPs)
	}
	switch p.Atomic {
	case "", FetchAndAdd:
		p.Atomic, p.atomicFA = FetchAndAdd, true
	case CmpAndSwap:
	default:
		return usage("-A %s: atomic type must be CMP_AND_SWAP or FETCH_AND_ADD", p.Atomic)
	}
	if p.Verb != Atomic && atomicGiven {
		return usage("-A applies to atomic tests only")
	}
	return nil
}

// resolveSize sets and checks the message size, iterations, duration and MTU.
func (p *params) resolveSize() error {
	if p.Size == 0 {
		switch {
		case p.Verb == Atomic:
			p.Size = defSizeAtomic
		case p.Lat:
			p.Size = defSizeLat
		default:
			p.Size = defSizeBW
		}
	}
	if p.Verb == Atomic && p.Size != defSizeAtomic {
		return usage("-s %d: Message size cannot be changed for Atomic tests", p.Size)
	}
	if p.Size < 1 || p.Size > maxSize {
		return usage("-s %d: size must be 1-%d", p.Size, maxSize)
	}
	if p.All && p.Verb == Atomic {
		return usage("-a: atomic tests have one size")
	}
	if p.Iters == 0 {
		p.Iters = defIters
		if p.Verb == Write && !p.Lat {
			p.Iters = defItersWB
		}
	}
	if p.Iters < minIters || p.Iters > maxIters {
		return usage("-n %d: Iteration num should be between %d and %d", p.Iters, minIters, maxIters)
	}
	if p.Duration < 0 || p.Duration > 0 && p.Duration < time.Second {
		return usage("-D %v: duration must be at least 1 second", p.Duration)
	}
	if p.UseEvent && p.Verb == Write {
		return usage("-e: Events feature not available on WRITE verb")
	}
	if p.UseEvent && p.Duration > 0 {
		return usage("-e with -D %v: Duration mode doesn't work with events", p.Duration)
	}
	if p.Duration > 0 && p.All {
		return usage("Duration mode currently doesn't support running on all sizes")
	}
	if p.MTU != 0 && p.MTU != 256 && p.MTU != 512 && p.MTU != 1024 && p.MTU != 2048 && p.MTU != 4096 {
		return usage("-m %d: MTU must be 256, 512, 1024, 2048 or 4096", p.MTU)
	}
	return nil
}

// resolveConnection checks the connection type, TOS and QP timeout.
func (p *params) resolveConnection() error {
	switch p.Connection {
	case "", "RC":
		p.Connection = "RC"
	case "UC":
		if p.Verb != Send && p.Verb != Write {
			return usage("-c UC: %s needs a reliable connection (UC carries SEND and RDMA WRITE only); use -c RC", p.Verb)
		}
		if p.RDMACM {
			return usage("-c UC with -R: goroce's perf connects UC QPs through the TCP exchange only; drop -R")
		}
	case "UD":
		if p.Verb != Send {
			return usage("-c UD: UD connection only possible in SEND verb (%s needs -c RC, or -c UC for WRITE)", p.Verb)
		}
		if p.RDMACM {
			return usage("-c UD with -R: goroce's perf connects UD QPs through the TCP exchange only; drop -R")
		}
	default:
		return usage("-c %s: connection type must be RC, UC or UD", p.Connection)
	}
	if p.SetTOS {
		// perftest's parser checks the range, force_dependecies the -R.
		if p.TOS < minTOS || p.TOS > maxTOS {
			return usage("-T %d: TOS should be between %d and %d", p.TOS, minTOS, maxTOS)
		}
		if !p.RDMACM {
			return usage("-T %d without -R: TOS only valid for rdma_cm based QP and RawEth QP", p.TOS)
		}
	}
	if p.QPTimeout == 0 && !p.SetQPTimeout {
		p.QPTimeout = defQPTimeout
	}
	if p.QPTimeout < 0 || p.QPTimeout > 31 {
		return usage("-u %d: QP timeout must be 0-31", p.QPTimeout)
	}
	return nil
}

// resolveDepths sets and checks the queue depths and CQ moderation, then
// what follows from the whole configuration (force_dependecies): depths
// capped by the iterations, the duration's margin, when a peak is measured.
func (p *params) resolveDepths() error {
	if p.TxDepth == 0 {
		p.TxDepth = defTxBW
		if p.Lat {
			p.TxDepth = defTxLat
		}
	}
	if p.RxDepth == 0 {
		p.RxDepth = 1
		if p.Verb == Send {
			p.RxDepth = defRxSend
		}
	}
	if p.TxDepth < 1 || p.TxDepth > maxTxDepth {
		return usage("-t %d: Tx depth should be between 1 and %d", p.TxDepth, maxTxDepth)
	}
	if p.RxDepth < 1 || p.RxDepth > maxRxDepth {
		return usage("-r %d: Rx depth should be between 1 and %d", p.RxDepth, maxRxDepth)
	}
	if p.Verb != Send && p.RxDepth > 1 {
		return usage("-r %d: On RDMA verbs rx depth can be only 1 (-r is for send)", p.RxDepth)
	}
	reqCQMod := p.CQMod != 0
	if p.CQMod == 0 {
		p.CQMod = defCQMod
	}
	if p.CQMod < 1 || p.CQMod > maxCQMod {
		return usage("-Q %d: CQ moderation should be between 1 and %d", p.CQMod, maxCQMod)
	}
	if p.JSONFile == "" {
		p.JSONFile = "perftest_out.json"
	}
	if p.Duration == 0 {
		p.TxDepth = min(p.TxDepth, p.Iters)
		if p.Verb == Send {
			p.RxDepth = min(p.RxDepth, p.Iters)
		}
		// Unreliable receivers get a receive per message up front where
		// they can (force_dependecies): nothing retransmits a SEND that
		// found the receive queue empty.
		if (p.Connection == "UC" || p.Connection == "UD") && p.RxDepth == defRxSend {
			p.RxDepth = min(p.Iters, ucMaxRx)
		}
	} else {
		p.margin = p.Duration / 4
		p.noPeak = true
	}
	// perftest keeps -Q with events: "having a lot of processes with
	// use_event leads to bugs" (force_dependecies).
	// Nor for UD, whose messages are never that large (clamped to the
	// path MTU once it is known).
	if p.Size > cqModLimit && p.Connection != "UD" && !p.All && !reqCQMod && !p.UseEvent {
		p.CQMod = 1
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	if p.All {
		p.Size = maxSize
	}
	// A SEND server measures no peak: it only receives. With -b it sends
	// too, and measures its sending as a client does.
	if !p.Lat && (p.Iters > maxPeakIters || p.Verb == Send && !p.client && !p.Bidirectional) {
		p.noPeak = true
	}
	return nil
}

// resolveReads checks the outstanding reads (-o).
func (p *params) resolveReads() error {
	if p.OutReads < 0 {
		return usage("-o %d: outstanding reads must be 0 (the device maximum) or more", p.OutReads)
	}
	if p.OutReads > 0 && p.Verb != Read && p.Verb != Atomic {
		return usage("-o %d: Setting Outstanding reads only available on READ verb (and atomics)", p.OutReads)
	}
	return nil
}

// sizes lists the message sizes of the run: 2 B .. 8 MiB with -a.
func (p *params) sizes() []int {
	if !p.All {
		return []int{p.Size}
	}
	var s []int
	for i := 1; i < 24 && 1<<i <= p.Size; i++ { // p.Size: maxSize, or a UD run's path MTU
		s = append(s, 1<<i)
	}
	return s
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
