package host

import (
	"os"
	"testing"

	"github.com/goroce/goroce/internal/testenv"
)

// TestMain holds the lock of UDP port 4791 in the host's own namespace
// (testenv.HoldRootPort): devices on lo bind it, as cmd/roce's and
// link/udp's tests do, and go test runs packages at once.
func TestMain(m *testing.M) {
	os.Exit(testenv.RunHoldingRootPort(m))
}
