package rsocket

import (
	"encoding/binary"
	"fmt"
)

// The protocol's numbers, as librdmacm's rsocket.c (rdma-core v44) has
// them; the package doc says what each is for.
const (
	// connDataLen is sizeof(struct rs_conn_data): version, flags,
	// credits, 3 reserved bytes, target_iomap_size, target_sgl, data_buf.
	connDataLen = 40
	sgeLen      = 16 // sizeof(struct rs_sge): addr, key, length

	protoVersion = 1 // rs_conn_data.version

	flagNet   = 1 << 0 // RS_CONN_FLAG_NET: the sender is big-endian
	flagIOMap = 1 << 1 // RS_CONN_FLAG_IOMAP: target_iomap_size is meaningful

	sglSize = 2 // RS_SGL_SIZE: entries in each side's target SGL

	maxTransfer = 64 << 10 // RS_MAX_TRANSFER: the largest data message a sender posts
	sndLowat    = 2048     // RS_SNDLOWAT: free send-ring bytes a sender waits for
	qpMinSize   = 16       // RS_QP_MIN_SIZE
	qpMaxSize   = 0xFFFE   // RS_QP_MAX_SIZE
	ctrlSize    = 4        // RS_QP_CTRL_SIZE: control messages in flight at most

	// The defaults of rs_configure without /etc/rdma/rsocket files.
	defMem    = 1 << 17 // mem_default: receive ring bytes
	defWMem   = 1 << 17 // wmem_default: send ring bytes
	defSQSize = 384     // sqsize_default
	defRQSize = 384     // rqsize_default
	defInline = 64      // inline_default

	// RS_CONN_RETRIES is how often rsocket retries address and route
	// resolution; goroce's resolve locally and need none.
)

// op is the message type in bits 31:29 of the immediate data of every
// RDMA WRITE WITH IMMEDIATE rsocket sends (rs_msg_op).
type op uint8

const (
	opData         op = iota // RS_OP_DATA: bits 28:0 are the bytes written
	opRsvdDataMore           // RS_OP_RSVD_DATA_MORE: reserved
	opWrite                  // RS_OP_WRITE: a direct (iomap) write; never on the wire
	opRsvdDRAMore            // RS_OP_RSVD_DRA_MORE: reserved
	opSGL                    // RS_OP_SGL: bits 28:0 are the new credit limit
	opRsvd                   // RS_OP_RSVD: reserved
	opIOMapSGL               // RS_OP_IOMAP_SGL: bits 15:0 index an updated iomap entry
	opCtrl                   // RS_OP_CTRL: bits 28:0 are an RS_CTRL_* value
)

var opNames = [...]string{"RS_OP_DATA", "RS_OP_RSVD_DATA_MORE", "RS_OP_WRITE", "RS_OP_RSVD_DRA_MORE",
	"RS_OP_SGL", "RS_OP_RSVD", "RS_OP_IOMAP_SGL", "RS_OP_CTRL"}

func (o op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("RS_OP(%d)", uint8(o))
}

// Control messages (RS_OP_CTRL's data).
const (
	ctrlDisconnect = 0 // RS_CTRL_DISCONNECT: the sender will neither send nor receive
	ctrlKeepalive  = 1 // RS_CTRL_KEEPALIVE: only ever a work request ID (a 0-byte RDMA WRITE)
	ctrlShutdown   = 2 // RS_CTRL_SHUTDOWN: the sender will send no more
)

func ctrlName(v uint32) string {
	switch v {
	case ctrlDisconnect:
		return "RS_CTRL_DISCONNECT"
	case ctrlKeepalive:
		return "RS_CTRL_KEEPALIVE"
	case ctrlShutdown:
		return "RS_CTRL_SHUTDOWN"
	}
	return fmt.Sprintf("RS_CTRL(%d)", v)
}

// msg is one rsocket message: the immediate data's value (big-endian on
// the wire, as every immediate; rs_post_msg's htobe32).
type msg uint32

const msgDataMask = 0x1FFFFFFF

// mkMsg is rs_msg_set: op in bits 31:29, data in 28:0.
func mkMsg(o op, data uint32) msg { return msg(uint32(o)<<29 | data&msgDataMask) }

func (m msg) op() op         { return op(m >> 29) }
func (m msg) data() uint32   { return uint32(m) & msgDataMask }
func (m msg) String() string { return describeMsg(m) }

// describeMsg names a message as the package doc does.
func describeMsg(m msg) string {
	switch m.op() {
	case opData:
		return fmt.Sprintf("RS_OP_DATA %d bytes", m.data())
	case opSGL:
		return fmt.Sprintf("RS_OP_SGL credits to %d", m.data()&0xFFFF)
	case opIOMapSGL:
		return fmt.Sprintf("RS_OP_IOMAP_SGL entry %d", m.data()&0xFFFF)
	case opCtrl:
		return "RS_OP_CTRL " + ctrlName(m.data())
	}
	return fmt.Sprintf("%v %#x", m.op(), m.data())
}

// sge is struct rs_sge: a buffer of the peer's, as an RDMA WRITE targets
// it.
type sge struct {
	addr uint64
	key  uint32
	len  uint32
}

// appendSGE appends s in byte order o: big-endian in the connection data,
// the receiver's own order in the SGL updates written into its target
// SGL (rs_send_credits, RS_OPT_SWAP_SGL).
func appendSGE(b []byte, s sge, o binary.AppendByteOrder) []byte {
	b = o.AppendUint64(b, s.addr)
	b = o.AppendUint32(b, s.key)
	return o.AppendUint32(b, s.len)
}

// parseSGE reads an rs_sge from the first 16 bytes of b (the caller has
// checked its length).
func parseSGE(b []byte, o binary.ByteOrder) sge {
	return sge{addr: o.Uint64(b), key: o.Uint32(b[8:]), len: o.Uint32(b[12:])}
}

// connData is struct rs_conn_data, the private data of the REQ and the
// REP (after the RDMA IP CM header the CM adds for AF_INET and AF_INET6).
// Its multi-byte fields are big-endian whatever the host.
type connData struct {
	version    uint8
	flags      uint8
	credits    uint16 // the sender's receive queue size: how many data messages the peer may send at first
	iomapSize  uint8  // target_iomap_size, in rs_value_to_scale's 8-bit encoding
	targetSGL  sge    // where the peer writes SGL updates: addr, key, entries (not bytes)
	dataBuf    sge    // the first receive buffer: the peer's target SGL entry 0
	reservedOK bool   // reserved bytes all zero (parse only)
}

// append encodes c (rs_format_conn_data).
func (c connData) append(b []byte) []byte {
	b = append(b, c.version, c.flags)
	b = binary.BigEndian.AppendUint16(b, c.credits)
	b = append(b, 0, 0, 0, c.iomapSize)
	b = appendSGE(b, c.targetSGL, binary.BigEndian)
	return appendSGE(b, c.dataBuf, binary.BigEndian)
}

// parseConnData decodes the connection data at the start of a REQ's or
// REP's private data.
func parseConnData(b []byte) (connData, error) {
	if len(b) < connDataLen {
		return connData{}, fmt.Errorf("connection data of %d bytes: struct rs_conn_data has %d", len(b), connDataLen)
	}
	return connData{
		version:    b[0],
		flags:      b[1],
		credits:    binary.BigEndian.Uint16(b[2:]),
		reservedOK: b[4] == 0 && b[5] == 0 && b[6] == 0,
		iomapSize:  b[7],
		targetSGL:  parseSGE(b[8:], binary.BigEndian),
		dataBuf:    parseSGE(b[24:], binary.BigEndian),
	}, nil
}

// scaleToValue is rs_scale_to_value(v, 8): target_iomap_size's encoding,
// values up to 128 as they are, larger ones as 128|(v>>8) meaning v<<8.
func scaleToValue(v uint8) int {
	if v <= 1<<7 {
		return int(v)
	}
	return int(v&^(1<<7)) << 8
}
