package lab

import "net/netip"

func netipParse(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.IPv6Unspecified()
	}
	if a.Is4() {
		return netip.AddrFrom16(a.As16())
	}
	return a
}
