package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/config"
	"github.com/goroce/goroce/config/configfs"
	"github.com/goroce/goroce/host"
)

// ecnView is configfs.ECNView over the config tree: DIR/ecn/DEV/roce_np/…
// and roce_rp/… as MLNX_OFED's sysfs names them (enable per priority, as
// the directory enable/ of files 0 … 7; goroce's enable for all eight is
// roce ecn's alone, since sysfs's enable is that directory). A set is
// roce ecn's: stored, then applied by the device's owner if it runs.
type ecnView struct {
	reg  *host.Registry
	tree *config.Tree
	ctx  context.Context
}

func (v ecnView) Devices() ([]string, error) {
	defs, err := v.reg.List()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	slices.Sort(names)
	return names, nil
}

func (v ecnView) Names() []string {
	var names []string
	for _, p := range host.ECNParams() {
		if p.Name != "enable" {
			names = append(names, p.Key())
		}
	}
	return names
}

func (v ecnView) param(name string) (host.ECNParam, error) {
	point, param, _ := strings.Cut(name, "/")
	return host.LookupECNParam(point, param)
}

func (v ecnView) Get(dev, name string) (uint32, error) {
	p, err := v.param(name)
	if err != nil {
		return 0, err
	}
	m, err := v.tree.ECN(dev, 1)
	if err != nil {
		return 0, err
	}
	c, err := host.ECNConfigOf(m)
	if err != nil {
		return 0, err
	}
	return p.Get(&c), nil
}

func (v ecnView) Set(dev, name string, val uint32) error {
	p, err := v.param(name)
	if err != nil {
		return err
	}
	if err := p.Check(val); err != nil {
		return fmt.Errorf("write ecn/%s/%s: %w", dev, name, err)
	}
	if err := v.tree.UpdateECN(dev, 1, func(m map[string]uint32) error {
		host.SetECNSetting(m, p, val)
		return nil
	}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(v.ctx, 10*time.Second)
	defer cancel()
	if err := v.reg.ApplyECN(ctx, dev); err != nil && !errors.Is(err, host.ErrNotRunning) {
		return fmt.Errorf("write ecn/%s/%s: stored, but the running device did not apply it: %v: %w", dev, name, err, syscall.EIO)
	}
	return nil
}

func newConfigfsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "configfs",
		Short: "Serve the rdma_cm configfs tree of the devices (default_roce_mode, default_roce_tos)",
		Long: `configfs serves, with FUSE, the tree Linux shows at /sys/kernel/config/rdma_cm,
for goroce's devices: the RoCE mode and IP ToS that RDMA CM uses on each port.
mkdir DIR/rdma_cm/DEV makes DEV/ports/1/default_roce_mode and default_roce_tos
appear; reading, writing, mkdir and rmdir behave as Linux 6.1 does, errnos
included, and the values outlive rmdir. roce mode and roce tos change the same
values without a directory.`,
		Args:                       unknownCommand,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "mount DIR",
		Short: "Mount the tree at DIR and serve it until interrupted or unmounted",
		Long: `mount serves the rdma_cm tree of the devices in --rundir at DIR (DIR/rdma_cm),
and beside it each device's congestion control settings as MLNX_OFED's sysfs
shows a netdev's (DIR/ecn/DEV/roce_np/enable/PRIO, DIR/ecn/DEV/roce_rp/PARAM:
roce ecn's settings, read with cat and set with echo), in the foreground, until DIR is unmounted (umount DIR: exit 0) or it is
interrupted: on Ctrl-C or SIGTERM it unmounts DIR and exits 130 or 143, as
every roce command does. The unmount takes at most a few seconds: when a
mount of DIR made in another mount namespace (unshare -m, ip netns exec)
keeps the FUSE connection alive, it aborts the connection, and the users of
that mount get ENOTCONN. A second Ctrl-C aborts and exits at once. As root it
mounts by itself and every user may read; without root it needs fusermount
(apt-get install fuse3).

A refused write fails with the kernel's errno (echo: write error: Invalid
argument); the reason, with the valid values, goes to this command's stderr.

Procedures written for Linux work with DIR for /sys/kernel/config:`,
		Example: `  mkdir -p /tmp/config && roce configfs mount /tmp/config &
  mkdir /tmp/config/rdma_cm/rxe0
  cat /tmp/config/rdma_cm/rxe0/ports/1/default_roce_mode     # RoCE v2
  echo 106 > /tmp/config/rdma_cm/rxe0/ports/1/default_roce_tos
  rmdir /tmp/config/rdma_cm/rxe0                             # the values stay`,
		Args: argsWithFix(cobra.ExactArgs(1), "name the directory to serve the tree in: roce configfs mount DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return configfsMount(cmd, args[0])
		},
	})
	return cmd
}

// configfsMount serves the tree at mnt until mnt is unmounted (exit 0) or
// a signal comes: then it unmounts, in bounded time (configfs.Server's
// Unmount), and says so; a second signal, or roce's grace period, aborts
// the connection and detaches the mount point before exiting.
func configfsMount(cmd *cobra.Command, mnt string) error {
	_, dir := registryOf(cmd)
	ctx := commandContext(cmd)
	refusals := newRefusalLog(cmd.ErrOrStderr())
	defer refusals.stop()
	tree := configTree(dir)
	srv, err := configfs.MountWith(mnt, tree, configfs.Options{Refused: refusals.refused,
		ECN: ecnView{reg: host.NewRegistry(dir), tree: tree, ctx: ctx}})
	if err != nil {
		return opError("configfs mount", err)
	}
	defer onForce(ctx, func() { srv.Abort() })()
	start := time.Now()
	fmt.Fprintf(cmd.ErrOrStderr(), "roce: configfs: serving the devices of %s at %s/rdma_cm until interrupted or unmounted\n",
		dir, srv.Dir())
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-done: // umount DIR
		return nil
	case <-ctx.Done():
	}
	served := time.Since(start).Round(time.Second)
	if err := srv.Unmount(); err != nil {
		return interruptedAfter(ctx, "after serving %s for %v: %v", srv.Dir(), served, err)
	}
	return interruptedAfter(ctx, "after serving %s for %v: unmounted", srv.Dir(), served)
}

// refusalLog prints why the tree refused each write — the message that
// names the valid values, which the writer's errno cannot carry — one line
// per refused write, as "roce: configfs: write rdma_cm/…: …". It prints
// from a goroutine of its own, so a slow or stuck stderr never holds up a
// write(2) on the mount: what does not fit in the queue is counted, and
// the count printed instead.
type refusalLog struct {
	w       io.Writer
	queue   chan error
	dropped atomic.Int64
	quit    chan struct{}
	done    chan struct{}
}

func newRefusalLog(w io.Writer) *refusalLog {
	l := &refusalLog{w: w, queue: make(chan error, 64), quit: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// refused is configfs.Options.Refused: it never blocks.
func (l *refusalLog) refused(err error) {
	select {
	case l.queue <- err:
	default:
		l.dropped.Add(1)
	}
}

func (l *refusalLog) run() {
	defer close(l.done)
	for {
		select {
		case err := <-l.queue:
			l.print(err)
		case <-l.quit:
			for {
				select {
				case err := <-l.queue:
					l.print(err)
				default:
					l.print(nil)
					return
				}
			}
		}
	}
}

// print prints err (if not nil), after the count of those dropped before it.
func (l *refusalLog) print(err error) {
	if n := l.dropped.Swap(0); n > 0 {
		fmt.Fprintf(l.w, "roce: configfs: %d more refused writes not shown (too many at once)\n", n)
	}
	if err != nil {
		fmt.Fprintf(l.w, "roce: configfs: %v\n", err)
	}
}

// stop prints what is queued and ends the printing goroutine; refused
// may still be called (it then only queues or counts).
func (l *refusalLog) stop() {
	close(l.quit)
	<-l.done
}
