package rsocket

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
)

// TestTransfer sends data both ways at once and reads it back whole,
// on every test network.
func TestTransfer(t *testing.T) {
	for _, net := range testNets {
		t.Run(net, func(t *testing.T) {
			ca, cb := pair(t, net, Options{})
			want := make([]byte, 3<<20+17)
			for i := range want {
				want[i] = byte(rand.Uint32())
			}
			errs := make(chan error, 2)
			for _, c := range []*Conn{ca, cb} {
				go func() {
					_, err := c.Write(want)
					errs <- err
				}()
			}
			for _, c := range []*Conn{cb, ca} {
				got := make([]byte, len(want))
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatal("data differs")
				}
			}
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPosterOrder: Writes whose messages wait for the poster (as a
// stream's do while earlier ones are in flight) arrive whole and in
// order, each Write's bytes as they were when it returned (the caller
// reuses its buffer at once: even messages small enough to go inline are
// copied into the send ring), and CloseWrite's RS_CTRL_SHUTDOWN and
// Close's RS_CTRL_DISCONNECT come after them: the peer reads everything,
// then end of file.
func TestPosterOrder(t *testing.T) {
	for _, net := range testNets {
		t.Run(net, func(t *testing.T) {
			for _, end := range []string{"CloseWrite", "Close"} {
				t.Run(end, func(t *testing.T) {
					// The peer's ring (2 MiB) takes everything while it does not read.
					ca, cb := pair(t, net, Options{ReadBuffer: 1 << 20})
					ca.mu.Lock()
					ca.postAll = true
					ca.mu.Unlock()
					var want []byte
					buf := make([]byte, 64<<10)
					for i, size := range []int{64 << 10, 1, 64 << 10, 40, 64, 65, 3000, 64 << 10, 7} {
						for j := range buf[:size] {
							buf[j] = byte(rand.Uint32())
						}
						want = append(want, buf[:size]...)
						if _, err := ca.Write(buf[:size]); err != nil {
							t.Fatalf("write %d: %v", i, err)
						}
						for j := range buf {
							buf[j] = 0xEE // what a queued message must not carry
						}
					}
					for range 10 {
						want = append(want, bytes.Repeat([]byte{1, 2, 3, 4}, 16<<10)...)
						if _, err := ca.Write(want[len(want)-64<<10:]); err != nil {
							t.Fatal(err)
						}
					}
					var err error
					if end == "CloseWrite" {
						err = ca.CloseWrite()
					} else {
						err = ca.Close()
					}
					if err != nil {
						t.Fatal(err)
					}
					got, err := io.ReadAll(cb)
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("read %d bytes, %v; want %d bytes (the same) then end of file", len(got), err, len(want))
					}
					ca.mu.Lock()
					poster := ca.poster
					ca.mu.Unlock()
					if !poster {
						t.Error("no message went through the poster")
					}
				})
			}
		})
	}
}
