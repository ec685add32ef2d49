package verbs

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine (a device's receive loop, a
// fabric scheduler, a QP timer callback) outlives the tests. The fuzz
// harness's device (engine_fuzz_test.go) lives as long as the test binary,
// since every fuzz input reuses it: it is closed first.
func TestMain(m *testing.M) {
	code := m.Run()
	if fuzzH != nil {
		fuzzH.dev.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
