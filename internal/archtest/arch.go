// Package archtest keeps the layering of ARCHITECTURE.md true. Its table
// says, for every package of the module, which of the module's packages it
// may import and which its tests may import besides; its test runs go list
// over the module and fails on any import the table does not allow, naming
// the file and line, and on any package the table does not know. The
// table's own arrows must point down the layers (rank), so an arrow cannot
// be allowed by adding it to the table alone.
//
// The layers, lowest first:
//
//	0  wire, wire/mad                 wire formats: the standard library only
//	   internal/rundir                the runtime directory's files (a leaf utility)
//	1  link, link/*                   the batch interface and its links
//	   config, config/*               rdma_cm settings: plain values, a leaf beside the stack
//	2  internal/mem                   the engine's memory tables
//	3  verbs, verbs/verbstest         the verbs API and the engine
//	4  host, kernel, kernel/*         soft devices on netdevs; the kernel's devices, beside them
//	5  rdmacm                         the connection manager
//	6  rsocket                        streams over RC
//	7  cmd/roce/internal/*            the applications the CLI runs
//	8  cmd/roce                       the CLI
//	9  internal/{testenv,nettest,lab,archtest,enumgen}, bench
//	                                  test helpers and benchmarks, imported by tests only
//
// Besides the table, two rules hold transitively: wire and wire/mad depend
// on the standard library alone, and the engine and everything below it
// (verbs and below) never depend on a package that does I/O (host,
// link/udp, link/afpacket, link/neigh, internal/rundir, netlink).
package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Module is the module's path.
const Module = "github.com/goroce/goroce"

// rule is what one package may import: imports, the module's packages
// its non-test files may import; tests, the packages its tests (in-package
// and external) may import besides those.
type rule struct {
	rank    int
	imports string
	tests   string
}

// Table is the allowed arrows, by package (paths relative to Module).
var Table = map[string]rule{
	// 0: the ground floor.
	"wire": {0, "",
		// The golden and tshark tests read real traces (link/pcap) and
		// dissect the MADs they carry.
		"wire/mad internal/testenv link/pcap"},
	"wire/mad":        {0, "", "internal/testenv"},
	"internal/rundir": {0, "", "internal/testenv"},
	// The goroce_turn builds' turnaround split (link/udp, the UDP floor).
	"internal/turnsplit": {0, "", ""},

	// 1: links, and the rdma_cm settings beside the stack.
	"link":          {1, "wire", ""},
	"link/neigh":    {1, "wire", ""},
	"link/pktstat":  {1, "", ""},
	"link/pktring":  {1, "", ""},
	"link/xsk":      {1, "", "internal/nettest internal/testenv"},
	"link/fabric":   {1, "link wire", "link/linktest"},
	"link/pcap":     {1, "link wire", "link/fabric link/linktest"},
	"link/linktest": {1, "link wire", ""},
	"link/udp": {1, "link link/pktring link/pktstat link/xsk wire internal/turnsplit",
		// TestPairings moves RC traffic over the link between namespaces.
		"link/linktest internal/nettest internal/testenv verbs verbs/verbstest"},
	"link/afpacket": {1, "link link/neigh link/pktring link/pktstat wire wire/mad",
		"link/linktest link/udp link/pcap internal/nettest internal/testenv"},
	"config":            {1, "wire internal/rundir", "config/configtest"},
	"config/configfs":   {1, "config", "config/configtest wire internal/testenv"},
	"config/configtest": {1, "config", ""},

	// 2, 3: the engine and its API.
	"internal/mem": {2, "", ""},
	"verbs": {3, "internal/mem link wire",
		// TestOverVeth runs the test bodies over the real links; never host.
		// link/pcap records a run for tshark to judge (ecn_tshark_test.go).
		"verbs/verbstest link/fabric link/linktest link/pcap link/udp link/afpacket internal/nettest internal/testenv"},
	"verbs/verbstest": {3, "verbs link link/fabric", ""},

	// 4: the host's soft devices (the only package that joins the engine
	// to real I/O) and the kernel's devices, beside each other.
	"host": {4, "verbs config internal/rundir link link/udp link/afpacket link/neigh link/pcap wire",
		"verbs/verbstest link/fabric internal/nettest internal/testenv"},
	"kernel":            {4, "verbs config wire", "kernel/kerneltest config/configfs config/configtest internal/testenv"},
	"kernel/kerneltest": {4, "", ""},

	// 5, 6: the connection manager, and streams over it. rdmacm learns the
	// RoCE mode through rdmacm.Defaults (config.Tree implements it), and
	// rsocket gets its devices from the rdmacm.CM it is given, never from
	// the host's registry.
	"rdmacm": {5, "verbs wire wire/mad",
		"verbs/verbstest host link link/fabric link/pcap link/udp internal/lab internal/nettest internal/testenv"},
	"rsocket": {6, "rdmacm verbs",
		"verbs/verbstest host link/fabric link/pcap link/udp wire wire/mad internal/lab"},

	// 7, 8: the applications and the CLI.
	"cmd/roce/internal/busypoll": {7, "", ""},
	"cmd/roce/internal/demo":     {7, "rdmacm host config verbs link link/fabric link/pcap link/udp wire", ""},
	"cmd/roce/internal/dissect":  {7, "link/pcap wire wire/mad", "internal/testenv"},
	"cmd/roce/internal/perftest": {7, "cmd/roce/internal/busypoll rdmacm verbs wire",
		"cmd/roce/internal/perftest/perftestcheck host verbs/verbstest link link/fabric link/pcap internal/lab internal/testenv"},
	"cmd/roce/internal/perftest/perftestcheck": {7, "wire wire/mad", ""},
	"cmd/roce/internal/pingpong": {7, "cmd/roce/internal/busypoll verbs link wire",
		"host verbs/verbstest link/fabric link/pcap internal/lab internal/testenv"},
	"cmd/roce/internal/rping": {7, "rdmacm verbs", "host verbs/verbstest internal/lab"},
	"cmd/roce/internal/mckey": {7, "rdmacm verbs", "host verbs/verbstest link/fabric internal/lab internal/testenv"},
	"cmd/roce": {8, "cmd/roce/internal/busypoll cmd/roce/internal/demo cmd/roce/internal/dissect cmd/roce/internal/perftest " +
		"cmd/roce/internal/pingpong cmd/roce/internal/rping cmd/roce/internal/mckey rsocket rdmacm host kernel config config/configfs " +
		"verbs link link/afpacket link/pcap wire internal/rundir",
		"cmd/roce/internal/perftest/perftestcheck kernel/kerneltest wire/mad link/xsk internal/lab internal/nettest internal/testenv"},

	// 9: test helpers and the benchmarks, which only tests import.
	"internal/testenv":  {9, "", ""},
	"internal/nettest":  {9, "internal/testenv link link/pcap wire", ""},
	"internal/lab":      {9, "host verbs internal/nettest internal/testenv", ""},
	"internal/archtest": {9, "", ""},
	// go generate's: the String methods of wire's, wire/mad's and verbs'
	// enums, from the names beside their constants (stdlib only).
	"internal/enumgen": {9, "", ""},
	"bench": {9, "",
		"rsocket rdmacm host verbs verbs/verbstest link link/linktest link/udp link/afpacket wire internal/nettest internal/testenv internal/lab"},
	"bench/cmd/benchtable": {9, "", ""},
	"bench/cmd/ecnplot":    {9, "", ""},
	"bench/cmd/qdiscstat":  {9, "", ""},
	// Splits a ping-pong's round trip from two captures (bench/vm.sh -c).
	"bench/cmd/turnaround": {9, "", ""},
	// The floor does by hand what any RoCE must, with none of goroce's
	// engine; its latency floor reads an AF_PACKET ring with the ring
	// primitive goroce's link uses (mmap and status words, nothing else),
	// so that its empty looks cost what goroce's do, and computes its
	// CRC-32s with the loop goroce's ICRC uses (wire.UpdateCRC32).
	"bench/cmd/udpfloor": {9, "link/pktring link/xsk internal/turnsplit wire", "internal/nettest internal/testenv"},
	// Times goroce's ICRC beside the runtime's operations.
	"bench/cmd/opcost": {9, "wire", ""},
}

// stdOnly are the packages whose every dependency outside the module is
// the standard library's (the table rules those inside it).
var stdOnly = []string{"wire", "wire/mad"}

// noIO are the engine and the packages below it: none of them may depend,
// directly or not, on ioPackages.
var noIO = []string{"wire", "wire/mad", "link", "link/fabric", "link/pcap", "link/linktest", "internal/mem", "verbs", "verbs/verbstest"}

// ioPackages open sockets, talk netlink or read the runtime directory.
var ioPackages = []string{Module + "/host", Module + "/link/udp", Module + "/link/afpacket", Module + "/link/neigh",
	Module + "/link/xsk", Module + "/internal/rundir", "github.com/vishvananda/netlink", "github.com/cilium/ebpf"}

// Package is what the check needs of go list's view of a package.
type Package struct {
	ImportPath   string
	Dir          string
	Standard     bool
	Imports      []string
	TestImports  []string
	XTestImports []string
	GoFiles      []string
	CgoFiles     []string
	TestGoFiles  []string
	XTestGoFiles []string
	Deps         []string
	Error        *struct{ Err string }
}

// List runs go list -deps over the module's packages (in dir, with the
// given extra flags, e.g. -overlay) and returns every package it lists:
// the module's and their dependencies.
func List(dir string, flags ...string) ([]Package, error) {
	args := append([]string{"list", "-deps", "-e",
		"-json=ImportPath,Dir,Standard,Imports,TestImports,XTestImports,GoFiles,CgoFiles,TestGoFiles,XTestGoFiles,Deps,Error"},
		flags...)
	cmd := exec.Command("go", append(args, Module+"/...")...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p Package
		if err := dec.Decode(&p); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// rel is a module package's path relative to the module, or "" for a
// package outside it.
func rel(path string) string {
	if path == Module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, Module+"/"); ok {
		return r
	}
	return ""
}

// CheckTable checks that every arrow the table allows for non-test files
// points down the layers (or along one) and names a package of the table.
func CheckTable() []string {
	var errs []string
	for _, from := range sortedKeys(Table) {
		r := Table[from]
		for _, to := range strings.Fields(r.imports + " " + r.tests) {
			if _, ok := Table[to]; !ok {
				errs = append(errs, fmt.Sprintf("table: %s may import %s, which the table does not know", from, to))
			}
		}
		for _, to := range strings.Fields(r.imports) {
			if t, ok := Table[to]; ok && t.rank > r.rank {
				errs = append(errs, fmt.Sprintf("table: %s (layer %d) may import %s (layer %d): an arrow that points up", from, r.rank, to, t.rank))
			}
		}
	}
	return errs
}

// Check returns what breaks the table in pkgs: each as
// "file:line: from imports to: why". readFile reads a Go file (os.ReadFile,
// or one that sees a go list -overlay).
func Check(pkgs []Package, readFile func(string) ([]byte, error)) []string {
	var errs []string
	seen := map[string]bool{}
	std := map[string]bool{}
	for _, p := range pkgs {
		std[p.ImportPath] = p.Standard
	}
	for _, p := range pkgs {
		from := rel(p.ImportPath)
		if from == "" {
			continue
		}
		seen[from] = true
		if p.Error != nil {
			errs = append(errs, fmt.Sprintf("%s: %s", from, p.Error.Err))
		}
		r, ok := Table[from]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: a package the table does not know: add it to internal/archtest's Table "+
				"with its layer and the packages it may import", from))
			continue
		}
		allowed := strings.Fields(r.imports)
		for _, imp := range p.Imports {
			to := rel(imp)
			if to == "" || slices.Contains(allowed, to) {
				continue
			}
			errs = append(errs, fmt.Sprintf("%s: %s imports %s: not an arrow of the table (%s may import: %s)",
				where(p, p.GoFiles, p.CgoFiles, imp, readFile), from, to, from, orNothing(allowed)))
		}
		allowedT := append(strings.Fields(r.tests), allowed...)
		for _, imp := range append(slices.Clone(p.TestImports), p.XTestImports...) {
			to := rel(imp)
			if to == "" || to == from || slices.Contains(allowedT, to) {
				continue
			}
			errs = append(errs, fmt.Sprintf("%s: the tests of %s import %s: not an arrow of the table (they may import: %s)",
				where(p, p.TestGoFiles, p.XTestGoFiles, imp, readFile), from, to, orNothing(allowedT)))
		}
		if slices.Contains(stdOnly, from) {
			for _, d := range p.Deps {
				if !std[d] && rel(d) == "" {
					errs = append(errs, fmt.Sprintf("%s depends on %s: it may use the standard library only", from, d))
				}
			}
		}
		if slices.Contains(noIO, from) {
			for _, d := range p.Deps {
				if slices.Contains(ioPackages, d) {
					errs = append(errs, fmt.Sprintf("%s depends on %s: the engine and what is below it never do I/O", from, d))
				}
			}
		}
	}
	for _, name := range sortedKeys(Table) {
		if !seen[name] {
			errs = append(errs, fmt.Sprintf("table: %s is not a package of the module (any more): remove it from the table", name))
		}
	}
	return errs
}

// where names the file (and line) of p that imports imp, from the import
// lines of p's files in the given lists.
func where(p Package, a, b []string, imp string, readFile func(string) ([]byte, error)) string {
	fset := token.NewFileSet()
	for _, name := range append(slices.Clone(a), b...) {
		path := filepath.Join(p.Dir, name)
		src, err := readFile(path)
		if err != nil {
			continue
		}
		f, err := parser.ParseFile(fset, path, src, parser.ImportsOnly)
		if err != nil {
			continue
		}
		for _, s := range f.Imports {
			if v, err := strconv.Unquote(s.Path.Value); err == nil && v == imp {
				return fmt.Sprintf("%s:%d", relFile(p, path), fset.Position(s.Pos()).Line)
			}
		}
	}
	return rel(p.ImportPath) + " (file not found)"
}

// relFile is path, a file of p, relative to the module's root.
func relFile(p Package, path string) string {
	root := strings.TrimSuffix(p.Dir, string(filepath.Separator)+filepath.FromSlash(rel(p.ImportPath)))
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return filepath.ToSlash(r)
	}
	return path
}

func orNothing(s []string) string {
	if len(s) == 0 {
		return "nothing of the module"
	}
	return strings.Join(s, ", ")
}

func sortedKeys(m map[string]rule) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
