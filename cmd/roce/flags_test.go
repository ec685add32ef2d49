package main

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// numericFlags lists every numeric flag of every command, with a command
// line to try it on and the values it takes. Run against a runtime
// directory with no devices, a command whose flags pass goes on to fail
// for want of a device (exit 1); one whose flag does not is refused
// before (exit 2). zero says what 0 does: ok (the original tool gives 0
// a meaning, which the help names), or refused with the range.
var numericFlags = []struct {
	args     []string // the command line before the flag
	flag     string   // as the messages name it
	lo, hi   string   // the range the message names
	zeroOK   bool     // 0 is in the range
	negative bool     // -1 is in the range (no flag's is)
}{
	{args: []string{"pingpong", "-g", "1"}, flag: "-p", lo: "1", hi: "65535"},
	{args: []string{"pingpong", "-g", "1"}, flag: "-i", lo: "1", hi: "255"},
	{args: []string{"pingpong", "-g", "1"}, flag: "-s", lo: "1", hi: "8388608"}, // ibv_rc_pingpong -s 0: Couldn't register MR
	{args: []string{"pingpong", "-g", "1"}, flag: "-m", lo: "256", hi: "4096"},
	{args: []string{"pingpong", "-g", "1"}, flag: "-r", lo: "1", hi: "32766"},      // -r 0: both sides wait forever; -r -1: cqe 0
	{args: []string{"pingpong", "-g", "1"}, flag: "-n", lo: "1", hi: "2147483647"}, // -n 0: "0 iters ... = inf usec/iter"
	{args: []string{"pingpong", "-g", "1"}, flag: "-l", lo: "0", hi: "15", zeroOK: true},
	{args: []string{"pingpong"}, flag: "-g", lo: "0", hi: "1023", zeroOK: true},
	{args: []string{"perf", "read"}, flag: "-i", lo: "1", hi: "255"},
	{args: []string{"perf", "read"}, flag: "-p", lo: "1", hi: "65535"}, // perftest -p 0: "Couldn't connect to ...:0"
	{args: []string{"perf", "read"}, flag: "-s", lo: "1", hi: "8388608"},
	{args: []string{"perf", "read"}, flag: "-n", lo: "5", hi: "100000000"},
	{args: []string{"perf", "read"}, flag: "-D", lo: "1", hi: "2147483647"},
	{args: []string{"perf", "read"}, flag: "-x", lo: "0", hi: "1023", zeroOK: true},
	{args: []string{"perf", "read"}, flag: "-m", lo: "0", hi: "4096", zeroOK: true}, // perftest -m 0: the port's MTU
	{args: []string{"perf", "read"}, flag: "-q", lo: "1", hi: "1024"},
	{args: []string{"perf", "read"}, flag: "-t", lo: "1", hi: "15000"},
	{args: []string{"perf", "send"}, flag: "-r", lo: "1", hi: "16384"},
	{args: []string{"perf", "read"}, flag: "-Q", lo: "1", hi: "1024"},
	{args: []string{"perf", "read"}, flag: "-o", lo: "0", hi: "2147483647", zeroOK: true}, // perftest -o 0: the device maximum
	{args: []string{"perf", "read"}, flag: "-u", lo: "0", hi: "31", zeroOK: true},         // perftest -u 0: no timeout
	{args: []string{"perf", "read", "-R"}, flag: "-T", lo: "0", hi: "255", zeroOK: true},
	{args: []string{"ping", "-c", "-a", "198.51.100.1"}, flag: "-p", lo: "1", hi: "65535"}, // rping -p 0: REJECTED
	{args: []string{"ping", "-c", "-a", "198.51.100.1"}, flag: "-C", lo: "0", hi: "2147483647", zeroOK: true},
	{args: []string{"ping", "-c", "-a", "198.51.100.1"}, flag: "-S", lo: "26", hi: "65535"},
	{args: []string{"gids"}, flag: "-p", lo: "1", hi: "255"},
	{args: []string{"dev"}, flag: "-i", lo: "1", hi: "255"},
	{args: []string{"mode", "-d", "rxe0"}, flag: "-p", lo: "1", hi: "255"},
	{args: []string{"tos", "-d", "rxe0"}, flag: "-p", lo: "1", hi: "255"},
	{args: []string{"stat"}, flag: "--qp", lo: "0", hi: "16777215", zeroOK: true},
	{args: []string{"capture", "-d", "rxe0", "-w", "/dev/null"}, flag: "-c", lo: "1", hi: "2147483647"}, // tcpdump -c 0: invalid packet count
	{args: []string{"decode", "/dev/null"}, flag: "--udp-port", lo: "1", hi: "65535"},
}

// TestNumericFlags runs roce as a user would with every numeric flag of
// every command at -1, 0 and two values too large (one past the range,
// one past int64): none panics (roce pingpong -s -5 did: makeslice: len
// out of range), a value outside the range is a bad command line (exit 2)
// told as EINVAL naming the flag, the value and the range, and 0 is
// either refused so or, where the original tool gives it a meaning, taken
// (never a silent default: the help says what it means).
func TestNumericFlags(t *testing.T) {
	exe, dir := roceExecutable(t), t.TempDir()
	for _, f := range numericFlags {
		for _, v := range []string{"-1", "0", "2147483648", "99999999999999999999"} {
			args := append(append([]string{"--rundir", dir}, f.args...), f.flag, v)
			t.Run(strings.Join(append(f.args, f.flag, v), " "), func(t *testing.T) {
				var stdout, stderr strings.Builder
				cmd := exec.Command(exe, args...)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				var ee *exec.ExitError
				code := 0
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(stderr.String(), "panic") || strings.Contains(stderr.String(), "goroutine ") {
					t.Fatalf("roce %q panicked:\n%s", args, stderr.String())
				}
				inRange := v == "0" && f.zeroOK || v == "-1" && f.negative
				op := strings.Join(f.args[:1], " ")
				if f.args[0] == "perf" {
					op = "perf " + f.args[1]
				}
				if inRange {
					if code != exitError || strings.Contains(stderr.String(), "Invalid argument: "+f.flag) {
						t.Errorf("roce %q: exit %d, stderr %q: %s %s refused, but it is in the range", args, code, stderr.String(), f.flag, v)
					}
					return
				}
				want := regexp.MustCompile(`^roce: ` + regexp.QuoteMeta(op) + `: Invalid argument: ` + regexp.QuoteMeta(f.flag+" "+v) +
					`: [^\n]* should be between ` + f.lo + ` and ` + f.hi + `\b[^\n]*\nRun 'roce ` + regexp.QuoteMeta(op) + ` --help' for usage\.\n$`)
				if code != exitUsage || !want.MatchString(stderr.String()) || stdout.String() != "" {
					t.Errorf("roce %q: exit %d, stdout %q, stderr %q;\nwant exit 2 and stderr matching %s", args, code, stdout.String(), stderr.String(), want)
				}
			})
		}
	}
}

// TestEveryNumericFlagHasARange: no command has a numeric flag without a
// range, which TestNumericFlags would then miss.
func TestEveryNumericFlagHasARange(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(f.Value.Type(), "int") {
				return
			}
			if _, ok := rangeOf(f); !ok {
				t.Errorf("roce %s: the numeric flag --%s declares no range (flagRange)", opName(c), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(nil, nil))
}
