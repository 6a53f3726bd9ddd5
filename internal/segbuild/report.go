package segbuild

// What a build reports: where rows came from, bad lines, unknown segments and
// users found in two segments, each as a type the CLI can print.

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/capper-dev/capper/internal/clip"
)

// Position is where a row came from.
type Position struct {
	Source string // file, URL or "<stdin>"
	Line   int64  // 1-based; 0 when not known
}

func (p Position) String() string {
	if p.Line <= 0 {
		return p.Source
	}
	return fmt.Sprintf("%s:%d", p.Source, p.Line)
}

// BadLine is a malformed input line.
type BadLine struct {
	At      Position
	Reason  string
	Content string // truncated to about 80 bytes
}

func (l BadLine) String() string { return fmt.Sprintf("%s: %s (line %q)", l.At, l.Reason, l.Content) }

// Redacted is String without the line's content or any part of it quoted in
// the reason (e.g. the user id field that did not parse): for logs above
// debug, which never name a user.
func (l BadLine) Redacted() string {
	return l.At.String() + ": " + quotedRE.ReplaceAllString(l.Reason, `"…"`)
}

var quotedRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`) // a Go-quoted string

// BadInputError fails a build with more malformed lines than MaxErrors.
type BadInputError struct {
	MaxErrors int
	Lines     []BadLine // every bad line seen, the last one over the limit
}

func (e *BadInputError) Error() string { return e.text(BadLine.String) }

// Redacted is Error without the lines' contents.
func (e *BadInputError) Redacted() string { return e.text(BadLine.Redacted) }

func (e *BadInputError) text(line func(BadLine) string) string {
	if e.MaxErrors == 0 && len(e.Lines) == 1 {
		return "malformed line: " + line(e.Lines[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "more than %d malformed lines:", e.MaxErrors)
	for _, l := range e.Lines {
		b.WriteString("\n  " + line(l))
	}
	return b.String()
}

// UnknownSegmentError is a segment name outside BuilderOptions.Segments.
type UnknownSegmentError struct {
	Name  string
	At    Position
	Known []string
}

func (e *UnknownSegmentError) Error() string {
	return fmt.Sprintf("%s: unknown segment %q (the config's segments are: %s)", e.At, clip.String(e.Name, 80), strings.Join(e.Known, ", "))
}

// Conflict is a user found in two segments.
type Conflict struct {
	UserID   uint64
	First    string   // the segment the user was first seen in
	FirstAt  Position // Line 0: not known (see FirstNote)
	Second   string
	SecondAt Position
	// FirstNote explains a missing FirstAt line, e.g. stdin cannot be re-read.
	FirstNote string
}

func (c Conflict) String() string { return fmt.Sprintf("user %d: %s", c.UserID, c.Redacted()) }

// Redacted is String without the user id: the two rows' segments and places.
func (c Conflict) Redacted() string {
	first := c.FirstAt.String()
	if c.FirstNote != "" {
		first += " (" + c.FirstNote + ")"
	}
	return fmt.Sprintf("%q at %s and %q at %s", c.First, first, c.Second, c.SecondAt)
}

// ConflictsError fails a build (ConflictError policy) in which some users are
// in two or more segments.
type ConflictsError struct {
	Users   uint64     // how many users are in more than one segment
	Samples []Conflict // the first MaxConflictSamples of them
}

func (e *ConflictsError) Error() string { return e.text(Conflict.String) }

// Redacted is Error without the user ids.
func (e *ConflictsError) Redacted() string { return e.text(Conflict.Redacted) }

func (e *ConflictsError) text(conflict func(Conflict) string) string {
	var b strings.Builder
	if e.Users == 1 {
		b.WriteString("1 user is")
	} else {
		fmt.Fprintf(&b, "%d users are", e.Users)
	}
	b.WriteString(" in more than one segment (segments must be mutually exclusive; the priority policy keeps the segment that comes first in the config)")
	if uint64(len(e.Samples)) < e.Users {
		fmt.Fprintf(&b, "; the first %d:", len(e.Samples))
	} else {
		b.WriteString(":")
	}
	for _, c := range e.Samples {
		b.WriteString("\n  " + conflict(c))
	}
	return b.String()
}
