package docscheck

// The command lines of shell blocks: which lines are commands, and their
// words as a shell would split them.

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// ShellLangs are the block languages whose lines are shell commands.
var ShellLangs = []string{"sh", "console"}

// Command is one command line of a shell block that runs a program.
type Command struct {
	Where string   // page:line
	Line  string   // the line as written (continuations joined)
	Args  []string // the program's arguments
}

// Commands returns every command line of the pages' shell blocks that runs
// program (capper, segment-builder): lines that start with it, with
// `go run ./cmd/PROGRAM` or `.bin/PROGRAM`, and the same inside $( ) and
// <( ), after a pipe, && or ;. In a block where some lines start with
// "$ ", only those lines are commands (the rest is their output).
// Environment assignments before the program, redirections and comments
// are left out.
func Commands(pages []*Page, program string) ([]Command, error) {
	var out []Command
	var errs []error
	for _, p := range pages {
		for _, b := range p.Blocks {
			if !slices.Contains(ShellLangs, b.Lang) {
				continue
			}
			for _, l := range commandLines(b) {
				where := p.Where(b.Line + l.offset)
				simple, err := splitCommands(l.text)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w: %s", where, err, l.text))
					continue
				}
				for _, words := range simple {
					if args, ok := programArgs(words, program); ok {
						out = append(out, Command{Where: where, Line: l.text, Args: args})
					}
				}
			}
		}
	}
	return out, errors.Join(errs...)
}

type shellLine struct {
	offset int // lines after the fence
	text   string
}

// commandLines joins continued lines (a trailing backslash) and keeps the
// "$ " lines when the block has any.
func commandLines(b Block) []shellLine {
	lines := strings.Split(strings.TrimSuffix(b.Text, "\n"), "\n")
	prompted := false
	for _, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			prompted = true
		}
	}
	var out []shellLine
	for i := 0; i < len(lines); i++ {
		start, text := i, strings.TrimSpace(lines[i])
		if prompted {
			var ok bool
			if text, ok = strings.CutPrefix(text, "$ "); !ok {
				continue
			}
		}
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(text, `\`) + " " + strings.TrimSpace(lines[i])
		}
		out = append(out, shellLine{offset: start + 1, text: text})
	}
	return out
}

var assignRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// programArgs returns the arguments of a simple command that runs program.
func programArgs(words []string, program string) ([]string, bool) {
	for len(words) > 0 && assignRE.MatchString(words[0]) {
		words = words[1:]
	}
	switch {
	case len(words) >= 1 && (words[0] == program || words[0] == ".bin/"+program):
		return words[1:], true
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/"+program:
		return words[3:], true
	}
	return nil, false
}

// splitCommands splits a command line into its simple commands' words,
// as a POSIX shell would: quotes and backslashes, # comments, the
// operators | || && ; & that separate commands, $( ) and <( ) that hold
// one (its place in the outer command is the word "SUBST"), and
// redirections (< > >> 2> and their target), which are left out. A $( )
// inside double quotes is not read: write it unquoted.
func splitCommands(line string) ([][]string, error) {
	s := &shellSplit{line: line}
	for ; s.i < len(line); s.i++ {
		if err := s.step(); err != nil {
			return nil, err
		}
	}
	if len(s.stack) > 0 {
		return nil, errors.New("unbalanced $( or <(")
	}
	s.end()
	return s.out, nil
}

// shellSplit is splitCommands' reading of line, up to byte i.
type shellSplit struct {
	line       string
	i          int
	out        [][]string // the simple commands read
	stack      [][]string // the commands around the $( ) or <( ) being read
	cur        []string   // the words of the command being read
	word       strings.Builder
	in         bool // a word is open (it may be "")
	skipTarget bool // the next word is a redirection's target
}

// flush ends the word being read.
func (s *shellSplit) flush() {
	if s.in {
		s.cur = append(s.cur, s.word.String())
		s.word.Reset()
		s.in = false
	}
}

// end ends the command being read.
func (s *shellSplit) end() {
	s.flush()
	if len(s.cur) > 0 {
		s.out = append(s.out, s.cur)
	}
	s.cur = nil
}

// step reads the byte at i (and what belongs to it), leaving i on the
// last byte read.
func (s *shellSplit) step() error {
	line, c := s.line, s.line[s.i]
	if s.skipTarget && c != ' ' && c != '\t' {
		return s.dropTarget()
	}
	switch {
	case c == ' ' || c == '\t':
		s.flush()
	case c == '#' && !s.in:
		s.i = len(line)
	case c == '\'':
		k := strings.IndexByte(line[s.i+1:], '\'')
		if k < 0 {
			return errors.New("unterminated quote")
		}
		s.word.WriteString(line[s.i+1 : s.i+1+k])
		s.in = true
		s.i += k + 1
	case c == '"':
		return s.doubleQuoted()
	case c == '\\' && s.i+1 < len(line):
		s.word.WriteByte(line[s.i+1])
		s.in = true
		s.i++
	case (c == '$' || c == '<') && s.i+1 < len(line) && line[s.i+1] == '(':
		s.flush()
		s.stack = append(s.stack, append(s.cur, "SUBST"))
		s.cur = nil
		s.i++
	case c == ')':
		if len(s.stack) == 0 {
			return errors.New("unbalanced )")
		}
		s.end()
		s.cur, s.stack = s.stack[len(s.stack)-1], s.stack[:len(s.stack)-1]
	case c == '|' || c == ';' || c == '&':
		s.end()
		if s.i+1 < len(line) && (line[s.i+1] == c) {
			s.i++
		}
	case c == '>' || c == '<':
		s.redirect()
	default:
		s.word.WriteByte(c)
		s.in = true
	}
	return nil
}

// doubleQuoted reads a double-quoted string into the word: a backslash
// escapes " \ $ and ` only.
func (s *shellSplit) doubleQuoted() error {
	line := s.line
	s.in = true
	j := s.i + 1
	for ; j < len(line) && line[j] != '"'; j++ {
		if line[j] == '\\' && j+1 < len(line) && strings.IndexByte("\"\\$`", line[j+1]) >= 0 {
			j++
		}
		s.word.WriteByte(line[j])
	}
	if j == len(line) {
		return errors.New("unterminated quote")
	}
	s.i = j
	return nil
}

// redirect reads a redirection operator (2> included): its target, the
// next word, is dropped, but for >&2.
func (s *shellSplit) redirect() {
	line := s.line
	if s.in && s.word.String() == "2" { // 2>
		s.word.Reset()
		s.in = false
	}
	s.flush()
	if s.i+1 < len(line) && line[s.i+1] == '>' {
		s.i++
	}
	if s.i+1 < len(line) && line[s.i+1] == '&' { // >&2: no target word
		s.i += 2
		return
	}
	s.skipTarget = true
}

// dropTarget reads a redirection's target and drops it.
func (s *shellSplit) dropTarget() error {
	line := s.line
	j := s.i
	for j < len(line) && line[j] != ' ' && line[j] != '\t' && line[j] != ')' && line[j] != ';' && line[j] != '|' && line[j] != '&' {
		if line[j] == '"' || line[j] == '\'' {
			k := strings.IndexByte(line[j+1:], line[j])
			if k < 0 {
				return errors.New("unterminated quote")
			}
			j += k + 1
		}
		j++
	}
	s.i = j - 1
	s.skipTarget = false
	return nil
}

// AnyPath is a kong option for checking command lines without running
// them: arguments of type existingfile are read as plain strings, so the
// files a documented command names need not exist.
func AnyPath() kong.Option {
	reg := kong.NewRegistry().RegisterDefaults()
	plain := kong.MapperFunc(func(ctx *kong.DecodeContext, target reflect.Value) error {
		return reg.ForType(target.Type()).Decode(ctx, target)
	})
	// A slice's elements are decoded with the registry's mapper of the
	// same name: plain too.
	reg.RegisterName("existingfile", plain)
	return kong.NamedMapper("existingfile", plain)
}

// CheckCommands parses every command line of program in the docs under
// root with parse (the program's own grammar, without running it), and
// each of bad, which must fail to parse (so the check can fail); at least
// minimum lines must be found. The programs' tests call it.
func CheckCommands(t testing.TB, root, program string, minimum int, parse func([]string) error, bad []string) {
	t.Helper()
	pages, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := Commands(pages, program)
	if err != nil {
		t.Error(err)
	}
	if len(cmds) < minimum {
		t.Fatalf("found only %d %s command lines in the docs", len(cmds), program)
	}
	for _, c := range cmds {
		if err := parse(c.Args); err != nil {
			t.Errorf("%s: %s: %v", c.Where, c.Line, err)
		}
	}
	for _, b := range bad {
		if err := parse(strings.Fields(b)); err == nil {
			t.Errorf("%s %s parses", program, b)
		}
	}
}
