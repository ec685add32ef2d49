package rsocket

import (
	"io"
	"testing"
)

// BenchmarkStream64K: 64 KiB Writes one way, read on the other side.
func BenchmarkStream64K(b *testing.B) {
	for _, net := range testNets {
		b.Run(net, func(b *testing.B) {
			o := Options{ReadBuffer: 1 << 20, WriteBuffer: 1 << 20}
			ca, cb := pair(b, net, o)
			buf := make([]byte, 64<<10)
			done := make(chan error, 1)
			go func() {
				_, err := io.CopyN(io.Discard, cb, int64(b.N)*int64(len(buf)))
				done <- err
			}()
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			for range b.N {
				if _, err := ca.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkRequestResponse64: a 64-byte request and a 64-byte response.
func BenchmarkRequestResponse64(b *testing.B) {
	for _, net := range testNets {
		b.Run(net, func(b *testing.B) {
			ca, cb := pair(b, net, Options{})
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, 64)
				for range b.N {
					if _, err := io.ReadFull(cb, buf); err != nil {
						done <- err
						return
					}
					if _, err := cb.Write(buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			buf := make([]byte, 64)
			b.ResetTimer()
			for range b.N {
				if _, err := ca.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(ca, buf); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}
