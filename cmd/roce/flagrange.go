package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every numeric flag declares the values it takes (flagRange), once: the
// root command's pre-run refuses a value outside them before the command
// runs, and a value that does not even parse (-s x, or too large for the
// flag's type) gets the same range in its message. Either way it is a
// usage error (exit 2) told as EINVAL, naming the flag and its values:
//
//	roce: pingpong: Invalid argument: -s -5: the message size should be between 1 and 8388608 bytes
//
// Zero is never a silent "default": where the original tool gives 0 a
// meaning (perftest's -m 0: the port's MTU; rping's -C 0: until
// interrupted), the range includes it and the help says what it means;
// elsewhere 0 is outside the range like any other bad value.

// rangeAnnotation holds a flag's range: lo, hi, what, unit.
const rangeAnnotation = "goroce_range"

// flagRange declares that the int flag name of cmd takes lo..hi. what
// names the value ("the message size"), unit follows the numbers
// ("bytes"; may be empty).
func flagRange(cmd *cobra.Command, name string, lo, hi int64, what, unit string) {
	if cmd.Flags().Lookup(name) == nil {
		panic("flagRange: no flag " + name) // a programming error, found by any test of the command
	}
	cmd.Flags().SetAnnotation(name, rangeAnnotation,
		[]string{strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10), what, unit})
}

type valueRange struct {
	lo, hi     int64
	what, unit string
}

func rangeOf(f *pflag.Flag) (valueRange, bool) {
	a, ok := f.Annotations[rangeAnnotation]
	if !ok || len(a) != 4 {
		return valueRange{}, false
	}
	lo, err1 := strconv.ParseInt(a[0], 10, 64)
	hi, err2 := strconv.ParseInt(a[1], 10, 64)
	if err1 != nil || err2 != nil {
		return valueRange{}, false
	}
	return valueRange{lo, hi, a[2], a[3]}, true
}

func (r valueRange) String() string {
	// perftest's words (CHECK_VALUE_IN_RANGE), for every command.
	s := fmt.Sprintf("%s should be between %d and %d", r.what, r.lo, r.hi)
	if r.lo == r.hi {
		s = fmt.Sprintf("%s must be %d", r.what, r.lo)
	}
	if r.unit != "" {
		s += " " + r.unit
	}
	return s
}

// flagName is how the messages name a flag: its shorthand, else --name.
func flagName(f *pflag.Flag) string {
	if f.Shorthand != "" {
		return "-" + f.Shorthand
	}
	return "--" + f.Name
}

// opName is the command's name in messages: "pingpong", "perf write".
func opName(cmd *cobra.Command) string {
	return strings.TrimSpace(strings.TrimPrefix(cmd.CommandPath(), "roce"))
}

// badFlag is a usage error for flag f's value: EINVAL, with why.
func badFlag(cmd *cobra.Command, f *pflag.Flag, value, why string) error {
	return usageError{&errnoError{op: opName(cmd), errno: syscall.EINVAL, detail: fmt.Sprintf("%s %s: %s", flagName(f), value, why)}}
}

// checkFlagRanges refuses a flag given a value outside its range.
func checkFlagRanges(cmd *cobra.Command) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		r, ok := rangeOf(f)
		if !ok || err != nil {
			return
		}
		v, perr := strconv.ParseInt(f.Value.String(), 10, 64)
		if perr != nil || v < r.lo || v > r.hi {
			err = badFlag(cmd, f, f.Value.String(), r.String())
		}
	})
	return err
}

// flagParseError is the root's FlagErrorFunc: a bad command line, with
// the flag's range when a value did not parse.
func flagParseError(cmd *cobra.Command, err error) error {
	var iv *pflag.InvalidValueError
	if errors.As(err, &iv) {
		if r, ok := rangeOf(iv.GetFlag()); ok {
			why := r.String()
			if _, perr := strconv.ParseInt(iv.GetValue(), 0, 64); perr != nil && !errors.Is(perr, strconv.ErrRange) {
				why = "not an integer; " + why
			}
			return badFlag(cmd, iv.GetFlag(), iv.GetValue(), why)
		}
	}
	return usageError{err}
}
