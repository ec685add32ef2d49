package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/cmd/roce/internal/mckey"
	"github.com/goroce/goroce/rdmacm"
	"github.com/goroce/goroce/verbs"
)

func newMckeyCmd() *cobra.Command {
	var (
		group, bind, ps string
		devs            []string
		pcapFile        string
		c               mckey.Config
	)
	cmd := &cobra.Command{
		Use:   "mckey -m addr [-s] [-b addr] [-c connections] [-C count] [-S size] [-p port_space]",
		Short: "mckey: RDMA CM UD multicast, wire-compatible with librdmacm's mckey",
		Long: `mckey is librdmacm's mckey: each side joins the multicast group -m
(rdma_join_multicast: IPv4 groups become ::ffff:a.b.c.d on RoCE v2, as
Linux maps them) from the bind address -b, waits 3 s, and then the sender
(-s) sends -C UD datagrams of -S bytes to the group (QPN 0xffffff, Q_Key
0x01234567) while the others each receive -C of them; then all leave the
group. The output is mckey's, so either side can be goroce or rdma-core's
mckey. The devices are found by address (-b, else the group's route);
--dev picks one.`,
		Example: `  roce mckey -m 239.1.2.3 -b 192.0.2.1 -C 3        # receiver
  roce mckey -m 239.1.2.3 -b 192.0.2.1 -s -C 3     # sender
  roce mckey -m ff0e::1:2:3 -b fd00:c0:2::1 -C 3   # IPv6 group`,
		Args: argsWithFix(cobra.NoArgs, "the group goes with -m: roce mckey -m 239.1.2.3"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usageError{fmt.Errorf("-m multicast_address is required: %w", syscall.EINVAL)}
			}
			g, err := netip.ParseAddr(group)
			if err != nil || !g.Unmap().IsMulticast() {
				return usageError{fmt.Errorf("-m %q: not an IPv4 or IPv6 multicast address (224.0.0.0/4, ff00::/8): %w", group, syscall.EINVAL)}
			}
			c.Group = g.Unmap()
			if bind != "" {
				b, err := netip.ParseAddr(bind)
				if err != nil {
					return usageError{fmt.Errorf("-b %q: not an IPv4 or IPv6 address: %w", bind, syscall.EINVAL)}
				}
				c.Bind = b.Unmap()
				if c.Bind.Is4() != c.Group.Is4() {
					return usageError{fmt.Errorf("-b %v and -m %v are of different IP families: %w", c.Bind, c.Group, syscall.EINVAL)}
				}
			}
			switch v, err := strconv.ParseInt(ps, 0, 32); {
			case err == nil && v == 0x0111:
				c.PortSpace = rdmacm.PSUDP
			case err == nil && v == 0x013f:
				c.PortSpace = rdmacm.PSIB
			default:
				return usageError{fmt.Errorf("-p %q: port space %#x (RDMA_PS_UDP, the default) or %#x (RDMA_PS_IB); RDMA_PS_IPOIB is InfiniBand's: %w",
					ps, 0x0111, 0x013f, syscall.EINVAL)}
			}
			cm, closeCM, err := openCM(cmd, devs, pcapFile, c.Bind, c.Group)
			if err != nil {
				return err
			}
			defer closeCM()
			c.Out, c.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return mckey.Run(commandContext(cmd), cm, c)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringVarP(&group, "mcast", "m", "", "multicast `address` to join")
	f.BoolVarP(&c.Sender, "sender", "s", false, "send to the group (default: receive)")
	f.StringVarP(&bind, "bind", "b", "", "local `address` to bind to")
	f.IntVarP(&c.Connections, "connections", "c", 1, "`connections`: CM IDs, each with its QP, joining the group")
	f.IntVarP(&c.Count, "count", "C", mckey.DefaultCount, "message `count` (0: join and leave only)")
	f.IntVarP(&c.Size, "size", "S", mckey.DefaultSize, "message `size` in bytes (at most the active MTU; 0: no messages)")
	f.StringVarP(&ps, "port-space", "p", "0x111", "port `space`: 0x111 for UDP (default), 0x13f for IB")
	f.StringSliceVar(&devs, "dev", nil, "use only these devices (default: found by address)")
	f.StringVar(&pcapFile, "pcap", "", "write every packet the device sends and receives to `file` (pcap)")
	flagRange(cmd, "connections", 1, mckey.MaxConnections, "the number of connections", "")
	flagRange(cmd, "count", 0, mckey.MaxCount, "the message count", "(the CQ holds 2 × count, within max_cqe)")
	flagRange(cmd, "size", 0, int64(verbs.MTU4096.Bytes()), "the message size", "bytes")
	return cmd
}
