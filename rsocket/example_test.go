package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"strings"
	"time"

	"github.com/goroce/goroce/link/udp"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/rsocket"
	"github.com/goroce/goroce/verbs"
)

// Two soft RDMA devices on loopback (RoCE v2 over UDP sockets, no root),
// a CM on each, an rsocket server that upper-cases what it reads, and a
// client. With devices from host.Open, AddRoutedDevice(dev.Device, dev)
// lets the host's routes choose the device, and the other side may be
// Linux's rstream or any program under librspreload.so.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := func(name, addr string) (*verbs.Device, *rdmacm.CM) {
		ip := netip.MustParseAddr(addr)
		l, err := udp.New(udp.Config{Bind: ip, Addrs: []netip.Addr{ip}, Port: 47912}) // not 4791: keep clear of the host's devices
		if err != nil {
			log.Fatal(err)
		}
		dev, err := verbs.Open(verbs.DeviceConfig{Name: name, Link: l,
			GIDs: []verbs.GIDEntry{{GID: netip.AddrFrom16(ip.As16()), Type: verbs.GIDTypeRoCEv2}}})
		if err != nil {
			log.Fatal(err)
		}
		cm := rdmacm.New(rdmacm.Options{})
		if err := cm.AddDevice(dev); err != nil {
			log.Fatal(err)
		}
		return dev, cm
	}
	srv, srvCM := open("srv0", "127.0.3.2")
	defer srv.Close()
	defer srvCM.Close()
	cli, cliCM := open("cli0", "127.0.3.1")
	defer cli.Close()
	defer cliCM.Close()

	ln, err := rsocket.Listen(srvCM, "tcp", "127.0.3.2:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's CloseWrite
		c.Write([]byte(strings.ToUpper(string(b))))
	}()

	c, err := rsocket.Dial(ctx, cliCM, "tcp", "127.0.3.2:7471")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello, rsocket")); err != nil {
		log.Fatal(err)
	}
	c.CloseWrite() // rshutdown(SHUT_WR): the server reads end of file
	reply, err := io.ReadAll(c)
	if err != nil {
		log.Fatal(err)
	}
	<-served
	fmt.Println(string(reply))
	// Output: HELLO, RSOCKET
}
