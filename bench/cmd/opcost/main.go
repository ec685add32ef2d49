//go:generate go run gencalls.go

// Command opcost times the operations goroce's packet path is made of —
// calls, clock reads, locks, atomics, channel sends, copies, a map lookup, CRC-32
// (hash/crc32's and the loop goroce's ICRC chose, named in the header) and
// goroce's ICRC at packet sizes, system calls, yields — one loop each,
// and prints nanoseconds per operation. Instruction counts
// (bench/callgrind.sh) weigh every instruction alike; under the lab VMs'
// emulation (QEMU TCG) they do not cost alike, and this says by how much.
// Build it static and run it in a VM beside the host:
//
//	CGO_ENABLED=0 go build -o /tmp/extra/opcost ./bench/cmd/opcost
//	ROCE_LAB_EXTRA=/tmp/extra ../shared/lab/up 1
//	../shared/lab/vm-exec vm1 /opt/extra/opcost
//	GOMAXPROCS=1 /tmp/extra/opcost
//
// It runs on one P (GOMAXPROCS 1, as the roce tools and the VMs' one vCPU)
// unless the environment sets GOMAXPROCS, and prints the clock source the
// kernel uses.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/wire"
)

var sink uint64

// step is a call the compiler may not inline: what a call and its return
// cost, beside the arithmetic they wrap.
//
//go:noinline
func step(x uint64) uint64 { return x*31 + 1 }

// chain8 is eight such calls deep, each returning through the others.
//
//go:noinline
func chain8(x uint64, d int) uint64 {
	if d == 0 {
		return x*31 + 1
	}
	return chain8(x, d-1) + 1
}

type stepper interface{ step(uint64) uint64 }

type stepImpl struct{}

//go:noinline
func (stepImpl) step(x uint64) uint64 { return x*31 + 1 }

func main() {
	n := flag.Int("n", 200000, "iterations of the cheap operations (a tenth for the system calls and yields)")
	flag.Parse()
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	for _, f := range []string{"current_clocksource", "available_clocksource"} {
		b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/" + f)
		if err == nil {
			fmt.Printf("%-40s %s\n", f, strings.TrimSpace(string(b)))
		}
	}
	fmt.Printf("%-40s %d\n", "GOMAXPROCS", runtime.GOMAXPROCS(0))
	m, why := wire.ICRCMethod()
	fmt.Printf("%-40s %s (%s)\n", "ICRC's CRC-32 loop", m, why)
	for _, op := range ops() {
		k := *n
		if op.slow {
			k = max(*n/10, 1)
		}
		selfTimed = 0
		t0 := time.Now()
		op.run(k)
		d := time.Since(t0)
		if selfTimed != 0 {
			d = selfTimed
		}
		fmt.Printf("%-40s %10.1f ns\n", op.name, float64(d.Nanoseconds())/float64(k))
	}
}

type op struct {
	name string
	slow bool
	run  func(n int)
}

// selfTimed is set by an op that times its operations itself, leaving
// out what it does to set each up.
var selfTimed time.Duration

// mem16 is 16 MiB, touched so that every page is mapped before the
// timing: a load from each page in turn measures the address translation.
var mem16 []byte

func ops() []op {
	if mem16 == nil {
		mem16 = make([]byte, 16<<20)
		for i := 0; i < len(mem16); i += 4096 {
			mem16[i] = 1
		}
	}
	var (
		a    atomic.Int64
		mu   sync.Mutex
		full = make(chan struct{}, 1)
		m    = map[uint32]*int{}
		buf  = make([]byte, 4096)
		dst  = make([]byte, 4096)
	)
	full <- struct{}{}
	for i := range 64 {
		m[uint32(i)] = new(int)
	}
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	t0 := time.Now()
	list := []op{
		{"arithmetic (3 instructions)", false, func(n int) {
			x := uint64(1)
			for i := range n {
				x = x*31 + uint64(i)
			}
			sink += x
		}},
		{"call and return (not inlined)", false, func(n int) {
			x := uint64(1)
			for range n {
				x = step(x)
			}
			sink += x
		}},
		{"interface method call", false, func(n int) {
			var st stepper = stepImpl{}
			x := uint64(1)
			for range n {
				x = st.step(x)
			}
			sink += x
		}},
		{"8 nested calls and returns", false, func(n int) {
			x := uint64(1)
			for range n {
				x = chain8(x, 7)
			}
			sink += x
		}},
		// A packet's path calls a few hundred functions, each once: the
		// loops above call one, over and over. Per call.
		{fmt.Sprintf("call and return, %d distinct in turn", callFns), false, func(n int) {
			x := uint64(1)
			for range max(n/callFns, 1) {
				x = chainCalls(x)
			}
			sink += x
		}},
		// The same after each pass's system call, as the path runs
		// between sendmmsg calls: a sendto of 64 bytes over loopback
		// (to the discard port, or nothing: the kernel's work is what
		// matters), the calls alone timed.
		{"… the same, each pass after a UDP sendto", false, func(n int) {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
			if err != nil {
				panic(err)
			}
			defer syscall.Close(fd)
			to := &syscall.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}
			x, d := uint64(1), time.Duration(0)
			for range max(n/callFns, 1) {
				syscall.Sendto(fd, buf[:64], 0, to)
				t0 := time.Now()
				x = chainCalls(x)
				d += time.Since(t0)
			}
			sink += x
			selfTimed = d * time.Duration(n) / time.Duration(max(n/callFns, 1)*callFns)
		}},
		{"load, each from another page of 16 MiB", false, func(n int) {
			const pages = 4096
			x := uint64(0)
			for i := range n {
				x += uint64(mem16[(i%pages)*4096+(i&63)])
			}
			sink += x
		}},
	}
	// A load from each of a working set of pages in turn, the pages
	// scattered over the 16 MiB as a heap's objects are: while the set
	// fits the address-translation cache every load hits it; past that
	// size each costs as the row above.
	for _, pages := range []int{32, 128, 512} {
		offs := make([]int, pages)
		perm := rand.New(rand.NewPCG(uint64(pages), 1)).Perm(4096)
		for i := range offs {
			offs[i] = perm[i]*4096 + i&63
		}
		list = append(list, op{fmt.Sprintf("load, a working set of %d pages", pages), false, func(n int) {
			x := uint64(0)
			for i := range n {
				x += uint64(mem16[offs[i%pages]])
			}
			sink += x
		}})
	}
	list = append(list, []op{
		{"time.Now", false, func(n int) {
			for range n {
				sink += uint64(time.Now().UnixNano())
			}
		}},
		{"time.Since (monotonic only)", false, func(n int) {
			for range n {
				sink += uint64(time.Since(t0))
			}
		}},
		{"atomic Add", false, func(n int) {
			for range n {
				a.Add(1)
			}
		}},
		{"atomic CompareAndSwap", false, func(n int) {
			for i := range n {
				a.CompareAndSwap(int64(i), int64(i+1))
			}
		}},
		{"Mutex Lock+Unlock", false, func(n int) {
			for range n {
				mu.Lock()
				mu.Unlock()
			}
		}},
		{"select send, channel full", false, func(n int) {
			for range n {
				select {
				case full <- struct{}{}:
				default:
				}
			}
		}},
		{"map[uint32] lookup", false, func(n int) {
			for i := range n {
				if m[uint32(i&63)] != nil {
					sink++
				}
			}
		}},
	}...)
	for _, l := range []int{64, 256, 4096} {
		list = append(list, op{fmt.Sprintf("copy %d B", l), false, func(n int) {
			for range n {
				copy(dst[:l], buf[:l])
			}
		}})
	}
	for _, l := range []int{44, 104, 256, 1024, 4096} {
		list = append(list, op{fmt.Sprintf("crc32.Update %d B", l), false, func(n int) {
			c := uint32(0)
			for range n {
				c = crc32.Update(c, crc32.IEEETable, buf[:l])
			}
			sink += uint64(c)
		}})
	}
	// The loop goroce's ICRC uses in this process (GOROCE_ICRC).
	for _, l := range []int{44, 104, 1024, 4096} {
		list = append(list, op{fmt.Sprintf("wire.UpdateCRC32 %d B", l), false, func(n int) {
			c := uint32(0)
			for range n {
				c = wire.UpdateCRC32(c, buf[:l])
			}
			sink += uint64(c)
		}})
	}
	// goroce's ICRC over a RoCE v2 packet from its IPv4 header on: an ACK
	// (44 bytes), a 64-byte SEND (104), a 4 KiB WRITE packet.
	for _, l := range []int{44, 104, 4136} {
		pkt := make([]byte, l)
		copy(pkt, buf)
		pkt[0] = 0x45
		binary.BigEndian.PutUint16(pkt[2:], uint16(l))
		list = append(list, op{fmt.Sprintf("wire.ICRC %d B", l), false, func(n int) {
			for range n {
				sink += uint64(wire.ICRC(pkt, 20, wire.RoCEv2))
			}
		}})
	}
	list = append(list,
		op{"system call (getppid, raw)", true, func(n int) {
			for range n {
				syscall.RawSyscall(syscall.SYS_GETPPID, 0, 0, 0)
			}
		}},
		op{"system call (getppid, Go's)", true, func(n int) {
			for range n {
				syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
			}
		}},
		op{"runtime.Gosched", true, func(n int) {
			for range n {
				runtime.Gosched()
			}
		}},
		op{"goroutine hand-off and back", true, func(n int) {
			c1, c2 := make(chan int), make(chan int)
			go func() {
				for v := range c1 {
					c2 <- v
				}
			}()
			for i := range n {
				c1 <- i
				<-c2
			}
			close(c1)
		}},
	)
	return list
}
