// Package cli owns what capper's commands share: parsing a command line
// with kong into one of three exit codes (0 ok, 1 failure, 2 usage error)
// without exiting inside the parser, so that each main has one exit path and
// tests can run it in-process; the process logger; the version line; the
// `version` and `completion` commands; the command-line reference, written
// from the grammar by the hidden `docs cli` command (docgen.go, docs.go).
package cli

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/alecthomas/kong"
)

// Exit codes of every capper command.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Parse parses args into grammar (a kong CLI struct). It returns the parsed
// context and ok, or the exit code to return at once: ExitOK after --help,
// ExitUsage (with the error and usage printed) for a bad command line.
func Parse(name, description string, grammar any, args []string, stdout, stderr io.Writer, opts ...kong.Option) (kctx *kong.Context, code int, ok bool) {
	exitCode := -1
	opts = append([]kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }), // --help: return after parsing, not exit inside kong
		kong.UsageOnError(),
	}, opts...)
	parser, err := kong.New(grammar, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, ExitUsage, false
	}
	kctx, err = parser.Parse(args)
	switch {
	case exitCode >= 0:
		return nil, exitCode, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		var perr *kong.ParseError
		if errors.As(err, &perr) && perr.Context != nil {
			Usage(perr.Context, stderr)
		} else {
			Usage(&kong.Context{Kong: parser}, stderr)
		}
		return nil, ExitUsage, false
	}
	return kctx, ExitOK, true
}

// Usage prints the usage of the command kctx selected (the program's
// without one) on w, after an error that exits ExitUsage.
func Usage(kctx *kong.Context, w io.Writer) {
	if kctx == nil || kctx.Kong == nil {
		return
	}
	out := kctx.Stdout
	kctx.Stdout = w
	defer func() { kctx.Stdout = out }()
	fmt.Fprintln(w)
	_ = kctx.PrintUsage(true)
}

// ExitWithUsage is Exit, then, for an exit-2 error that was not reported
// (logged) already, the usage of the command kctx selected on stderr.
func ExitWithUsage(name string, kctx *kong.Context, err error, stderr io.Writer) int {
	code := Exit(name, err, stderr)
	var reported reportedError
	if code == ExitUsage && !errors.As(err, &reported) {
		Usage(kctx, stderr)
	}
	return code
}

// UsageError marks err as a wrong command line (or a wrong config named on
// it): Exit returns ExitUsage, and ExitWithUsage prints the usage after
// it. It returns nil for nil.
func UsageError(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }
func (usageError) ExitCode() int   { return ExitUsage }

// Reported marks err as already reported (logged by the command): Exit
// returns its exit code without printing it again.
func Reported(err error) error {
	if err == nil {
		return nil
	}
	return reportedError{err}
}

type reportedError struct{ error }

func (r reportedError) Unwrap() error { return r.error }

// Exit turns the error a command returned into the process's exit code:
// ExitOK for nil; the error's own ExitCode() when it has one; ExitFailure
// otherwise. Unless the error was Reported, it prints "name: err" on stderr.
func Exit(name string, err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var reported reportedError
	if !errors.As(err, &reported) {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	var exit interface{ ExitCode() int }
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	return ExitFailure
}

// TimeZone is a flag naming an IANA time zone; a bad name is a usage error.
type TimeZone struct{ *time.Location }

// Decode reads the flag's value (kong.MapperValue).
func (z *TimeZone) Decode(ctx *kong.DecodeContext) error {
	var name string
	if err := ctx.Scan.PopValueInto("time zone", &name); err != nil {
		return err
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "" || name == "Local" {
		return fmt.Errorf("%q is not an IANA time zone (e.g. Europe/Paris)", name)
	}
	z.Location = loc
	return nil
}
