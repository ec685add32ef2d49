package mad

// Sizes of a MAD and its parts (IBTA Vol 1 §13.4.2). A MAD on QP0/QP1 is always
// 256 bytes; the CM class uses the 232 bytes after the common header as its
// attribute data (§12.6).
const (
	HeaderLen = 24               // MAD common header
	Size      = 256              // a whole MAD, as carried in one UD SEND to QP1
	DataLen   = Size - HeaderLen // CM attribute data (232 bytes)
)

// Sizes of the variable-content parts of CM messages, in bytes (IBTA Vol 1
// §12.6, Tables 106–120; Linux's enum ib_cm_data_size). These are the full
// fields on the wire.
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REJARILen             = 72 // Additional Rejection Information
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	SIDRREPInfoLen        = 72 // ClassPortInfo (Additional Information) in SIDR_REP
)

// Largest private data librdmacm lets a consumer pass, in bytes. For REQ and
// SIDR_REQ the limit is smaller than the CM field because rdma_cm puts the
// 36-byte IP CM header ([IPCMHeaderLen]) in front of the consumer's data
// (92-36 = 56, 216-36 = 180).
const (
	RDMACMMaxREQPrivateData     = REQPrivateDataLen - IPCMHeaderLen     // 56
	RDMACMMaxREPPrivateData     = REPPrivateDataLen                     // 196
	RDMACMMaxREJPrivateData     = REJPrivateDataLen                     // 148
	RDMACMMaxDREQPrivateData    = DREQPrivateDataLen                    // 220
	RDMACMMaxSIDRREQPrivateData = SIDRREQPrivateDataLen - IPCMHeaderLen // 180
	RDMACMMaxSIDRREPPrivateData = SIDRREPPrivateDataLen                 // 136
)

// IPCMHeaderLen is the size of the IP CM private-data header (IBTA Vol 1
// Annex A11; Linux cma.c struct cma_hdr).
const IPCMHeaderLen = 36

// Protocol versions.
const (
	// BaseVersion is the MAD base version of every IBTA MAD (§13.4.2).
	BaseVersion = 1
	// CMClassVersion is the CM class version of IBTA 1.2 and later (Linux
	// IB_CM_CLASS_VERSION).
	CMClassVersion = 2
	// IPCMVersion is the IP CM header version rdma_cm sends and accepts
	// (Linux CMA_VERSION; major and minor version both 0).
	IPCMVersion = 0x00
)
