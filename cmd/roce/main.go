// Command roce is goroce's command-line tool: the operator's view of a
// user-space RoCE v1/v2 stack with RDMA CM: devices on netdevs, rdma-core's
// and perftest's tools, counters, captures and the rdma_cm configfs tree.
//
// This package holds flags, files, output streams and exit codes only; the
// protocol logic is in the library packages.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
