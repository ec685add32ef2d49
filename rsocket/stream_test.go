package rsocket

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// randReader is a fast deterministic byte source.
type randReader struct{ r *rand.ChaCha8 }

func (r randReader) Read(p []byte) (int, error) { return r.r.Read(p) }

// TestCopy256MiB: io.Copy of 256 MiB each way at once over one
// connection; the SHA-256 of what arrives equals what was sent.
func TestCopy256MiB(t *testing.T) {
	const size = 256 << 20
	ca, cb := pair(t, netFabric4, Options{ReadBuffer: 1 << 20, WriteBuffer: 1 << 20})
	type result struct {
		sent, got [32]byte
		err       error
	}
	run := func(w, r *Conn, seed byte) <-chan result {
		ch := make(chan result, 1)
		go func() {
			var res result
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := sha256.New()
				src := io.TeeReader(io.LimitReader(randReader{rand.NewChaCha8([32]byte{seed})}, size), h)
				if _, err := io.Copy(w, src); err != nil {
					res.err = err
				}
				copy(res.sent[:], h.Sum(nil))
				if err := w.CloseWrite(); err != nil && res.err == nil {
					res.err = err
				}
			}()
			h := sha256.New()
			n, err := io.Copy(h, r) // until the CloseWrite's end of file
			wg.Wait()
			if err != nil {
				res.err = err
			} else if n != size {
				res.err = fmt.Errorf("%d bytes arrived, want %d", n, size)
			}
			copy(res.got[:], h.Sum(nil))
			ch <- res
		}()
		return ch
	}
	ab, ba := run(ca, cb, 1), run(cb, ca, 2)
	for name, ch := range map[string]<-chan result{"A→B": ab, "B→A": ba} {
		r := <-ch
		if r.err != nil {
			t.Fatalf("%s: %v", name, r.err)
		}
		if r.sent != r.got {
			t.Fatalf("%s: SHA-256 sent %x, received %x", name, r.sent, r.got)
		}
		t.Logf("%s: 256 MiB, SHA-256 %x", name, r.got)
	}
}

// TestHTTP: net/http's server and client over rsocket (an http.Transport
// whose DialContext dials rsocket) serve 1,000 requests, 500 one after
// another on a kept-alive connection and 500 from 10 goroutines at once;
// every body is checked.
func TestHTTP(t *testing.T) {
	a, b := newSides(t, netFabric4)
	l := b.listen(t, 80, Options{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d %s", r.Method, r.URL.Path, len(body), bytes.ToUpper(body))
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	d := &Dialer{CM: a.cm}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 10}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	url := "http://" + l.AddrPort().String()
	get := func(i int) error {
		body := "request " + strconv.Itoa(i)
		resp, err := client.Post(url+"/r/"+strconv.Itoa(i), "text/plain", bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		want := fmt.Sprintf("POST /r/%d %d %s", i, len(body), bytes.ToUpper([]byte(body)))
		if string(got) != want {
			return fmt.Errorf("request %d: %q, want %q", i, got, want)
		}
		return nil
	}
	for i := range 500 {
		if err := get(i); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for g := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				if err := get(500 + g*50 + i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
}

// TestCloseWrite: after CloseWrite (shutdown(SHUT_WR): RS_CTRL_SHUTDOWN)
// the peer reads everything sent, then end of file, and can still send
// back; this side's Writes fail with EPIPE, its Reads go on.
func TestCloseWrite(t *testing.T) {
	ca, cb := pair(t, netFabric4, Options{})
	if _, err := ca.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := ca.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("Write after CloseWrite: %v, want EPIPE", err)
	}
	got, err := io.ReadAll(cb)
	if err != nil || string(got) != "request" {
		t.Fatalf("the peer read %q, %v; want \"request\" then end of file", got, err)
	}
	if _, err := cb.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := cb.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(ca)
	if err != nil || string(got) != "response" {
		t.Fatalf("read %q, %v; want \"response\" then end of file", got, err)
	}
}

// TestCloseGraceful: what was written before Close arrives whole, then end
// of file (RS_CTRL_DISCONNECT after the data; Close waits for the sends);
// Writes to a closed peer fail with ECONNRESET, as rsend's.
func TestCloseGraceful(t *testing.T) {
	// The peer's ring (2 MiB) takes the whole write while it does not read.
	ca, cb := pair(t, netFabric4, Options{ReadBuffer: 1 << 20})
	want := make([]byte, 1<<20+3)
	for i := range want {
		want[i] = byte(i * 7)
	}
	if _, err := ca.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(cb)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, %v; want %d then end of file", len(got), err, len(want))
	}
	if _, err := cb.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Write to a closed peer: %v, want ECONNRESET", err)
	}
	if _, err := ca.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	if err := ca.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Close again: %v, want net.ErrClosed", err)
	}
}

// TestCloseAbortive: SetLinger(0) closes at once, without
// RS_CTRL_DISCONNECT; the peer learns from the DREQ (DISCONNECTED) and
// reads end of file.
func TestCloseAbortive(t *testing.T) {
	ca, cb := pair(t, netFabric4, Options{})
	ca.SetLinger(0)
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	cb.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := cb.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("the peer read %d, %v; want end of file", n, err)
	}
}

// TestKeepAlive: with Options.KeepAlive a connection that carries nothing
// sends 0-byte RDMA WRITEs (rsocket's keepalive) that the peer accepts;
// without it, it sends nothing.
func TestKeepAlive(t *testing.T) {
	for _, ka := range []time.Duration{0, time.Second} {
		ca, cb := pair(t, netFabric4, Options{KeepAlive: ka})
		sentPkts := func() uint64 { return ca.qp.Counters().Snapshot()["sent_pkts"] }
		// Let the connection's start (the SGL updates and their ACKs)
		// settle: no packet for half a second.
		before := sentPkts()
		for still := 0; still < 5; {
			time.Sleep(100 * time.Millisecond)
			if now := sentPkts(); now != before {
				before, still = now, 0
			} else {
				still++
			}
			if ka > 0 {
				break // keepalives never let it settle
			}
		}
		deadline := time.Now().Add(10 * time.Second)
		if ka == 0 {
			deadline = time.Now().Add(3 * time.Second) // long enough for a 1 s keepalive to show
		}
		for time.Now().Before(deadline) && sentPkts() < before+2 {
			time.Sleep(50 * time.Millisecond)
		}
		sent := ca.qp.Counters().Snapshot()["sent_pkts"] - before
		switch {
		case ka > 0 && sent < 2:
			t.Errorf("KeepAlive %v: %d packets sent in 10 s, want keepalives", ka, sent)
		case ka == 0 && sent != 0:
			t.Errorf("no keepalive: %d packets sent while idle", sent)
		}
		// The connection is fine after them.
		if _, err := ca.Write([]byte("ok")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 2)
		if _, err := io.ReadFull(cb, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOptions: out-of-range options are EINVAL with the range named;
// buffer sizes cannot change on a connected Conn.
func TestOptions(t *testing.T) {
	for _, o := range []Options{{ReadBuffer: 100}, {WriteBuffer: 2 << 30}, {SendQueue: 8}, {RecvQueue: 70000}, {Inline: 300}, {Inline: -2}, {KeepAlive: -1}} {
		if _, err := o.resolve(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", o, err)
		} else {
			t.Logf("%+v: %v", o, err)
		}
	}
	p, err := Options{ReadBuffer: 4096, WriteBuffer: 8192, Inline: NoInline}.resolve()
	if err != nil || p.rbufSize != 8192 || p.sbufSize != 16384 || p.inline != 0 {
		t.Errorf("resolved %+v, %v", p, err)
	}
	ca, _ := pair(t, netFabric4, Options{ReadBuffer: 4096})
	if r, _ := ca.Buffers(); r != 8192 {
		t.Errorf("receive ring of %d bytes, want 8192 (twice SO_RCVBUF)", r)
	}
	if err := ca.SetReadBuffer(1 << 20); !errors.Is(err, syscall.EISCONN) {
		t.Errorf("SetReadBuffer on a connection: %v, want EISCONN", err)
	}
	if _, err := (&Dialer{}).Dial(context.Background(), "rsocket", "192.0.2.1:1"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Dial without a CM: %v", err)
	}
	a, _ := newSides(t, netFabric4)
	if _, err := Dial(context.Background(), a.cm, "udp", "192.0.2.1:1"); !errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Errorf("network udp: %v", err)
	}
}

// TestReadAfterPeerGone: the peer writes and closes; its DREQ reaches this
// side's event goroutine (DISCONNECTED) before anything here has polled
// the CQ. Read still returns everything the peer sent, then end of file.
// (Read once concluded end of file from the state alone: a roce rstream
// client lost the server's last transfers that way.)
func TestReadAfterPeerGone(t *testing.T) {
	ca, cb := pair(t, netFabric4, Options{})
	want := []byte("the last words before the DREQ")
	if _, err := ca.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	// Wait for the DISCONNECTED event, with the data still in the CQ.
	for {
		cb.mu.Lock()
		gone, queued := cb.st&stDisconnected != 0, cb.rmHead != cb.rmTail
		cb.mu.Unlock()
		if queued {
			t.Fatal("the data was polled before the DREQ came: the test proves nothing")
		}
		if gone {
			break
		}
		time.Sleep(time.Millisecond)
	}
	got, err := io.ReadAll(cb)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %q, %v; want %q then end of file", got, err, want)
	}
}

// TestDialErrors: a Dial to a port without a listener is refused
// (ECONNREFUSED, the CM's REJ); one to an address whose CM never answers
// times out (ETIMEDOUT, the CM's UNREACHABLE, with its diagnosis); both
// wrapped in a *net.OpError naming the peer.
func TestDialErrors(t *testing.T) {
	a, b := newSides(t, netFabric4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Dial(ctx, a.cm, "rsocket", net.JoinHostPort(b.ip.String(), "7999"))
	var oe *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("Dial to a port without a listener: %v, want a dial *net.OpError wrapping ECONNREFUSED", err)
	}
	_, err = Dial(ctx, a.cm, "rsocket6", net.JoinHostPort(b.ip.String(), "7999"))
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("Dial rsocket6 to an IPv4 address: %v, want EADDRNOTAVAIL", err)
	}
	_, err = Dial(ctx, a.cm, "rsocket", "198.51.100.99:7471")
	if !errors.Is(err, syscall.ETIMEDOUT) || !strings.Contains(err.Error(), "198.51.100.99:7471") {
		t.Errorf("Dial to an address nothing answers: %v, want ETIMEDOUT naming it", err)
	}
	t.Logf("as wanted: %v", err)
}
