package udp

import (
	"os"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestMain holds the lock of UDP port 4791 in the host's own namespace
// (testenv.HoldRootPort): the loopback tests bind it on 127.0.0.x, and
// cmd/roce's and host's devices on lo bind it on every address.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunHoldingRootPort(m))
}
