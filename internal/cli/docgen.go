package cli

// The command-line reference (docs/reference/cli.md), generated from the
// kong model each binary parses, so that the page cannot list a command
// or a flag the binary does not have, or miss one it has.

import (
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// MarkerPrefix begins the first line of what WriteMarkdown writes: a
// reference page is one or more such parts, one per binary, each from its
// marker to the next one.
const MarkerPrefix = "<!-- Generated from the command line of "

var noteRE = regexp.MustCompile(`^<!-- notes: (.+?) -->$`)

// WriteMarkdown writes the reference of the command line app (a kong
// model: kong.New(&grammar).Model) in Markdown, in the order of the
// grammar: a heading per command ("## capper", "### capper inspect",
// "#### capper policy check"), its help, a usage line, a table of its
// positional arguments and one of its flags (placeholder or enum values,
// default or "required", environment variables), and under the binary's
// heading a table of every command. Hidden commands and flags are left
// out. It writes the same bytes for the same grammar.
//
// notes are hand-written Markdown included verbatim: lines
// "<!-- notes: PATH -->" begin the notes of the command PATH ("capper",
// "capper inspect"), written after its generated part and before its
// subcommands; "<!-- notes: page -->" begins what comes first (a page's
// title and introduction). Lines before the first marker are a comment for
// whoever edits the notes, left out. A note for a command the grammar does
// not have is an error.
func WriteMarkdown(w io.Writer, app *kong.Application, notes string) error {
	ns, err := parseNotes(notes)
	if err != nil {
		return err
	}
	d := &docWriter{app: app, notes: ns, used: map[string]bool{}}
	d.add(fmt.Sprintf("%s%s by `%s docs cli` (make docs): edit its grammar and notes in cmd/%s, not this part. -->",
		MarkerPrefix, app.Name, app.Name, app.Name))
	d.note("page")
	d.node(app.Node, 2)
	var unknown []string
	for path := range ns {
		if !d.used[path] {
			unknown = append(unknown, path)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("docs: notes for commands that %s does not have: %q", app.Name, unknown)
	}
	_, err = io.WriteString(w, strings.Join(d.blocks, "\n\n")+"\n")
	return err
}

// parseNotes splits notes at their markers.
func parseNotes(text string) (map[string]string, error) {
	out := map[string]string{}
	var path string
	var body []string
	flush := func() {
		if path != "" {
			out[path] = strings.Trim(strings.Join(body, "\n"), "\n")
		}
	}
	for _, l := range strings.Split(text, "\n") {
		m := noteRE.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			body = append(body, strings.TrimRight(l, " \t\r"))
			continue
		}
		flush()
		path, body = m[1], nil
		if _, dup := out[path]; dup {
			return nil, fmt.Errorf("docs: two notes for %q", path)
		}
	}
	flush()
	return out, nil
}

type docWriter struct {
	app    *kong.Application
	notes  map[string]string
	used   map[string]bool
	blocks []string // Markdown blocks, written a blank line apart
}

func (d *docWriter) add(block string) {
	if block != "" {
		d.blocks = append(d.blocks, block)
	}
}

func (d *docWriter) note(path string) {
	if n, ok := d.notes[path]; ok {
		d.used[path] = true
		d.add(n)
	}
}

// node writes n's section, then its subcommands', at heading level.
func (d *docWriter) node(n *kong.Node, level int) {
	path := n.FullPath()
	d.add(strings.Repeat("#", min(level, 6)) + " " + path)
	d.add(strings.TrimSpace(n.Help))
	if n.Detail != "" && n.Detail != n.Help {
		d.add(strings.TrimSpace(n.Detail))
	}
	children := visibleChildren(n)
	if len(children) == 0 || n.DefaultCmd != nil {
		d.add("```text\n" + d.usage(n) + "\n```")
	}
	d.add(positionalTable(n.Positional))
	d.add(d.flagTable(n))
	if len(children) > 0 && len(d.flags(n)) > 0 {
		d.add(fmt.Sprintf("Every `%s` command takes these flags too.", n.FullPath()))
	}
	if n == d.app.Node {
		d.add(commandTable(n))
	}
	d.note(path)
	for _, c := range children {
		d.node(c, level+1)
	}
}

func visibleChildren(n *kong.Node) []*kong.Node {
	var out []*kong.Node
	for _, c := range n.Children {
		if !c.Hidden {
			out = append(out, c)
		}
	}
	return out
}

// flags are n's own flags a user sees (not --help).
func (d *docWriter) flags(n *kong.Node) []*kong.Flag {
	var out []*kong.Flag
	for _, f := range n.Flags {
		if !f.Hidden && f != d.app.HelpFlag {
			out = append(out, f)
		}
	}
	return out
}

// anchor is the GitHub anchor of a command's heading.
func anchor(n *kong.Node) string { return strings.ReplaceAll(n.FullPath(), " ", "-") }

// usage is a command's usage line: its path, required flags, positional
// arguments, and [flags] when it has optional ones.
func (d *docWriter) usage(n *kong.Node) string {
	parts := []string{n.FullPath()}
	optional := false
	for _, f := range d.flags(n) {
		switch {
		case f.Required:
			parts = append(parts, flagUsage(f))
		default:
			optional = true
		}
	}
	for _, p := range n.Positional {
		parts = append(parts, argName(p))
	}
	if optional {
		parts = append(parts, "[flags]")
	}
	return strings.Join(parts, " ")
}

func flagUsage(f *kong.Flag) string {
	name := "--" + f.Name
	if f.Tag != nil && f.Tag.Negatable != "" {
		name = "--[no-]" + f.Name
	}
	if ph := placeholder(f); ph != "" {
		name += "=" + ph
	}
	return name
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	timeType     = reflect.TypeOf(time.Time{})
)

// placeholder is what a flag's value is written as: its placeholder tag,
// its enum values, else a word for its type or its name ("" for a bool).
func placeholder(f *kong.Flag) string {
	if f.IsBool() || f.IsCounter() {
		return ""
	}
	tail := ""
	if f.IsSlice() && f.Tag.Sep != -1 {
		tail = string(f.Tag.Sep) + "..."
	}
	switch {
	case f.PlaceHolder != "":
		return f.PlaceHolder + tail
	case f.Enum != "":
		return strings.Join(f.EnumSlice(), "|") + tail
	}
	switch f.Tag.Type {
	case "existingfile", "path", "filecontent":
		return "FILE" + tail
	case "existingdir":
		return "DIR" + tail
	}
	t := f.Target.Type()
	if f.IsSlice() {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		return "DURATION" + tail
	case t == timeType:
		return "TIME" + tail
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "N" + tail
	}
	return strings.ToUpper(f.Name) + tail
}

// argName is a positional argument as the usage writes it: FILE,
// FILES..., [CAMPAIGN].
func argName(p *kong.Positional) string {
	name := strings.ToUpper(p.Name)
	if p.Tag != nil && p.Tag.PlaceHolder != "" {
		name = p.Tag.PlaceHolder
	}
	if p.IsCumulative() {
		name += "..."
	}
	if !p.Required {
		name = "[" + name + "]"
	}
	return name
}

func positionalTable(args []*kong.Positional) string {
	if len(args) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| argument | what |\n| --- | --- |")
	for _, p := range args {
		what := cell(p.Help)
		if p.Enum != "" {
			what = appendSentence(what, "One of "+codeList(p.EnumSlice())+".")
		}
		if p.HasDefault {
			what = appendSentence(what, "Default "+code(p.Default)+".")
		}
		fmt.Fprintf(&b, "\n| %s | %s |", code(argName(p)), what)
	}
	return b.String()
}

func (d *docWriter) flagTable(n *kong.Node) string {
	flags := d.flags(n)
	if len(flags) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| flag | default | what |\n| --- | --- | --- |")
	for _, f := range flags {
		names := []string{}
		if f.Short != 0 {
			names = append(names, code("-"+string(f.Short)))
		}
		names = append(names, code(flagUsage(f)))
		for _, a := range f.Aliases {
			names = append(names, code("--"+a))
		}
		def := ""
		switch {
		case f.Required:
			def = "required"
		case f.HasDefault:
			def = code(f.Default)
		}
		what := cell(f.Help)
		if len(f.Envs) > 0 {
			what = appendSentence(what, "Environment: "+codeList(f.Envs)+".")
		}
		fmt.Fprintf(&b, "\n| %s | %s | %s |", strings.Join(names, ", "), def, what)
	}
	return b.String()
}

// commandTable lists every command of the binary a user sees, with its
// help, each linked to its section.
func commandTable(root *kong.Node) string {
	leaves := root.Leaves(true)
	if len(leaves) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| command | what |\n| --- | --- |")
	for _, c := range leaves {
		fmt.Fprintf(&b, "\n| [%s](#%s) | %s |", code(c.FullPath()), anchor(c), cell(c.Help))
	}
	return b.String()
}

// code is s as a code span of a table cell ('|' escaped, as GFM reads
// tables before code spans).
func code(s string) string { return "`" + strings.ReplaceAll(s, "|", `\|`) + "`" }

func codeList(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = code(s)
	}
	return strings.Join(out, ", ")
}

// cellEscaper keeps a help text's characters from being read as Markdown
// (emphasis, HTML, a table's column).
var cellEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "<", `\<`, "*", `\*`, "`", "\\`", "\n", " ")

// cell is a help text as one table cell.
func cell(s string) string { return cellEscaper.Replace(strings.TrimSpace(s)) }

func appendSentence(s, sentence string) string {
	if s == "" {
		return sentence
	}
	return s + " " + sentence
}
