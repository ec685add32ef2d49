package bench_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestCallgrindScript runs bench/callgrind.sh with 1,000 round trips
// (more than the 512 receives posted up front, so that one of the rows,
// the reposts, has calls), so that the script, which finds each stage in
// callgrind's call graph by the functions' names, cannot rot when one is
// renamed: every row it prints has a count, goroce's total is above the
// floor's (the floor does less than any RoCE stack must), and it leaves no
// namespace behind. The counts themselves are BENCHMARKS.md's business.
func TestCallgrindScript(t *testing.T) {
	testenv.Root(t)
	_, err := exec.LookPath("valgrind")
	testenv.Require(t, err == nil, "valgrind (apt-get install valgrind)")
	stdout := runScript(t, "callgrind.sh", "cg-a-", "-n", "1000")
	row := regexp.MustCompile(`^  (\S.*?)\s+([\d,]+)$`)
	var totals []int
	rows := 0
	for _, l := range strings.Split(stdout, "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		rows++
		v, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
		if v == 0 {
			t.Errorf("row %q counts no instructions", m[1])
		}
		if strings.HasPrefix(m[1], "total") {
			totals = append(totals, v)
		}
	}
	if rows < 14 || len(totals) != 2 {
		t.Fatalf("%d rows and %d totals, want goroce's 11 stages and the floor's 2, each with its total", rows, len(totals))
	}
	if totals[0] <= totals[1] {
		t.Errorf("goroce's round trip counts %d instructions, the floor's %d: the floor does less than any RoCE stack, so a row lost its count", totals[0], totals[1])
	}
}
