package mad

import "net/netip"

// pattern returns n bytes counting up from start, so that misplaced or
// shifted private data is visible.
func pattern(n int, start byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = start + byte(i)
	}
	return p
}

// sampleIPCM is an IP CM header as rping sends it in rping.pcap.
func sampleIPCM() IPCMHeaderFields {
	return IPCMHeaderFields{
		IPVersion: 4,
		SrcPort:   0xdf97,
		SrcAddr:   netip.MustParseAddr("192.0.2.12"),
		DstAddr:   netip.MustParseAddr("192.0.2.11"),
	}
}

func sampleREQ() REQFields {
	f := REQFields{
		LocalCommID:             0xba6bbd67,
		VendorID:                0x0002c9, // an IEEE OUI, as a vendor might use for ECE
		ServiceID:               NewIPCMServiceID(PortSpaceTCP, 7174),
		LocalCAGUID:             0x505400fffec0020c,
		LocalQKey:               0x11223344,
		LocalQPN:                0x000011,
		ResponderResources:      1,
		LocalEECN:               0xabcdef,
		InitiatorDepth:          2,
		RemoteEECN:              0x123456,
		RemoteCMResponseTimeout: 20,
		TransportServiceType:    TransportUC,
		EndToEndFlowControl:     true,
		StartingPSN:             0x314830,
		LocalCMResponseTimeout:  19,
		RetryCount:              7,
		PartitionKey:            0xffff,
		PathPacketPayloadMTU:    3,
		RDCExists:               true,
		RNRRetryCount:           6,
		MaxCMRetries:            15,
		SRQ:                     true,
		ExtendedTransportType:   1,
		Primary: REQPath{
			LocalPortLID:    0xffff,
			RemotePortLID:   0xfffe,
			LocalPortGID:    netip.MustParseAddr("::ffff:192.0.2.12").As16(),
			RemotePortGID:   netip.MustParseAddr("::ffff:192.0.2.11").As16(),
			FlowLabel:       0xb2f4f,
			PacketRate:      0x32,
			TrafficClass:    0x6a,
			HopLimit:        64,
			SL:              5,
			SubnetLocal:     true,
			LocalACKTimeout: 19,
		},
		Alternate: REQPath{
			LocalPortLID:    1,
			RemotePortLID:   2,
			LocalPortGID:    netip.MustParseAddr("fd00:c0:2::12").As16(),
			RemotePortGID:   netip.MustParseAddr("fd00:c0:2::11").As16(),
			FlowLabel:       0x12345,
			PacketRate:      3,
			TrafficClass:    0x10,
			HopLimit:        255,
			SL:              15,
			SubnetLocal:     true,
			LocalACKTimeout: 31,
		},
		SAPSupported: true,
	}
	pd := sampleIPCM().Append(nil)
	pd = append(pd, pattern(REQPrivateDataLen-IPCMHeaderLen, 0x80)...)
	f.PrivateData = [REQPrivateDataLen]byte(pd)
	return f
}

func sampleMRA() MRAFields {
	return MRAFields{
		LocalCommID:    0x4944653c,
		RemoteCommID:   0xba6bbd67,
		MessageMRAed:   MsgREP,
		ServiceTimeout: 23,
		PrivateData:    [MRAPrivateDataLen]byte(pattern(MRAPrivateDataLen, 1)),
	}
}

func sampleREJ() REJFields {
	return REJFields{
		LocalCommID:      0x4944653c,
		RemoteCommID:     0xba6bbd67,
		MessageRejected:  MsgREQ,
		RejectInfoLength: 72,
		Reason:           RejectConsumer,
		ARI:              [REJARILen]byte(pattern(REJARILen, 0x40)),
		PrivateData:      [REJPrivateDataLen]byte(pattern(REJPrivateDataLen, 2)),
	}
}

func sampleREP() REPFields {
	return REPFields{
		LocalCommID:         0x4944653c,
		RemoteCommID:        0xba6bbd67,
		LocalQKey:           0x01234567,
		LocalQPN:            0x000011,
		VendorID:            0x0002c9,
		LocalEEContext:      0x00beef,
		StartingPSN:         0x3439cf,
		ResponderResources:  1,
		InitiatorDepth:      1,
		TargetACKDelay:      15,
		FailoverAccepted:    2,
		EndToEndFlowControl: true,
		RNRRetryCount:       7,
		SRQ:                 true,
		LocalCAGUID:         0x505400fffec0020b,
		PrivateData:         [REPPrivateDataLen]byte(pattern(REPPrivateDataLen, 3)),
	}
}

func sampleRTU() RTUFields {
	return RTUFields{
		LocalCommID:  0xba6bbd67,
		RemoteCommID: 0x4944653c,
		PrivateData:  [RTUPrivateDataLen]byte(pattern(RTUPrivateDataLen, 4)),
	}
}

func sampleDREQ() DREQFields {
	return DREQFields{
		LocalCommID:  0xba6bbd67,
		RemoteCommID: 0x4944653c,
		RemoteQPN:    0x000011,
		PrivateData:  [DREQPrivateDataLen]byte(pattern(DREQPrivateDataLen, 5)),
	}
}

func sampleDREP() DREPFields {
	return DREPFields{
		LocalCommID:  0x4944653c,
		RemoteCommID: 0xba6bbd67,
		PrivateData:  [DREPPrivateDataLen]byte(pattern(DREPPrivateDataLen, 6)),
	}
}

func sampleSIDRREQ() SIDRREQFields {
	f := SIDRREQFields{
		RequestID:    0xbe6bbd67,
		PartitionKey: 0xffff,
		ServiceID:    NewIPCMServiceID(PortSpaceUDP, 7174),
	}
	pd := sampleIPCM().Append(nil)
	pd = append(pd, pattern(SIDRREQPrivateDataLen-IPCMHeaderLen, 7)...)
	f.PrivateData = [SIDRREQPrivateDataLen]byte(pd)
	return f
}

func sampleSIDRREP() SIDRREPFields {
	return SIDRREPFields{
		RequestID:            0xbe6bbd67,
		Status:               SIDRRedirect,
		AdditionalInfoLength: 72,
		VendorID:             0x0002c9,
		QPN:                  0x00001f,
		ServiceID:            NewIPCMServiceID(PortSpaceUDP, 7174),
		QKey:                 0x01234567,
		ClassPortInfo:        [SIDRREPInfoLen]byte(pattern(SIDRREPInfoLen, 0x90)),
		PrivateData:          [SIDRREPPrivateDataLen]byte(pattern(SIDRREPPrivateDataLen, 8)),
	}
}

// appender is what every Fields type implements.
type appender interface {
	Append(b []byte) []byte
	Validate() error
}

// sampleMAD is a complete CM MAD built from a sample message.
type sampleMAD struct {
	name string
	attr AttributeID
	msg  appender
}

func sampleMessages() []sampleMAD {
	return []sampleMAD{
		{"REQ", AttrREQ, sampleREQ()},
		{"MRA", AttrMRA, sampleMRA()},
		{"REJ", AttrREJ, sampleREJ()},
		{"REP", AttrREP, sampleREP()},
		{"RTU", AttrRTU, sampleRTU()},
		{"DREQ", AttrDREQ, sampleDREQ()},
		{"DREP", AttrDREP, sampleDREP()},
		{"SIDR_REQ", AttrSIDRREQ, sampleSIDRREQ()},
		{"SIDR_REP", AttrSIDRREP, sampleSIDRREP()},
	}
}

// bytes encodes the sample as a 256-byte CM MAD.
func (s sampleMAD) bytes() []byte {
	b := NewCMHeader(s.attr, 0x0000000267bd6bba).Append(make([]byte, 0, Size))
	return s.msg.Append(b)
}
