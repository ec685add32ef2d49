// Package mad encodes and decodes the InfiniBand management datagrams (MADs)
// that RDMA connection management exchanges on QP1 of a RoCE port: the
// 24-byte MAD common header (IBTA Vol 1 §13.4.2), the Communication
// Management messages REQ, MRA, REJ, REP, RTU, DREQ, DREP (§12.6) and
// SIDR_REQ, SIDR_REP (§12.11), the RDMA IP CM service ID and the IP CM
// private-data header (Annex A11) that Linux's rdma_cm puts in front of the
// consumer's private data.
//
// # Views
//
// Every structure is a view: a named []byte whose getters and setters read
// and write the wire bytes in place, like gVisor's header.UDP. Views do not
// check lengths; [Parse] does, once, and the typed accessors on [MAD] (such as
// [MAD.REQ]) hand out views only over a MAD that passed. Decoding allocates
// nothing. Every view has a Fields struct (such as [REQFields]) whose Append
// method encodes a complete structure onto a byte slice and whose Validate
// method reports values too wide for their field.
//
// # Layouts are data
//
// Each message has one table of [Field] descriptors (name, byte offset, bit
// offset, width, kind), in wire order and covering every bit of the message,
// reserved bits included. The accessors, the encoders and the All walkers
// all read that table, so each offset is written down exactly once; [Layout]
// lists a table, and a test checks that every table tiles its message
// without gaps or overlaps.
//
// Bit positions follow IBTA's Byte[Bit] notation: [Field.Bit] counts from the
// most significant bit of the byte at [Field.Offset], as Linux's
// IBA_FIELD_BLOC does (include/rdma/iba.h). Multi-byte fields are big-endian.
// Offsets of CM message fields are relative to the start of the attribute
// data, i.e. MAD byte 24, as in the IBTA message tables.
//
// Table numbers cited below are the ones Linux's include/rdma/ibta_vol1_c12.h
// cites (a recent release of Vol 1); older releases number the same tables
// differently, so section numbers are given as well.
package mad
