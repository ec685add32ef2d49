// Command qdiscstat samples one qdisc's counters every -every, as
// `tc -s qdisc show` prints them, each line led by the Unix times before
// and after the reading: bench/ecn.sh's view of the bottleneck's queue.
// One process reading netlink, not a shell loop forking tc: on a loaded
// 2-core machine the loop's forks stretched 100 ms samples to 650 ms,
// too coarse for a queue that fills in 13 ms.
//
//	qdiscstat -dev b -parent 1:10 -every 20ms -stop FILE -max 60s
//
// It runs in the namespace of the device (ip netns exec) and ends when
// FILE exists or after -max.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/vishvananda/netlink"
)

func main() {
	dev := flag.String("dev", "", "the network device")
	parent := flag.String("parent", "", "the qdisc's parent, MAJOR:MINOR (hex, as tc)")
	every := flag.Duration("every", 20*time.Millisecond, "the sampling period")
	stop := flag.String("stop", "", "end when this `file` exists")
	maxd := flag.Duration("max", time.Minute, "end after this long at the latest")
	flag.Parse()
	var maj, mnr uint16
	if _, err := fmt.Sscanf(*parent, "%x:%x", &maj, &mnr); err != nil || *dev == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: qdiscstat -dev DEV -parent MAJOR:MINOR [-every D] [-stop FILE] [-max D]")
		os.Exit(2)
	}
	l, err := netlink.LinkByName(*dev)
	if err != nil {
		fmt.Fprintln(os.Stderr, "qdiscstat:", err)
		os.Exit(1)
	}
	want := netlink.MakeHandle(maj, mnr)
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	end := time.Now().Add(*maxd)
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for n := 0; time.Now().Before(end); n++ {
		if *stop != "" && n%10 == 0 {
			if _, err := os.Stat(*stop); err == nil {
				return
			}
		}
		t0 := time.Now()
		qs, err := netlink.QdiscList(l)
		t1 := time.Now()
		if err != nil {
			fmt.Fprintln(os.Stderr, "qdiscstat:", err)
			os.Exit(1)
		}
		for _, q := range qs {
			a := q.Attrs()
			if a.Parent != want || a.Statistics == nil || a.Statistics.Basic == nil || a.Statistics.Queue == nil {
				continue
			}
			b, s := a.Statistics.Basic, a.Statistics.Queue
			fmt.Fprintf(w, "%.6f %.6f qdisc %s %x: parent %x:%x Sent %d bytes %d pkt (dropped %d, overlimits %d requeues %d) backlog %db %dp requeues %d\n",
				float64(t0.UnixNano())/1e9, float64(t1.UnixNano())/1e9, q.Type(), a.Handle>>16, maj, mnr,
				b.Bytes, b.Packets, s.Drops, s.Overlimits, s.Requeues, s.Backlog, s.Qlen, s.Requeues)
		}
		<-tick.C
	}
}
