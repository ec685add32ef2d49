package mad

import (
	"fmt"
	"iter"
	"net/netip"
)

// IPCMHeader is a view of the 36-byte IP CM private-data header (IBTA Vol 1
// Annex A11, "RDMA IP CM Service"; Linux cma.c struct cma_hdr) that rdma_cm
// puts at the start of the private data of a REQ or SIDR_REQ whose service ID
// is an IP CM one:
//
//	byte 0     major version (4 bits), minor version (4 bits): both 0
//	byte 1     IP version (4 bits: 4 or 6), reserved (4 bits)
//	bytes 2–3  source port, big-endian
//	bytes 4–19 source address; an IPv4 address is in the last 4 bytes (16–19)
//	bytes 20–35 destination address; an IPv4 address is in bytes 32–35
//
// The consumer's private data follows the header. An IPCMHeader must be at
// least [IPCMHeaderLen] bytes long; get one from [ParseIPCMHeader].
type IPCMHeader []byte

const (
	ipcmMajorVersion = iota
	ipcmMinorVersion
	ipcmIPVersion
	ipcmReserved1
	ipcmSrcPort
	ipcmSrcAddr
	ipcmDstAddr
)

// ipcmLayout is IBTA Vol 1 Annex A11 (IP CM private data format). Read-only.
var ipcmLayout = [...]Field{
	ipcmMajorVersion: {"MajorVersion", 0, 0, 4, KindUint},
	ipcmMinorVersion: {"MinorVersion", 0, 4, 4, KindUint},
	ipcmIPVersion:    {"IPVersion", 1, 0, 4, KindUint},
	ipcmReserved1:    {"Reserved1", 1, 4, 4, KindReserved},
	ipcmSrcPort:      {"SrcPort", 2, 0, 16, KindUint},
	ipcmSrcAddr:      {"SrcAddr", 4, 0, 128, KindIPAddr},
	ipcmDstAddr:      {"DstAddr", 20, 0, 128, KindIPAddr},
}

// ParseIPCMHeader checks b, the private data of a REQ or SIDR_REQ, and
// returns a view of its first 36 bytes. Like Linux's cma_save_ip_info it
// refuses a version byte other than 0 (EINVAL there) and an IP version other
// than 4 or 6 (EAFNOSUPPORT there), both as [ErrIPCMHeader].
func ParseIPCMHeader(b []byte) (IPCMHeader, error) {
	if len(b) < IPCMHeaderLen {
		return nil, fmt.Errorf("%w: IP CM header is %d bytes, want %d", ErrTruncated, len(b), IPCMHeaderLen)
	}
	h := IPCMHeader(b[:IPCMHeaderLen:IPCMHeaderLen])
	if h.MajorVersion() != 0 || h.MinorVersion() != 0 {
		return nil, fmt.Errorf("%w: version %d.%d, want 0.0", ErrIPCMHeader, h.MajorVersion(), h.MinorVersion())
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return nil, fmt.Errorf("%w: IP version %d", ErrIPCMHeader, v)
	}
	return h, nil
}

func ipcmOf(s ServiceID, privateData []byte) (IPCMHeader, error) {
	if !s.IsIPCM() {
		return nil, fmt.Errorf("%w: service ID 0x%016x", ErrNotIPCM, uint64(s))
	}
	return ParseIPCMHeader(privateData)
}

func (h IPCMHeader) get(i int) uint64    { return ipcmLayout[i].getUint(h) }
func (h IPCMHeader) set(i int, v uint64) { ipcmLayout[i].setUint(h, v) }

// MajorVersion returns the 4-bit major version (0).
func (h IPCMHeader) MajorVersion() uint8 { return uint8(h.get(ipcmMajorVersion)) }

// MinorVersion returns the 4-bit minor version (0).
func (h IPCMHeader) MinorVersion() uint8 { return uint8(h.get(ipcmMinorVersion)) }

// IPVersion returns the 4-bit IP version: 4 or 6.
func (h IPCMHeader) IPVersion() uint8 { return uint8(h.get(ipcmIPVersion)) }

// SrcPort returns the active side's port.
func (h IPCMHeader) SrcPort() uint16 { return uint16(h.get(ipcmSrcPort)) }

// addrSlot returns the bytes of an address slot that hold the address: the
// last 4 for IPv4, all 16 otherwise.
func (h IPCMHeader) addrSlot(i int) []byte {
	slot := ipcmLayout[i].bytes(h)
	if h.IPVersion() == 4 {
		return slot[12:]
	}
	return slot
}

func addrOf(p []byte) netip.Addr {
	if len(p) == 4 {
		return netip.AddrFrom4([4]byte(p))
	}
	return netip.AddrFrom16([16]byte(p))
}

// SrcAddr returns the active side's address: IPv4 if IPVersion is 4, else the
// 16-byte slot as an IPv6 address.
func (h IPCMHeader) SrcAddr() netip.Addr { return addrOf(h.addrSlot(ipcmSrcAddr)) }

// DstAddr returns the passive side's address: IPv4 if IPVersion is 4, else
// the 16-byte slot as an IPv6 address.
func (h IPCMHeader) DstAddr() netip.Addr { return addrOf(h.addrSlot(ipcmDstAddr)) }

// SetMajorVersion sets the major version (4 bits).
func (h IPCMHeader) SetMajorVersion(v uint8) { h.set(ipcmMajorVersion, uint64(v)) }

// SetMinorVersion sets the minor version (4 bits).
func (h IPCMHeader) SetMinorVersion(v uint8) { h.set(ipcmMinorVersion, uint64(v)) }

// SetIPVersion sets the IP version (4 bits). Set it before the addresses.
func (h IPCMHeader) SetIPVersion(v uint8) { h.set(ipcmIPVersion, uint64(v)) }

// SetSrcPort sets the source port.
func (h IPCMHeader) SetSrcPort(v uint16) { h.set(ipcmSrcPort, uint64(v)) }

func (h IPCMHeader) setAddr(i int, a netip.Addr) {
	slot := ipcmLayout[i].bytes(h)
	clear(slot)
	switch {
	case a.Is4():
		a4 := a.As4()
		copy(slot[12:], a4[:])
	case a.Is6():
		a16 := a.As16()
		copy(slot, a16[:])
	}
}

// SetSrcAddr stores a in the source slot: an IPv4 address in its last 4 bytes
// with 12 zero bytes before it, an IPv6 address in all 16; the zero Addr
// clears the slot.
func (h IPCMHeader) SetSrcAddr(a netip.Addr) { h.setAddr(ipcmSrcAddr, a) }

// SetDstAddr stores a in the destination slot, as SetSrcAddr does.
func (h IPCMHeader) SetDstAddr(a netip.Addr) { h.setAddr(ipcmDstAddr, a) }

// All yields every field of the header in wire order; address values hold 4
// bytes when IPVersion is 4 and 16 otherwise.
func (h IPCMHeader) All() iter.Seq2[Field, Value] {
	return func(yield func(Field, Value) bool) {
		for i := range ipcmLayout {
			f := &ipcmLayout[i]
			v := f.value(h)
			if f.Kind == KindIPAddr {
				v.b = h.addrSlot(i)
			}
			if !yield(*f, v) {
				return
			}
		}
	}
}

// Fields decodes the header.
func (h IPCMHeader) Fields() IPCMHeaderFields {
	return IPCMHeaderFields{
		MajorVersion: h.MajorVersion(),
		MinorVersion: h.MinorVersion(),
		IPVersion:    h.IPVersion(),
		SrcPort:      h.SrcPort(),
		SrcAddr:      h.SrcAddr(),
		DstAddr:      h.DstAddr(),
	}
}

// IPCMHeaderFields holds the contents of an IP CM header. The zero value's
// versions are the ones rdma_cm sends ([IPCMVersion]).
type IPCMHeaderFields struct {
	MajorVersion uint8 // 4 bits
	MinorVersion uint8 // 4 bits
	IPVersion    uint8 // 4 bits: 4 or 6
	SrcPort      uint16
	SrcAddr      netip.Addr
	DstAddr      netip.Addr
}

// Append appends the 36-byte header to b. Versions wider than 4 bits are
// truncated; Validate reports them and addresses that do not match IPVersion.
func (f IPCMHeaderFields) Append(b []byte) []byte {
	b, _ = f.appendChecked(b)
	return b
}

// Validate reports a version too wide for its 4 bits ([*RangeError]) or an
// address of the wrong family for IPVersion 4 or 6 ([ErrIPCMHeader]).
func (f IPCMHeaderFields) Validate() error {
	var buf [IPCMHeaderLen]byte
	if _, err := f.appendChecked(buf[:0]); err != nil {
		return err
	}
	for _, a := range [2]netip.Addr{f.SrcAddr, f.DstAddr} {
		if (f.IPVersion == 4 && !a.Is4()) || (f.IPVersion == 6 && !a.Is6()) {
			return fmt.Errorf("%w: address %v with IP version %d", ErrIPCMHeader, a, f.IPVersion)
		}
	}
	return nil
}

func (f *IPCMHeaderFields) appendChecked(b []byte) ([]byte, error) {
	e, b := newEncoder(b, IPCMHeaderLen, ipcmLayout[:])
	e.uint(ipcmMajorVersion, uint64(f.MajorVersion))
	e.uint(ipcmMinorVersion, uint64(f.MinorVersion))
	e.uint(ipcmIPVersion, uint64(f.IPVersion))
	e.uint(ipcmSrcPort, uint64(f.SrcPort))
	h := IPCMHeader(e.b)
	h.SetSrcAddr(f.SrcAddr)
	h.SetDstAddr(f.DstAddr)
	return b, e.err("IPCMHeader", ipcmLayout[:])
}
