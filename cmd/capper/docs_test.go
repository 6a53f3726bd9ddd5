package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/docscheck"
)

// parseOnly parses a command line with capper's own grammar and options,
// without running the command (files it names need not exist).
func parseOnly(args []string) error {
	var c commands
	var stderr bytes.Buffer
	_, code, ok := cli.Parse("capper", "", &c, args, io.Discard, &stderr,
		cli.VersionVars("capper", cli.BuildOf(version, revision)),
		kong.Vars{"idempotency_window": app.DefaultIdempotencyWindow().String()},
		docscheck.AnyPath())
	if !ok {
		return fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// TestDocCommands parses every `capper ...` command line of README.md,
// CONTRIBUTING.md and docs/ with capper's command line (see
// internal/docscheck).
func TestDocCommands(t *testing.T) {
	// The check can fail: each of these must not parse.
	docscheck.CheckCommands(t, "../..", "capper", 10, parseOnly, []string{
		"policy chek candidate.yaml",
		"replay --policy p.yaml --from x.jsonl --output yaml",
		"inspect --config capper.yaml --user 4242 --time-zone Mars/Olympus",
		"run",
	})
}
