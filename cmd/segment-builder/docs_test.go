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
	pages, err := docscheck.Load("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := docscheck.Commands(pages, "segment-builder")
	if err != nil {
		t.Error(err)
	}
	if len(cmds) < 4 {
		t.Fatalf("found only %d segment-builder command lines in the docs", len(cmds))
	}
	for _, c := range cmds {
		if err := parseOnly(c.Args); err != nil {
			t.Errorf("%s: %s: %v", c.Where, c.Line, err)
		}
	}
	// The check can fail: a flag it does not have, a bad enum value, a
	// plan command without its argument.
	for _, bad := range []string{
		"--input in.csv --output /tmp/snap",
		"--input in.csv --on-conflict newest",
		"plan withdraw --from /tmp/plans",
	} {
		if err := parseOnly(strings.Fields(bad)); err == nil {
			t.Errorf("segment-builder %s parses", bad)
		}
	}
}
