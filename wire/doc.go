// Package wire encodes and decodes every header RoCE v1 and RoCE v2 carry:
// Ethernet II (with one 802.1Q tag), IPv4, IPv6, UDP, the InfiniBand GRH,
// and the InfiniBand transport headers BTH, RDETH, DETH, XRCETH, RETH,
// AETH, AtomicETH, AtomicAckETH, ImmDt, IETH and FETH, plus the invariant CRC
// (ICRC) of IBTA Vol 1 Annex A16 (RoCE v1) and A17 (RoCE v2).
//
// Headers are views: a named []byte type (for example BTH) whose accessors
// read and setters write the bytes in place. A view's length is checked once,
// when it is made by its Parse function; accessors never check again and
// never allocate. Encoders append at the end of a caller's slice: a header
// of several fields has a Fields struct with an Append method, and the
// one-value headers have an Append function: AppendAETH, AppendAtomicAckETH,
// AppendWord24 (RDETH, XRCETH), AppendWord32 (ImmDt, IETH) and AppendFETH.
//
// The opcode table (Opcodes) is data: for every opcode it names the headers
// the packet carries and their offsets, and the same table drives parsing,
// building and validation.
//
// This package uses the standard library only and performs no I/O.
package wire
