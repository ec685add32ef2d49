package testenv

import (
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestHoldLockWaits: a second holder of the lock (another package's test
// binary, here another open of the file) gets it only once the first has
// let go.
func TestHoldLockWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	release := holdLock(path)
	var released atomic.Bool
	got := make(chan bool)
	go func() {
		r := holdLock(path)
		got <- released.Load()
		r()
	}()
	// Time for a lock that does not hold to be taken (none to pass).
	time.Sleep(50 * time.Millisecond)
	released.Store(true)
	release()
	if !<-got {
		t.Fatal("the second holder got the lock while the first held it")
	}
}
