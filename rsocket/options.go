package rsocket

import (
	"fmt"
	"syscall"
	"time"
)

// Options are what rsetsockopt sets on an rsocket before it connects or
// listens. The zero value is rsocket.c's defaults (rs_configure with no
// /etc/rdma/rsocket files). Out-of-range values are EINVAL, with the range
// named, where rsocket clamps them silently.
type Options struct {
	// ReadBuffer is SO_RCVBUF: the receive ring holds twice this many
	// bytes, as rsocket (and Linux) double it. 0: a ring of 128 KiB
	// (mem_default). Valid: 2048 to 1 GiB.
	//
	// The writer may run a whole ring ahead of the reader, and each half
	// the reader frees costs a control message and, when the ring is
	// full, a wait: for bulk transfers set ReadBuffer and WriteBuffer to
	// 1 MiB (measured: about twice the default's throughput; BENCHMARKS.md,
	// "The rings' size").
	ReadBuffer int
	// WriteBuffer is SO_SNDBUF: the send ring holds twice this many bytes.
	// 0: a ring of 128 KiB (wmem_default). Valid: 2048 to 1 GiB.
	WriteBuffer int
	// SendQueue and RecvQueue are RDMA_SQSIZE and RDMA_RQSIZE: the QP's
	// send and receive queue depths. The receive queue depth is also the
	// credits this side grants: how many data messages the peer may have
	// sent that this side's reader has not consumed. 0: 384. Valid: 16 to
	// 65534.
	SendQueue, RecvQueue int
	// Inline is RDMA_INLINE: data messages of at most this many bytes are
	// posted inline. 0: 64 (inline_default); NoInline for none (what
	// rstream sets for its bandwidth tests). Valid: up to 256, the
	// device's max_inline_data.
	Inline int
	// KeepAlive, if positive, is SO_KEEPALIVE with TCP_KEEPIDLE: a 0-byte
	// RDMA WRITE is sent this often (rsocket counts it in whole seconds;
	// so does this), so the RC transport keeps probing the peer even when
	// this side has nothing to send. Where the transport's retries are
	// finite, a peer that is gone then fails the connection; with the
	// retry count 7 that rsockets ask for in the REQ, Linux rxe and
	// goroce retry forever once the peer has answered, so there the
	// keepalive only keeps the path in use. 0: off.
	KeepAlive time.Duration
}

// NoInline in Options.Inline posts every data message from the send ring
// (RDMA_INLINE 0).
const NoInline = -1

// maxInline is the engine's max_inline_data.
const maxInline = 256

// params are the resolved sizes of one connection.
type params struct {
	rbufSize, sbufSize int // bytes of the receive and send rings
	sqSize, rqSize     int
	inline             int // 0: none
	keepAlive          time.Duration
}

// resolve checks o and fills in the defaults.
func (o Options) resolve() (params, error) {
	p := params{rbufSize: defMem, sbufSize: defWMem, sqSize: defSQSize, rqSize: defRQSize, inline: defInline, keepAlive: o.KeepAlive}
	const minBuf, maxBuf = sndLowat, 1 << 30
	if o.ReadBuffer != 0 {
		if o.ReadBuffer < minBuf || o.ReadBuffer > maxBuf {
			return p, fmt.Errorf("rsocket: Options.ReadBuffer %d (SO_RCVBUF): valid %d to %d bytes: %w", o.ReadBuffer, minBuf, maxBuf, syscall.EINVAL)
		}
		p.rbufSize = o.ReadBuffer << 1
	}
	if o.WriteBuffer != 0 {
		if o.WriteBuffer < minBuf || o.WriteBuffer > maxBuf {
			return p, fmt.Errorf("rsocket: Options.WriteBuffer %d (SO_SNDBUF): valid %d to %d bytes: %w", o.WriteBuffer, minBuf, maxBuf, syscall.EINVAL)
		}
		p.sbufSize = o.WriteBuffer << 1
	}
	for _, q := range []struct {
		name string
		v    int
		dst  *int
	}{{"SendQueue (RDMA_SQSIZE)", o.SendQueue, &p.sqSize}, {"RecvQueue (RDMA_RQSIZE)", o.RecvQueue, &p.rqSize}} {
		if q.v == 0 {
			continue
		}
		if q.v < qpMinSize || q.v > qpMaxSize {
			return p, fmt.Errorf("rsocket: Options.%s %d: valid %d to %d: %w", q.name, q.v, qpMinSize, qpMaxSize, syscall.EINVAL)
		}
		*q.dst = q.v
	}
	switch {
	case o.Inline == NoInline:
		p.inline = 0
	case o.Inline < 0 || o.Inline > maxInline:
		return p, fmt.Errorf("rsocket: Options.Inline %d (RDMA_INLINE): valid 0 (default %d) to %d, or NoInline: %w", o.Inline, defInline, maxInline, syscall.EINVAL)
	case o.Inline > 0:
		p.inline = o.Inline
	}
	if o.KeepAlive < 0 {
		return p, fmt.Errorf("rsocket: Options.KeepAlive %v: valid 0 (off) or a positive duration: %w", o.KeepAlive, syscall.EINVAL)
	}
	return p, nil
}
