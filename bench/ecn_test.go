package bench_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestECNScript runs bench/ecn.sh in its quick mode (-q: 2 senders through
// a 200 Mbit/s bottleneck, 4 s each with DCQCN off, on, and on with the
// probe in a queue of its own: the floor), so the script
// and its report cannot rot. It checks what does not depend on the
// machine's speed: with DCQCN off the senders' packets are not
// ECN-capable, so the router marks none and no CNP is handled; with it on
// the router marks CE, the senders handle CNPs; unpaced, the senders
// fill the bottleneck's queue, so its sampled delay is not zero; the
// floor run has its row and the DCQCN-on row its probe's p99 over the
// floor's; the picture is well-formed SVG with a line per flow in each panel, and
// the script leaves none of its namespaces behind. The figures themselves
// are BENCHMARKS.md's business, not a test's.
func TestECNScript(t *testing.T) {
	testenv.Root(t)
	for _, c := range []struct{ cmd, pkg string }{{"nft", "nftables"}, {"tc", "iproute2"}, {"ip", "iproute2"}, {"ss", "iproute2"}} {
		_, err := exec.LookPath(c.cmd)
		testenv.Require(t, err == nil, c.cmd+" (apt-get install "+c.pkg+")")
	}
	out := t.TempDir()
	stdout := runScript(t, "ecn.sh", "goroce-ecn-", "-q", "-o", out)

	rows := map[string][]string{}
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.Split(l, "|")
		if len(f) > 14 && strings.TrimSpace(f[1]) == "2" {
			for i := range f {
				f[i] = strings.TrimSpace(f[i])
			}
			rows[f[2]] = f
		}
	}
	num := func(mode string, col int) float64 {
		f := rows[mode]
		if f == nil {
			t.Fatalf("no row for 2 senders, DCQCN %s in:\n%s", mode, stdout)
		}
		v, err := strconv.ParseFloat(f[col], 64)
		if err != nil {
			t.Fatalf("DCQCN %s: column %d %q: %v", mode, col, f[col], err)
		}
		return v
	}
	const ceCol, cnpCol = 7, 8
	if ce, cnp := num("off", ceCol), num("off", cnpCol); ce != 0 || cnp != 0 {
		t.Errorf("DCQCN off: %v packets marked CE, %v CNPs handled; want none (RP off: not ECN-capable)", ce, cnp)
	}
	if ce, cnp := num("on", ceCol), num("on", cnpCol); ce == 0 || cnp == 0 {
		t.Errorf("DCQCN on: %v packets marked CE, %v CNPs handled; want both (2 senders exceed the bottleneck)", ce, cnp)
	}

	const queueCol, floorCol = 11, 14
	if _, ok := rows["on, floor"]; !ok {
		t.Errorf("no floor row (2 senders, DCQCN on, probe beside the queue) in:\n%s", stdout)
	}
	if q := rows["off"]; q != nil {
		_, p99, _ := strings.Cut(q[queueCol], " / ")
		if v, err := strconv.ParseFloat(p99, 64); err != nil || v <= 0 {
			t.Errorf("DCQCN off: queue p99 %q µs; want > 0 (unpaced senders fill the bottleneck's queue)", q[queueCol])
		}
	}
	if on := rows["on"]; on != nil && !strings.HasSuffix(on[floorCol], "×") {
		t.Errorf("DCQCN on: p99 / floor %q, want a ratio", on[floorCol])
	}

	svg, err := os.ReadFile(filepath.Join(out, "ecn.svg"))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	lines := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ecn.svg: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines != 4 {
		t.Errorf("ecn.svg has %d polylines, want 4 (2 flows, DCQCN off and on)", lines)
	}
}
