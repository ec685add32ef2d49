package verbs

import (
	"syscall"

	"github.com/goroce/goroce/wire"
)

// DeviceAttr is struct ibv_device_attr (the fields a soft RoCE device fills).
type DeviceAttr struct {
	FWVer           string
	NodeGUID        uint64
	SysImageGUID    uint64
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           int
	MaxQPWR         int
	DeviceCapFlags  uint64
	MaxSGE          int
	MaxSGERD        int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxEERdAtom     int
	MaxResRdAtom    int
	MaxQPInitRdAtom int
	MaxEEInitRdAtom int
	AtomicCap       int // 1 = ATOMIC_HCA
	MaxEE           int
	MaxRDD          int
	MaxMW           int
	MaxAH           int
	// MaxMcastGrp, MaxMcastQPAttach and MaxTotalMcastQPAttach are
	// max_mcast_grp, max_mcast_qp_attach and max_total_mcast_qp_attach.
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCAAckDelay       int
	PhysPortCnt           int
	MaxInlineData         int
	MaxMsgSize            uint64
}

// DeviceCapFlags as rxe reports them (ibv_devinfo -v: 0x01223c76).
const deviceCapFlags = 0x01223c76

// Query returns the device attributes, like ibv_query_device.
func (d *Device) Query() DeviceAttr { return DeviceAttrFor(d.guid) }

// NodeGUIDFromMAC is the node GUID of a device on a netdev with this MAC:
// its EUI-64, as rxe derives it (52:54:00:c0:02:0b → 5054:00ff:fec0:020b).
func NodeGUIDFromMAC(m wire.MAC) uint64 {
	return uint64(m[0]^2)<<56 | uint64(m[1])<<48 | uint64(m[2])<<40 | 0xFF<<32 | 0xFE<<24 |
		uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

// DeviceAttrFor returns the attributes of a device with node GUID guid:
// what Query returns, for tools that describe a device without running it.
func DeviceAttrFor(guid uint64) DeviceAttr {
	return DeviceAttr{
		FWVer: "0.0.0", NodeGUID: guid, SysImageGUID: guid, MaxMRSize: MaxMRSize, PageSizeCap: PageSizeCap,
		VendorID: VendorID, MaxQP: MaxQP, MaxQPWR: MaxQPWR, DeviceCapFlags: deviceCapFlags, MaxSGE: MaxSGE,
		MaxSGERD: MaxSGERD, MaxCQ: MaxCQ, MaxCQE: MaxCQE, MaxMR: MaxMR, MaxPD: MaxPD, MaxQPRdAtom: MaxQPRdAtom,
		MaxResRdAtom: MaxResRdAtom, MaxQPInitRdAtom: MaxQPInitRdAtom, AtomicCap: AtomicCapHCA, MaxAH: MaxAH, MaxMW: MaxMW,
		MaxSRQ: MaxSRQ, MaxSRQWR: MaxSRQWR, MaxSRQSGE: MaxSRQSGE, MaxPKeys: 64, LocalCAAckDelay: LocalCAAckDelay,
		PhysPortCnt: 1, MaxInlineData: MaxInlineData, MaxMsgSize: MaxMsgSize,
		MaxMcastGrp: MaxMcastGrp, MaxMcastQPAttach: MaxMcastQPAttach, MaxTotalMcastQPAttach: MaxTotalMcastQPAttach,
	}
}

// PortState is enum ibv_port_state.
//
//enum:string PORT_STATE(%d)
type PortState uint8

// Port states.
const (
	PortDown   PortState = 1 // "PORT_DOWN"
	PortActive PortState = 4 // "PORT_ACTIVE"
)

// PortAttr is struct ibv_port_attr for a RoCE port.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTableLen  int
	PortCapFlags uint32
	MaxMsgSize   uint64
	PKeyTableLen int
	LinkLayer    string // "Ethernet"
	PhysState    string // "LINK_UP" / "DISABLED"
	ActiveWidth  string
	ActiveSpeed  string
}

// QueryPort returns port attributes, like ibv_query_port.
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, errorf("query_port", d.name, 0, syscall.EINVAL, "port %d: the device has port 1 only", port)
	}
	return PortAttrFor(d.activeMTU, d.PortActive()), nil
}

// PortAttrFor returns the attributes of a port with this active MTU and
// state: what QueryPort returns, for tools that describe a port without
// running its device.
func PortAttrFor(activeMTU MTU, up bool) PortAttr {
	a := PortAttr{State: PortActive, MaxMTU: MTU4096, ActiveMTU: activeMTU, GIDTableLen: GIDTableLen,
		PortCapFlags: 0x00010000, MaxMsgSize: MaxMsgSize, PKeyTableLen: PKeyTableLen, LinkLayer: "Ethernet",
		PhysState: "LINK_UP", ActiveWidth: "1X", ActiveSpeed: "2.5 Gbps"}
	if !up {
		a.State, a.PhysState = PortDown, "DISABLED"
	}
	return a
}
