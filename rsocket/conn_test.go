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
