package main

// How a failed or lossy build is logged: no user id above debug. Conflicts
// and malformed lines are named by where they are (file:line), which is
// enough to find them; their user ids and contents are logged at debug.

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/capper-dev/capper/internal/segbuild"
)

// logFailure logs the error that failed the command.
func logFailure(log *slog.Logger, err error) {
	msg, detail := err.Error(), []string(nil)
	var conflicts *segbuild.ConflictsError
	var bad *segbuild.BadInputError
	switch {
	case errors.As(err, &conflicts):
		msg = strings.Replace(msg, conflicts.Error(), redactConflicts(conflicts), 1)
		for _, c := range conflicts.Samples {
			detail = append(detail, c.String())
		}
	case errors.As(err, &bad):
		msg = strings.Replace(msg, bad.Error(), redactBadInput(bad), 1)
		for _, l := range bad.Lines {
			detail = append(detail, l.String())
		}
	}
	log.Error("segment-builder failed", "error", msg)
	if len(detail) > 0 {
		log.Debug("segment-builder failed: the rows in full", "rows", detail)
	}
}

// logSkipped logs the malformed lines a build tolerated (--max-errors).
func logSkipped(log *slog.Logger, lines []segbuild.BadLine, maxErrors int) {
	safe := make([]string, len(lines))
	full := make([]string, len(lines))
	for i, l := range lines {
		safe[i], full[i] = redactBadLine(l), l.String()
	}
	log.Warn(fmt.Sprintf("skipped %d malformed lines (--max-errors=%d)", len(lines), maxErrors), "lines", safe)
	log.Debug("skipped malformed lines in full", "lines", full)
}

// redactConflicts is ConflictsError.Error without the user ids.
func redactConflicts(e *segbuild.ConflictsError) string {
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
		first := c.FirstAt.String()
		if c.FirstNote != "" {
			first += " (" + c.FirstNote + ")"
		}
		fmt.Fprintf(&b, "\n  %q at %s and %q at %s", c.First, first, c.Second, c.SecondAt)
	}
	return b.String()
}

// redactBadInput is BadInputError.Error without the lines' contents.
func redactBadInput(e *segbuild.BadInputError) string {
	if e.MaxErrors == 0 && len(e.Lines) == 1 {
		return "malformed line: " + redactBadLine(e.Lines[0])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "more than %d malformed lines:", e.MaxErrors)
	for _, l := range e.Lines {
		b.WriteString("\n  " + redactBadLine(l))
	}
	return b.String()
}

// redactBadLine is BadLine.String without the line's content, or any part
// of it quoted in the reason (e.g. the user id field that did not parse).
func redactBadLine(l segbuild.BadLine) string {
	quoted := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`) // a Go-quoted string
	return l.At.String() + ": " + quoted.ReplaceAllString(l.Reason, `"…"`)
}
