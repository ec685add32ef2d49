// Command roce is goroce's command-line tool: the operator's view of a
// user-space RoCE v1/v2 stack. Today it decodes captures (roce decode) and
// shows a real Soft-RoCE exchange (roce demo); the engine comes later.
//
// This package holds flags, files, output streams and exit codes only; the
// protocol logic is in wire and the formatting in internal/dissect.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
