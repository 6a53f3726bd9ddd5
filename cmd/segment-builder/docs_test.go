package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/docscheck"
	"github.com/capper-dev/capper/internal/segbuild"
)

// parseOnly parses a command line with segment-builder's own grammar and
// options, without running the command.
func parseOnly(args []string) error {
	var c commands
	var stderr bytes.Buffer
	_, code, ok := cli.Parse("segment-builder", "", &c, args, io.Discard, &stderr,
		kong.Vars{"keep": strconv.Itoa(segbuild.DefaultKeep)}, cli.VersionVars("segment-builder", cli.BuildOf(version, revision)),
		docscheck.AnyPath())
	if !ok {
		return fmt.Errorf("exit %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// TestDocCommands parses every `segment-builder ...` command line of
// README.md, CONTRIBUTING.md and docs/ with segment-builder's command line
// (see internal/docscheck).
func TestDocCommands(t *testing.T) {
	// The check can fail: each of these must not parse.
	docscheck.CheckCommands(t, "../..", "segment-builder", 4, parseOnly, []string{
		"--input in.csv --output /tmp/snap",
		"--input in.csv --on-conflict newest",
		"plan withdraw --from /tmp/plans",
	})
}
