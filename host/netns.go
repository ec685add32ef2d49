package host

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/verbs"
)

// Netns identifies a network namespace: by its name under /run/netns when
// it has one (what `ip netns` shows), and by its inode.
type Netns struct {
	Name  string `json:"name,omitempty"`
	Inode uint64 `json:"inode"`
	Dev   uint64 `json:"dev"`
}

// Same reports whether two records name the same namespace.
func (n Netns) Same(o Netns) bool { return n.Inode == o.Inode && n.Dev == o.Dev }

func (n Netns) suffix() string {
	if n.Name != "" {
		return " in netns " + n.Name
	}
	return ""
}

// String names the namespace for messages.
func (n Netns) String() string {
	if n.Name != "" {
		return n.Name
	}
	return fmt.Sprintf("net:[%d]", n.Inode)
}

// NetnsDir is where `ip netns` keeps named namespaces.
const NetnsDir = "/run/netns"

func statNS(path string) (uint64, uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Ino, st.Dev, nil
}

// CurrentNetns identifies the calling thread's network namespace, with the
// name `ip netns` gives it, if any.
func CurrentNetns() (Netns, error) {
	ino, dev, err := statNS(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return Netns{}, err
	}
	n := Netns{Inode: ino, Dev: dev}
	ents, _ := os.ReadDir(NetnsDir)
	for _, e := range ents {
		if i, d, err := statNS(filepath.Join(NetnsDir, e.Name())); err == nil && i == ino && d == dev {
			n.Name = e.Name()
			break
		}
	}
	return n, nil
}

// handle opens the namespace n records.
func (n Netns) handle() (netns.NsHandle, error) {
	cands := []string{}
	if n.Name != "" {
		cands = append(cands, filepath.Join(NetnsDir, n.Name))
	}
	cands = append(cands, "/proc/1/ns/net")
	for _, p := range cands {
		if i, d, err := statNS(p); err == nil && i == n.Inode && d == n.Dev {
			return netns.GetFromPath(p)
		}
	}
	return netns.None(), &verbs.Error{Op: "netns", Detail: fmt.Sprintf("network namespace %v no longer exists", n), Err: syscall.ENOENT}
}

// InNetns runs fn on a locked OS thread inside the namespace n records
// (directly when the caller is already there). Sockets fn opens stay there.
func InNetns(n Netns, fn func() error) error {
	cur, err := CurrentNetns()
	if err == nil && cur.Same(n) {
		return fn()
	}
	h, err := n.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	errc := make(chan error, 1)
	go func() {
		// This thread is never unlocked: it dies with the goroutine, so no
		// other goroutine inherits the namespace.
		runtime.LockOSThread()
		if err := netns.Set(h); err != nil {
			errc <- &verbs.Error{Op: "netns", Detail: fmt.Sprintf("entering netns %v", n), Err: err}
			return
		}
		errc <- fn()
	}()
	return <-errc
}
