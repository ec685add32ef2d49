package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/goroce/goroce/host"
)

// Exit statuses.
const (
	exitOK    = 0 // success
	exitError = 1 // a runtime error, or --verify found bad packets
	exitUsage = 2 // a bad command line (unknown command or flag, missing argument)
)

// usageError is a bad command line; it exits with exitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usageArgs wraps a cobra argument validator so its errors count as usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// run executes the roce command line args, writing to stdout and stderr,
// and returns the process exit status. Tests call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	defer startProfiles(stderr)()
	in := watchInterrupts(stderr, os.Exit)
	defer in.stop()
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(in.ctx)
	if !in.claimExit() {
		select {} // a forced exit is under way: it says so and exits
	}
	if sig := in.signalled(); sig != nil {
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "roce: %s\n", interruptLine(cmd, err, sig))
		return sig.exitCode()
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "roce: %s%s\n", oneLine(err.Error()), rundirHint(cmd, err))
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

// argsWithFix is usageArgs that also says how to write the command: a
// newcomer's `roce ping -c 198.18.0.2` got cobra's "unknown command
// "198.18.0.2" for "roce ping"", which names neither the problem (the
// command takes its address as a flag) nor the fix.
func argsWithFix(v cobra.PositionalArgs, fix string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := v(cmd, args)
		if err == nil {
			return nil
		}
		msg := err.Error()
		if !cmd.HasSubCommands() && strings.HasPrefix(msg, "unknown command ") {
			msg = fmt.Sprintf("%s takes no arguments, and was given %q", cmd.CommandPath(), strings.Join(args, " "))
		}
		return usageError{fmt.Errorf("%s: %s", msg, fix)}
	}
}

// unknownCommand rejects `roce foo` as a usage error, with cobra's suggestions.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "roce",
		Short: "RoCE v1/v2 and RDMA CM in user space, in pure Go",
		Long: `roce is the command-line tool of goroce, a user-space RoCE v1 and v2 stack
in pure Go, with RDMA CM: no kernel module, no cgo, no RDMA hardware.

It creates soft RDMA devices on the host's netdevs (roce link), shows them as
ibv_devinfo and show_gids do (roce dev, roce gids), runs rdma-core's
pingpong tests, rping and perftest against any peer, goroce or Linux rxe
(roce pingpong, roce ping, roce perf), sets the RoCE mode RDMA CM uses
(roce mode, roce configfs), observes running devices (roce stat, roce res,
roce capture) and decodes RoCE captures with every ICRC checked (roce decode).
The same commands show and set the kernel's own RDMA devices (a NIC's, Linux
rxe) beside goroce's, and roce probe asks a peer which RoCE versions it
answers.

Exit status: 0 on success, 1 for an error, 2 for a bad command line (a
numeric flag outside its range included), 130 or 143 when Ctrl-C (SIGINT)
or SIGTERM ended the command, with one line on stderr saying what had
completed; a second Ctrl-C exits at once.`,
		Example: `  roce demo                              # start here
  roce link add rxe0 type rxe netdev eth0  # a soft RoCE device on eth0
  roce gids                              # which GID index to use
  roce pingpong -d rxe0 -g 1 [server]    # ibv_rc_pingpong
  roce ping -c -a 192.0.2.11 -C 3 -v     # rping, through RDMA CM
  roce perf write 192.0.2.11             # ib_write_bw
  roce decode capture.pcap               # one line per RoCE packet
  roce decode -V capture.pcap            # every field of every layer
  roce decode --json capture.pcap | jq . # JSON Lines
  roce decode --verify *.pcap            # exit 1 if any packet is malformed or its ICRC is wrong`,
		Version:                    version(),
		SilenceUsage:               true, // runtime errors are not usage errors: no usage dump
		SilenceErrors:              true, // run prints errors, once, to stderr
		SuggestionsMinimumDistance: 2,
		Args:                       unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("roce {{.Version}}\n")
	root.SetFlagErrorFunc(flagParseError)
	root.PersistentFlags().String("rundir", host.RunDir(),
		"runtime `DIR`: the device registry and what running devices publish ($GOROCE_RUNDIR sets the default)")
	root.AddCommand(newDecodeCmd(), newDemoCmd(), newLinkCmd(), newDevCmd(), newDevicesCmd(), newGIDsCmd(), newPingpongCmd(), newPingCmd(), newModeCmd(), newTOSCmd(), newECNCmd(), newConfigfsCmd())
	root.AddCommand(newStatCmd(), newResCmd(), newCaptureCmd(), newMetricsCmd())
	root.AddCommand(newPerfCmd(), newProbeCmd())
	root.AddCommand(newRstreamCmd(), newRcopyCmd(), newMckeyCmd())
	addKernelRootFlags(root)
	addMetricsFlag(root)
	// Every command's numeric flags are checked against their ranges
	// before it runs (flagRange).
	metricsPre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkFlagRanges(cmd); err != nil {
			return err
		}
		return metricsPre(cmd, args)
	}
	return root
}

// version describes the build: the module version when installed with
// go install module@version, else "devel", plus the VCS revision and Go
// version when known.
func version() string {
	v, rev := "devel", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v = mv
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = " " + s.Value[:12]
			}
		}
	}
	return fmt.Sprintf("%s%s (%s %s/%s)", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// rundirHint names the fix when err is a permission refused on the runtime
// directory (or a path inside it): a user without root meets it first as
// "mkdir /run/goroce: permission denied", which says what failed but not
// what to do. Empty for any other error.
func rundirHint(cmd *cobra.Command, err error) string {
	if cmd == nil || !errors.Is(err, fs.ErrPermission) {
		return ""
	}
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return ""
	}
	dir := filepath.Clean(rundirOf(cmd))
	rel, rerr := filepath.Rel(dir, filepath.Clean(pe.Path))
	if rerr != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	return fmt.Sprintf(" (the runtime directory %s is not this user's: run as root, or pass --rundir DIR or set GOROCE_RUNDIR to a directory this user can create)", dir)
}
