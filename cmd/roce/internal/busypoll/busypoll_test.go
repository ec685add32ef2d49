package busypoll

import (
	"os"
	"runtime"
	"testing"
)

// TestOneP: one P unless the environment chose, and what the loops then
// read (Every) follows.
func TestOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "") // restored when the test ends
	os.Unsetenv("GOMAXPROCS")
	runtime.GOMAXPROCS(4)
	OneP()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS unset: OneP left %d Ps, want 1", got)
	}
	if got := Every(1024); got != OnePYield {
		t.Errorf("with one P, Every(1024) = %d, want OnePYield (%d)", got, OnePYield)
	}

	t.Setenv("GOMAXPROCS", "4")
	runtime.GOMAXPROCS(4)
	OneP()
	if got := runtime.GOMAXPROCS(0); got != 4 {
		t.Errorf("GOMAXPROCS=4 in the environment: OneP changed the Ps to %d", got)
	}
	if got := Every(1024); got != 1024 {
		t.Errorf("with four Ps, Every(1024) = %d, want the loop's own 1024", got)
	}
}
