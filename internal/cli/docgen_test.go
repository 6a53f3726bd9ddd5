package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

type docGrammar struct {
	Verbose bool `short:"v" help:"Say more."`
	Serve   struct {
		Config string        `required:"" type:"existingfile" help:"Config file."`
		Mode   string        `enum:"fast,safe" default:"safe" help:"Mode: fast or safe."`
		Wait   time.Duration `default:"${wait}" env:"TOOL_WAIT" help:"How long to wait."`
		Peers  []string      `placeholder:"HOST:PORT" help:"Peers | others, <name>.txt, *all*."`
		Secret string        `hidden:"" help:"Not for users."`
		Name   string        `arg:"" optional:"" help:"Who."`
	} `cmd:"" help:"Serve what's asked."`
	Store struct {
		Put struct {
			Files []string `arg:"" help:"What to put."`
		} `cmd:"" help:"Put files."`
		Get struct {
			Key string `arg:"" enum:"a,b" help:"Which."`
		} `cmd:"" help:"Get a file."`
	} `cmd:"" help:"The store."`
	Internal struct{} `cmd:"" hidden:"" help:"Not for users."`
	Docs     DocsCmd  `cmd:"" hidden:"" help:"Reference pages."`
}

const docNotesText = `Lines for whoever edits the notes: left out.

<!-- notes: page -->
# Tool

The intro.

<!-- notes: tool store -->
How the store works.
`

// docModel is the kong model of docGrammar.
func docModel(t *testing.T) *kong.Application {
	t.Helper()
	k, err := kong.New(&docGrammar{}, kong.Name("tool"), kong.Description("A tool."), kong.Vars{"wait": "5s"}, kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	return k.Model
}

// TestWriteMarkdown: commands and subcommands in grammar order, their
// arguments and flags (placeholders, enums, defaults with variables,
// environment, required), the command table, the notes where they belong;
// nothing hidden; help texts escaped; the same bytes every time.
func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, docModel(t), docNotesText); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	in := func(want ...string) {
		t.Helper()
		at := 0
		for _, w := range want {
			i := strings.Index(got[at:], w)
			if i < 0 {
				t.Fatalf("the page lacks %q (after byte %d):\n%s", w, at, got)
			}
			at += i + len(w)
		}
	}
	in(MarkerPrefix+"tool by `tool docs cli`",
		"\n\n# Tool\n\nThe intro.\n\n## tool\n\nA tool.\n\n",
		"| `-v`, `--verbose` |  | Say more. |",
		"Every `tool` command takes these flags too.",
		"| [`tool serve`](#tool-serve) | Serve what's asked. |\n| [`tool store put`](#tool-store-put) | Put files. |\n| [`tool store get`](#tool-store-get) | Get a file. |\n\n",
		"### tool serve\n\nServe what's asked.\n\n```text\ntool serve --config=FILE [NAME] [flags]\n```",
		"| `[NAME]` | Who. |",
		"| `--config=FILE` | required | Config file. |",
		"| `--mode=fast\\|safe` | `safe` | Mode: fast or safe. |",
		"| `--wait=DURATION` | `5s` | How long to wait. Environment: `TOOL_WAIT`. |",
		"| `--peers=HOST:PORT,...` |  | Peers \\| others, \\<name>.txt, \\*all\\*. |",
		"### tool store\n\nThe store.\n\nHow the store works.\n\n#### tool store put",
		"```text\ntool store put FILES...\n```",
		"#### tool store get",
		"| `KEY` | Which. One of `a`, `b`. |",
	)
	if !strings.HasSuffix(got, " |\n") || strings.HasSuffix(got, "\n\n") {
		t.Errorf("the page does not end with its last table row and one newline: %q", got[len(got)-20:])
	}
	for _, hidden := range []string{"Lines for whoever", "secret", "Not for users", "internal", "# tool docs"} {
		if strings.Contains(strings.ToLower(got), strings.ToLower(hidden)) {
			t.Errorf("the page shows %q", hidden)
		}
	}
	if strings.Contains(got, "--help") {
		t.Error("the page lists --help")
	}
	var again bytes.Buffer
	if err := WriteMarkdown(&again, docModel(t), docNotesText); err != nil || again.String() != got {
		t.Errorf("a second run wrote another page (%v)", err)
	}
}

// TestWriteMarkdownNotes: a note for a command the grammar lacks, and two
// notes for one command, are errors.
func TestWriteMarkdownNotes(t *testing.T) {
	for notes, want := range map[string]string{
		"<!-- notes: tool stor -->\nx\n":                              `["tool stor"]`,
		"<!-- notes: tool serve -->\nx\n<!-- notes: tool serve -->\n": `two notes for "tool serve"`,
	} {
		err := WriteMarkdown(io.Discard, docModel(t), notes)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("notes %q: error %v, want one with %q", notes, err, want)
		}
	}
}

// TestDocsCommand: `docs cli` prints the page, with the notes DocNotes
// gives it.
func TestDocsCommand(t *testing.T) {
	var g docGrammar
	var stdout, stderr bytes.Buffer
	kctx, code, ok := Parse("tool", "A tool.", &g, []string{"docs", "cli"}, &stdout, &stderr, kong.Vars{"wait": "5s"}, DocNotes(docNotesText))
	if !ok {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if code := Exit("tool", kctx.Run(), &stderr); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want, err := markdown(docModel(t), docNotesText)
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != want {
		t.Errorf("docs cli printed another page:\n%s", stdout.String())
	}
	// Hidden: not in the help.
	stdout.Reset()
	if _, code, _ := Parse("tool", "A tool.", &g, []string{"--help"}, &stdout, &stderr, kong.Vars{"wait": "5s"}); code != ExitOK || strings.Contains(stdout.String(), "docs") {
		t.Errorf("--help: exit %d, shows docs:\n%s", code, stdout.String())
	}
}

func markdown(app *kong.Application, notes string) (string, error) {
	var b bytes.Buffer
	err := WriteMarkdown(&b, app, notes)
	return b.String(), err
}

// TestCheckReference: a page made of generated parts passes; an edit
// anywhere in a part, a line added by hand before the first part, and a
// missing part fail, naming the line.
func TestCheckReference(t *testing.T) {
	a := MarkerPrefix + "a -->\n\n# A\n\nabc\n"
	b := MarkerPrefix + "b -->\n\n## B\n\n| x |\n"
	page := a + "\n" + b
	for _, part := range []string{a, b} {
		if err := CheckReference(page, part); err != nil {
			t.Errorf("the page as generated: %v", err)
		}
	}
	for _, c := range []struct {
		page, part, want string
	}{
		{strings.Replace(page, "abc", "abd", 1), a, `line 5:`},
		{page + "more\n", b, `line 12: "more"`},
		{strings.Replace(page, "| x |\n", "", 1), b, "line 10: the page's part ends"},
		{"# Title\n\n" + page, a, "line 1:"},
		{a, b, "no line"},
	} {
		err := CheckReference(c.page, c.part)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("page %q: error %v, want one with %q", c.page, err, c.want)
		}
	}
}
