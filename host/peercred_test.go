package host

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestControlPeerCred: the control socket answers root and the owner's
// user only (SO_PEERCRED), even where its file's permissions would let
// another user connect. The socket is made 0666 here, inside directories
// nobody may enter, so that only the credential check stands between
// uid 65534 and the device's counters; root's request is the control.
func TestControlPeerCred(t *testing.T) {
	if sock := os.Getenv("GOROCE_PEERCRED_SOCK"); sock != "" {
		// The child, run as uid 65534: ask for the counters, print the reply.
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println("dial:", err)
			return
		}
		defer c.Close()
		fmt.Fprintln(c, `{"op":"counters"}`)
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(line)
		return
	}
	testenv.Root(t)
	r := loDevice(t)
	d, err := Open("rxe0", Options{RunDir: r.Dir, Unprivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sock := r.ControlSocket("rxe0")
	for p := filepath.Dir(sock); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	// The test binary where uid 65534 may run it.
	bin := filepath.Join(t.TempDir(), "host.test")
	b, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	for p := filepath.Dir(bin); p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	ask := func(uid uint32) string {
		cmd := exec.Command(bin, "-test.run=^TestControlPeerCred$")
		cmd.Env = append(os.Environ(), "GOROCE_PEERCRED_SOCK="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child as uid %d: %v\n%s", uid, err, out)
		}
		return string(out)
	}
	if out := ask(0); !strings.Contains(out, `"counters"`) || strings.Contains(out, "permission denied") {
		t.Fatalf("root's request: %s", out)
	}
	out := ask(65534)
	if !strings.Contains(out, "permission denied: only root and the owner's user may use the control socket") {
		t.Errorf("uid 65534's request: %s", out)
	}
	if strings.Contains(out, `"counters"`) {
		t.Errorf("uid 65534 got the counters: %s", out)
	}
}
