// Package rsocket gives Go programs byte streams over RDMA: a net.Conn and a
// net.Listener that speak the stream protocol of librdmacm's rsockets
// (rdma-core's librdmacm/rsocket.c, here as in v44), so a goroce program
// talks to rstream, rcopy and any program under librspreload.so, and to
// itself. Each connection is one RC queue pair made through package rdmacm;
// data moves by RDMA WRITE WITH IMMEDIATE into the receiver's ring, paced by
// credits.
//
//	cm := rdmacm.New(rdmacm.Options{})
//	cm.AddRoutedDevice(dev.Device, dev) // dev from host.Open: the CM picks it by route
//	c, err := rsocket.Dial(ctx, cm, "tcp", "192.0.2.11:7471")
//	...
//	l, err := rsocket.Listen(cm, "tcp", ":7471")
//	c, err := l.Accept()
//
// A Dialer or ListenConfig sets buffer sizes, queue depths, inline size
// and keepalive (Options), as rsetsockopt does before rconnect or rlisten.
// The device is the CM's choice: address and route resolution pick the
// device a route to the peer leaves through, as rdma_resolve_addr does
// (rdmacm.CM.AddRoutedDevice); cmd/roce gives its CM the devices of the
// runtime directory, as `roce ping` does.
//
// # The protocol
//
// What follows is rsocket.c's stream protocol as the code of v44 has it
// and as rstream between two Linux rxe devices puts it on the wire
// (testdata/rstream_small.txt decodes such a capture: every field named
// here appears there).
//
// Connection. The active side resolves the address and the route, creates
// its QP (RC; send queue sq_size deep with 2 SGEs, receive queue rq_size
// deep with 1, max_inline_data sq_inline, every send signaled, one CQ for
// both), registers its buffers, posts rq_size receives without SGEs, and
// sends a REQ (port space TCP; retry count 7, RNR retry count 7, end-to-end
// flow control 1, no RDMA READ depth) whose private data, after the RDMA
// IP CM header, is its connection data. The passive side checks the
// version, builds its own QP and buffers the same way and answers with a
// REP carrying its connection data (RNR retry count 7 and flow control 1,
// copied from the REQ); the RTU follows. A REQ of another version is
// rejected (REJ, consumer reject, no private data); a REP of another
// version ends the connect with ENOTSUP.
//
// Connection data (struct rs_conn_data, 40 bytes, multi-byte fields
// big-endian):
//
//	offset 0   version            1
//	       1   flags              RS_CONN_FLAG_NET (1): the sender is big-endian;
//	                              RS_CONN_FLAG_IOMAP (2): target_iomap_size is set
//	       2   credits            the sender's rq_size: data messages the peer may send
//	       4   reserved[3]        0
//	       7   target_iomap_size  iomap entries after the target SGL (8-bit scale)
//	       8   target_sgl         addr, rkey, and length in entries (2) of the
//	                              sender's target SGL: where the peer writes SGL updates
//	      24   data_buf           addr, rkey, length of the sender's first receive
//	                              buffer: the first half of its receive ring
//
// (each struct rs_sge is addr u64, key u32, length u32). v44 always sets
// RS_CONN_FLAG_IOMAP; goroce sets it too, advertises target_iomap_size 0
// and never writes into a peer's iomap space.
//
// Buffers. Each side has a send ring (sbuf, wmem_default 128 KiB, or twice
// SO_SNDBUF), registered for local access; a receive ring (rbuf,
// mem_default 128 KiB, or twice SO_RCVBUF) registered for remote write;
// and a target SGL of RS_SGL_SIZE = 2 entries (16 bytes each) registered
// for remote write, into which the peer writes where the next receive
// buffers are. The receive ring is handed out in halves: data_buf is the
// first half, and each SGL update gives the next half (the ring's free
// offset, rbuf_size/2 bytes) once the reader has freed a half's worth of
// bytes (at the first opportunity for the second half, which is free from
// the start). The sender keeps the two target entries in order: it writes
// into entry k, advancing its address and shrinking its length, and moves
// to entry k+1 (mod 2) when the length reaches 0; it never splits a
// message across entries, so a receiver finds each message where the last
// one ended, wrapping at the end of its ring.
//
// Messages. Every message is an RDMA WRITE WITH IMMEDIATE (a 0-byte one
// when only the immediate matters) whose 32-bit immediate is
// op<<29 | data:
//
//	0 RS_OP_DATA            data bytes were written at the next position of the
//	                        receiver's ring; data = their count (at most 64 KiB,
//	                        RS_MAX_TRANSFER)
//	1 RS_OP_RSVD_DATA_MORE  reserved
//	2 RS_OP_WRITE           an iomap write (riowrite); local only, never sent
//	3 RS_OP_RSVD_DRA_MORE   reserved
//	4 RS_OP_SGL             credits, and maybe a receive buffer: data = the
//	                        receiver's consumed-message count + rq_size, the new
//	                        limit of the sender's 16-bit message count; a 16-byte
//	                        write carries an rs_sge into the sender's target SGL
//	                        entry 1, 0, 1, ... in turn, a 0-byte one only credits
//	5 RS_OP_RSVD            reserved
//	6 RS_OP_IOMAP_SGL       an iomap entry (riomap) was written; data = its index
//	7 RS_OP_CTRL            data = RS_CTRL_DISCONNECT (0): the sender is gone;
//	                        RS_CTRL_SHUTDOWN (2): it will send no more
//
// RS_CTRL_KEEPALIVE (1) never travels as an immediate: a keepalive is an
// RDMA WRITE of 0 bytes without immediate (remote address and rkey 0, which
// a 0-byte write does not check), sent every TCP_KEEPIDLE seconds
// (tcp_keepalive_time, 7200, by default) while SO_KEEPALIVE is on; its only
// effect is that the RC transport notices a dead peer. The SGEs an SGL
// update writes are in the byte order of the receiver (little-endian from
// x86; RS_CONN_FLAG_NET in the peer's connection data says big-endian, and
// a sender whose order differs swaps them, RS_OPT_SWAP_SGL). goroce
// advertises little-endian and writes each peer's SGEs in the order its
// flag names.
//
// Credits. A sender may have sent at most the receiver's limit of data
// messages: it counts them in 16 bits (sseq_no) and stops when the count
// equals the limit (sseq_comp), which starts at the peer's credits and
// moves with each RS_OP_SGL. A receiver counts the messages its reader has
// consumed whole (rseq_no) and sends RS_OP_SGL with rseq_no + rq_size when
// a half of its ring is free (with that half as the new buffer) or when
// the reader has consumed rq_size/2 messages since the last grant (0
// bytes, credits only). Data messages need credits and room in the
// current target entry; control messages (RS_OP_SGL, RS_OP_CTRL and
// keepalives) need no credits but at most RS_QP_CTRL_SIZE = 4 may be in
// flight, and the send queue keeps that many entries for them. Every
// message consumes one of the receiver's posted receives, which it
// reposts as it polls; a control message that finds none is retried by
// the RC transport's RNR NAKs (RNR retry 7: forever).
//
// Sizes (rsocket.c's defaults, and rs_set_qp_size's bounds): sq_size and
// rq_size 384 (16 to 65534, RDMA_SQSIZE, RDMA_RQSIZE), sq_inline 64
// (RDMA_INLINE; data messages that fit go inline), send and receive rings
// 128 KiB (SO_SNDBUF, SO_RCVBUF, doubled as Linux doubles them); a sender
// waits for 2 KiB (RS_SNDLOWAT) of free send ring before it posts.
//
// Shutdown. shutdown(SHUT_WR) sends RS_CTRL_SHUTDOWN (RS_CTRL_DISCONNECT if
// the socket no longer reads); the peer then reads what arrived and then
// end of file. close and shutdown(SHUT_RDWR) send RS_CTRL_DISCONNECT and
// wait until every send has completed; then the QP goes to the error state
// and destroying the CM ID sends the DREQ. A receiver of RS_CTRL_DISCONNECT
// reads what arrived, then end of file; its writes fail (ECONNRESET). A
// DISCONNECTED event (the peer's DREQ) has the same effect.
//
// # What goroce does
//
// Conn implements the protocol above for net.Conn: Read copies out of the
// receive ring and returns credits as soon as the rules allow (rsocket
// returns them on its next poll); Write copies into the send ring (or
// posts inline) and returns once the data is posted. Each message is the
// largest the send ring, the target entry and RS_MAX_TRANSFER allow,
// where rsocket starts each send with 2 KiB and doubles (RS_OLAP_START_SIZE);
// the peer sees the same kinds of messages, in fewer pieces. Receive and
// send completions go to two CQs (rsocket has one; the wire cannot tell),
// polled by the goroutines that wait in Read, Write or Close, one at a
// time per CQ while the others wait on it, as rsocket's callers poll: the
// peer's message wakes the reader directly, and a reader never wakes for
// this side's own send completions. One goroutine per connection reads
// its CM events (DISCONNECTED), and one per listener its requests.
//
// CloseWrite is shutdown(SHUT_WR), CloseRead shutdown(SHUT_RD), Close
// close(): graceful, waiting up to the linger time (SetLinger, default
// 10 s) for the sends to complete; SetLinger(0) makes Close abortive (no
// RS_CTRL_DISCONNECT, the QP and ID destroyed at once: the peer learns
// from the DREQ). SetKeepAlive and SetKeepAlivePeriod are SO_KEEPALIVE and
// TCP_KEEPIDLE. Buffer sizes are fixed when the connection is made, as in
// rsocket: set Options.ReadBuffer and WriteBuffer on the Dialer or
// ListenConfig; SetReadBuffer and SetWriteBuffer on a Conn return an error
// that says so (rsocket ignores the late call silently).
//
// iomapped buffers (riomap, riowrite) are not implemented: goroce
// advertises no iomap space, so a peer's riomap fails (riostream reports
// "riomap: Cannot allocate memory"), and an RS_OP_IOMAP_SGL from a peer
// ends the connection with an error that says so. RS_OPT_MSG_SEND (iWARP:
// messages as SENDs) is not implemented either; RoCE always has WRITE
// WITH IMMEDIATE.
//
// Every message may come from a hostile peer. The receive ring's memory
// region is exactly the ring and the target SGL's exactly its two
// entries, so an RDMA WRITE outside them fails in the transport (the peer
// gets IBV_WC_REM_ACCESS_ERR, this side's QP goes to the error state) and
// nothing outside them is ever written. Within them, a message that breaks
// the protocol ends the connection with a *ProtocolError naming it (it
// unwraps to EPROTO): a version other than 1, data messages beyond the
// credits granted, a data message longer than the space left in the
// buffer it was granted, or whose immediate and write length differ, an
// SGL update into a target entry still in use or with an empty buffer,
// credits beyond the peer's own window, a reserved or unknown
// message type or control message, RS_OP_IOMAP_SGL, and a SEND where
// WRITE WITH IMMEDIATE belongs. The process never panics; the other
// connections go on.
package rsocket
