// Package archtest keeps the layering of ARCHITECTURE.md true: each
// package may import only packages of its own or a lower layer.
package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/goroce/goroce"

// layer ranks a package: wire → link → internal engine → verbs → host,
// config, kernel → rdmacm → rsocket → cmd. Helpers with no protocol logic (testenv, nettest,
// lab, capture, dissect, pingpong) sit where their imports put them.
func layer(pkg string) (int, bool) {
	p := strings.TrimPrefix(pkg, module+"/")
	switch {
	case p == "wire" || strings.HasPrefix(p, "wire/"):
		return 0, true
	case p == "link" || strings.HasPrefix(p, "link/"):
		return 1, true
	case p == "internal/mem" || p == "internal/transport":
		return 2, true
	case p == "verbs" || strings.HasPrefix(p, "verbs/"):
		return 3, true
	case p == "host" || p == "config" || strings.HasPrefix(p, "config/"):
		return 4, true
	case p == "kernel" || strings.HasPrefix(p, "kernel/"):
		// The kernel's own RDMA devices (sysfs, RDMA netlink, configfs),
		// beside host's soft devices.
		return 4, true
	case p == "rdmacm" || strings.HasPrefix(p, "rdmacm/"):
		return 5, true
	case p == "rsocket" || strings.HasPrefix(p, "rsocket/"):
		return 6, true
	case strings.HasPrefix(p, "cmd/"):
		return 7, true
	}
	return 0, false
}

// The engine and everything below it never open a socket or read the
// runtime directory: only these may import the packages that do I/O.
var noIO = []string{"wire", "internal/mem", "internal/transport", "verbs", "link/fabric", "link/pcap", "link/linktest"}

func TestLayers(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		from, ok := layer(p.ImportPath)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if to, ok := layer(imp); ok && to > from {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", p.ImportPath, from, imp, to)
			}
		}
		// rsocket takes its devices from the CM it is given (the CM's
		// routed devices), never from the host's registry itself.
		if p.ImportPath == module+"/rsocket" {
			for _, imp := range p.Imports {
				if imp == module+"/host" {
					t.Errorf("%s imports %s: rsocket gets its devices through the rdmacm.CM it is given", p.ImportPath, imp)
				}
			}
		}
		for _, q := range noIO {
			if p.ImportPath != module+"/"+q {
				continue
			}
			for _, imp := range p.Imports {
				for _, io := range []string{"host", "link/udp", "link/afpacket", "net/netlink", "github.com/vishvananda/netlink"} {
					if imp == module+"/"+io || imp == io {
						t.Errorf("%s imports %s: the engine and below never do I/O", p.ImportPath, imp)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list found only %d packages", n)
	}
}
