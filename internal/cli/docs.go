package cli

// The hidden `docs cli` command, and the check that a reference page is
// what it writes.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// DocsCmd is a hidden `docs` command. `docs cli` prints the command-line
// reference of the binary in Markdown (WriteMarkdown); parse the command
// line with DocNotes.
type DocsCmd struct {
	CLI DocsCLICmd `cmd:"" name:"cli" help:"Print the command-line reference in Markdown (docs/reference/cli.md, make docs)."`
}

// DocsCLICmd is `docs cli`.
type DocsCLICmd struct{}

// Run prints the reference on stdout.
func (DocsCLICmd) Run(kctx *kong.Context, notes docNotes) error {
	return WriteMarkdown(kctx.Stdout, kctx.Model, string(notes))
}

type docNotes string

// DocNotes is the kong option that gives DocsCmd the binary's hand-written
// notes (see WriteMarkdown).
func DocNotes(markdown string) kong.Option { return kong.Bind(docNotes(markdown)) }

// CheckReference returns nil when page (a reference page's text) holds
// part (what WriteMarkdown wrote) as one of its parts: from the line that
// is part's marker to the next marker, or the end (trailing blank lines
// aside). Otherwise its error names the first line that differs. The page
// must begin with a part: nothing on it is written by hand.
func CheckReference(page, part string) error {
	lines := strings.Split(strings.TrimRight(page, "\n"), "\n")
	want := strings.Split(strings.TrimRight(part, "\n"), "\n")
	if !strings.HasPrefix(want[0], MarkerPrefix) {
		return fmt.Errorf("the generated part does not begin with its marker: %q", want[0])
	}
	if !strings.HasPrefix(lines[0], MarkerPrefix) {
		return fmt.Errorf("line 1: %q: the page must begin with a generated part (%s...)", lines[0], MarkerPrefix)
	}
	start := slices.Index(lines, want[0])
	if start < 0 {
		return fmt.Errorf("the page has no line %q (the part of this binary)", want[0])
	}
	end := len(lines)
	for i := start + 1; i < len(lines); i++ {
		if strings.HasPrefix(lines[i], MarkerPrefix) {
			end = i
			break
		}
	}
	got := lines[start:end]
	for len(got) > 0 && got[len(got)-1] == "" {
		got = got[:len(got)-1]
	}
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			return fmt.Errorf("line %d: the page's part ends; the generator goes on with %q", start+i+1, want[i])
		case i >= len(want):
			return fmt.Errorf("line %d: %q: the generator's part ends before it", start+i+1, got[i])
		case got[i] != want[i]:
			return fmt.Errorf("line %d:\n  the page has:      %q\n  the generator has: %q", start+i+1, got[i], want[i])
		}
	}
	return nil
}
